"""Output folders of the commands that write: whose files a folder holds, who writes it now, and whether a run may
write into it. Nothing already saved is lost without being asked.

A command claims its output folder before any model or data is loaded (`claim_output_dir`):

- **writable:** the folder is created and a lock file written into it; a read-only folder fails here, not after the
  run;
- **one writer at a time:** the hidden lock file `.hf_heuristic_core.lock` is locked by the operating system
  (`filelock`). A second run into the same folder refuses while the first runs; the lock goes when its process
  does, however it ends (a SIGKILL too), so nothing stale is left to detect or delete. The run that created the
  file removes it at release; a killed run's file stays, unlocked (as does the pid record earlier versions wrote,
  which is ignored);
- **whose files:** `hf_heuristic_core_run.json` records the command (its *kind*) and the settings that decide its
  result. A folder holding another kind's run, a run with other settings, or files that no run of ours recorded is
  refused, naming what is there (and the differences), unless `overwrite=True` (`--overwrite_output_dir`). The same
  kind with the same settings is the same run: it resumes or repeats;
- **inputs are never outputs:** an output folder that is one of the command's inputs, or holds one, is refused even
  with `overwrite` (export into the masks folder would otherwise replace the masks); so is one inside a local data
  folder (`DATA_FLAGS`), which is read with every file under it;
- **no claim without output:** a run that fails before writing a file (empty folders do not count) leaves the folder
  as it found it: a new folder is removed, an earlier run's record is put back, and the corrected re-run is not
  refused for "settings differ".

Nothing here deletes a file: `overwrite` only lets a command write its own files into a folder that holds others.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from .errors import UsageError
from .io_utils import atomic_write_text

logger = logging.getLogger(__name__)

__all__ = ["DATA_FLAGS", "LOCK_NAME", "RECORD_NAME", "FolderLock", "OutputClaim", "OutputFolderError", "check_inputs",
           "check_writable", "claim_output_dir", "local_paths", "read_record", "refuse_other_commands",
           "settings_differences"]

# Flags whose local folder is read as data with every data file under it, at any depth (`data.tables`): an output
# folder inside one would be read back as part of the data, starting with the run's own record.
DATA_FLAGS = frozenset({"--dataset", "--train_data", "--train", "--id_eval", "--ood_eval"})
RECORD_NAME = "hf_heuristic_core_run.json"
LOCK_NAME = ".hf_heuristic_core.lock"
RECORD_FORMAT = "hf_heuristic_core.run/1"
OVERWRITE_FLAG = "--overwrite_output_dir"


class OutputFolderError(UsageError):
    """An output folder that a run may not write: another run's or another kind's files, locked, read-only, or one
    of the run's own inputs. The message names what is there and the flag or folder to use instead."""


# --------------------------------------------------------------------------------------------------------------------
# The record
# --------------------------------------------------------------------------------------------------------------------


def read_record(folder: str | os.PathLike) -> dict[str, Any] | None:
    """The run record of `folder` (None when there is none or it cannot be read)."""
    path = Path(folder) / RECORD_NAME
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and record.get("format") == RECORD_FORMAT else None


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def local_paths(value: Any) -> Any:
    """A setting naming local files or folders (comma-separated allowed) with each existing one made absolute, so the
    same run typed from another working directory has the same settings; Hub ids and other values are kept."""
    if not isinstance(value, str) or not value:
        return value
    parts = [part.strip() for part in value.split(",")]
    paths = [Path(part).expanduser() for part in parts]
    if not all(path.exists() for path in paths):
        return value
    return ",".join(str(path.resolve()) for path in paths)


# A `PruningConfig` nests its methods' settings under these keys; earlier releases recorded the same settings at the
# config's top level, so they are compared as the config's own entries (a record of either release against the other).
METHOD_SETTINGS_KEYS = ("relaxation_settings", "granularity_settings")


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts as `a.b.c` keys, so that settings are compared entry by entry."""
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for key, item in value.items():
            nested = key in METHOD_SETTINGS_KEYS and isinstance(item, dict)
            out.update(_flat(item, prefix if nested else f"{prefix}{key}."))
        return out
    return {prefix[:-1]: value}


def settings_differences(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """`key: old -> new` for every setting both runs recorded with different values, nested settings entry by entry
    (`pruning_config.init_mean: 10.0 -> 3.0`). A key only one side knows was added or dropped by another release (a
    new field of `PruningConfig`, say) and is not compared."""
    old, new = _flat(_jsonable(dict(old))), _flat(_jsonable(dict(new)))
    return [f"{key}: {old[key]!r} -> {new[key]!r}" for key in sorted(set(old) & set(new)) if old[key] != new[key]]


# --------------------------------------------------------------------------------------------------------------------
# The lock
# --------------------------------------------------------------------------------------------------------------------


def _acquire(folder: Path) -> tuple[FileLock, bool]:
    """Take `folder`'s lock without waiting (a second run refuses at once instead of queueing behind the first);
    returns it and whether this run created its file. An operating-system lock (`filelock`: flock, or where a file
    system has none filelock's own marker with its own check of a dead holder): it goes with its process, however
    that ends, so a killed run leaves nothing that blocks. The file's contents (the pid record earlier versions
    wrote) are never read."""
    path = folder / LOCK_NAME
    created = not path.exists()
    lock = FileLock(path, thread_local=False)   # one claim per process, released from any thread
    try:
        lock.acquire(blocking=False)
    except Timeout:
        raise OutputFolderError(
            f"{folder} is being written by another run (it holds the lock {path}); wait for it to finish or choose "
            "another output folder. The lock is released when that run ends, even if it is killed: there is nothing "
            "to delete.") from None
    except OSError as err:
        raise _not_writable(folder, err) from err
    return lock, created


def _release(lock: FileLock, created: bool, remove_folder: bool) -> None:
    """Drop `lock`. The file this run created is removed first, while still held, so a run leaves no file it did
    not write (a run that opened it just before is refused, not let in: filelock 4 takes no lock on a file that has
    lost its name); with `remove_folder`, so is the folder if it is then empty. A killed run's file stays, unlocked."""
    path = Path(lock.lock_file)
    try:
        if created:
            path.unlink(missing_ok=True)
        if remove_folder:
            try:
                path.parent.rmdir()
            except OSError:
                pass   # something was written, or someone else's hidden files: the folder stays
    finally:
        lock.release()


def _not_writable(folder: Path, err: OSError) -> OutputFolderError:
    return OutputFolderError(f"{folder} is not writable ({err.strerror or err}); choose another output folder or fix "
                             "its permissions. Nothing was run.")


# --------------------------------------------------------------------------------------------------------------------
# The claim
# --------------------------------------------------------------------------------------------------------------------


class OutputClaim:
    """A claimed output folder: holds the lock until `release()` (or the end of a `with` block) and records the run.
    `finish(**info)` marks the run finished in its record (a folder whose run never finished is an unfinished input
    for export and analyses)."""

    def __init__(self, folder: Path, kind: str, settings: dict[str, Any], lock: FileLock,
                 existed: bool = True, created_lock_file: bool = False) -> None:
        self.folder, self.kind, self.settings = folder, kind, settings
        self._lock: FileLock | None = lock
        self._created_lock_file = created_lock_file   # True: release removes the lock file again
        self.record: dict[str, Any] = {}
        self.existed = existed   # False: the claim created the folder, and removes it again if nothing was written
        self.finished = False
        self.previous = read_record(folder)
        self.snapshot = _snapshot(folder)
        self.folders = _subfolders(folder)

    def write_record(self, finished: bool, **info: Any) -> None:
        previous = read_record(self.folder) or {}
        self.record = {"format": RECORD_FORMAT, "kind": self.kind, "settings": _jsonable(self.settings),
                       "started": previous.get("started") if previous.get("kind") == self.kind and
                       previous.get("settings") == _jsonable(self.settings) else time.strftime("%Y-%m-%d %H:%M:%S"),
                       "finished": finished, **_jsonable(info)}
        if finished:
            self.record["finished_at"] = time.strftime("%Y-%m-%d %H:%M:%S")
        atomic_write_text(self.folder / RECORD_NAME, json.dumps(self.record, indent=2) + "\n")

    def finish(self, **info: Any) -> None:
        self.write_record(True, **info)
        self.finished = True

    def release(self) -> None:
        """Give the folder back, then drop the lock (so no other run sees it half given back). A run that did not
        finish and wrote no file (folders it made but left empty do not count) leaves the folder as it found it: the
        empty folders it made are removed, the previous run's record is put back, or (no previous record) its own
        record is removed with the folder itself when the claim created it. So a run that failed before writing does
        not leave a claim that refuses the corrected re-run."""
        lock, self._lock = self._lock, None
        if lock is None:
            return
        given_back = False
        try:
            given_back = self._give_back()
        finally:
            _release(lock, self._created_lock_file, remove_folder=given_back and not self.existed)

    def _give_back(self) -> bool:
        """Undo the claim's record and empty folders when the run finished nothing and wrote no file (True then)."""
        if self.finished or not self.folder.is_dir() or _snapshot(self.folder) != self.snapshot:
            return False
        for folder in sorted(_subfolders(self.folder) - self.folders, key=lambda p: len(p.parts), reverse=True):
            try:
                folder.rmdir()
            except OSError:
                pass   # not empty after all (hidden files): it stays
        if self.previous is None:
            (self.folder / RECORD_NAME).unlink(missing_ok=True)
        elif read_record(self.folder) != self.previous:   # a refused claim never wrote one: nothing to put back
            atomic_write_text(self.folder / RECORD_NAME, json.dumps(self.previous, indent=2) + "\n")
        return True

    def __enter__(self) -> "OutputClaim":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


def _resolved(path: str | os.PathLike) -> Path:
    return Path(path).expanduser().resolve()


def check_inputs(output_dir: str | os.PathLike, inputs: Iterable[tuple[str, Any]], holding: bool = True) -> None:
    """Refuse an output folder that is, or (with `holding`) holds, one of `inputs` ((flag, path) pairs;
    comma-separated paths, Hub ids and paths that do not exist are fine): for commands that write into a folder they
    do not claim."""
    _check_inputs(_resolved(output_dir), inputs, holding)


def refuse_other_commands(folder: str | os.PathLike, allowed: Iterable[str], what: str, flag: str = "--output_dir"
                          ) -> None:
    """Refuse a folder whose run record names a command not in `allowed` (e.g. `effective-size` pointed at a prune
    run's folder, whose checkpoints are mask checkpoints, not a fine-tuning run's)."""
    record = read_record(folder)
    if record is not None and record.get("kind") not in set(allowed):
        raise OutputFolderError(f"{flag} {folder} holds the output of another command ({record.get('kind')!r}), not "
                                f"{what}; choose {what}.")


def _check_inputs(folder: Path, inputs: Iterable[tuple[str, Any]], holding: bool = True) -> None:
    for flag, value in inputs:
        if not value:
            continue
        for part in str(value).split(","):
            path = Path(part.strip()).expanduser()
            if not part.strip() or not path.exists():
                continue   # a Hub id, or nothing to protect
            source = path.resolve()
            if flag.strip() in DATA_FLAGS and source.is_dir() and source in folder.parents:
                raise OutputFolderError(
                    f"The output folder {folder} is inside this command's data folder {flag.strip()} {value}, which is "
                    "read with every data file under it: this run's own files (its run record first) would be read "
                    "as data. Choose an output folder outside it.")
            if source == folder or (holding and folder in source.parents):
                where = "is" if source == folder else "holds"
                raise OutputFolderError(
                    f"The output folder {folder} {where} this command's input {flag} {value}; writing there could "
                    "replace or mix with it. Choose another output folder.")


def _walk(folder: Path) -> Iterable[tuple[Path, list[str]]]:
    """(folder, its visible files) for `folder` and every visible folder below it; hidden names (the lock, temp files
    of atomic writes) and symbolic links to folders are skipped."""
    if not folder.is_dir():
        return
    for root, dirs, files in os.walk(folder):
        dirs[:] = [name for name in dirs if not name.startswith(".")]
        yield Path(root), [name for name in files if not name.startswith(".")]


def _snapshot(folder: Path) -> dict[str, int]:
    """Modification times of every visible file under the folder but the record: whether a run wrote anything.
    Empty folders are not files: making one is not writing."""
    snapshot = {}
    for root, files in _walk(folder):
        for name in files:
            path = root / name
            if path != folder / RECORD_NAME:
                try:
                    snapshot[str(path.relative_to(folder))] = path.stat().st_mtime_ns
                except OSError:
                    pass   # a dangling link, or removed meanwhile
    return snapshot


def _subfolders(folder: Path) -> set[Path]:
    return {root for root, _ in _walk(folder)} - {folder}


def _visible(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))


def claim_output_dir(output_dir: str | os.PathLike, kind: str, settings: Mapping[str, Any], *,
                     overwrite: bool = False, inputs: Iterable[tuple[str, Any]] = (),
                     legacy_settings: Callable[[Path], dict[str, Any] | None] | None = None,
                     own_files: Callable[[Path], bool] | None = None,
                     flag: str = "--output_dir") -> OutputClaim:
    """Check and lock `output_dir` for a run of `kind` with `settings` (see the module docstring); returns the claim
    (use it as a context manager, or call `release()`).

    `inputs`: (flag, path) pairs the run reads. `legacy_settings(folder)`: the settings of a folder this kind wrote
    before run records existed (e.g. a study's `study_args.json`), or None. `own_files(folder)`: True when the
    folder's unrecorded contents are this kind's own output that it may replace (e.g. a previous slim export).
    """
    folder = _resolved(output_dir)
    _check_inputs(folder, inputs)
    if folder.exists() and not folder.is_dir():
        raise OutputFolderError(f"{flag} {output_dir} is a file, not a folder; choose a folder.")
    existed = folder.exists()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise _not_writable(folder, err) from err
    lock, created = _acquire(folder)
    claim = OutputClaim(folder, kind, dict(settings), lock, existed, created)
    try:
        problem = _ownership_problem(folder, kind, dict(settings), legacy_settings, own_files)
        if problem and not overwrite:
            raise OutputFolderError(f"{flag} {output_dir} {problem}. Choose another folder, or pass "
                                    f"{OVERWRITE_FLAG} to write this run's files into it anyway (nothing is deleted; "
                                    "files of the same name are replaced).")
        if problem:
            logger.warning("%s %s %s; writing into it as asked (%s).", flag, output_dir, problem, OVERWRITE_FLAG)
        claim.write_record(False)
    except BaseException:
        claim.release()
        raise
    return claim


def _ownership_problem(folder: Path, kind: str, settings: dict[str, Any],
                       legacy_settings: Callable[[Path], dict[str, Any] | None] | None,
                       own_files: Callable[[Path], bool] | None) -> str | None:
    """Why this run may not write into `folder` without being asked (None: it may)."""
    record = read_record(folder)
    if record is not None and not record.get("finished") and not _snapshot(folder):
        record = None   # a run that was killed before writing any file: nothing here to lose
    if record is not None:
        if record.get("kind") != kind:
            return f"holds the output of another command ({record.get('kind')!r}, not {kind!r})"
        differences = settings_differences(record.get("settings") or {}, settings)
        if differences:
            return "holds another run's output (settings differ: " + "; ".join(differences) + ")"
        return None
    files = [name for name in _visible(folder) if name != RECORD_NAME]
    if not _snapshot(folder):
        return None   # empty, or only empty folders: nothing to mix with or to lose
    if legacy_settings is not None:
        old = legacy_settings(folder)
        if old is not None:
            differences = settings_differences(old, settings)
            return None if not differences else \
                "holds another run's output (settings differ: " + "; ".join(differences) + ")"
    if own_files is not None and own_files(folder):
        return None
    shown = ", ".join(files[:5]) + (f" and {len(files) - 5} more" if len(files) > 5 else "")
    return f"is not empty and no run of {kind!r} recorded its files ({shown})"


def check_writable(output_dir: str | os.PathLike, flag: str = "--output_dir") -> Path:
    """Create `output_dir` if needed and write (then remove) a probe file in it: a read-only folder fails now, before
    any model or data is loaded (the claim itself comes once the run's settings are known)."""
    folder = _resolved(output_dir)
    if folder.exists() and not folder.is_dir():
        raise OutputFolderError(f"{flag} {output_dir} is a file, not a folder; choose a folder.")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".write-check.", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        raise _not_writable(folder, err) from err
    return folder


class FolderLock:
    """Only the lock of a claim: one writer at a time in a folder whose files another command owns (e.g.
    `effective-size` writing its results into a fine-tuning run's folder, which checks its own settings)."""

    def __init__(self, output_dir: str | os.PathLike, kind: str, flag: str = "--output_dir") -> None:
        self._existed = _resolved(output_dir).exists()
        self.folder = check_writable(output_dir, flag)
        self.kind = kind
        lock, self._created_lock_file = _acquire(self.folder)
        self._lock: FileLock | None = lock

    def release(self) -> None:
        """Drop the lock; a folder the lock created and nothing was written into is removed again (before the lock
        is dropped, so no other run's files are in it)."""
        lock, self._lock = self._lock, None
        if lock is not None:
            _release(lock, self._created_lock_file, remove_folder=not self._existed)

    def __enter__(self) -> "FolderLock":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()
