"""Build an expensive test input once per test session, whichever pytest-xdist worker asks for it first.

A session-scoped fixture runs once per worker: with `-n 2` a fine-tuned model or a trained mask artifact was built
twice. `build_once(tmp_path_factory, name, build)` builds into a folder under the session's shared temporary root,
holding an exclusive `flock` while it builds (in place, so the absolute paths it records stay valid): a second worker that asks meanwhile blocks on the lock (no polling) and
then reads the finished folder. A build that raises leaves nothing behind, and the next request tries again.

The folder is read-only by convention: a test that changes what it finds there copies it first (`copy_of`).
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

__all__ = ["build_once", "copy_of", "session_root"]

_COMPLETE = ".complete"


def session_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The temporary folder of this test session that every xdist worker sees (each worker's own base folder is
    `<root>/popen-gwN`); the session's base folder itself without xdist."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def build_once(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], object]) -> Path:
    """The folder `build(folder)` filled, built by the first worker of the session to ask (see the module doc)."""
    root = session_root(tmp_path_factory)
    folder = root / f"shared-{name}"
    with open(root / f"shared-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)   # blocks while another worker builds; released when the file closes
        if not (folder / _COMPLETE).is_file():
            # built in place (not renamed afterwards): what it builds records absolute paths of its own files
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            try:
                build(folder)
            except BaseException:
                shutil.rmtree(folder, ignore_errors=True)
                raise
            (folder / _COMPLETE).touch()   # last: a folder without it is an unfinished build
    return folder


def copy_of(folder: Path, destination: Path) -> Path:
    """A private copy of a shared build, for a test that writes into it."""
    shutil.copytree(folder, destination, ignore=shutil.ignore_patterns(_COMPLETE))
    return destination
