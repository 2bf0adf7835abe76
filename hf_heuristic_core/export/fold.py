"""Rebuilding one layer to its slim layout: slice the projections, fold the ablated units' means into biases.

The hooks replace a pruned head's context vector `z_h` (its slice of the attention output projection's input) by
the constant `m_h` (its mean, or zero), so `W_O z + b = sum_kept W_O^h z_h + (b + sum_pruned W_O^h m_h)`: the pruned
heads' columns go and their contribution moves into the bias (one is added where the projection has none). A pruned
MLP block's output is replaced by its mean `mu` (zero ablation: 0), so its input projections lose every row and its
output projection keeps no column and has bias `mu`. A pruned intermediate neuron `j` (neuron granularity) is the
same one level down: its input to the MLP output projection is replaced by its mean `n_j`, so its rows of the input
projections (up, gate, `intermediate.dense`, `c_fc`) and its column of the output projection go, and
`b_down' = b_down + W_down[:, pruned] n_pruned`. Where the output projection has no bias (Llama, Mistral, Qwen2) one
is added, as for a removed MLP block: Llama's `mlp_bias` flag can state it in a stock config (which also brings zero
input-projection biases); Qwen2 / Mistral cannot, so their mean-ablated exports reload with `load_slim`. Zero
ablation just removes the neurons. Folding runs in float64 and is cast to the weight's dtype once.

Which rows and columns a unit owns (fused qkv offsets, fused gate|up, GPT-2's transposed `Conv1D`) is answered by
`architectures.ownership.LayerOwnership`, from the data in `ArchitectureMap.slim`; this module only slices and folds.
"""

from __future__ import annotations

import torch
from torch import nn

from ..architectures.ownership import (
    ATTENTION_ROLES,
    MLP_ROLES,
    LayerOwnership,
    is_transposed,
    weight_out_in,
)
from ..architectures.registry import ArchitectureMap
from .plan import LayerLayout
from .slim_modeling import BiasOnlyLinear, set_module_attribute

__all__ = ["ATTENTION_ROLES", "MLP_ROLES", "BiasOnlyLinear", "rebuild_layer", "role_modules"]


def _bias_only_if_empty(layer: nn.Module, path: str) -> None:
    """Swap a zero-width `nn.Linear` with a bias for a `BiasOnlyLinear` holding the same parameters."""
    module = layer.get_submodule(path)
    if type(module) is not nn.Linear or module.in_features != 0 or module.bias is None:
        return
    swapped = BiasOnlyLinear(0, module.out_features, device="meta")
    swapped.weight, swapped.bias = module.weight, module.bias
    swapped.train(module.training)
    layer.set_submodule(path, swapped)


def _out_width(module: nn.Module) -> int:
    return weight_out_in(module).shape[0]


def _set_weights(module: nn.Module, out_in: torch.Tensor, bias: torch.Tensor | None) -> None:
    """Install new parameters (keeping `requires_grad`) and the width attributes the module's forward reads."""
    grad = module.weight.requires_grad
    transposed = is_transposed(module)
    weight = out_in.t().contiguous() if transposed else out_in.contiguous()
    module.weight = nn.Parameter(weight, requires_grad=grad)
    if bias is None:
        module.register_parameter("bias", None)
    else:
        module.bias = nn.Parameter(bias.contiguous(), requires_grad=grad)
    out_features, in_features = out_in.shape
    if transposed:
        module.nf, module.nx = out_features, in_features
    elif isinstance(module, nn.Linear):
        module.out_features, module.in_features = out_features, in_features


def _take(tensor: torch.Tensor, dim: int, index: list[int]) -> torch.Tensor:
    """`index_select` along `dim`, where -1 selects a zero slice (padding and placeholder heads)."""
    shape = list(tensor.shape)
    shape[dim] = 1
    padded = torch.cat([tensor, tensor.new_zeros(shape)], dim=dim)
    ids = torch.tensor([i if i >= 0 else tensor.shape[dim] for i in index], dtype=torch.long, device=tensor.device)
    return padded.index_select(dim, ids)


def role_modules(layer: nn.Module, paths: ArchitectureMap, role: str) -> list[nn.Module]:
    """The modules of `layer` playing `role` (a fused qkv projection plays query, key and value)."""
    return LayerOwnership(layer, paths, 1, 1, 1).modules(role)


def _ensure_bias(module: nn.Module) -> bool:
    """Give `module` a zero bias if it has none; True when one was added."""
    if getattr(module, "bias", None) is not None:
        return False
    weight = module.weight
    module.bias = nn.Parameter(weight.new_zeros(_out_width(module)), requires_grad=weight.requires_grad)
    return True


def _slice_rows(module: nn.Module, rows: list[int]) -> None:
    bias = module.bias
    _set_weights(module, _take(weight_out_in(module).detach(), 0, rows),
                 None if bias is None else _take(bias.detach(), 0, rows))


@torch.no_grad()
def rebuild_layer(layer: nn.Module, paths: ArchitectureMap, layout: LayerLayout, num_heads: int, num_kv_heads: int,
                  head_dim: int, head_means: torch.Tensor | None, mlp_mean: torch.Tensor | None,
                  neuron_means: torch.Tensor | None = None) -> tuple[str, ...]:
    """Rebuild `layer` in place to `layout`; returns the roles that received a bias they did not have.

    `head_means` `[num_heads, head_dim]` / `mlp_mean` `[hidden]` / `neuron_means` `[intermediate]` are what the
    pruned units are replaced by (None: zero ablation, or a reload whose folded biases come from the saved weights).
    """
    slim = paths.slim
    owner = LayerOwnership(layer, paths, num_heads, num_kv_heads, head_dim)
    added: set[str] = set()
    for role in layout.added_biases:
        for module in owner.modules(role):
            _ensure_bias(module)
        added.add(role)

    # attention: fold the pruned heads' means into the output bias, then slice
    output = layer.get_submodule(paths.attention_output)
    pruned = [h for h in range(num_heads) if h not in layout.kept_heads]
    if head_means is not None and pruned:
        w = weight_out_in(output).double()
        delta = sum(w[:, owner.head_span(h)] @ head_means[h].double().to(w.device) for h in pruned)
        if _ensure_bias(output):
            added.add("attention_output")
        output.bias.add_(delta.to(output.bias.dtype))
    _set_weights(output, _take(weight_out_in(output).detach(), 1, owner.attention_output_columns(layout.query_slots)),
                 None if output.bias is None else output.bias.detach().clone())
    for module, rows in owner.attention_input_rows(layout.query_slots, layout.kv_slots):
        _slice_rows(module, rows)
    values = {"query_heads": len(layout.query_slots), "query_width": len(layout.query_slots) * head_dim,
              "kv_heads": len(layout.kv_slots), "group_size": layout.group_size}
    attention = layer.get_submodule(slim.attention_module)
    for attribute, what in slim.attention_attrs:
        set_module_attribute(attention, attribute, values[what])

    # MLP block: gone entirely, its mean (or nothing) left as the output projection's bias
    if not layout.keep_mlp:
        placeholders = [-1] * layout.intermediate   # zero neurons where a zero-width projection cannot run
        for module in owner.modules("mlp_inputs"):
            _slice_rows(module, owner.mlp_input_rows(placeholders))
        out = layer.get_submodule(paths.mlp_output)
        if mlp_mean is not None and _ensure_bias(out):
            added.add("mlp_output")
        bias = None if out.bias is None else (mlp_mean.to(out.bias) if mlp_mean is not None
                                              else torch.zeros_like(out.bias))
        _set_weights(out, _take(weight_out_in(out).detach(), 1, placeholders), bias)
    elif layout.neurons is not None and _slice_neurons(layer, paths, layout, neuron_means):
        added.add("mlp_output")
    _bias_only_if_empty(layer, paths.mlp_output)
    _bias_only_if_empty(layer, paths.attention_output)   # a layer that kept no head (and no placeholder)
    return tuple(role for role in (*ATTENTION_ROLES, *MLP_ROLES) if role in added)


def _slice_neurons(layer: nn.Module, paths: ArchitectureMap, layout: LayerLayout,
                   neuron_means: torch.Tensor | None) -> bool:
    """Keep `layout.neurons` of the MLP (zero placeholders when none is left) and fold the pruned neurons' means
    into the output projection's bias; True when that bias had to be added."""
    out = layer.get_submodule(paths.mlp_output)
    weight = weight_out_in(out)
    kept = set(layout.neurons)
    pruned = [j for j in range(weight.shape[1]) if j not in kept]
    added = False
    if neuron_means is not None and pruned:
        index = torch.tensor(pruned, dtype=torch.long, device=weight.device)
        delta = weight.double().index_select(1, index) @ neuron_means.double().to(weight.device).index_select(0, index)
        added = _ensure_bias(out)
        out.bias.add_(delta.to(out.bias.dtype))
    rows = list(layout.neurons) or [-1] * layout.intermediate
    owner = LayerOwnership(layer, paths, 1, 1, 1, intermediate=weight.shape[1])
    for module in owner.modules("mlp_inputs"):
        _slice_rows(module, owner.mlp_input_rows(rows))
    _set_weights(out, _take(weight_out_in(out).detach(), 1, rows),
                 None if out.bias is None else out.bias.detach().clone())
    return added
