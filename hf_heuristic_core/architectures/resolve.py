"""Resolving a loaded model against the architecture map: its layers, hook sites, widths and parameter counts.

`head_dim` is taken from the attention output projection's input width, not from `hidden_size / num_heads` (wrong for
Qwen3 and Gemma). Unknown models are detected by module-name suffixes; every entry can be overridden from
`PruningConfig`. A model with layers the map does not reach (the decoder of an encoder-decoder model detected by
suffix, a vision tower) is refused: pruning part of a model would make every sparsity and report describe only
that part.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import Any

from torch import nn

from ..errors import UnsupportedArchitectureError
from .ownership import is_transposed
from .registry import ARCHITECTURES, ATTENTION_OUTPUT_SUFFIXES, MLP_OUTPUT_SUFFIXES, ArchitectureMap

logger = logging.getLogger(__name__)

__all__ = ["ResolvedArchitecture", "ResolvedStack", "input_width", "output_width", "projection_candidates",
           "resolve_architecture", "transformers_model"]

_HEAD_COUNT_NAMES = ("num_attention_heads", "n_head", "num_heads", "n_heads")


@dataclass
class ResolvedStack:
    """The concrete modules of one stack of layers (the whole model, or the encoder / decoder of a seq2seq model)."""

    name: str
    paths: ArchitectureMap
    layers: list[nn.Module]
    attention_outputs: list[nn.Module]
    mlp_outputs: list[nn.Module]
    num_heads: int
    head_dim: int
    hidden_size: int
    head_param_count: int
    mlp_param_count: int
    cross_attention_outputs: list[nn.Module] = field(default_factory=list)
    cross_head_param_count: int = 0

    @property
    def num_layers(self) -> int:
        return len(self.layers)


@dataclass
class ResolvedArchitecture:
    """Every stack of one loaded model. The attributes of a single-stack model (`layers`, `num_heads`, ...) read the
    first stack (the encoder of an encoder-decoder model)."""

    model_type: str
    stacks: list[ResolvedStack]
    detected: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def is_encoder_decoder(self) -> bool:
        return len(self.stacks) > 1

    @property
    def main(self) -> ResolvedStack:
        return self.stacks[0]

    paths = property(lambda self: self.main.paths)
    layers = property(lambda self: self.main.layers)
    attention_outputs = property(lambda self: self.main.attention_outputs)
    mlp_outputs = property(lambda self: self.main.mlp_outputs)
    num_heads = property(lambda self: self.main.num_heads)
    head_dim = property(lambda self: self.main.head_dim)
    hidden_size = property(lambda self: self.main.hidden_size)
    head_param_count = property(lambda self: self.main.head_param_count)
    mlp_param_count = property(lambda self: self.main.mlp_param_count)
    num_layers = property(lambda self: self.main.num_layers)


def transformers_model(model: nn.Module) -> nn.Module:
    """The `PreTrainedModel` inside a PEFT wrapper (or the model itself)."""
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) else model


@dataclass(frozen=True)
class Overrides:
    """The architecture fields of a `PruningConfig` (any object with these attributes will do)."""

    layers_path: str | None = None
    attention_output: str | None = None
    mlp_output: str | None = None
    num_heads: int | None = None
    allow_partial_model: bool = False


def resolve_architecture(model: nn.Module, config: Any = None) -> ResolvedArchitecture:
    """Find the stacks, layers and hook sites of `model`, honoring the overrides in `config` (a `PruningConfig`)."""
    config = Overrides(**{f: getattr(config, f, None) or Overrides.__dataclass_fields__[f].default
                          for f in Overrides.__dataclass_fields__}) if config is not None else Overrides()
    hf_model = transformers_model(model)
    hf_config = getattr(hf_model, "config", None)
    model_type = getattr(hf_config, "model_type", None) or type(hf_model).__name__
    base = getattr(hf_model, "base_model", hf_model)

    paths = ARCHITECTURES.get(model_type)
    detected = paths is None
    if paths is None:
        paths = _detect(base, hf_config, model_type, config)
    paths = replace(paths, **{key: value for key, value in {
        "layers": config.layers_path, "attention_output": config.attention_output, "mlp_output": config.mlp_output,
    }.items() if value})
    named = [("", paths)] if paths.decoder is None else _present_stacks(base, hf_config, paths)
    stacks = [_resolve_stack(base, hf_config, model_type, name, stack_paths, config) for name, stack_paths in named]
    architecture = ResolvedArchitecture(model_type=model_type, stacks=stacks, detected=detected)
    _check_coverage(base, architecture, config)
    return architecture


def _resolve_stack(base: nn.Module, hf_config, model_type: str, name: str, paths: ArchitectureMap,
                   config: Overrides) -> ResolvedStack:
    layers = _get_layers(base, paths.layers, model_type)
    attention_outputs = [_get_submodule(layer, paths.attention_output, model_type, "attention output projection")
                         for layer in layers]
    mlp_outputs = [_get_submodule(layer, paths.mlp_output, model_type, "MLP output projection") for layer in layers]
    cross = [_get_submodule(layer, paths.cross_attention_output, model_type, "cross-attention output projection")
             for layer in layers] if paths.cross_attention_output else []
    num_heads = config.num_heads or _num_heads(hf_config, paths.heads_config)
    if num_heads is None:
        raise UnsupportedArchitectureError(
            f"Cannot read the number of attention heads of model_type '{model_type}' from its config; "
            "pass it explicitly: PruningConfig(num_heads=...).")
    for what, modules in (("attention output projection", attention_outputs),
                          ("cross-attention output projection", cross)):
        widths = {input_width(module) for module in modules}
        bad = sorted(w for w in widths if w % num_heads)
        if bad:
            raise UnsupportedArchitectureError(
                f"model_type '{model_type}': the {what} takes {bad[0]} inputs, which is not a multiple of "
                f"num_heads={num_heads}. Check num_heads, or point PruningConfig(attention_output=...) at the "
                "projection whose input is the concatenated head outputs.")
    head_params, mlp_params = _unit_param_counts(layers[0], paths, num_heads)
    cross_params = _count([layers[0].get_submodule(paths.cross_attention)]) // num_heads \
        if paths.cross_attention else 0
    return ResolvedStack(
        name=name, paths=paths, layers=layers, attention_outputs=attention_outputs, mlp_outputs=mlp_outputs,
        num_heads=num_heads, head_dim=input_width(attention_outputs[0]) // num_heads,
        hidden_size=output_width(mlp_outputs[0]), head_param_count=head_params, mlp_param_count=mlp_params,
        cross_attention_outputs=cross, cross_head_param_count=cross_params)


def _present_stacks(base: nn.Module, hf_config, paths: ArchitectureMap) -> list[tuple[str, ArchitectureMap]]:
    """The stacks of an encoder-decoder map that this model holds: both, or one for the halves Transformers
    registers on their own (`T5EncoderModel`: the encoder; `BartForCausalLM`: the decoder). A decoder on its own
    has cross-attention heads only when its config adds cross-attention (otherwise that attention never runs, and
    masks on it would count units that cannot matter)."""
    stacks = [("encoder", paths), ("decoder", paths.decoder)]
    present = [(name, stack) for name, stack in stacks if _has_submodule(base, stack.layers)]
    if not present or len(present) == len(stacks):
        return stacks   # both (or neither: resolving the encoder then names what is missing)
    if present[0][0] == "decoder" and not getattr(hf_config, "add_cross_attention", False):
        present = [("decoder", replace(paths.decoder, cross_attention_output=None, cross_attention=None))]
    return present


def _has_submodule(base: nn.Module, path: str) -> bool:
    try:
        base.get_submodule(path)
    except AttributeError:
        return False
    return True


def _text_config(hf_config):
    return hf_config.get_text_config() if hasattr(hf_config, "get_text_config") else hf_config


def _num_heads(hf_config, names: tuple[str, ...] = ()) -> int | None:
    if hf_config is None:
        return None
    text_config = _text_config(hf_config)
    for name in (*names, *_HEAD_COUNT_NAMES):
        value = getattr(text_config, name, None)
        if isinstance(value, int):
            return value
    return None


def _num_layers(hf_config) -> int | None:
    if hf_config is None:
        return None
    value = getattr(_text_config(hf_config), "num_hidden_layers", None)
    return value if isinstance(value, int) else None


def _has_attention(layer: nn.Module) -> bool:
    return any("attn" in name.lower() or "attention" in name.lower() or "attention" in type(m).__name__.lower()
               for name, m in layer.named_modules())


def _check_coverage(base: nn.Module, architecture: ResolvedArchitecture, config: Overrides) -> None:
    """Refuse a model with layer lists (with attention inside) that no stack covers."""
    covered = [stack.paths.layers for stack in architecture.stacks]
    found: list[str] = []
    for name, module in base.named_modules():
        if not (isinstance(module, (nn.ModuleList, nn.Sequential)) and len(module) and name):
            continue
        if any(name == p or name.startswith(p + ".") for p in [*covered, *found]):
            continue
        if _has_attention(module[0]):
            found.append(name)
    if not found:
        return
    message = (f"model_type '{architecture.model_type}': the masks would cover the layers at {covered}, but the "
               f"model also has layers with attention at {found}, which would stay unpruned (every sparsity and "
               "report would then describe part of the model). Map every stack of this model in "
               "hf_heuristic_core.ARCHITECTURES (ARCHITECTURES['bart'] shows an encoder-decoder), or, to prune the "
               "covered part on purpose, pass PruningConfig(allow_partial_model=True).")
    if not config.allow_partial_model:
        raise UnsupportedArchitectureError(message)
    architecture.notes.append(f"partial model: layers at {found} are not masked")
    logger.warning("allow_partial_model=True: %s", message)


def _get_layers(base: nn.Module, path: str, model_type: str) -> list[nn.Module]:
    try:
        layers = base.get_submodule(path)
    except AttributeError as err:
        raise UnsupportedArchitectureError(
            f"model_type '{model_type}': no layer list at '{path}' under {type(base).__name__}. "
            f"Candidates: {_layer_list_candidates(base)}. Override with PruningConfig(layers_path=...).") from err
    if not isinstance(layers, (nn.ModuleList, nn.Sequential)) or len(layers) == 0:
        raise UnsupportedArchitectureError(
            f"model_type '{model_type}': '{path}' is a {type(layers).__name__}, not a non-empty list of layers. "
            f"Candidates: {_layer_list_candidates(base)}. Override with PruningConfig(layers_path=...).")
    return list(layers)


def _get_submodule(layer: nn.Module, path: str, model_type: str, what: str) -> nn.Module:
    try:
        module = layer.get_submodule(path)
    except AttributeError as err:
        raise UnsupportedArchitectureError(
            f"model_type '{model_type}': no {what} at '{path}' in {type(layer).__name__}. Candidate modules: "
            f"{projection_candidates(layer)}. Override with PruningConfig(attention_output=..., mlp_output=...).") from err
    if input_width(module) is None:
        raise UnsupportedArchitectureError(
            f"model_type '{model_type}': the {what} '{path}' is a {type(module).__name__}, not a linear projection. "
            f"Candidate modules: {projection_candidates(layer)}.")
    return module


def input_width(module: nn.Module) -> int | None:
    """Input features of a Linear, a GPT-2 Conv1D (weight stored [in, out]) or a PEFT-wrapped projection."""
    base_layer = getattr(module, "base_layer", None)
    if isinstance(base_layer, nn.Module):
        return input_width(base_layer)
    if isinstance(module, nn.Linear):
        return module.in_features
    if is_transposed(module) and getattr(module, "weight", None) is not None:
        return module.weight.shape[0]
    return None


def output_width(module: nn.Module) -> int | None:
    base_layer = getattr(module, "base_layer", None)
    if isinstance(base_layer, nn.Module):
        return output_width(base_layer)
    if isinstance(module, nn.Linear):
        return module.out_features
    if is_transposed(module) and getattr(module, "weight", None) is not None:
        return module.weight.shape[1]
    return None


def projection_candidates(layer: nn.Module) -> list[str]:
    return [name for name, module in layer.named_modules() if name and input_width(module) is not None]


def _layer_list_candidates(base: nn.Module) -> list[str]:
    return [name for name, module in base.named_modules() if isinstance(module, nn.ModuleList) and len(module) > 0]


def _match_suffix(names: list[str], suffixes: tuple[str, ...]) -> str | None:
    """First suffix that names exactly one module; an exact name wins (BERT's `output.dense` vs
    `attention.output.dense`)."""
    for suffix in suffixes:
        if suffix in names:
            return suffix
        matches = [n for n in names if n.endswith("." + suffix)]
        if len(matches) == 1:
            return matches[0]
    return None


def _detect(base: nn.Module, hf_config, model_type: str, config: Overrides) -> ArchitectureMap:
    """Guess the map of a model not in ARCHITECTURES from module names."""
    layers_path = config.layers_path
    if layers_path is None:
        expected = _num_layers(hf_config)
        lists = [(name, module) for name, module in base.named_modules()
                 if isinstance(module, nn.ModuleList) and len(module) > 0
                 and (expected is None or len(module) == expected)]
        if not lists:
            raise UnsupportedArchitectureError(
                f"model_type '{model_type}' is not in hf_heuristic_core.ARCHITECTURES and no list of "
                f"{expected} layers was found under {type(base).__name__}. Candidates: "
                f"{_layer_list_candidates(base)}. Override: PruningConfig(layers_path='encoder.layer', "
                "attention_output='attention.output.dense', mlp_output='output.dense').")
        layers_path = lists[0][0]
    layer0 = base.get_submodule(layers_path)[0]
    names = projection_candidates(layer0)
    attention_output = config.attention_output or _match_suffix(names, ATTENTION_OUTPUT_SUFFIXES)
    mlp_output = config.mlp_output or _match_suffix(names, MLP_OUTPUT_SUFFIXES)
    if attention_output is None or mlp_output is None:
        missing = " and ".join(w for w, v in (("the attention output projection", attention_output),
                                               ("the MLP output projection", mlp_output)) if v is None)
        raise UnsupportedArchitectureError(
            f"model_type '{model_type}' is not in hf_heuristic_core.ARCHITECTURES and {missing} could not be "
            f"detected in layer '{layers_path}.0'. Candidate modules: {names}. Pass them explicitly: "
            f"PruningConfig(layers_path='{layers_path}', attention_output='<one of the candidates>', "
            "mlp_output='<one of the candidates>').")
    return ArchitectureMap(layers_path, attention_output, mlp_output, attention=_attention_block(attention_output))


def _attention_block(attention_output: str) -> str | None:
    """The attention module around an output projection: the outermost path component naming attention."""
    parts = attention_output.split(".")
    for end in range(1, len(parts)):
        if "att" in parts[end - 1].lower():
            return ".".join(parts[:end])
    return ".".join(parts[:-1]) or None


def _count(modules: list[nn.Module]) -> int:
    seen: set[int] = set()
    total = 0
    for module in modules:
        for parameter in module.parameters():
            if id(parameter) not in seen:
                seen.add(id(parameter))
                total += parameter.numel()
    return total


def _unit_param_counts(layer: nn.Module, paths: ArchitectureMap, num_heads: int) -> tuple[int, int]:
    """Parameters per head (the attention block's, split evenly) and per MLP block, for weighted sparsity.

    Detected models have no MLP paths: their MLP counts as the layer minus attention and normalization layers.
    """
    attention = layer.get_submodule(paths.attention) if paths.attention else layer.get_submodule(paths.attention_output)
    attention_count = _count([attention])
    if paths.mlp:
        mlp_count = _count([layer.get_submodule(p) for p in paths.mlp])
    else:
        norms = [m for m in layer.modules() if "norm" in type(m).__name__.lower()]
        cross = [layer.get_submodule(paths.cross_attention)] if paths.cross_attention else []
        mlp_count = _count([layer]) - attention_count - _count(norms) - _count(cross)
    return attention_count // num_heads, mlp_count
