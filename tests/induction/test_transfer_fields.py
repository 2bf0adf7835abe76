"""A transplant returns every output field its source returns (hidden states, attentions, caches), whatever the
source ran before: every head class of every model type in the map, with weight masks (every type) and, where a
slim map says which weights a unit owns, with unit masks."""

from __future__ import annotations

import pytest
import torch

from auto_classes import (OUTPUT_FLAGS, build, first_of_each_fast, inputs_for, output_fields, rows,
                          shared_model_builds)  # noqa: F401  (fixture)
from hf_heuristic_core import PrunableModel, PruningConfig, slim_model_types
from hf_heuristic_core.induction.transfer import transfer_subnetwork
from tiny_models import one_torch_thread  # noqa: F401  (fixture)

pytestmark = pytest.mark.usefixtures("one_torch_thread", "shared_model_builds")

# One head class per model type in the default run; every class in the slow run.
CASES = first_of_each_fast(rows())


def _masks(prunable) -> dict[str, torch.Tensor]:
    masks = {kind: torch.ones(shape) for kind, shape in prunable.mask_shapes().items()}
    for mask in masks.values():
        mask.view(-1)[::2] = 0
    return masks


@pytest.mark.parametrize("row", CASES)
def test_transplant_returns_the_fields_of_its_source(row):
    model = build(row, attn_implementation="eager")
    inputs = inputs_for(model, row)
    flags = {**OUTPUT_FLAGS, **({"use_cache": True} if row.generative else {})}
    with torch.no_grad():
        expected = output_fields(model(**inputs, **flags))   # the source has run with every output flag before
    granularities = ["weight"] + (["unit"] if row.model_type in slim_model_types() else [])
    for granularity in granularities:
        prunable = PrunableModel(model, PruningConfig(granularity=granularity, ablation="zero"))
        masks = _masks(prunable)
        config = prunable.pruning_config
        prunable.unwrap()
        transplant = transfer_subnetwork(model, masks, seed=0, config=config)
        with torch.no_grad():
            assert output_fields(transplant(**inputs, **flags)) == expected, (row.id, granularity)
