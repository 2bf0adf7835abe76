"""What `hf-heuristic-core export` checks before it loads a model: masks of a granularity a slim model can drop, made
for this model. Each failure names both sides and the fix, where transformers would answer with a tensor size
mismatch or a missing per-layer architecture."""

from __future__ import annotations

from typing import Any

from ..errors import ArtifactError, ExportError
from ..granularity import GRANULARITIES, granularity_settings_class

__all__ = ["check_masks_fit_model", "exported_granularity", "loading_mismatch", "model_facts"]

def slim_granularities() -> list[str]:
    """The registered granularities whose masks cut whole units a slim export can drop (their settings say so)."""
    return [name for name in GRANULARITIES.names() if granularity_settings_class(name).slim_refusal is None]


def exported_granularity(artifact: Any, source: str) -> str:
    granularity = artifact.config.granularity
    refusal = granularity_settings_class(granularity).slim_refusal
    if refusal is not None:
        raise ExportError(f"--masks {source} holds {granularity!r} masks ({refusal}); a slim model can only drop "
                          "whole heads, MLP blocks or MLP neurons, so these "
                          "masks cannot be exported. Use them hooked: PrunableModel.from_pretrained(model, masks=dir) "
                          f"(or prune with --granularity {' / '.join(slim_granularities())} to get exportable masks).")
    return granularity


def model_facts(config: Any) -> dict[str, Any]:
    """Type, depth, query heads, width and head width of a Transformers config (its text part)."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    heads = getattr(text, "num_attention_heads", None)
    hidden = getattr(text, "hidden_size", None)
    head_dim = getattr(text, "head_dim", None) or (hidden // heads if hidden and heads else None)
    return {"model_type": getattr(config, "model_type", None), "num_layers": getattr(text, "num_hidden_layers", None),
            "num_heads": heads, "hidden_size": hidden, "head_dim": head_dim}


def _describe(facts: dict[str, Any]) -> str:
    return (f"{facts.get('model_type')}, {facts.get('num_layers')} layers x {facts.get('num_heads')} heads, hidden "
            f"{facts.get('hidden_size')}")


def check_masks_fit_model(artifact: Any, config: Any, model: str, masks: str) -> None:
    """Refuse masks made for another model (type, depth, heads, widths), naming both models."""
    saved = artifact.config
    wanted = {"model_type": saved.model_type, "num_layers": saved.num_layers, "num_heads": saved.num_heads,
              "hidden_size": saved.hidden_size, "head_dim": saved.head_dim}
    have = model_facts(config)
    differ = [f"{key} {wanted[key]!r} vs {have[key]!r}" for key in wanted
              if wanted[key] is not None and have[key] is not None and wanted[key] != have[key]]
    if differ:
        raise ArtifactError(f"--masks {masks} were made for another model than --model {model}: "
                            f"{'; '.join(differ)} (masks: {_describe(wanted)}, base model "
                            f"{saved.base_model_name_or_path}; --model: {_describe(have)}). Pass the model the masks "
                            "were learned on as --model.")


def loading_mismatch(error: BaseException, artifact: Any, model: str, masks: str) -> BaseException:
    """A size mismatch while loading the model or the masks, turned into an error naming both models."""
    text = str(error)
    if "size mismatch" not in text and "shape" not in text:
        return error
    return ArtifactError(f"--masks {masks} do not fit --model {model}: loading them failed with a size mismatch "
                         f"({' '.join(text.split())[:200]}). The masks were made for "
                         f"{artifact.config.base_model_name_or_path} ({artifact.config.base_model_class}); pass that "
                         "model as --model.")
