"""A ranking of units as a MIB submission folder: one importance file plus one binary circuit per size.

MIB accepts either (1) one file of floating-point importance scores per model/task, from which its evaluation builds
every circuit size itself, or (2) binary circuits of at most 0, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20 and 50 percent of the
items each (`hannamw/MIB-circuit-track` README, "Submitting to the MIB Leaderboard"). Both are written:
`importances.json` (the name `run_attribution.py` gives its output) and `circuit_<percent>.json` per size, with
`int(p * n)` units (`ranking.circuit_size`, as MIB's evaluation counts), chosen as MIB's node-level `apply_topn`
would. The leaderboard wants the folder named `<task>_<model>` (e.g. `ioi_gpt2`) inside a Hugging Face repo.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .mib import MibConfig, write_mib_circuit
from .ranking import MIB_SUBMISSION_SIZES, circuit_size, scored_count, top_units

__all__ = ["IMPORTANCES_NAME", "circuit_file_name", "export_mib_circuits"]

IMPORTANCES_NAME = "importances.json"


def circuit_file_name(fraction: float) -> str:
    """`circuit_0.1.json` for 0.1% (0.001), `circuit_50.json` for 50%."""
    return f"circuit_{fraction * 100:.10g}.json"


def export_mib_circuits(output_dir: str | os.PathLike, cfg: MibConfig, scores: Mapping[str, Any],
                        sizes: Sequence[float] = MIB_SUBMISSION_SIZES, absolute: bool = False,
                        edges: str = "all", importances: bool = True) -> dict[str, Any]:
    """Write the importance file and the binary circuits; returns {"importances": path, "circuits": {fraction:
    {"path", "units"}}, "n_scored": n}. Every file is written atomically."""
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    n_scored = scored_count(scores)
    written: dict[str, Any] = {"n_scored": n_scored, "circuits": {}}
    if importances:
        written["importances"] = str(write_mib_circuit(out / IMPORTANCES_NAME, cfg, scores=scores, edges=edges))
    for fraction in sizes:
        count = circuit_size(fraction, n_scored)
        masks = top_units(scores, count, absolute)
        path = write_mib_circuit(out / circuit_file_name(fraction), cfg, masks=masks, edges=edges)
        written["circuits"][float(fraction)] = {"path": str(path), "units": count}
    return written
