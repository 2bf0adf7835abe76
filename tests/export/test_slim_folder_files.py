"""A slim folder is an ordinary model folder: the umask's permissions (not the temp folder's 0700 / 0600), the source
model's tokenizer and generation config, so `transformers.pipeline(task, model=folder)` works on it; and an export
that cannot shrink the model says so and why."""

from __future__ import annotations

import contextlib
import os
import stat

import pytest
import torch
import transformers
from tiny_models import one_torch_thread, tiny_model  # noqa: F401

from hf_heuristic_core import PrunableModel, PruningConfig
from hf_heuristic_core.cli import main
from hf_heuristic_core.export import save_slim

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@contextlib.contextmanager
def umask(value: int):
    previous = os.umask(value)
    try:
        yield
    finally:
        os.umask(previous)


def _modes(folder) -> dict[str, int]:
    return {p.name: stat.S_IMODE(p.stat().st_mode) for p in [folder, *folder.iterdir()]}


@pytest.fixture(scope="module")
def source(tmp_path_factory, minilm_dir):
    """A tiny BERT classifier saved with the real MiniLM tokenizer, and uniform zero-ablation masks that prune one
    head per layer and every MLP block."""
    folder = tmp_path_factory.mktemp("slim-source")
    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    config = transformers.BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_attention_heads=4,
                                     num_hidden_layers=2, intermediate_size=37, max_position_embeddings=64,
                                     num_labels=2, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    torch.manual_seed(0)
    model = transformers.BertForSequenceClassification(config).eval()
    model.save_pretrained(folder / "model")
    tokenizer.save_pretrained(folder / "model")
    model.save_pretrained(folder / "no-tokenizer")
    prunable = PrunableModel(model, PruningConfig(ablation="zero", uniform_layers=True))
    prunable.set_masks(heads=torch.tensor([[1., 0, 1, 1], [1, 1, 0, 1]]), mlps=torch.zeros(2))
    prunable.save_pretrained(folder / "masks")
    prunable.set_masks(heads=torch.ones(2, 4), mlps=torch.ones(2))
    prunable.save_pretrained(folder / "full-masks")
    return folder


def test_export_writes_the_tokenizer_with_ordinary_permissions_and_pipeline_loads_the_folder(source, tmp_path,
                                                                                             capsys):
    out = tmp_path / "slim"
    with umask(0o022):
        assert main(["export", "--model", str(source / "model"), "--masks", str(source / "masks"),
                     "--output_dir", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "with the model's tokenizer (BertTokenizer" in printed
    modes = _modes(out)
    assert modes.pop("slim") == 0o755 and set(modes.values()) == {0o644}, modes
    assert {"tokenizer.json", "tokenizer_config.json", "model.safetensors", "config.json"} <= set(modes)
    classifier = transformers.pipeline("text-classification", model=str(out), device="cpu", top_k=None)
    scores = {row["label"]: row["score"] for row in classifier(["The lawyer saw the judge."])[0]}
    hooked = PrunableModel.from_pretrained(str(source / "model"), masks=str(source / "masks")).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(source / "model")
    with torch.no_grad():
        expected = hooked(**tokenizer("The lawyer saw the judge.", return_tensors="pt")).logits.softmax(-1)[0]
    assert [scores["LABEL_0"], scores["LABEL_1"]] == pytest.approx(expected.tolist(), abs=1e-5)
    # The folder, tokenizer files included, is a previous export that the same export may replace.
    assert main(["export", "--model", str(source / "model"), "--masks", str(source / "masks"),
                 "--output_dir", str(out)]) == 0


def test_the_export_says_why_it_kept_the_pruned_heads(source, tmp_path, capsys):
    assert main(["export", "--model", str(source / "model"), "--masks", str(source / "masks"),
                 "--output_dir", str(tmp_path / "slim")]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert ("the 2 pruned heads stay as zero-output slots (their parameters and compute remain), because a bert "
            "config states the head width as hidden_size / num_attention_heads") in printed
    assert "Removed: 2 of 2 MLP blocks" in printed and "export_slim(uniform=False)" in printed
    assert "**Not removed.** kept " in (tmp_path / "slim" / "README.md").read_text()
    assert main(["export", "--model", str(source / "model"), "--masks", str(source / "full-masks"),
                 "--output_dir", str(tmp_path / "full")]) == 0
    assert ("note: kept 100.0% of the parameters: the masks prune no head, MLP block or neuron, so there was "
            "nothing to remove.") in capsys.readouterr().out


def test_a_source_without_a_tokenizer_is_said_and_the_export_still_works(source, tmp_path, capsys):
    out = tmp_path / "slim"
    assert main(["export", "--model", str(source / "no-tokenizer"), "--masks", str(source / "masks"),
                 "--output_dir", str(out)]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert f"note: --model {source / 'no-tokenizer'} has no tokenizer (no tokenizer file in the folder)" in printed
    assert "save one into it with tokenizer.save_pretrained(folder)" in printed
    assert not any(p.name.startswith("tokenizer") for p in out.iterdir())


def test_save_slim_respects_a_stricter_umask_and_keeps_the_generation_config(tmp_path):
    model = tiny_model("llama", task="causal_lm")
    model.generation_config.max_new_tokens = 7
    prunable = PrunableModel(model, PruningConfig(ablation="zero"))
    prunable.set_masks(heads=torch.tensor([[1., 1, 0, 0], [1, 1, 1, 1]]), mlps=torch.ones(2))
    with umask(0o027):
        target = save_slim(prunable.export_slim(), tmp_path / "slim")
    modes = _modes(target)
    assert modes.pop("slim") == 0o750 and set(modes.values()) == {0o640}, modes
    assert transformers.GenerationConfig.from_pretrained(target).max_new_tokens == 7
