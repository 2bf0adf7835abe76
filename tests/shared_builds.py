"""Build an expensive test input once per test session, whichever pytest-xdist worker asks for it first.

A session-scoped fixture runs once per worker: with `-n 2` a fine-tuned model or a trained mask artifact was built
twice. `build_once(tmp_path_factory, name, build)` builds into a folder under the session's shared temporary root,
holding an exclusive `flock` while it builds (in place, so the absolute paths it records stay valid): a second worker that asks meanwhile blocks on the lock (no polling) and
then reads the finished folder. A build that raises leaves nothing behind, and the next request tries again.

The folder is read-only by convention: a test that changes what it finds there copies it first (`copy_of`).

Models: `module_once(name, construct)` returns `construct()`'s module, built once per session (saved with `torch.save`
by the worker that built it, `torch.load`-ed by the others, ~0.05 s against 0.3-2 s per build of a tiny model once
transformers' patch mapping is active) and once per process (later calls get the same object: callers deep-copy). It
shares between workers only once the session fixture `shared_model_builds` has run in the process (test modules
request it); without it every process builds for itself. `switch_attention` turns a copy of a build into the same
model with another attention implementation (checked bit for bit against a fresh build of every row and tiny model
when it was written), so that eager and SDPA variants cost one build.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import nn

__all__ = ["build_once", "copy_of", "module_once", "session_root", "shared_model_builds", "switch_attention"]

_COMPLETE = ".complete"
# The session's temporary-path factory, once `shared_model_builds` has run in this process.
_SESSION: dict[str, pytest.TempPathFactory] = {}
# name -> the module this process built or loaded.
_MODULES: dict[str, nn.Module] = {}


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


@pytest.fixture(scope="session")
def shared_model_builds(tmp_path_factory: pytest.TempPathFactory):
    """Lets `module_once` share its builds with the session's other xdist workers (see the module doc)."""
    _SESSION["factory"] = tmp_path_factory
    yield
    _SESSION.pop("factory", None)


def module_once(name: str, construct: Callable[[], nn.Module]) -> nn.Module:
    """`construct()`, built once per session and kept per process (see the module doc); the same object on every
    call, so a caller that changes it deep-copies it first."""
    if name in _MODULES:
        return _MODULES[name]
    factory = _SESSION.get("factory")
    if factory is None:
        _MODULES[name] = construct()
        return _MODULES[name]
    built: list[nn.Module] = []

    def build(folder: Path) -> None:
        built.append(construct())
        torch.save(built[0], folder / "module.pt")

    folder = build_once(factory, name, build)
    _MODULES[name] = built[0] if built else _registered(torch.load(folder / "module.pt", weights_only=False))
    return _MODULES[name]


def _registered(module: nn.Module) -> nn.Module:
    """A loaded model as its `__init__` would have left the process: transformers records hidden states and
    attentions only for model classes its `__init__` has entered into a process-wide registry, so a model unpickled
    in a process that never built its class returned neither (silently: a comparison of two such outputs checked
    fewer fields)."""
    from transformers import PreTrainedModel
    from transformers.utils.output_capturing import _CAN_RECORD_REGISTRY
    for submodule in module.modules():
        if isinstance(submodule, PreTrainedModel):
            _CAN_RECORD_REGISTRY[submodule] = submodule._can_record_outputs
    return module


def switch_attention(model: nn.Module, attn_implementation: str) -> bool:
    """Set `attn_implementation` on a built transformers model and every sub-model, in place (a deep copy of one
    build instead of another build: the seed, not the implementation, decides the weights). False where this class
    cannot switch at run time (transformers then only warns): the caller builds it."""
    from transformers import PreTrainedModel

    def implementations() -> set[str]:
        return {module.config._attn_implementation for module in model.modules()
                if isinstance(module, PreTrainedModel)}

    if implementations() != {attn_implementation}:
        if not type(model)._can_set_attn_implementation():
            return False
        model.set_attn_implementation(attn_implementation)
    return implementations() == {attn_implementation}
