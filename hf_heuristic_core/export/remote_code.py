"""The modeling code an uneven slim folder carries (transformers' `auto_map` convention), and the record it reads.

A slim layout that a stock config cannot state (per-layer widths; BERT / GPT-2 head widths; a folded bias the
config has no flag for) used to need `hf_heuristic_core.load_slim`, or this package imported first. Transformers'
own answer for such a layout is code that travels with the folder: `save_slim` writes `MODELING_FILE` (the
self-contained `export/slim_modeling.py` plus one subclass per head class of the model type) and an `auto_map` naming
them, so that `AutoModelFor*.from_pretrained(folder, trust_remote_code=True)` builds it in any process, this package
imported or not. Stock (uniform) folders stay code-free.

The shapes that code applies are read off the rebuilt model by `layout_record`: every module whose parameters or
width attributes differ from a stock build of the same config, and the head counts each attention module's forward
reads. Recording the result rather than the plan keeps the travelling code free of architecture knowledge.
"""

from __future__ import annotations

import copy
import inspect
import json
from pathlib import Path
from typing import Any

import torch
import transformers
from torch import nn

from ..architectures.registry import ArchitectureMap
from ..architectures.resolve import resolve_architecture
from . import slim_modeling
from .slim_modeling import RECORD_KEY, BiasOnlyLinear

__all__ = ["MODELING_FILE", "head_classes", "layout_record", "modeling_source", "write_remote_code"]

MODELING_MODULE = "modeling_hf_heuristic_core_slim"
MODELING_FILE = f"{MODELING_MODULE}.py"
# integer attributes a module's forward reads its widths from (nn.Linear, transformers' transposed Conv1D)
WIDTH_ATTRIBUTES = ("in_features", "out_features", "nf", "nx")


def _module_spec(module: nn.Module, stock: nn.Module) -> dict[str, Any] | None:
    """What `slim_modeling._reshape_module` must do to `stock` to get `module` (None: nothing)."""
    weight, bias = module.weight, getattr(module, "bias", None)
    spec: dict[str, Any] = {"weight": list(weight.shape), "bias": None if bias is None else list(bias.shape)}
    widths = {name: int(module.__dict__[name]) for name in WIDTH_ATTRIBUTES
              if name in module.__dict__ and module.__dict__[name] != stock.__dict__.get(name)}
    if widths:
        spec["widths"] = widths
    if isinstance(module, BiasOnlyLinear):
        spec["bias_only"] = True
    stock_bias = getattr(stock, "bias", None)
    same = (tuple(weight.shape) == tuple(stock.weight.shape) and not widths and not spec.get("bias_only")
            and (bias is None) == (stock_bias is None)
            and (bias is None or tuple(bias.shape) == tuple(stock_bias.shape)))
    return None if same else spec


def layout_record(model: nn.Module, paths: ArchitectureMap) -> dict[str, Any]:
    """`{"modules": {path: spec}, "attributes": {path: {name: value}}}`, paths relative to `model.base_model`: what a
    stock build of `model.config` (the original shapes) needs to become `model` (see `slim_modeling`)."""
    config = copy.deepcopy(model.config)
    with torch.device("meta"):
        stock = type(model)(config)
    base, stock_base = model.base_model, stock.base_model
    stock_modules = dict(stock_base.named_modules())
    modules: dict[str, Any] = {}
    for name, module in base.named_modules():
        if not isinstance(getattr(module, "weight", None), nn.Parameter) or name not in stock_modules:
            continue
        spec = _module_spec(module, stock_modules[name])
        if spec is not None:
            modules[name] = spec
    # the layers are found on the stock build: resolving the slim model itself would check its (pruned) widths
    stock_names = {id(module): name for name, module in stock_base.named_modules()}
    attributes: dict[str, dict[str, Any]] = {}
    for stock_layer in resolve_architecture(stock).layers:
        path = stock_names[id(stock_layer.get_submodule(paths.slim.attention_module))]
        attention = base.get_submodule(path)
        values = {attribute: _read_attribute(attention, attribute) for attribute, _ in paths.slim.attention_attrs}
        values = {key: value for key, value in values.items() if value is not None}
        if values:
            attributes[path] = values
    return {"modules": modules, "attributes": attributes}


def _read_attribute(module: nn.Module, attribute: str) -> Any:
    if attribute.startswith("config."):
        return getattr(getattr(module, "config", None), attribute[len("config."):], None)
    return getattr(module, attribute, None)


def head_classes(model_type: str) -> dict[str, str]:
    """Auto class name -> the stock class transformers maps `model_type` to, for every `AutoModel*` class."""
    from transformers.models.auto import (
        modeling_auto,  # a plain module: listing the lazy top level costs seconds
    )
    found: dict[str, str] = {}
    autos = {name: obj for name, obj in vars(modeling_auto).items() if name.startswith("AutoModel")
             and isinstance(obj, type)}
    for auto_name in sorted(autos):
        mapping = getattr(autos[auto_name], "_model_mapping", None)
        names = getattr(mapping, "_model_mapping", {}).get(model_type)
        for class_name in ([names] if isinstance(names, str) else list(names or ())):
            if hasattr(transformers, class_name):
                found[auto_name] = class_name
                break
    return found


def modeling_source(classes: dict[str, str], model_type: str) -> str:
    """The folder's modeling file: `slim_modeling`'s source and one `Slim<Class>` per stock class."""
    stock = sorted(set(classes.values()))
    lines = [inspect.getsource(slim_modeling).rstrip(), "", "",
             f"# The head classes transformers registers for {model_type!r}, each built to this folder's layout.",
             f"from transformers import {', '.join(stock)}  # noqa: E402", ""]
    for class_name in stock:
        lines += ["", f"class Slim{class_name}(SlimLayout, {class_name}):",
                  f'    """{class_name} built to the slim layout in this folder\'s config."""', ""]
    return "\n".join(lines)


def write_remote_code(folder: Path, model_type: str, config_file: Path) -> None:
    """Write `MODELING_FILE` into `folder` and point the saved config's `auto_map` at its classes."""
    classes = head_classes(model_type)
    (folder / MODELING_FILE).write_text(modeling_source(classes, model_type))
    raw = json.loads(config_file.read_text())
    if "modules" not in (raw.get(RECORD_KEY) or {}):
        raise ValueError(f"{config_file} has no slim module record; export the model again with export_slim.")
    raw["auto_map"] = {auto: f"{MODELING_MODULE}.Slim{name}" for auto, name in classes.items()}
    config_file.write_text(json.dumps(raw, indent=2, sort_keys=True) + "\n")
