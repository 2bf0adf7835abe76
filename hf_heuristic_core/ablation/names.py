"""The ablation modes' names, torch-free: what configs, flags and reports accept (the modes are in `ablation.modes`)."""

from __future__ import annotations

__all__ = ["ABLATION_MODES"]

# zero: a pruned value becomes 0; mean: its mean over real training tokens; resample: another example's value
ABLATION_MODES: tuple[str, ...] = ("mean", "zero", "resample")
