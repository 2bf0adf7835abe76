"""Checks of a loaded table that the library and the CLI share: an empty dataset is refused with a message that names
it, before the dataloader or the mean computation fails on it (or averages over nothing). Torch- and datasets-free at
import, so the CLI's `--help` can import it."""

from __future__ import annotations

from typing import Any

from .errors import EmptyDatasetError

__all__ = ["check_rows", "load_dataset_checked"]


def check_rows(data: Any, what: str) -> Any:
    """Refuse an empty dataset now rather than deep inside the dataloader or the mean computation."""
    if hasattr(data, "__len__") and len(data) == 0:
        raise EmptyDatasetError(f"{what} has no rows; give data with at least one example (check the file, the "
                                "split and --max_train_examples).")
    return data


def load_dataset_checked(source: str, config: str | None, split: str, flag: str) -> Any:
    """`data.tables.load_table` (which names missing paths itself), with empty files reported as such."""
    from .data.tables import load_table   # lazy: `datasets` loads on first use, so `--help` stays datasets-free
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
