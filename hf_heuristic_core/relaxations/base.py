"""What a relaxation provides: the distribution that turns learned logits into mask values.

A relaxation never sees a model. It initializes logits (always fp32: small updates to logits near 10 vanish in
bf16), draws training-time masks from them, gives their noise-free value and their expected keep probability (the
expected L0 the sparsity penalty uses), and owns its paper's own rule for binary masks. Exact top-k binarization at
a requested sparsity (`relaxations.binarize`) works for every relaxation on its logits.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

import torch

from .settings import RelaxationSettings

__all__ = ["Relaxation"]


class Relaxation(ABC):
    """Base class of the mask distributions (see the module docstring)."""

    name: ClassVar[str] = ""
    # Logit that pins a forced unit in (its negative pins it out); the Heuristic Core's code uses +/-10.
    pinned_logit: ClassVar[float] = 10.0
    # Its torch-free settings (composed into PruningConfig); the paper's defaults that depend on the relaxation live
    # there, so a config resolves them without importing this module.
    settings_class: ClassVar[type[RelaxationSettings]] = RelaxationSettings
    # The binarization rule its paper uses when PruningConfig(binarization=None): "topk" or "threshold".
    paper_binarization: ClassVar[str] = "topk"
    # Whether the fixed penalty (sparsity_control="penalty") is divided by the batch size (Csordás' code does).
    penalty_per_example: ClassVar[bool] = False

    @classmethod
    @abstractmethod
    def from_config(cls, config: Any) -> "Relaxation":
        """The relaxation with the constants of a `PruningConfig`."""

    @abstractmethod
    def init_logits(self, shape: tuple[int, ...], generator: torch.Generator | None = None) -> torch.Tensor:
        """Fresh fp32 logits of `shape` (reproducible from `generator`)."""

    @abstractmethod
    def sample(self, logits: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """A training-time mask, differentiable with respect to `logits`; noise is drawn on their device."""

    @abstractmethod
    def deterministic(self, logits: torch.Tensor) -> torch.Tensor:
        """The noise-free (soft) mask value."""

    @abstractmethod
    def prob_keep(self, logits: torch.Tensor) -> torch.Tensor:
        """The probability that each entry is kept (non-zero): its expected L0. Differentiable."""

    @abstractmethod
    def threshold_masks(self, logits: torch.Tensor, threshold: float) -> torch.Tensor:
        """The relaxation's own binarization rule (its paper's), for one mask tensor."""

    def training_callbacks(self, prunable: Any) -> list[Any]:
        """`TrainerCallback`s a `PruningTrainer` adds for this relaxation (e.g. a temperature schedule)."""
        return []

    def penalty(self, logits: torch.Tensor) -> torch.Tensor:
        """The paper's fixed sparsity penalty for one mask tensor, before its weight (default: the expected L0)."""
        return self.prob_keep(logits).sum()
