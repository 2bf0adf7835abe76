"""Activation (gradient) checkpointing that replays each forward pass's masks during recomputation.

A mixin of `PrunableModel`: torch's non-reentrant checkpointing recomputes a layer in backward, and the masks drawn
for that forward pass (not the latest one's) must be in effect then, even when several forwards run before one
backward. It reads the model's `_current` masks and `_masks_enabled` switch and nothing else.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

from .errors import PruningError

__all__ = ["MaskReplayCheckpointing"]


class MaskReplayCheckpointing:
    """`activation_checkpointing_enable` (and the 4.x name `gradient_checkpointing_enable`) for a masked model."""

    def activation_checkpointing_enable(self, activation_checkpointing_kwargs: dict[str, Any] | None = None,
                                        **options: Any) -> None:
        """Enable the wrapped model's activation (gradient) checkpointing so that recomputation in backward reuses
        the masks of the forward pass being recomputed, even when several forwards run before one backward.
        `Trainer(args=...(activation_checkpointing=True))` calls this."""
        kwargs = {"use_reentrant": False, **(activation_checkpointing_kwargs or {})}
        if kwargs["use_reentrant"]:
            raise PruningError("PrunableModel needs non-reentrant gradient checkpointing (use_reentrant=False) to "
                               "replay each forward pass's masks during recomputation.")
        kwargs["context_fn"] = self._checkpoint_contexts
        enable = getattr(self.model, "activation_checkpointing_enable", None)
        if enable is not None:
            enable(activation_checkpointing_kwargs=kwargs, **options)
        else:   # a model (e.g. a PEFT wrapper) that only has the older name
            self.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs, **options)

    def gradient_checkpointing_enable(self, gradient_checkpointing_kwargs: dict[str, Any] | None = None,
                                      **options: Any) -> None:
        """The transformers 4.x name of `activation_checkpointing_enable`."""
        self.activation_checkpointing_enable(gradient_checkpointing_kwargs, **options)

    def _checkpoint_contexts(self):
        """(forward context, recompute context) for torch.utils.checkpoint: the recompute sees this pass's masks."""
        captured, enabled = dict(self._current), self._masks_enabled

        @contextlib.contextmanager
        def replay() -> Iterator[None]:
            saved = (self._current, self._masks_enabled)
            self._current, self._masks_enabled = captured, enabled
            try:
                yield
            finally:
                self._current, self._masks_enabled = saved

        return contextlib.nullcontext(), replay()
