"""Unit masks and unit scores in the circuit format of MIB's circuit-localization track, written and read.

MIB (Mueller et al., 2025) evaluates circuits with the `Graph` class of its EAP-IG submodule
(`hannamw/EAP-IG`, commit 7af394a5, pinned by `hannamw/MIB-circuit-track`; file `src/eap/graph.py`). What this module
follows, from that code:

* **The document** (`Graph.to_json` / `Graph.from_json`): a JSON object with `cfg` (`n_layers`, `n_heads`,
  `parallel_attn_mlp`, `d_model`), `nodes` (name -> `{"in_graph": bool, "score": float}`) and `edges`
  (name -> `{"score": float, "in_graph": bool}`). `from_json` asserts all three keys, so a node-level file still
  carries `edges`.
* **Node names and order** (`Graph.from_model`): `input`, then per layer `a{l}.h{h}` for every head and `m{l}`,
  then `logits`. Grouped-query models are ungrouped (`ungroup_grouped_query_attention = True` in
  `run_evaluation.py`), so `n_heads` counts *query* heads, as this package's head masks do.
* **Edges**: from every earlier node of the residual stream to each head's `<q>`, `<k>` and `<v>` input, to each
  MLP (after the same layer's heads, or beside them with `parallel_attn_mlp`), and to `logits`;
  named `parent->child<q>` for heads and `parent->child` otherwise.
* **Unscored nodes**: a node without `score` stays NaN in `from_json`; node-level `apply_topn` keeps every unscored
  node and does not count it (`n_scored_items` in `MIB_circuit_track/evaluation.py` counts non-NaN scores). This
  package never ablates the token embeddings, so `input` is written without a score: it is always in the circuit
  and the circuit sizes count heads and MLP blocks only. `logits` is always in the graph (`LogitNode.in_graph`).

This module does no evaluation itself; `circuits.faithfulness` computes MIB's curve with this package's hooks.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..errors import PruningError
from ..granularity.edge.settings import EDGE_KIND
from ..io_utils import atomic_write_text

__all__ = ["EDGE_MODES", "MibCircuit", "MibConfig", "MibFormatError", "edge_names", "mib_config",
           "mib_document", "mib_edge_document", "node_names", "read_mib_circuit", "write_mib_circuit"]

EDGE_MODES = ("all", "none")
# Model types whose attention and MLP read the same residual stream (no edge from a layer's heads to its MLP).
_PARALLEL_TYPES = {"phi": True, "gptj": True, "cohere": True}


class MibFormatError(PruningError, ValueError):
    """A file is not a MIB circuit this package can read, or masks / scores do not fit MIB's node graph."""


@dataclass(frozen=True)
class MibConfig:
    """MIB's `cfg`: the shape of the node graph (`n_heads` counts query heads)."""

    n_layers: int
    n_heads: int
    d_model: int
    parallel_attn_mlp: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"n_layers": self.n_layers, "n_heads": self.n_heads, "parallel_attn_mlp": self.parallel_attn_mlp,
                "d_model": self.d_model}

    @classmethod
    def from_dict(cls, cfg: Mapping[str, Any], source: str = "cfg") -> "MibConfig":
        missing = [k for k in ("n_layers", "n_heads") if k not in cfg]
        if missing:
            raise MibFormatError(f"{source}: 'cfg' has no {missing}; MIB's cfg needs n_layers and n_heads "
                                 "(and d_model, parallel_attn_mlp).")
        n_layers, n_heads = cfg["n_layers"], cfg["n_heads"]
        if not (isinstance(n_layers, int) and isinstance(n_heads, int) and n_layers > 0 and n_heads > 0):
            raise MibFormatError(f"{source}: cfg n_layers={n_layers!r}, n_heads={n_heads!r} must be positive integers.")
        return cls(n_layers, n_heads, int(cfg.get("d_model") or 0), bool(cfg.get("parallel_attn_mlp", False)))

    @property
    def num_units(self) -> int:
        """Heads and MLP blocks: the nodes a circuit size counts."""
        return self.n_layers * (self.n_heads + 1)


def mib_config(prunable: Any) -> MibConfig:
    """The MIB `cfg` of a wrapped single-stack model with unit masks (heads and MLP blocks) or edge masks."""
    kinds = getattr(prunable, "kinds", {})
    graph = getattr(getattr(prunable, "granularity", None), "graph", None)
    if set(kinds) == {EDGE_KIND} and graph is not None:
        architecture = prunable.architecture
        return MibConfig(graph.num_layers, graph.num_heads, int(architecture.hidden_size or 0), graph.parallel)
    if set(kinds) != {"heads", "mlps"}:
        raise MibFormatError(f"MIB's circuit graph has one stack of attention heads and MLP blocks; this model's mask "
                             f"kinds are {sorted(kinds)} (granularity {prunable.pruning_config.granularity!r}). Export "
                             "unit masks (PruningConfig(granularity='unit')) of a decoder or encoder-only model.")
    architecture = prunable.architecture
    hf_config = getattr(prunable, "config", None)
    return MibConfig(architecture.num_layers, architecture.num_heads, int(architecture.hidden_size or 0),
                     parallel_attn_mlp(architecture.model_type, hf_config))


def parallel_attn_mlp(model_type: str | None, hf_config: Any = None) -> bool:
    """Whether attention and MLP of a layer read the same residual stream (GPT-NeoX with `use_parallel_residual`,
    GPT-J, Phi, Cohere, Falcon's `parallel_attn`); MIB's graph then has no edge from a layer's heads to its MLP."""
    for name in ("use_parallel_residual", "parallel_attn"):
        value = getattr(hf_config, name, None)
        if isinstance(value, bool):
            return value
    if model_type == "gpt_neox" and hf_config is None:
        return True   # GPTNeoXConfig's default
    return _PARALLEL_TYPES.get(model_type or "", False)


# ------------------------------------------------------------------ the node graph
def unit_names(cfg: MibConfig) -> list[str]:
    """Heads and MLP blocks in MIB's node order: `a{l}.h0 .. a{l}.h{H-1}, m{l}` per layer."""
    names = []
    for layer in range(cfg.n_layers):
        names += [f"a{layer}.h{head}" for head in range(cfg.n_heads)]
        names.append(f"m{layer}")
    return names


def node_names(cfg: MibConfig) -> list[str]:
    """Every node of MIB's graph in `Graph.from_model` order: input, the units, logits."""
    return ["input", *unit_names(cfg), "logits"]


def iter_edges(cfg: MibConfig) -> Iterator[tuple[str, str, str]]:
    """(edge name, parent, child) for every real edge of MIB's graph, in `Graph.from_model` order."""
    residual = ["input"]
    for layer in range(cfg.n_layers):
        heads = [f"a{layer}.h{head}" for head in range(cfg.n_heads)]
        mlp = f"m{layer}"
        for parent in residual:
            for head in heads:
                for letter in "qkv":
                    yield f"{parent}->{head}<{letter}>", parent, head
            if cfg.parallel_attn_mlp:
                yield f"{parent}->{mlp}", parent, mlp
        residual = residual + heads
        if not cfg.parallel_attn_mlp:
            for parent in residual:
                yield f"{parent}->{mlp}", parent, mlp
        residual = residual + [mlp]
    for parent in residual:
        yield f"{parent}->logits", parent, "logits"


def edge_names(cfg: MibConfig) -> list[str]:
    return [name for name, _, _ in iter_edges(cfg)]


# ------------------------------------------------------------------ unit tensors <-> node values
def flatten_units(values: Mapping[str, Any], cfg: MibConfig) -> torch.Tensor:
    """`{"heads": [L, H], "mlps": [L]}` as one vector in MIB's unit order (`unit_names`)."""
    heads = torch.as_tensor(values["heads"], dtype=torch.float64)
    mlps = torch.as_tensor(values["mlps"], dtype=torch.float64)
    if tuple(heads.shape) != (cfg.n_layers, cfg.n_heads) or tuple(mlps.shape) != (cfg.n_layers,):
        raise MibFormatError(f"unit values have shapes heads {tuple(heads.shape)}, mlps {tuple(mlps.shape)}; MIB's "
                             f"graph of this model needs heads [{cfg.n_layers}, {cfg.n_heads}] and mlps "
                             f"[{cfg.n_layers}].")
    return torch.cat([heads, mlps.unsqueeze(1)], dim=1).flatten()


def unflatten_units(flat: torch.Tensor, cfg: MibConfig) -> dict[str, torch.Tensor]:
    """Inverse of `flatten_units`."""
    grid = torch.as_tensor(flat).reshape(cfg.n_layers, cfg.n_heads + 1)
    return {"heads": grid[:, :cfg.n_heads].clone(), "mlps": grid[:, cfg.n_heads].clone()}


# ------------------------------------------------------------------ writing
def mib_document(cfg: MibConfig, scores: Mapping[str, Any] | None = None, masks: Mapping[str, Any] | None = None,
                 edges: str = "all") -> dict[str, Any]:
    """The MIB JSON document of one circuit.

    `scores` (by kind, NaN = unscored) become node `score`s; `masks` (by kind, 1 = in the circuit; default: every
    unit) become node `in_graph`. `input` and `logits` are always in the graph and `input` carries no score (see the
    module docstring). `edges="all"` writes every real edge with score 0 and `in_graph` true when both ends are in
    the circuit (what `Graph.prune` would leave of a node-level circuit); `"none"` writes `"edges": {}`, which
    `Graph.from_json` accepts and MIB's node-level evaluation of an *importance file* rebuilds from the node scores.
    A binary circuit without edges is not a node circuit to MIB: it reads a binary circuit's membership from its
    edges, so every size would have f = 0 (`export_mib_circuits` refuses it).
    """
    if edges not in EDGE_MODES:
        raise ValueError(f"edges={edges!r} must be one of {EDGE_MODES}.")
    names = unit_names(cfg)
    flat_scores = flatten_units(scores, cfg) if scores is not None else None
    flat_masks = flatten_units(masks, cfg) if masks is not None else torch.ones(len(names), dtype=torch.float64)
    if bool(((flat_masks != 0) & (flat_masks != 1)).any()):
        raise MibFormatError("MIB circuits are binary: masks must be 0 or 1 (binarize them first, e.g. "
                             "prunable.get_masks(binary=True)).")
    in_graph = {"input": True, "logits": True, **{n: bool(v) for n, v in zip(names, flat_masks.tolist())}}
    nodes: dict[str, dict[str, Any]] = {"input": {"in_graph": True}}
    for index, name in enumerate(names):
        entry: dict[str, Any] = {"in_graph": in_graph[name]}
        if flat_scores is not None and math.isfinite(float(flat_scores[index])):
            entry["score"] = float(flat_scores[index])
        nodes[name] = entry
    nodes["logits"] = {"in_graph": True}
    edge_dict = {}
    if edges == "all":
        edge_dict = {name: {"score": 0.0, "in_graph": in_graph[parent] and in_graph[child]}
                     for name, parent, child in iter_edges(cfg)}
    return {"cfg": cfg.to_dict(), "nodes": nodes, "edges": edge_dict}


def mib_edge_document(cfg: MibConfig, scores: Mapping[str, float] | None = None,
                      in_graph: Mapping[str, bool] | None = None) -> dict[str, Any]:
    """The MIB JSON document of an edge-level circuit: every edge of MIB's graph with its `score` (0 without
    `scores`) and `in_graph` (true without `in_graph`); a node is in the graph when an edge in the graph touches it
    (`input` and `logits` always). Nodes carry no score (MIB's edge-level evaluation ranks edges)."""
    names = [name for name, _, _ in iter_edges(cfg)]
    for given, what in ((scores, "scores"), (in_graph, "in_graph")):
        if given is not None and set(given) != set(names):
            unknown, missing = sorted(set(given) - set(names)), sorted(set(names) - set(given))
            raise MibFormatError(f"edge {what} do not match MIB's graph of this cfg: unknown {unknown[:3]}, missing "
                                 f"{missing[:3]}.")
    touched = {"input", "logits"}
    edges = {}
    for name, parent, child in iter_edges(cfg):
        member = True if in_graph is None else bool(in_graph[name])
        edges[name] = {"score": 0.0 if scores is None else float(scores[name]), "in_graph": member}
        if member:
            touched |= {parent, child}
    nodes = {name: {"in_graph": name in touched} for name in node_names(cfg)}
    return {"cfg": cfg.to_dict(), "nodes": nodes, "edges": edges}


def write_mib_circuit(path: str | os.PathLike, cfg: MibConfig, scores: Mapping[str, Any] | None = None,
                      masks: Mapping[str, Any] | None = None, edges: str = "all") -> Path:
    """Write `mib_document(...)` to `path` atomically (temp file, then rename)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(target, json.dumps(mib_document(cfg, scores, masks, edges)))
    return target


# ------------------------------------------------------------------ reading
@dataclass
class MibCircuit:
    """A MIB circuit file read back: its cfg, per-kind node scores (NaN: unscored; None: no node has a score) and
    per-kind membership (`in_graph`), plus the membership of `input`."""

    cfg: MibConfig
    scores: dict[str, torch.Tensor] | None
    in_graph: dict[str, torch.Tensor]
    input_in_graph: bool = True
    edge_count: int = 0
    path: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # The edges as written: name -> score (None: no edge has a non-zero score) and name -> in_graph.
    edge_scores: dict[str, float] | None = None
    edge_in_graph: dict[str, bool] = field(default_factory=dict)

    def masks(self) -> dict[str, torch.Tensor]:
        """The circuit as this package's unit masks (`set_masks(**circuit.masks())`; 1 keeps a unit). An edge-level
        circuit is refused: unit masks would put back the edges it leaves out between nodes it keeps."""
        if self.is_edge_level():
            cut = self.edges_cut_between_kept_nodes()
            what = (f"it leaves out {len(cut)} edge(s) between nodes it keeps (e.g. {cut[:3]})" if cut else
                    "it scores edges, not nodes")
            raise MibFormatError(f"{self.path or 'this circuit'} is an edge-level circuit: {what}, which unit masks "
                                 "(heads and MLP blocks) cannot express. Apply it with edge masks: wrap the model "
                                 "with PruningConfig(granularity='edge') and "
                                 "set_masks(**circuit.edge_masks(prunable.granularity.graph)).")
        return {kind: value.float() for kind, value in self.in_graph.items()}

    def _kept_nodes(self) -> dict[str, bool]:
        kept = {"input": self.input_in_graph, "logits": True}
        kept.update(zip(unit_names(self.cfg), flatten_units(self.in_graph, self.cfg).bool().tolist()))
        return kept

    def edges_cut_between_kept_nodes(self) -> list[str]:
        """Edges out of the circuit whose two ends are in it: none in a node circuit written by this package (an
        edge is in the graph when both its ends are), some in an edge-level binary circuit."""
        kept = self._kept_nodes()
        cut = []
        for name, member in self.edge_in_graph.items():
            parent, _, child = name.partition("->")
            if not member and kept.get(parent, False) and kept.get(child.split("<")[0], False):
                cut.append(name)
        return cut

    def is_edge_level(self) -> bool:
        """Whether the file selects or scores edges rather than nodes: no node has a score, and the edges carry
        scores or leave out edges between kept nodes. (A node-scored file is node level whatever its edges say:
        MIB's own node importance files leave every edge out of the graph.)"""
        return self.scores is None and (self.edge_scores is not None or bool(self.edges_cut_between_kept_nodes()))

    def edge_masks(self, graph: Any) -> dict[str, torch.Tensor]:
        """The circuit as edge masks of `graph` (`prunable.granularity.graph`, the model wrapped with
        granularity='edge'). An edge-level circuit: its edges' `in_graph`. A node circuit: an edge is kept when both
        its ends are, which ablates each left-out unit for every reader, as unit masks do (under grouped-query
        attention a group's key / value edge is kept when it is for any query head of the group: the left-out heads
        of the group are ablated anyway)."""
        if (self.cfg.n_layers, self.cfg.n_heads, self.cfg.parallel_attn_mlp) != \
                (graph.num_layers, graph.num_heads, graph.parallel):
            raise MibFormatError(f"{self.path or 'this circuit'}: its cfg is {self.cfg.n_layers} layers x "
                                 f"{self.cfg.n_heads} heads (parallel_attn_mlp={self.cfg.parallel_attn_mlp}), but the "
                                 f"edge graph is {graph.num_layers} x {graph.num_heads} (parallel={graph.parallel}); "
                                 "the circuit was made for another model.")
        if self.is_edge_level():
            values = {name: float(member) for name, member in self.edge_in_graph.items()}
        else:
            values = _node_circuit_edges(self._kept_nodes(), graph)
        try:
            return {EDGE_KIND: graph.from_mib_edges(values, str(self.path or "circuit")).float()}
        except ValueError as err:
            raise MibFormatError(str(err)) from None


def _node_circuit_edges(kept: Mapping[str, bool], graph: Any) -> dict[str, float]:
    """MIB's edges of a node circuit: 1 when both ends are kept; a grouped key / value edge 1 for every query head of
    its group when it is for one of them (the graph reads one key / value input per group)."""
    values = {}
    for name in graph.mib_edge_scores(torch.zeros(graph.num_edges)):
        parent, _, child = name.partition("->")
        values[name] = float(kept[parent] and kept[child.split("<")[0]])
    group = graph.num_heads // graph.num_kv_heads
    if group == 1:
        return values

    def key(name: str) -> tuple[str, str, int, str] | None:
        parent, _, child = name.partition("->")
        if not child.endswith(("<k>", "<v>")):
            return None
        layer, head = child[:-3].split(".h")
        return parent, layer, int(head) // group, child[-3:]

    best: dict[tuple[str, str, int, str], float] = {}
    for name, value in values.items():
        if key(name) is not None:
            best[key(name)] = max(best.get(key(name), 0.0), value)
    return {name: best[key(name)] if key(name) is not None else value for name, value in values.items()}


def read_mib_circuit(path: str | os.PathLike) -> MibCircuit:
    """Read a MIB circuit JSON file (node level), checking what `Graph.from_json` would trip over."""
    path = Path(path)
    if not path.is_file():
        raise MibFormatError(f"{path}: no such file; pass a MIB circuit .json file (e.g. importances.json).")
    try:
        document = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise MibFormatError(f"{path} is not valid JSON ({err}); the file is corrupt or partial.") from err
    if not isinstance(document, dict):
        raise MibFormatError(f"{path}: a MIB circuit is a JSON object with cfg, nodes and edges.")
    missing = [k for k in ("cfg", "nodes", "edges") if k not in document]
    if missing:
        raise MibFormatError(f"{path}: missing key(s) {missing}; MIB's Graph.from_json needs 'cfg', 'nodes' and "
                             "'edges' (edges may be {} for a node-level circuit).")
    cfg = MibConfig.from_dict(document["cfg"], str(path))
    nodes = document["nodes"]
    if not isinstance(nodes, dict):
        raise MibFormatError(f"{path}: 'nodes' must map node names to {{'in_graph': ..., 'score': ...}}.")
    expected = unit_names(cfg)
    unknown = sorted(set(nodes) - set(expected) - {"input", "logits"})
    if unknown:
        raise MibFormatError(f"{path}: node(s) {unknown[:5]} do not exist in a graph with n_layers={cfg.n_layers}, "
                             f"n_heads={cfg.n_heads} (names are a{{layer}}.h{{head}}, m{{layer}}, input, logits).")
    absent = [n for n in expected if n not in nodes]
    if absent:
        raise MibFormatError(f"{path}: {len(absent)} unit node(s) are missing (e.g. {absent[:3]}); a circuit file "
                             "must list every head and MLP node.")
    membership = []
    values = []
    for name in expected:
        entry = nodes[name]
        if not isinstance(entry, dict) or "in_graph" not in entry:
            raise MibFormatError(f"{path}: node {name!r} has no 'in_graph' (got {entry!r}).")
        membership.append(bool(entry["in_graph"]))
        score = entry.get("score")
        values.append(float("nan") if score is None else float(score))
    flat = torch.tensor(values, dtype=torch.float64)
    any_score = any("score" in nodes[n] for n in expected)
    scores = unflatten_units(flat, cfg) if any_score else None
    in_graph = {k: v.bool() for k, v in unflatten_units(torch.tensor(membership, dtype=torch.float64), cfg).items()}
    if not isinstance(document["edges"], dict):
        raise MibFormatError(f"{path}: 'edges' must be an object (edge name -> {{score, in_graph}}), possibly empty.")
    input_entry = nodes.get("input", {"in_graph": True})
    # MIB's own attribution scores the input node too; this package never ablates the embeddings, so the score is
    # kept aside (and a MIB evaluation of such a file counts one more scored node than the units here).
    extra = {"input_score": float(input_entry["score"])} if input_entry.get("score") is not None else {}
    edge_scores, edge_in_graph = _edges_of(document["edges"], path)
    return MibCircuit(cfg, scores, in_graph, bool(input_entry.get("in_graph", True)), len(document["edges"]),
                      str(path), extra, edge_scores, edge_in_graph)


def _edges_of(edges: Mapping[str, Any], path: Path) -> tuple[dict[str, float] | None, dict[str, bool]]:
    scores, members = {}, {}
    for name, entry in edges.items():
        if not isinstance(entry, dict) or "in_graph" not in entry:
            raise MibFormatError(f"{path}: edge {name!r} has no 'in_graph' (got {entry!r}).")
        members[name] = bool(entry["in_graph"])
        scores[name] = float(entry.get("score") or 0.0)
    return (scores if any(value != 0.0 for value in scores.values()) else None), members
