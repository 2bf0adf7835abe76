"""The cached teacher: the full model's logits computed once per training example, looked up by example index.

Sequence-level logits (classifiers) are a few numbers per example and are kept in fp32. Per-position logits (causal
LMs, token classification) are `real tokens x vocabulary` values: about 1 GB for 8.6k tokens at a 30k vocabulary in
fp32. They are kept compactly instead, and only for real (non-padding) tokens:

* ``bfloat16``: half the memory; the KL it gives differs from the fp32 teacher's by bf16 rounding only;
* ``topk``: the k largest logits (fp32), their token ids and the log-normalizer (logsumexp over the whole vocabulary) of
  every position. The top-k probabilities are exact; the remaining mass is spread evenly over the other tokens. The
  information this loses is measured when the cache is built, as the mean KL(teacher || cached teacher) per token.

`estimate_cache_bytes` predicts the size before anything is computed, so a cache that would not fit is never built.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from ..errors import PruningError
from .fields import CACHE_DTYPES

__all__ = ["CACHE_DTYPES", "TeacherCache", "estimate_cache_bytes", "format_bytes"]

_BYTES = {"float32": 4, "bfloat16": 2}


def estimate_cache_bytes(positions: int, width: int, storage: str, topk: int = 64) -> int:
    """Bytes a cache of `positions` rows (examples, or real tokens) of `width` logits takes with `storage`."""
    if storage == "topk":
        return positions * (min(topk, width) * (4 + 4) + 4)   # fp32 values, int32 ids, fp32 log-normalizer
    return positions * width * _BYTES[storage]


def format_bytes(count: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if count < 1024 or unit == "TB":
            return f"{count:.1f} {unit}" if unit != "B" else f"{int(count)} B"
        count /= 1024
    return f"{count:.1f} TB"  # pragma: no cover


@dataclass
class TeacherCache:
    """Teacher logits per training example (index = position in the training dataset).

    Per-position logits keep only the real tokens, so any padding layout can be rebuilt at lookup. `storage` says how
    each entry is kept (see the module docstring); for `topk`, an entry is `(values, ids, log_normalizer)`.
    """

    logits: list
    per_position: bool
    storage: str = "float32"
    width: int | None = None
    approximation_kl: float | None = None
    info: dict = field(default_factory=dict)

    @staticmethod
    def compress(logits: torch.Tensor, storage: str, topk: int = 64):
        """One entry (`[positions, vocab]` or `[classes]` logits) in `storage` form."""
        logits = logits.float()
        if storage == "topk":
            k = min(topk, logits.shape[-1])
            values, ids = logits.topk(k, dim=-1)
            return values, ids.to(torch.int32), torch.logsumexp(logits, dim=-1)
        return logits.to(torch.bfloat16) if storage == "bfloat16" else logits

    def expand(self, entry) -> torch.Tensor:
        """Back to fp32 logits (for `topk`: log-probabilities, exact on the top k, the rest of the mass spread)."""
        if self.storage != "topk":
            return entry.float()
        values, ids, log_normalizer = entry
        log_probs = values.float() - log_normalizer.unsqueeze(-1)
        width = self.width or int(ids.max()) + 1
        tail_mass = (1 - log_probs.exp().sum(-1)).clamp_min(1e-12)
        spread = torch.log(tail_mass / max(width - ids.shape[-1], 1))
        out = spread.unsqueeze(-1).expand(*ids.shape[:-1], width).clone()
        return out.scatter(-1, ids.long(), log_probs)

    @staticmethod
    def approximation_error(logits: torch.Tensor, entry, width: int, storage: str, topk: int) -> float:
        """Mean KL(teacher || cached teacher) over the rows of `logits`, in nats (0 for fp32)."""
        if storage == "float32":
            return 0.0
        cache = TeacherCache([], True, storage, width)
        teacher = torch.log_softmax(logits.float(), dim=-1)
        cached = torch.log_softmax(cache.expand(entry), dim=-1)
        return float((teacher.exp() * (teacher - cached)).sum(-1).mean())

    def nbytes(self) -> int:
        total = 0
        for entry in self.logits:
            parts = entry if isinstance(entry, tuple) else (entry,)
            total += sum(part.numel() * part.element_size() for part in parts)
        return total

    def lookup(self, indices: torch.Tensor, like: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        out = torch.zeros_like(like, dtype=torch.float32)
        for row, index in enumerate(indices.tolist()):
            if not 0 <= index < len(self.logits):
                raise PruningError(f"Mismatched teacher cache: example index {index} is outside the cache "
                                   f"({len(self.logits)} entries). The training data changed since the cache was "
                                   "built; rebuild it or use teacher='same_model'.")
            cached = self.expand(self.logits[index]).to(out.device)
            if not self.per_position:
                if cached.shape != out[row].shape:
                    raise PruningError(f"Mismatched teacher cache entry for example {index}: cached logits "
                                       f"{tuple(cached.shape)}, model gives {tuple(out[row].shape)}. Rebuild the "
                                       "cache for this model or use teacher='same_model'.")
                out[row] = cached
                continue
            positions = (attention_mask[row].bool() if attention_mask is not None
                         else torch.ones(out.shape[1], dtype=torch.bool, device=out.device))
            if cached.shape != (int(positions.sum()), out.shape[-1]):
                raise PruningError(f"Mismatched teacher cache entry for example {index}: cached "
                                   f"{tuple(cached.shape)} (positions, vocab), batch has {int(positions.sum())} real "
                                   f"positions and {out.shape[-1]} outputs. The data or tokenization changed since "
                                   "the cache was built; rebuild it or use teacher='same_model'.")
            out[row, positions] = cached
        return out


def choose_storage(requested: str, per_position: bool, positions: int, width: int, budget_bytes: float,
                   topk: int) -> tuple[str | None, dict]:
    """The storage to use (None: the cache does not fit, use the same-model teacher) and the estimates behind it."""
    if requested != "auto":
        options = [requested]
    else:
        options = ["bfloat16", "topk"] if per_position else ["float32"]
    estimates = {option: estimate_cache_bytes(positions, width, option, topk) for option in
                 dict.fromkeys([*options, "float32"])}
    for option in options:
        if estimates[option] <= budget_bytes:
            return option, estimates
    return None, estimates


def budget_message(estimates: dict[str, int], budget_bytes: float, positions: int, width: int,
                   per_position: bool) -> str:
    what = f"{positions} real tokens x {width} logits" if per_position else f"{positions} examples x {width} logits"
    sizes = ", ".join(f"{option} {format_bytes(size)}" for option, size in estimates.items())
    return (f"The cached teacher would hold {what} ({sizes}), over the budget of {format_bytes(budget_bytes)} "
            "(PruningArguments.teacher_cache_max_gb). Using teacher='same_model' instead (one extra forward per step). "
            "To cache anyway, raise teacher_cache_max_gb or choose teacher_cache_dtype='topk'.")


def _check_storage(storage: str) -> None:
    if storage not in CACHE_DTYPES:
        raise ValueError(f"teacher_cache_dtype must be one of {CACHE_DTYPES}, got {storage!r}.")


def gigabytes(value: float) -> float:
    return value * 1024 ** 3 if math.isfinite(value) else float("inf")
