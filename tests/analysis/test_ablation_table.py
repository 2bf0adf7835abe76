"""ablation_table's argument checks (its numbers are checked against plain forward passes in test_prune_many.py)."""

from __future__ import annotations

import datasets
import pytest
import torch

from hf_heuristic_core import PrunableModel, PruningConfig
from hf_heuristic_core.analysis import ablation_table
from tiny_models import one_torch_thread, tiny_model  # noqa: F401

pytestmark = pytest.mark.usefixtures("one_torch_thread")


class _NotData:
    """Evaluation data that fails if anything tries to read it."""

    def __iter__(self):
        raise AssertionError("the evaluation data was read before the arguments were checked")


def _model() -> PrunableModel:
    return PrunableModel(tiny_model("bert"), PruningConfig())


def test_bad_units_and_kinds_fail_before_any_evaluation():
    model, data = _model(), {"x": _NotData()}
    with pytest.raises(ValueError, match=r"L2.H0 is out of range: the model has 2 layers x 4 heads"):
        ablation_table(model, data, ["L0.H0", "L2.H0"], mode="zero", show_progress=False)
    with pytest.raises(ValueError, match=r"L7.MLP is out of range: the model has 2 layers"):
        ablation_table(model, data, ["L0.H0"], joint=[["L0.H0", "L7.MLP"]], mode="zero", show_progress=False)
    with pytest.raises(ValueError, match=r"Unknown mask kind\(s\) \['neurons'\]; this model's kinds are "
                                         r"\['heads', 'mlps'\]"):
        ablation_table(model, data, ["L0.H0"], non_core_kinds=("heads", "neurons"), mode="zero",
                       show_progress=False)


def test_one_kind_may_be_given_as_a_string():
    generator = torch.Generator().manual_seed(0)
    rows = [{"input_ids": torch.randint(3, 99, (6,), generator=generator).tolist(), "attention_mask": [1] * 6,
             "label": i % 3} for i in range(12)]
    data = {"x": datasets.Dataset.from_list(rows)}
    kwargs = dict(mode="zero", joint=[], show_progress=False)
    as_string = ablation_table(_model(), data, ["L0.H0"], non_core_kinds="mlps", **kwargs)
    as_tuple = ablation_table(_model(), data, ["L0.H0"], non_core_kinds=("mlps",), **kwargs)
    assert [r.units[0] for r in as_string.non_core] == [("mlp", 0), ("mlp", 1)]
    assert as_string.to_dict() == as_tuple.to_dict()
    assert as_string.rows[-1].label == "average non-core unit (n=2)"
