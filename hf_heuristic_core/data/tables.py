"""The one table loader: a split of a Hub dataset, a `save_to_disk` folder, a folder of data files or the files.

Every file is read by one of `datasets`' packaged builders (json, csv, parquet, arrow), so compression, sharding
and caching behave as everywhere else in the HF stack. What this module adds is *which* files make a split
(``validation.jsonl.gz``, Hub shards ``validation-00000-of-00001.parquet``, ``dev.tsv``, HANS's original
``heuristics_evaluation_set.txt``) and errors that say what was looked for when a path does not exist, instead
of a Hub lookup of a typo.
"""

from __future__ import annotations

import csv
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import datasets
from datasets import Dataset, DatasetDict, Features

__all__ = ["DATA_SUFFIXES", "files_name_splits", "load_table"]

DATA_SUFFIXES = (".jsonl.gz", ".json.gz", ".jsonl", ".json", ".parquet", ".arrow", ".csv", ".tsv", ".txt")
"""File endings read as data (compressed variants: .gz / .bz2 / .xz / .zst of any of them)."""

_COMPRESSIONS = (".gz", ".bz2", ".xz", ".zst")
# builder name and its keyword arguments, by file ending; .tsv/.txt are tab-separated without quoting (HANS's
# release has unbalanced quotes), and empty strings stay strings rather than becoming NaN.
_BUILDERS: dict[str, tuple[str, dict[str, Any]]] = {
    ".json": ("json", {}), ".jsonl": ("json", {}), ".parquet": ("parquet", {}), ".arrow": ("arrow", {}),
    ".csv": ("csv", {"keep_default_na": False, "na_values": []}),
    ".tsv": ("csv", {"sep": "\t", "quoting": csv.QUOTE_NONE, "keep_default_na": False, "na_values": []}),
    ".txt": ("csv", {"sep": "\t", "quoting": csv.QUOTE_NONE, "keep_default_na": False, "na_values": []}),
}
_METADATA_NAMES = {"dataset_info.json", "state.json", "dataset_dict.json", "dataset_infos.json"}
_SPLIT_ALIASES = {
    "train": {"train", "training"},
    "validation": {"validation", "valid", "val", "dev", "eval", "evaluation"},
    "test": {"test"},
}
_KNOWN_SPLIT_WORDS = set().union(*_SPLIT_ALIASES.values())
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?")


# ------------------------------------------------------------------------------------------------ columns


def column(dataset: Dataset, name: str) -> list[Any]:
    """A column as a Python list; one batched read (iterating a ``Column`` decodes row by row, ~10x slower)."""
    return dataset.select_columns([name])[:][name]


def from_columns(columns: Mapping[str, list[Any]], features: Features) -> Dataset:
    """An in-memory Dataset built straight through Arrow (``Dataset.from_dict`` encodes row by row)."""
    import pyarrow as pa
    from datasets.table import InMemoryTable

    table = pa.Table.from_pydict(dict(columns), schema=features.arrow_schema)
    return Dataset(InMemoryTable(table), info=datasets.DatasetInfo(features=features))


def rename_to(dataset: Dataset, target: str, candidates: Sequence[str]) -> Dataset:
    """Give the first present candidate column the name ``target`` (no-op when ``target`` exists)."""
    if target in dataset.column_names:
        return dataset
    for name in candidates:
        if name in dataset.column_names:
            return dataset.rename_column(name, target)
    raise ValueError(f"no {target!r} column (also looked for {list(candidates)}); columns: {dataset.column_names}")


def concat(parts: Sequence[Dataset]) -> Dataset:
    return parts[0] if len(parts) == 1 else datasets.concatenate_datasets(list(parts))


# ------------------------------------------------------------------------------------------------ files


_BASE_SUFFIXES = (".jsonl", ".json", ".parquet", ".arrow", ".csv", ".tsv", ".txt")


def _split_name(name: str) -> tuple[str, str] | None:
    """``(stem, data ending)`` of a file name, a compression ending dropped; None when it is not a data file."""
    lower = name.lower()
    compression = next((c for c in _COMPRESSIONS if lower.endswith(c)), "")
    plain = lower[: len(lower) - len(compression)]
    suffix = next((s for s in _BASE_SUFFIXES if plain.endswith(s)), None)
    return None if suffix is None else (name[: len(plain) - len(suffix)], suffix)


def data_suffix(name: str) -> str | None:
    """The data ending of a file name (``.jsonl`` for ``x.jsonl.gz``), or None when it is not a data file."""
    found = _split_name(name)
    return found[1] if found else None


def _builder(path: Path) -> tuple[str, dict[str, Any]]:
    suffix = data_suffix(path.name)
    if suffix is None:
        raise ValueError(f"Cannot tell the format of {path}; use {', '.join(DATA_SUFFIXES)} (optionally "
                         "compressed), a folder of such files, a save_to_disk folder or a Hub dataset id.")
    return _BUILDERS[suffix]


def _stem(path: Path) -> str:
    found = _split_name(path.name)
    return found[0] if found else path.stem


def read_files(paths: Sequence[Path]) -> Dataset:
    """Files of one format as one Dataset, through that format's `datasets` builder."""
    formats = {_builder(p)[0] for p in paths}
    if len(formats) > 1:
        raise ValueError(f"Files of different formats given together: {[str(p) for p in paths]}.")
    builder, options = _builder(paths[0])
    options = dict(options)
    if any(_builder(p) != (builder, options) for p in paths):   # .csv with .tsv: same builder, other separator
        raise ValueError(f"Files with different separators given together: {[str(p) for p in paths]}.")
    table = datasets.load_dataset(builder, data_files=[str(p) for p in paths], split="train", **options)
    if builder == "json" and len(paths) == 1 and len(table) == 1:
        table = _column_oriented(paths[0], table)
    return table


def _column_oriented(path: Path, table: Dataset) -> Dataset:
    """A JSON file holding one object of equally long lists is a table by columns, not one row of lists."""
    row = table[0]
    lengths = {len(v) for v in row.values() if isinstance(v, list)}
    if len(lengths) != 1 or not all(isinstance(v, list) for v in row.values()):
        return table
    if not path.name.lower().endswith(".json") or not path.read_text(encoding="utf-8").lstrip().startswith("{"):
        return table
    return Dataset.from_dict(row)


def _data_files(folder: Path) -> list[Path]:
    """Readable data files under ``folder``, sorted for determinism; skips hidden, README and metadata files."""
    found = []
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder)
        if any(part.startswith(".") for part in rel.parts) or not path.is_file():
            continue
        if path.name in _METADATA_NAMES or path.name.lower().startswith(("readme", "license")):
            continue
        if data_suffix(path.name):
            found.append(path)
    return found


def _split_tokens(text: str) -> set[str]:
    return {t for t in re.split(r"[-_.\s/\\]+", text.lower()) if t}


def _names_a_split(rel: Path) -> bool:
    return bool(_split_tokens(str(rel.with_name(_stem(rel)))) & _KNOWN_SPLIT_WORDS)


def files_name_splits(folder: Path) -> bool:
    """Whether any data file under `folder` names a split (`train.csv`, `dev/part-0.jsonl`): then `files_for_split`
    picks among them, otherwise it reads them all (one unsplit dataset)."""
    return any(_names_a_split(f.relative_to(folder)) for f in _data_files(folder))


def _split_aliases(split: str) -> set[str]:
    key = split.lower()
    for canonical, aliases in _SPLIT_ALIASES.items():
        if key == canonical or key in aliases:
            return aliases | {canonical}
    return {key}


def _matches_split_exactly(rel: Path, split: str) -> bool:
    stem = _stem(rel)
    return stem == split or stem.startswith(split + "-") or split in rel.parts[:-1]


def files_for_split(folder: Path, split: str) -> list[Path]:
    """Pick the files of one split: exact names first (``validation.jsonl.gz``, Hub shards
    ``validation-00000-of-00001.parquet``, ``validation/…``), then aliases (``dev``, ``heuristics_evaluation_set``),
    then, when no file names any split at all, every file (a folder holding one unsplit dataset)."""
    files = _data_files(folder)
    if not files:
        raise FileNotFoundError(
            f"no data files under {folder} (looked for {', '.join(DATA_SUFFIXES)} files or a save_to_disk folder)"
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
    if not any(_names_a_split(r) for r in rels):
        return files
    raise ValueError(
        f"no file for split {split!r} under {folder}; files found: {[str(r) for r in rels]} "
        "(pass split='all' to read every file)"
    )


def pick_split(dataset_dict: DatasetDict, split: str, where: str) -> Dataset:
    """One split of a DatasetDict by name or alias (``dev`` for ``validation``); ``'all'`` concatenates them."""
    if split == "all":
        return concat([dataset_dict[k] for k in dataset_dict])
    if split in dataset_dict:
        return dataset_dict[split]
    aliases = _split_aliases(split)
    matches = [k for k in dataset_dict if _split_tokens(k) & aliases]
    if matches:
        return concat([dataset_dict[k] for k in matches])
    raise ValueError(f"split {split!r} not in {where}; available splits: {list(dataset_dict)}")


def _load_local(path: Path, split: str) -> Dataset:
    """Read one split from a data file, a folder of data files, or a ``save_to_disk`` folder."""
    if path.is_file():
        return read_files([path])
    if (path / "dataset_dict.json").exists():
        return pick_split(datasets.load_from_disk(str(path)), split, str(path))
    if (path / "state.json").exists() and (path / "dataset_info.json").exists():
        return datasets.load_from_disk(str(path))
    return read_files(files_for_split(path, split))


# ------------------------------------------------------------------------------------------------ local or Hub


def _looks_like_path(text: str) -> bool:
    if text.startswith((".", "/", "~", "\\")) or "\\" in text or data_suffix(text):
        return True
    return _HUB_ID.fullmatch(text) is None


def _not_found(path: Path, what: str, hub_example: str) -> FileNotFoundError:
    return FileNotFoundError(
        f"{what} not found: {path.resolve()} does not exist. Expected a data file "
        f"({', '.join(DATA_SUFFIXES)}), a folder of such files (one per split, e.g. validation.jsonl.gz), "
        f"a folder written by Dataset/DatasetDict.save_to_disk, or a Hub dataset id such as {hub_example!r}."
    )


def _load_hub(hub_id: str, config: str | None, split: str, **load_kwargs: Any) -> Dataset:
    """``datasets.load_dataset`` with ``split='all'`` meaning every split, concatenated."""
    args = (hub_id,) if config is None else (hub_id, config)
    try:
        if split == "all":
            loaded = datasets.load_dataset(*args, **load_kwargs)
            return concat([loaded[k] for k in loaded]) if isinstance(loaded, Mapping) else loaded
        return datasets.load_dataset(*args, split=split, **load_kwargs)
    except Exception as err:  # keep the type, add the hint
        if hasattr(err, "add_note"):
            err.add_note(
                f"hf_heuristic_core: {hub_id!r} was treated as a Hub id because no local path of that name exists; "
                "offline, pass a local copy instead."
            )
        raise


def is_local(source: Any) -> bool:
    """Whether ``source`` names existing local files (one path, or several comma-separated)."""
    if isinstance(source, (Dataset, DatasetDict)):
        return False
    parts = [p.strip() for p in str(source).split(",") if p.strip()]
    return bool(parts) and all(Path(p).expanduser().exists() for p in parts)


def load_table(source: str | os.PathLike[str] | Dataset | DatasetDict, config: str | None = None,
               split: str = "train", *, what: str = "Dataset", hub_example: str = "nyu-mll/glue",
               hub_aliases: Mapping[str, str] | None = None, **load_kwargs: Any) -> Dataset:
    """One split as a `datasets.Dataset`, from wherever it lives.

    ``source``: a loaded Dataset (returned as is) or DatasetDict (its ``split``); a data file or several
    comma-separated ones (read together, whatever ``split`` says); a folder of per-split files; a
    ``save_to_disk`` folder; or a Hub id (``config``, ``split`` and ``load_kwargs`` go to
    :func:`datasets.load_dataset`). ``split='all'`` concatenates every split. A path that does not exist raises
    FileNotFoundError naming ``what`` rather than trying the Hub.
    """
    if isinstance(source, DatasetDict):
        return pick_split(source, split, "the given DatasetDict")
    if isinstance(source, Dataset):
        return source
    text = os.fspath(source) if isinstance(source, os.PathLike) else str(source)
    parts = [p.strip() for p in text.split(",") if p.strip()] if not isinstance(source, os.PathLike) else [text]
    paths = [Path(p).expanduser() for p in parts]
    if paths and all(p.exists() for p in paths):
        if len(paths) == 1:
            return _load_local(paths[0], split)
        if any(p.is_dir() for p in paths):
            raise ValueError(f"Give one folder, or several files: {parts}.")
        return read_files(paths)
    missing = [p for p, part in zip(paths, parts) if not p.exists() and
               (isinstance(source, os.PathLike) or _looks_like_path(part) or len(parts) > 1)]
    if missing:
        raise _not_found(missing[0], what, hub_example)
    hub_id = (hub_aliases or {}).get(text.lower(), text)
    return _load_hub(hub_id, config, split, **load_kwargs)
