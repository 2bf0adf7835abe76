"""Where a ranking of units comes from: a MIB circuit file's node scores, or a mask artifact's learned logits.

Both give scores by kind (`{"heads": [L, H], "mlps": [L]}`, higher = more important, NaN = unscored). A mask
artifact ranks by its mask logits (`logits.<kind>`, saved with every unit artifact), as the importance score

    score = softplus(logit) = -log(1 - sigmoid(logit))     (-log of the gate's drop probability at temperature 1)

which is positive and strictly increasing in the logit: it ranks the units exactly as the logits do, by the signed
score and by |score| alike. (The raw logits do not: their sign means "pruned", so MIB's |score| ranking, from which it
reports CMD, put the most strongly pruned units first.) A kind the run did not prune has no logits and is unscored
(always kept, as MIB keeps unscored nodes); a unit pinned on or off scores `PINNED_SCORE` or 0.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from ..errors import MaskShapeError, PruningError
from ..granularity.edge.settings import EDGE_KIND
from .export import scores_path
from .mib import MibFormatError, read_mib_circuit
from ..artifacts import read_artifact

__all__ = ["PINNED_SCORE", "importance_from_logits", "load_unit_scores"]

PINNED_SCORE = 1e9


def importance_from_logits(logits: Any) -> torch.Tensor:
    """The importance score of mask logits (see the module docstring): softplus in float64, NaN kept."""
    return torch.nn.functional.softplus(torch.as_tensor(logits, dtype=torch.float64))


def load_unit_scores(source: str | os.PathLike, shapes: dict[str, tuple[int, ...]] | None = None,
                     graph: Any = None) -> dict[str, torch.Tensor]:
    """Scores by kind from a MIB circuit `.json` (its node scores, or its edge scores) or a mask artifact folder
    (its logits: unit or edge masks).

    `shapes` (e.g. `prunable.mask_shapes()`) is checked when given: a ranking made for another model is refused. A
    folder written by `circuit export` / `circuit attribute` stands for its importance file. An edge-level MIB file
    needs the edge `graph` of the model (`prunable.granularity.graph`) to map MIB's edge names to mask entries."""
    path = scores_path(source)
    if path.is_dir():
        scores = _artifact_scores(path)
    elif path.suffix == ".json":
        circuit = read_mib_circuit(path)
        if circuit.scores is None and circuit.edge_scores is not None:
            if graph is None:
                raise MibFormatError(f"{path} scores edges (an edge-level importance file), but this model has no "
                                     "edge masks: rank it on a model wrapped with PruningConfig(granularity='edge') "
                                     "(command line: circuit --level edge or auto, prune --granularity edge).")
            _check_edge_file(path, circuit.cfg, graph)
            try:
                scores = {EDGE_KIND: graph.from_mib_edges(circuit.edge_scores, str(path))}
            except ValueError as err:
                raise MibFormatError(str(err)) from None
        elif circuit.scores is None:
            raise MibFormatError(f"{path} is a binary MIB circuit (no node has a 'score'); a ranking needs scores: "
                                 "pass an importance file (importances.json) or a mask artifact folder.")
        else:
            scores = {kind: value.clone() for kind, value in circuit.scores.items()}
    else:
        raise PruningError(f"{source}: not a mask artifact folder or a MIB circuit .json file; pass one of those "
                           "(e.g. runs/sp50-seed0, or circuits/importances.json).")
    if shapes is not None:
        _check_level(source, set(scores), set(shapes))
        for kind, shape in shapes.items():
            if kind not in scores:
                scores[kind] = torch.full(tuple(shape), float("nan"))
            elif tuple(scores[kind].shape) != tuple(shape):
                axes = {"heads": " (layers x heads)", "mlps": " (layers)"}.get(kind, "")
                raise MaskShapeError(f"{source}: {kind} scores have shape {tuple(scores[kind].shape)}{axes}, but this "
                                     f"model's {kind} are {tuple(shape)}; the ranking was made for another model.")
        extra = sorted(set(scores) - set(shapes))
        if extra:
            raise PruningError(f"{source} scores unit kind(s) {extra} this model does not have ({sorted(shapes)}).")
    return scores


def _check_edge_file(path: Path, cfg: Any, graph: Any) -> None:
    """An edge file's cfg against the model's graph: a file of a larger model holds every edge name of a smaller one,
    so the names alone would accept it."""
    if (cfg.n_layers, cfg.n_heads, cfg.parallel_attn_mlp) != (graph.num_layers, graph.num_heads, graph.parallel):
        raise MaskShapeError(f"{path}: the edge file's cfg is {cfg.n_layers} layers x {cfg.n_heads} heads (parallel_"
                             f"attn_mlp={cfg.parallel_attn_mlp}), but this model's edge graph is {graph.num_layers} x "
                             f"{graph.num_heads} (parallel={graph.parallel}); the file was made for another model.")


def _check_level(source: Any, kinds: set[str], model_kinds: set[str]) -> None:
    """A node ranking (heads, MLP blocks) on a model with edge masks, or an edge ranking on one with unit masks,
    refused with the level to wrap the model at."""
    if kinds == {EDGE_KIND} and EDGE_KIND not in model_kinds:
        raise PruningError(f"{source} ranks edges, but this model's masks are {sorted(model_kinds)} (not edges): "
                           "rank it on a model wrapped with PruningConfig(granularity='edge') (command line: circuit "
                           "--level edge or auto, prune --granularity edge).")
    if model_kinds == {EDGE_KIND} and kinds and EDGE_KIND not in kinds:
        raise PruningError(f"{source} ranks {sorted(kinds)} (a node-level ranking), but this model has edge masks: "
                           "rank it on a model wrapped with PruningConfig(granularity='unit') (command line: circuit "
                           "--level node or auto, prune --granularity unit).")


def _artifact_scores(path: Path) -> dict[str, Any]:
    artifact = read_artifact(path)
    if artifact.config.granularity not in ("unit", "edge"):
        raise PruningError(f"{path}: a {artifact.config.granularity!r} mask artifact; circuit rankings are over heads "
                           "and MLP blocks (granularity 'unit') or edges (granularity 'edge').")
    scores = {}
    for kind in artifact.masks:
        logits = artifact.tensors.get(f"logits.{kind}")
        if logits is None:
            scores[kind] = torch.full(tuple(artifact.masks[kind].shape), float("nan"))
        else:
            forced = artifact.tensors.get(f"forced.{kind}")
            value = importance_from_logits(logits)
            if forced is not None:   # pinned units rank by their pin (first / last; finite, so still scored)
                value = torch.where(forced > 0, torch.full_like(value, PINNED_SCORE), value)
                value = torch.where(forced < 0, torch.zeros_like(value), value)
            scores[kind] = value
    if all(bool(torch.isnan(v).all()) for v in scores.values()):
        raise PruningError(f"{path}: the artifact has no mask logits to rank by (only fixed masks); pass an artifact "
                           "saved by PruningTrainer or prune.")
    return scores
