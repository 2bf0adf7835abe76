"""Exception types, so callers can catch pruning problems without string matching."""

from __future__ import annotations


class PruningError(Exception):
    """Base class for every error raised by hf_heuristic_core."""


class UnsupportedArchitectureError(PruningError, ValueError):
    """The model's layers, attention output or MLP output could not be located."""


class MaskShapeError(PruningError, ValueError):
    """A mask does not have the `[num_layers, num_heads]` / `[num_layers]` shape of the model."""


class ArtifactError(PruningError, ValueError):
    """A saved mask artifact is missing, corrupt, partial, or made for another model."""


class MaskPassError(PruningError, RuntimeError):
    """A masked module ran outside any forward pass while masks are sampled, so no pass says which sample it uses."""


class MissingMeansError(PruningError, RuntimeError):
    """Mean ablation was requested but no mean activations were computed."""


class UsageError(PruningError, ValueError):
    """A path, flag or value given by the user cannot work; the message names it and says what to pass instead."""


class EmptyDatasetError(UsageError):
    """A dataset (or the part of it a run would use) has no rows."""


class ExportError(PruningError, ValueError):
    """A subnetwork cannot be exported as a slim model (non-binary masks, resample ablation, wrong folder)."""
