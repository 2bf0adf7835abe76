"""Bad artifacts: another model, another head_dim, NaN or wrongly shaped tensors, corrupt, partial or foreign
files, failed writes that leave the previous artifact intact, and Hub repo ids that cannot be read.

Every reference is computed by hand or by editing weights / own hooks, never through the package's mask
code. (Moved from tests/test_model.py.)
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

import hf_heuristic_core
from hf_heuristic_core import ArtifactError, MaskShapeError, PrunableModel, PruningConfig

from tiny_models import one_torch_thread  # noqa: F401  (fixture)
from tiny_models import HEADS, LAYERS, make_batch, tiny_model, wrap

pytestmark = pytest.mark.usefixtures("one_torch_thread")

ARTIFACT_FILES = {"pruning_config.json", "masks.safetensors", "README.md"}


def _saved(tmp_path, model_type="bert", **model_kwargs) -> tuple[PrunableModel, Path]:
    pm = wrap(tiny_model(model_type, **model_kwargs))
    pm.compute_means([make_batch(model_type)], show_progress=False)
    pm.set_masks(heads=torch.tensor([[1.0, 0, 1, 1], [1, 1, 1, 0]]))
    directory = tmp_path / f"artifact-{model_type}"
    pm.save_pretrained(directory)
    return pm, directory


@pytest.mark.parametrize("target, kwargs, match", [
    ("bert", {"num_layers": 3}, "num_layers"),
    ("gpt2", {}, "model_type"),
    ("llama", {}, "model_type"),
])
def test_artifact_for_another_model_raises(target, kwargs, match, tmp_path):
    _, directory = _saved(tmp_path)
    other = wrap(tiny_model(target, **kwargs), ablation="zero")
    logits_before = {k: v.detach().clone() for k, v in dict(other.mask_logits.items()).items()}
    with pytest.raises(ArtifactError, match=match):
        other.load_masks(directory)
    assert other.mask_state.fixed.get("heads") is None and not other.has_means
    for key, value in dict(other.mask_logits.items()).items():
        assert torch.equal(value, logits_before[key])


def test_artifact_with_another_head_dim_raises(tmp_path):
    _, directory = _saved(tmp_path, "qwen3")
    other = wrap(tiny_model("qwen3", head_dim=8), ablation="zero")
    with pytest.raises(ArtifactError, match="head_dim"):
        other.load_masks(directory)


def _rewrite_tensor(path: Path, name: str, value: torch.Tensor) -> None:
    tensors = load_file(str(path))
    with safe_open(str(path), framework="pt") as handle:
        metadata = handle.metadata()
    tensors[name] = value
    save_file(tensors, str(path), metadata=metadata)


@pytest.mark.parametrize("name", ["logits.heads", "logits.mlps"])
def test_nan_logits_in_artifact_raise(name, tmp_path):
    pm, directory = _saved(tmp_path)
    bad = pm.mask_state_dict()[name].clone()
    bad.view(-1)[0] = float("nan")
    _rewrite_tensor(directory / "masks.safetensors", name, bad)
    fresh = wrap(tiny_model("bert"))
    with pytest.raises(ArtifactError, match="NaN"):
        fresh.load_masks(directory)
    assert torch.isfinite(fresh.mask_logits.heads).all() and torch.isfinite(fresh.mask_logits.mlps).all()
    with pytest.raises(MaskShapeError, match="NaN"):
        fresh.load_mask_state_dict({**pm.mask_state_dict(), name: bad})


def test_wrong_shape_tensor_in_artifact_raises(tmp_path):
    _, directory = _saved(tmp_path)
    _rewrite_tensor(directory / "masks.safetensors", "logits.heads", torch.zeros(LAYERS, HEADS + 1))
    with pytest.raises(ArtifactError, match="shape"):
        wrap(tiny_model("bert")).load_masks(directory)


def test_corrupt_and_partial_artifacts_raise(tmp_path):
    _, directory = _saved(tmp_path)
    masks_path = directory / "masks.safetensors"
    original = masks_path.read_bytes()
    masks_path.write_bytes(original[: len(original) // 2])
    with pytest.raises(ArtifactError, match="corrupt"):
        wrap(tiny_model("bert")).load_masks(directory)
    masks_path.write_bytes(b"")
    with pytest.raises(ArtifactError, match="corrupt"):
        wrap(tiny_model("bert")).load_masks(directory)
    masks_path.unlink()
    with pytest.raises(ArtifactError, match="missing|partial"):
        wrap(tiny_model("bert")).load_masks(directory)
    masks_path.write_bytes(original)
    wrap(tiny_model("bert")).load_masks(directory)  # restored: loads again

    config_path = directory / "pruning_config.json"
    text = config_path.read_text()
    config_path.write_text(text[: len(text) // 2])
    with pytest.raises(ArtifactError, match="corrupt"):
        wrap(tiny_model("bert")).load_masks(directory)
    config_path.unlink()
    with pytest.raises(ArtifactError, match="pruning_config.json"):
        wrap(tiny_model("bert")).load_masks(directory)
    with pytest.raises(ArtifactError, match="does not exist"):
        wrap(tiny_model("bert")).load_masks(tmp_path / "no" / "such" / "dir")


def test_foreign_safetensors_file_raises(tmp_path):
    _, directory = _saved(tmp_path)
    save_file({"weight": torch.zeros(2)}, str(directory / "masks.safetensors"))
    with pytest.raises(ArtifactError, match="not a hf_heuristic_core mask file"):
        wrap(tiny_model("bert")).load_masks(directory)


def _snapshot(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in directory.iterdir()}


def _changed_model():
    pm = wrap(tiny_model("bert"), ablation="zero")
    pm.set_masks(heads=torch.zeros(LAYERS, HEADS), mlps=torch.zeros(LAYERS))
    return pm


def test_failed_masks_write_leaves_previous_artifact_intact(tmp_path, monkeypatch):
    _, directory = _saved(tmp_path)
    before = _snapshot(directory)
    assert set(before) == ARTIFACT_FILES

    def failing_save_file(tensors, filename, metadata=None):
        Path(filename).write_bytes(b"half a safetensors file")
        raise OSError("No space left on device")
    monkeypatch.setattr(hf_heuristic_core.artifacts, "save_file", failing_save_file)
    with pytest.raises(OSError, match="No space"):
        _changed_model().save_pretrained(directory)
    assert _snapshot(directory) == before  # same names (no temp files left) and same bytes
    monkeypatch.undo()
    wrap(tiny_model("bert")).load_masks(directory)


@pytest.mark.parametrize("failing_step", ["config", "model card"])
def test_failed_later_step_leaves_previous_artifact_intact(failing_step, tmp_path, monkeypatch):
    """A save that fails after the masks were serialized must not leave new masks beside the old config/card."""
    _, directory = _saved(tmp_path)
    before = _snapshot(directory)
    changed = _changed_model()

    def fail(*args, **kwargs):
        raise OSError("No space left on device")
    if failing_step == "config":
        monkeypatch.setattr(PruningConfig, "to_dict", fail)
    else:
        monkeypatch.setattr(hf_heuristic_core.artifacts, "model_card_text", fail)
    with pytest.raises(OSError, match="No space"):
        changed.save_pretrained(directory)
    monkeypatch.undo()
    assert set(_snapshot(directory)) == set(before)  # no temp files left
    assert _snapshot(directory) == before


def test_save_into_new_nested_directory(tmp_path):
    pm = wrap(tiny_model("bert"), ablation="zero")
    pm.save_pretrained(tmp_path / "a" / "b")
    assert {p.name for p in (tmp_path / "a" / "b").iterdir()} == ARTIFACT_FILES


def test_repo_id_without_pruning_config_raises(monkeypatch):
    import huggingface_hub
    from huggingface_hub.errors import EntryNotFoundError
    calls = []

    def fake_download(repo_id, filename, **kwargs):
        calls.append((repo_id, filename))
        raise EntryNotFoundError(f"404: {filename} not found in {repo_id}")
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake_download)
    pm = wrap(tiny_model("bert"), ablation="zero")
    with pytest.raises(ArtifactError, match="has no pruning_config.json"):
        pm.load_masks("someone/plain-model")
    assert calls == [("someone/plain-model", "pruning_config.json")]
    assert pm.mask_state.fixed.get("heads") is None


def test_repo_id_unreachable_raises_artifact_error(monkeypatch):
    import huggingface_hub

    def offline(repo_id, filename, **kwargs):
        raise OSError("offline")
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", offline)
    with pytest.raises(ArtifactError, match="someone/masks"):
        wrap(tiny_model("bert"), ablation="zero").load_masks("someone/masks")
