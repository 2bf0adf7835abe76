"""Which parameters get weight masks: PEFT-style `target_modules`, layer ranges, optional biases.

`target_modules` is a list of module names, each matching a module whose name equals it or ends with "." + it
(`["query", "value"]`, `["mlp.c_proj"]`), or one string taken as a regular expression over full module names.
`None` selects every `nn.Linear` and Transformers `Conv1D` (weights tied to another module, e.g. an LM head tied to
the embedding, are left out: masking them would mask the embedding's twin only in one place). `layers_to_transform`
keeps modules whose name holds one of the given layer indices (the first `.<number>.` of the name).
An `nn.Embedding` is masked only when `target_modules` names it (`["wte", "c_attn", ...]`): Subtask Induction's
arithmetic effect appears only with the token embedding masked. An embedding whose weight is tied to another module
(GPT-2's `wte` / `lm_head` with `tie_word_embeddings=True`) is refused: the parametrization would mask the
embedding's lookup but not the tied output head, a model that matches no mask. Quantized weights cannot be masked entry by entry, so they are refused with the way out.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ...architectures.ownership import is_transposed
from ...errors import PruningError

logger = logging.getLogger(__name__)

__all__ = ["MaskedParameter", "check_not_quantized", "is_maskable_module", "layer_of", "select_parameters"]

_LAYER = re.compile(r"\.(\d+)(?:\.|$)")
_QUANTIZED_CLASS = re.compile(r"(4bit|8bit|Int8|Quant|GPTQ|AWQ|Fp8|HQQ)", re.IGNORECASE)


@dataclass(frozen=True)
class MaskedParameter:
    """One masked tensor: its name in the unwrapped model's `named_parameters()`, its module and attribute."""

    name: str
    module_name: str
    module: nn.Module
    attribute: str


def is_maskable_module(module: nn.Module) -> bool:
    return isinstance(module, nn.Linear) or (is_transposed(module)
                                             and isinstance(getattr(module, "weight", None), nn.Parameter))


def is_embedding(module: nn.Module) -> bool:
    return isinstance(module, nn.Embedding)


def layer_of(name: str) -> int | None:
    match = _LAYER.search(name)
    return int(match.group(1)) if match else None


def check_not_quantized(model: nn.Module) -> None:
    """Refuse models whose weights are quantized (bitsandbytes, GPTQ, AWQ, ...): there is no float weight to mask."""
    config = getattr(model, "config", None)
    quantized = bool(getattr(model, "is_quantized", False)) or getattr(config, "quantization_config", None) is not None
    culprit = "the model" if quantized else None
    if culprit is None:
        for name, module in model.named_modules():
            if _QUANTIZED_CLASS.search(type(module).__name__):
                culprit = f"module {name!r} ({type(module).__name__})"
                break
            weight = getattr(module, "weight", None)
            if isinstance(weight, nn.Parameter) and is_maskable_module(module) and not weight.is_floating_point():
                culprit = f"module {name!r} (weight dtype {weight.dtype})"
                break
    if culprit is not None:
        raise PruningError(f"Weight masks multiply floating-point weights, but {culprit} is quantized. Load the model "
                           "without quantization (e.g. torch_dtype=torch.bfloat16) to learn weight masks, or use "
                           "granularity='unit' or 'neuron', which mask activations and work on quantized models.")


def _matches(module_name: str, target: str) -> bool:
    return module_name == target or module_name.endswith("." + target)


def select_parameters(model: nn.Module, target_modules: list[str] | str | None = None,
                      layers_to_transform: list[int] | None = None, mask_bias: bool = False
                      ) -> list[MaskedParameter]:
    """The parameters the weight granularity masks, in `named_modules()` order (see the module docstring)."""
    check_not_quantized(model)
    candidates = [(name, module) for name, module in model.named_modules() if name and is_maskable_module(module)]
    if not candidates:
        raise PruningError(f"{type(model).__name__} has no nn.Linear or Conv1D module, so it has no weights the "
                           "weight granularity can mask.")
    examples = ", ".join(repr(name) for name, _ in candidates[:6])
    explicit = candidates + [(name, module) for name, module in model.named_modules() if name and is_embedding(module)]
    if target_modules is None:
        chosen = candidates
    elif isinstance(target_modules, str):
        chosen = [(n, m) for n, m in explicit if re.fullmatch(target_modules, n)]
        if not chosen:
            raise PruningError(f"target_modules={target_modules!r} (a regular expression over full module names) "
                               f"matches no Linear/Conv1D module (nor an Embedding); names look like {examples}.")
    else:
        for target in target_modules:
            if not any(_matches(n, target) for n, _ in explicit):
                raise PruningError(f"target_modules entry {target!r} matches no Linear/Conv1D module (nor an "
                                   f"Embedding; an entry matches a module name or its last dotted parts); names look like "
                                   f"{examples}.")
        chosen = [(n, m) for n, m in explicit if any(_matches(n, t) for t in target_modules)]
    _refuse_tied_embeddings(model, [(n, m) for n, m in chosen if is_embedding(m)])
    if layers_to_transform is not None:
        wanted = set(layers_to_transform)
        kept = [(n, m) for n, m in chosen if layer_of(n) in wanted]
        if not kept:
            present = sorted({layer_of(n) for n, _ in chosen} - {None})
            raise PruningError(f"layers_to_transform={sorted(wanted)} keeps none of the {len(chosen)} selected "
                               f"modules; their layer indices are {present}.")
        chosen = kept
    names = {}
    for name, parameter in model.named_parameters():
        names.setdefault(id(parameter), name)
    selected, tied = [], []
    for module_name, module in chosen:
        for attribute in ("weight", "bias") if mask_bias else ("weight",):
            parameter = getattr(module, attribute, None)
            if not isinstance(parameter, nn.Parameter):
                continue
            name = names.get(id(parameter))
            if name != f"{module_name}.{attribute}":
                tied.append(f"{module_name}.{attribute}")
                continue
            selected.append(MaskedParameter(name, module_name, module, attribute))
    if tied:
        logger.info("Weight masks leave out %d tied parameter(s) (shared with another module): %s", len(tied),
                    tied[:4])
    if not selected:
        raise PruningError(f"The selected modules' weights are all tied to other modules ({tied[:4]}); select "
                           "other target_modules.")
    return selected


def _refuse_tied_embeddings(model: nn.Module, embeddings: list[tuple[str, nn.Module]]) -> None:
    """An embedding weight shared with another module (a tied LM head) cannot be masked in one place only."""
    holders: dict[int, list[str]] = {}
    for module_name, module in model.named_modules(remove_duplicate=False):
        weight = module._parameters.get("weight") if hasattr(module, "_parameters") else None
        if isinstance(weight, nn.Parameter):
            holders.setdefault(id(weight), []).append(module_name)
    for name, module in embeddings:
        others = sorted(set(holders.get(id(module.weight), [])) - {name})
        if others:
            raise PruningError(f"Embedding {name!r} shares its weight with {others} (tied word embeddings): a weight "
                               "mask on the embedding would not mask the tied output head. Build the model with "
                               "tie_word_embeddings=False (e.g. config.tie_word_embeddings = False before creating "
                               f"it), or leave {name.rsplit('.', 1)[-1]!r} out of target_modules.")


def unmasked_tensor(masked: MaskedParameter) -> torch.Tensor:
    """The stored tensor of a masked parameter, read without running its mask parametrization (which would draw a
    mask outside any forward pass)."""
    parametrizations = getattr(masked.module, "parametrizations", None)
    if parametrizations is not None and masked.attribute in parametrizations:
        return parametrizations[masked.attribute].original
    return getattr(masked.module, masked.attribute)


def describe_selection(selected: list[MaskedParameter]) -> dict[str, Any]:
    return {"masked_parameters": len(selected),
            "masked_entries": int(sum(unmasked_tensor(p).numel() for p in selected))}
