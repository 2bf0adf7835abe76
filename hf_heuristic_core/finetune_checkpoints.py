"""Disk of the study's fine-tuning run: checkpoints keep what effective size needs, and the study reports its size.

Effective size reads only a checkpoint's weights (safetensors). The optimizer, scheduler and RNG state (two thirds
of a MiniLM checkpoint: 174 MB of 261 MB) matter only for resuming training, so only the newest checkpoint keeps
them: an interrupted study still resumes bit for bit, and the older checkpoints shrink to their weights.

A top-level module because `finetuning.py` (below the study, which runs it) needs it; `study.checkpoints` re-exports it.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from transformers import TrainerCallback

# Files of a Trainer checkpoint needed only to resume training from it.
RESUME_ONLY = re.compile(r"^(optimizer\.pt|scheduler\.pt|scaler\.pt|rng_state(_\d+)?\.pth)$")


def _step(folder: Path) -> int:
    match = re.fullmatch(r"checkpoint-(\d+)", folder.name)
    return int(match.group(1)) if match else -1


def drop_resume_state(output_dir: str | os.PathLike) -> int:
    """Delete the resume-only files of every `checkpoint-*` but the newest; returns the bytes freed."""
    folders = sorted((p for p in Path(output_dir).glob("checkpoint-*") if p.is_dir() and _step(p) >= 0), key=_step)
    freed = 0
    for folder in folders[:-1]:
        for path in folder.iterdir():
            if path.is_file() and RESUME_ONLY.match(path.name):
                freed += path.stat().st_size
                path.unlink()
    return freed


class KeepResumeStateInNewestCheckpoint(TrainerCallback):
    """After each save, older checkpoints lose their optimizer / scheduler / RNG state (see the module docstring)."""

    def on_save(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            drop_resume_state(args.output_dir)
        return control


def folder_bytes(folder: str | os.PathLike) -> int:
    """Total size of the files under `folder` (the study prints it so its disk use is no surprise)."""
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file())


def checkpoint_disk_need(parameter_bytes: int, parameters: int, steps: int, every: int) -> dict[str, int]:
    """Bytes the fine-tuning run will write: the weights of every checkpoint and of the final model, plus the newest
    checkpoint's AdamW state (two fp32 moments per parameter)."""
    checkpoints = steps // max(every, 1)
    return {"checkpoints": checkpoints, "weights": parameter_bytes,
            "total": (checkpoints + 1) * parameter_bytes + 8 * parameters}


def check_disk_for_checkpoints(model, steps: int, every: int, folder: str | os.PathLike) -> dict[str, int]:
    """Refuse to start a fine-tuning run whose checkpoints will not fit the disk (it would fail hours in, e.g.
    the paper's 122 BERT-base checkpoints take 53 GB); what is already written counts as available."""
    parameters = sum(p.numel() for p in model.parameters())
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    need = checkpoint_disk_need(weights, parameters, steps, every)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    available = shutil.disk_usage(folder).free + folder_bytes(folder)
    need["available"] = available
    if need["total"] > available:
        raise OSError(f"Fine-tuning writes {need['checkpoints']} checkpoints of {weights / 2**30:.2f} GiB of weights "
                      f"each (finetune_steps {steps} / checkpoint_every {every}) plus the final model and one "
                      f"optimizer state: {need['total'] / 2**30:.1f} GiB, but {folder} has {available / 2**30:.1f} GiB "
                      "free. Free disk, point --output_dir elsewhere, or raise --checkpoint_every.")
    return need
