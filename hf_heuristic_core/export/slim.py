"""`export_slim`: a found subnetwork as a smaller, faster plain Transformers model (no hooks), and its reload.

The wrapped model is deep-copied (without hooks), each layer is rebuilt to the plan of `export.plan` with the
ablated units' means folded into biases (`export.fold`), and the result is a model of the original class. Unit masks
(`granularity="unit"`: heads and MLP blocks) and neuron masks (`granularity="neuron"`: MLP intermediate neurons) are
both sliced; a neuron export keeps every head. Its
config records the per-layer layout and where the masks came from under `SLIM_KEY`.

How a saved slim folder reloads:

- **Stock**: when every layer has the same head, key/value-head and MLP widths and the config can say so (Llama-style
  configs with an explicit `head_dim`; bias flags where a folded mean needs a bias), the config is rewritten to those
  counts, and `AutoModelFor*.from_pretrained(dir)` loads it without this package. Decided by instantiating the stock
  class from the rewritten config on the meta device and comparing every parameter's name and shape.
- **With the folder's own code** otherwise (per-layer widths, BERT / GPT-2 whose head width is `hidden / heads`,
  Qwen2 / Mistral whose output projections cannot have a bias): the config keeps the original shapes plus the
  layout and the shapes the export gave each module (`remote_code.layout_record`); `save_slim` writes the modeling
  code that applies them (`AutoModelFor*.from_pretrained(dir, trust_remote_code=True)`, no import of this
  package), and `load_slim` rebuilds the layers from the layout itself.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any

import torch
from torch import nn

from ..ablation.modes import ABLATIONS
from ..architectures.ownership import num_kv_heads
from ..architectures.registry import slim_model_types
from ..architectures.resolve import (
    input_width,
    resolve_architecture,
    transformers_model,
)
from ..errors import ExportError, MissingMeansError, UnsupportedArchitectureError
from ..granularity import get_granularity
from ..granularity.base import OwnedUnits, UnitSizes
from .fold import ATTENTION_ROLES, MLP_ROLES, rebuild_layer, role_modules
from .plan import LayerLayout, is_uniform, plan_layers
from .remote_code import layout_record

__all__ = ["SLIM_FORMAT", "SLIM_KEY", "cache_length_layers", "check_uniform", "export_slim", "forget_hook_marks",
           "full_width_attention", "num_kv_heads", "parameter_count",
           "rebuild_to_layout", "slim_info"]

SLIM_KEY = "hf_heuristic_core_slim"
SLIM_FORMAT = "hf_heuristic_core.slim/1"
# Marks a model keeps once hooks of its own are installed; a copy made without those hooks must not keep them.
# (Transformers 5 installs its output-capturing hooks, which return hidden_states and attentions, on the first call
# that asks for them and marks the model; a copy keeping the mark would never install them and return neither.)
_HOOK_MARKS = ("_output_capturing_hooks_installed",)
_HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_forward_hooks_with_kwargs",
               "_forward_pre_hooks_with_kwargs", "_forward_hooks_always_called", "_backward_hooks",
               "_backward_pre_hooks")


def parameter_count(model: nn.Module) -> int:
    """Parameters of `model`, each shared (tied) tensor counted once."""
    return sum(p.numel() for p in model.parameters())


def slim_info(model: nn.Module) -> dict[str, Any] | None:
    """The slim record of a model's config (None for a model that was not exported by `export_slim`)."""
    config = getattr(transformers_model(model), "config", None)
    return getattr(config, SLIM_KEY, None) if config is not None else None


@contextlib.contextmanager
def _hooks_set_aside(model: nn.Module) -> Iterator[None]:
    """Empty every module's hook dicts for the duration (so a deep copy carries no hook of the wrapper)."""
    saved = []
    for module in model.modules():
        saved.append((module, {name: getattr(module, name) for name in _HOOK_DICTS if hasattr(module, name)}))
        for name in saved[-1][1]:
            setattr(module, name, type(getattr(module, name))())
    try:
        yield
    finally:
        for module, dicts in saved:
            for name, value in dicts.items():
                setattr(module, name, value)


def forget_hook_marks(model: nn.Module) -> None:
    """Drop the marks of hooks a hook-less copy does not have (see `_HOOK_MARKS`), so they are installed again."""
    for module in model.modules():
        for mark in _HOOK_MARKS:
            module.__dict__.pop(mark, None)


def _check_masks(masks: Mapping[str, torch.Tensor]) -> None:
    for kind, mask in masks.items():
        if mask is None:
            continue
        bad = mask[(mask != 0) & (mask != 1)]
        if bad.numel():
            raise ExportError(f"The {kind} mask is not binary (it has {bad.numel()} entries strictly between 0 and "
                              f"1, e.g. {float(bad[0]):.4g}); a slim model can only drop whole units. Export the "
                              "binarized masks: export_slim(masks=prunable.get_masks(binary=True)), or set binary "
                              "masks with set_masks(...).")


def _means_for(prunable: Any, ablation: str, masks: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    if ablation == "resample":
        raise ExportError("Resample ablation cannot be folded into a slim model: a pruned unit takes another "
                          "example's activation, which changes with the batch, so no constant can stand in for it. "
                          "Export with ablation='mean' (after compute_means) or ablation='zero'; check the slim "
                          "model against the hooked one under that ablation.")
    if ablation == "zero":
        return {}
    needed = [kind for kind in masks if bool((masks[kind] == 0).any())]
    means = prunable.get_means()
    missing = [kind for kind in needed if means.get(kind) is None]
    if missing:
        raise MissingMeansError(f"Mean ablation folds each pruned unit's mean activation into a bias, but there are no "
                                f"means for {missing}. Call prunable.compute_means(train_data) first (or load an "
                                "artifact that has them), or export with ablation='zero'.")
    return means


def export_slim(prunable: Any, masks: Mapping[str, Any] | None = None, ablation: str | None = None,
                source: str | None = None, uniform: bool | None = None) -> nn.Module:
    """A plain model of the wrapped model's class with the pruned units physically removed (see the module doc).

    `masks` default to the eval-time masks (`prunable.get_masks(binary=True)`: fixed masks win); `ablation` to the
    model's own. `source` names the mask artifact, for the record. `uniform` (default:
    `PruningConfig.uniform_layers`) asks for a folder that plain `from_pretrained` loads: masks that differ between
    layers, or a folded mean with no bias the stock config can state, are then an `ExportError` instead of a
    `load_slim` folder. The wrapped model is left untouched.
    """
    cls, masks, ablation, uniform, units = _export_inputs(prunable, masks, ablation, uniform)
    paths, model_type = prunable.architecture.paths, prunable.architecture.model_type
    hf_original, model = _plain_copy(prunable)

    resolved = resolve_architecture(model, prunable.pruning_config)
    num_heads, head_dim = resolved.num_heads, resolved.head_dim
    num_kv = num_kv_heads(model.config, paths.slim, num_heads)
    layouts = plan_layers(units.heads, units.mlps, num_kv,
                          [input_width(module) for module in resolved.mlp_outputs], paths.slim.min_intermediate,
                          units.neurons, paths.slim.zero_width_attention,
                          cache_length_layers(model.config) if paths.slim.cache_length_layer else (),
                          keep_uniform=paths.slim.head_dim_config is not None)
    if uniform and paths.slim.head_dim_config is None:
        layouts = [full_width_attention(layout, num_heads) for layout in layouts]
    for i, layer in enumerate(resolved.layers):
        added = rebuild_layer(layer, paths, layouts[i], num_heads, num_kv, head_dim, *units.layer_means(i))
        layouts[i] = replace(layouts[i], added_biases=added)
    refusal = _make_stock(model, paths, layouts, head_dim)
    if uniform and refusal:
        raise ExportError(f"A uniform (stock) export was asked for (uniform_layers), but plain transformers "
                          f"cannot load this {model_type!r} slim model: {refusal}. Export with ablation='zero', or "
                          "without uniform (export_slim(uniform=False): a folder for hf_heuristic_core.load_slim).")
    setattr(model.config, SLIM_KEY, {
        "format": SLIM_FORMAT, "stock": refusal is None, "uniform": uniform, "model_type": model_type,
        "ablation": ablation,
        "num_heads": num_heads, "num_key_value_heads": num_kv, "head_dim": head_dim,
        "layers": [layout.to_dict() for layout in layouts],
        "masks": {kind: cls.record_mask(kind, mask) for kind, mask in masks.items()},
        "source": {"masks": source, "base_model": prunable.pruning_config.base_model_name_or_path,
                   "base_model_revision": prunable.pruning_config.base_model_revision,
                   "means": dict(prunable.means_info) if ablation == "mean" else None},
        "parameters": {"original": parameter_count(hf_original), "slim": parameter_count(model)},
        # what the folder's own modeling code applies (remote_code); a stock folder needs none
        **({} if refusal is None else layout_record(model, paths)),
    })
    model.train(hf_original.training)
    return model


def _export_inputs(prunable: Any, masks: Mapping[str, Any] | None, ablation: str | None, uniform: bool | None
                   ) -> tuple[Any, dict[str, torch.Tensor], str, bool, OwnedUnits]:
    """Phase 1, before anything is copied: the granularity, the checked masks, the ablation and layout asked for,
    and the masks (with their means) in the architecture's units, every unit they say nothing about kept."""
    architecture = prunable.architecture
    model_type = architecture.model_type
    paths = architecture.paths
    granularity = prunable.pruning_config.granularity
    cls = get_granularity(granularity)
    if not cls.mask_kinds or architecture.is_encoder_decoder or paths.slim is None:
        raise UnsupportedArchitectureError(
            f"Slim export supports unit masks (heads and MLP blocks) and neuron masks of the model types "
            f"{slim_model_types()}; this model is {model_type!r} with the {granularity!r} granularity. Keep using "
            "the hooked PrunableModel, or add a SlimMap for it in hf_heuristic_core.ARCHITECTURES.")
    given = prunable.validate_masks(masks) if masks is not None else {}
    full = prunable.get_masks(binary=True)
    masks = {kind: given.get(kind, full[kind]) for kind in cls.mask_kinds}
    _check_masks(masks)
    ablation = ablation or prunable.pruning_config.ablation
    uniform = prunable.pruning_config.uniform_layers if uniform is None else bool(uniform)
    sizes = UnitSizes(architecture.num_layers, architecture.num_heads,
                      num_kv_heads(transformers_model(prunable.model).config, paths.slim, architecture.num_heads),
                      architecture.head_dim, int(input_width(architecture.mlp_outputs[0])))
    if cls.owned_units(masks, sizes) is None:
        raise UnsupportedArchitectureError(
            f"The {granularity!r} granularity's masks do not read as heads, MLP blocks or neurons "
            "(Granularity.owned_units), so slim export cannot slice them. Keep using the hooked PrunableModel.")
    if uniform:
        check_uniform(cls.owned_units(masks, sizes), sizes.num_kv_heads)
    if ablation not in ABLATIONS:
        raise ExportError(f"Unknown ablation {ablation!r}; choose 'mean' or 'zero'.")
    means = _means_for(prunable, ablation, masks)
    return cls, masks, ablation, uniform, cls.owned_units(masks, sizes, means).filled(sizes)


def _plain_copy(prunable: Any) -> tuple[nn.Module, nn.Module]:
    """The wrapped Transformers model and a deep copy of it with no hooks, marks or GGUF marker, and the
    `requires_grad` flags it had before wrapping."""
    hf_original = transformers_model(prunable.model)
    if not hasattr(hf_original, "save_pretrained") or hf_original is not prunable.model:
        raise ExportError("Slim export needs a plain Transformers model inside the PrunableModel (not a PEFT "
                          "wrapper); merge adapters first (peft_model.merge_and_unload()) and wrap that.")
    with _hooks_set_aside(hf_original):
        model = copy.deepcopy(hf_original)
    forget_hook_marks(model)
    _drop_gguf_marker(model)
    saved_grad = prunable.requires_grad_before_wrapping
    for name, parameter in model.named_parameters():
        parameter.requires_grad_(saved_grad.get(name, parameter.requires_grad))
    return hf_original, model


def cache_length_layers(config: Any) -> tuple[int, ...]:
    """The layer whose KV cache transformers reads the sequence length from by counting its cached elements (empty
    when there is none): `Cache.get_seq_length()` reads layer 0 and the masks the first full-attention layer, and a
    full-attention layer (`DynamicLayer`) counts elements, so this is the first full-attention layer (layer 0 when
    it is one). Sliding-window and chunked layers count tokens (`cumulative_length`), whatever their width. Layer
    types as transformers' `get_layer_types_and_kwargs` infers them: `layer_types`, else sliding where
    `sliding_window` is set."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    types = list(getattr(text, "layer_types", None) or
                 ["sliding_attention" if getattr(text, "sliding_window", None) is not None else "full_attention"]
                 * int(text.num_hidden_layers))
    counting = [index for index, kind in enumerate(types) if kind not in ("sliding_attention", "chunked_attention")]
    return tuple(counting[:1])


def _drop_gguf_marker(model: nn.Module) -> None:
    """A model read from GGUF holds plain dequantized tensors but keeps a quantizer that blocks `save_pretrained`;
    the slim copy is a plain model. Other quantizers keep packed weights that cannot be sliced: refuse them."""
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is None:
        return
    method = getattr(quantizer.quantization_config, "quant_method", None)
    if str(getattr(method, "value", method)) != "gguf":
        raise ExportError(f"Slim export cannot slice weights quantized with {method}; load the model unquantized "
                          "(e.g. dtype=torch.float32), export, then quantize the slim model.")
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config


def check_uniform(masks: Mapping[str, torch.Tensor] | OwnedUnits, num_kv: int) -> None:
    """Refuse masks that keep different counts in different layers, or parts of a key/value group (GQA). `masks`:
    the units a granularity's masks own (`OwnedUnits`), or unit / neuron masks by kind."""
    units = masks if isinstance(masks, OwnedUnits) else OwnedUnits.from_masks(masks)
    problems = []
    heads = units.heads
    if heads is not None:
        kept = [int(row.sum()) for row in heads]
        if len(set(kept)) > 1:
            problems.append(f"heads kept per layer {kept}")
        group = heads.shape[1] // num_kv
        partial = [layer for layer, row in enumerate(heads)
                   if any(0 < int(g.sum()) < group for g in row.reshape(num_kv, group))]
        if group > 1 and partial:
            problems.append(f"layers {partial} keep part of a key/value group ({group} query heads share one)")
    mlps = units.mlps
    if mlps is not None and len({int(v) for v in mlps}) > 1:
        problems.append(f"MLP blocks kept per layer {[int(v) for v in mlps]}")
    neurons = units.neurons
    if neurons is not None and len({int(row.sum()) for row in neurons}) > 1:
        problems.append(f"MLP neurons kept per layer {[int(row.sum()) for row in neurons]}")
    if problems:
        raise ExportError(f"A uniform export (uniform_layers) needs the same units kept in every layer, but the masks "
                          f"have {'; '.join(problems)}. Binarize them with uniform_layers: set "
                          "prunable.pruning_config.uniform_layers = True and export prunable.get_masks(binary=True) "
                          "(or prune with --uniform_layers); or export without uniform (a folder for load_slim).")


def full_width_attention(layout: LayerLayout, num_heads: int) -> LayerLayout:
    """The layout with every head slot kept, pruned heads as zero slots: for configs whose head width is
    `hidden / num_heads` (BERT, RoBERTa, GPT-2), which cannot state fewer heads of the same width."""
    slots = tuple(h if h in layout.kept_heads else -1 for h in range(num_heads))
    return replace(layout, query_slots=slots, kv_slots=slots)


def _make_stock(model: nn.Module, paths: Any, layouts: list[LayerLayout], head_dim: int) -> str | None:
    """Rewrite the config to the slim counts when a stock model of that config has exactly our parameters (after
    adding zero biases that a bias flag brings); None when it did, else why not."""
    slim = paths.slim
    if not is_uniform(layouts):
        widths = [(len(lay.query_slots), len(lay.kv_slots), lay.intermediate) for lay in layouts]
        return f"its layers differ in (query heads, key/value heads, MLP width): {widths}"
    first = layouts[0]
    counts = {slim.heads_config: len(first.query_slots), slim.intermediate_config: first.intermediate}
    if slim.kv_heads_config:
        counts[slim.kv_heads_config] = len(first.kv_slots)
    if slim.head_dim_config:
        counts[slim.head_dim_config] = head_dim
    added = {role for layout in layouts for role in layout.added_biases}
    for flag, roles in slim.bias_flags:
        if added & set(roles):
            counts[flag] = True
    unstated = added - {role for flag, roles in slim.bias_flags if flag in counts for role in roles}
    if unstated:
        return f"a folded mean needs a bias on {sorted(unstated)} and no config flag gives one"
    config = copy.deepcopy(model.config)
    for key, value in counts.items():
        setattr(config, key, value)
    try:
        if hasattr(config, "validate"):   # what save_pretrained checks (e.g. hidden_size % heads under strict configs)
            config.validate()
        with torch.device("meta"):
            stock = type(model)(config)
    except Exception as err:  # noqa: BLE001 - any refusal of the rewritten config means "no stock folder"
        return f"its config cannot state {counts} ({type(err).__name__}: {err})"
    ours = {name: tuple(p.shape) for name, p in model.named_parameters(remove_duplicate=False)}
    theirs = {name: tuple(p.shape) for name, p in stock.named_parameters(remove_duplicate=False)}
    missing = {name for name in theirs if name not in ours}
    extra = sorted(set(ours) - set(theirs))
    differ = sorted(n for n in ours if n in theirs and ours[n] != theirs[n])
    if extra or differ or any(not n.endswith(".bias") for n in missing):
        what = (f"parameters the stock class lacks {extra[:3]}" if extra else
                f"shapes the stock class builds differently {[(n, ours[n], theirs[n]) for n in differ[:2]]}"
                if differ else f"parameters only the stock class has {sorted(missing)[:3]}")
        return f"a stock model of the rewritten config {counts} has other parameters ({what})"
    with torch.no_grad():
        for name in missing:
            module = model.get_submodule(name.rsplit(".", 1)[0])
            module.bias = nn.Parameter(torch.zeros(theirs[name], dtype=module.weight.dtype,
                                                   device=module.weight.device),
                                       requires_grad=module.weight.requires_grad)
    for key, value in counts.items():
        setattr(model.config, key, value)
    return None


def rebuild_to_layout(model: nn.Module, info: Mapping[str, Any]) -> None:
    """Rebuild a freshly built model of the original shapes to a saved layout (weights are loaded afterwards)."""
    resolved = resolve_architecture(model)
    paths = resolved.paths
    if paths.slim is None:
        raise UnsupportedArchitectureError(f"model_type {resolved.model_type!r} has no slim export map; supported: "
                                           f"{slim_model_types()}.")
    for layer, data in zip(resolved.layers, info["layers"]):
        rebuild_layer(layer, paths, LayerLayout.from_dict(data), info["num_heads"], info["num_key_value_heads"],
                      info["head_dim"], None, None)


def roles_present(layer: nn.Module, paths: Any) -> dict[str, bool]:
    """Which roles of a rebuilt layer have biases (for tests and the model card)."""
    return {role: all(getattr(m, "bias", None) is not None for m in role_modules(layer, paths, role))
            for role in (*ATTENTION_ROLES, *MLP_ROLES)}
