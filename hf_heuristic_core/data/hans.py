"""HANS (McCoy et al. 2019), the out-of-domain NLI test: one schema for every source, and subcase names.

:func:`load_hans` normalizes the Hub version, local copies and the original ``heuristics_*_set.txt`` release to
:data:`HANS_COLUMNS`. Subcase names are made filesystem-safe the way the Heuristic Core paper writes them
(``ln_subject/object_swap`` -> ``ln_subject-object_swap``); the original spellings, short names and the paper's
abbreviations (``SO-Swap`` ...) are accepted wherever a subcase name is.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Iterable, Sequence
from typing import Any

from datasets import ClassLabel, Dataset, DatasetDict, Features, Value

from .labels import HANS_LABELS, label_ids, nli_label_names
from .tables import column, from_columns, load_table, rename_to

__all__ = [
    "HANS_ABBREVIATIONS",
    "HANS_COLUMNS",
    "PAPER_OOD_SUBCASES",
    "filter_subcases",
    "hans_subsets",
    "load_hans",
    "nli_features",
    "resolve_subcases",
]

HANS_COLUMNS: tuple[str, ...] = (
    "premise", "hypothesis", "label", "heuristic", "subcase", "subcase_full", "counter_heuristic",
)

HANS_ABBREVIATIONS: dict[str, str] = {
    # Table 1 of the Heuristic Core paper (the four subcases its main text studies).
    "SO-Swap": "lexical_overlap_ln_subject-object_swap",
    "Prep": "lexical_overlap_ln_preposition",
    "Embed-If": "constituent_cn_embedded_under_if",
    "Embed-Verb": "constituent_cn_embedded_under_verb",
    # Appendix (GPT-2 "OOD-E" split): "Rel-Clause [SE]" and "Embed-Since [CE]".
    "Rel-Clause": "subsequence_se_relative_clause_on_obj",
    "Embed-Since": "constituent_ce_embedded_under_since",
}
"""The paper's subcase abbreviations, accepted wherever a subcase name is."""

PAPER_OOD_SUBCASES: tuple[str, ...] = tuple(HANS_ABBREVIATIONS[k] for k in ("SO-Swap", "Prep", "Embed-If", "Embed-Verb"))
"""The four HANS subcases of the paper's OOD evaluation set (full names)."""

_HEURISTICS = ("lexical_overlap", "subsequence", "constituent")
_COUNTER_PREFIX = re.compile(r"^[lsc]n_")
_HANS_HUB_ALIASES = {"hans": "jhu-cogsci/hans"}


def nli_features(with_template: bool = False) -> Features:
    """The one schema every HANS-like dataset in this package has (so analyses can mix sources)."""
    spec: dict[str, Any] = {
        "premise": Value("string"),
        "hypothesis": Value("string"),
        "label": ClassLabel(names=nli_label_names),
        "heuristic": Value("string"),
        "subcase": Value("string"),
        "subcase_full": Value("string"),
        "counter_heuristic": Value("bool"),
    }
    if with_template:
        spec["template"] = Value("string")
    return Features(spec)


def _short_subcase(heuristic: str, subcase: str) -> tuple[str, str]:
    """Return ``(heuristic, short subcase)`` with '/' made '-' and any heuristic prefix removed."""
    sub = str(subcase).strip().replace("/", "-")
    heur = str(heuristic or "").strip()
    if not heur:
        heur = next((h for h in _HEURISTICS if sub.startswith(h + "_")), "")
    if heur and sub.startswith(heur + "_"):
        sub = sub[len(heur) + 1:]
    if not heur:
        raise ValueError(f"cannot tell the heuristic of subcase {subcase!r}: no 'heuristic' column and no prefix")
    return heur, sub


def _normalize_hans(dataset: Dataset) -> Dataset:
    """Bring any HANS-like table (jsonl copy, Hub version with parse columns, original txt release) to the
    package schema; builds a fresh in-memory table so nothing is cached next to the user's files."""
    dataset = rename_to(dataset, "premise", ("sentence1", "text_a"))
    dataset = rename_to(dataset, "hypothesis", ("sentence2", "text_b"))
    dataset = rename_to(dataset, "label", ("gold_label", "labels"))
    if "subcase" not in dataset.column_names:
        raise ValueError(f"HANS data needs a 'subcase' column; columns: {dataset.column_names}")
    labels = label_ids(dataset, HANS_LABELS, n_classes=3)
    if any(v < 0 for v in labels):
        raise ValueError("HANS data has unlabeled rows")
    labels = [0 if v == 0 else 1 for v in labels]
    heuristics_in = column(dataset, "heuristic") if "heuristic" in dataset.column_names else [""] * len(dataset)
    pairs = [_short_subcase(h, s) for h, s in zip(heuristics_in, column(dataset, "subcase"))]
    columns: dict[str, list[Any]] = {
        "premise": column(dataset, "premise"),
        "hypothesis": column(dataset, "hypothesis"),
        "label": labels,
        "heuristic": [h for h, _ in pairs],
        "subcase": [s for _, s in pairs],
        "subcase_full": [f"{h}_{s}" for h, s in pairs],
        "counter_heuristic": [bool(_COUNTER_PREFIX.match(s)) for _, s in pairs],
    }
    with_template = "template" in dataset.column_names
    if with_template:
        columns["template"] = [str(t) for t in column(dataset, "template")]
    return from_columns(columns, nli_features(with_template))


def _name_key(name: str) -> str:
    return str(name).strip().replace("/", "-").lower()


def resolve_subcases(requested: str | Iterable[str], available: Iterable[tuple[str, str]]) -> list[str]:
    """Map requested names (full, short, or paper abbreviation; case-insensitive; '/' or '-') to the full
    subcase names in ``available`` (pairs of ``(full, short)``). Unknown names raise a ValueError that lists
    the valid ones and suggests close matches."""
    names = [requested] if isinstance(requested, str) else list(requested)
    pairs = sorted(set(available))
    lookup: dict[str, list[str]] = {}
    for full, short in pairs:
        lookup.setdefault(_name_key(full), []).append(full)
        lookup.setdefault(_name_key(short), []).append(full)
    abbreviations = {_name_key(a): (a, f) for a, f in HANS_ABBREVIATIONS.items()}
    resolved: list[str] = []
    for name in names:
        key = _name_key(name)
        if key in lookup:
            hits = lookup[key]
        elif key in abbreviations:
            abbr, full = abbreviations[key]
            if _name_key(full) not in lookup:
                raise ValueError(f"subcase abbreviation {abbr!r} means {full!r}, which this dataset does not contain; "
                                 f"valid subcases: {[f for f, _ in pairs]}")
            hits = lookup[_name_key(full)]
        else:
            raise ValueError(_unknown_subcase_message(name, pairs))
        resolved.extend(h for h in hits if h not in resolved)
    return resolved


def _unknown_subcase_message(name: str, pairs: Sequence[tuple[str, str]]) -> str:
    display = [f for f, _ in pairs] + [s for _, s in pairs] + [
        a for a, f in HANS_ABBREVIATIONS.items() if f in {p[0] for p in pairs}
    ]
    by_key = {_name_key(d): d for d in display}
    close = difflib.get_close_matches(_name_key(name), list(by_key), n=3, cutoff=0.6)
    hint = f" Did you mean {', '.join(repr(by_key[c]) for c in close)}?" if close else ""
    abbrs = [a for a in HANS_ABBREVIATIONS if HANS_ABBREVIATIONS[a] in {p[0] for p in pairs}]
    return (f"unknown subcase {name!r}.{hint} Valid full names: {[f for f, _ in pairs]}; "
            f"short names: {sorted({s for _, s in pairs})}; abbreviations: {abbrs}")


def _subcase_pairs(dataset: Dataset) -> list[tuple[str, str]]:
    return sorted(set(zip(column(dataset, "subcase_full"), column(dataset, "subcase"))))


def filter_subcases(dataset: Dataset, subcases: str | Iterable[str]) -> Dataset:
    """Rows of the requested subcases (names as in :func:`resolve_subcases`), original order kept."""
    wanted = set(resolve_subcases(subcases, _subcase_pairs(dataset)))
    return dataset.select([i for i, full in enumerate(column(dataset, "subcase_full")) if full in wanted])


def hans_subsets(dataset: Dataset) -> dict[str, Dataset]:
    """One dataset per full subcase name (sorted), for per-subcase accuracy tables."""
    if "subcase_full" in dataset.column_names:
        keys = column(dataset, "subcase_full")
    else:
        pairs = zip(column(dataset, "heuristic"), column(dataset, "subcase"))
        keys = ["_".join(_short_subcase(h, s)) for h, s in pairs]
    groups: dict[str, list[int]] = {}
    for i, key in enumerate(keys):
        groups.setdefault(key, []).append(i)
    return {key: dataset.select(groups[key]) for key in sorted(groups)}


def load_hans(path_or_hub_id: str | os.PathLike[str] | Dataset | DatasetDict = "hans", split: str = "validation",
              subcases: str | Iterable[str] | None = None, **load_kwargs: Any) -> Dataset:
    """Load HANS from the Hub or a local copy, normalized to :data:`HANS_COLUMNS` (+ ``template``).

    ``path_or_hub_id``: ``"hans"`` / ``"jhu-cogsci/hans"``; a data file; a folder of per-split files
    (``validation.jsonl.gz``, ``validation-00000-of-00001.parquet``, the original ``heuristics_evaluation_set.txt``);
    a ``save_to_disk`` folder; or an already loaded Dataset/DatasetDict. ``split``: ``"train"``, ``"validation"``
    (HANS's evaluation set) or ``"all"``; ignored for a single file. ``subcases``: names to keep — full
    (``lexical_overlap_ln_subject-object_swap``), short (``ln_subject-object_swap``, or HANS's own
    ``ln_subject/object_swap``) or the paper's abbreviations (``SO-Swap``, ``Prep``, ``Embed-If``, ``Embed-Verb``).
    Extra keyword arguments go to :func:`datasets.load_dataset` (e.g. ``revision``) for Hub ids.
    """
    raw = load_table(path_or_hub_id, None, split, what="HANS data", hub_example="jhu-cogsci/hans",
                     hub_aliases=_HANS_HUB_ALIASES, **load_kwargs)
    dataset = _normalize_hans(raw)
    return dataset if subcases is None else filter_subcases(dataset, subcases)
