"""Uneven (free-layout) slim folders through plain `AutoModel*.from_pretrained`, once `hf_heuristic_core` is imported.

A slim model whose layers differ in width needs per-layer shapes, which a stock Llama-family config cannot state and
stock modeling code cannot build (transformers 5.24's `per_layer_config`, PR #45333, is configuration only; the
modeling half, PR #45332, is open). Importing this package registers, through transformers' model-patching API
(`transformers.monkey_patching.register_patch_mapping`, PR #43917), a replacement for each supported decoder-layer
class. The replacement is the stock class for every model except a slim export: inside `from_pretrained` (and
`from_config`) a layer whose config carries a slim layout is built at the original shapes and rebuilt to its
recorded layout by the same code as `load_slim` (`export.fold.rebuild_layer`), so the weights load into the right
shapes and the logits equal `load_slim`'s. Any other model gets a plain instance of the stock class (`__new__`
returns one), so nothing else changes.

What `save_slim` writes beside the package's own layout (`per_layer_config_for`): the per-layer widths in
transformers' `per_layer_config` schema, under our own key `SCHEMA_KEY`, not under `per_layer_config` itself.
Measured on 5.24 (`tests/export/test_export_autoload.py`): a per-layer `num_attention_heads` fails the Llama config's
validation, and a per-layer `intermediate_size` or `num_key_value_heads` makes the config heterogeneous, after which
stock modeling code (the MLP's `config.intermediate_size`, the attention's `config.num_key_value_heads`) raises
`AmbiguousGlobalPerLayerAttributeError`, ours included. The record is ready for the day transformers builds it; a
test turns red when stock transformers loads such a folder by itself, so this patch can go.

A process that never imports this package gets a clear error from `from_pretrained` (the checkpoint's shapes do not
match the config's; tested in a subprocess), never a model with wrong logits.
"""

from __future__ import annotations

import importlib
import json
import logging
import sys
from pathlib import Path
from typing import Any

from torch import nn

from ..architectures.registry import ARCHITECTURES
from .fold import rebuild_layer
from .plan import LayerLayout
from .slim import SLIM_KEY
from .. import _autoload_hook

__all__ = ["AUTOLOAD_MODEL_TYPES", "SCHEMA_KEY", "autoload_registered", "loads_after_import", "per_layer_config_for",
           "register_autoload", "restore_stock_classes", "unregister_autoload", "write_per_layer_schema"]

logger = logging.getLogger(__name__)

# transformers' per-layer schema of a slim folder's widths, kept under our key until transformers builds it
SCHEMA_KEY = "hf_heuristic_core_per_layer_config"
# model type -> (modeling module, decoder layer class): the layers the patch replaces
AUTOLOAD_MODEL_TYPES: dict[str, tuple[str, str]] = {
    "llama": ("transformers.models.llama.modeling_llama", "LlamaDecoderLayer"),
    "mistral": ("transformers.models.mistral.modeling_mistral", "MistralDecoderLayer"),
    "qwen2": ("transformers.models.qwen2.modeling_qwen2", "Qwen2DecoderLayer"),
    "qwen3": ("transformers.models.qwen3.modeling_qwen3", "Qwen3DecoderLayer"),
}
AUTOLOAD_CLASS_NAMES = tuple(name for _, name in AUTOLOAD_MODEL_TYPES.values())
_REGISTERED: dict[str, type[nn.Module]] = {}


def per_layer_config_for(info: dict[str, Any], intermediate_size: int) -> dict[str, dict[str, int]]:
    """transformers' sparse `per_layer_config` (layer index -> overrides) of a slim layout: each layer's query heads,
    key/value heads and MLP width where they differ from the config's global (original) values."""
    schema: dict[str, dict[str, int]] = {}
    for index, layer in enumerate(info["layers"]):
        widths = {"num_attention_heads": (len(layer["query_slots"]), info["num_heads"]),
                  "num_key_value_heads": (len(layer["kv_slots"]), info["num_key_value_heads"]),
                  "intermediate_size": (int(layer["intermediate"]), intermediate_size)}
        overrides = {key: ours for key, (ours, original) in widths.items() if ours != original}
        if overrides:
            schema[str(index)] = overrides
    return schema


def loads_after_import(info: dict[str, Any] | None) -> bool:
    """Whether a slim folder with this record loads through `AutoModel*.from_pretrained` after
    `import hf_heuristic_core` (an uneven Llama-family layout); stock folders load without the import."""
    return bool(info) and not info.get("stock") and info.get("model_type") in AUTOLOAD_MODEL_TYPES


def write_per_layer_schema(config_file: str | Path) -> None:
    """Add the per-layer widths in transformers' schema (`SCHEMA_KEY`) to a saved slim config.json whose layout
    loads after import; any other config is left as it is."""
    path = Path(config_file)
    raw = json.loads(path.read_text())
    info = raw.get(SLIM_KEY)
    if not loads_after_import(info):
        return
    raw[SCHEMA_KEY] = per_layer_config_for(info, int(raw["intermediate_size"]))
    path.write_text(json.dumps(raw, indent=2, sort_keys=True) + "\n")


def _slim_layout(config: Any) -> dict[str, Any] | None:
    """The slim record of a config whose layers the stock class cannot build (None: build the stock layer)."""
    info = getattr(config, SLIM_KEY, None)
    if not isinstance(info, dict) or info.get("stock"):
        return None
    return info


def _slim_layer_factory(model_type: str, original: type[nn.Module]) -> type[nn.Module]:
    """A stand-in for `original` in transformers' patch mapping. Calling it returns an instance of `original` itself
    (`__new__` returns it, so the stand-in never has instances): a stock layer, or for a config with a slim layout
    the layer built at the original shapes and rebuilt to its recorded layout (as `load_slim` does)."""
    paths = ARCHITECTURES[model_type]

    class SameInstances(type(original)):
        # transformers retargets output recorders (hidden states, attentions) to the stand-in for good; every
        # instance of the stock class must still match them, or a model built later loses its hidden states
        def __instancecheck__(cls, instance: Any) -> bool:
            return isinstance(instance, original)

        def __subclasscheck__(cls, subclass: type) -> bool:
            return issubclass(subclass, original)

    def __new__(cls, config, layer_idx=None, *args, **kwargs):
        try:
            return _build_layer(config, layer_idx, *args, **kwargs)
        except BaseException:
            # transformers 5.24's apply_patches puts the stock classes back only when the model init succeeds: left
            # behind, the stand-ins (all of them are patched in at once) made every later model of their types
            # unpicklable in this process (torch.save(model): "not the same object as ...LlamaDecoderLayer")
            _restore_stock_classes({cls, *_REGISTERED.values()})
            raise

    def _build_layer(config, layer_idx, *args, **kwargs):
        layer = original(config, layer_idx, *args, **kwargs)
        info = _slim_layout(config)
        if info is None:
            return layer
        if info.get("model_type") != model_type or layer_idx is None or not 0 <= layer_idx < len(info["layers"]):
            raise ValueError(f"The slim layout in this config is for a {info.get('model_type')!r} model of "
                             f"{len(info['layers'])} layers, but {original.__name__} {layer_idx} is being built; "
                             "the folder's config.json was edited. Re-export it with save_slim.")
        recorded = getattr(config, SCHEMA_KEY, None)
        if recorded is not None and recorded.get(str(layer_idx), {}) != \
                per_layer_config_for(info, int(config.intermediate_size)).get(str(layer_idx), {}):
            raise ValueError(f"config.json's {SCHEMA_KEY} for layer {layer_idx} ({recorded.get(str(layer_idx))}) "
                             f"disagrees with its slim layout; the folder was edited. Re-export it with save_slim.")
        rebuild_layer(layer, paths, LayerLayout.from_dict(info["layers"][layer_idx]), info["num_heads"],
                      info["num_key_value_heads"], info["head_dim"], None, None)
        return layer

    namespace = {"__new__": __new__, "__module__": __name__, "stock_class": original, "__qualname__": f"slim.{original.__name__}",
                 "__doc__": f"Builds {original.__name__}, rebuilt to a slim export's layout when its config has one."}
    # nn.Module, not `original`: the stand-in is never instantiated, so it needs none of the stock class's methods
    return SameInstances(original.__name__, (nn.Module,), namespace)


def register_autoload(model_type: str) -> bool:
    """Register the slim decoder layer of `model_type` with transformers' patch mapping (done when its modeling
    module is first imported in a process that imported `hf_heuristic_core`, see `_autoload_hook`). False when the
    patching API is missing (transformers before it) or another library already patches that class (logged)."""
    try:
        from transformers.monkey_patching import (
            get_patch_mapping,
            register_patch_mapping,
        )
    except ImportError:
        return False
    module_name, class_name = AUTOLOAD_MODEL_TYPES[model_type]
    key = _pattern(class_name)
    mapping = get_patch_mapping()
    if mapping.get(key) is _REGISTERED.get(class_name) is not None:
        return True
    if key in mapping or class_name in mapping:
        logger.warning("%s is already patched by another library; uneven slim %s folders load with "
                       "hf_heuristic_core.load_slim only.", class_name, model_type)
        return False
    original = getattr(importlib.import_module(module_name), class_name)
    factory = _slim_layer_factory(model_type, original)
    register_patch_mapping({key: factory})
    _REGISTERED[class_name] = factory
    return True


def _pattern(class_name: str) -> str:
    # anchored: a bare name is also tried as a regex search, and "LlamaDecoderLayer" is inside "DiffLlamaDecoderLayer"
    return f"^{class_name}$"


def unregister_autoload() -> None:
    """Remove the patches (then only `load_slim` loads uneven slim folders). For tests and for users who want stock
    loading only; importing a modeling module again does not bring them back in this process."""
    from transformers.monkey_patching import get_patch_mapping, unregister_patch_mapping
    mapping = get_patch_mapping()
    mine = [_pattern(name) for name, cls in _REGISTERED.items() if mapping.get(_pattern(name)) is cls]
    if mine:
        unregister_patch_mapping(mine)
    _restore_stock_classes(set(_REGISTERED.values()))
    _REGISTERED.clear()
    _autoload_hook.disable()


def restore_stock_classes() -> None:
    """Put the stock decoder-layer classes back wherever a failed `from_pretrained` left our stand-ins (see
    `_restore_stock_classes`); the patches stay registered. `load_slim` builds its model from the stock classes and
    rebuilds the layers itself: a left-over stand-in would rebuild them a second time (IndexError on neuron layouts)."""
    _restore_stock_classes(set(_REGISTERED.values()))


def _restore_stock_classes(factories: set[type]) -> None:
    """Put the stock classes back wherever a stand-in was left. transformers 5.24's `apply_patches` restores the
    patched module attributes only when model init succeeds (no try/finally), so a `from_pretrained` that raised
    while patched (e.g. an edited slim folder) leaves the stand-ins in the modeling modules; they still build stock
    layers for every other config, but `unregister_autoload` must not leave them behind."""
    for name, module in list(sys.modules.items()):
        if module is None or not name.startswith("transformers"):
            continue
        for class_name in AUTOLOAD_CLASS_NAMES:
            value = module.__dict__.get(class_name)
            if value in factories:
                setattr(module, class_name, value.stock_class)


def autoload_registered(model_type: str = "llama") -> bool:
    """Whether uneven slim folders of `model_type` load through `AutoModel*.from_pretrained` in this process."""
    try:
        from transformers.monkey_patching import get_patch_mapping
    except ImportError:
        return False
    module_name, class_name = AUTOLOAD_MODEL_TYPES[model_type]
    importlib.import_module(module_name)   # the import hook registers on first import
    return class_name in _REGISTERED and get_patch_mapping().get(_pattern(class_name)) is _REGISTERED[class_name]
