"""A slim model returns every output field the model it came from returns (hidden states, attentions, caches),
whatever ran before the export: transformers 5 installs its output-capturing hooks on the first call that asks for
hidden states or attentions and marks the model, and a copy stripped of hooks that kept the mark returned neither
(0 of 5 hidden states, 0 of 4 attentions, logits unchanged). Every head class of every slim model type."""

from __future__ import annotations

import pytest
import torch

from auto_classes import (OUTPUT_FLAGS, build, first_of_each_fast, inputs_for, output_fields, rows,
                          shared_model_builds)  # noqa: F401  (fixture)
from hf_heuristic_core import PrunableModel, PruningConfig, slim_model_types
from tiny_models import one_torch_thread  # noqa: F401  (fixture)

pytestmark = pytest.mark.usefixtures("one_torch_thread", "shared_model_builds")

SLIM_ROWS = [row for row in rows() if row.model_type in slim_model_types()]
# One head class per model type in the default run; every class in the slow run.
CASES = first_of_each_fast(SLIM_ROWS)


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
    flags = {**OUTPUT_FLAGS, **({"use_cache": True} if row.generative else {})}
    prunable = PrunableModel(model, PruningConfig(ablation="zero")).eval()
    prunable.set_masks(_one_unit_pruned_per_kind(prunable))
    if before == "output flags":   # what analyze's attention patterns do before the slim report
        with torch.no_grad():
            prunable(**inputs, **flags)
    slim = prunable.export_slim()
    with torch.no_grad():
        source = prunable(**inputs, **flags)
        got = slim(**inputs, **flags)
    assert output_fields(got) == output_fields(source), row.id
    assert any(key.endswith("hidden_states") for key in output_fields(got))
    assert any(key.endswith("attentions") for key in output_fields(got))
    first = next(key for key in output_fields(source) if key.endswith("logits") or key == "last_hidden_state")
    torch.testing.assert_close(got[first], source[first], atol=1e-5, rtol=1e-4)
