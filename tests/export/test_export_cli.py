"""`hf-heuristic-core export` turns a saved mask artifact into a slim folder whose model matches the hooked one."""

from __future__ import annotations

import torch
from tiny_models import make_batch, one_torch_thread, tiny_model  # noqa: F401

from hf_heuristic_core import PrunableModel, PruningConfig, load_slim
from hf_heuristic_core.cli import main


def test_export_command(tmp_path, capsys, one_torch_thread):  # noqa: F811
    model = tiny_model("bert", num_layers=2)
    model.save_pretrained(tmp_path / "model")
    prunable = PrunableModel(model, PruningConfig(ablation="mean"))
    batch = make_batch("bert", batch_size=4, seq_len=9)
    prunable.compute_means([batch], show_progress=False)
    prunable.set_masks(heads=torch.tensor([[1., 0, 0, 1], [0, 0, 0, 0]]), mlps=torch.tensor([0., 1]))
    prunable.save_pretrained(tmp_path / "masks")
    prunable.eval()
    with torch.no_grad():
        hooked = prunable(**batch).logits

    code = main(["export", "--model", str(tmp_path / "model"), "--masks", str(tmp_path / "masks"),
                 "--output-dir", str(tmp_path / "slim")])
    assert code == 0
    slim = load_slim(tmp_path / "slim")
    before = sum(p.numel() for p in model.parameters())
    after = sum(p.numel() for p in slim.parameters())
    out = capsys.readouterr().out
    assert f"parameters: {before:,} -> {after:,}" in out
    assert f"written to {tmp_path / 'slim'}" in out and "load_slim(dir)" in out
    assert type(slim).__name__ == "BertForSequenceClassification"
    with torch.no_grad():
        assert (slim(**batch).logits - hooked).abs().max() <= 1e-4
    assert slim.config.hf_heuristic_core_slim["source"]["masks"] == str(tmp_path / "masks")


def test_export_is_listed_in_help(capsys):
    assert main(["--help"]) == 0
    assert "export" in capsys.readouterr().out
