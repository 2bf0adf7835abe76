"""Evaluation and training data for heuristic-core studies.

Three groups of helpers live here:

* **HANS** (McCoy et al. 2019), the out-of-domain NLI test: :func:`load_hans` reads it from the Hub
  (``hans`` / ``jhu-cogsci/hans``) or from a local copy (JSON lines, parquet, arrow, CSV/TSV, the original
  ``heuristics_*_set.txt`` release, or a ``save_to_disk`` folder) and normalizes every source to one schema::

      premise, hypothesis, label (0 entailment / 1 non-entailment), heuristic, subcase (short, e.g.
      "ln_subject-object_swap"), subcase_full ("lexical_overlap_ln_subject-object_swap"),
      counter_heuristic (True for the ln_/sn_/cn_ subcases, where the heuristic gives the wrong answer)
      [+ template, when the source has it]

  Subcase names are made filesystem-safe the way the Heuristic Core paper writes them: the original HANS names
  ``ln_subject/object_swap``, ``sn_NP/S``, ``sn_NP/Z`` become ``ln_subject-object_swap``, ``sn_NP-S``, ``sn_NP-Z``
  (the original spellings are still accepted when filtering). :func:`filter_subcases` and :func:`hans_subsets`
  select and split by subcase using full names, short names or the paper's abbreviations (``SO-Swap`` ...).
* **In-domain / paraphrase sets**: :func:`load_mnli`, :func:`load_qqp`, :func:`load_paws` are thin wrappers over
  :func:`datasets.load_dataset` that also accept local paths and normalize column names and label order, so a
  model's label ids mean the same thing on every set.
* **An offline generator**, :func:`generate_nli`, of HANS-style premise/hypothesis pairs built from this project's
  own templates and vocabulary (:data:`GENERATOR_VOCABULARY`), for runs without network access and for controlled
  training-dynamics studies.

Design of the generated data (why it looks the way it does)
-----------------------------------------------------------
The Heuristic Core paper observes that a model fine-tuned on MNLI first learns the lexical-overlap heuristic
(in-domain accuracy saturates early) and only much later the behaviour that generalizes to HANS's
counter-heuristic subcases, and that the *effective size* of the model grows in between. :func:`generate_nli`
builds a training set with the same pressure, small enough to train in minutes:

* ``1 - counter_heuristic_fraction`` of the training examples are *heuristic-friendly*: high-overlap pairs that
  are entailed (the ``*e_`` subcases: passive, around a relative clause, PP on the object, factive verb, factive
  adverb) and low-overlap pairs that are not (the ``control`` subcases ``xn_unrelated`` and
  ``xn_partial_overlap``, whose hypotheses talk about other people or other actions). On these, "all hypothesis
  words occur in the premise => entailment" is always right.
* a small ``counter_heuristic_fraction`` (default 5%) are *counter-heuristic*: every hypothesis word occurs in
  the premise, yet the pair is not entailed (the ``*n_`` subcases). Only these force the model past the heuristic,
  and because they are rare, that happens late in training.
* labels are balanced 50/50 in every training-like split.
* ``id_eval`` has the training distribution (disjoint examples); ``ood_eval`` holds the counter-heuristic subcases,
  balanced per subcase, on which a pure overlap heuristic scores 0%.

By default the counter-heuristic training examples come from the same templates as the OOD set (the OOD set is
"out of distribution" because those templates are rare in training, as in MNLI). Pass ``counter_subcases`` to
hold some templates out of training entirely and measure generalization to unseen constructions: the control
premises are drawn only from templates of the training mix, so held-out constructions (a conditional, a
non-factive verb, ...) never occur in training at all.
"""

from __future__ import annotations

import csv
import difflib
import gzip
import json
import os
import random
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets
import numpy as np
from datasets import ClassLabel, Dataset, DatasetDict, Features, Value

__all__ = [
    "nli_label_names",
    "mnli_label_names",
    "paraphrase_label_names",
    "NLI_COLUMNS",
    "PARAPHRASE_COLUMNS",
    "HANS_COLUMNS",
    "HANS_ABBREVIATIONS",
    "PAPER_OOD_SUBCASES",
    "GENERATED_SUBCASES",
    "GENERATOR_VOCABULARY",
    "GeneratedSubcase",
    "Vocabulary",
    "load_hans",
    "filter_subcases",
    "resolve_subcases",
    "hans_subsets",
    "load_mnli",
    "load_qqp",
    "load_paws",
    "generate_nli",
    "collapse_nli_predictions",
    "entailment_id_from_labels",
]

# --------------------------------------------------------------------------------------------------------------
# Names and schemas
# --------------------------------------------------------------------------------------------------------------

nli_label_names: list[str] = ["entailment", "non-entailment"]
"""Two-way NLI labels used by HANS and by :func:`generate_nli` (id 0 = entailment)."""

mnli_label_names: list[str] = ["entailment", "neutral", "contradiction"]
"""Three-way MNLI labels in GLUE order; :func:`load_mnli` reorders other sources to this."""

paraphrase_label_names: list[str] = ["not_duplicate", "duplicate"]
"""QQP's label order; PAWS ("not paraphrase" / "paraphrase") is mapped onto it so one model reads both."""

NLI_COLUMNS: tuple[str, str] = ("premise", "hypothesis")
PARAPHRASE_COLUMNS: tuple[str, str] = ("sentence1", "sentence2")
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
_GLUE_IDS = {"glue", "nyu-mll/glue"}


def _nli_features(with_template: bool = False) -> Features:
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


def _column(dataset: Dataset, name: str) -> list[Any]:
    """A column as a Python list; one batched read (iterating a ``Column`` decodes row by row, ~10x slower)."""
    return dataset.select_columns([name])[:][name]


def _from_columns(columns: Mapping[str, list[Any]], features: Features) -> Dataset:
    """An in-memory Dataset built straight through Arrow (``Dataset.from_dict`` encodes row by row)."""
    import pyarrow as pa
    from datasets.table import InMemoryTable

    table = pa.Table.from_pydict(dict(columns), schema=features.arrow_schema)
    return Dataset(InMemoryTable(table), info=datasets.DatasetInfo(features=features))


# --------------------------------------------------------------------------------------------------------------
# Reading local files and folders
# --------------------------------------------------------------------------------------------------------------

_DATA_SUFFIXES = (".jsonl.gz", ".json.gz", ".jsonl", ".json", ".parquet", ".arrow", ".csv", ".tsv", ".txt")
_METADATA_NAMES = {"dataset_info.json", "state.json", "dataset_dict.json", "dataset_infos.json"}
_SPLIT_ALIASES = {
    "train": {"train", "training"},
    "validation": {"validation", "valid", "val", "dev", "eval", "evaluation"},
    "test": {"test"},
}
_KNOWN_SPLIT_WORDS = set().union(*_SPLIT_ALIASES.values())
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?")


def _data_suffix(name: str) -> str | None:
    lower = name.lower()
    return next((s for s in _DATA_SUFFIXES if lower.endswith(s)), None)


def _stem(path: Path) -> str:
    suffix = _data_suffix(path.name) or path.suffix
    return path.name[: len(path.name) - len(suffix)]


def _data_files(folder: Path) -> list[Path]:
    """Readable data files under ``folder``, sorted for determinism; skips hidden, README and metadata files."""
    found = []
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder)
        if any(part.startswith(".") for part in rel.parts) or not path.is_file():
            continue
        if path.name in _METADATA_NAMES or path.name.lower().startswith(("readme", "license")):
            continue
        if _data_suffix(path.name):
            found.append(path)
    return found


def _split_tokens(text: str) -> set[str]:
    return {t for t in re.split(r"[-_.\s/\\]+", text.lower()) if t}


def _split_aliases(split: str) -> set[str]:
    key = split.lower()
    for canonical, aliases in _SPLIT_ALIASES.items():
        if key == canonical or key in aliases:
            return aliases | {canonical}
    return {key}


def _matches_split_exactly(rel: Path, split: str) -> bool:
    stem = _stem(rel)
    return stem == split or stem.startswith(split + "-") or split in rel.parts[:-1]


def _files_for_split(folder: Path, split: str) -> list[Path]:
    """Pick the files of one split: exact names first (``validation.jsonl.gz``, Hub shards
    ``validation-00000-of-00001.parquet``, ``validation/…``), then aliases (``dev``, ``heuristics_evaluation_set``),
    then, when no file names any split at all, every file (a folder holding one unsplit dataset)."""
    files = _data_files(folder)
    if not files:
        raise FileNotFoundError(
            f"no data files under {folder} (looked for {', '.join(_DATA_SUFFIXES)} files or a save_to_disk folder)"
        )
    if split == "all":
        return files
    rels = [f.relative_to(folder) for f in files]
    exact = [f for f, r in zip(files, rels) if _matches_split_exactly(r, split)]
    if exact:
        return exact
    aliases = _split_aliases(split)
    by_alias = [f for f, r in zip(files, rels) if _split_tokens(str(r.with_name(_stem(r)))) & aliases]
    if by_alias:
        return by_alias
    if not any(_split_tokens(str(r.with_name(_stem(r)))) & _KNOWN_SPLIT_WORDS for r in rels):
        return files
    raise ValueError(
        f"no file for split {split!r} under {folder}; files found: {[str(r) for r in rels]} "
        "(pass split='all' to read every file)"
    )


def _read_json(path: Path) -> Dataset:
    opener = gzip.open if path.name.lower().endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as handle:
        text = handle.read()
    stripped = text.lstrip()
    if stripped.startswith("["):
        return Dataset.from_list(json.loads(text))
    try:
        data = json.loads(text)  # one JSON object: column-oriented {"col": [...]} or a single record
    except json.JSONDecodeError:
        return Dataset.from_list([json.loads(line) for line in text.splitlines() if line.strip()])
    if isinstance(data, dict) and data and all(isinstance(v, list) for v in data.values()):
        return Dataset.from_dict(data)
    return Dataset.from_list([data])


def _read_arrow(path: Path) -> Dataset:
    """Arrow files from ``save_to_disk`` are IPC *streams*; files from ``pyarrow.feather`` are IPC *files*."""
    import pyarrow as pa
    from datasets.table import InMemoryTable

    with pa.memory_map(str(path)) as source:
        try:
            table = pa.ipc.open_stream(source).read_all()
        except pa.ArrowInvalid:
            source.seek(0)
            table = pa.ipc.open_file(source).read_all()
    return Dataset(InMemoryTable(table))


def _read_parquet(path: Path) -> Dataset:
    import pyarrow.parquet as pq
    from datasets.table import InMemoryTable

    return Dataset(InMemoryTable(pq.read_table(path)))


def _read_delimited(path: Path, sep: str) -> Dataset:
    import pandas as pd

    quoting = csv.QUOTE_NONE if sep == "\t" else csv.QUOTE_MINIMAL
    frame = pd.read_csv(path, sep=sep, quoting=quoting, keep_default_na=False, na_values=[])
    return Dataset.from_pandas(frame, preserve_index=False)


def _read_file(path: Path) -> Dataset:
    suffix = _data_suffix(path.name)
    if suffix in (".jsonl.gz", ".json.gz", ".jsonl", ".json"):
        return _read_json(path)
    if suffix == ".parquet":
        return _read_parquet(path)
    if suffix == ".arrow":
        return _read_arrow(path)
    if suffix == ".csv":
        return _read_delimited(path, ",")
    if suffix in (".tsv", ".txt"):
        return _read_delimited(path, "\t")
    raise ValueError(f"unsupported data file {path} (supported: {', '.join(_DATA_SUFFIXES)})")


def _concat(parts: Sequence[Dataset]) -> Dataset:
    return parts[0] if len(parts) == 1 else datasets.concatenate_datasets(list(parts))


def _pick_split(dataset_dict: DatasetDict, split: str, where: str) -> Dataset:
    if split == "all":
        return _concat([dataset_dict[k] for k in dataset_dict])
    if split in dataset_dict:
        return dataset_dict[split]
    aliases = _split_aliases(split)
    matches = [k for k in dataset_dict if _split_tokens(k) & aliases]
    if matches:
        return _concat([dataset_dict[k] for k in matches])
    raise ValueError(f"split {split!r} not in {where}; available splits: {list(dataset_dict)}")


def _load_local(path: Path, split: str) -> Dataset:
    """Read one split from a data file, a folder of data files, or a ``save_to_disk`` folder."""
    if path.is_file():
        return _read_file(path)
    if (path / "dataset_dict.json").exists():
        return _pick_split(datasets.load_from_disk(str(path)), split, str(path))
    if (path / "state.json").exists() and (path / "dataset_info.json").exists():
        return datasets.load_from_disk(str(path))
    return _concat([_read_file(f) for f in _files_for_split(path, split)])


def _looks_like_path(text: str) -> bool:
    if text.startswith((".", "/", "~", "\\")) or "\\" in text or _data_suffix(text):
        return True
    return _HUB_ID.fullmatch(text) is None


def _resolve_source(source: str | os.PathLike[str], what: str, hub_example: str) -> tuple[str, Any]:
    """Decide between a local path and a Hub id; a path-like string that does not exist is an error,
    not a Hub lookup, so a typo in a path fails fast and says what was looked for."""
    path = Path(source).expanduser()
    if path.exists():
        return "local", path
    if isinstance(source, os.PathLike) or _looks_like_path(str(source)):
        raise FileNotFoundError(
            f"{what} not found: {path.resolve()} does not exist. Expected a data file "
            f"({', '.join(_DATA_SUFFIXES)}), a folder of such files (one per split, e.g. validation.jsonl.gz), "
            f"a folder written by Dataset/DatasetDict.save_to_disk, or a Hub dataset id such as {hub_example!r}."
        )
    return "hub", str(source)


def _load_hub(hub_id: str, config: str | None, split: str, **load_kwargs: Any) -> Dataset:
    """``datasets.load_dataset`` with ``split='all'`` meaning every split, concatenated."""
    args = (hub_id,) if config is None else (hub_id, config)
    try:
        if split == "all":
            loaded = datasets.load_dataset(*args, **load_kwargs)
            return _concat([loaded[k] for k in loaded]) if isinstance(loaded, Mapping) else loaded
        return datasets.load_dataset(*args, split=split, **load_kwargs)
    except Exception as err:  # keep the type, add the hint
        if hasattr(err, "add_note"):
            err.add_note(
                f"hf_heuristic_core: {hub_id!r} was treated as a Hub id because no local path of that name exists; "
                "offline, pass a local copy instead."
            )
        raise


def _load_any(source: Any, split: str, config: str | None, what: str, hub_example: str,
              hub_aliases: Mapping[str, str] | None = None, **load_kwargs: Any) -> Dataset:
    if isinstance(source, DatasetDict):
        return _pick_split(source, split, "the given DatasetDict")
    if isinstance(source, Dataset):
        return source
    kind, where = _resolve_source(source, what, hub_example)
    if kind == "local":
        return _load_local(where, split)
    hub_id = (hub_aliases or {}).get(where.lower(), where)
    return _load_hub(hub_id, config, split, **load_kwargs)


# --------------------------------------------------------------------------------------------------------------
# Column and label normalization
# --------------------------------------------------------------------------------------------------------------


def _rename_to(dataset: Dataset, target: str, candidates: Sequence[str]) -> Dataset:
    if target in dataset.column_names:
        return dataset
    for name in candidates:
        if name in dataset.column_names:
            return dataset.rename_column(name, target)
    raise ValueError(f"no {target!r} column (also looked for {list(candidates)}); columns: {dataset.column_names}")


def _label_key(name: Any) -> str:
    return re.sub(r"[\s_]+", "-", str(name).strip().lower())


def _label_ids(dataset: Dataset, aliases: Mapping[str, int], n_classes: int) -> list[int]:
    """Label ids in a target order, from ClassLabel ids (mapped by *name*), strings, or plain ints.
    Unlabeled rows (-1, '-', '') become -1."""
    feature = dataset.features["label"]
    raw = _column(dataset, "label")
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


_HANS_LABELS = {
    "entailment": 0, "entailed": 0,
    "non-entailment": 1, "non-entailed": 1, "not-entailment": 1, "not-entailed": 1, "nonentailment": 1,
    "neutral": 1, "contradiction": 1,
}
_MNLI_LABELS = {"entailment": 0, "neutral": 1, "contradiction": 2}
_PARAPHRASE_LABELS = {
    "0": 0, "not-duplicate": 0, "not-paraphrase": 0, "not-equivalent": 0, "non-paraphrase": 0,
    "1": 1, "duplicate": 1, "paraphrase": 1, "equivalent": 1,
}


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
    dataset = _rename_to(dataset, "premise", ("sentence1", "text_a"))
    dataset = _rename_to(dataset, "hypothesis", ("sentence2", "text_b"))
    dataset = _rename_to(dataset, "label", ("gold_label", "labels"))
    if "subcase" not in dataset.column_names:
        raise ValueError(f"HANS data needs a 'subcase' column; columns: {dataset.column_names}")
    labels = _label_ids(dataset, _HANS_LABELS, n_classes=3)
    if any(v < 0 for v in labels):
        raise ValueError("HANS data has unlabeled rows")
    labels = [0 if v == 0 else 1 for v in labels]
    heuristics_in = _column(dataset, "heuristic") if "heuristic" in dataset.column_names else [""] * len(dataset)
    pairs = [_short_subcase(h, s) for h, s in zip(heuristics_in, _column(dataset, "subcase"))]
    columns: dict[str, list[Any]] = {
        "premise": _column(dataset, "premise"),
        "hypothesis": _column(dataset, "hypothesis"),
        "label": labels,
        "heuristic": [h for h, _ in pairs],
        "subcase": [s for _, s in pairs],
        "subcase_full": [f"{h}_{s}" for h, s in pairs],
        "counter_heuristic": [bool(_COUNTER_PREFIX.match(s)) for _, s in pairs],
    }
    with_template = "template" in dataset.column_names
    if with_template:
        columns["template"] = [str(t) for t in _column(dataset, "template")]
    return _from_columns(columns, _nli_features(with_template))


def _normalize_pairs(dataset: Dataset, names: tuple[str, str], candidates: tuple[Sequence[str], Sequence[str]],
                     label_names: list[str], aliases: Mapping[str, int], drop_unlabeled: bool) -> Dataset:
    """Rename the two text columns, put labels in ``label_names`` order, drop everything else."""
    for name, cands in zip(names, candidates):
        dataset = _rename_to(dataset, name, cands)
    dataset = _rename_to(dataset, "label", ("gold_label", "labels"))
    labels = _label_ids(dataset, aliases, n_classes=len(label_names))
    dataset = dataset.select_columns([*names, "label"])
    feature = dataset.features["label"]
    if not (isinstance(feature, ClassLabel) and list(feature.names) == label_names):
        dataset = _replace_labels(dataset, labels, label_names)
    if drop_unlabeled:
        keep = [i for i, v in enumerate(labels) if v >= 0]
        if len(keep) < len(labels):
            dataset = dataset.select(keep)
    return dataset


def _replace_labels(dataset: Dataset, labels: Sequence[int], label_names: list[str]) -> Dataset:
    return dataset.remove_columns("label").add_column("label", list(labels), feature=ClassLabel(names=label_names))


# --------------------------------------------------------------------------------------------------------------
# Subcase names
# --------------------------------------------------------------------------------------------------------------


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
    return sorted(set(zip(_column(dataset, "subcase_full"), _column(dataset, "subcase"))))


def filter_subcases(dataset: Dataset, subcases: str | Iterable[str]) -> Dataset:
    """Rows of the requested subcases (names as in :func:`resolve_subcases`), original order kept."""
    wanted = set(resolve_subcases(subcases, _subcase_pairs(dataset)))
    return dataset.select([i for i, full in enumerate(_column(dataset, "subcase_full")) if full in wanted])


def hans_subsets(dataset: Dataset) -> dict[str, Dataset]:
    """One dataset per full subcase name (sorted), for per-subcase accuracy tables."""
    if "subcase_full" in dataset.column_names:
        keys = _column(dataset, "subcase_full")
    else:
        pairs = zip(_column(dataset, "heuristic"), _column(dataset, "subcase"))
        keys = ["_".join(_short_subcase(h, s)) for h, s in pairs]
    groups: dict[str, list[int]] = {}
    for i, key in enumerate(keys):
        groups.setdefault(key, []).append(i)
    return {key: dataset.select(groups[key]) for key in sorted(groups)}


# --------------------------------------------------------------------------------------------------------------
# Public loaders
# --------------------------------------------------------------------------------------------------------------


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
    raw = _load_any(path_or_hub_id, split, None, "HANS data", "jhu-cogsci/hans", _HANS_HUB_ALIASES, **load_kwargs)
    dataset = _normalize_hans(raw)
    return dataset if subcases is None else filter_subcases(dataset, subcases)


def load_mnli(hub_id: str | os.PathLike[str] = "nyu-mll/glue", split: str = "validation_matched", *,
              config: str | None = None, two_way: bool = False, drop_unlabeled: bool = True,
              **load_kwargs: Any) -> Dataset:
    """MNLI as ``premise, hypothesis, label`` with labels in :data:`mnli_label_names` order.

    Works with ``nyu-mll/glue`` (config ``mnli``, chosen automatically; splits ``train``, ``validation_matched``,
    ``validation_mismatched``), ``nyu-mll/multi_nli`` and local copies (jsonl with ``sentence1``/``sentence2``/
    ``gold_label`` as released is fine). The paper's ID set is matched + mismatched: load both, or use
    ``split="validation"`` on a local folder (matches both files). ``two_way=True`` collapses to
    :data:`nli_label_names` (entailment vs. not) for HANS-style training. Unlabeled rows (-1, as in GLUE's test
    splits) are dropped unless ``drop_unlabeled=False``.
    """
    if config is None and str(hub_id).lower() in _GLUE_IDS:
        config = "mnli"
    raw = _load_any(hub_id, split, config, "MNLI data", "nyu-mll/glue", **load_kwargs)
    dataset = _normalize_pairs(raw, NLI_COLUMNS, (("sentence1",), ("sentence2",)), mnli_label_names,
                               _MNLI_LABELS, drop_unlabeled)
    if two_way:
        collapsed = [v if v < 0 else int(v != 0) for v in _column(dataset, "label")]
        dataset = _replace_labels(dataset, collapsed, nli_label_names)
    return dataset


def load_qqp(hub_id: str | os.PathLike[str] = "nyu-mll/glue", split: str = "validation", *,
             config: str | None = None, drop_unlabeled: bool = True, **load_kwargs: Any) -> Dataset:
    """QQP as ``sentence1, sentence2, label`` (0 not duplicate, 1 duplicate).

    GLUE's ``question1``/``question2`` are renamed to :data:`PARAPHRASE_COLUMNS` so QQP and PAWS share column names
    and a QQP model can be evaluated on PAWS without remapping.
    """
    if config is None and str(hub_id).lower() in _GLUE_IDS:
        config = "qqp"
    raw = _load_any(hub_id, split, config, "QQP data", "nyu-mll/glue", **load_kwargs)
    return _normalize_pairs(raw, PARAPHRASE_COLUMNS, (("question1", "text_a"), ("question2", "text_b")),
                            paraphrase_label_names, _PARAPHRASE_LABELS, drop_unlabeled)


_BYTES_LITERAL = re.compile(r"""^b(['"])(.*)\1$""", re.DOTALL)


def _strip_bytes_literal(text: str) -> str:
    """PAWS-QQP's generation script, run under Python 3, can write sentences as ``b'...'`` literals."""
    match = _BYTES_LITERAL.match(text)
    if not match:
        return text
    import ast

    try:
        return ast.literal_eval(text).decode("utf-8")
    except (ValueError, SyntaxError, UnicodeDecodeError):
        return match.group(2)


def load_paws(path_or_hub_id: str | os.PathLike[str] = "google-research-datasets/paws", split: str = "test", *,
              config: str | None = "labeled_final", not_equivalent_only: bool = False,
              **load_kwargs: Any) -> Dataset:
    """PAWS as ``sentence1, sentence2, label`` in :data:`paraphrase_label_names` order (1 = paraphrase).

    Expected layouts:

    * **PAWS-QQP** (the paper's OOD set for QQP) is not on the Hub because QQP's license forbids redistribution;
      build it with the PAWS repository's ``qqp_generate_data.py`` and pass the output folder holding
      ``train.tsv`` and ``dev_and_test.tsv`` (columns ``id, sentence1, sentence2, label``). ``split="all"`` reads
      both files (about 12.7k pairs, as the paper counts), ``split="test"``/``"validation"`` reads
      ``dev_and_test.tsv``. ``b'...'`` byte literals written by the script are decoded.
    * **PAWS-Wiki** from the Hub (``google-research-datasets/paws``, configs ``labeled_final`` (default),
      ``labeled_swap``, ``unlabeled_final``; splits train/validation/test) — same columns. ``config`` is ignored
      for local paths.

    ``not_equivalent_only=True`` keeps the non-paraphrase pairs only: the paper evaluates on those (8,696 of
    PAWS-QQP), because the paraphrase pairs are heuristic-friendly.
    """
    kind_is_hub = isinstance(path_or_hub_id, str) and not Path(path_or_hub_id).expanduser().exists()
    raw = _load_any(path_or_hub_id, split, config if kind_is_hub else None, "PAWS data",
                    "google-research-datasets/paws", **load_kwargs)
    dataset = _normalize_pairs(raw, PARAPHRASE_COLUMNS, (("question1", "text_a"), ("question2", "text_b")),
                               paraphrase_label_names, _PARAPHRASE_LABELS, drop_unlabeled=True)
    first, second = PARAPHRASE_COLUMNS
    texts = [_column(dataset, first), _column(dataset, second)]
    if any(_BYTES_LITERAL.match(t) for column in texts for t in column):
        labels = _column(dataset, "label")
        dataset = _from_columns(
            {first: [_strip_bytes_literal(t) for t in texts[0]], second: [_strip_bytes_literal(t) for t in texts[1]],
             "label": labels},
            features=Features({first: Value("string"), second: Value("string"),
                               "label": ClassLabel(names=paraphrase_label_names)}),
        )
    if not_equivalent_only:
        dataset = dataset.select([i for i, v in enumerate(_column(dataset, "label")) if v == 0])
    return dataset


# --------------------------------------------------------------------------------------------------------------
# Predictions
# --------------------------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------------------------
# Offline generator: vocabulary
# --------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Vocabulary:
    """Word lists for :func:`generate_nli`. Verbs are ``(base, third person singular, past[, participle])``.

    Noun forms and verb forms must not overlap, so a sentence can be checked by looking words up."""

    nouns: tuple[tuple[str, str], ...]
    transitive: tuple[tuple[str, str, str, str], ...]
    intransitive: tuple[tuple[str, str, str], ...]
    np_or_clause: tuple[tuple[str, str, str], ...]   # take an object NP or a clause: the NP/S ambiguity
    factive: tuple[tuple[str, str, str], ...]        # "knew that S" entails S
    nonfactive: tuple[tuple[str, str, str], ...]     # "believed that S" does not
    prepositions: tuple[str, ...]
    factive_adverbs: tuple[str, ...]
    nonfactive_adverbs: tuple[str, ...]
    conditionals: tuple[str, ...]
    relative_pronouns: tuple[str, ...] = ("who", "that")

    def verb_lemmas(self) -> dict[str, str]:
        """Every verb form -> its base form."""
        lemmas: dict[str, str] = {}
        for group in (self.transitive, self.intransitive, self.np_or_clause, self.factive, self.nonfactive):
            for forms in group:
                for form in forms:
                    lemmas[form] = forms[0]
        return lemmas

    def validate(self) -> None:
        noun_forms = {f for pair in self.nouns for f in pair}
        clash = noun_forms & set(self.verb_lemmas())
        if clash:
            raise ValueError(f"words used both as nouns and verbs: {sorted(clash)}")
        if len(self.nouns) < 6:
            raise ValueError("the generator needs at least 6 nouns")


GENERATOR_VOCABULARY = Vocabulary(
    nouns=tuple((n, p) for n, p in (
        ("pilot", "pilots"), ("baker", "bakers"), ("nurse", "nurses"), ("farmer", "farmers"),
        ("painter", "painters"), ("chef", "chefs"), ("dancer", "dancers"), ("sailor", "sailors"),
        ("teacher", "teachers"), ("coach", "coaches"), ("poet", "poets"), ("clerk", "clerks"),
        ("mayor", "mayors"), ("singer", "singers"), ("driver", "drivers"), ("plumber", "plumbers"),
        ("editor", "editors"), ("waiter", "waiters"), ("surgeon", "surgeons"), ("architect", "architects"),
        ("gardener", "gardeners"), ("pianist", "pianists"),
    )),
    transitive=(
        ("greet", "greets", "greeted", "greeted"), ("thank", "thanks", "thanked", "thanked"),
        ("call", "calls", "called", "called"), ("help", "helps", "helped", "helped"),
        ("visit", "visits", "visited", "visited"), ("follow", "follows", "followed", "followed"),
        ("admire", "admires", "admired", "admired"), ("warn", "warns", "warned", "warned"),
        ("hire", "hires", "hired", "hired"), ("praise", "praises", "praised", "praised"),
        ("invite", "invites", "invited", "invited"), ("blame", "blames", "blamed", "blamed"),
        ("trust", "trusts", "trusted", "trusted"), ("see", "sees", "saw", "seen"),
        ("meet", "meets", "met", "met"), ("find", "finds", "found", "found"),
        ("teach", "teaches", "taught", "taught"), ("forgive", "forgives", "forgave", "forgiven"),
    ),
    intransitive=(
        ("sleep", "sleeps", "slept"), ("laugh", "laughs", "laughed"), ("wait", "waits", "waited"),
        ("leave", "leaves", "left"), ("arrive", "arrives", "arrived"), ("smile", "smiles", "smiled"),
        ("shout", "shouts", "shouted"), ("rest", "rests", "rested"), ("complain", "complains", "complained"),
        ("swim", "swims", "swam"), ("yawn", "yawns", "yawned"),
    ),
    # Perception verbs (see, hear, notice) are left out on purpose: "hears the nurses wait" has a bare-infinitive
    # reading that *does* entail "hears the nurses".
    np_or_clause=(
        ("forget", "forgets", "forgot"), ("remember", "remembers", "remembered"),
        ("mention", "mentions", "mentioned"), ("report", "reports", "reported"),
    ),
    factive=(
        ("know", "knows", "knew"), ("realize", "realizes", "realized"), ("regret", "regrets", "regretted"),
        ("discover", "discovers", "discovered"), ("learn", "learns", "learned"),
    ),
    nonfactive=(
        ("believe", "believes", "believed"), ("hope", "hopes", "hoped"), ("think", "thinks", "thought"),
        ("claim", "claims", "claimed"), ("suspect", "suspects", "suspected"), ("imagine", "imagines", "imagined"),
    ),
    prepositions=("near", "beside", "behind", "next to", "across from"),
    factive_adverbs=("clearly", "certainly", "undoubtedly", "obviously", "definitely"),
    nonfactive_adverbs=("perhaps", "maybe", "probably", "supposedly", "possibly"),
    conditionals=("if", "unless", "whenever", "provided that"),
)
"""The generator's own word lists (not HANS's)."""

GENERATOR_VOCABULARY.validate()


# --------------------------------------------------------------------------------------------------------------
# Offline generator: templates
# --------------------------------------------------------------------------------------------------------------

_NP = tuple[tuple[str, str], bool]  # ((singular, plural), is_plural)


class _Ctx:
    """Per-example state: tense, and the nouns/verbs already used (so nouns are distinct and controls can pick
    words that are *not* in the premise)."""

    def __init__(self, rng: random.Random, vocab: Vocabulary, tense: str,
                 premise_pool: Sequence[Callable[[_Ctx], _Pair]] = ()) -> None:
        self.rng, self.vocab, self.tense = rng, vocab, tense
        self.premise_pool = premise_pool
        self.nouns: list[_NP] = []
        self.verbs: list[str] = []

    def person(self, plural: bool | None = None) -> _NP:
        used = {n for n, _ in self.nouns}
        noun = self.rng.choice([n for n in self.vocab.nouns if n not in used])
        entry = (noun, self.rng.random() < 0.5 if plural is None else plural)
        self.nouns.append(entry)
        return entry

    def verb(self, group: Sequence[tuple[str, ...]]) -> tuple[str, ...]:
        forms = self.rng.choice([v for v in group if v[0] not in self.verbs])
        self.verbs.append(forms[0])
        return forms

    def finite(self, verb: tuple[str, ...], subject: _NP) -> str:
        if self.tense == "past":
            return verb[2]
        return verb[0] if subject[1] else verb[1]

    def be(self, subject: _NP) -> str:
        if self.tense == "past":
            return "were" if subject[1] else "was"
        return "are" if subject[1] else "is"

    def pick(self, options: Sequence[str]) -> list[str]:
        return self.rng.choice(options).split()


def _np(entry: _NP) -> list[str]:
    noun, plural = entry
    return ["the", noun[1] if plural else noun[0]]


def _clause(ctx: _Ctx, subject: _NP, verb: tuple[str, ...], obj: _NP | None) -> list[str]:
    return _np(subject) + [ctx.finite(verb, subject)] + (_np(obj) if obj else [])


def _random_clause(ctx: _Ctx, subject: _NP | None = None) -> list[str]:
    """A simple clause, transitive two times in three."""
    subject = subject or ctx.person()
    if ctx.rng.random() < 2 / 3:
        verb = ctx.verb(ctx.vocab.transitive)
        return _clause(ctx, subject, verb, ctx.person())
    return _clause(ctx, subject, ctx.verb(ctx.vocab.intransitive), None)


def _main_predicate(ctx: _Ctx, subject: _NP) -> list[str]:
    """Verb (+ object) of a main clause whose subject carries a modifier."""
    if ctx.rng.random() < 2 / 3:
        return [ctx.finite(ctx.verb(ctx.vocab.transitive), subject)] + _np(ctx.person())
    return [ctx.finite(ctx.verb(ctx.vocab.intransitive), subject)]


_Pair = tuple[list[str], list[str]]


def _ln_subject_object_swap(ctx: _Ctx) -> _Pair:
    a, b, verb = ctx.person(), ctx.person(), ctx.verb(ctx.vocab.transitive)
    return _clause(ctx, a, verb, b), _clause(ctx, b, verb, a)


def _ln_preposition(ctx: _Ctx) -> _Pair:
    # "The pilot near the nurses thanked the chef." -/-> "The pilot thanked the nurses."
    a, b, c = ctx.person(), ctx.person(), ctx.person()
    verb, prep = ctx.verb(ctx.vocab.transitive), ctx.pick(ctx.vocab.prepositions)
    premise = _np(a) + prep + _np(b) + [ctx.finite(verb, a)] + _np(c)
    return premise, _clause(ctx, a, verb, b)


def _sn_np_s(ctx: _Ctx) -> _Pair:
    # "The pilot forgot the nurses waited." -/-> "The pilot forgot the nurses."
    a, b = ctx.person(), ctx.person()
    verb = ctx.verb(ctx.vocab.np_or_clause)
    head = _np(a) + [ctx.finite(verb, a)]
    return head + _random_clause(ctx, b), head + _np(b)


def _sn_relative_clause_on_subject(ctx: _Ctx) -> _Pair:
    # "The pilot who greeted the nurse waited." -/-> "The nurse waited."
    a = ctx.person()
    # In the present tense the main verb agrees with `a`; give `b` the same number so the subsequence is grammatical.
    b = ctx.person(plural=a[1] if ctx.tense == "present" else None)
    rel = ctx.verb(ctx.vocab.transitive)
    predicate = _main_predicate(ctx, a)
    premise = _np(a) + ctx.pick(ctx.vocab.relative_pronouns) + [ctx.finite(rel, a)] + _np(b) + predicate
    return premise, _np(b) + predicate


def _cn_embedded_under_if(ctx: _Ctx) -> _Pair:
    # "If the pilot waited, the nurses left." -/-> "The pilot waited."
    condition = _random_clause(ctx)
    return ctx.pick(ctx.vocab.conditionals) + condition + [","] + _random_clause(ctx), condition


def _embedded_under(group: str) -> Callable[[_Ctx], _Pair]:
    def make(ctx: _Ctx) -> _Pair:
        a = ctx.person()
        verb = ctx.verb(getattr(ctx.vocab, group))
        embedded = _random_clause(ctx)
        return _np(a) + [ctx.finite(verb, a), "that"] + embedded, embedded

    return make


def _adverb(group: str) -> Callable[[_Ctx], _Pair]:
    def make(ctx: _Ctx) -> _Pair:
        clause = _random_clause(ctx)
        return ctx.pick(getattr(ctx.vocab, group)) + clause, clause

    return make


def _le_passive(ctx: _Ctx) -> _Pair:
    # "The nurses were thanked by the pilot." -> "The pilot thanked the nurses."
    agent, patient, verb = ctx.person(), ctx.person(), ctx.verb(ctx.vocab.transitive)
    premise = _np(patient) + [ctx.be(patient), verb[3], "by"] + _np(agent)
    return premise, _clause(ctx, agent, verb, patient)


def _le_around_relative_clause(ctx: _Ctx) -> _Pair:
    # "The pilot who greeted the nurses thanked the chef." -> "The pilot thanked the chef."
    a, b = ctx.person(), ctx.person()
    rel = ctx.verb(ctx.vocab.transitive)
    predicate = _main_predicate(ctx, a)
    premise = _np(a) + ctx.pick(ctx.vocab.relative_pronouns) + [ctx.finite(rel, a)] + _np(b) + predicate
    return premise, _np(a) + predicate


def _se_pp_on_obj(ctx: _Ctx) -> _Pair:
    # "The pilot thanked the nurses near the chef." -> "The pilot thanked the nurses."
    a, b, verb = ctx.person(), ctx.person(), ctx.verb(ctx.vocab.transitive)
    clause = _clause(ctx, a, verb, b)
    return clause + ctx.pick(ctx.vocab.prepositions) + _np(ctx.person()), clause


def _control_premise(ctx: _Ctx) -> list[str]:
    """A premise from a template of the training mix, so premise shape alone never gives the label away
    (and constructions held out of training do not leak in through the controls)."""
    return ctx.rng.choice(ctx.premise_pool)(ctx)[0]


def _xn_unrelated(ctx: _Ctx) -> _Pair:
    # Hypothesis about other people doing other things: no content word in common.
    premise = _control_premise(ctx)
    return premise, _random_clause(ctx)


def _xn_partial_overlap(ctx: _Ctx) -> _Pair:
    # One person of the premise, doing something the premise never mentions (ctx.verb skips used verbs).
    premise = _control_premise(ctx)
    shared = ctx.rng.choice(ctx.nouns)
    roll = ctx.rng.random()
    if roll < 1 / 3:
        hypothesis = _clause(ctx, shared, ctx.verb(ctx.vocab.intransitive), None)
    elif roll < 2 / 3:
        hypothesis = _clause(ctx, shared, ctx.verb(ctx.vocab.transitive), ctx.person())
    else:
        subject = ctx.person()
        hypothesis = _clause(ctx, subject, ctx.verb(ctx.vocab.transitive), shared)
    return premise, hypothesis


@dataclass(frozen=True)
class GeneratedSubcase:
    """One template family of :func:`generate_nli`."""

    heuristic: str
    subcase: str
    label: int
    counter_heuristic: bool
    description: str
    make: Callable[[_Ctx], _Pair]

    @property
    def full_name(self) -> str:
        return f"{self.heuristic}_{self.subcase}"


_S = GeneratedSubcase
_SPECS = [
    _S("lexical_overlap", "ln_subject-object_swap", 1, True, "subject and object swapped", _ln_subject_object_swap),
    _S("lexical_overlap", "ln_preposition", 1, True, "object replaced by the noun of a PP on the subject",
       _ln_preposition),
    _S("lexical_overlap", "le_passive", 0, False, "passive premise, active hypothesis", _le_passive),
    _S("lexical_overlap", "le_around_relative_clause", 0, False, "relative clause on the subject dropped",
       _le_around_relative_clause),
    _S("subsequence", "sn_NP-S", 1, True, "clause complement read as an object NP", _sn_np_s),
    _S("subsequence", "sn_relative_clause_on_subject", 1, True,
       "object of a subject relative clause taken as the main subject", _sn_relative_clause_on_subject),
    _S("subsequence", "se_PP_on_obj", 0, False, "PP on the object dropped", _se_pp_on_obj),
    _S("constituent", "cn_embedded_under_if", 1, True, "clause of a conditional", _cn_embedded_under_if),
    _S("constituent", "cn_embedded_under_verb", 1, True, "clause under a non-factive verb",
       _embedded_under("nonfactive")),
    _S("constituent", "cn_adverb", 1, True, "clause under a non-factive adverb", _adverb("nonfactive_adverbs")),
    _S("constituent", "ce_embedded_under_verb", 0, False, "clause under a factive verb",
       _embedded_under("factive")),
    _S("constituent", "ce_adverb", 0, False, "clause under a factive adverb", _adverb("factive_adverbs")),
    _S("control", "xn_unrelated", 1, False, "hypothesis shares no content word", _xn_unrelated),
    _S("control", "xn_partial_overlap", 1, False, "hypothesis shares one noun, new verb", _xn_partial_overlap),
]
GENERATED_SUBCASES: dict[str, GeneratedSubcase] = {s.full_name: s for s in _SPECS}
"""Template families of :func:`generate_nli`, by full name. ``heuristic='control'`` marks the low-overlap,
non-entailed pairs on which the overlap heuristic is right."""


# --------------------------------------------------------------------------------------------------------------
# Offline generator: assembly
# --------------------------------------------------------------------------------------------------------------

_MAX_TRIES = 200


def _render(tokens: Sequence[str], hans_spacing: bool) -> str:
    text = " ".join([*tokens, "."])
    if not hans_spacing:
        text = text.replace(" ,", ",").replace(" .", ".")
    return text[0].upper() + text[1:]


def _example(spec: GeneratedSubcase, rng: random.Random, vocab: Vocabulary, hans_spacing: bool,
             seen: set[tuple[str, str]], premise_pool: Sequence[Callable[[_Ctx], _Pair]]) -> dict[str, Any]:
    """One new (premise, hypothesis) pair of ``spec`` not in ``seen``; re-draws on collision."""
    for _ in range(_MAX_TRIES):
        ctx = _Ctx(rng, vocab, rng.choice(("past", "present")), premise_pool)
        premise_tokens, hypothesis_tokens = spec.make(ctx)
        pair = (_render(premise_tokens, hans_spacing), _render(hypothesis_tokens, hans_spacing))
        if pair not in seen:
            seen.add(pair)
            return {
                "premise": pair[0], "hypothesis": pair[1], "label": spec.label, "heuristic": spec.heuristic,
                "subcase": spec.subcase, "subcase_full": spec.full_name, "counter_heuristic": spec.counter_heuristic,
            }
    raise RuntimeError(f"could not draw a new {spec.full_name} example in {_MAX_TRIES} tries; "
                       "the vocabulary is too small for the requested sizes")


def _spread(names: Sequence[str], count: int) -> list[str]:
    """``count`` subcase names, as even across ``names`` as possible."""
    return [names[i % len(names)] for i in range(count)] if names else []


def _training_plan(size: int, fraction: float, entailed: Sequence[str], counter: Sequence[str],
                   controls: Sequence[str]) -> list[str]:
    """Half entailed (heuristic right), ``fraction`` counter-heuristic, the rest low-overlap controls."""
    n_counter = round(fraction * size)
    n_entailed = size // 2
    n_control = size - n_entailed - n_counter
    return _spread(entailed, n_entailed) + _spread(counter, n_counter) + _spread(controls, n_control)


def _to_dataset(rows: list[dict[str, Any]]) -> Dataset:
    features = _nli_features()
    columns = {name: [row[name] for row in rows] for name in features}
    return _from_columns(columns, features)


def _generated_names(requested: Iterable[str] | None, default: Iterable[str]) -> list[str]:
    available = [(s.full_name, s.subcase) for s in _SPECS if s.heuristic != "control"]
    return list(default) if requested is None else resolve_subcases(requested, available)


def generate_nli(train_size: int = 20_000, id_eval_size: int = 2_000, ood_eval_size_per_subcase: int = 500, *,
                 counter_heuristic_fraction: float = 0.05, ood_subcases: Iterable[str] | None = None,
                 counter_subcases: Iterable[str] | None = None, seed: int = 0, hans_spacing: bool = False,
                 vocabulary: Vocabulary = GENERATOR_VOCABULARY) -> DatasetDict:
    """Generate a heuristic-friendly NLI training set and ID / OOD evaluation sets, offline.

    Returns a DatasetDict with ``train``, ``id_eval`` (training distribution, disjoint examples) and ``ood_eval``
    (``ood_eval_size_per_subcase`` pairs of each OOD subcase), all with :data:`HANS_COLUMNS`.
    See the module docstring for the design. ``ood_subcases`` (default: every counter-heuristic subcase) accepts
    full, short or abbreviated names; entailed subcases listed there leave the training mix. Counter-heuristic
    training examples come from ``counter_subcases`` (default: the counter-heuristic ones among ``ood_subcases``).
    ``hans_spacing=True`` writes "waited ." like HANS instead of "waited.". Same seed -> identical datasets; no
    (premise, hypothesis) pair occurs twice across or within splits.
    """
    if not 0.0 <= counter_heuristic_fraction <= 0.5:
        raise ValueError("counter_heuristic_fraction must be in [0, 0.5] (labels are kept balanced)")
    if min(train_size, id_eval_size, ood_eval_size_per_subcase) < 0:
        raise ValueError("sizes must be non-negative")
    vocabulary.validate()
    counter_all = [s.full_name for s in _SPECS if s.counter_heuristic]
    ood = _generated_names(ood_subcases, counter_all)
    counter = _generated_names(counter_subcases, [n for n in ood if GENERATED_SUBCASES[n].counter_heuristic])
    if any(not GENERATED_SUBCASES[n].counter_heuristic for n in counter):
        raise ValueError(f"counter_subcases must be counter-heuristic subcases, one of {counter_all}")
    entailed = [s.full_name for s in _SPECS if s.label == 0 and s.full_name not in ood]
    controls = [s.full_name for s in _SPECS if s.heuristic == "control"]
    if not entailed:
        raise ValueError("ood_subcases leaves no entailed subcase for training")
    if counter_heuristic_fraction > 0 and not counter:
        raise ValueError("counter_heuristic_fraction > 0 needs at least one counter-heuristic subcase")

    rng = random.Random(seed)
    seen: set[tuple[str, str]] = set()
    trained = [*entailed, *(counter if counter_heuristic_fraction > 0 else [])]
    pool = [GENERATED_SUBCASES[n].make for n in trained]  # premise shapes the controls may use

    def build(plan: list[str], shuffle: bool) -> Dataset:
        rows = [_example(GENERATED_SUBCASES[name], rng, vocabulary, hans_spacing, seen, pool) for name in plan]
        if shuffle:
            rng.shuffle(rows)
        return _to_dataset(rows)

    # Evaluation sets first, so they get first pick and training examples avoid them.
    ood_eval = build([n for n in ood for _ in range(ood_eval_size_per_subcase)], shuffle=False)
    id_eval = build(_training_plan(id_eval_size, counter_heuristic_fraction, entailed, counter, controls), True)
    train = build(_training_plan(train_size, counter_heuristic_fraction, entailed, counter, controls), True)
    return DatasetDict({"train": train, "id_eval": id_eval, "ood_eval": ood_eval})
