"""Sharded mask learning: `PruningTrainer` under the Trainer's FSDP2 integration (accelerate's `fully_shard`).

What is sharded and what is not, and why:

* The **base model** is sharded by FSDP2 exactly as accelerate wraps any model (one unit per transformer layer, the
  input embeddings, the tail, the root). Its weights are frozen, so every FSDP unit is all-frozen; the flat-parameter
  FSDP1 constraint ("each wrapped unit all-frozen or all-trainable", `Must flatten tensors with uniform
  requires_grad`) can never trip, and FSDP2 does not have it at all.
* The **mask state** (logits, forced and fixed masks, means) is kept *whole* on every rank: it is handed to FSDP as
  ignored, so the logits stay plain fp32 tensors that every hook, `get_masks`, the artifact writer and the
  convergence check read as they are. Their gradients are averaged over ranks before clipping
  (`average_replicated_gradients`), which is what DDP does; the Lagrange multipliers need no averaging, since their
  gradient depends only on the (identical) logits and the target.
* The teacher is the same sharded model with masks disabled: no second copy, sharded or not.

Unit masks are a few hundred numbers, so whole logits cost nothing. Weight masks have one fp32 logit per masked
weight: whole logits then cost 16 bytes per masked weight on every rank (logit, gradient, two Adam moments), which
does not shrink with more GPUs. Mask a layer range (`layers_to_transform`) on large models; per-layer sharded logits
need the logits to live in the layer's FSDP unit (see docs/guides/scaling.md).

Refused, with the reason: FSDP1 (`fsdp_config["version"] = 1`: the Trainer then replaces `trainer.model` by the FSDP
wrapper and the flat parameters hide the logits), and FSDP's own activation checkpointing
(`fsdp_config["activation_checkpointing"]`: its wrapper recomputes layers with whatever masks are current at backward
time; `activation_checkpointing=True` replays each forward pass's masks, see `checkpointing.py`).
"""

from __future__ import annotations

import logging
from typing import Any, Iterable

import torch

from ..errors import PruningError

logger = logging.getLogger(__name__)

__all__ = ["ACCELERATE_CPU_FALLBACK", "average_replicated_gradients", "check_fsdp_plugin", "configure_sharding",
           "fsdp_requested", "is_sharded", "keep_mask_state_whole"]

# Where accelerate decides that FSDP only exists on accelerators (a multi-process CPU run gets DDP instead).
ACCELERATE_CPU_FALLBACK = ("accelerate 1.15, accelerate/state.py, AcceleratorState.__init__ (line 986): the FSDP "
                           "plugin is kept only when distributed_type is one of MULTI_GPU / MULTI_NPU / MULTI_XPU / "
                           "...; MULTI_CPU is not in that list, so a CPU run falls back to DDP")


def fsdp_requested(args: Any) -> bool:
    return bool(getattr(args, "fsdp", None)) and getattr(args, "fsdp_plugin_args", None) is not None


def is_sharded(trainer: Any) -> bool:
    """Whether the trainer's model is (or will be) sharded by FSDP."""
    return bool(getattr(trainer, "is_fsdp_enabled", False))


def configure_sharding(trainer: Any) -> None:
    """Check an FSDP request and set the plugin up so that the mask state stays whole (see the module docstring).

    Called at the end of `PruningTrainer.__init__`, before the Trainer prepares the model."""
    args = trainer.args
    if not fsdp_requested(args):
        return
    if not is_sharded(trainer) and args.world_size <= 1:
        logger.info("FSDP was requested, but this is a single process: nothing to shard, the model runs whole.")
        return
    if not is_sharded(trainer):
        logger.warning("FSDP was requested (fsdp=%r) but accelerate did not enable it: this run is %s, so the model "
                       "is replicated on every process, not sharded. The masks learned are the same; only memory "
                       "differs. (Reason: %s.)", args.fsdp, trainer.accelerator.distributed_type,
                       ACCELERATE_CPU_FALLBACK)
        return
    plugin = trainer.accelerator.state.fsdp_plugin
    check_fsdp_plugin(plugin)
    keep_mask_state_whole(plugin, trainer.prunable)
    logger.info("FSDP2: the base model is sharded; the mask state (%d mask logits) stays whole on each of the %d "
                "processes and its gradients are averaged before every optimizer step.",
                sum(p.numel() for _, p in trainer.prunable.mask_logits.items()), args.world_size)


def check_fsdp_plugin(plugin: Any) -> None:
    """Refuse the FSDP settings mask learning cannot run under (see the module docstring)."""
    version = int(getattr(plugin, "fsdp_version", 1))
    if version != 2:
        raise PruningError(f"PruningTrainer supports FSDP2 only, got fsdp_config version {version}. FSDP1 replaces "
                           "trainer.model by its wrapper and hides the mask logits in flat parameters; transformers 5 "
                           "deprecates it. Pass fsdp_config={'version': 2, ...} (the default).")
    if getattr(plugin, "activation_checkpointing", False):
        raise PruningError("fsdp_config['activation_checkpointing'] recomputes layers in backward with whatever masks "
                           "are current then, not the masks of the forward pass being recomputed. Remove it and pass "
                           "activation_checkpointing=True instead: PrunableModel's checkpointing replays each "
                           "pass's masks.")


def keep_mask_state_whole(plugin: Any, prunable: Any) -> None:
    """Add the model's mask state to the plugin's ignored modules: FSDP then neither shards nor reduces it."""
    mask_state = prunable.mask_state
    ignored = plugin.ignored_modules
    if isinstance(ignored, str):
        raise PruningError(f"fsdp_config ignored_modules={ignored!r} (a regex) cannot be combined with the mask "
                           "state PruningTrainer keeps whole; pass modules, or leave it unset.")
    ignored = list(ignored or [])
    if not any(module is mask_state for module in ignored):
        ignored.append(mask_state)
    plugin.ignored_modules = ignored


@torch.no_grad()
def average_replicated_gradients(parameters: Iterable[torch.nn.Parameter], world_size: int) -> None:
    """Average the gradients of parameters kept whole on every rank (one all-reduce for all of them).

    Every rank must call this with the same parameters in the same order. A missing gradient counts as zero (and
    stays missing when it is zero everywhere), so one rank without a gradient cannot hang the others."""
    if world_size <= 1 or not torch.distributed.is_available() or not torch.distributed.is_initialized():
        return
    parameters = list(parameters)
    if not parameters:
        return
    device = parameters[0].device
    flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1).float().to(device)
                      for p in parameters])
    present = torch.tensor([float(p.grad is not None) for p in parameters], device=device)
    flat = torch.cat([flat, present])
    torch.distributed.all_reduce(flat, op=torch.distributed.ReduceOp.SUM)   # gloo has no AVG
    counts, flat = flat[-len(parameters):], flat[:-len(parameters)] / world_size
    offset = 0
    for parameter, count in zip(parameters, counts.tolist()):
        size = parameter.numel()
        if count > 0:
            value = flat[offset:offset + size].view_as(parameter).to(parameter.dtype)
            if parameter.grad is None:
                parameter.grad = value.clone()
            else:
                parameter.grad.copy_(value)
        offset += size
