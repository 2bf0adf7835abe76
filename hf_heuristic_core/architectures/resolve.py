"""Where to hook, per architecture: a declarative map from `model_type` to module paths.

Paths are relative to `model.base_model` (`layers`) and to one layer (the rest). The attention output projection's
*input* is the concatenation of the per-head context vectors, so masking that input masks heads for every attention
implementation (eager, SDPA, flash) and for grouped-query attention alike. The MLP output projection's *output* is the
MLP block's contribution before any residual add or LayerNorm. `head_dim` is taken from the projection's input width,
not from `hidden_size / num_heads` (wrong for Qwen3 and Gemma).

Unknown models are detected by module-name suffixes; every entry can be overridden from `PruningConfig`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from torch import nn

from ..config import PruningConfig
from ..errors import UnsupportedArchitectureError


@dataclass(frozen=True)
class ArchitectureMap:
    """Module paths for one architecture. `attention` and `mlp` only feed the parameter-weighted sparsity."""

    layers: str
    attention_output: str
    mlp_output: str
    attention: str | None = None
    mlp: tuple[str, ...] = ()


_BERT_LIKE = ArchitectureMap("encoder.layer", "attention.output.dense", "output.dense",
                             attention="attention", mlp=("intermediate", "output.dense"))
_LLAMA_LIKE = ArchitectureMap("layers", "self_attn.o_proj", "mlp.down_proj", attention="self_attn", mlp=("mlp",))

ARCHITECTURES: dict[str, ArchitectureMap] = {
    **{t: _BERT_LIKE for t in ("bert", "roberta", "xlm-roberta", "electra", "camembert", "data2vec-text",
                               "ernie", "roberta-prelayernorm", "xlm-roberta-xl")},
    "distilbert": ArchitectureMap("transformer.layer", "attention.out_lin", "ffn.lin2", attention="attention",
                                  mlp=("ffn",)),
    "mpnet": ArchitectureMap("encoder.layer", "attention.attn.o", "output.dense", attention="attention",
                             mlp=("intermediate", "output.dense")),
    "gpt2": ArchitectureMap("h", "attn.c_proj", "mlp.c_proj", attention="attn", mlp=("mlp",)),
    "gpt_neo": ArchitectureMap("h", "attn.attention.out_proj", "mlp.c_proj", attention="attn", mlp=("mlp",)),
    "gpt_neox": ArchitectureMap("layers", "attention.dense", "mlp.dense_4h_to_h", attention="attention",
                                mlp=("mlp",)),
    "opt": ArchitectureMap("decoder.layers", "self_attn.out_proj", "fc2", attention="self_attn", mlp=("fc1", "fc2")),
    "phi": ArchitectureMap("layers", "self_attn.dense", "mlp.fc2", attention="self_attn", mlp=("mlp",)),
    **{t: _LLAMA_LIKE for t in ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "phi3", "olmo", "olmo2",
                                "granite", "cohere", "smollm3", "helium", "glm")},
}

# Suffixes tried, in order, for models not in the map. A suffix must match exactly one module of a layer.
ATTENTION_OUTPUT_SUFFIXES = ("o_proj", "out_proj", "attention.output.dense", "attn.c_proj", "attention.dense",
                             "self_attention.dense", "self_attn.dense", "out_lin", "attn.o", "attention.wo")
MLP_OUTPUT_SUFFIXES = ("down_proj", "mlp.c_proj", "fc2", "dense_4h_to_h", "output.dense", "lin2", "mlp.fc_out",
                       "w2", "mlp.wo", "c_proj")


@dataclass
class ResolvedArchitecture:
    """The concrete modules of one loaded model that the hooks attach to."""

    model_type: str
    paths: ArchitectureMap
    layers: list[nn.Module]
    attention_outputs: list[nn.Module]
    mlp_outputs: list[nn.Module]
    num_heads: int
    head_dim: int
    hidden_size: int
    head_param_count: int
    mlp_param_count: int
    detected: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def num_layers(self) -> int:
        return len(self.layers)


def transformers_model(model: nn.Module) -> nn.Module:
    """The `PreTrainedModel` inside a PEFT wrapper (or the model itself)."""
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) else model


def resolve_architecture(model: nn.Module, config: PruningConfig | None = None) -> ResolvedArchitecture:
    """Find the layers and hook sites of `model`, honoring the overrides in `config`."""
    config = config or PruningConfig()
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

    layers = _get_layers(base, paths.layers, model_type)
    attention_outputs = [_get_submodule(layer, paths.attention_output, model_type, "attention output projection")
                         for layer in layers]
    mlp_outputs = [_get_submodule(layer, paths.mlp_output, model_type, "MLP output projection") for layer in layers]

    num_heads = config.num_heads or _num_heads(hf_config)
    if num_heads is None:
        raise UnsupportedArchitectureError(
            f"Cannot read the number of attention heads of model_type '{model_type}' from its config; "
            "pass it explicitly: PruningConfig(num_heads=...).")
    in_width = input_width(attention_outputs[0])
    if in_width % num_heads:
        raise UnsupportedArchitectureError(
            f"model_type '{model_type}': the attention output projection '{paths.attention_output}' takes "
            f"{in_width} inputs, which is not a multiple of num_heads={num_heads}. Check num_heads, or point "
            "PruningConfig(attention_output=...) at the projection whose input is the concatenated head outputs.")
    hidden_size = output_width(mlp_outputs[0])
    head_params, mlp_params = _unit_param_counts(layers[0], paths, num_heads)
    return ResolvedArchitecture(
        model_type=model_type, paths=paths, layers=layers, attention_outputs=attention_outputs,
        mlp_outputs=mlp_outputs, num_heads=num_heads, head_dim=in_width // num_heads, hidden_size=hidden_size,
        head_param_count=head_params, mlp_param_count=mlp_params, detected=detected)


def _num_heads(hf_config) -> int | None:
    if hf_config is None:
        return None
    text_config = hf_config.get_text_config() if hasattr(hf_config, "get_text_config") else hf_config
    for name in ("num_attention_heads", "n_head", "num_heads", "n_heads"):
        value = getattr(text_config, name, None)
        if isinstance(value, int):
            return value
    return None


def _num_layers(hf_config) -> int | None:
    if hf_config is None:
        return None
    text_config = hf_config.get_text_config() if hasattr(hf_config, "get_text_config") else hf_config
    value = getattr(text_config, "num_hidden_layers", None)
    return value if isinstance(value, int) else None


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
    if type(module).__name__ == "Conv1D" and getattr(module, "weight", None) is not None:
        return module.weight.shape[0]
    return None


def output_width(module: nn.Module) -> int | None:
    base_layer = getattr(module, "base_layer", None)
    if isinstance(base_layer, nn.Module):
        return output_width(base_layer)
    if isinstance(module, nn.Linear):
        return module.out_features
    if type(module).__name__ == "Conv1D" and getattr(module, "weight", None) is not None:
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


def _detect(base: nn.Module, hf_config, model_type: str, config: PruningConfig) -> ArchitectureMap:
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
        mlp_count = _count([layer]) - attention_count - _count(norms)
    return attention_count // num_heads, mlp_count


def supported_model_types() -> list[str]:
    return sorted(ARCHITECTURES)


__all__ = ["ARCHITECTURES", "ArchitectureMap", "ResolvedArchitecture", "resolve_architecture",
           "supported_model_types", "transformers_model"]

