"""A mask artifact is three small files, and from_pretrained loads the base model and the masks back.

Every reference is computed by hand or by editing weights / own hooks, never through the package's mask
code. (Moved from tests/test_model.py.)
"""

from __future__ import annotations

import pytest
import torch

import hf_heuristic_core
from hf_heuristic_core import PrunableModel

from tiny_models import one_torch_thread  # noqa: F401  (fixture)
from tiny_models import HEADS, LAYERS, logits_of, make_batch, tiny_model, wrap

pytestmark = pytest.mark.usefixtures("one_torch_thread")

ARTIFACT_FILES = {"pruning_config.json", "masks.safetensors", "README.md"}


def test_artifact_is_three_small_files_and_loads_back(tmp_path):
    pm = wrap(tiny_model("llama"))
    pm.compute_means([make_batch("llama")], show_progress=False)
    heads = torch.ones(LAYERS, HEADS)
    heads[1, 0] = 0
    pm.set_masks(heads=heads)
    pm.save_pretrained(tmp_path)
    assert {p.name for p in tmp_path.iterdir()} == ARTIFACT_FILES
    assert sum(p.stat().st_size for p in tmp_path.iterdir()) < 32 * 1024
    card = (tmp_path / "README.md").read_text()
    assert "hf_heuristic_core" in card and "llama" in card
    artifact = hf_heuristic_core.read_artifact(tmp_path)
    assert torch.equal(artifact.heads, heads) and torch.equal(artifact.mlps, torch.ones(LAYERS))
    assert artifact.config.model_type == "llama"


def test_from_pretrained_loads_base_model_and_masks(tmp_path):
    model = tiny_model("gpt2")
    model.save_pretrained(tmp_path / "base")
    base = type(model).from_pretrained(tmp_path / "base").eval()
    pm = wrap(base, ablation="zero")
    pm.set_masks(heads=torch.tensor([[1.0, 0, 1, 1], [1, 1, 0, 1]]), mlps=torch.tensor([1.0, 0.0]))
    pm.eval()
    batch = make_batch("gpt2")
    expected = logits_of(pm, batch)
    pm.save_pretrained(tmp_path / "masks")
    for loaded in (PrunableModel.from_pretrained(tmp_path / "base", masks=tmp_path / "masks"),
                   PrunableModel.from_pretrained(tmp_path / "masks")):
        loaded.eval()
        assert type(loaded.model).__name__ == "GPT2ForSequenceClassification"
        assert torch.equal(logits_of(loaded, batch), expected)
