"""The scripts under `benchmarks/<kind>/` are not a package: the tests load one by path, as
`python benchmarks/<kind>/<name>.py` would run it (benchmarks/README.md names the kinds)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"


def load_script(path: str) -> ModuleType:
    """`benchmarks/<path>.py` as a module (a fresh one per call); `path` is "<kind>/<name>", e.g.
    "reproductions/repro_lepori_subtasks", so a moved script fails here by name instead of importing another one."""
    file = BENCHMARKS / f"{path}.py"
    if not file.is_file():
        found = sorted(str(p.relative_to(BENCHMARKS).with_suffix("")) for p in BENCHMARKS.glob(f"*/{Path(path).name}.py"))
        raise FileNotFoundError(f"no benchmark script {file.relative_to(ROOT)}; "
                                + (f"it is at benchmarks/{found[0]}.py: pass {found[0]!r}" if found else
                                   "pass '<kind>/<name>' of a script under benchmarks/ (see benchmarks/README.md)"))
    spec = importlib.util.spec_from_file_location(f"_bench_{file.stem}", file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
