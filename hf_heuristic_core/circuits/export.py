"""A ranking of units as MIB submissions: an importance-file folder and a binary-circuit folder, each valid alone.

MIB's leaderboard takes one folder per task and model, named `<task>_<model>` (e.g. `ioi_gpt2`), holding either
(1) one file of importance scores, from which its evaluation builds every circuit size itself, or (2) nine binary
circuits with at most 0.1, 0.2, 0.5, 1, 2, 5, 10, 20 and 50 percent of the edges each (`hannamw/MIB-circuit-track`
README, "Submitting to the MIB Leaderboard"). Its dispatch reads any folder of two or more files as binary circuits,
takes the first nine in directory-listing order and maps them to those sizes by edge count, so both kinds in one
folder (or a tenth file) are scored wrongly. This module therefore writes

    OUTPUT_DIR/importances/<name>/importances.json     (the name `run_attribution.py` gives its output)
    OUTPUT_DIR/circuits/<name>/circuit_<percent>.json  (one per size; nothing else in the folder)
    OUTPUT_DIR/export.json                             (what was written: units and edges per circuit)

Each `<name>` folder is replaced whole (built beside it, then renamed), so no file of an earlier export stays behind
to be counted as a circuit. Binary circuits always list their edges: MIB reads a binary circuit's edge membership
from the file, so a circuit written with `"edges": {}` has f = 0 at every size (refused). A circuit of fraction `p`
has `int(p * n)` units as MIB counts nodes (`ranking.circuit_size`), fewer when those would hold more than `p` of
the graph's edges (the leaderboard's bound; only tiny graphs reach it); `export.json` records both counts.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from ..granularity.edge.settings import EDGE_KIND
from ..io_utils import atomic_write_text, replace_folder
from .mib import MibConfig, MibFormatError, flatten_units, mib_document, mib_edge_document
from .ranking import (
    MIB_SUBMISSION_SIZES,
    circuit_size,
    scored_count,
    size_label,
    top_units,
)

logger = logging.getLogger(__name__)

__all__ = ["CIRCUITS_FOLDER", "EXPORT_RECORD", "IMPORTANCES_FOLDER", "IMPORTANCES_NAME", "check_submission_name",
           "circuit_file_name", "edge_counts", "export_mib_circuits", "scores_path", "submission_scores"]

IMPORTANCES_NAME = "importances.json"
IMPORTANCES_FOLDER = "importances"
CIRCUITS_FOLDER = "circuits"
EXPORT_RECORD = "export.json"
# MIB's scripts split `<task>_<model>` on "_" (print_results.py splits the result file name into four parts).
_NAME = re.compile(r"^[A-Za-z0-9.\-]+_[A-Za-z0-9.\-]+$")


def circuit_file_name(fraction: float) -> str:
    """`circuit_0.1.json` for 0.1% (0.001), `circuit_50.json` for 50%."""
    return f"circuit_{fraction * 100:.10g}.json"


def check_submission_name(name: str) -> str:
    """A leaderboard folder name `<task>_<model>`: exactly one underscore, no path separators."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise MibFormatError(f"submission name {name!r} is not '<task>_<model>' (e.g. ioi_gpt2, arc-easy_llama3): "
                             "MIB's leaderboard reads the task and the model from the folder name, split on its one "
                             "underscore; use letters, digits, '-' and '.' in each part.")
    return name


def edge_counts(cfg: MibConfig, masks: Mapping[str, Any]) -> tuple[int, int]:
    """(edges in the circuit, edges in MIB's graph) of a node circuit whose edges are in the graph when both ends
    are (what `mib_document(edges="all")` writes): counted per child without listing the edges."""
    keep = flatten_units(masks, cfg).reshape(cfg.n_layers, cfg.n_heads + 1).bool()
    kept = total = 0
    upstream, upstream_kept = 1, 1          # `input`, always in the graph
    for layer in range(cfg.n_layers):
        heads_kept = int(keep[layer, :cfg.n_heads].sum())
        mlp_kept = int(keep[layer, cfg.n_heads])
        total += 3 * cfg.n_heads * upstream
        kept += 3 * heads_kept * upstream_kept
        if cfg.parallel_attn_mlp:
            total += upstream
            kept += mlp_kept * upstream_kept
        upstream, upstream_kept = upstream + cfg.n_heads, upstream_kept + heads_kept
        if not cfg.parallel_attn_mlp:
            total += upstream
            kept += mlp_kept * upstream_kept
        upstream, upstream_kept = upstream + 1, upstream_kept + mlp_kept
    return kept + upstream_kept, total + upstream     # every upstream node feeds `logits`


def _fitted_circuit(cfg: MibConfig, scores: Mapping[str, Any], fraction: float, n_scored: int,
                    absolute: bool) -> dict[str, Any]:
    """The top-`int(p * n)` units, fewer while they would hold more than `p` of the edges."""
    by_rank = circuit_size(fraction, n_scored)
    units = by_rank
    while True:
        masks = top_units(scores, units, absolute)
        kept, total = edge_counts(cfg, masks)
        if kept <= fraction * total or units == 0:
            break
        units -= 1
    entry = {"fraction": float(fraction), "units_by_rank": by_rank, "units": units, "edges": kept,
             "edges_total": total, "edge_share": kept / total, "fits": kept <= fraction * total, "masks": masks}
    if units < by_rank:
        logger.warning("Binary circuit %s: the top %d units hold more than %s of the graph's %d edges (MIB's "
                       "leaderboard bound); written with %d units.", size_label(fraction), by_rank,
                       size_label(fraction), total, units)
    if not entry["fits"]:
        logger.warning("Binary circuit %s: even the empty circuit keeps the input->logits edge, %d of %d edges "
                       "(%.3g%%): this graph is too small for a circuit of at most %s of its edges.",
                       size_label(fraction), kept, total, 100 * kept / total, size_label(fraction))
    return entry


def _edge_circuit(cfg: MibConfig, graph: Any, scores: torch.Tensor, fraction: float,
                  absolute: bool) -> dict[str, Any]:
    """The highest-scoring edges within `p` of MIB's edge count: a prefix of the ranking (so the sizes nest). Under
    grouped-query attention a key / value edge of this model stands for one MIB edge per query head of its group
    and counts as many."""
    weights = torch.ones(graph.num_edges, dtype=torch.long)
    group = graph.num_heads // graph.num_kv_heads
    for layer, spec in enumerate(graph.layers):
        weights[spec.key:spec.mlp] = group
    total = int(weights.sum())
    budget = int(fraction * total)
    value = scores.abs() if absolute else scores.clone()
    ranked = torch.argsort(-value, stable=True)
    within = torch.cumsum(weights[ranked], 0) <= budget
    keep = torch.zeros(graph.num_edges)
    keep[ranked[within]] = 1.0
    kept = int(weights[keep.bool()].sum())
    return {"fraction": float(fraction), "edges": kept, "edges_total": total, "edge_share": kept / total,
            "fits": True, "in_graph": {name: bool(v) for name, v in graph.mib_edge_scores(keep).items()}}


def export_mib_circuits(output_dir: str | os.PathLike, cfg: MibConfig, scores: Mapping[str, Any], name: str,
                        sizes: Sequence[float] = MIB_SUBMISSION_SIZES, absolute: bool = False, edges: str = "all",
                        importances: bool = True, circuits: bool = True, graph: Any = None) -> dict[str, Any]:
    """Write the importance folder and/or the binary-circuit folder of submission `name` (see the module docstring)
    and `export.json`; returns that record plus the paths. `absolute` picks the binary circuits by |score|;
    `edges="none"` (an importance file without its edge list, which MIB's node-level evaluation rebuilds) is
    refused for binary circuits. Edge scores (`{"edges": [E]}`, an edge granularity's order) need their `graph`
    (`EdgeGraph`) and are written at MIB's edge level: every file lists every edge with its score / membership."""
    check_submission_name(name)
    if set(scores) == {EDGE_KIND}:
        return _export_edges(output_dir, cfg, graph, scores[EDGE_KIND], name, sizes, absolute, importances, circuits)
    if not (importances or circuits):
        raise ValueError("nothing to export: pass importances=True and/or circuits=True.")
    if circuits and edges != "all":
        raise MibFormatError("binary circuits must list their edges (edges='all'): MIB reads a binary circuit's edge "
                             "membership from the file, so a circuit without edges has faithfulness 0 at every size. "
                             "Write edges, or export the importance file alone.")
    out = Path(output_dir)
    n_scored = scored_count(scores)
    record: dict[str, Any] = {"name": name, "n_scored": n_scored, "absolute": bool(absolute), "edges": edges,
                              "cfg": cfg.to_dict()}
    if importances:
        folder = out / IMPORTANCES_FOLDER / name
        replace_folder(folder, {IMPORTANCES_NAME: json.dumps(mib_document(cfg, scores=scores, edges=edges))})
        record["importances"] = str(folder / IMPORTANCES_NAME)
    if circuits:
        if len({circuit_file_name(f) for f in sizes}) != len(sizes):
            raise ValueError(f"circuit sizes repeat: {list(sizes)}.")
        folder = out / CIRCUITS_FOLDER / name
        files, entries = {}, {}
        for fraction in sizes:
            entry = _fitted_circuit(cfg, scores, float(fraction), n_scored, absolute)
            files[circuit_file_name(fraction)] = json.dumps(mib_document(cfg, masks=entry.pop("masks")))
            entries[circuit_file_name(fraction)] = entry
        replace_folder(folder, files)
        record["circuits_folder"] = str(folder)
        record["circuits"] = entries
        record["leaderboard_sizes"] = sorted(float(s) for s in sizes) == sorted(MIB_SUBMISSION_SIZES)
        record["all_fit"] = all(entry["fits"] for entry in entries.values())
    atomic_write_text(out / EXPORT_RECORD, json.dumps(record, indent=2) + "\n")
    return record


def _export_edges(output_dir: str | os.PathLike, cfg: MibConfig, graph: Any, scores: Any, name: str,
                  sizes: Sequence[float], absolute: bool, importances: bool, circuits: bool) -> dict[str, Any]:
    if graph is None:
        raise MibFormatError("edge scores ({'edges': [E]}) are a vector in an edge graph's order, so they need that "
                             "graph to be written in MIB's edge names: pass graph=prunable.granularity.graph "
                             "(the model wrapped with granularity='edge') to export_mib_circuits.")
    if (graph.num_layers, graph.num_heads, graph.parallel) != (cfg.n_layers, cfg.n_heads, cfg.parallel_attn_mlp):
        raise MibFormatError(f"the edge graph ({graph.num_layers} layers x {graph.num_heads} heads, parallel="
                             f"{graph.parallel}) and the MIB cfg ({cfg.n_layers} x {cfg.n_heads}, parallel="
                             f"{cfg.parallel_attn_mlp}) describe different models: pass mib_config(prunable) and "
                             "prunable.granularity.graph of the same wrapped model.")
    scores = torch.as_tensor(scores, dtype=torch.float64)
    if scores.shape != (graph.num_edges,):
        raise MibFormatError(f"edge scores have shape {tuple(scores.shape)}, but this graph has {graph.num_edges} "
                             "edges: the scores were made for another model (pass the scores and the graph of one "
                             "model).")
    if not bool(torch.isfinite(scores).all()):
        bad = int((~torch.isfinite(scores)).sum())
        raise MibFormatError(f"{bad} of {graph.num_edges} edge scores are NaN or infinite; MIB's edge level ranks "
                             "every edge, so give each a finite score (e.g. 0 for an edge nothing scored).")
    out = Path(output_dir)
    record: dict[str, Any] = {"name": name, "level": "edge", "n_scored": graph.num_edges, "absolute": bool(absolute),
                              "edges": "all", "cfg": cfg.to_dict(), "grouped_query": graph.is_grouped()}
    if importances:
        folder = out / IMPORTANCES_FOLDER / name
        document = mib_edge_document(cfg, scores=graph.mib_edge_scores(scores))
        replace_folder(folder, {IMPORTANCES_NAME: json.dumps(document)})
        record["importances"] = str(folder / IMPORTANCES_NAME)
    if circuits:
        folder = out / CIRCUITS_FOLDER / name
        files, entries = {}, {}
        for fraction in sizes:
            entry = _edge_circuit(cfg, graph, scores, float(fraction), absolute)
            files[circuit_file_name(fraction)] = json.dumps(mib_edge_document(cfg, in_graph=entry.pop("in_graph")))
            entries[circuit_file_name(fraction)] = entry
        replace_folder(folder, files)
        record.update(circuits_folder=str(folder), circuits=entries, all_fit=True,
                      leaderboard_sizes=sorted(float(s) for s in sizes) == sorted(MIB_SUBMISSION_SIZES))
    atomic_write_text(out / EXPORT_RECORD, json.dumps(record, indent=2) + "\n")
    return record


def submission_scores(path: str | os.PathLike) -> Path | None:
    """The importance file of an export folder (`OUTPUT_DIR/importances/<name>/importances.json`), if it holds one."""
    found = sorted(Path(path).glob(f"{IMPORTANCES_FOLDER}/*/{IMPORTANCES_NAME}"))
    return found[0] if len(found) == 1 else None


def scores_path(source: str | os.PathLike) -> Path:
    """Where a ranking `source` is read from: an export folder stands for its importance file; anything else is
    itself."""
    path = Path(source)
    found = submission_scores(path) if path.is_dir() else None
    return found if found is not None else path
