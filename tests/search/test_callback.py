"""`EffectiveSizeCallback` inside a real `Trainer.train()` on a tiny random BERT: results per save in the JSON and the
logs, a fine-tuning run that ends bit-identical to one without the callback, every-N-steps and deferred modes."""

from __future__ import annotations

import json

import pytest
import torch
import transformers
from transformers import Trainer, TrainerCallback, TrainingArguments

from hf_heuristic_core import EffectiveSizeError
from hf_heuristic_core.search.callback import EffectiveSizeCallback, preserved_training_state
from hf_heuristic_core.batching import PadCollator
from hf_heuristic_core.search import ClimbSchedule
from tiny_models import one_torch_thread, second_token_labels as token_data, tiny_bert_classifier  # noqa: F401

FAST_CLIMB = ClimbSchedule(ramp_steps=1, settle_steps=0, max_wait_steps=1)
SEARCH = {"strategy": "climb", "sparsities": [0.2, 0.5], "climb": FAST_CLIMB, "pruning_overrides": {"per_device_train_batch_size": 8},
          "means_examples": 16}


def tiny_bert(seed: int = 0):
    return tiny_bert_classifier(seed, dropout=0.1)   # dropout, so a disturbed RNG would change the run


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def data():
    return {"train": token_data(24, 0), "a": token_data(16, 1), "b": token_data(16, 2)}


class Recorder(TrainerCallback):
    def __init__(self):
        self.logs: list[dict] = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        self.logs.append(dict(logs or {}))


def fine_tune(tmp_path, data, callbacks=(), bind=False, max_steps=6, save_strategy="steps"):
    """6 steps at batch 8 over 24 examples: two epochs, so the second epoch's shuffle draws from the global RNG
    after the first save; dropout 0.1 draws from it every step."""
    args = TrainingArguments(output_dir=str(tmp_path), max_steps=max_steps, per_device_train_batch_size=8,
                             learning_rate=1e-3, save_strategy=save_strategy, save_steps=3, logging_steps=2,
                             report_to="none", use_cpu=True, disable_tqdm=True, seed=0, save_only_model=True)
    recorder = Recorder()
    trainer = Trainer(model=tiny_bert(), args=args, train_dataset=data["train"], data_collator=PadCollator(0),
                      callbacks=[recorder, *callbacks])
    if bind:
        for callback in callbacks:
            callback.bind(trainer)
    trainer.train()
    return trainer, recorder


def test_callback_in_a_real_training_run_leaves_it_bit_identical(tmp_path, data):
    plain, _ = fine_tune(tmp_path / "plain", data)
    callback = EffectiveSizeCallback({"a": data["a"], "b": data["b"]}, data["train"], {"A": ["a"], "AB": ["a", "b"]},
                                     **SEARCH)
    tracked, recorder = fine_tune(tmp_path / "tracked", data, [callback])

    for (name, expected), actual in zip(plain.model.state_dict().items(), tracked.model.state_dict().values()):
        assert torch.equal(expected, actual), f"{name} differs: the callback disturbed fine-tuning"
    losses = [h["loss"] for h in plain.state.log_history if "loss" in h]
    assert losses == [h["loss"] for h in tracked.state.log_history if "loss" in h]

    saved = json.loads((tmp_path / "tracked" / "effective_size.json").read_text())
    assert saved["settings"]["groups"] == {"A": ["a"], "AB": ["a", "b"]}
    assert saved["settings"]["sparsities"] == [0.2, 0.5] and saved["settings"]["strategy"] == "climb"
    entries = saved["checkpoints"]
    assert [(e["step"], e["checkpoint"], e["status"]) for e in entries] == [
        (3, "checkpoint-3", "done"), (6, "checkpoint-6", "done")]
    for entry in entries:
        assert set(entry["effective_size"]) == {"A", "AB"}
        assert entry["cost_steps"] > 0 and entry["model"]["num_layers"] == 2
    logged = [h for h in tracked.state.log_history if "effective_size/A" in h]
    assert [h["step"] for h in logged] == [3, 6]
    assert logged[0]["effective_size/A"] == entries[0]["effective_size"]["A"]
    assert "full_accuracy/AB" in logged[0] and "effective_size/pruning_steps" in logged[0]
    assert (tmp_path / "tracked" / "effective_size.png").is_file()
    assert (tmp_path / "tracked" / "effective_size.pdf").is_file()
    # Unbound: the metrics ride along the next on_log call (to callbacks after this one).
    assert any("effective_size/A" in logs for logs in callback_logs(tracked, callback))


def callback_logs(trainer, callback):
    after = Recorder()
    trainer.add_callback(after)
    callback._pending_logs = {"effective_size/A": 0.5}
    trainer.log({"x": 1.0})
    return after.logs


def test_bound_callback_logs_through_the_trainer_to_every_logger(tmp_path, data):
    callback = EffectiveSizeCallback({"a": data["a"]}, data["train"], every_n_steps=2, figure=False, **SEARCH)
    trainer, recorder = fine_tune(tmp_path, data, [callback], bind=True, max_steps=4, save_strategy="no")
    seen = [logs for logs in recorder.logs if "effective_size/all" in logs]
    assert len(seen) == 2   # the recorder runs before the callback, so it saw them through trainer.log
    saved = json.loads((tmp_path / "effective_size.json").read_text())
    assert [(e["step"], e["checkpoint"]) for e in saved["checkpoints"]] == [(2, None), (4, None)]
    assert not (tmp_path / "effective_size.png").exists()


def test_deferred_mode_only_records_checkpoints(tmp_path, data):
    callback = EffectiveSizeCallback(deferred=True)
    fine_tune(tmp_path, data, [callback])
    saved = json.loads((tmp_path / "effective_size.json").read_text())
    assert saved["settings"] is None
    assert [(e["step"], e["checkpoint"], e["status"]) for e in saved["checkpoints"]] == [
        (3, "checkpoint-3", "pending"), (6, "checkpoint-6", "pending")]


def test_results_file_with_other_settings_is_refused(tmp_path, data):
    first = EffectiveSizeCallback({"a": data["a"]}, data["train"], deferred=False, every_n_steps=2, figure=False,
                                  **SEARCH)
    fine_tune(tmp_path, data, [first], max_steps=2, save_strategy="no")
    other = EffectiveSizeCallback({"a": data["a"]}, data["train"], every_n_steps=2,
                                  **{**SEARCH, "sparsities": [0.3]})
    with pytest.raises(EffectiveSizeError, match="other settings.*sparsities"):
        fine_tune(tmp_path, data, [other], max_steps=2, save_strategy="no")


def test_bad_callback_arguments(data):
    with pytest.raises(EffectiveSizeError, match="every_n_steps"):
        EffectiveSizeCallback({"a": data["a"]}, data["train"], every_n_steps=0)
    with pytest.raises(EffectiveSizeError, match="cannot be combined"):
        EffectiveSizeCallback(deferred=True, every_n_steps=5)
    with pytest.raises(EffectiveSizeError, match="needs eval_sets"):
        EffectiveSizeCallback(train_dataset=data["train"])
    with pytest.raises(EffectiveSizeError, match="outside"):
        EffectiveSizeCallback({"a": data["a"]}, data["train"], sparsities=[0.5, 1.0])
    with pytest.raises(EffectiveSizeError, match="not evaluation sets"):
        EffectiveSizeCallback({"a": data["a"]}, data["train"], {"ID": ["mnli"]})


def test_preserved_training_state_restores_rngs_and_modes():
    model = tiny_bert().train()
    model.classifier.eval()
    modes = [m.training for m in model.modules()]
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    with preserved_training_state(model):
        transformers.set_seed(7)
        torch.rand(100)
        model.eval()
    assert torch.equal(torch.rand(3), expected)
    assert [m.training for m in model.modules()] == modes


def test_callback_in_a_bf16_run_prunes_in_the_runs_precision(tmp_path, data):
    callback = EffectiveSizeCallback({"a": data["a"]}, data["train"], every_n_steps=2, figure=False, **SEARCH)
    args = TrainingArguments(output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=8, bf16=True,
                             use_cpu=True, report_to="none", save_strategy="no", disable_tqdm=True)
    Trainer(model=tiny_bert(), args=args, train_dataset=data["train"], data_collator=PadCollator(0),
            callbacks=[callback]).train()
    assert callback._pruning(callback.search[2], args).overrides["bf16"] is True
    saved = json.loads((tmp_path / "effective_size.json").read_text())
    assert [e["step"] for e in saved["checkpoints"]] == [2]
