"""Attention-pattern capture through every head class: the shares match a hand alignment of the model's own
attention weights (multiple choice runs one row per (example, choice)), and an encoder-decoder model, which returns
encoder, decoder and cross attentions, is refused with a message saying so (it used to blame SDPA)."""

from __future__ import annotations

import pytest
import torch

from auto_classes import (build, first_of_each_fast, inputs_for, is_two_stack, rows,
                          shared_model_builds)  # noqa: F401  (fixture)
from hf_heuristic_core import PrunableModel, PruningConfig
from hf_heuristic_core.analysis.attention_patterns import (CATEGORIES, AttentionUnavailableError, attention_shares,
                                                           collect_attention_shares)
from tiny_models import one_torch_thread  # noqa: F401  (fixture)

pytestmark = pytest.mark.usefixtures("one_torch_thread", "shared_model_builds")

# One head class per model type in the default run; every class in the slow run.
CASES = first_of_each_fast(rows())
SPECIAL = [0, 1, 2]


@pytest.mark.parametrize("row", CASES)
def test_attention_shares_align_in_every_head_class(row):
    model = build(row, attn_implementation="eager")
    inputs = inputs_for(model, row)
    prunable = PrunableModel(model, PruningConfig(ablation="zero"))
    if is_two_stack(model):
        with pytest.raises(AttentionUnavailableError, match="encoder-decoder model"):
            collect_attention_shares(prunable, [inputs], special_ids=SPECIAL)
        return
    result = collect_attention_shares(prunable, [inputs], special_ids=SPECIAL)
    with torch.no_grad():
        attentions = model(**inputs, output_attentions=True).attentions
    ids = inputs["input_ids"].reshape(-1, inputs["input_ids"].shape[-1])
    mask = inputs["attention_mask"].reshape(ids.shape)
    expected = torch.stack([torch.stack([attention_shares(a, ids, None, SPECIAL, mask, causal=result.causal)[c]
                                         for c in CATEGORIES], -1) for a in attentions])
    torch.testing.assert_close(result.shares.double(), expected.double(), atol=1e-6, rtol=1e-5)
    assert result.num_examples == inputs["input_ids"].shape[0]
    assert result.num_queries == int(mask.sum())
