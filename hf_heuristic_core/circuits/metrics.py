"""The task metric `m` of faithfulness and attribution: a logit difference per example, as MIB uses.

MIB scores circuits with `logit_diff` (`MIB_circuit_track/metrics.py`): at the last real token, the logit of the
correct answer minus the logit of the counterfactual (wrong) answer, one value per example, averaged over the data.

* **Causal LMs**: the batch carries `answer_id` and `foil_id` (one token each, e.g. " Mary" vs " John" in IOI); the
  position is the last token with `attention_mask == 1` (right or left padding).
* **Sequence classifiers**: the batch carries `labels`; `m = logit[label] - logit[other label]` for two classes and
  `logit[label] - max(other logits)` for more (MIB has no classifier task; this is the same margin).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable

import torch

from ..errors import UsageError

__all__ = ["METRIC_COLUMNS", "Metric", "last_token_positions", "logit_difference"]

METRIC_COLUMNS = ("labels", "label", "answer_id", "foil_id")

Metric = Callable[[torch.Tensor, Mapping[str, Any]], torch.Tensor]


def last_token_positions(attention_mask: torch.Tensor | None, length: int, batch: int) -> torch.Tensor:
    """Index of the last real token of every row (the last column when there is no attention mask)."""
    if attention_mask is None:
        return torch.full((batch,), length - 1, dtype=torch.long)
    positions = torch.arange(attention_mask.shape[1], device=attention_mask.device)
    return (attention_mask.long() * (positions + 1)).argmax(dim=1)


def logit_difference(logits: torch.Tensor, batch: Mapping[str, Any]) -> torch.Tensor:
    """Per-example logit difference (see the module docstring); differentiable."""
    if logits.dim() == 3:
        for key in ("answer_id", "foil_id"):
            if key not in batch:
                raise UsageError(f"The logit difference of a language model needs '{key}' in every batch (the token "
                                 "id of the correct and of the counterfactual answer); the batch has "
                                 f"{sorted(batch)}. Tokenize the data with circuits.ioi.tokenize_ioi, or add both "
                                 "columns.")
        rows = torch.arange(logits.shape[0], device=logits.device)
        last = last_token_positions(batch.get("attention_mask"), logits.shape[1], logits.shape[0]).to(logits.device)
        final = logits[rows, last].float()
        answer = torch.as_tensor(batch["answer_id"], device=logits.device).long().view(-1)
        foil = torch.as_tensor(batch["foil_id"], device=logits.device).long().view(-1)
        return final[rows, answer] - final[rows, foil]
    if logits.dim() == 2:
        label_key = "labels" if "labels" in batch else "label"
        if label_key not in batch:
            raise UsageError("The logit difference of a classifier needs 'labels' in every batch; the batch has "
                             f"{sorted(batch)}. Keep the label column when tokenizing (keep_labels=True).")
        labels = torch.as_tensor(batch[label_key], device=logits.device).long().view(-1)
        rows = torch.arange(logits.shape[0], device=logits.device)
        scores = logits.float()
        correct = scores[rows, labels]
        others = scores.masked_fill(torch.nn.functional.one_hot(labels, scores.shape[1]).bool(), float("-inf"))
        return correct - others.max(dim=1).values
    raise UsageError(f"Cannot take a logit difference of logits shaped {tuple(logits.shape)}: expected [batch, "
                     "classes] (classifier) or [batch, positions, vocabulary] (language model).")
