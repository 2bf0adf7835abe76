"""Load a table for pruning from a Hub id, a `save_to_disk` folder, or local json/jsonl/csv/parquet files."""

from __future__ import annotations

from pathlib import Path

import datasets

BUILDERS = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet", ".arrow": "arrow"}


def _builder_for(path: Path) -> str:
    suffixes = [s for s in path.suffixes if s not in (".gz", ".bz2", ".xz", ".zst")]
    builder = BUILDERS.get(suffixes[-1] if suffixes else "")
    if builder is None:
        raise ValueError(f"Cannot tell the format of {path}; use .json, .jsonl, .csv, .parquet or .arrow "
                         "(optionally compressed), or a Hub dataset id.")
    return builder


def load_table(spec: str, config: str | None = None, split: str = "train") -> datasets.Dataset:
    """One split as a `datasets.Dataset`. Local files are comma-separated; their split is always the whole file set."""
    parts = [p.strip() for p in str(spec).split(",") if p.strip()]
    paths = [Path(p).expanduser() for p in parts]
    if all(p.exists() for p in paths):
        if len(paths) == 1 and paths[0].is_dir():
            return _load_folder(paths[0], config, split)
        builders = {_builder_for(p) for p in paths}
        if len(builders) > 1:
            raise ValueError(f"Files of different formats given together: {parts}.")
        return datasets.load_dataset(builders.pop(), data_files=[str(p) for p in paths], split="train")
    missing_local = [p for p in parts if p.startswith((".", "/", "~")) or Path(p).suffix in BUILDERS]
    if missing_local:
        raise FileNotFoundError(f"Dataset file(s) not found: {missing_local}.")
    return datasets.load_dataset(spec, config, split=split)


def _load_folder(folder: Path, config: str | None, split: str) -> datasets.Dataset:
    if (folder / "dataset_info.json").is_file() or (folder / "state.json").is_file() or \
            (folder / "dataset_dict.json").is_file():
        loaded = datasets.load_from_disk(str(folder))
        if isinstance(loaded, datasets.DatasetDict):
            if split not in loaded:
                raise ValueError(f"{folder} has splits {list(loaded)}, not '{split}'.")
            return loaded[split]
        return loaded
    return datasets.load_dataset(str(folder), config, split=split)
