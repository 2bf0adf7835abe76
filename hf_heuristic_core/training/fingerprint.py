"""A pruning run's settings fingerprint, so that a resume continues this run and never another one.

`PruningTrainer.train` writes the fingerprint into the config every checkpoint saves (`extra["run_fingerprint"]`):
the settings that decide the masks (seed, target, recipe and optimizer settings, schedule length), the model (base
model, mask settings) and the data (row count and a hash of a sample of its token ids). The mean activations are
left out: they follow from the model and the data, and recomputed on a GPU they need not be bit-identical, which
would refuse a resume for nothing. Resuming compares it with the checkpoint's: `resume_from_checkpoint=True`
(`--resume_from_checkpoint last`) takes the newest checkpoint *of this run*, and an explicit checkpoint of another
run is refused, naming the settings that differ. Before this, `last` took whatever checkpoint was newest in the
folder, e.g. an older run's with another seed and target, and finished that run under the new run's name.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

from ..errors import PruningError
from ..run_folder import settings_differences

__all__ = ["FINGERPRINT_KEY", "base_model_path", "checkpoint_fingerprint", "checkpoint_of_this_run", "data_fingerprint",
           "fingerprint_differences", "run_fingerprint"]

FINGERPRINT_KEY = "run_fingerprint"
LAST = ("last", "true", "True")
# PruningArguments / TrainingArguments fields that change the masks a run learns.
SETTING_FIELDS = ("seed", "data_seed", "target_sparsity", "start_sparsity", "sparsity_warmup_steps",
                  "sparsity_schedule", "recipe", "mask_learning_rate", "reg_learning_rate", "sparsity_penalty",
                  "kl_temperature", "keep_dropout", "final_binarization", "final_threshold", "objective",
                  "sparsity_control", "penalty_weight", "warmup_steps", "max_steps", "num_train_epochs",
                  "per_device_train_batch_size", "gradient_accumulation_steps", "lr_scheduler_type",
                  "max_grad_norm", "adam_beta1", "adam_beta2", "adam_epsilon")
# PruningConfig fields that are facts about the model (compared through `model`) or bookkeeping, not settings.
NOT_SETTINGS = ("extra", "mask_shapes", "num_layers", "head_dim", "hidden_size", "model_type",
                "base_model_name_or_path", "base_model_revision", "base_model_class", "base_model_gguf_file")
SAMPLE_ROWS = 256


def base_model_path(name: str | None) -> str | None:
    """A local base-model folder as its absolute path (a run moved elsewhere still matches); a Hub id unchanged."""
    if name and not os.path.isabs(os.path.expanduser(name)) and Path(name).expanduser().is_dir():
        return str(Path(name).expanduser().resolve())
    return name


def data_fingerprint(dataset: Any) -> dict[str, Any]:
    """Row count and a hash of the token ids of up to `SAMPLE_ROWS` rows spread over the data (cheap, deterministic)."""
    if dataset is None or not hasattr(dataset, "__len__"):
        return {"rows": None}
    rows = len(dataset)
    columns = getattr(dataset, "column_names", None)
    if not rows or not isinstance(columns, list) or "input_ids" not in columns:
        return {"rows": rows}
    picks = sorted({round(i * (rows - 1) / max(SAMPLE_ROWS - 1, 1)) for i in range(min(rows, SAMPLE_ROWS))})
    ids = dataset.select(picks)["input_ids"]
    digest = hashlib.sha256(json.dumps([list(map(int, row)) for row in ids]).encode())
    return {"rows": rows, "token_ids_sha256": digest.hexdigest()[:16]}


def run_fingerprint(args: Any, prunable: Any, dataset: Any) -> dict[str, Any]:
    """The settings, model and data that decide a pruning run's masks (see the module docstring)."""
    config = prunable.pruning_config
    mask_settings = {k: v for k, v in config.to_dict().items() if k not in NOT_SETTINGS}
    return {
        "settings": {name: getattr(args, name, None) for name in SETTING_FIELDS},
        "model": {"base_model": base_model_path(config.base_model_name_or_path), "revision": config.base_model_revision,
                  "class": config.base_model_class, "gguf_file": config.base_model_gguf_file,
                  "model_type": config.model_type, "masks": mask_settings},
        "data": data_fingerprint(dataset),
    }


def fingerprint_differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """`key: old -> new` for every fingerprint entry that differs (entries one side lacks are not compared)."""
    return settings_differences(old, new)


def checkpoint_fingerprint(checkpoint: str | os.PathLike) -> dict[str, Any] | None:
    """The fingerprint a checkpoint recorded (None when it recorded none)."""
    try:
        config = json.loads((Path(checkpoint) / "pruning_config.json").read_text())
    except (OSError, ValueError):
        return None
    return (config.get("extra") or {}).get(FINGERPRINT_KEY)


def _step(folder: Path) -> int:
    match = re.fullmatch(r"checkpoint-(\d+)", folder.name)
    return int(match.group(1)) if match else -1


def _unfinished(checkpoint: Path) -> str | None:
    """Why `checkpoint` is not a whole checkpoint, or None. The Trainer writes trainer_state.json last and not
    atomically, so a run killed while saving leaves it missing or cut short."""
    try:
        json.loads((checkpoint / "trainer_state.json").read_text())
    except FileNotFoundError:
        return "it has no trainer_state.json (not a finished Trainer checkpoint)"
    except (OSError, ValueError):
        return "its trainer_state.json is cut short (the run was stopped while saving this checkpoint)"
    return None


def _check(checkpoint: Path, fingerprint: dict[str, Any]) -> list[str] | None:
    """None when `checkpoint` is whole and belongs to this run, else the reasons it cannot be resumed."""
    unfinished = _unfinished(checkpoint)
    if unfinished:
        return [unfinished]
    recorded = checkpoint_fingerprint(checkpoint)
    if recorded is None:
        return ["it records no run fingerprint (written by an older release or not by PruningTrainer)"]
    differences = fingerprint_differences(recorded, fingerprint)
    return differences or None


def checkpoint_of_this_run(output_dir: str | os.PathLike, resume: Any, fingerprint: dict[str, Any]) -> str:
    """The checkpoint to resume: for `True` / "last", the newest `checkpoint-*` under `output_dir` that this run
    wrote; for a path, that checkpoint if this run wrote it. Anything else raises `PruningError` naming the
    differences and the fix."""
    fresh = "run without resume_from_checkpoint (--resume_from_checkpoint) to start this run from step 0"
    if resume is True or str(resume) in LAST:
        shown = "'last'"
        folders = sorted((p for p in Path(output_dir).glob("checkpoint-*") if p.is_dir() and _step(p) >= 0),
                         key=_step, reverse=True)
        if not folders:
            raise PruningError(f"resume_from_checkpoint={shown}: no checkpoint-* folder under {output_dir}; {fresh}, "
                               "or pass a checkpoint folder.")
        reasons = {}
        for folder in folders:
            reasons[folder] = _check(folder, fingerprint)
            if reasons[folder] is None:
                return str(folder)
        newest = folders[0]
        raise PruningError(f"resume_from_checkpoint={resume!r}: none of the {len(folders)} checkpoints under "
                           f"{output_dir} is a whole checkpoint of this run; the newest, {newest.name}: "
                           f"{'; '.join(reasons[newest])}. Resume with the settings that run used, or {fresh}.")
    checkpoint = Path(str(resume))
    if not (checkpoint / "trainer_state.json").is_file():
        raise PruningError(f"resume_from_checkpoint={resume}: not a finished Trainer checkpoint (no "
                           "trainer_state.json); pass a checkpoint-* folder written with save_strategy='steps', or "
                           "'last'.")
    unfinished = _unfinished(checkpoint)
    if unfinished:
        raise PruningError(f"resume_from_checkpoint={resume} is unfinished: {unfinished}. Resume from the checkpoint "
                           "before it, or pass 'last' (it skips unfinished checkpoints).")
    reasons = _check(checkpoint, fingerprint)
    if reasons:
        raise PruningError(f"resume_from_checkpoint={resume} is a checkpoint of another run: {'; '.join(reasons)}. "
                           f"Resume with the settings that run used, or {fresh}.")
    return str(checkpoint)
