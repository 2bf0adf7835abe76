"""Continuous sparsification's beta schedule as a `TrainerCallback` (Lepori: x beta_max^(1/E) at every epoch end;
per step would reach beta_max within the first epoch)."""

from __future__ import annotations

import logging
from typing import Any

from transformers import TrainerCallback

from .beta import beta_after_epochs

logger = logging.getLogger(__name__)

__all__ = ["BetaSchedule"]


class BetaSchedule(TrainerCallback):
    """Continuous sparsification's beta: 1 at the start, x beta_max^(1/E) at the end of every epoch (Lepori)."""

    def __init__(self, prunable: Any) -> None:
        self.prunable = prunable

    def _set(self, state: Any, args: Any) -> None:
        config = self.prunable.pruning_config
        epochs = state.num_train_epochs or int(round(args.num_train_epochs)) or 1
        beta = beta_after_epochs(int(round(state.epoch or 0)), epochs, config.relaxation_settings.cs_beta_max)
        self.prunable.update_relaxation(cs_beta=beta)

    def on_train_begin(self, args, state, control, **kwargs):
        self._set(state, args)

    def on_epoch_end(self, args, state, control, **kwargs):
        self._set(state, args)
        logger.info("continuous sparsification: beta = %.4g after epoch %s", self.prunable.relaxation.beta,
                    state.epoch)
