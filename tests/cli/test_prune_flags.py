"""`prune --help` lists the pruning flags first and only the training-loop flags that apply; `--help-all` lists every
`TrainingArguments` flag; `--init_mean` (a README short-run setting) reaches the mask init."""

from __future__ import annotations

import dataclasses
import json

import pytest

from hf_heuristic_core.cli import main
from hf_heuristic_core.cli.prune import REFUSED_FLAGS, TrainingLoopFlags
from hf_heuristic_core.training.fields import PruningFields


def _option_lines(text: str) -> list[str]:
    return [line.split()[0] for line in text.splitlines() if line.startswith("  --")]


def test_help_lists_pruning_flags_first_and_hides_inapplicable_training_flags(capsys):
    assert main(["prune", "--help"]) == 0
    text = capsys.readouterr().out
    options = _option_lines(text)
    assert options[:2] == ["--model", "--dataset"]
    mask_start = options.index("--recipe")
    assert options.index("--init_mean") < mask_start < options.index("--target_sparsity") < options.index(
        "--max_steps")
    for name in ("learning_rate", "weight_decay", "optim", "eval_strategy", "push_to_hub", "deepspeed"):
        assert f"--{name}" not in options
    assert "Refused (the mask optimizer ignores them, or they would change nothing in a pruning run; --help-all says " \
           "why): --learning_rate" in " ".join(text.split())
    assert len(text.splitlines()) < 265   # was 768 lines with every TrainingArguments field


def test_help_all_lists_every_training_argument(capsys):
    assert main(["prune", "--help-all"]) == 0
    text = capsys.readouterr().out
    assert "--learning_rate" in text and "--push_to_hub" in text and "--mask_learning_rate" in text
    assert len(text.splitlines()) > 500


def test_help_sections_cover_every_mask_field_and_the_curated_training_defaults_are_transformers():
    from transformers import TrainingArguments

    from hf_heuristic_core.training.arguments import PruningArguments
    reference = {f.name: f for f in dataclasses.fields(TrainingArguments)}
    pruning = {f.name: f for f in dataclasses.fields(PruningArguments)}
    for item in dataclasses.fields(TrainingLoopFlags):
        assert item.name in reference, item.name
        assert item.default == reference[item.name].default, item.name
    for item in dataclasses.fields(PruningFields):
        assert pruning[item.name].default == item.default, item.name   # PruningFields win over TrainingArguments
    assert pruning["warmup_steps"].default == 200 and pruning["remove_unused_columns"].default is True
    assert set(REFUSED_FLAGS) <= set(reference)


@pytest.mark.parametrize("dashes", [False, True])
def test_init_mean_flag_reaches_the_mask_init(minilm_dir, tmp_path, capsys, dashes):
    """The logits start at N(init_mean, 0.01): after one step at mask lr 1e-9 they are still init_mean."""
    import torch
    import transformers
    from safetensors.torch import load_file
    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    config = transformers.BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_attention_heads=4,
                                     num_hidden_layers=2, intermediate_size=37, max_position_embeddings=64,
                                     num_labels=2)
    torch.manual_seed(0)
    transformers.BertForSequenceClassification(config).save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    (tmp_path / "train.jsonl").write_text('{"premise": "a b c", "hypothesis": "a b", "label": 0}\n' * 8)
    flag = (lambda name: "--" + name.replace("_", "-")) if dashes else (lambda name: "--" + name)
    argv = ["prune", flag("model"), str(tmp_path / "model"), flag("dataset"), str(tmp_path / "train.jsonl"),
            flag("output_dir"), str(tmp_path / "out"), flag("max_steps"), "1", flag("init_mean"), "2.5",
            flag("mask_learning_rate"), "1e-9", flag("convergence_check"), "false", flag("target_sparsity"), "0.25",
            "--report_to", "none", "--use_cpu", "--disable_tqdm", "true", "--save_strategy", "no",
            flag("means_examples"), "8", flag("max_length"), "16"]
    assert main(argv) == 0, capsys.readouterr().err
    tensors = load_file(str(tmp_path / "out" / "masks.safetensors"))
    logits = [v for k, v in tensors.items() if "logit" in k]
    assert logits, sorted(tensors)
    flat = torch.cat([t.flatten() for t in logits])
    assert torch.allclose(flat, torch.full_like(flat, 2.5), atol=0.05), flat
    saved = json.loads((tmp_path / "out" / "pruning_config.json").read_text())
    assert json.dumps(saved).count("2.5") >= 1


def _flag_help(text: str, flag: str) -> str:
    """The help of `--flag`, its wrapped lines joined."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"  --{flag} "))
    end = next(i for i in range(start + 1, len(lines)) if not lines[i].startswith(" " * 10))
    return " ".join(line.strip() for line in lines[start:end])


def test_method_selector_choices_come_from_the_registries(capsys):
    """`--granularity` and `--relaxation` list what is registered when help is drawn (they were hand-written), so a
    method registered from outside shows up in `prune --help` and `--help-all`."""
    from hf_heuristic_core.granularity import GRANULARITIES, GRANULARITY_SETTINGS, register_granularity
    from hf_heuristic_core.granularity.base import Granularity
    from hf_heuristic_core.relaxations import RELAXATIONS, RELAXATION_SETTINGS, register_relaxation

    class ToyGranularity(Granularity):
        name = "toy_blocks"

    class ToyRelaxation:
        name = "toy_relax"

    assert main(["prune", "--help"]) == 0
    before = capsys.readouterr().out
    assert "One of: edge, neuron, unit, weight." in _flag_help(before, "granularity")
    assert "One of: continuous_sparsification, gumbel_sigmoid, hard_concrete." in _flag_help(before, "relaxation")
    register_granularity("toy_blocks", ToyGranularity)
    register_relaxation("toy_relax", ToyRelaxation)
    try:
        for flags in (["prune", "--help"], ["prune", "--help-all"]):
            assert main(flags) == 0
            text = capsys.readouterr().out
            assert "One of: edge, neuron, toy_blocks, unit, weight." in _flag_help(text, "granularity")
            assert "gumbel_sigmoid, hard_concrete, toy_relax." in _flag_help(text, "relaxation")
    finally:
        for registry in (GRANULARITIES, GRANULARITY_SETTINGS):
            registry._entries.pop("toy_blocks", None)
        for registry in (RELAXATIONS, RELAXATION_SETTINGS):
            registry._entries.pop("toy_relax", None)
