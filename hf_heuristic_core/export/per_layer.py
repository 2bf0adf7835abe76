"""A slim folder's per-layer widths in transformers' `per_layer_config` schema, kept for the day transformers builds it.

transformers 5.24's `per_layer_config` (PR #45333) is configuration only; the modeling half (PR #45332) is open.
Measured on 5.24 (`tests/export/test_export_remote_code.py`, the canaries): a per-layer `num_attention_heads` fails
the Llama config's validation, and a per-layer `intermediate_size` or `num_key_value_heads` makes the config
heterogeneous, after which stock modeling code (the MLP's `config.intermediate_size`, the attention's
`config.num_key_value_heads`) raises `AmbiguousGlobalPerLayerAttributeError`. So `save_slim` writes the schema under
our own key `SCHEMA_KEY`, not under `per_layer_config`; a canary test turns red when stock transformers loads such a
folder by itself, and the folder's own modeling code (`remote_code`) can then go for these model types.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .slim_modeling import RECORD_KEY

__all__ = ["PER_LAYER_MODEL_TYPES", "SCHEMA_KEY", "per_layer_config_for", "write_per_layer_schema"]

SCHEMA_KEY = "hf_heuristic_core_per_layer_config"
# the model types whose configs have transformers' per-layer schema (the Llama family)
PER_LAYER_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3")


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


def write_per_layer_schema(config_file: str | Path) -> None:
    """Add the per-layer widths (`SCHEMA_KEY`) to a saved slim config.json of an uneven Llama-family layout; any
    other config is left as it is."""
    path = Path(config_file)
    raw = json.loads(path.read_text())
    info = raw.get(RECORD_KEY)
    if not info or info.get("stock") or info.get("model_type") not in PER_LAYER_MODEL_TYPES:
        return
    raw[SCHEMA_KEY] = per_layer_config_for(info, int(raw["intermediate_size"]))
    path.write_text(json.dumps(raw, indent=2, sort_keys=True) + "\n")
