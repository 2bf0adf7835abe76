"""units.py: the one place that maps masks by kind to units and back, and artifacts to masks by kind."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from hf_heuristic_core import PrunableModel, PruningConfig, read_artifact
from hf_heuristic_core.analysis.units import (all_units, artifact_masks, kept_units, make_unit, masks_without,
                                              pruned_kinds, read_masks, unit_index, unit_kind)
from tiny_models import tiny_model


def test_kind_and_index_round_trip():
    for unit, kind, index in (((4, 0), "heads", (4, 0)), (("mlp", 3), "mlps", (3,)), ("L2.H1", "heads", (2, 1)),
                              ("L0.MLP", "mlps", (0,))):
        assert unit_kind(unit) == kind and unit_index(unit) == index
        assert make_unit(kind, index) == make_unit(unit_kind(unit), unit_index(unit))
    assert make_unit("heads", [1, 2]) == (1, 2) and make_unit("mlps", (5,)) == ("mlp", 5)
    with pytest.raises(ValueError, match=r"Unknown mask kind 'neurons'; the analyses know \['heads', 'mlps'\]"):
        make_unit("neurons", (0, 1))
    with pytest.raises(ValueError, match=r"A mlps unit needs 1 indices \(layers\), got \(0, 1\)"):
        make_unit("mlps", (0, 1))


def test_kept_units_and_all_units_by_hand():
    masks = {"heads": torch.tensor([[1, 0, 1], [0, 0, 1]]), "mlps": torch.tensor([0, 1])}
    assert kept_units(masks) == [(0, 0), (0, 2), (1, 2), ("mlp", 1)]
    assert kept_units({"mlps": torch.tensor([1.0, 1.0]), "heads": None}) == [("mlp", 0), ("mlp", 1)]
    shapes = {"heads": (2, 2), "mlps": (2,)}
    assert all_units(shapes) == [(0, 0), (0, 1), (1, 0), (1, 1), ("mlp", 0), ("mlp", 1)]
    assert all_units(shapes, ["mlps"]) == [("mlp", 0), ("mlp", 1)]
    with pytest.raises(ValueError, match=r"Unknown mask kind\(s\) \['neurons'\]; this model's kinds are"):
        all_units(shapes, ["heads", "neurons"])


def test_masks_without_by_hand():
    masks = masks_without(["L1.H2", ("mlp", 0)], {"heads": (2, 3), "mlps": (2,)})
    assert masks["heads"].tolist() == [[1, 1, 1], [1, 1, 0]] and masks["mlps"].tolist() == [0, 1]
    assert masks["heads"].dtype == torch.float32
    with pytest.raises(ValueError, match=r"L2.H0 is out of range: the model has 2 layers x 3 heads\."):
        masks_without([(2, 0)], {"heads": (2, 3), "mlps": (2,)})
    with pytest.raises(ValueError, match=r"L5.MLP is out of range: the model has 2 layers\."):
        masks_without(["L5.MLP"], {"heads": (2, 3), "mlps": (2,)})
    with pytest.raises(ValueError, match=r"L0.MLP is a mlps unit, but the masks have only \['heads'\]"):
        masks_without(["L0.MLP"], {"heads": (2, 3)})


def test_masks_come_from_artifacts_by_kind(tmp_path):
    model = PrunableModel(tiny_model("bert"), PruningConfig(prune_mlps=False))
    heads = torch.tensor([[1, 0, 1, 1], [0, 1, 1, 0]])
    model.set_masks(heads=heads)
    model.save_pretrained(tmp_path / "run")
    masks = read_masks(tmp_path / "run")
    assert list(masks) == ["heads", "mlps"]
    assert masks["heads"].tolist() == heads.tolist() and masks["mlps"].tolist() == [1, 1]
    assert pruned_kinds(read_artifact(tmp_path / "run")) == ["heads"]
    # An artifact that carries a `.masks` dict by kind is read through it.
    newer = SimpleNamespace(masks={"encoder_heads": torch.ones(2, 2)}, heads=None, mlps=None)
    assert list(artifact_masks(newer)) == ["encoder_heads"]
