"""Mean activations of a wrapped model: the sites its granularity names, over the real tokens of the data.

Kept apart from `PrunableModel` so the orchestrator only installs the result; the work (token alignment under PEFT,
the MLP mean after the output dropout, batching) is here.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
from typing import Any

import torch

from ..architectures.resolve import transformers_model
from ..batching import iterate_batches, model_input_names, progress
from ..errors import PruningError
from . import alignment
from .means import collect_means

logger = logging.getLogger(__name__)

__all__ = ["compute_model_means"]


def compute_model_means(prunable: Any, data: Any, *, batch_size: int = 32, max_batches: int | None = None,
                        show_progress: bool = True, collate_fn=None, device: torch.device | str | None = None,
                        virtual_tokens: str = "exclude", keep_dropout: bool = False
                        ) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Means by kind (shaped as each kind's `means_shape`) and how they were taken; see
    `PrunableModel.compute_means` for the arguments."""
    alignment.check_virtual_tokens_mode(virtual_tokens)
    # Decoder-side activations align with the decoder's tokens only when there is an encoder side: a decoder on
    # its own (BartForCausalLM) aligns with the batch's attention_mask like any single stack.
    two_sided = {kind.stack for kind in prunable.kinds.values()} >= {"encoder", "decoder"}
    # With keep_dropout the granularity moves its MLP means after the MLP's own output dropout (the paper's code).
    granularity_sites = prunable.granularity.mean_sites(keep_dropout=True) if keep_dropout \
        else prunable.granularity.mean_sites()
    sites = {kind: [dataclasses.replace(site, stack=prunable.kinds[kind].stack if two_sided else "")
                    for site in layer_sites]
             for kind, layer_sites in granularity_sites.items()}
    if not sites:
        raise PruningError(f"The {prunable.pruning_config.granularity!r} granularity has no mean ablation; use "
                           "PruningConfig(ablation='zero').")
    device = torch.device(device) if device is not None else next(prunable.model.parameters()).device
    pad_token_id = getattr(prunable.config, "pad_token_id", None) or 0
    batches, total = iterate_batches(data, batch_size, pad_token_id, collate_fn)
    if max_batches is not None:
        batches, total = itertools.islice(batches, max_batches), min(total or max_batches, max_batches)
    was_training = prunable.training
    prunable.eval()
    if keep_dropout:
        prunable.model.train()   # dropout active, as the student sees it; masks are disabled below
    try:
        hf_model = transformers_model(prunable.model)
        aligner = alignment.TokenAligner(alignment.virtual_tokens_of(prunable.model), virtual_tokens,
                                         pad_token_id)
        # The attention_mask the model itself receives (PEFT prompt tuning lengthens it) is read at the outermost
        # module the forward enters below the PEFT wrapper: the Transformers model, or its body or a stack where
        # the forward skips the outer model (PEFT prefix tuning of an encoder, OPT's causal LM).
        inner = {id(module) for module in hf_model.modules()}
        receivers = [module for module in prunable.entry_modules() if id(module) in inner]
        with prunable.masks_disabled():
            means, info = collect_means(prunable.model, progress(batches, total, show_progress, "computing means"),
                                        sites, device, model_input_names(hf_model), aligner, receivers)
    finally:
        prunable.train(was_training)
    shaped = {kind: torch.stack(values).view(prunable.kinds[kind].means_shape) for kind, values in means.items()}
    info["keep_dropout"] = bool(keep_dropout)
    if aligner.virtual is not None:
        info["virtual_tokens"] = {"method": aligner.virtual.method, "count": aligner.virtual.count,
                                  "counted": virtual_tokens == "include" and aligner.virtual.in_activations}
    return shaped, info
