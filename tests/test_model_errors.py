"""Bad mask inputs: wrong shapes, NaN, values outside [0, 1], and sparsities that are not a fraction.

Every reference is computed by hand or by editing weights / own hooks, never through the package's mask
code. (Moved from tests/test_model.py.)
"""

from __future__ import annotations

import pytest
import torch

from hf_heuristic_core import MaskShapeError, topk_binarize

from tiny_models import one_torch_thread  # noqa: F401  (fixture)
from tiny_models import HEADS, LAYERS, tiny_model, wrap

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.mark.parametrize("heads, mlps, match", [
    (torch.ones(LAYERS, HEADS + 1), None, "shape"),
    (torch.ones(LAYERS * HEADS), None, "shape"),
    (torch.ones(HEADS, LAYERS + 1), None, "shape"),
    (None, torch.ones(LAYERS + 1), "shape"),
    (None, torch.ones(LAYERS, 1), "shape"),
    (torch.full((LAYERS, HEADS), float("nan")), None, "NaN"),
    (torch.full((LAYERS, HEADS), 2.0), None, r"\[0, 1\]"),
    (None, torch.tensor([-1.0, 1.0]), r"\[0, 1\]"),
])
def test_wrong_masks_raise(heads, mlps, match):
    pm = wrap(tiny_model("bert"), ablation="zero")
    with pytest.raises(MaskShapeError, match=match):
        pm.set_masks(heads=heads, mlps=mlps)
    assert pm.mask_state.fixed.get("heads") is None and pm.mask_state.fixed.get("mlps") is None


@pytest.mark.parametrize("sparsity", [1.0, -0.1, 50, float("nan"), 1.5])
def test_sparsity_outside_unit_interval_raises(sparsity, tmp_path):
    pm = wrap(tiny_model("bert"), ablation="zero")
    with pytest.raises(ValueError, match="sparsity"):
        pm.get_masks(sparsity=sparsity)
    with pytest.raises(ValueError, match="sparsity"):
        topk_binarize(torch.arange(4.0), sparsity)
    with pytest.raises(ValueError, match="sparsity"):
        pm.save_pretrained(tmp_path / "a", sparsity=sparsity)
    assert not (tmp_path / "a" / "masks.safetensors").exists()


def test_sparsity_given_in_percent_gets_a_hint():
    pm = wrap(tiny_model("bert"), ablation="zero")
    with pytest.raises(ValueError, match="fraction"):
        pm.get_masks(sparsity=50)
