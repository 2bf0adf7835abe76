"""Old module paths of the flat 0.1 layout keep working for one release, with a `DeprecationWarning`.

Each old path is registered in `sys.modules` as a small alias module that forwards attribute access to the module's
new home (imported on first use). Registering the alias, rather than shipping a shim file, keeps the tree showing
only the real layout, and keeps `hf_heuristic_core.effective_size` the function: an imported submodule of that name
would otherwise be bound over it on the package.
"""

from __future__ import annotations

import importlib
import sys
import types
import warnings
from typing import Any

# old module (relative to the package) -> its new home (several, comma-separated, where the old module was split)
MOVED_MODULES: dict[str, str] = {
    "arguments": "training.arguments",
    "attention_patterns": "analysis.attention_patterns",
    "callbacks": "search.callback",
    "cli_analyze": "cli.analyze",
    "cli_effective_size": "cli.effective_size",
    "data_loading": "data.tables",
    "effective_size": "evaluation.effective_size",
    "hard_concrete": "relaxations.hard_concrete",
    "hooks": "ablation.apply",
    "mask_stats": "analysis.mask_stats",
    "means": "batching,ablation.means",
    "report": "analysis.report",
    "study_data": "study.data",
    "tracking": "search.tracking",
    "trainer": "training.trainer",
}


class MovedModule(types.ModuleType):
    """Stands where a module used to be; every attribute comes from the new module, with a deprecation warning."""

    def __init__(self, old_name: str, new_name: str) -> None:
        super().__init__(old_name, f"Moved to {new_name}.")
        self.__dict__["_new_name"] = new_name

    def _targets(self) -> list[types.ModuleType]:
        return [importlib.import_module(name) for name in self.__dict__["_new_name"].split(",")]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name not in ("__all__", "__doc__"):
            raise AttributeError(name)
        one_home = "," not in self.__dict__["_new_name"]
        if one_home:
            # warned before the import, so that a run treating the warning as an error (this project's own tests,
            # a user's -W error) fails at once instead of after a heavy import
            self._warn(self.__dict__["_new_name"])
        for target in self._targets():
            if hasattr(target, name):
                if not one_home:
                    self._warn(target.__name__)
                return getattr(target, name)
        raise AttributeError(f"{self.__name__} (moved to {self.__dict__['_new_name']}) has no attribute {name!r}")

    def _warn(self, new_name: str) -> None:
        warnings.warn(f"{self.__name__} moved to {new_name}; import from there (the old path will be removed in a "
                      "later release).", DeprecationWarning, stacklevel=3)

    def __dir__(self) -> list[str]:
        return sorted({n for target in self._targets() for n in dir(target)})


def install(package: str) -> None:
    """Register an alias for every moved module that is not already imported."""
    for old, new in MOVED_MODULES.items():
        targets = ",".join(f"{package}.{name}" for name in new.split(","))
        sys.modules.setdefault(f"{package}.{old}", MovedModule(f"{package}.{old}", targets))
