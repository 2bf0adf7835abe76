"""Slim export refuses what it cannot do exactly, with errors that say why and what to do, and never leaves a
half-written folder."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from tiny_models import make_batch, one_torch_thread, tiny_model  # noqa: F401

from hf_heuristic_core import (
    ArtifactError,
    ExportError,
    MissingMeansError,
    PrunableModel,
    PruningConfig,
    UnsupportedArchitectureError,
    load_slim,
    read_artifact,
    save_slim,
)
from hf_heuristic_core.export.plan import plan_layer

pytestmark = pytest.mark.usefixtures("one_torch_thread")

HEADS = torch.tensor([[1., 0, 1, 1], [0, 1, 0, 0]])


def _bert(ablation: str = "mean", means: bool = True) -> PrunableModel:
    prunable = PrunableModel(tiny_model("bert"), PruningConfig(ablation=ablation))
    if means and ablation == "mean":
        prunable.compute_means([make_batch("bert")], show_progress=False)
    prunable.set_masks(heads=HEADS, mlps=torch.tensor([1., 0]))
    return prunable.eval()


def test_non_binary_masks_are_refused():
    prunable = _bert()
    prunable.set_masks(heads=torch.full((2, 4), 0.7))
    with pytest.raises(ExportError, match=r"heads mask is not binary \(it has 8 entries strictly between 0 and 1"):
        prunable.export_slim()


def test_resample_ablation_cannot_be_folded():
    with pytest.raises(ExportError, match="Resample ablation cannot be folded"):
        _bert("mean").export_slim(ablation="resample")


def test_mean_ablation_without_means():
    with pytest.raises(MissingMeansError, match=r"no means for \['heads', 'mlps'\].*compute_means"):
        _bert("mean", means=False).export_slim()
    # zero ablation needs none
    assert _bert("mean", means=False).export_slim(ablation="zero") is not None


def test_unsupported_architecture_lists_the_supported_ones():
    prunable = PrunableModel(tiny_model("gpt_neox", task="causal_lm"), PruningConfig(ablation="zero"))
    with pytest.raises(UnsupportedArchitectureError, match=r"model types \[.*'bert'.*'gpt2'.*'llama'.*\]"):
        prunable.export_slim()


def test_slim_folder_and_mask_artifact_refuse_each_other(tmp_path):
    prunable = _bert()
    prunable.save_pretrained(tmp_path / "masks")
    save_slim(prunable.export_slim(), tmp_path / "slim")
    with pytest.raises(ArtifactError, match="holds a slim model.*load_slim"):
        read_artifact(tmp_path / "slim")
    with pytest.raises(ArtifactError, match="holds a slim model"):
        PrunableModel(tiny_model("bert")).load_masks(tmp_path / "slim")
    with pytest.raises(ExportError, match="is a mask artifact .* export_slim"):
        load_slim(tmp_path / "masks")
    tiny_model("bert").save_pretrained(tmp_path / "plain")
    with pytest.raises(ExportError, match="not exported by hf_heuristic_core"):
        load_slim(tmp_path / "plain")


def test_save_slim_of_a_plain_model_is_refused(tmp_path):
    with pytest.raises(ExportError, match="not made by export_slim"):
        save_slim(tiny_model("bert"), tmp_path / "x")
    assert not (tmp_path / "x").exists()


def test_failed_save_leaves_the_previous_folder_intact(tmp_path, monkeypatch):
    slim = _bert().export_slim()
    target = tmp_path / "slim"
    save_slim(slim, target)
    before = {p.name: p.read_bytes() for p in target.iterdir()}

    def broken(directory, **kwargs):
        Path(directory, "model.safetensors").write_bytes(b"half")
        raise OSError("disk full")

    monkeypatch.setattr(slim, "save_pretrained", broken)
    with pytest.raises(OSError, match="disk full"):
        save_slim(slim, target)
    assert {p.name: p.read_bytes() for p in target.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["slim"]   # no temp folder left behind


def test_edited_folder_is_detected(tmp_path):
    from safetensors.torch import load_file, save_file
    save_slim(_bert().export_slim(), tmp_path / "slim")
    path = tmp_path / "slim" / "model.safetensors"
    state = load_file(str(path))
    state.pop("bert.encoder.layer.0.attention.self.query.weight")
    save_file(state, str(path), metadata={"format": "pt"})
    with pytest.raises(ArtifactError, match="do not fit the recorded layout"):
        load_slim(tmp_path / "slim")


@pytest.mark.parametrize("mask, kv, query_slots, kv_slots", [
    ([1, 1, 1, 0, 0, 0, 1, 0, 0], 3, (0, 1, 2, 6, -1, -1), (0, 2)),   # pad the small group: 6 q + 2 kv slots
    ([1, 1, 1, 1, 0, 0, 0, 0, 0], 3, (0, 1, 2, 3, -1, -1), (0, 1)),   # a whole group removed
    ([0, 0, 0, 0], 2, (-1,), (-1,)),                                  # nothing kept: one placeholder
    ([1, 0, 1, 1, 0, 0, 1, 1], 2, (0, 2, 3, 6, 7, -1), (0, 1)),
    # 3 + 1 + 1 of 3 groups of 3: r=1 would cost the fewest rows (2x5+2x5=20 against r=3's 2x9+2x3=24) but needs 5
    # kv heads, more than the layer's 3 (a larger KV cache than the original's): r=3 it is.
    ([1, 1, 1, 0, 1, 0, 0, 0, 1], 3, (0, 1, 2, 4, -1, -1, 8, -1, -1), (0, 1, 2)),
])
def test_group_size_choice(mask, kv, query_slots, kv_slots):
    """The rows each choice costs, by hand: (2 x query slots + 2 x kv slots); ties go to fewer kv slots. First case:
    r=1 costs 2x4+2x4=16, r=3 costs 2x6+2x2=16 (fewer kv slots wins), r=2 costs 18. Last case:
    group 0 keeps 3 of 4, group 1 keeps 2: r=1 costs 2x5+2x5=20, r=2 costs 2x6+2x3=18, r=3 costs 2x6+2x2=16."""
    layout = plan_layer(torch.tensor(mask, dtype=torch.float), True, kv, 10)
    assert layout.query_slots == query_slots
    assert layout.kv_slots == kv_slots
