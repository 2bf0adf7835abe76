"""A slim model returns every output field the model it came from returns (hidden states, attentions, caches),
whatever ran before the export: transformers 5 installs its output-capturing hooks on the first call that asks for
hidden states or attentions and marks the model, and a copy stripped of hooks that kept the mark returned neither
(0 of 5 hidden states, 0 of 4 attentions, logits unchanged). Every head class of every slim model type."""

from __future__ import annotations

import pytest
import torch

from auto_classes import build, inputs_for, rows
from hf_heuristic_core import PrunableModel, PruningConfig, slim_model_types
from tiny_models import one_torch_thread  # noqa: F401  (fixture)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SLIM_ROWS = [row for row in rows() if row.model_type in slim_model_types()]
# One head class per model type in the default run; every class in the slow run.
FIRST_OF_EACH = {row.model_type: row for row in reversed(SLIM_ROWS)}
CASES = [pytest.param(row, id=row.id, marks=() if FIRST_OF_EACH[row.model_type] == row else pytest.mark.slow)
         for row in SLIM_ROWS]
FLAGS = {"output_hidden_states": True, "output_attentions": True}


def fields(output) -> dict[str, object]:
    """Each field that is set: its type, and for tuples their length."""
    return {key: (type(value).__name__, len(value) if isinstance(value, tuple) else None)
            for key, value in output.items() if value is not None}


def _one_unit_pruned_per_kind(prunable) -> dict[str, torch.Tensor]:
    masks = {kind: torch.ones(shape) for kind, shape in prunable.mask_shapes().items()}
    for mask in masks.values():
        mask.view(-1)[-1] = 0
    return masks


@pytest.mark.parametrize("before", ["nothing", "output flags"])
@pytest.mark.parametrize("row", CASES)
def test_slim_model_returns_the_fields_of_its_source(row, before):
    model = build(row, attn_implementation="eager")
    inputs = inputs_for(model, row)
    flags = {**FLAGS, **({"use_cache": True} if row.generative else {})}
    prunable = PrunableModel(model, PruningConfig(ablation="zero")).eval()
    prunable.set_masks(_one_unit_pruned_per_kind(prunable))
    if before == "output flags":   # what analyze's attention patterns do before the slim report
        with torch.no_grad():
            prunable(**inputs, **flags)
    slim = prunable.export_slim()
    with torch.no_grad():
        source = prunable(**inputs, **flags)
        got = slim(**inputs, **flags)
    assert fields(got) == fields(source), row.id
    assert any(key.endswith("hidden_states") for key in fields(got))
    assert any(key.endswith("attentions") for key in fields(got))
    first = next(key for key in fields(source) if key.endswith("logits") or key == "last_hidden_state")
    torch.testing.assert_close(got[first], source[first], atol=1e-5, rtol=1e-4)
