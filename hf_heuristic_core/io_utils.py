"""Crash-safe file writing: nothing already saved is ever left half-overwritten."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Callable


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


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current
