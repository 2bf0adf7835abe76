"""Label names and orders: every source's labels mapped *by name* onto one order, so a model's label ids mean the
same thing on every set (MNLI / HANS / QQP / PAWS), and k-way NLI predictions collapsed to HANS's two labels."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from datasets import ClassLabel, Dataset

from .tables import column

__all__ = [
    "HANS_LABELS",
    "MNLI_LABELS",
    "PARAPHRASE_LABELS",
    "collapse_nli_predictions",
    "entailment_id_from_labels",
    "label_ids",
    "mnli_label_names",
    "nli_label_names",
    "paraphrase_label_names",
    "replace_labels",
]

nli_label_names: list[str] = ["entailment", "non-entailment"]
"""Two-way NLI labels used by HANS and by :func:`generate_nli` (id 0 = entailment)."""

mnli_label_names: list[str] = ["entailment", "neutral", "contradiction"]
"""Three-way MNLI labels in GLUE order; :func:`load_mnli` reorders other sources to this."""

paraphrase_label_names: list[str] = ["not_duplicate", "duplicate"]
"""QQP's label order; PAWS ("not paraphrase" / "paraphrase") is mapped onto it so one model reads both."""


def _label_key(name: Any) -> str:
    return re.sub(r"[\s_]+", "-", str(name).strip().lower())


def label_ids(dataset: Dataset, aliases: Mapping[str, int], n_classes: int) -> list[int]:
    """Label ids in a target order, from ClassLabel ids (mapped by *name*), strings, or plain ints.
    Unlabeled rows (-1, '-', '') become -1."""
    feature = dataset.features["label"]
    raw = column(dataset, "label")
    if isinstance(feature, ClassLabel):
        lookup = {i: aliases.get(_label_key(n)) for i, n in enumerate(feature.names)}
        if any(v is None for v in lookup.values()):
            raise ValueError(f"cannot map label names {feature.names} onto {sorted(aliases)}")
        return [lookup[v] if v is not None and v >= 0 else -1 for v in raw]
    out = []
    for value in raw:
        if value is None or (isinstance(value, str) and _label_key(value) in ("", "-")):
            out.append(-1)
        elif isinstance(value, str) and _label_key(value) in aliases:
            out.append(aliases[_label_key(value)])
        elif isinstance(value, (int, np.integer)) or (isinstance(value, str) and value.strip().lstrip("-").isdigit()):
            number = int(value)
            if number >= n_classes:
                raise ValueError(f"label id {number} out of range for {n_classes} classes")
            out.append(number if number >= 0 else -1)
        else:
            raise ValueError(f"unknown label {value!r}; known: {sorted(aliases)}")
    return out


HANS_LABELS = {
    "entailment": 0, "entailed": 0,
    "non-entailment": 1, "non-entailed": 1, "not-entailment": 1, "not-entailed": 1, "nonentailment": 1,
    "neutral": 1, "contradiction": 1,
}
MNLI_LABELS = {"entailment": 0, "neutral": 1, "contradiction": 2}
PARAPHRASE_LABELS = {
    "0": 0, "not-duplicate": 0, "not-paraphrase": 0, "not-equivalent": 0, "non-paraphrase": 0,
    "1": 1, "duplicate": 1, "paraphrase": 1, "equivalent": 1,
}


def replace_labels(dataset: Dataset, labels: Sequence[int], label_names: list[str]) -> Dataset:
    return dataset.remove_columns("label").add_column("label", list(labels), feature=ClassLabel(names=label_names))


def collapse_nli_predictions(pred_ids: Any, entailment_id: int = 0) -> Any:
    """Map k-way NLI predictions to HANS's two labels: entailment (0) vs. anything else (1).

    An MNLI model's "neutral" and "contradiction" both count as HANS's non-entailment. Takes class *ids*
    (argmax over logits first); returns a torch tensor for a tensor, else an int64 numpy array.
    ``entailment_id`` is the model's id for entailment (see :func:`entailment_id_from_labels`).
    """
    if type(pred_ids).__module__.split(".")[0] == "torch":
        if pred_ids.is_floating_point():
            raise ValueError("collapse_nli_predictions expects class ids; take argmax over the logits first")
        return (pred_ids != entailment_id).long()
    array = np.asarray(pred_ids)
    if array.size == 0:
        return np.zeros(array.shape, dtype=np.int64)
    if array.dtype.kind not in "iu":
        raise ValueError("collapse_nli_predictions expects integer class ids; take argmax over the logits first")
    return (array != entailment_id).astype(np.int64)


def entailment_id_from_labels(id2label: Mapping[Any, str] | Any) -> int:
    """The id of the "entailment" class in a model's ``id2label`` (or a config carrying one).

    Models disagree (GLUE order has entailment = 0, ``roberta-large-mnli`` has 2), so read it rather than assume.
    """
    mapping = getattr(id2label, "id2label", id2label)
    for key, name in mapping.items():
        if _label_key(name) in ("entailment", "entailed", "entails"):
            return int(key)
    raise ValueError(f"no entailment label in {dict(mapping)}; pass entailment_id explicitly")
