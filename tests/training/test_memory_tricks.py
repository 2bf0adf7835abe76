"""The memory options of the one-copy KL step, each against the plain computation: the chunked KL (same value and
gradient, a block of rows at a time), teacher logits kept in bf16 (exactly the fp32 logits rounded), and whole
pruning runs with them. Activation checkpointing under masks has its own tests (tests/test_model.py,
test_trainer.py::test_gradient_checkpointing_*); the memory they save is in BENCHMARKS.md
(benchmarks/speed/bench_memory.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from tiny_models import one_torch_thread  # noqa: F401  (fixture)
from hf_heuristic_core import PrunableModel, PruningConfig
from hf_heuristic_core.training.arguments import PruningArguments
from hf_heuristic_core.training.losses import ChunkedKL, kl_to_teacher
from hf_heuristic_core.training.trainer import PruningTrainer

sys.path.insert(0, str(Path(__file__).parent))
from ddp_prune_script import build_dataset, build_model  # noqa: E402  (tiny BERT / GPT-2 and their data)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def logits(shape, seed, dtype=torch.float32):
    generator = torch.Generator().manual_seed(seed)
    return (3 * torch.randn(shape, generator=generator)).to(dtype)


@pytest.mark.parametrize("shape", [(6, 5), (3, 7, 11)])
@pytest.mark.parametrize("temperature", [1.0, 2.0])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("chunk", [1, 4, 1000])
def test_chunked_kl_equals_the_plain_kl_and_its_gradient(shape, temperature, reduction, chunk):
    student, teacher = logits(shape, 0).requires_grad_(), logits(shape, 1)
    mask = None
    if len(shape) == 3:
        mask = torch.ones(shape[:2], dtype=torch.long)
        mask[0, 4:] = 0
        mask[2, 1:] = 0
    plain = kl_to_teacher(student, teacher, mask, temperature, reduction)
    (plain_grad,) = torch.autograd.grad(plain, student)
    chunked = kl_to_teacher(student, teacher, mask, temperature, reduction, chunk_size=chunk)
    (chunked_grad,) = torch.autograd.grad(chunked, student)
    assert float(plain.detach()) > 0.1
    torch.testing.assert_close(chunked, plain, rtol=1e-6, atol=0)
    torch.testing.assert_close(chunked_grad, plain_grad, rtol=1e-5, atol=1e-8)
    if mask is not None:   # padding positions get no gradient
        assert float(chunked_grad[0, 4:].abs().sum()) == 0.0


def test_chunked_kl_reads_bf16_logits_without_copying_them_to_fp32():
    """Autocast gives bf16 student logits; the bf16 teacher option gives bf16 teacher logits. Both are read in fp32
    a chunk at a time; the gradient comes back in the student's dtype."""
    student = logits((2, 9, 13), 0, torch.bfloat16).requires_grad_()
    teacher = logits((2, 9, 13), 1, torch.bfloat16)
    plain = kl_to_teacher(student, teacher)
    (plain_grad,) = torch.autograd.grad(plain, student)
    chunked = kl_to_teacher(student, teacher, chunk_size=5)
    (chunked_grad,) = torch.autograd.grad(chunked, student)
    assert chunked_grad.dtype == torch.bfloat16 and chunked.dtype == torch.float32
    torch.testing.assert_close(chunked, plain, rtol=1e-6, atol=0)
    torch.testing.assert_close(chunked_grad.float(), plain_grad.float(), rtol=0, atol=1e-3)


def test_chunked_kl_gives_the_teacher_no_gradient_and_refuses_bad_chunks():
    student, teacher = logits((4, 3), 0).requires_grad_(), logits((4, 3), 1).requires_grad_()
    ChunkedKL.apply(student, teacher, torch.ones(4), 1.0, 2).backward()
    assert student.grad is not None and teacher.grad is None
    with pytest.raises(Exception, match="chunk_size must be >= 1"):
        kl_to_teacher(student, teacher, chunk_size=0)


@pytest.mark.parametrize("field, value, message", [
    ("kl_chunk_size", 0, "kl_chunk_size=0 must be >= 1"),
    ("teacher_logits_dtype", "float16", "teacher_logits_dtype='float16' must be one of"),
])
def test_memory_options_refuse_bad_values(tmp_path, field, value, message):
    with pytest.raises(ValueError, match=message):
        PruningArguments(output_dir=str(tmp_path), **{field: value})


def prune(tmp_path, task: str, **options) -> tuple[PruningTrainer, PrunableModel]:
    torch.manual_seed(1000)
    prunable = PrunableModel(build_model(task), PruningConfig(ablation="zero", init_mean=1.0, init_std=0.5))
    args = PruningArguments(output_dir=str(tmp_path), per_device_train_batch_size=8, max_steps=4, use_cpu=True,
                            seed=0, report_to="none", disable_tqdm=True, warmup_steps=1, logging_steps=1,
                            save_strategy="no", sparsity_warmup_steps=3, target_sparsity=0.5,
                            convergence_check=False, **options)
    trainer = PruningTrainer(model=prunable, args=args, train_dataset=build_dataset(task))
    trainer.train()
    return trainer, prunable


def test_chunked_kl_in_a_pruning_run_learns_what_the_plain_kl_learns(tmp_path):
    """Per-token KL of a causal LM with padding, 4 steps: same logged KL, same mask logits."""
    plain_trainer, plain = prune(tmp_path / "plain", "causal")
    chunked_trainer, chunked = prune(tmp_path / "chunked", "causal", kl_chunk_size=7)
    kl = [entry["kl"] for entry in plain_trainer.state.log_history if "kl" in entry]
    assert [entry["kl"] for entry in chunked_trainer.state.log_history if "kl" in entry] == pytest.approx(kl, rel=1e-6)
    for kind, logit in plain.mask_logits.items():
        torch.testing.assert_close(chunked.mask_logits[kind], logit, rtol=0, atol=1e-6)


def test_bf16_teacher_logits_are_the_fp32_logits_rounded(tmp_path):
    """The option keeps the teacher's own logits, rounded to bf16 (nothing else changes); a short run then learns
    nearly what the fp32 teacher teaches (KL within bf16 rounding of the logits)."""
    fp32_trainer, fp32 = prune(tmp_path / "fp32", "causal")
    bf16_trainer, bf16 = prune(tmp_path / "bf16", "causal", teacher_logits_dtype="bfloat16")
    inputs = {key: torch.tensor(build_dataset("causal")[:4][key]) for key in ("input_ids", "attention_mask")}
    teacher = bf16_trainer.teacher_logits(inputs, None)
    with torch.no_grad(), bf16.masks_disabled():
        full = bf16.eval()(**inputs).logits
    assert teacher.dtype == torch.bfloat16 and torch.equal(teacher, full.to(torch.bfloat16))
    kl32 = [entry["kl"] for entry in fp32_trainer.state.log_history if "kl" in entry]
    kl16 = [entry["kl"] for entry in bf16_trainer.state.log_history if "kl" in entry]
    assert kl16 == pytest.approx(kl32, rel=0.05, abs=2e-3)
    for kind, logit in fp32.mask_logits.items():
        torch.testing.assert_close(bf16.mask_logits[kind], logit, rtol=0, atol=0.05)
