"""Tokenizing text datasets for pruning and evaluation: which columns hold the text, and one tokenizer call."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["tokenize_pairs"]


def tokenize_pairs(dataset: Any, tokenizer: Any, text_columns: Sequence[str] | None = None, max_length: int = 128,
                   label_column: str = "label") -> Any:
    """Tokenize a (pair) text dataset, keeping only model inputs and the label (the shape evaluation expects)."""
    columns = list(text_columns) if text_columns else _default_text_columns(dataset.column_names)
    missing = [c for c in columns if c not in dataset.column_names]
    if missing:
        raise ValueError(f"Text columns {missing} are not in the dataset (columns: {dataset.column_names}).")
    keep = {label_column}
    return dataset.map(lambda b: tokenizer(*[b[c] for c in columns], truncation=True, max_length=max_length),
                       batched=True, remove_columns=[c for c in dataset.column_names if c not in keep])


def _default_text_columns(columns: Sequence[str]) -> list[str]:
    for candidate in (("premise", "hypothesis"), ("sentence1", "sentence2"), ("question1", "question2"),
                      ("text",), ("sentence",)):
        if all(c in columns for c in candidate):
            return list(candidate)
    raise ValueError(f"Cannot tell the text columns among {list(columns)}; pass text_columns.")
