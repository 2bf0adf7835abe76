"""The one tokenizer of the package: which columns hold the text, and one tokenizer call over a dataset.

The CLI (`prune`, `effective-size`), the study and data specs all tokenize through here, so the same table gives
the same token ids everywhere (and a runs folder's data spec rebuilds exactly the sets its runs were scored on).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["MODEL_INPUTS", "TEXT_COLUMN_CANDIDATES", "text_columns", "tokenize_dataset", "tokenize_pairs"]

TEXT_COLUMN_CANDIDATES: tuple[tuple[str, ...], ...] = (
    ("premise", "hypothesis"), ("sentence1", "sentence2"), ("question1", "question2"), ("question", "sentence"),
    ("text",), ("sentence",), ("content",))
"""Text columns looked for, in order, when none are named: pairs first (NLI, paraphrase, QNLI), then one text."""

MODEL_INPUTS = frozenset({"input_ids", "attention_mask", "token_type_ids"})
_LABEL_COLUMNS = ("labels", "label")


def text_columns(column_names: Sequence[str], requested: str | Sequence[str] | None = None) -> list[str]:
    """The text columns of a table: ``requested`` (``"a,b"`` or a list) checked against the table, else guessed."""
    columns = list(column_names)
    if requested:
        chosen = [c.strip() for c in requested.split(",")] if isinstance(requested, str) else list(requested)
        chosen = [c for c in chosen if c]
        missing = [c for c in chosen if c not in columns]
        if missing:
            raise ValueError(f"text columns {missing} are not in the dataset; its columns are {columns}.")
        return chosen
    for candidate in TEXT_COLUMN_CANDIDATES:
        if all(c in columns for c in candidate):
            return list(candidate)
    raise ValueError(f"Cannot tell the text columns among {columns} (looked for "
                     f"{', '.join('/'.join(c) for c in TEXT_COLUMN_CANDIDATES)}); name them (text_columns= or "
                     "--text_columns a,b).")


def tokenize_dataset(dataset: Any, tokenizer: Any, columns: str | Sequence[str] | None = None,
                     max_length: int = 128, *, keep_labels: bool = True, desc: str = "tokenizing") -> Any:
    """Model inputs (``input_ids``, ``attention_mask``, ``token_type_ids``) of a text table, truncated to
    ``max_length``, plus its label as ``labels`` (renamed from ``label``) when ``keep_labels``; no other column."""
    chosen = text_columns(dataset.column_names, columns)
    label = next((c for c in _LABEL_COLUMNS if c in dataset.column_names), None) if keep_labels else None
    encoded = dataset.map(lambda batch: tokenizer(*[batch[c] for c in chosen], truncation=True,
                                                  max_length=max_length),
                          batched=True, desc=desc,
                          remove_columns=[c for c in dataset.column_names if c != label and c not in MODEL_INPUTS])
    if label == "label":
        encoded = encoded.rename_column("label", "labels")
    return encoded


def tokenize_pairs(dataset: Any, tokenizer: Any, text_columns: Sequence[str] | None = None, max_length: int = 128,
                   label_column: str = "label") -> Any:
    """:func:`tokenize_dataset` with labels kept (the shape evaluation expects), read from ``label_column``."""
    if label_column not in _LABEL_COLUMNS and label_column in dataset.column_names:
        dataset = dataset.rename_column(label_column, "labels")
    return tokenize_dataset(dataset, tokenizer, text_columns, max_length, keep_labels=True)
