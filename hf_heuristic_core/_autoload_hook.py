"""Registers the slim decoder layers (`export.autoload`) when transformers first imports a supported modeling module.

Importing the four modeling modules up front would cost `import hf_heuristic_core` seconds (it imports nothing heavy
until a name is used), so a `sys.meta_path` finder waits for them instead: when
`transformers.models.llama.modeling_llama` (or Mistral's, Qwen2's, Qwen3's) has been executed, the patch for its
decoder layer is registered, before `from_pretrained` builds a model. Modules imported before this package are
registered at install. Dependency-free on purpose: it runs on `import hf_heuristic_core`.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import logging
import sys
from typing import Any

# modeling module -> model type (mirrors export.autoload.AUTOLOAD_MODEL_TYPES, which imports torch)
WATCHED = {
    "transformers.models.llama.modeling_llama": "llama",
    "transformers.models.mistral.modeling_mistral": "mistral",
    "transformers.models.qwen2.modeling_qwen2": "qwen2",
    "transformers.models.qwen3.modeling_qwen3": "qwen3",
}
logger = logging.getLogger(__name__)


def _register(model_type: str) -> None:
    try:
        from .export.autoload import register_autoload  # lazy: only on this path
        register_autoload(model_type)
    except Exception as err:   # noqa: BLE001 - never break the user's transformers import: load_slim still works
        logger.warning("Could not register the slim %s layer for AutoModel loading (%s: %s); uneven slim folders "
                       "load with hf_heuristic_core.load_slim.", model_type, type(err).__name__, err)


class _Loader(importlib.abc.Loader):
    def __init__(self, loader: Any, model_type: str) -> None:
        self._loader, self._model_type = loader, model_type

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def __getattr__(self, name: str) -> Any:   # get_source, is_package, ...: the file loader's own
        return getattr(self._loader, name)

    def exec_module(self, module) -> None:
        self._loader.exec_module(module)
        _register(self._model_type)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        model_type = WATCHED.get(name)
        if model_type is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _Loader(spec.loader, model_type)
        return spec


_FINDER = _Finder()


def install() -> None:
    """Watch for the modeling modules (idempotent); register those already imported."""
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)
    for name, model_type in WATCHED.items():
        if name in sys.modules:
            _register(model_type)


def disable() -> None:
    """Stop watching (modules imported later are not registered)."""
    if _FINDER in sys.meta_path:
        sys.meta_path.remove(_FINDER)
