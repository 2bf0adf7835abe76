"""`PruningArguments.seed` alone decides a run: a fresh process and this test process (which has run other tests
before, with another RNG history) end with bit-identical masks and logits for the same seed, whatever the global RNG
did before, and another seed starts elsewhere (run after the first seed in the fresh process: a launch is most of the
time, and a different start is what that run checks). Both single-threaded, as the test processes are."""

from __future__ import annotations

import contextlib
import io
import json
import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = r'''
import hashlib, json, os, sys
sys.path.insert(0, {tests!r})
import torch
from hf_heuristic_core import PrunableModel, PruningArguments, PruningConfig, PruningTrainer
from test_trainer_data import data, model
results = []
for seed in sys.argv[2:]:
    torch.manual_seed(int.from_bytes(os.urandom(4), "little"))   # the global RNG differs in every process and run
    pm = PrunableModel(model(), PruningConfig(ablation="zero"))
    args = PruningArguments(output_dir=os.path.join(sys.argv[1], seed), seed=int(seed), max_steps=5,
                            per_device_train_batch_size=8, use_cpu=True, report_to="none", disable_tqdm=True,
                            save_strategy="no", logging_strategy="no", convergence_check=False)
    trainer = PruningTrainer(model=pm, args=args, train_dataset=data())
    start = {{k: v.detach().clone() for k, v in pm.mask_logits.items()}}
    trainer.train()
    digest = hashlib.sha256()
    for kind, logit in pm.mask_logits.items():
        digest.update(logit.detach().numpy().tobytes())
    results.append({{"logits": digest.hexdigest(), "masks": {{k: v.tolist() for k, v in pm.get_masks().items()}},
                    "start": {{k: v.tolist() for k, v in start.items()}}}})
print(json.dumps(results))
'''

HELPER = '''
import datasets, torch, transformers
def model():
    config = transformers.BertConfig(vocab_size=99, hidden_size=32, num_attention_heads=4, num_hidden_layers=2,
                                     intermediate_size=37, max_position_embeddings=64, num_labels=3,
                                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    torch.manual_seed(0)
    return transformers.BertForSequenceClassification(config).eval()
def data():
    ids = torch.randint(3, 99, (64, 10), generator=torch.Generator().manual_seed(0))
    return datasets.Dataset.from_dict({"input_ids": ids.tolist()})
'''


def _script(tmp_path: Path) -> Path:
    helpers = tmp_path / "helpers"
    helpers.mkdir(exist_ok=True)
    (helpers / "test_trainer_data.py").write_text(HELPER)
    script = tmp_path / "run.py"
    script.write_text(SCRIPT.format(tests=str(helpers)))
    return script


def _run(script: Path, output: Path, *seeds: int) -> list[dict]:
    """One fresh process running `seeds` in turn; each run's start logits, final logits' digest and masks."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[2]),
                                                         os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, str(script), str(output), *map(str, seeds)],
                         capture_output=True, text=True, env=env, timeout=600, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _run_here(script: Path, output: Path, *seeds: int) -> list[dict]:
    """The same script in this process, single-threaded; the global RNG is given back as it was."""
    printed = io.StringIO()
    threads = torch.get_num_threads()
    argv, path = sys.argv, list(sys.path)
    torch.set_num_threads(1)
    try:
        with torch.random.fork_rng(), contextlib.redirect_stdout(printed):
            sys.argv = [str(script), str(output), *map(str, seeds)]
            runpy.run_path(sys.argv[0], run_name="__main__")
    finally:
        sys.argv, sys.path[:] = argv, path
        sys.modules.pop("test_trainer_data", None)
        torch.set_num_threads(threads)
    return json.loads(printed.getvalue().strip().splitlines()[-1])


@pytest.mark.slow
def test_same_seed_same_masks_in_a_fresh_process_and_this_one(tmp_path):
    script = _script(tmp_path)
    (first,), (second, other) = _run_here(script, tmp_path / "a", 7), _run(script, tmp_path / "b", 7, 8)
    assert first == second
    assert first["start"] != other["start"] and first["logits"] != other["logits"]
