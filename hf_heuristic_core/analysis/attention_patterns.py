"""What core heads attend to: tokens repeated across premise and hypothesis, the previous / next token, specials.

The paper reads the heuristic core as heads that match a hypothesis token to the same token in the premise (the
lexical-overlap heuristic) and position heads (previous / next token). `attention_shares` measures that on one
batch of attention weights as a pure function; `collect_attention_shares` runs a model (in eager attention, the
only implementation that returns weights) over data and averages over real query positions and examples. Every
share comes with the share a uniform head (equal weight on every key it may attend to) would get, because "30% on
the previous token" means little without it. Under PEFT prompt or prefix tuning the learned virtual tokens are
neither queries nor categories, only keys (see `real_token_attention`).
"""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import torch

from ..ablation.alignment import TokenAlignmentError, VirtualTokens, flatten_choices, virtual_tokens_of
from ..architectures.resolve import transformers_model
from ..errors import PruningError
from ..batching import iterate_batches, model_input_names, progress
from ..model import PrunableModel
from ..plotting import plot_attention_pattern

logger = logging.getLogger(__name__)

__all__ = ["CATEGORIES", "AttentionShares", "AttentionUnavailableError", "attention_shares",
           "collect_attention_shares", "eager_attention", "plot_head_examples", "real_token_attention",
           "segment_ids"]

CATEGORIES = ("repeated", "previous", "next", "special")


class AttentionUnavailableError(PruningError):
    """The model returned no attention weights (SDPA / flash attention), and eager attention could not be set."""


def segment_ids(input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None, sep_id: int | None = None) -> torch.Tensor:
    """Which segment (0 = first / premise, 1 = second / hypothesis) each position belongs to, `[B, T]`.

    `token_type_ids` when they mark two segments among the real tokens (BERT pairs); otherwise everything after the
    first `sep_id` is segment 1 (RoBERTa, decoders with a separator); otherwise one segment.
    """
    mask = attention_mask.bool() if attention_mask is not None else torch.ones_like(input_ids, dtype=torch.bool)
    if token_type_ids is not None and bool(((token_type_ids != 0) & mask).any()):
        return (token_type_ids != 0).long()
    segments = torch.zeros_like(input_ids, dtype=torch.long)
    if sep_id is None:
        return segments
    is_sep = (input_ids == sep_id) & mask
    # 1 strictly after the first separator: cumulative count of separators seen before this position.
    before = torch.cumsum(is_sep.long(), dim=1) - is_sep.long()
    return (before > 0).long()


def attention_shares(attn: torch.Tensor, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None,
                     special_ids: Sequence[int], attention_mask: torch.Tensor | None, *, sep_id: int | None = None,
                     causal: bool = False, virtual_keys: int = 0) -> dict[str, Any]:
    """Share of attention mass per head on each category, averaged over real query positions of the batch.

    `attn`: `[B, H, T, T]` (rows = queries, softmax over keys). A key counts only if it is a real token (and, with
    `causal`, not after the query). Categories, per query q and key k:

    * repeated: k holds the same token id as q, in the *other* segment (see `segment_ids`), neither being special;
    * previous: k = q - 1; next: k = q + 1;
    * special: k is one of `special_ids` ([CLS], [SEP], ...).

    Returns `{category: [H] float64 tensor, "uniform_<category>": float, "num_queries": int}`; the uniform share
    is what a head spreading its mass evenly over the allowed keys would get.

    `virtual_keys`: PEFT prompt learning's virtual tokens in front of the keys (`attn` is then
    `[B, H, T, virtual_keys + T]`, see `real_token_attention`). They belong to no category, but they are keys every
    query may attend to, so they count in the uniform baseline.
    """
    if attn.dim() != 4:
        raise ValueError(f"attn must be [batch, heads, queries, keys], got shape {tuple(attn.shape)}")
    batch, _, length, keys = attn.shape
    if keys != length + virtual_keys or tuple(input_ids.shape) != (batch, length):
        raise ValueError(f"attn {tuple(attn.shape)} does not match input_ids {tuple(input_ids.shape)}"
                         + (f" with {virtual_keys} virtual keys" if virtual_keys else ""))
    attn = attn.detach().double()[..., virtual_keys:]
    input_ids = input_ids.to(attn.device)
    mask = (attention_mask.to(attn.device).bool() if attention_mask is not None
            else torch.ones(batch, length, dtype=torch.bool, device=attn.device))
    positions = torch.arange(length, device=attn.device)
    allowed = mask[:, None, :].expand(batch, length, length)                              # [B, Q, K]
    if causal:
        allowed = allowed & (positions[None, :] <= positions[:, None])[None]
    special = torch.isin(input_ids, torch.tensor(list(special_ids), dtype=input_ids.dtype, device=attn.device))
    segments = segment_ids(input_ids, token_type_ids.to(attn.device) if token_type_ids is not None else None,
                           mask, sep_id)
    same_token = input_ids[:, :, None] == input_ids[:, None, :]
    other_segment = segments[:, :, None] != segments[:, None, :]
    plain = ~special
    offset = positions[None, :] - positions[:, None]                                       # k - q
    categories = {
        "repeated": same_token & other_segment & plain[:, :, None] & plain[:, None, :],
        "previous": (offset == -1)[None].expand(batch, -1, -1),
        "next": (offset == 1)[None].expand(batch, -1, -1),
        "special": special[:, None, :].expand(batch, length, length),
    }
    weights = mask.double()                                                                  # real queries
    num_queries = float(weights.sum())
    allowed_count = (allowed.double().sum(-1) + virtual_keys).clamp_min(1.0)
    out: dict[str, Any] = {"num_queries": int(num_queries)}
    for name, selection in categories.items():
        chosen = (selection & allowed).double()
        per_query = (attn * chosen[:, None]).sum(-1)                                         # [B, H, Q]
        out[name] = (per_query * weights[:, None]).sum((0, 2)) / max(num_queries, 1.0)
        uniform = chosen.sum(-1) / allowed_count                                             # [B, Q]
        out[f"uniform_{name}"] = float((uniform * weights).sum() / max(num_queries, 1.0))
    return out


@contextlib.contextmanager
def eager_attention(model: Any) -> Iterator[None]:
    """Run the block with eager attention (the only implementation that returns weights); restored afterwards."""
    hf_model = _hf_model(model)
    config = getattr(hf_model, "config", None)
    current = getattr(config, "_attn_implementation", None)
    if current in (None, "eager"):
        yield
        return
    setter = getattr(hf_model, "set_attn_implementation", None)
    if setter is None:
        raise AttentionUnavailableError(
            f"The model uses {current!r} attention, which returns no attention weights, and cannot switch "
            "implementation. Load it with attn_implementation='eager'.")
    try:
        setter("eager")
    except Exception as err:  # noqa: BLE001 - any failure means the same thing to the user
        raise AttentionUnavailableError(f"Could not switch the model from {current!r} to eager attention ({err}); "
                                        "load it with attn_implementation='eager'.") from err
    try:
        yield
    finally:
        setter(current)


def _hf_model(model: Any) -> Any:
    """The Transformers model inside a PrunableModel (and inside a PEFT wrapper)."""
    return transformers_model(model.model if isinstance(model, PrunableModel) else model)


def _peft_model(model: Any) -> Any:
    """The model inside a PrunableModel (possibly a PEFT wrapper), or the model itself."""
    return model.model if isinstance(model, PrunableModel) else model


def _forward_attentions(model: Any, inputs: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """All layers' attention weights of the full (unmasked) model, `L x [B, H, T, T]`."""
    disabled = getattr(model, "masks_disabled", None)
    context = disabled() if callable(disabled) else contextlib.nullcontext()
    with torch.no_grad(), context:
        outputs = model(**inputs, output_attentions=True)
    attentions = getattr(outputs, "attentions", None)
    if attentions is None and getattr(outputs, "encoder_attentions", None) is not None:
        raise AttentionUnavailableError(
            "This is an encoder-decoder model: it returns encoder, decoder and cross attentions, and attention "
            "patterns (shares of repeated / previous / next / special tokens) are defined for the heads of one "
            "stack. Collect them on the encoder on its own (model.get_encoder()) or on a single-stack model.")
    if not attentions or any(a is None for a in attentions):
        raise AttentionUnavailableError(
            "The model returned no attention weights (output_attentions=True gave None). SDPA and flash attention "
            "do not compute them: load the model with attn_implementation='eager' or call "
            "model.set_attn_implementation('eager').")
    return tuple(attentions)


def real_token_attention(attn: torch.Tensor, length: int, virtual: VirtualTokens | None) -> tuple[torch.Tensor, int]:
    """The rows of `attn` (`[B, H, Q, K]`) that belong to the batch's `length` real query positions, and how many
    virtual keys precede its real keys. Prompt tuning prepends virtual tokens to queries and keys, prefix tuning to
    keys only; any other mismatch with the batch raises `TokenAlignmentError` rather than misreading positions."""
    queries, keys = int(attn.shape[-2]), int(attn.shape[-1])
    if queries == keys == length:
        return attn, 0
    extra = keys - length
    if virtual is not None and extra == virtual.count and queries == (keys if virtual.in_activations else length):
        return attn[:, :, queries - length:, :], extra
    described = (f"PEFT {virtual.method} with {virtual.count} virtual tokens" if virtual is not None
                 else "a model without PEFT prompt learning")
    raise TokenAlignmentError(
        f"Attention weights of shape {tuple(attn.shape)} do not match the batch's {length} tokens ({described}); "
        "which queries and keys are real tokens is unknown. Collect attention patterns on a model that keeps the "
        "input's positions (e.g. the base model without the adapter).")


def _looks_causal(attn: torch.Tensor, mask: torch.Tensor | None) -> bool:
    """Decoders put exactly zero weight above the diagonal; softmax over real keys never does for encoders."""
    upper = torch.triu(torch.ones(attn.shape[-2:], dtype=torch.bool, device=attn.device), diagonal=1)
    if mask is not None:
        upper = upper & mask.bool().to(attn.device)[:, None, None, :]
    return bool(attn.masked_select(upper.expand_as(attn)).abs().max() == 0) if bool(upper.any()) else False


@dataclass
class AttentionShares:
    """Averages over real query positions of every head: `shares[layer, head, category]` (order `CATEGORIES`)."""

    shares: torch.Tensor
    uniform: dict[str, float]
    num_queries: int
    num_examples: int
    causal: bool

    def row(self, layer: int, head: int) -> dict[str, Any]:
        values = {c: float(self.shares[layer, head, i]) for i, c in enumerate(CATEGORIES)}
        return {"head": f"L{layer}.H{head}", "layer": layer, "head_index": head, **values,
                **{f"uniform_{c}": self.uniform[c] for c in CATEGORIES}}

    def rows(self, heads: Sequence[tuple[int, int]] | None = None) -> list[dict[str, Any]]:
        """One table row per head (default: every head): four shares and the four uniform baselines."""
        heads = heads if heads is not None else [(l, h) for l in range(self.shares.shape[0])
                                                 for h in range(self.shares.shape[1])]
        return [self.row(int(l), int(h)) for l, h in heads]

    def mean_row(self, heads: Sequence[tuple[int, int]], label: str) -> dict[str, Any]:
        """The average over a set of heads (e.g. every non-core head), as a comparison row."""
        index = torch.tensor([[l, h] for l, h in heads], dtype=torch.long).reshape(-1, 2)
        values = self.shares[index[:, 0], index[:, 1]].mean(0) if len(index) else torch.full((4,), float("nan"))
        return {"head": label, "layer": None, "head_index": None,
                **{c: float(values[i]) for i, c in enumerate(CATEGORIES)},
                **{f"uniform_{c}": self.uniform[c] for c in CATEGORIES}}

    def to_dict(self) -> dict[str, Any]:
        return {"categories": list(CATEGORIES), "shares": self.shares.tolist(), "uniform": self.uniform,
                "num_queries": self.num_queries, "num_examples": self.num_examples, "causal": self.causal}


def collect_attention_shares(model: Any, data: Any, *, special_ids: Sequence[int], sep_id: int | None = None,
                             batch_size: int = 16, max_examples: int | None = 256, collate_fn: Any = None,
                             causal: bool | None = None, show_progress: bool = False) -> AttentionShares:
    """Average `attention_shares` of every head over `data` (tokenized; a Dataset, DataLoader or dict batches).

    `model`: a `PrunableModel` (run with its masks disabled: the full model's attention) or any Transformers model.
    It is switched to eager attention for the duration. `causal=None` detects causal attention from the weights.
    Pass `special_ids=tokenizer.all_special_ids` and `sep_id=tokenizer.sep_token_id`.
    """
    hf_model = _hf_model(model)
    virtual = virtual_tokens_of(_peft_model(model))
    accepted = model_input_names(hf_model)
    device = next(hf_model.parameters()).device
    pad = getattr(hf_model.config, "pad_token_id", None) or 0
    batches, total = iterate_batches(data, batch_size, pad, collate_fn)
    sums: torch.Tensor | None = None
    uniform_sums = {c: 0.0 for c in CATEGORIES}
    queries = examples = 0
    was_training = model.training
    model.eval()
    try:
        with eager_attention(model):
            for batch in progress(batches, total, show_progress, "attention patterns"):
                inputs = {k: v.to(device) for k, v in batch.items() if isinstance(v, torch.Tensor)
                          and k not in ("labels", "label") and (not accepted or k in accepted)}
                if max_examples is not None:
                    remaining = max_examples - examples
                    if remaining <= 0:
                        break
                    inputs = {k: v[:remaining] for k, v in inputs.items()}
                attentions = _forward_attentions(model, inputs)
                examples += int(inputs["input_ids"].shape[0])
                inputs = flatten_choices(inputs)   # multiple choice: the model attends per (example, choice) row
                mask = inputs.get("attention_mask")
                length = int(inputs["input_ids"].shape[1])
                aligned = [real_token_attention(a, length, virtual) for a in attentions]
                if causal is None:
                    first, offset = aligned[0]
                    causal = _looks_causal(first[..., offset:], mask)
                per_layer = [attention_shares(a, inputs["input_ids"], inputs.get("token_type_ids"), special_ids,
                                              mask, sep_id=sep_id, causal=causal, virtual_keys=offset)
                             for a, offset in aligned]
                count = per_layer[0]["num_queries"]
                block = torch.stack([torch.stack([r[c] for c in CATEGORIES], -1) for r in per_layer]) * count
                sums = block if sums is None else sums + block
                for c in CATEGORIES:
                    uniform_sums[c] += per_layer[0][f"uniform_{c}"] * count
                queries += count
    finally:
        model.train(was_training)
    if sums is None or queries == 0:
        raise ValueError("collect_attention_shares saw no real tokens; pass tokenized, non-empty data.")
    return AttentionShares(sums.float() / queries, {c: v / queries for c, v in uniform_sums.items()}, queries,
                           examples, bool(causal))


def plot_head_examples(model: Any, tokenizer: Any, example: Mapping[str, Any], heads: Sequence[tuple[int, int]],
                       out_dir: str | os.PathLike, prefix: str = "attention") -> list[Path]:
    """Heatmaps (PNG + PDF) of each head's attention on one tokenized example; returns the PNG paths."""
    ids = list(example["input_ids"])
    inputs = {"input_ids": torch.tensor([ids]), "attention_mask": torch.ones(1, len(ids), dtype=torch.long)}
    if example.get("token_type_ids") is not None:
        inputs["token_type_ids"] = torch.tensor([list(example["token_type_ids"])])
    device = next(_hf_model(model).parameters()).device
    inputs = {k: v.to(device) for k, v in inputs.items()}
    was_training = model.training
    model.eval()
    try:
        with eager_attention(model):
            attentions = _forward_attentions(model, inputs)
    finally:
        model.train(was_training)
    virtual = virtual_tokens_of(_peft_model(model))
    attentions = [a[..., offset:] for a, offset in (real_token_attention(a, len(ids), virtual) for a in attentions)]
    tokens = tokenizer.convert_ids_to_tokens(ids)
    out_dir = Path(out_dir)
    paths = []
    for layer, head in heads:
        stem = out_dir / f"{prefix}-L{layer}.H{head}"
        fig = plot_attention_pattern(attentions[layer][0, head].float().cpu(), tokens,
                                     title=f"L{layer}.H{head}", path=stem)
        fig.clear()
        paths.append(stem.with_name(stem.name + ".png"))
    return paths
