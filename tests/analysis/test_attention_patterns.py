"""Attention shares on hand-built attention matrices, and the model runner (eager switch, errors, heatmaps)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from hf_heuristic_core import PrunableModel, PruningConfig
from hf_heuristic_core.analysis.attention_patterns import (CATEGORIES, AttentionUnavailableError, attention_shares,
                                                  collect_attention_shares, eager_attention, plot_head_examples,
                                                  segment_ids)
from tiny_models import one_torch_thread, tiny_model  # noqa: F401

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CLS, SEP, PAD = 101, 102, 0
SPECIAL = [CLS, SEP, PAD]


def _pair_example():
    """[CLS] a b [SEP] b c [SEP] [PAD]: 'b' (id 7) occurs in both segments."""
    ids = torch.tensor([[CLS, 5, 7, SEP, 7, 9, SEP, PAD]])
    types = torch.tensor([[0, 0, 0, 0, 1, 1, 1, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 1, 1, 0]])
    return ids, types, mask


def test_segment_ids_from_token_types_or_first_separator():
    ids, types, mask = _pair_example()
    assert segment_ids(ids, types, mask).tolist() == [[0, 0, 0, 0, 1, 1, 1, 0]]
    # RoBERTa-style: no token types; everything after the first separator is the second segment.
    assert segment_ids(ids, torch.zeros_like(ids), mask, sep_id=SEP).tolist() == [[0, 0, 0, 0, 1, 1, 1, 1]]
    assert segment_ids(ids, None, mask, sep_id=None).tolist() == [[0] * 8]


def test_shares_of_one_hot_heads():
    """Head 0 always looks at the previous token, head 1 at the next, head 2 at [CLS], head 3 at its repeat."""
    ids, types, mask = _pair_example()
    T = ids.shape[1]
    attn = torch.zeros(1, 4, T, T)
    real = 7
    for q in range(T):
        attn[0, 0, q, max(q - 1, 0)] = 1.0           # q=0 attends to itself: not "previous"
        attn[0, 1, q, min(q + 1, real - 1)] = 1.0    # last real query attends to itself: not "next"
        attn[0, 2, q, 0] = 1.0
        attn[0, 3, q, q] = 1.0
    attn[0, 3, 2] = 0.0
    attn[0, 3, 2, 4] = 1.0                           # b (premise) -> b (hypothesis)
    attn[0, 3, 4] = 0.0
    attn[0, 3, 4, 2] = 0.25                          # b (hypothesis) -> b (premise), a quarter of its mass
    attn[0, 3, 4, 4] = 0.75
    out = attention_shares(attn, ids, types, SPECIAL, mask)
    n = 7                                            # real queries
    assert out["num_queries"] == n
    assert out["previous"].tolist() == pytest.approx([6 / n, 0, 1 / n, 0])   # head 2: query 1 -> key 0 is previous
    assert out["next"].tolist() == pytest.approx([0, 6 / n, 0, 0])
    # special keys: [CLS] (0), [SEP] (3, 6). Head 0: queries 0, 1 (->0), 4 (->3); head 1: query 2 (->3), 5 (->6),
    # 6 (->6); head 2: all 7; head 3: queries 0, 3, 6 attend to themselves.
    assert out["special"].tolist() == pytest.approx([3 / n, 3 / n, 1.0, 3 / n])
    assert out["repeated"].tolist() == pytest.approx([0, 0, 0, 1.25 / n])
    # Uniform over 7 real keys: previous exists for 6 queries, next for 6, 3 special keys, b has 1 repeat each.
    assert out["uniform_previous"] == pytest.approx(6 / 7 / n)
    assert out["uniform_next"] == pytest.approx(6 / 7 / n)
    assert out["uniform_special"] == pytest.approx(3 / 7)
    assert out["uniform_repeated"] == pytest.approx(2 / 7 / n)


def test_shares_ignore_padding_queries_and_keys():
    ids, types, mask = _pair_example()
    T = ids.shape[1]
    attn = torch.full((1, 1, T, T), 1.0 / 7)
    attn[..., T - 1] = 0.0                            # what a real model gives: no mass on the padding key
    attn[0, 0, T - 1] = 1.0                           # garbage in the padding query row must not count
    out = attention_shares(attn, ids, types, SPECIAL, mask)
    for c in CATEGORIES:                              # uniform attention reproduces the uniform baseline exactly
        assert float(out[c][0]) == pytest.approx(out[f"uniform_{c}"])


def test_special_tokens_never_count_as_repeated():
    """The two [SEP]s sit in different segments with the same id; they are separators, not a repeated word."""
    ids = torch.tensor([[CLS, 5, SEP, 6, SEP]])
    types = torch.tensor([[0, 0, 0, 1, 1]])
    attn = torch.zeros(1, 1, 5, 5)
    attn[0, 0, :, 4] = 1.0
    attn[0, 0, 4, 4] = 0.0
    attn[0, 0, 4, 2] = 1.0                            # second [SEP] -> first [SEP]
    out = attention_shares(attn, ids, types, SPECIAL, None)
    assert float(out["repeated"][0]) == 0.0 and out["uniform_repeated"] == 0.0
    assert float(out["special"][0]) == pytest.approx(1.0)


def test_causal_baseline_counts_only_earlier_keys():
    ids = torch.tensor([[5, 6, 7]])
    attn = torch.tensor([[[[1.0, 0, 0], [0.5, 0.5, 0], [0.2, 0.3, 0.5]]]])
    out = attention_shares(attn, ids, None, [], None, causal=True)
    assert float(out["previous"][0]) == pytest.approx((0 + 0.5 + 0.3) / 3)
    assert float(out["next"][0]) == 0.0 and out["uniform_next"] == 0.0
    assert out["uniform_previous"] == pytest.approx((0 + 1 / 2 + 1 / 3) / 3)


def test_shape_errors():
    ids, types, mask = _pair_example()
    with pytest.raises(ValueError, match="batch, heads"):
        attention_shares(torch.zeros(8, 8), ids, types, SPECIAL, mask)
    with pytest.raises(ValueError, match="does not match"):
        attention_shares(torch.zeros(1, 2, 5, 5), ids, types, SPECIAL, mask)


def _pair_batches(n: int = 6):
    generator = torch.Generator().manual_seed(0)
    rows = []
    for i in range(n):
        a = torch.randint(5, 40, (3,), generator=generator).tolist()
        b = [a[1]] + torch.randint(5, 40, (2,), generator=generator).tolist()
        ids = [1, *a, 2, *b, 2]
        rows.append({"input_ids": ids, "token_type_ids": [0] * 5 + [1] * 4, "attention_mask": [1] * len(ids)})
    return rows


def test_collect_matches_the_pure_function_and_restores_sdpa():
    model = PrunableModel(tiny_model("bert", attn_implementation="sdpa"), PruningConfig(ablation="zero"))
    model.set_masks(heads=torch.zeros(2, 4))          # masks must not change the measured (full-model) attention
    rows = _pair_batches()
    batch = {k: torch.tensor([r[k] for r in rows]) for k in rows[0]}
    shares = collect_attention_shares(model, [batch], special_ids=[0, 1, 2], sep_id=2)
    assert model.model.config._attn_implementation == "sdpa"
    reference = tiny_model("bert", attn_implementation="eager")
    with torch.no_grad():
        attentions = reference(**batch, output_attentions=True).attentions
    for layer in range(2):
        expected = attention_shares(attentions[layer], batch["input_ids"], batch["token_type_ids"], [0, 1, 2],
                                    batch["attention_mask"], sep_id=2)
        for i, c in enumerate(CATEGORIES):
            torch.testing.assert_close(shares.shares[layer, :, i], expected[c].float())
    assert shares.num_queries == 6 * 9 and shares.num_examples == 6 and not shares.causal
    assert shares.uniform["repeated"] > 0
    row = shares.row(1, 2)
    assert row["head"] == "L1.H2" and set(CATEGORIES) <= set(row) and "uniform_previous" in row
    mean = shares.mean_row([(0, 0), (1, 3)], "two heads")
    assert mean["previous"] == pytest.approx(float(shares.shares[[0, 1], [0, 3], 1].mean()))


def test_collect_averages_batches_by_query_count_and_stops_at_max_examples():
    model = tiny_model("bert")
    rows = _pair_batches(6)
    rows[0] = {**rows[0], "input_ids": rows[0]["input_ids"][:5], "token_type_ids": [0] * 5, "attention_mask": [1] * 5}
    first = {k: torch.tensor([r[k] for r in rows[:1]]) for k in rows[0]}
    rest = {k: torch.tensor([r[k] for r in rows[1:]]) for k in rows[1]}
    together = collect_attention_shares(model, [first, rest], special_ids=[0, 1, 2])
    a = collect_attention_shares(model, [first], special_ids=[0, 1, 2])
    b = collect_attention_shares(model, [rest], special_ids=[0, 1, 2])
    torch.testing.assert_close(together.shares, (a.shares * 5 + b.shares * 45) / 50)
    limited = collect_attention_shares(model, [rest, first], special_ids=[0, 1, 2], max_examples=3)
    assert limited.num_examples == 3 and limited.num_queries == 27


def test_causal_model_is_detected():
    model = tiny_model("gpt2", task="causal_lm")
    batch = {"input_ids": torch.tensor([[5, 6, 7, 5, 9]]), "attention_mask": torch.ones(1, 5, dtype=torch.long)}
    assert collect_attention_shares(model, [batch], special_ids=[]).causal


class _NoWeights(torch.nn.Module):
    """A model whose attention implementation returns no weights and cannot be switched."""

    def __init__(self):
        super().__init__()
        self.config = SimpleNamespace(_attn_implementation="sdpa", pad_token_id=0)
        self.linear = torch.nn.Linear(2, 2)

    def forward(self, input_ids=None, attention_mask=None, output_attentions=False):
        return SimpleNamespace(attentions=None)


def test_missing_attention_weights_raise_a_clear_error():
    batch = {"input_ids": torch.tensor([[5, 6]]), "attention_mask": torch.ones(1, 2, dtype=torch.long)}
    with pytest.raises(AttentionUnavailableError, match="attn_implementation='eager'"):
        collect_attention_shares(_NoWeights(), [batch], special_ids=[])
    model = _NoWeights()
    model.config._attn_implementation = "eager"       # claims eager but still returns nothing
    with pytest.raises(AttentionUnavailableError, match="no attention weights"):
        collect_attention_shares(model, [batch], special_ids=[])


def test_eager_attention_restores_the_implementation_on_error():
    model = tiny_model("bert", attn_implementation="sdpa")
    with pytest.raises(RuntimeError):
        with eager_attention(model):
            assert model.config._attn_implementation == "eager"
            raise RuntimeError("boom")
    assert model.config._attn_implementation == "sdpa"


def test_heatmaps_are_written(tmp_path):
    pytest.importorskip("matplotlib")
    model = PrunableModel(tiny_model("bert"), PruningConfig(ablation="zero"))
    tokenizer = SimpleNamespace(convert_ids_to_tokens=lambda ids: [f"t{i}" for i in ids])
    example = _pair_batches(1)[0]
    paths = plot_head_examples(model, tokenizer, example, [(0, 1), (1, 3)], tmp_path)
    assert [p.name for p in paths] == ["attention-L0.H1.png", "attention-L1.H3.png"]
    assert all(p.is_file() and p.with_suffix(".pdf").is_file() for p in paths)
