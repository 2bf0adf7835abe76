"""Why a slim export kept parameters its masks prune: said by `export` and the slim model card, so that an export
that cannot shrink a model (a uniform BERT export kept 100.0% of MiniLM) does not look like a bug or a success.

Read from the slim record alone (`slim_info`): pruned heads that stay as zero-output slots, and masks that prune
nothing. Nothing here changes the export.
"""

from __future__ import annotations

from typing import Any

__all__ = ["shrink_notes"]


def _zero_slots(layer: dict[str, Any]) -> int:
    return sum(1 for head in layer["query_slots"] if head < 0)


def shrink_notes(info: dict[str, Any]) -> list[str]:
    """Sentences saying which pruned units the slim model still holds, and why (empty when it holds none)."""
    layers = info["layers"]
    num_heads = int(info["num_heads"])
    pruned_heads = sum(num_heads - len(layer["kept_heads"]) for layer in layers)
    pruned_mlps = sum(1 for layer in layers if not layer["keep_mlp"])
    pruned_neurons = any(layer.get("neurons") is not None for layer in layers)
    params = info["parameters"]
    kept = f"kept {params['slim'] / params['original']:.1%} of the parameters"
    if not pruned_heads and not pruned_mlps and not pruned_neurons:
        return [f"{kept}: the masks prune no head, MLP block or neuron, so there was nothing to remove."]
    notes = []
    slots = sum(_zero_slots(layer) for layer in layers)
    full_width = info.get("uniform") and slots and all(len(layer["query_slots"]) == num_heads for layer in layers)
    if full_width:
        notes.append(
            f"{kept}: the {slots} pruned heads stay as zero-output slots (their parameters and compute remain), "
            f"because a {info['model_type']} config states the head width as hidden_size / num_attention_heads, so "
            f"a uniform (stock) export must keep all {num_heads} head slots of every layer. Removed: "
            f"{pruned_mlps} of {len(layers)} MLP blocks. To drop the heads, export without uniform_layers "
            "(`export_slim(uniform=False)`, or prune without --uniform_layers): a folder for "
            "hf_heuristic_core.load_slim.")
    elif slots:
        notes.append(
            f"{kept}: {slots} zero-output head slots remain (a placeholder head in layers that keep no head where "
            "the architecture or the KV cache needs one, or padding of partly kept key/value groups; see "
            "hf_heuristic_core.export.plan); they add nothing to the outputs.")
    return notes
