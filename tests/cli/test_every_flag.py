"""Every flag of every subcommand either acts or is refused with a reason.

The walk, per subcommand and flag:
1. the flag, given a value other than its default, reaches the dataclass the command runs with (the real parser);
2. the value is read by the code that runs the command (its modules, or for `TrainingArguments` flags of `prune` the
   stock `Trainer`), or the flag is refused with its reason before anything is loaded.

A flag that parses but that nothing reads changes nothing: the walk fails on it. (`--eval_split` on a single file was
read yet ignored; behaviour tests of such flags are in test_workflows.py.)
"""

from __future__ import annotations

import dataclasses
import re
import typing
from pathlib import Path

import pytest

import hf_heuristic_core
from hf_heuristic_core.cli import SUBCOMMANDS
from hf_heuristic_core.errors import UsageError

PACKAGE = Path(hf_heuristic_core.__file__).parent


def _source(*patterns: str) -> str:
    return "\n".join(path.read_text() for pattern in patterns for path in sorted(PACKAGE.glob(pattern)))


def _specs():
    """Per subcommand: (dataclasses, consumer sources, required argv, how to parse)."""
    from transformers import HfArgumentParser

    from hf_heuristic_core.cli import parse_study_arguments
    from hf_heuristic_core.cli.analyze import AnalyzeArguments, parse_analyze_args
    from hf_heuristic_core.cli.circuit import CircuitArguments, parse_circuit_args
    from hf_heuristic_core.cli.effective_size import EffectiveSizeArguments
    from hf_heuristic_core.cli.export import ExportScriptArguments
    from hf_heuristic_core.cli.finetune import FinetuneScriptArguments, parse_finetune_arguments
    from hf_heuristic_core.cli.induce import InductionArguments
    from hf_heuristic_core.cli.prune import PruneScriptArguments, parse_prune_arguments
    from hf_heuristic_core.cli.subtasks import SubtasksArguments
    from hf_heuristic_core.study.run import StudyArguments
    from hf_heuristic_core.training.arguments import PruningArguments
    from transformers import TrainingArguments

    def plain(dataclass_type):
        return lambda argv: HfArgumentParser(dataclass_type).parse_args_into_dataclasses(args=argv)

    return {
        "prune": ((PruneScriptArguments, PruningArguments),
                  # The settings flags are generated from the relaxations' and granularities' settings dataclasses and
                  # passed whole to PruningConfig, whose relaxation or granularity reads them.
                  _source("cli/prune.py", "cli/prune_data.py", "cli/checks.py", "training/*.py",
                          "relaxations/*/relaxation.py", "granularity/*/granularity.py", "model.py",
                          # a settings class may turn its field into what the model reads (logits_storage_dtype)
                          "granularity/*/settings.py"),
                  ["--model", "{model}", "--dataset", "d.jsonl", "--output_dir", "out"], parse_prune_arguments),
        "finetune": ((FinetuneScriptArguments, TrainingArguments),
                     _source("cli/finetune.py", "cli/prune_data.py", "cli/checks.py", "finetuning.py"),
                     ["--model", "{model}", "--dataset", "d.jsonl", "--output_dir", "out"], parse_finetune_arguments),
        "export": ((ExportScriptArguments,), _source("cli/export.py", "cli/export_checks.py"),
                   ["--model", "m", "--masks", "k", "--output_dir", "o"], plain(ExportScriptArguments)),
        "subtasks": ((SubtasksArguments,), _source("cli/subtasks.py"), ["--masks", "a", "b", "--output_dir", "o"],
                     plain(SubtasksArguments)),
        "analyze": ((AnalyzeArguments,), _source("cli/analyze.py"), ["runs"], lambda a: (parse_analyze_args(a),)),
        "study": ((StudyArguments,), _source("study/*.py", "cli/__init__.py"), [],
                  lambda a: (parse_study_arguments(a),)),
        "effective-size": ((EffectiveSizeArguments,), _source("cli/effective_size.py"), ["--output_dir", "run"],
                           plain(EffectiveSizeArguments)),
        "induce": ((InductionArguments,), _source("cli/induce.py", "induction/*.py"), ["--arithmetic"],
                   plain(InductionArguments)),
        "circuit": ((CircuitArguments,), _source("cli/circuit.py", "circuits/*.py"), ["export"],
                    lambda a: (parse_circuit_args(a),)),
    }


# Values for flags whose type alone does not give a valid non-default value.
VALUES = {
    "task": ("causal_lm", "causal_lm"), "ablation": ("zero", "zero"), "granularity": ("weight", "weight"),
    "relaxation": ("gumbel_sigmoid", "gumbel_sigmoid"), "target_modules": ("query", "query"),
    "layers_to_transform": ("0", "0"), "logits_dtype": ("bfloat16", "bfloat16"), "recipe": ("paper", "paper"),
    "limit_right": ("1.2", 1.2), "limit_left": ("-0.2", -0.2), "eps": ("0.001", 0.001),
    "cs_beta_max": ("100", 100.0),
    "target_sparsity": ("0.3", 0.3), "start_sparsity": ("0.1", 0.1), "sparsity_schedule": ("log", "log"),
    "sparsity_penalty": ("sampled", "sampled"), "teacher": ("cached", "cached"),
    "final_binarization": ("threshold", "threshold"), "objective": ("task", "task"),
    "sparsity_control": ("penalty", "penalty"), "final_threshold": ("0.4", 0.4),
    "teacher_cache_dtype": ("bfloat16", "bfloat16"), "eval_fraction": ("0.2", 0.2),
    "lr_scheduler_type": ("constant", "constant"), "save_strategy": ("epoch", "epoch"),
    "logging_strategy": ("epoch", "epoch"), "hub_strategy": ("end", "end"),
    "report_to": ("tensorboard", ["tensorboard"]),
    "log_level": ("info", "info"), "log_level_replica": ("info", "info"), "debug": ("underflow_overflow", None),
    "optim": ("sgd", None), "fsdp": ("full_shard", None), "train_sampling_strategy": ("sequential", "sequential"),
"torch_compile_backend": ("eager", "eager"), "torch_compile_mode": ("default", "default"),
    "finetune": ("never", "never"), "device": ("cpu", "cpu"), "pruning_recipe": ("paper", "paper"),
    "effective_size_strategy": ("grid", "grid"), "strategy": ("grid", "grid"), "ablation_mode": ("zero", "zero"),
    "sparsities": ("0.5", "0.5"), "effective_size_sparsities": ("0.5", "0.5"), "seeds": ("5", "5"),
    "effective_size_seeds": ("5", "5"), "ks": ("7", "7"), "arms": ("scratch", "scratch"),
    "core_sparsity": ("0.5", 0.5), "runs_dir": ("runs2", "runs2"), "model": ("m2", "m2"),
    "accelerator_config": ('{"split_batches": true}', None), "fsdp_config": ('{"min_num_params": 1}', None),
    "deepspeed": ("ds.json", None), "lr_scheduler_kwargs": ('{"a": 1}', None), "optim_args": ("a=1", None),
    "liger_kernel_config": ('{"a": 1}', None), "activation_checkpointing_kwargs": ('{"a": 1}', None),
    "gradient_checkpointing_kwargs": ('{"a": 1}', None), "parallelism_config": ("x", None),
    "dataloader_prefetch_factor": ("2", 2), "dataloader_multiprocessing_context": ("spawn", "spawn"),
    "logging_steps": ("250", 250), "save_steps": ("250", 250), "modulus": ("5", 5), "num_tokens": ("30", 30),
    "warmup_steps": ("7", 7), "label_names": ("x", ["x"]),
    "mask_target_modules": ("wte", "wte"), "action": ("attribute", "attribute"),
    "method": ("patching", "patching"), "sizes": ("curve", "curve"), "edges": ("none", "none"),
    "write": ("importances", "importances"), "name": ("ioi_gpt2", "ioi_gpt2"), "level": ("node", "node"),
    "random_seeds": ("4,5", "4,5"), "teacher_logits_dtype": ("bfloat16", "bfloat16"), "config": (None, None),
    "tf32": ("true", True), "optim_target_modules": ("x", None), "eval_strategy": ("steps", "steps"),
}
# Flags whose value cannot be parsed here, and why (they are still checked for being read).
NOT_PARSED_HERE = {"deepspeed": "TrainingArguments loads the deepspeed package to parse it (not installed)",
                   "fsdp": "TrainingArguments needs accelerate's FSDP plugin and a GPU to parse it",
                   "fsdp_config": "TrainingArguments needs accelerate's FSDP plugin and a GPU to parse it",
                   "parallelism_config": "needs a ParallelismConfig object, not a command-line value",
                   "tf32": "TrainingArguments checks for an Ampere GPU when parsing it",
                   "ddp_backend": "TrainingArguments starts torch.distributed when parsing it",
                   "liger_kernel_config": "typed dict only: HfArgumentParser cannot parse it from any command line"}
# Flags that are only valid together with another one.
COMPANIONS = {"bf16": ["--use_cpu", "true"], "dataloader_prefetch_factor": ["--dataloader_num_workers", "1"],
              "bf16_full_eval": ["--use_cpu", "true"], "load_best_model_at_end": ["--eval_strategy", "steps"],
              # A method's settings are refused for another method (they would change nothing); prune builds and
              # checks its PruningConfig before it loads anything.
              **dict.fromkeys(("target_modules", "layers_to_transform", "mask_bias", "logits_dtype"),
                              ["--granularity", "weight"]),
              **dict.fromkeys(("cs_init", "cs_beta", "cs_beta_max"), ["--relaxation", "continuous_sparsification"]),
              **dict.fromkeys(("gumbel_init_prob", "gumbel_tau"), ["--relaxation", "gumbel_sigmoid"]),
              # Binary circuits need their edges: an importance file alone may go without.
              "edges": ["--write", "importances"]}
# TrainingArguments flags the stock Trainer reads only inside TrainingArguments itself (derived settings).
READ_BY_TRAINING_ARGUMENTS = {"logging_steps", "save_steps", "eval_steps", "use_cpu", "log_level", "log_level_replica",
                              "log_on_each_node", "ddp_backend", "ddp_timeout", "tf32", "gradient_checkpointing",
                              "per_device_eval_batch_size", "local_rank", "gradient_checkpointing_kwargs"}


def _annotation(dataclass_type: type, name: str) -> typing.Any:
    """The field's annotation as written (HfArgumentParser rewrites `Field.type` in place, e.g. `str | bool` to
    `bool`, so the class annotations are read instead)."""
    for cls in dataclass_type.__mro__:
        annotations = cls.__dict__.get("__annotations__", {})
        if name in annotations:
            return annotations[name]
    return None


def _value(field: dataclasses.Field, annotation: typing.Any = None) -> tuple[str | None, typing.Any]:
    """(argv text, expected parsed value); expected None means 'not comparable, only must parse'."""
    default = field.default if field.default is not dataclasses.MISSING else None
    annotation = field.type if annotation is None else annotation
    kind = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
    kind = str(kind).replace("typing.", "").replace("Optional[bool]", "bool | None")
    if kind in ("bool", "bool | None"):
        return ("false", False) if default else ("true", True)
    if "bool" in {part.strip() for part in kind.split("|")}:   # `str | bool` switches parse as booleans
        return ("true", None)
    if field.name in VALUES:
        return VALUES[field.name]
    if kind.startswith("list") or "list[" in kind:
        return ("x", ["x"])
    if "int" in kind and "float" not in kind:
        return (str((default or 0) + 3), (default or 0) + 3)
    if "float" in kind:
        value = round((default or 1.0) * 0.5 + 0.01, 4)
        return (str(value), value)
    return ("x", "x")


def _training_reads() -> str:
    import importlib.util
    root = Path(importlib.util.find_spec("transformers").submodule_search_locations[0])
    files = [root / name for name in ("trainer.py", "trainer_callback.py", "trainer_utils.py", "trainer_pt_utils.py",
                                       "trainer_optimizer.py")]
    return "\n".join(f.read_text() for f in files if f.is_file()) + \
        "\n".join(f.read_text() for f in sorted((root / "integrations").glob("*.py")))


def test_every_subcommand_is_walked():
    assert set(_specs()) == set(SUBCOMMANDS), "add the new subcommand's flags to this walk"


@pytest.mark.parametrize("command", sorted(SUBCOMMANDS))
def test_every_flag_reaches_its_dataclass_and_acts_or_is_refused(command, tmp_path, monkeypatch):
    from hf_heuristic_core.cli.finetune import REFUSED_FLAGS as FINETUNE_REFUSED
    from hf_heuristic_core.cli.prune import REFUSED_FLAGS as PRUNE_REFUSED
    refused = {"prune": PRUNE_REFUSED, "finetune": FINETUNE_REFUSED}.get(command, {})
    trains = command in ("prune", "finetune")   # commands that take every TrainingArguments flag
    monkeypatch.chdir(tmp_path)
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    (tmp_path / "model" / "x").write_text("")   # --gguf_file x
    types, source, required, parse = _specs()[command]
    required = [a.replace("{model}", str(tmp_path / "model")) for a in required]
    trainer_source = _training_reads() if trains else ""
    from transformers import TrainingArguments
    training_fields = {f.name for f in dataclasses.fields(TrainingArguments)}
    # Flags the package defines (all of them, but for prune the TrainingArguments ones, which the Trainer reads).
    own = {f.name for t in types for f in dataclasses.fields(t)}
    if trains:
        own -= training_fields
    silent, unparsed = [], []
    for dataclass_type in types:
        for field in dataclasses.fields(dataclass_type):
            if not field.init or field.name in ("config",):
                continue
            if field.name in refused:
                with pytest.raises(UsageError, match=re.escape(f"--{field.name} is not used by {command}")):
                    parse([*required, f"--{field.name}", "1"])
                continue
            text, expected = _value(field, _annotation(dataclass_type, field.name))
            argv = [*required, f"--{field.name}", text, *COMPANIONS.get(field.name, [])]
            if field.name in {"runs_dir"} and command == "analyze":
                argv = [f"--{field.name}", text]
            if field.name == "output_dir" and "--output_dir" in required:
                argv = [a for a in required] + []
                argv[argv.index("--output_dir") + 1] = text
            if field.name == "model" and trains:
                continue   # required and checked above (a missing folder is refused, see test_workflows)
            if field.name in NOT_PARSED_HERE:
                parsed = None
            else:
                try:
                    parsed = parse(argv)
                except (UsageError, ValueError, SystemExit) as err:
                    unparsed.append(f"--{field.name} {text}: {err}")
                    continue
            if parsed is not None:
                holder = next(p for p in parsed if any(f.name == field.name for f in dataclasses.fields(p)))
                if expected is not None:
                    got = getattr(holder, field.name)
                    got = [getattr(v, "value", v) for v in got] if isinstance(got, list) else \
                        getattr(got, "value", got)
                    assert got == expected, f"--{field.name} {text} parsed to {got!r}"
            read = re.search(rf"\.{field.name}\b", source) is not None
            if field.name not in own:   # a TrainingArguments flag: the stock Trainer (or TrainingArguments) reads it
                read = read or re.search(rf"args\.{field.name}\b", trainer_source) is not None \
                    or field.name in READ_BY_TRAINING_ARGUMENTS
            if not read:
                silent.append(f"--{field.name}")
    assert not unparsed, f"{command}: flags that do not parse with a valid value: {unparsed}"
    assert not silent, f"{command}: flags that nothing reads (they change nothing): {silent}"
