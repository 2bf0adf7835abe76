"""Checks of what the user points the CLI at (model folders, data files, text columns), with errors that name the
problem and the fix before transformers or datasets answer with something about repo ids or `StopIteration`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..errors import EmptyDatasetError, UsageError

MODEL_FILES = ("config.json", "adapter_config.json")


def looks_local(source: str) -> bool:
    """A path rather than a Hub id: starts with . / ~, has a backslash, or more than one '/' (ids have at most one)."""
    return source.startswith((".", "/", "~")) or "\\" in source or source.count("/") > 1 or \
        (os.sep != "/" and os.sep in source)


def check_model_source(source: str, gguf_file: str | None = None, flag: str = "--model") -> None:
    """A local model folder must exist and hold a saved model; a Hub id is left to transformers."""
    path = Path(source).expanduser()
    if path.exists():
        if path.is_file():
            hint = (f"pass the folder and the file name: {flag} {path.parent} --gguf_file {path.name}"
                    if path.suffix == ".gguf" else "pass the folder that save_pretrained wrote")
            raise UsageError(f"{flag} {source} is a file, not a model folder; {hint}.")
        if gguf_file:
            if not (path / gguf_file).is_file():
                raise UsageError(f"--gguf_file {gguf_file} is not in {source}; the folder holds "
                                 f"{sorted(p.name for p in path.glob('*.gguf')) or 'no .gguf files'}.")
            return
        if not any((path / name).is_file() for name in MODEL_FILES):
            raise UsageError(f"{flag} {source} has no config.json, so it is not a saved model; pass the folder "
                             "that save_pretrained wrote (or a Hub id like 'namespace/name').")
        return
    if looks_local(source):
        raise UsageError(f"{flag} {source}: no such folder; check the path, or pass a Hub id like 'namespace/name'.")


def check_rows(data: Any, what: str) -> Any:
    """Refuse an empty dataset now rather than deep inside the dataloader or the mean computation."""
    if hasattr(data, "__len__") and len(data) == 0:
        raise EmptyDatasetError(f"{what} has no rows; give data with at least one example (check the file, the "
                                "split and --max_train_examples).")
    return data


def load_dataset_checked(source: str, config: str | None, split: str, flag: str) -> Any:
    """`data.tables.load_table` (which names missing paths itself), with empty files reported as such."""
    from ..data.tables import load_table
    what = f"{flag} {source} (split {split!r})"
    try:
        data = load_table(source, config, split)
    except StopIteration as err:  # datasets' json builder on an empty file
        raise EmptyDatasetError(f"{what} has no rows; give data with at least one example.") from err
    except ValueError as err:
        if "corresponds to no data" in str(err):
            raise EmptyDatasetError(f"{what} has no rows; give data with at least one example.") from err
        raise
    return check_rows(data, what)


def resolve_text_columns(columns: list[str], requested: str | None) -> list[str]:
    """`data.tokenize.text_columns`, its error turned into a `UsageError` naming the flag."""
    from ..data.tokenize import text_columns
    try:
        return text_columns(columns, requested)
    except ValueError as err:
        raise UsageError(str(err).replace("text columns [", "--text_columns [", 1)) from None
