"""Building a `PrunableModel`: the granularity its config names (checked against the relaxation and the ablation),
the device of the wrapped model, and what `PrunableModel.from_pretrained` loads (a model, or the base model a mask
artifact names, with the GGUF file it records).

Kept out of `model.py`, which is the wrapper's behaviour once built.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch import nn

from .artifacts import base_model_source, hub_kwargs, load_base_model, recorded_gguf_file, resolve_artifact_dir
from .config import PruningConfig
from .errors import PruningError
from .granularity import get_granularity
from .granularity.base import Granularity

__all__ = ["build_granularity", "check_ablation", "load_to_wrap", "model_device"]


def load_to_wrap(name_or_path: str | os.PathLike, pruning_config: PruningConfig | None,
                 masks: str | os.PathLike | None, model_class: Any,
                 hf_kwargs: dict[str, Any]) -> tuple[nn.Module, PruningConfig | None, Any, dict[str, Any]]:
    """`(model, pruning_config, masks, hub kwargs for loading the masks)` for `PrunableModel.from_pretrained` (see
    there): a mask artifact in `name_or_path` loads the base model it names, with its class and GGUF file."""
    artifact_dir = resolve_artifact_dir(name_or_path, must_exist=False, **hub_kwargs(hf_kwargs))
    if artifact_dir is not None and masks is None:
        saved = PruningConfig.from_pretrained(artifact_dir)
        if not saved.base_model_name_or_path:
            raise PruningError(f"The mask artifact at {name_or_path} does not name its base model; load the model "
                               "yourself and call PrunableModel(model).load_masks(...).")
        masks, name_or_path = artifact_dir, base_model_source(saved)
        if model_class is None and saved.base_model_class:
            import transformers
            model_class = getattr(transformers, saved.base_model_class, None)
        if saved.base_model_gguf_file and "gguf_file" not in hf_kwargs:
            hf_kwargs = {**hf_kwargs, "gguf_file": saved.base_model_gguf_file}
        pruning_config = pruning_config or saved.settings_only()
    elif masks is not None and "gguf_file" not in hf_kwargs:
        # The base model given by hand (moved, or a copy): the file the artifact records, when the folder holds it
        recorded = recorded_gguf_file(masks, name_or_path)
        if recorded:
            hf_kwargs = {**hf_kwargs, "gguf_file": recorded}
    model = load_base_model(name_or_path, model_class, artifact=masks, **hf_kwargs)
    if pruning_config is not None or hf_kwargs.get("gguf_file"):   # what was loaded, not what a config said
        pruning_config = PruningConfig.from_dict({**(pruning_config or PruningConfig()).to_dict(),
                                                  "base_model_gguf_file": hf_kwargs.get("gguf_file")})
    return model, pruning_config, masks, hub_kwargs(hf_kwargs)


def model_device(model: nn.Module) -> torch.device | None:
    """The device of the model's first real parameter (None for a parameterless or meta model)."""
    for parameter in model.parameters():
        if parameter.device.type != "meta":
            return parameter.device
    return None


def build_granularity(model: nn.Module, config: PruningConfig) -> Granularity:
    """The granularity `config` names, hooked onto nothing yet; refused when it cannot take the relaxation or the
    ablation, or when every one of its mask kinds is disabled."""
    cls = get_granularity(config.granularity)
    if cls.relaxations is not None and config.relaxation not in cls.relaxations:
        raise PruningError(f"The {config.granularity!r} granularity does not support the {config.relaxation!r} "
                           f"relaxation; choose one of {list(cls.relaxations)}.")
    check_ablation(cls, config.ablation)
    granularity = cls(model, config)
    if not any(granularity.enabled(kind) for kind in granularity.kinds().values()):
        raise PruningError(f"Nothing to prune: every mask kind of the {config.granularity!r} granularity is "
                           "disabled; enable at least one in its settings (e.g. PruningConfig(granularity=UnitSettings("
                           "prune_heads=True))).")
    return granularity


def check_ablation(granularity: Any, mode: str) -> None:
    """Refuse an ablation mode the granularity (class or instance) cannot apply."""
    if mode not in granularity.ablations:
        raise PruningError(f"The {granularity.name!r} granularity cannot apply {mode!r} ablation; it supports "
                           f"{list(granularity.ablations)}.")
