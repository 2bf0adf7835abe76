"""`prune`'s granularity and relaxation flags are generated from the settings dataclasses (`cli.settings_flags`): a
field added to a settings class is a flag without an edit in `cli/prune.py`, and `--help` lists what it did before."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from hf_heuristic_core import PruningConfig
from hf_heuristic_core.cli.help import render_help
from hf_heuristic_core.cli.prune import (
    SETTINGS_FLAGS,
    PruneScriptArguments,
    parse_prune_arguments,
    prune_help,
    selection_settings,
)
from hf_heuristic_core.cli.settings_flags import flag_values, settings_flags, settings_flags_dataclass
from hf_heuristic_core.config import registered_settings_classes
from hf_heuristic_core.errors import UsageError
from hf_heuristic_core.granularity.unit import UnitSettings
from hf_heuristic_core.relaxations.hard_concrete import HardConcreteSettings

# `prune --help`'s flags on main before the flags were generated (captured with `_listed(prune_help())`).
HELP_FLAGS_BEFORE = {
    "--ablation", "--adam_beta1", "--adam_beta2", "--adam_epsilon", "--bf16", "--convergence_batches",
    "--convergence_check", "--convergence_subnetworks", "--dataset", "--dataset_config", "--disable_tqdm",
    "--eval_fraction", "--eval_split", "--final_binarization", "--final_threshold", "--gguf_file",
    "--gradient_accumulation_steps", "--granularity", "--init_mean", "--keep_dropout", "--kl_chunk_size",
    "--kl_temperature", "--layers_to_transform", "--logging_steps", "--logits_dtype", "--lr_scheduler_type",
    "--mask_bias", "--mask_learning_rate", "--max_grad_norm", "--max_length", "--max_steps", "--max_train_examples",
    "--means_examples", "--model", "--model_revision", "--num_train_epochs", "--objective", "--output_dir",
    "--overwrite_output_dir", "--penalty_weight", "--per_device_eval_batch_size", "--per_device_train_batch_size",
    "--prune_heads", "--prune_mlps", "--recipe", "--reg_learning_rate", "--relaxation", "--remove_unused_columns",
    "--report_to", "--resume_from_checkpoint", "--save_steps", "--save_strategy", "--save_total_limit", "--seed",
    "--sparsity_control", "--sparsity_penalty", "--sparsity_schedule", "--sparsity_warmup_steps", "--start_sparsity",
    "--target_modules", "--target_sparsity", "--task", "--teacher", "--teacher_cache_dtype", "--teacher_cache_max_gb",
    "--teacher_cache_topk", "--teacher_logits_dtype", "--text_columns", "--train_split", "--uniform_layers",
    "--use_cpu", "--warm_start_scores", "--warm_start_spread", "--warmup_steps"}
# The flags that used to be written by hand in cli/prune.py, with their defaults then.
HAND_WRITTEN_DEFAULTS = {"prune_heads": True, "prune_mlps": True, "target_modules": None, "layers_to_transform": None,
                         "mask_bias": False, "logits_dtype": "float32", "init_mean": None}


def _listed(text: str) -> set[str]:
    return {line.split()[0] for line in text.splitlines() if line.startswith("  --")}


@pytest.fixture
def required(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    return ["--model", str(tmp_path / "model"), "--dataset", "d.jsonl", "--output_dir", str(tmp_path / "out")]


def test_help_lists_the_same_flags_as_before_and_help_all_every_settings_field():
    assert _listed(prune_help()) == HELP_FLAGS_BEFORE
    every = _listed(prune_help(everything=True))
    names = {f.name for cls in registered_settings_classes() for f in dataclasses.fields(cls)}
    assert {f.name for f in SETTINGS_FLAGS} == names
    assert {f"--{name}" for name in names} <= every
    # The constants --help leaves out are named in its epilog.
    assert "--gumbel_tau" in prune_help() and "--gumbel_tau" not in _listed(prune_help())


def test_the_hand_written_flags_keep_their_names_defaults_and_types():
    defaults = {f.name: f.default for f in dataclasses.fields(PruneScriptArguments)}
    assert {name: defaults[name] for name in HAND_WRITTEN_DEFAULTS} == HAND_WRITTEN_DEFAULTS
    # Every relaxation constant is unset by default (the recipe's or PruningConfig's value is used).
    assert defaults["temperature"] is None and defaults["cs_init"] is None and defaults["gumbel_tau"] is None


def test_defaults_give_the_same_pruning_config_as_before(required):
    script, _ = parse_prune_arguments(required)
    assert PruningConfig(**selection_settings(script)) == PruningConfig()
    weight, _ = parse_prune_arguments([*required, "--granularity", "weight", "--target_modules", "query, value",
                                       "--layers_to_transform", "0,2-3", "--mask_bias", "true"])
    config = PruningConfig(**selection_settings(weight))
    assert (config.target_modules, config.layers_to_transform, config.mask_bias) == (["query", "value"],
                                                                                     [0, 2, 3], True)


@pytest.mark.parametrize(("argv", "field", "value"), [
    (["--init_mean", "3"], "init_mean", 3.0),
    (["--temperature", "0.5"], "temperature", 0.5),
    (["--relaxation", "gumbel_sigmoid", "--gumbel_tau", "0.5"], "gumbel_tau", 0.5),
    (["--relaxation", "continuous_sparsification", "--cs_beta_max", "100"], "cs_beta_max", 100.0),
])
def test_a_relaxation_flag_reaches_pruning_config(required, argv, field, value):
    script, _ = parse_prune_arguments([*required, *argv])
    config = PruningConfig(**selection_settings(script))
    assert getattr(config, field) == value and getattr(config.relaxation_settings, field) == value


@pytest.mark.parametrize(("argv", "message"), [
    (["--gumbel_tau", "0.5"], ("--gumbel_tau is a setting of GumbelSigmoidSettings, which --relaxation "
                               "hard_concrete does not read")),
    (["--init_mean", "nan"], "--init_mean nan must be a finite number"),
    (["--layers_to_transform", "1,x"], "--layers_to_transform: 'x' is not a layer index"),
])
def test_bad_settings_flags_are_refused_naming_the_flag(required, argv, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(")):
        parse_prune_arguments([*required, *argv])


@dataclasses.dataclass(kw_only=True)
class _NewKnobSettings(HardConcreteSettings):
    new_knob: float = dataclasses.field(default=0.25, metadata={"help": "A knob added to the settings."})


def test_a_field_added_to_a_settings_class_becomes_a_flag():
    from transformers import HfArgumentParser
    flags = settings_flags((UnitSettings, _NewKnobSettings))
    flags_class = settings_flags_dataclass(flags)
    (parsed,) = HfArgumentParser(flags_class).parse_args_into_dataclasses(args=["--new_knob", "0.5"])
    assert flag_values(parsed, flags) == {"prune_heads": True, "prune_mlps": True, "new_knob": 0.5}
    (unset,) = HfArgumentParser(flags_class).parse_args_into_dataclasses(args=[])
    assert "new_knob" not in flag_values(unset, flags)
    text = render_help("p", "d", [("settings", flags_class, None)])
    assert "--new_knob FLOAT" in text and "A knob added to the settings. Unset: 0.25." in " ".join(text.split())


@dataclasses.dataclass(kw_only=True)
class _ToyWidthSettings(UnitSettings):
    toy_width: int = dataclasses.field(default=3, metadata={"help": "Toy width."})


def test_a_method_registered_after_import_gets_its_prune_flags(required):
    """A granularity registered from outside, after `cli.prune` was imported, gives `prune` a flag per setting that
    parses and reaches the chosen method's settings; nothing in cli/prune.py names it."""
    from hf_heuristic_core.cli.prune import pruning_config_from_flags
    from hf_heuristic_core.granularity import get_granularity, register_granularity, unregister_granularity

    class ToyGranularity(get_granularity("unit")):
        settings_class = _ToyWidthSettings

    register_granularity("toy_width_unit", ToyGranularity)
    try:
        script, _ = parse_prune_arguments([*required, "--granularity", "toy_width_unit", "--toy_width", "5",
                                           "--prune_mlps", "false"])
        assert script.toy_width == 5
        assert selection_settings(script)["granularity_settings"] == {"prune_heads": True, "prune_mlps": False,
                                                                      "toy_width": 5}
        config = pruning_config_from_flags(script)
        assert config.granularity == "toy_width_unit"
        assert config.granularity_settings == _ToyWidthSettings(prune_mlps=False, toy_width=5)
        assert "--toy_width" in prune_help() and "--toy_width" in prune_help(everything=True)
        # Given for another granularity, the flag is refused, naming the one that reads it.
        with pytest.raises(UsageError, match=r"--toy_width=7 is a setting of the 'toy_width_unit' granularity"):
            parse_prune_arguments([*required, "--toy_width", "7"])
    finally:
        unregister_granularity("toy_width_unit")
    assert "toy_width" not in _listed(prune_help())
    assert "toy_width" not in Path(sys.modules[PruneScriptArguments.__module__].__file__).read_text()
