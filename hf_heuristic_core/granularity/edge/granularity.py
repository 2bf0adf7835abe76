"""Edge masks through hooks: each reader's input rebuilt from the writers upstream of it (Edge Pruning's formulation).

A pre-LN residual stream at any reader is `r = c + sum_j x_j` (`c`: whatever is no writer's: biases of the output
projections, position embeddings' share not in `input`, ...). With edge masks `z`, reader `i` reads

    y_i = c + sum_j [z_ji x_j + (1 - z_ji) x~_j] = r_i - sum_j (1 - z_ji) (x_j - x~_j)

where `x_j` is writer `j`'s output *in this masked forward* and `x~_j` what a removed edge carries: 0 (zero
ablation), the writer's mean output (mean; `compute_means`), or another example's output (resample). So the hooks
record every writer's `delta_j = x_j - x~_j` as the forward reaches it and, at each reader, subtract the removed
edges' deltas from the residual the model itself carries there:

* the layer's input norm (pre-hook): the stream entering the layer; at layer 0 it is the `input` writer (the
  embeddings as the model adds them: token and, for GPT-2, position embeddings);
* the query / key / value projections (forward hook): their output is recomputed per head, each head's q, k and v
  from its own `norm(y)` (a norm is not linear, so each reader normalises its own input), with the projection's own
  weight slices and bias; a layer whose q / k / v edges are all kept keeps the model's own output;
* the attention output projection (pre-hook): each head's writer output, its context times its slice of the
  projection (the projection's bias stays in `c`, as in TransformerLens / MIB);
* the MLP's norm (pre-hook): its input replaced by `y_mlp`; the MLP output projection (forward hook): the MLP writer;
* the final norm (pre-hook): its input replaced by `y_logits`.

An edge mask of ones changes nothing (bit-identical: no reader input is rebuilt). Removing every edge out of a
writer is the same as ablating that writer as a unit (`granularity='unit'`, same ablation), which the tests check.
Needs the base model without dropout (PruningTrainer's default; active dropout is refused) and without gradient
checkpointing (a recomputed layer would record its writers twice; refused). `torch.compile` (the blocks, through
`training.compile.compile_blocks`, or the whole model) gives the eager logits and gradients: traced readers stack
the deltas instead of reading the buffer, and the data-dependent "every edge kept?" checks break the graph.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from ...ablation.names import ABLATION_MODES
from ...architectures.resolve import resolve_architecture, transformers_model
from ...errors import PruningError
from ..base import ActivationSite, Granularity, MaskKind, MaskSource
from .graph import EdgeGraph
from .settings import EDGE_KIND, EdgeSettings
from .sites import EdgeSites, edge_sites

__all__ = ["EdgeGranularity"]

KIND = EDGE_KIND


@dataclass
class _Layer:
    input_norm: nn.Module
    mlp_norm: nn.Module
    attention_output: nn.Module
    mlp_output: nn.Module
    projections: dict[str, nn.Module]     # "qkv" (fused) or "q", "k", "v"
    module: nn.Module                     # the decoder layer
    paths: dict[str, str]                 # hooked projection -> its path in the layer

    def hooked(self) -> dict[str, nn.Module]:
        return {**self.projections, "attention_output": self.attention_output, "mlp_output": self.mlp_output}

    def check_projections(self) -> None:
        """The hooked projections are still the modules hooked, plain ones: an adapter (PEFT LoRA) wrapped around
        one adds its own term, computed from the whole normed input (q / k / v) or the whole context (the output
        projections), which the per-head rebuilding and the per-head writers would leave out."""
        hooked = self.hooked()
        for name, path in self.paths.items():
            module = self.module.get_submodule(path)
            if module is not hooked[name] or hasattr(module, "base_layer"):
                raise PruningError(f"Edge masks rebuild projections per head, but {path} is {type(module).__name__}, "
                                   "not the plain projection they were attached to (an adapter such as LoRA wraps "
                                   "it). Merge the adapter into the weights first (peft: model.merge_and_unload()), "
                                   "then wrap the model.")


class _RemovedEdges(torch.autograd.Function):
    """`sum_j w[j, r] * delta_j` for readers `r` ([R, B, S, d]), read from `values`, the pass's buffer of every
    delta so far ([n, B, S, d], written once per writer), while the gradient goes to each `delta_j` itself. Stacking
    the deltas at every reader instead copied O(layers x writers) tensors per step (most of an edge step's time on a
    CPU) and autograd kept every stack for backward."""

    @staticmethod
    def forward(ctx: Any, weights: torch.Tensor, values: torch.Tensor, *deltas: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(weights)
        ctx.values = values      # rows written before this reader; the pass only appends later rows
        # Plain matrix products on [n, B*S*d] views (einsum transposed the buffer into a copy first).
        return (weights.t() @ values.reshape(values.shape[0], -1)).view(weights.shape[1], *values.shape[1:])

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        (weights,) = ctx.saved_tensors
        values = ctx.values
        count = values.shape[0]
        flat_grad = grad.reshape(grad.shape[0], -1)
        grad_weights = values.reshape(count, -1) @ flat_grad.t() if ctx.needs_input_grad[0] else None
        if not any(ctx.needs_input_grad[2:]):
            return (grad_weights, None, *([None] * count))
        return (grad_weights, None, *(weights @ flat_grad).view(count, *values.shape[1:]).unbind(0))


@dataclass
class _Pass:
    """One forward's record: the mask vector and every writer's delta so far (writer order), also copied into one
    buffer that readers compute from."""

    z: torch.Tensor | None
    writers: int = 0
    deltas: list[torch.Tensor] = field(default_factory=list)
    resid: torch.Tensor | None = None
    buffer: torch.Tensor | None = None

    def add(self, delta: torch.Tensor) -> None:
        if self.buffer is None:
            self.buffer = delta.new_empty((self.writers, *delta.shape))
        with torch.no_grad():
            self.buffer[len(self.deltas)].copy_(delta)
        self.deltas.append(delta)

    def removed(self, kept: torch.Tensor) -> torch.Tensor:
        """`sum_j (1 - kept[j, r]) * delta_j` over the first `kept.shape[0]` writers, per reader `r` [R, B, S, d]."""
        count = kept.shape[0]
        if len(self.deltas) < count:
            raise PruningError(f"edge masks: a reader needs {count} upstream writers but the forward recorded "
                               f"{len(self.deltas)}; a layer ran out of order or was skipped.")
        weights = (1 - kept).to(self.buffer.dtype)
        if torch.compiler.is_compiling():
            # Traced, the buffer would be a tensor saved for backward that later writers modify in place (autograd
            # refuses the backward); stacking is functional, at the memory cost the buffer avoids in eager mode.
            stacked = torch.stack(self.deltas[:count])
            return (weights.t() @ stacked.reshape(count, -1)).view(weights.shape[1], *stacked.shape[1:])
        return _RemovedEdges.apply(weights, self.buffer[:count], *self.deltas[:count])


class EdgeGranularity(Granularity):
    """One mask per edge of MIB's residual graph on a pre-LN decoder (see the module docstring)."""

    settings_class = EdgeSettings
    name = "edge"
    ablations = ABLATION_MODES
    mask_kinds = (KIND,)

    def __init__(self, model: nn.Module, config: Any) -> None:
        super().__init__(model, config)
        self.architecture = resolve_architecture(model, config)
        if self.architecture.is_encoder_decoder:
            raise PruningError("Edge masks are for single-stack decoders; encoder-decoder models are not supported "
                               "(use granularity='unit').")
        hf_model = transformers_model(model)
        text = hf_model.config.get_text_config() if hasattr(hf_model.config, "get_text_config") else hf_model.config
        self.sites: EdgeSites = edge_sites(self.architecture.model_type, text)
        stack = self.architecture.main
        heads, kv_heads = stack.num_heads, int(getattr(text, "num_key_value_heads", None) or stack.num_heads)
        parallel = bool(getattr(text, self.sites.parallel_flag, False)) if self.sites.parallel_flag else False
        self.graph = EdgeGraph(stack.num_layers, heads, kv_heads, parallel)
        self.head_dim, self.hidden_size = stack.head_dim, stack.hidden_size
        self.final_norm = hf_model.base_model.get_submodule(self.sites.final_norm)
        self.layers = [self._layer(layer, stack.attention_outputs[i], stack.mlp_outputs[i])
                       for i, layer in enumerate(stack.layers)]
        # One identity module per writer, called with the writer's output, so that `compute_means` can collect the
        # writers' means at ordinary activation sites. Kept off the model (no state dict entries).
        self.taps = [nn.Identity() for _ in range(self.graph.num_writers)]
        self._pass: _Pass | None = None
        # Dropout between a writer's output and the residual add (GPT-2's resid_dropout, NeoX's post_*_dropout)
        # would make the stream differ from the sum of the writers recorded.
        self._dropouts = [m for m in model.modules() if isinstance(m, nn.Dropout) and m.p > 0]

    def _layer(self, layer: nn.Module, attention_output: nn.Module, mlp_output: nn.Module) -> _Layer:
        sites = self.sites
        names = {"qkv": sites.qkv} if sites.qkv_layout != "separate" else \
            {"q": sites.query, "k": sites.key, "v": sites.value}
        paths = self.architecture.main.paths
        result = _Layer(layer.get_submodule(sites.input_norm), layer.get_submodule(sites.mlp_norm), attention_output,
                        mlp_output, {letter: layer.get_submodule(path) for letter, path in names.items()}, layer,
                        {**names, "attention_output": paths.attention_output, "mlp_output": paths.mlp_output})
        result.check_projections()
        return result

    # ------------------------------------------------------------------ what the masks are
    def kinds(self) -> dict[str, MaskKind]:
        return {KIND: MaskKind(KIND, (self.graph.num_edges,), "edges", 1.0, layer_dim=None,
                               means_shape=(self.graph.num_writers, self.hidden_size), dims=("num_edges",),
                               title="edges")}

    @classmethod
    def shape_text(cls, config: Any) -> str | None:
        shapes = getattr(config, "mask_shapes", None) or {}
        return f"{shapes[KIND][0]} edges" if KIND in shapes else None

    def mean_sites(self, keep_dropout: bool = False) -> dict[str, list[ActivationSite]]:
        """Every writer's output, through its tap (see `__init__`), in writer order."""
        return {KIND: [ActivationSite(tap, "output") for tap in self.taps]}

    def describe(self) -> dict[str, Any]:
        arch = self.architecture
        return {"model_type": arch.model_type, "num_layers": arch.num_layers, "num_heads": arch.num_heads,
                "head_dim": arch.head_dim, "hidden_size": arch.hidden_size}

    # ------------------------------------------------------------------ hooks
    def attach(self, source: MaskSource) -> list[RemovableHandle]:
        handles = []
        for index, layer in enumerate(self.layers):
            handles.append(layer.input_norm.register_forward_pre_hook(self._layer_input_hook(source, index)))
            for letter, module in layer.projections.items():
                handles.append(module.register_forward_hook(self._projection_hook(source, index, letter)))
            handles.append(layer.attention_output.register_forward_pre_hook(self._heads_hook(source, index)))
            handles.append(layer.mlp_norm.register_forward_pre_hook(self._mlp_input_hook(source, index)))
            handles.append(layer.mlp_output.register_forward_hook(self._mlp_hook(source, index)))
        handles.append(self.final_norm.register_forward_pre_hook(self._final_hook(source)))
        return handles

    def _tapping(self) -> bool:
        return any(tap._forward_hooks for tap in self.taps)

    def _record(self, source: MaskSource, writer: int, x: torch.Tensor) -> None:
        """Writer `writer`'s output `x` [B, S, d]: its delta for this pass, and its tap."""
        if self.taps[writer]._forward_hooks:
            self.taps[writer](x)
        if self._pass is not None and self._pass.z is not None:
            reference = source.ablation_reference(KIND, writer, x)
            self._pass.add(x if reference is None else x - reference.to(x.dtype))

    def _layer_input_hook(self, source: MaskSource, index: int) -> Callable:
        def hook(module: nn.Module, args: tuple) -> None:
            if not args or not isinstance(args[0], torch.Tensor):
                return None
            if index == 0:
                z = source.active_mask(KIND)
                if z is not None and getattr(self.architecture.main.layers[0], "gradient_checkpointing", False) is True:
                    raise PruningError("Edge masks do not work with gradient checkpointing (a recomputed layer "
                                       "records its writers twice); turn it off.")
                if z is not None:
                    for layer in self.layers:
                        layer.check_projections()
                    if any(dropout.training for dropout in self._dropouts):
                        raise PruningError("Edge masks need the base model's dropout off: a dropout between a "
                                           "writer's output and the residual makes the stream differ from the sum "
                                           "of the writers. Train without keep_dropout (PruningTrainer's default) "
                                           "or call model.eval().")
                self._pass = _Pass(z, self.graph.num_writers) if z is not None or self._tapping() else None
                if self._pass is not None:
                    self._record(source, 0, args[0])
            if self._pass is not None:
                self._pass.resid = args[0]
            return None
        return hook

    def _projection_hook(self, source: MaskSource, index: int, letter: str) -> Callable:
        def hook(module: nn.Module, args: tuple, output: Any) -> Any:
            state = self._pass
            if state is None or state.z is None or state.resid is None:
                return None
            q, k, v, _ = self.graph.blocks(state.z, index)
            blocks = {"q": q, "k": k, "v": v}
            wanted = ("q", "k", "v") if letter == "qkv" else (letter,)
            if _all_kept(*(blocks[name] for name in wanted)):
                return None     # every edge into these readers kept: the model's own output, exactly
            removed = state.removed(torch.cat([blocks[name] for name in wanted], dim=1))   # one product per layer
            inputs = state.resid.unsqueeze(0) - removed
            norm = self.layers[index].input_norm
            widths = [blocks[name].shape[1] for name in wanted]
            normed = dict(zip(wanted, norm.forward(inputs).split(widths)))   # forward: not our pre-hook
            return _project(module, self.sites.qkv_layout, normed, self.head_dim)
        return hook

    def _heads_hook(self, source: MaskSource, index: int) -> Callable:
        def hook(module: nn.Module, args: tuple) -> None:
            if self._pass is None or not args:
                return None
            outputs = _head_outputs(module, args[0], self.graph.num_heads, self.head_dim)
            for head in range(self.graph.num_heads):
                self._record(source, self.graph.head_writer(index, head), outputs[head])
            return None
        return hook

    def _mlp_input_hook(self, source: MaskSource, index: int) -> Callable:
        def hook(module: nn.Module, args: tuple) -> tuple | None:
            state = self._pass
            if state is None or state.z is None or not args:
                return None
            _, _, _, z = self.graph.blocks(state.z, index)
            if _all_kept(z):
                return None
            y = args[0] - state.removed(z.unsqueeze(1))[0]
            return (y,) + tuple(args[1:])
        return hook

    def _mlp_hook(self, source: MaskSource, index: int) -> Callable:
        def hook(module: nn.Module, args: tuple, output: Any) -> None:
            if self._pass is not None and isinstance(output, torch.Tensor):
                self._record(source, self.graph.mlp_writer(index), output)
            return None
        return hook

    def _final_hook(self, source: MaskSource) -> Callable:
        def hook(module: nn.Module, args: tuple) -> tuple | None:
            state, self._pass = self._pass, None
            if state is None or state.z is None or not args:
                return None
            z = self.graph.logits_block(state.z)
            if _all_kept(z):
                return None
            y = args[0] - state.removed(z.unsqueeze(1))[0]
            return (y,) + tuple(args[1:])
        return hook


def _all_kept(*blocks: torch.Tensor) -> bool:
    """Every edge of these blocks kept, and no gradient asked of them (attribution differentiates at z = 1). A loop,
    not `all(...)` over a generator: under torch.compile a graph break inside a generator skips the whole frame."""
    for block in blocks:
        if block.requires_grad or not bool((block == 1).all()):
            return False
    return True


# ------------------------------------------------------------------ per-head projections
def _is_conv1d(module: nn.Module) -> bool:
    """GPT-2's `Conv1D`: weight [in, out] (a Linear's is [out, in])."""
    return type(module).__name__ == "Conv1D"


def _head_outputs(module: nn.Module, context: torch.Tensor, heads: int, head_dim: int) -> torch.Tensor:
    """Each head's writer output [H, B, S, d]: its context slice times its slice of the output projection."""
    split = context.reshape(*context.shape[:-1], heads, head_dim)
    if _is_conv1d(module):
        return torch.einsum("bshe,hed->hbsd", split, module.weight.view(heads, head_dim, -1))
    return torch.einsum("bshe,dhe->hbsd", split, module.weight.view(-1, heads, head_dim))


def _project(module: nn.Module, layout: str, normed: dict[str, torch.Tensor], head_dim: int) -> torch.Tensor:
    """The projection's output [B, S, width] rebuilt from per-head normed inputs `normed[letter]` [H, B, S, d]."""
    weight, bias = module.weight, module.bias
    if layout == "separate":
        (letter, x), = normed.items()
        heads = x.shape[0]
        out = torch.einsum("hbsd,hed->bshe", x, weight.view(heads, head_dim, -1))
        if bias is not None:
            out = out + bias.view(heads, head_dim)
        return out.reshape(*out.shape[:2], heads * head_dim)
    heads = normed["q"].shape[0]
    width = heads * head_dim
    if layout == "blocks":        # Conv1D [d, 3 * width]: q | k | v, each head-major
        parts = []
        for position, letter in enumerate("qkv"):
            w = weight[:, position * width:(position + 1) * width].view(-1, heads, head_dim)
            part = torch.einsum("hbsd,dhe->bshe", normed[letter], w)
            if bias is not None:
                part = part + bias[position * width:(position + 1) * width].view(heads, head_dim)
            parts.append(part.reshape(*part.shape[:2], width))
        return torch.cat(parts, dim=-1)
    # per_head: Linear [3 * width, d], rows per head q_h | k_h | v_h
    w = weight.view(heads, 3, head_dim, -1)
    parts = []
    for position, letter in enumerate("qkv"):
        part = torch.einsum("hbsd,hed->bshe", normed[letter], w[:, position])
        if bias is not None:
            part = part + bias.view(heads, 3, head_dim)[:, position]
        parts.append(part)
    out = torch.stack(parts, dim=3)       # [B, S, H, 3, head_dim]
    return out.reshape(*out.shape[:2], 3 * width)
