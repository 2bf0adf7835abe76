"""`torch.compile` for a masked model: compile the transformer blocks, draw the masks eagerly.

Why blocks and not the whole model (measured with torch 2.13, `torch._dynamo.explain` on a tiny BERT): compiling the
whole `PrunableModel` breaks the graph where the masks are drawn (hard-concrete noise comes from a `torch.Generator`,
which Dynamo cannot trace) and in the eval-mask binarization (a sort and host copies), and Dynamo then falls back to
eager for the whole transformer body. The blocks themselves, with their mask hooks (unit masks) or parametrizations
(weight masks), compile without a single graph break; the draw runs once per forward pass at the body's entry,
outside every compiled block, as in accelerate's regional compilation.

One thing needs care: each block's hooks hold their layer's index, so Dynamo compiles one graph per block and mode
(teacher without gradients, student with, eval), all for the same code object. Past `torch._dynamo.config.
recompile_limit` (8 by default) the remaining blocks silently run eagerly, which a 12-layer BERT already hits.
`compile_blocks` raises the limit to what the model needs; compile time then grows with the number of blocks.
After the first training step, a pruning step compiles nothing more (tests/training/test_compile.py).
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from ..architectures.resolve import transformers_model
from ..errors import PruningError

logger = logging.getLogger(__name__)

__all__ = ["GRAPHS_PER_BLOCK", "compile_blocks", "transformer_blocks"]

# Teacher forward (masks off, no grad), student forward (masks on, grad), eval forward (masks on, no grad), and
# the recomputation under activation checkpointing; one more of each for a different last batch size.
GRAPHS_PER_BLOCK = 8


def transformer_blocks(model: Any) -> list[tuple[str, torch.nn.Module]]:
    """The repeated blocks of a `PrunableModel`'s wrapped model (or of a plain model): the classes Transformers lists
    in `_no_split_modules` (the unit FSDP and accelerate's regional compilation also use), with their names."""
    root = model.model if hasattr(model, "mask_state") else model
    hf_model = transformers_model(root)
    classes = set(getattr(hf_model, "_no_split_modules", None) or [])
    blocks = [(name, module) for name, module in root.named_modules() if type(module).__name__ in classes]
    if not blocks:
        raise PruningError(f"{type(hf_model).__name__} lists no repeated blocks (_no_split_modules is "
                           f"{sorted(classes) or 'empty'}); compile the model yourself with torch.compile.")
    return blocks


def compile_blocks(prunable: Any, **compile_kwargs: Any) -> list[str]:
    """Compile every transformer block of `prunable` in place (`module.compile(**compile_kwargs)`), raise Dynamo's
    recompile limit to what the per-block graphs need, and return the compiled blocks' names.

    `prunable` keeps working as before (the teacher, the student, eval, checkpointing, saving); call it once before
    training, e.g. `compile_blocks(prunable, mode="max-autotune-no-cudagraphs")`. A plain model works too (the
    benchmarks compile the unmasked model the same way)."""
    blocks = transformer_blocks(prunable)
    needed = GRAPHS_PER_BLOCK * len(blocks)
    config = torch._dynamo.config
    if config.recompile_limit < needed:
        logger.info("torch._dynamo.config.recompile_limit %d -> %d: every block of %d is compiled per mode.",
                    config.recompile_limit, needed, len(blocks))
        config.recompile_limit = needed
    if getattr(config, "accumulated_recompile_limit", needed) < needed:
        config.accumulated_recompile_limit = needed
    for _, module in blocks:
        module.compile(**compile_kwargs)
    return [name for name, _ in blocks]
