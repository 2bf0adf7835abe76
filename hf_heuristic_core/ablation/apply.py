"""The two mask operations the hooks apply, as pure functions.

Both are written as `x - (1 - z) * (x - ref)`: with `z = 1` the product is an exact zero, so a kept unit passes
through bit-identically (`ref + z * (x - ref)` would round). `ref` is the mean activation (mean ablation), zero
(zero ablation) or another example's activation (resample ablation).
"""

from __future__ import annotations

import torch

from ..errors import PruningError


def mask_heads(x: torch.Tensor, z: torch.Tensor, reference: torch.Tensor | None, num_heads: int) -> torch.Tensor:
    """Mask the per-head slices of `x` (`[..., num_heads * head_dim]`, the attention output projection's input).

    `z` is `[num_heads]`; `reference` is `[num_heads, head_dim]`, `x`'s own shape (resample), or None for zeros.
    """
    heads = x.unflatten(-1, (num_heads, -1))
    keep = z.to(device=x.device, dtype=x.dtype).unsqueeze(-1)
    if reference is None:
        masked = heads * keep
    else:
        reference = reference.to(device=x.device, dtype=x.dtype)
        if reference.shape == x.shape:
            reference = reference.unflatten(-1, (num_heads, -1))
        masked = heads - (1 - keep) * (heads - reference)
    return masked.flatten(-2)


def mask_block(y: torch.Tensor, z: torch.Tensor, reference: torch.Tensor | None) -> torch.Tensor:
    """Mask a whole block's output `y` (`[..., hidden]`) with the scalar `z`."""
    keep = z.to(device=y.device, dtype=y.dtype)
    if reference is None:
        return y * keep
    return y - (1 - keep) * (y - reference.to(device=y.device, dtype=y.dtype))


def resample_reference(x: torch.Tensor, batch_size: int | None = None) -> torch.Tensor:
    """Activations of another example of the batch: example i takes example i - 1's.

    Batch-first activations are rolled along dim 0; activations flattened to `[batch * seq, hidden]` (OPT's MLP)
    are unflattened with `batch_size` first, so whole examples move, not tokens.
    """
    if batch_size is None and x.dim() < 3:
        raise PruningError(f"Resample ablation cannot tell examples apart in activations of shape {tuple(x.shape)}: "
                           "the forward's batch size is unknown (a module called outside any forward of the model "
                           "with such activations). Call the model itself, or use ablation='mean' or 'zero'.")
    batch = batch_size if batch_size is not None else x.shape[0]
    if x.dim() < 2 or batch < 2:
        raise PruningError(f"Resample ablation replaces a unit's activation with another example's, so it needs a "
                           f"batch of at least 2 examples; got activations of shape {tuple(x.shape)}. Use a larger "
                           "batch, or ablation='mean'.")
    if x.shape[0] == batch:
        return x.roll(1, dims=0)
    if x.shape[0] % batch == 0:
        return x.reshape(batch, -1, *x.shape[1:]).roll(1, dims=0).reshape(x.shape)
    raise PruningError(f"Resample ablation cannot tell examples apart in activations of shape {tuple(x.shape)} "
                       f"for a batch of {batch}; use ablation='mean' or 'zero'.")
