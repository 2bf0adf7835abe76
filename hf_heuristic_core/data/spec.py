"""Data specs: how the training and evaluation data of a runs folder were built, so `analyze` can rebuild them."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .tokenize import tokenize_dataset
from .generate import generate_nli
from .hans import filter_subcases, load_hans
from .pairs import load_mnli
from .study_spec import spec_from_study_record
from .tables import load_table

__all__ = ["MissingDataSpecError", "datasets_from_spec", "eval_sets_from_spec"]


class MissingDataSpecError(ValueError):
    """A runs folder records no data spec from which its evaluation sets could be rebuilt."""


def load_source(entry: Mapping[str, Any], generated: dict[str, Any] | None = None) -> Any:
    """One raw (untokenized) dataset from a spec entry; ``generated`` caches `generate_nli` calls across entries."""
    generated = {} if generated is None else generated
    source = entry.get("source")
    if source == "generate_nli":
        kwargs = dict(entry.get("kwargs") or {})
        key = json.dumps(kwargs, sort_keys=True, default=str)
        if key not in generated:
            generated[key] = generate_nli(**kwargs)
        dataset = generated[key][entry.get("split", "ood_eval")]
        if entry.get("subcases"):
            dataset = filter_subcases(dataset, entry["subcases"])
    elif source == "hans":
        dataset = load_hans(entry["path"], split=entry.get("split", "validation"), subcases=entry.get("subcases"))
    elif source == "mnli":
        dataset = load_mnli(entry.get("path", "nyu-mll/glue"), split=entry.get("split", "validation_matched"))
    elif source == "table":
        dataset = load_table(str(entry["path"]), entry.get("config"), entry.get("split", "train"))
    else:
        raise ValueError(f"Unknown data source {source!r} in {dict(entry)}; use 'generate_nli' (with 'kwargs' and "
                         "'split'), 'hans' (with 'path'), 'mnli' (with 'path', 'split') or 'table' (with 'path', a "
                         "Hub id / files / folder).")
    if entry.get("shuffle_seed") is not None:
        dataset = dataset.shuffle(seed=int(entry["shuffle_seed"]))
    limit = entry.get("limit")
    if limit is not None:
        dataset = dataset.select(range(min(int(limit), len(dataset))))
    return dataset


def datasets_from_spec(spec: Mapping[str, Any], tokenizer: Any) -> tuple[Any, dict[str, Any]]:
    """Build the tokenized training data and evaluation sets that a data spec describes.

    Spec: `{"text_columns": [...], "max_length": 128, "train": ENTRY, "eval_sets": {name: ENTRY}}` where ENTRY is
    `{"source": "generate_nli", "kwargs": {...generate_nli kwargs}, "split": "ood_eval", "subcases": [...]}`,
    `{"source": "hans", "path": ..., "subcases": [...]}`, `{"source": "mnli", "path": ..., "split": ...}` or
    `{"source": "table", "path": ..., "split": ...}`, each with an optional `"shuffle_seed"` (shuffle first) and
    `"limit"` (then keep the first N rows). Passing the same spec to `prune_many(data_spec=...)` lets `analyze`
    rebuild exactly these sets later; the study writes this format too. Older study records are accepted
    (see :func:`normalize_spec`). Returns `(train or None, {name: eval set})`, tokenized by
    :func:`~hf_heuristic_core.data.tokenize.tokenize_dataset` (labels as `labels`).
    """
    spec = normalize_spec(spec)
    generated: dict[str, Any] = {}
    columns, max_length = spec.get("text_columns"), int(spec.get("max_length", 128))

    def build(entry: Mapping[str, Any]) -> Any:
        return tokenize_dataset(load_source(entry, generated), tokenizer, columns, max_length)

    train = build(spec["train"]) if spec.get("train") else None
    eval_sets = {name: build(entry) for name, entry in (spec.get("eval_sets") or {}).items()}
    return train, eval_sets


def normalize_spec(spec: Mapping[str, Any]) -> Mapping[str, Any]:
    """A data spec in today's format: a study record written before the one format
    (``{"train", "id_eval", "ood_eval", "generated", "max_length"}``) becomes the spec that study writes now."""
    if "eval_sets" in spec or "generated" not in spec:
        return spec
    return spec_from_study_record(spec)


def eval_sets_from_spec(spec: Mapping[str, Any] | None, tokenizer: Any) -> dict[str, Any]:
    """The tokenized evaluation sets of a data spec as a runs folder's manifest records it."""
    spec = normalize_spec(spec) if spec else spec
    if not spec or not spec.get("eval_sets"):
        raise MissingDataSpecError("manifest.json has no data spec to rebuild the evaluation sets (pass data_spec= "
                                   "to prune_many, or eval_sets= here)")
    _, eval_sets = datasets_from_spec({**spec, "train": None}, tokenizer)
    return eval_sets
