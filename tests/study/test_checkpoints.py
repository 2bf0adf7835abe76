"""Fine-tuning checkpoints of the study: only the newest keeps the resume-only state (optimizer, scheduler, RNG), every
one keeps its safetensors weights, and a run still resumes from the newest."""

from __future__ import annotations

import json

import torch
import transformers
from tiny_models import make_batch, tiny_model

from hf_heuristic_core.study.checkpoints import (
    KeepResumeStateInNewestCheckpoint,
    folder_bytes,
)


class _Batches(torch.utils.data.Dataset):
    def __init__(self):
        batch = make_batch("bert")
        self.rows = [{"input_ids": batch["input_ids"][i % len(batch["input_ids"])], "labels": i % 2}
                     for i in range(16)]

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, index):
        return self.rows[index]


def _trainer(folder, max_steps):
    torch.manual_seed(0)
    model = tiny_model("bert")
    args = transformers.TrainingArguments(output_dir=str(folder), max_steps=max_steps, per_device_train_batch_size=4,
                                          save_strategy="steps", save_steps=2, report_to="none", use_cpu=True,
                                          disable_tqdm=True, logging_strategy="no")
    return transformers.Trainer(model=model, args=args, train_dataset=_Batches(),
                                callbacks=[KeepResumeStateInNewestCheckpoint()])


def test_only_the_newest_checkpoint_keeps_resume_state_and_it_still_resumes(tmp_path):
    _trainer(tmp_path, max_steps=6).train()
    folders = {p.name: {f.name for f in p.iterdir()} for p in tmp_path.glob("checkpoint-*")}
    assert set(folders) == {"checkpoint-2", "checkpoint-4", "checkpoint-6"}
    for name, files in folders.items():
        assert "model.safetensors" in files and "trainer_state.json" in files
        assert ("optimizer.pt" in files) == (name == "checkpoint-6"), (name, sorted(files))
        assert ("scheduler.pt" in files) == (name == "checkpoint-6")
    assert folder_bytes(tmp_path / "checkpoint-2") < folder_bytes(tmp_path / "checkpoint-6") / 2

    _trainer(tmp_path, max_steps=8).train(resume_from_checkpoint=str(tmp_path / "checkpoint-6"))
    state = json.loads((tmp_path / "checkpoint-8" / "trainer_state.json").read_text())
    assert state["global_step"] == 8
    assert "optimizer.pt" not in {f.name for f in (tmp_path / "checkpoint-6").iterdir()}
