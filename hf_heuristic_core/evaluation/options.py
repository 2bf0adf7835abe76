"""`EvaluationOptions`: how subnetworks are evaluated, one object from the caller to `evaluate_subnetwork`.

The same four settings (batch size, collator, label collapse for two-class sets, the entailment id) used to travel
as separate parameters through `search_effective_size`, `prune_many` and `analyze`; they now travel whole.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any, Callable

__all__ = ["EvaluationOptions"]


@dataclass
class EvaluationOptions:
    """`batch_size` of every evaluation pass; `collate_fn` (None: pad to the longest row); `collapse_to_entailment`
    ("auto": collapse a three-class model's predictions to entailment / non-entailment on two-class sets such as
    HANS; True / False / set names); `entailment_id` (the label id of entailment)."""

    batch_size: int = 32
    collate_fn: Callable | None = None
    collapse_to_entailment: Any = "auto"
    entailment_id: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, numbers.Integral) \
                or self.batch_size < 1:
            raise ValueError(f"EvaluationOptions: batch_size must be a positive integer, got {self.batch_size!r}.")
        if isinstance(self.entailment_id, bool) or not isinstance(self.entailment_id, numbers.Integral):
            raise ValueError(f"EvaluationOptions: entailment_id must be an integer label id, got "
                             f"{self.entailment_id!r}.")

    def evaluate_kwargs(self, with_collator: bool = True) -> dict[str, Any]:
        """The keyword arguments of `evaluate_subnetwork` / `full_model_accuracy`."""
        kwargs = {"batch_size": self.batch_size, "collapse_to_entailment": self.collapse_to_entailment,
                  "entailment_id": self.entailment_id}
        if with_collator:
            kwargs["collate_fn"] = self.collate_fn
        return kwargs
