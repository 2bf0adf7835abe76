"""Judging a subnetwork: accuracy, agreement and KL per evaluation set, and the effective-size definition."""

from .effective_size import EffectiveSizeError, effective_size, effective_size_per_seed, effective_sizes_by_scan
from .subnetwork import LABEL_KEYS, applied_masks, evaluate_subnetwork, full_model_accuracy

__all__ = ["EffectiveSizeError", "LABEL_KEYS", "applied_masks", "effective_size", "effective_size_per_seed",
           "effective_sizes_by_scan", "evaluate_subnetwork", "full_model_accuracy"]
