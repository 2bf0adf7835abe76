"""Activation (gradient) checkpointing that replays each forward pass's masks during recomputation.

A mixin of `PrunableModel`: torch's non-reentrant checkpointing recomputes a layer in backward, and the masks drawn
for that forward pass (not the latest one's) must be in effect then, even when several forwards run before one
backward. Recomputation never draws masks: it replays the pass being recomputed (`mask_passes`). It reads the model's
`_pass` and `_masks_enabled` switch and nothing else. Checkpointing switched on in the wrapped model directly (after
wrapping) is given the replay at the next training pass, so no recomputation ever runs without it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
from typing import Any, Iterator

from .errors import PruningError

logger = logging.getLogger(__name__)

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
        if self.training and not self.train_dropout:   # after `.train()` of a dropout-free wrapper: checkpointed
            self._checkpointed_layers_train()             # layers in eval mode would never recompute (silent no-op)

    def gradient_checkpointing_enable(self, gradient_checkpointing_kwargs: dict[str, Any] | None = None,
                                      **options: Any) -> None:
        """The transformers 4.x name of `activation_checkpointing_enable`."""
        self.activation_checkpointing_enable(gradient_checkpointing_kwargs, **options)

    def _checkpoint_contexts(self):
        """(forward context, recompute context) for torch.utils.checkpoint: the recompute sees this pass's masks."""
        # A copy (a later forward of the same shared_masks() block may update the pass's batch size) that no
        # entry module's exit closes during the recomputation.
        captured = dataclasses.replace(self._pass, owner="replay") if self._pass is not None else None
        enabled = self._masks_enabled

        @contextlib.contextmanager
        def replay() -> Iterator[None]:
            saved = (self._pass, self._masks_enabled, self._entered)
            self._pass, self._masks_enabled, self._entered = captured, enabled, []
            try:
                yield
            finally:
                self._pass, self._masks_enabled, self._entered = saved

        return contextlib.nullcontext(), replay()

    def _ensure_mask_replay(self, modules: list[Any]) -> None:
        """Give every checkpointing module of the wrapped model this model's mask replay (a no-op when it has it).

        Checkpointing enabled on the wrapped model itself (`model.gradient_checkpointing_enable()` after wrapping)
        would recompute layers in backward with no pass open; its function gets the replay added here."""
        for module in modules:
            if getattr(module, "gradient_checkpointing", False) is not True:
                continue
            function = getattr(module, "_gradient_checkpointing_func", None)
            keywords = getattr(function, "keywords", None)
            context = (keywords or {}).get("context_fn")
            if getattr(context, "__self__", None) is self:
                continue
            if not isinstance(function, functools.partial) or context is not None \
                    or keywords.get("use_reentrant") is True:
                raise PruningError(
                    f"Gradient checkpointing of {type(module).__name__} was enabled on the wrapped model with a "
                    "checkpoint function that cannot replay each forward pass's masks (reentrant, or with its own "
                    "context_fn). Enable it through the PrunableModel instead: "
                    "prunable.gradient_checkpointing_enable(gradient_checkpointing_kwargs={'use_reentrant': False}).")
            module._gradient_checkpointing_func = functools.partial(
                function.func, *function.args,
                **{**keywords, "use_reentrant": False, "context_fn": self._checkpoint_contexts})
            logger.info("Gradient checkpointing of %s was enabled on the wrapped model directly; added the mask "
                        "replay so recomputation sees each pass's masks.", type(module).__name__)
