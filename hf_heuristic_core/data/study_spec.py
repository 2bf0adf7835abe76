"""The heuristic-core study's data as a data spec (the format `prune_many` writes and `analyze` reads).

The study builds its sets *from* this spec and records the same spec in its runs folder, so `analyze` on the
study's runs rebuilds exactly the sets the runs were scored on. Study folders written before there was one
format recorded ``{"train", "id_eval", "ood_eval", "generated", "max_length"}``; :func:`spec_from_study_record`
turns that record into the spec the study would write today.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from .hans import hans_subsets, load_hans
from .tables import column, load_table
from .templates import GENERATED_SUBCASES

__all__ = ["MNLI_IDS", "OLD_STUDY_KEYS", "nli_study_spec", "spec_from_study_record"]

MNLI_IDS = ("mnli", "nyu-mll/glue", "glue", "nyu-mll/multi_nli", "multi_nli")
"""Names that mean MNLI (train split, and its matched + mismatched validation sets as two ID cases)."""

OLD_STUDY_KEYS = frozenset({"train", "id_eval", "ood_eval", "generated", "max_length"})
"""The keys of the data record written by studies before the one data-spec format."""


def _mnli_id(name: str) -> str:
    return "nyu-mll/glue" if name in ("mnli", "glue") else name


def _ood_entries(source: str, per_case: int, seed: int) -> dict[str, dict[str, Any]]:
    """One entry per counter-heuristic subcase of a HANS-shaped source (each shuffled with ``seed`` and capped at
    ``per_case``), or one ``ood`` entry for a table without subcases."""
    capped = {"shuffle_seed": seed, "limit": per_case}
    try:
        table, kind = load_hans(source, split="validation"), "hans"
    except (ValueError, FileNotFoundError):
        table, kind = load_table(source, split="validation"), "table"
    base = {"source": kind, "path": source, "split": "validation"}
    if "subcase_full" not in table.column_names:
        return {"ood": {**base, **capped}}
    if "counter_heuristic" in table.column_names:   # HANS-shaped: the non-entailed subcases, where the heuristic fails
        flags = column(table, "counter_heuristic")
        table = table.select([i for i, flag in enumerate(flags) if flag])
    return {name: {**base, "subcases": [name], **capped} for name in hans_subsets(table)}


def nli_study_spec(train: str | None = None, id_eval: str | None = None, ood_eval: str | None = None, *,
                   train_size: int = 4000, id_eval_size: int = 400, ood_per_case: int = 100,
                   counter_heuristic_fraction: float = 0.05, seed: int = 0, max_length: int = 40) -> dict[str, Any]:
    """The data spec of a study: generated data unless files / Hub ids are named; OOD split per subcase.

    Generated sets: ``train``, ``id`` (the training distribution) and one set per counter-heuristic subcase of
    :func:`generate_nli`'s OOD split. An MNLI id gives two ID cases (``mnli_matched``, ``mnli_mismatched``), as
    in the paper; a user OOD source is read once here to list its subcases.
    """
    generated = {"train_size": train_size, "id_eval_size": id_eval_size, "ood_eval_size_per_subcase": ood_per_case,
                 "counter_heuristic_fraction": counter_heuristic_fraction, "seed": seed}

    def make(split: str, **extra: Any) -> dict[str, Any]:
        return {"source": "generate_nli", "kwargs": generated, "split": split, **extra}

    if train is None:
        train_entry = make("train")
    elif train in MNLI_IDS:
        train_entry = {"source": "mnli", "path": _mnli_id(train), "split": "train"}
    else:
        train_entry = {"source": "table", "path": train, "split": "train"}
    if id_eval is None:
        id_sets = {"id": make("id_eval")}
    elif id_eval in MNLI_IDS:
        id_sets = {f"mnli_{part}": {"source": "mnli", "path": _mnli_id(id_eval), "split": f"validation_{part}"}
                   for part in ("matched", "mismatched")}
    else:
        id_sets = {"id": {"source": "table", "path": id_eval, "split": "validation"}}
    if ood_eval is not None:
        ood_sets = _ood_entries(ood_eval, ood_per_case, seed)
    elif ood_per_case > 0:
        counter = sorted(name for name, spec in GENERATED_SUBCASES.items() if spec.counter_heuristic)
        ood_sets = {name: make("ood_eval", subcases=[name]) for name in counter}
    else:
        ood_sets = {}
    clash = set(id_sets) & set(ood_sets)
    if clash:
        raise ValueError(f"in-domain and out-of-domain cases share the names {sorted(clash)}; rename the files.")
    return {"text_columns": None, "max_length": max_length, "train": train_entry,
            "eval_sets": {**id_sets, **ood_sets}, "groups": {"id": list(id_sets), "ood": list(ood_sets)}}


def spec_from_study_record(record: Mapping[str, Any]) -> dict[str, Any]:
    """The data spec equivalent to a data record of an older study folder (see :data:`OLD_STUDY_KEYS`)."""
    missing = sorted({"generated", "max_length"} - set(record))
    if missing:
        raise ValueError(f"not a study data record: it lacks {missing} (keys: {sorted(record)}); expected "
                         f"{sorted(OLD_STUDY_KEYS)} or a data spec with 'eval_sets'.")
    generated = dict(record["generated"])
    return nli_study_spec(record.get("train"), record.get("id_eval"), record.get("ood_eval"),
                          train_size=int(generated.get("train_size", 4000)),
                          id_eval_size=int(generated.get("id_eval_size", 400)),
                          ood_per_case=int(generated.get("ood_per_case", 100)),
                          counter_heuristic_fraction=float(generated.get("counter_heuristic_fraction", 0.05)),
                          seed=int(generated.get("seed", 0)), max_length=int(record["max_length"]))
