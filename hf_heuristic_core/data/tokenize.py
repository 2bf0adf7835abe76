"""The one tokenizer of the package: which columns hold the text, and one tokenizer call over a dataset.

The CLI (`prune`, `effective-size`), the study and data specs all tokenize through here, so the same table gives
the same token ids everywhere (and a runs folder's data spec rebuilds exactly the sets its runs were scored on).
"""

from __future__ import annotations

import hashlib
import json
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
    removed = [c for c in dataset.column_names if c != label and c not in MODEL_INPUTS]
    fingerprint = _map_fingerprint(dataset, tokenizer, chosen, max_length, removed)
    encoded = dataset.map(lambda batch: tokenizer(*[batch[c] for c in chosen], truncation=True,
                                                  max_length=max_length),
                          batched=True, desc=desc, remove_columns=removed,
                          **({"new_fingerprint": fingerprint} if fingerprint else {}))
    if label == "label":
        encoded = encoded.rename_column("label", "labels")
    return encoded


def _map_fingerprint(dataset: Any, tokenizer: Any, columns: Sequence[str], max_length: int,
                     removed: Sequence[str]) -> str | None:
    """The fingerprint `datasets` gives the tokenized table, computed from what decides its contents: the input
    table's fingerprint, the whole fast tokenizer (its serialized pipeline and vocabulary), its Python-side settings,
    the columns and the length. Without it `datasets` hashes the tokenizer object by pickling it, about 0.5-1 s per
    call for a BERT vocabulary (the study tokenizes nine tables). None (let `datasets` hash) for a slow tokenizer or
    a table without a fingerprint."""
    parent = getattr(dataset, "_fingerprint", None)
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if parent is None or backend is None:
        return None
    try:
        settings = json.dumps({"class": type(tokenizer).__qualname__, "inputs": list(tokenizer.model_input_names),
                               "init": tokenizer.init_kwargs, "padding_side": tokenizer.padding_side,
                               "truncation_side": tokenizer.truncation_side, "columns": list(columns),
                               "max_length": max_length, "removed": list(removed)}, sort_keys=True, default=repr)
        pipeline = backend.to_str()
    except Exception:   # noqa: BLE001 - an unusual tokenizer: let datasets hash it the slow way
        return None
    digest = hashlib.sha256()
    for part in (parent, settings, pipeline):
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()[:32]


def tokenize_pairs(dataset: Any, tokenizer: Any, text_columns: Sequence[str] | None = None, max_length: int = 128,
                   label_column: str = "label") -> Any:
    """:func:`tokenize_dataset` with labels kept (the shape evaluation expects), read from ``label_column``."""
    if label_column not in _LABEL_COLUMNS and label_column in dataset.column_names:
        dataset = dataset.rename_column(label_column, "labels")
    return tokenize_dataset(dataset, tokenizer, text_columns, max_length, keep_labels=True)
