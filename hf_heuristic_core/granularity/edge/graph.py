"""The edges of a pre-LayerNorm residual stream, their order in the mask vector, and their MIB names.

Writers (MIB's nodes): `input` (the token embeddings), every attention head `a{l}.h{h}` (its slice of the output
projection applied to its context vector; the projection's bias is not a head's) and every MLP block `m{l}`.
Readers: each head's query, key and value input, each MLP's input and the final read (`logits`). A reader reads
every writer of an earlier layer, and an MLP in a sequential block also its own layer's heads (not beside them,
with a parallel residual: GPT-NeoX's `use_parallel_residual`). That is MIB's graph (`EAP-IG` `Graph.from_model`).

Grouped-query attention: one key and one value input per *key/value* head, as Edge Pruning's Llama code masks them
(a query head's key comes from its group's key projection, so it cannot read other inputs than its group's); MIB
ungroups GQA, so `mib_edge_scores` writes a group's key / value edge to each query head of the group (exact: those
heads read the same key input). Without GQA the order and the names are MIB's edge for edge.

The mask vector holds, per layer, the query edges `[n_upstream, H]`, then the key and value edges
`[n_upstream, H_kv]` each, then the MLP's `[n_upstream_mlp]`, and last the `logits` edges `[n_writers]`, each block
parent-major (row = writer in MIB's node order).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

__all__ = ["EdgeGraph", "LayerEdges"]


@dataclass(frozen=True)
class LayerEdges:
    """Where one layer's edges sit in the mask vector: the offsets of its q, k, v and MLP blocks and their rows."""

    query: int
    key: int
    value: int
    mlp: int
    upstream: int          # writers feeding q / k / v
    mlp_upstream: int      # writers feeding the MLP


@dataclass(frozen=True)
class EdgeGraph:
    """The edge layout of a model with `num_layers` layers of `num_heads` query heads (`num_kv_heads` key/value
    heads) and a sequential or parallel (`parallel`) attention / MLP residual."""

    num_layers: int
    num_heads: int
    num_kv_heads: int
    parallel: bool = False
    layers: tuple[LayerEdges, ...] = field(init=False)
    logits: int = field(init=False)
    num_edges: int = field(init=False)

    def __post_init__(self) -> None:
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"{self.num_heads} query heads do not split into {self.num_kv_heads} key/value groups.")
        layers, offset = [], 0
        for layer in range(self.num_layers):
            upstream = 1 + layer * (self.num_heads + 1)
            mlp_upstream = upstream if self.parallel else upstream + self.num_heads
            query = offset
            key = query + upstream * self.num_heads
            value = key + upstream * self.num_kv_heads
            mlp = value + upstream * self.num_kv_heads
            offset = mlp + mlp_upstream
            layers.append(LayerEdges(query, key, value, mlp, upstream, mlp_upstream))
        object.__setattr__(self, "layers", tuple(layers))
        object.__setattr__(self, "logits", offset)
        object.__setattr__(self, "num_edges", offset + self.num_writers)

    @classmethod
    def matching(cls, num_layers: int, num_heads: int, num_edges: int, parallel: bool | None = None) -> "EdgeGraph":
        """The graph of `num_layers` x `num_heads` with `num_edges` edges (the key/value head count, and whether the
        residual is parallel when `parallel` is None, read off the count): what a saved edge mask's shape implies."""
        found = [cls(num_layers, num_heads, kv, flag) for kv in range(1, num_heads + 1) if num_heads % kv == 0
                 for flag in ((False, True) if parallel is None else (parallel,))]
        fitting = [graph for graph in found if graph.num_edges == num_edges]
        if not fitting:
            counts = ", ".join(f"{g.num_edges} ({g.num_kv_heads} key/value heads, "
                               f"{'parallel' if g.parallel else 'sequential'})" for g in found)
            raise ValueError(f"{num_edges} edges fit no edge graph of {num_layers} layers x {num_heads} heads (it has "
                             f"{counts}): the masks were made for another model. Pass the masks made for this "
                             "model, or the model they were made for.")
        if len(fitting) > 1:   # e.g. 1 x 4: parallel with 4 key/value heads = sequential with 2
            kinds = "; ".join(f"{g.num_kv_heads} key/value heads, {'parallel' if g.parallel else 'sequential'}"
                              for g in fitting)
            raise ValueError(f"{num_edges} edges fit {len(fitting)} edge graphs of {num_layers} layers x {num_heads} "
                             f"heads ({kinds}); pass parallel=True/False (the model's residual layout) to choose.")
        return fitting[0]

    def is_grouped(self) -> bool:
        return self.num_kv_heads != self.num_heads

    @property
    def num_writers(self) -> int:
        return 1 + self.num_layers * (self.num_heads + 1)

    def writer_names(self) -> list[str]:
        """MIB's node names of the writers, in writer order (the rows of every block)."""
        names = ["input"]
        for layer in range(self.num_layers):
            names += [f"a{layer}.h{head}" for head in range(self.num_heads)] + [f"m{layer}"]
        return names

    def head_writer(self, layer: int, head: int) -> int:
        return 1 + layer * (self.num_heads + 1) + head

    def mlp_writer(self, layer: int) -> int:
        return 1 + layer * (self.num_heads + 1) + self.num_heads

    def blocks(self, z: torch.Tensor, layer: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Views of the mask vector `z`: layer `layer`'s q `[up, H]`, k and v `[up, H_kv]` and MLP `[up_mlp]`."""
        spec = self.layers[layer]
        q = z[spec.query:spec.key].view(spec.upstream, self.num_heads)
        k = z[spec.key:spec.value].view(spec.upstream, self.num_kv_heads)
        v = z[spec.value:spec.mlp].view(spec.upstream, self.num_kv_heads)
        return q, k, v, z[spec.mlp:spec.mlp + spec.mlp_upstream]

    def logits_block(self, z: torch.Tensor) -> torch.Tensor:
        return z[self.logits:self.num_edges]

    def edge_names(self) -> list[str]:
        """Every edge's name in mask-vector order: MIB's `parent->a{l}.h{h}<q>`, `parent->m{l}`, `parent->logits`;
        a grouped key / value edge is named after its group's first query head with `<k>` / `<v>` and `@g{group}`."""
        writers = self.writer_names()
        group = self.num_heads // self.num_kv_heads
        names = []
        for layer, spec in enumerate(self.layers):
            for letter, heads, width in (("q", self.num_heads, 1), ("k", self.num_kv_heads, group),
                                         ("v", self.num_kv_heads, group)):
                for parent in writers[:spec.upstream]:
                    for head in range(heads):
                        suffix = f"@g{head}" if width > 1 else ""
                        names.append(f"{parent}->a{layer}.h{head * width}<{letter}>{suffix}")
            names += [f"{parent}->m{layer}" for parent in writers[:spec.mlp_upstream]]
        names += [f"{parent}->logits" for parent in writers]
        return names

    def from_mib_edges(self, values: dict[str, float], what: str = "edge values") -> torch.Tensor:
        """The inverse of `mib_edge_scores`: MIB's per-edge values as this graph's vector. Under grouped-query
        attention the query heads of a group must agree on their key / value edges (they read one key input here);
        a file that does not (MIB's own attribution of an ungrouped model) is refused, not averaged."""
        names = self.mib_edge_scores(torch.zeros(self.num_edges))
        missing = [name for name in names if name not in values]
        unknown = sorted(set(values) - set(names))
        if missing or unknown:   # a file of a larger model holds every name of a smaller one: unknown names count
            raise ValueError(f"{what}: the edge names do not match this model's graph ({self.num_layers} layers x "
                             f"{self.num_heads} heads, {'parallel' if self.parallel else 'sequential'}): "
                             f"{len(missing)} of its edges missing (e.g. {missing[:3]}), {len(unknown)} not in it "
                             f"(e.g. {unknown[:3]}); the values were made for another model. Pass the file made "
                             "for this model, or the model it was made for.")
        out = torch.zeros(self.num_edges, dtype=torch.float64)
        writers = self.writer_names()
        group = self.num_heads // self.num_kv_heads
        for layer, spec in enumerate(self.layers):
            q, k, v, mlp = self.blocks(out, layer)
            for row, parent in enumerate(writers[:spec.upstream]):
                for head in range(self.num_heads):
                    q[row, head] = values[f"{parent}->a{layer}.h{head}<q>"]
                for kv in range(self.num_kv_heads):
                    for letter, block in (("k", k), ("v", v)):
                        member = [values[f"{parent}->a{layer}.h{kv * group + g}<{letter}>"] for g in range(group)]
                        if any(m != member[0] for m in member):
                            raise ValueError(f"{what}: the query heads a{layer}.h{kv * group}..h{kv * group + group - 1}"
                                             f" share one key/value head, but their <{letter}> edges from {parent} "
                                             f"differ ({member}); this grouped-query model reads one {letter} input "
                                             "per group, so the file cannot be applied exactly.")
                        block[row, kv] = member[0]
            for row, parent in enumerate(writers[:spec.mlp_upstream]):
                mlp[row] = values[f"{parent}->m{layer}"]
        logits = self.logits_block(out)
        for row, parent in enumerate(writers):
            logits[row] = values[f"{parent}->logits"]
        return out

    def mib_edge_scores(self, values: torch.Tensor) -> dict[str, float]:
        """Per-edge values (mask vector order) as MIB's edges: name -> value, GQA key / value edges ungrouped (each
        query head of a group gets its group's value)."""
        values = torch.as_tensor(values).detach().double().cpu()
        if values.shape != (self.num_edges,):
            raise ValueError(f"edge values have shape {tuple(values.shape)}; this graph has {self.num_edges} edges.")
        writers = self.writer_names()
        group = self.num_heads // self.num_kv_heads
        out: dict[str, float] = {}
        for layer, spec in enumerate(self.layers):
            q, k, v, mlp = self.blocks(values, layer)
            for row, parent in enumerate(writers[:spec.upstream]):
                for head in range(self.num_heads):
                    for letter, block, column in (("q", q, head), ("k", k, head // group), ("v", v, head // group)):
                        out[f"{parent}->a{layer}.h{head}<{letter}>"] = float(block[row, column])
            for row, parent in enumerate(writers[:spec.mlp_upstream]):
                out[f"{parent}->m{layer}"] = float(mlp[row])
        for row, parent in enumerate(writers):
            out[f"{parent}->logits"] = float(self.logits_block(values)[row])
        return out
