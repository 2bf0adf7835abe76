"""Crash-safe file writing: nothing already saved is ever left half-overwritten."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path


def atomic_write_text(target: Path, text: str) -> None:
    """Write beside the target and rename, so a crash never leaves a half-written file in its place."""
    atomic_write(target, lambda tmp: Path(tmp).write_text(text))


def atomic_write(target: Path, writer: Callable[[str], object]) -> None:
    """Call `writer(tmp_path)` on a temp file in the target's folder, then move it over the target."""
    target = Path(target)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    try:
        writer(tmp)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def ordinary_permissions(folder: Path) -> None:
    """Give a folder made by `tempfile.mkdtemp` (mode 0700) and everything in it (transformers writes weights through
    temp files too: 0600) the modes an ordinary write gets under the umask (typically 0755 / 0644), before it is
    renamed into place: a private temp folder must not make a saved model unreadable to colleagues."""
    mask = _umask()
    for path in [Path(folder), *Path(folder).rglob("*")]:
        if not path.is_symlink():
            os.chmod(path, (0o777 if path.is_dir() else 0o666) & ~mask)


def replace_folder(target: Path, files: Mapping[str, str]) -> None:
    """Make `files` (name -> text) the whole content of folder `target`: built in a sibling temp folder, then swapped
    in, so no file of an earlier content stays beside the new ones and a crash leaves the old folder whole."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        for name, text in files.items():
            (staging / name).write_text(text)
        ordinary_permissions(staging)
        swap_folder(staging, target)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def swap_folder(staging: Path, target: Path) -> None:
    """Put the finished folder `staging` in `target`'s place: an existing `target` is renamed away first and removed
    after, so at no moment is there a half-written folder under the target's name."""
    if target.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old.", dir=target.parent))
        os.replace(target, old / "previous")
        os.replace(staging, target)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(staging, target)


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def atomic_write_many(writers: dict[Path, Callable[[str], object]]) -> None:
    """Write every file to a temp file first and move them into place only when all succeeded, so a failure
    leaves the previous set of files (e.g. an artifact's config, masks and card) untouched and consistent."""
    temps: dict[Path, str] = {}
    try:
        for target, writer in writers.items():
            target = Path(target)
            fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
            os.close(fd)
            temps[target] = tmp
            writer(tmp)
            os.chmod(tmp, 0o666 & ~_umask())
        for target, tmp in temps.items():
            os.replace(tmp, target)
    finally:
        for tmp in temps.values():
            if os.path.exists(tmp):
                os.unlink(tmp)


def check_run_settings(folder: Path, wanted: dict, earlier_runs: str, flag: str = "--run_dir") -> None:
    """Record the settings a resumable run directory is made with (`run_settings.json`) and refuse to resume it with
    others: mixing checkpoints of two settings gives results no single setting produced. A directory holding files
    matching `earlier_runs` but no record (made before records existed) is refused too, since its settings are
    unknown. Raises `SystemExit` with the differing values, for scripts."""
    record = Path(folder) / "run_settings.json"
    if record.exists():
        found = json.loads(record.read_text())
        differ = {k: (found.get(k), v) for k, v in wanted.items() if found.get(k) != v}
        if differ:
            raise SystemExit(f"{flag} {folder} holds runs made with other settings ({differ}, as (saved, given)); "
                             f"give a new {flag} or the saved settings.")
    elif any(Path(folder).glob(earlier_runs)):
        raise SystemExit(f"{flag} {folder} holds runs but no run_settings.json (an older revision of this script), "
                         f"so their settings are unknown; give a new {flag}.")
    else:
        atomic_write_text(record, json.dumps(wanted, indent=2) + "\n")
