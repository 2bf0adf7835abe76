"""Attention patterns under PEFT prompt and prefix tuning: shares over real query positions, against a hand
computation from the raw attention weights; unknown position changes raise."""

from __future__ import annotations

import pytest
import torch
from tiny_models import make_batch, skip_unless_peft_prefix_tuning_runs, tiny_model
from torch import nn

from hf_heuristic_core import PrunableModel, PruningConfig
from hf_heuristic_core.ablation.alignment import TokenAlignmentError
from hf_heuristic_core.analysis.attention_patterns import collect_attention_shares

peft = pytest.importorskip("peft")

V = 5
SPECIAL = [3, 4, 5, 6, 7, 8, 9, 10, 11, 12]   # frequent ids, so the special share is not trivially zero


def _model(kind: str) -> nn.Module:
    torch.manual_seed(0)
    config = (peft.PromptTuningConfig(task_type="SEQ_CLS", num_virtual_tokens=V) if kind == "prompt"
              else peft.PrefixTuningConfig(task_type="SEQ_CLS", num_virtual_tokens=V))
    model = peft.get_peft_model(tiny_model("bert"), config).eval()
    with torch.no_grad():
        for parameter in model.prompt_encoder.parameters():
            parameter.normal_(0, 1.0)
    if kind == "prefix":
        skip_unless_peft_prefix_tuning_runs(model, make_batch("bert", batch_size=2, seq_len=5, seed=0))
    return model


def _by_hand(model: nn.Module, batch, kind: str) -> dict[str, torch.Tensor]:
    """Previous-token and special-token shares per layer and head, and the uniform previous baseline, written out
    position by position from the raw weights."""
    with torch.no_grad():
        attentions = model(**batch, output_attentions=True).attentions
    ids, mask = batch["input_ids"], batch["attention_mask"]
    q_offset = V if kind == "prompt" else 0
    previous = torch.zeros(len(attentions), attentions[0].shape[1], dtype=torch.float64)
    special = torch.zeros_like(previous)
    uniform_previous, queries = 0.0, 0
    for b in range(ids.shape[0]):
        real = [p for p in range(ids.shape[1]) if mask[b, p]]
        for q in real:
            queries += 1
            row = [a[b, :, q_offset + q].double() for a in attentions]          # [H, V + T] per layer
            for layer, weights in enumerate(row):
                if q - 1 in real:
                    previous[layer] += weights[:, V + q - 1]
                special[layer] += sum((weights[:, V + k] for k in real if int(ids[b, k]) in SPECIAL),
                                      torch.zeros(weights.shape[0], dtype=torch.float64))
            uniform_previous += (1.0 / (V + len(real))) if q - 1 in real else 0.0
    return {"previous": previous / queries, "special": special / queries,
            "uniform_previous": uniform_previous / queries, "queries": queries}


@pytest.mark.parametrize("kind", ["prompt", "prefix"])
def test_attention_shares_under_prompt_learning_match_a_hand_computation(kind):
    model, batch = _model(kind), make_batch("bert", batch_size=4, seq_len=7, seed=2, lengths=[7, 3, 5, 6])
    expected = _by_hand(model, batch, kind)
    wrapped = PrunableModel(model, PruningConfig(ablation="zero"))
    got = collect_attention_shares(wrapped, [batch], special_ids=SPECIAL)
    wrapped.unwrap()
    assert got.num_queries == expected["queries"] == int(batch["attention_mask"].sum())
    torch.testing.assert_close(got.shares[..., 1].double(), expected["previous"], atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(got.shares[..., 3].double(), expected["special"], atol=1e-6, rtol=1e-5)
    assert got.uniform["previous"] == pytest.approx(expected["uniform_previous"], rel=1e-9)
    assert float(expected["special"].max()) > 0.01


def test_attention_shares_refuse_unknown_extra_positions():
    class PrependOne(nn.Module):
        def __init__(self, inner: nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def get_base_model(self) -> nn.Module:
            return self.inner

        def forward(self, input_ids, attention_mask, **kwargs):
            ids = torch.cat([torch.full_like(input_ids[:, :1], 5), input_ids], dim=1)
            mask = torch.cat([torch.ones_like(attention_mask[:, :1]), attention_mask], dim=1)
            return self.inner(input_ids=ids, attention_mask=mask, **kwargs)

    model = PrependOne(tiny_model("bert"))
    with pytest.raises(TokenAlignmentError, match=r"do not match the batch's 7 tokens \(a model without PEFT"):
        collect_attention_shares(model, [make_batch("bert")], special_ids=SPECIAL)
