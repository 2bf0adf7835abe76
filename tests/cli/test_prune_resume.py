"""`hf-heuristic-core prune --resume_from_checkpoint`: a run SIGKILLed mid-training and resumed from its checkpoint
ends with the masks of an uninterrupted run, bit for bit; `--seed` alone decides the masks; bad values fail early.

The uninterrupted run is made in this process (single-threaded, as the fresh processes are with OMP_NUM_THREADS=1);
the killed run and its resumption are fresh processes (the process is what is tested)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tiny_models import one_torch_thread  # noqa: F401  (fixture)

from hf_heuristic_core.cli import main
from hf_heuristic_core.errors import PruningError

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tiny_run_inputs(tiny_bert_nli):
    """A tiny random BERT classifier with MiniLM's tokenizer, and 96 generated NLI pairs as jsonl (the session's
    shared `tiny_bert_nli`)."""
    return tiny_bert_nli / "model", tiny_bert_nli / "train.jsonl"


def _command(model: Path, data: Path, output: Path, *extra: str) -> list[str]:
    return ["prune", "--model", str(model), "--dataset", str(data), "--target_sparsity", "0.5", "--output_dir",
            str(output), "--max_steps", "24", "--per_device_train_batch_size", "8", "--means_examples", "32",
            "--max_length", "32", "--report_to", "none", "--use_cpu", "--disable_tqdm", "true", "--seed", "7",
            "--save_strategy", "steps", "--save_steps", "4", "--logging_strategy", "no", *extra]


def _artifact(folder: Path) -> tuple[dict, dict]:
    """Tensors (as bytes) and metadata of a mask artifact; the safetensors header orders metadata keys freely."""
    from safetensors import safe_open
    with safe_open(str(folder / "masks.safetensors"), "pt") as handle:
        return ({k: handle.get_tensor(k).numpy().tobytes() for k in handle.keys()}, handle.metadata())


def _environment() -> dict:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
            "OMP_NUM_THREADS": "1"}


def _cli(arguments: list[str]) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "hf_heuristic_core.cli", *arguments]
    completed = subprocess.run(command, check=False, cwd=REPO, env=_environment(), capture_output=True, text=True,
                               timeout=600)
    assert completed.returncode == 0, completed.stderr[-3000:]
    return completed


@pytest.mark.slow
def _whole(checkpoint) -> bool:
    try:
        json.loads((checkpoint / "trainer_state.json").read_text())
    except (OSError, ValueError):
        return False
    return True


@pytest.mark.usefixtures("one_torch_thread")
def test_sigkilled_prune_resumes_to_the_uninterrupted_masks(tiny_run_inputs, tmp_path, capsys):
    model, data = tiny_run_inputs
    assert main(_command(model, data, tmp_path / "whole")) == 0, capsys.readouterr().err[-3000:]
    whole = _artifact(tmp_path / "whole")

    killed = tmp_path / "killed"
    process = subprocess.Popen([sys.executable, "-m", "hf_heuristic_core.cli", *_command(model, data, killed)],
                               cwd=REPO, env=_environment(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    checkpoint = killed / "checkpoint-8"
    deadline = time.time() + 300
    # Kill once checkpoint-8 is whole: the Trainer writes trainer_state.json last, not atomically (a kill while it is
    # being written leaves an unfinished checkpoint, which resuming refuses: tests/training/test_unfinished_checkpoints).
    while not _whole(checkpoint) and process.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert process.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    assert not (killed / "masks.safetensors").exists()
    first_checkpoint = (killed / "checkpoint-4" / "trainer_state.json").stat().st_mtime_ns

    # Both the killed run (steps 1-8, from scratch) and its resumption are fresh processes: ending with the masks
    # of the run made in this process also shows that the seed alone decides the run, not the process (a separate
    # fresh-process rerun checked the same and was dropped; tests/training/test_seeds.py checks it for the API).
    _cli(_command(model, data, killed, "--resume_from_checkpoint", str(checkpoint)))
    tensors, metadata = _artifact(killed)
    assert tensors == whole[0] and {k for k in metadata} == {k for k in whole[1]}
    state = json.loads((killed / "checkpoint-24" / "trainer_state.json").read_text())
    assert state["global_step"] == 24
    # Resumed, not restarted: the steps before the checkpoint were not trained (or saved) again.
    assert (killed / "checkpoint-4" / "trainer_state.json").stat().st_mtime_ns == first_checkpoint


def test_resume_from_a_folder_that_is_no_checkpoint_fails_before_any_work(tiny_run_inputs, tmp_path, capsys):
    model, data = tiny_run_inputs
    assert main(_command(model, data, tmp_path / "run", "--resume_from_checkpoint", str(tmp_path / "nowhere"))) == 2
    assert "not a finished Trainer checkpoint" in capsys.readouterr().err
    assert main(_command(model, data, tmp_path / "run", "--resume_from_checkpoint", "last")) == 2
    assert "no checkpoint-* folder under" in capsys.readouterr().err
    with pytest.raises(PruningError, match="no checkpoint-\\* folder under"):   # --debug: the exception itself
        main(_command(model, data, tmp_path / "run", "--resume_from_checkpoint", "last", "--debug"))
    assert not (tmp_path / "run").exists()
