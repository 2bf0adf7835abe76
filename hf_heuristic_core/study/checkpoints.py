"""Disk of the study's fine-tuning run, `hf_heuristic_core.finetune_checkpoints` under its older path (the module
moved below `finetuning.py`, which uses it and which the study runs; this path keeps working)."""

from __future__ import annotations

from ..finetune_checkpoints import (RESUME_ONLY, KeepResumeStateInNewestCheckpoint, check_disk_for_checkpoints,
                                    checkpoint_disk_need, drop_resume_state, folder_bytes)

__all__ = ["KeepResumeStateInNewestCheckpoint", "RESUME_ONLY", "check_disk_for_checkpoints", "checkpoint_disk_need",
           "drop_resume_state", "folder_bytes"]
