"""`hf-heuristic-core effective-size` killed with SIGKILL after its first checkpoint and started again gives the same
results file as an uninterrupted run: results are stored per checkpoint (atomically), and a restart computes only the
checkpoints not yet stored. The killed run and its restart are real subprocesses; the uninterrupted run is made in
this process (single-threaded, as the subprocesses are). A tiny BERT with the MiniLM tokenizer, two pruning seeds."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import transformers
from tiny_models import one_torch_thread  # noqa: F401  (fixture)
from tiny_models import tiny_bert_classifier as tiny_bert

from hf_heuristic_core.cli import main

ROOT = Path(__file__).resolve().parents[2]
STEPS = (4, 8, 12)
FLAGS = ["--train_data", "generated", "--id_eval", "generated", "--ood_eval", "generated",
         "--generated_train_size", "32", "--generated_id_size", "16", "--generated_ood_size", "4",
         "--strategy", "nested", "--steps_per_run", "3", "--sparsities", "0.2,0.5", "--seeds", "0,1",
         "--batch_size", "8", "--means_examples", "16", "--max_length", "24", "--no_figure"]
# Run-dependent timings; everything else must match exactly.
TIMINGS = ("wall_seconds", "evaluation_seconds")


def make_run(folder: Path, tokenizer) -> Path:
    for step in STEPS:
        tiny_bert(seed=step, vocab=tokenizer.vocab_size, num_labels=2).save_pretrained(folder / f"checkpoint-{step}")
        tokenizer.save_pretrained(folder / f"checkpoint-{step}")
    return folder


def command(folder: Path) -> list[str]:
    code = "import sys; from hf_heuristic_core.cli import main; sys.exit(main(sys.argv[1:]))"
    return [sys.executable, "-c", code, "effective-size", str(folder), *FLAGS]


def environment() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
            "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


def done_steps(path: Path) -> list[int]:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return []
    return [e["step"] for e in data["checkpoints"] if e["status"] == "done"]


def comparable(path: Path) -> dict:
    data = json.loads(path.read_text())
    for entry in data["checkpoints"]:
        for key in TIMINGS:
            entry.pop(key)
    return data


@pytest.mark.usefixtures("one_torch_thread")
def test_sigkilled_run_resumed_equals_an_uninterrupted_one(tmp_path, minilm_dir, capsys):
    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    straight = make_run(tmp_path / "straight", tokenizer)
    killed = make_run(tmp_path / "killed", tokenizer)

    assert main(["effective-size", str(straight), *FLAGS]) == 0, capsys.readouterr().err[-3000:]
    assert done_steps(straight / "effective_size.json") == list(STEPS)

    results = killed / "effective_size.json"
    process = subprocess.Popen(command(killed), env=environment(), stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 600
    while not done_steps(results) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=60)
    stored = done_steps(results)
    assert stored and stored[0] == STEPS[0] and len(stored) < len(STEPS), f"killed too late: {stored}"
    first_entry = json.loads(results.read_text())["checkpoints"][0]

    resumed = subprocess.run(command(killed), env=environment(), capture_output=True, text=True, timeout=600,
                              check=False)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"{len(stored)} already done, computing {len(STEPS) - len(stored)}" in resumed.stderr
    assert json.loads(results.read_text())["checkpoints"][0] == first_entry   # not recomputed
    assert comparable(results) == comparable(straight / "effective_size.json")
    settings = json.loads(results.read_text())["settings"]
    assert settings["seeds"] == [0, 1] and settings["early_stopping"] is True
    assert "± " in resumed.stdout   # two seeds: mean ± half-range
