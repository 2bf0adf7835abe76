"""The cached teacher fits or says so: its size is estimated before it is built, it is stored compactly (bf16, or the
top-k logits plus the log-normalizer) with the information lost measured, and a cache over the budget is never built:
the run falls back to the same-model teacher with a warning that gives the numbers."""

from __future__ import annotations

import math

import pytest
import torch

from hf_heuristic_core import PrunableModel, PruningArguments, PruningConfig, PruningTrainer
from hf_heuristic_core.training.teacher import TeacherCache, choose_storage, estimate_cache_bytes
from tiny_models import VOCAB, tiny_model

torch.set_num_threads(1)


def _causal_data(n: int = 12, seq: int = 9):
    import datasets
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(3, VOCAB, (n, seq), generator=generator)
    mask = torch.ones(n, seq, dtype=torch.long)
    for row in range(0, n, 3):
        mask[row, seq - 3:] = 0
    return datasets.Dataset.from_dict({"input_ids": ids.tolist(), "attention_mask": mask.tolist()})


def _args(tmp_path, **overrides) -> PruningArguments:
    return PruningArguments(output_dir=str(tmp_path), recipe="short", max_steps=2, per_device_train_batch_size=4,
                            use_cpu=True, report_to="none", disable_tqdm=True, save_strategy="no",
                            logging_strategy="no", teacher="cached", convergence_check=False,
                            sparsity_warmup_steps=1, **overrides)


def test_estimates_by_hand():
    assert estimate_cache_bytes(8600, 30000, "float32") == 8600 * 30000 * 4      # the issue's ~1 GB
    assert estimate_cache_bytes(8600, 30000, "bfloat16") == 8600 * 30000 * 2
    assert estimate_cache_bytes(100_000, 49152, "topk", topk=64) == 100_000 * (64 * 8 + 4)
    # auto: bf16 when it fits, else top-k, else nothing; sequence-level logits stay fp32
    assert choose_storage("auto", True, 1000, 100, 1e6, 16)[0] == "bfloat16"
    assert choose_storage("auto", True, 100_000, 49152, 2 * 1024 ** 3, 64)[0] == "topk"
    assert choose_storage("auto", True, 10 ** 9, 49152, 2 * 1024 ** 3, 64)[0] is None
    assert choose_storage("auto", False, 1000, 3, 1e6, 64)[0] == "float32"


def test_topk_cache_keeps_the_top_probabilities_and_measures_what_it_loses():
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(5, 50, generator=generator) * 3
    entry = TeacherCache.compress(logits, "topk", topk=10)
    cache = TeacherCache([entry], True, "topk", 50)
    approx = cache.expand(entry)
    full = torch.log_softmax(logits, -1)
    top = logits.topk(10, -1).indices
    torch.testing.assert_close(approx.gather(-1, top), full.gather(-1, top))           # exact on the top k
    torch.testing.assert_close(approx.exp().sum(-1), torch.ones(5))                   # a distribution
    by_hand = float((full.exp() * (full - approx)).sum(-1).mean())
    assert TeacherCache.approximation_error(logits, entry, 50, "topk", 10) == pytest.approx(by_hand, rel=1e-5)
    assert by_hand > 0
    assert TeacherCache.approximation_error(logits, TeacherCache.compress(logits, "topk", 50), 50, "topk", 50) \
        == pytest.approx(0.0, abs=1e-6)


def test_topk_cache_trains_and_logs_its_error(tmp_path, caplog):
    pm = PrunableModel(tiny_model("gpt2", "causal_lm"), PruningConfig(ablation="zero"))
    trainer = PruningTrainer(model=pm, args=_args(tmp_path, teacher_cache_dtype="topk", teacher_cache_topk=16),
                             train_dataset=_causal_data())
    with caplog.at_level("INFO", logger="hf_heuristic_core.training.trainer"):
        trainer.train()
    cache = trainer.teacher_cache
    assert cache.storage == "topk" and cache.approximation_kl > 0
    real_tokens = sum(sum(row) for row in _causal_data()["attention_mask"])
    assert cache.nbytes() == real_tokens * (16 * 8 + 4) == cache.info["estimates"]["topk"]
    assert "KL(teacher || cached teacher)" in caplog.text and "estimated" in caplog.text


def test_a_cache_over_the_budget_falls_back_to_the_same_model_teacher(tmp_path, caplog):
    data = _causal_data()
    pm = PrunableModel(tiny_model("gpt2", "causal_lm"), PruningConfig(ablation="zero"))
    trainer = PruningTrainer(model=pm, args=_args(tmp_path, teacher_cache_max_gb=1e-6), train_dataset=data)
    with caplog.at_level("WARNING"):
        trainer.train()
    real_tokens = sum(sum(row) for row in data["attention_mask"])
    assert trainer.teacher_cache is None and trainer.args.teacher == "same_model"
    assert f"{real_tokens} real tokens x {VOCAB} logits" in caplog.text
    assert "Using teacher='same_model' instead" in caplog.text and "teacher_cache_max_gb" in caplog.text
    assert math.isfinite(trainer.state.log_history[-1]["train_loss"])
