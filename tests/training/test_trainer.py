"""Tests for `PruningTrainer` / `PruningArguments` on tiny random models (hidden 32, 4 heads, 2 layers, vocab 99).

Everything runs on the CPU in one thread (an autouse fixture sets and restores torch's thread count: on a busy 2-core
machine the default OpenMP pool makes a tiny forward pass ~50x slower). The models are built here from configs, with no
download, so this file depends on nothing but the package and Transformers.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from datasets import Dataset
from safetensors.torch import load_file
from transformers import (BertConfig, BertForSequenceClassification, BertForTokenClassification, GPT2Config,
                          GPT2ForSequenceClassification, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM,
                          RobertaConfig, RobertaForSequenceClassification, TrainerCallback)

from tiny_models import one_torch_thread  # noqa: F401  (fixture)
from hf_heuristic_core import PrunableModel, PruningConfig, PruningError
from hf_heuristic_core.training.arguments import PruningArguments
from hf_heuristic_core.relaxations.hard_concrete import HardConcrete
from hf_heuristic_core.training.trainer import EXAMPLE_INDEX_COLUMN, PruningTrainer, TeacherCache, kl_to_teacher

VOCAB = 99
HIDDEN = 32
HEADS = 4
LAYERS = 2
INTERMEDIATE = 37
NUM_LABELS = 3
PAD = 0
INIT_RANGE = 0.3  # not the default 0.02: the outputs must depend clearly on which units are masked
UNITS = LAYERS * HEADS + LAYERS  # every head and every MLP block: 10 units

LOG_KEYS = ("kl", "sparsity_sampled", "sparsity_expected", "sparsity_target", "lambda_1", "lambda_2")
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json", "adapter_model.safetensors")


# ---------------------------------------------------------------------------------------------- tiny models and data
def tiny_model(kind: str = "bert", task: str = "seq", seed: int = 0, num_labels: int = NUM_LABELS):
    """A tiny random model, deterministic for `seed`, with the library's default dropout (0.1) left on.

    Dropout stays in the configs on purpose: `keep_dropout=False` (the default) must switch it off in the student and
    the teacher, and the equality tests below only hold if it does.
    """
    torch.manual_seed(seed)
    if kind in ("bert", "roberta"):
        config_cls = BertConfig if kind == "bert" else RobertaConfig
        config = config_cls(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                            intermediate_size=INTERMEDIATE, max_position_embeddings=64, type_vocab_size=2,
                            num_labels=num_labels, pad_token_id=PAD if kind == "bert" else 1,
                            initializer_range=INIT_RANGE)
        classes = {("bert", "seq"): BertForSequenceClassification, ("bert", "token"): BertForTokenClassification,
                   ("roberta", "seq"): RobertaForSequenceClassification}
        model = classes[(kind, task)](config)
    elif kind == "gpt2":
        config = GPT2Config(vocab_size=VOCAB, n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS, n_inner=INTERMEDIATE,
                            n_positions=64, pad_token_id=PAD, bos_token_id=1, eos_token_id=2, num_labels=num_labels,
                            initializer_range=INIT_RANGE)
        model = (GPT2ForSequenceClassification if task == "seq" else GPT2LMHeadModel)(config)
    elif kind == "llama":
        config = LlamaConfig(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=INTERMEDIATE,
                             num_hidden_layers=LAYERS, num_attention_heads=HEADS, num_key_value_heads=2,
                             max_position_embeddings=64, pad_token_id=PAD, bos_token_id=1, eos_token_id=2,
                             initializer_range=INIT_RANGE)
        assert task == "causal"
        model = LlamaForCausalLM(config)
    else:  # pragma: no cover
        raise ValueError(kind)
    return model.eval()

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def tiny_prunable(kind: str = "bert", task: str = "seq", seed: int = 0, init_mean: float = 1.0,
                  init_std: float = 0.5, **config_kwargs) -> PrunableModel:
    """Wrapped tiny model. `init_mean=1` (not the paper's 10) so that sampled masks sit inside (0, 1) and the mask
    logits get gradients within a few steps."""
    model = tiny_model(kind, task, seed)
    config = PruningConfig(ablation=config_kwargs.pop("ablation", "zero"), init_mean=init_mean, init_std=init_std,
                           **config_kwargs)
    torch.manual_seed(seed + 1000)  # the mask-logit init draws from the global RNG
    return PrunableModel(model, config)


def tiny_dataset(n: int = 32, seq: int = 10, task: str = "seq", pad: bool = False, seed: int = 0,
                 low_id: int = 3) -> Dataset:
    """Pre-padded token ids (so the default collator works), an attention mask and task labels."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(low_id, VOCAB, (n, seq), generator=g)
    mask = torch.ones(n, seq, dtype=torch.long)
    if pad:
        lengths = torch.randint(seq // 2, seq + 1, (n,), generator=g)
        lengths[0] = seq // 2  # at least one padded row whatever the draw
        mask = (torch.arange(seq)[None, :] < lengths[:, None]).long()
        ids = ids.masked_fill(mask == 0, PAD)
    data = {"input_ids": ids.tolist(), "attention_mask": mask.tolist()}
    if task == "seq":
        data["labels"] = torch.randint(0, NUM_LABELS, (n,), generator=g).tolist()
    elif task == "token":
        data["labels"] = torch.randint(0, NUM_LABELS, (n, seq), generator=g).masked_fill(mask == 0, -100).tolist()
    elif task == "causal":
        data["labels"] = ids.masked_fill(mask == 0, -100).tolist()
    return Dataset.from_dict(data)


def prune_args(output_dir, **overrides) -> PruningArguments:
    settings = dict(output_dir=str(output_dir), recipe="paper", max_steps=6, per_device_train_batch_size=8, use_cpu=True,
                    report_to="none", disable_tqdm=True, warmup_steps=1, logging_steps=2, save_strategy="no",
                    seed=0, target_sparsity=0.5, sparsity_warmup_steps=3, mask_learning_rate=0.1,
                    dataloader_drop_last=True)
    settings.update(overrides)
    return PruningArguments(**settings)


def batch_of(dataset: Dataset, rows=slice(0, 4)) -> dict[str, torch.Tensor]:
    part = dataset[rows]
    return {k: torch.tensor(part[k]) for k in ("input_ids", "attention_mask")}


def mask_logits(prunable: PrunableModel) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in dict(prunable.mask_logits.items()).items() if v is not None}


def pruned_units(masks: dict[str, torch.Tensor]) -> int:
    return int((1 - masks["heads"]).sum() + (1 - masks["mlps"]).sum())


def weight_snapshot(prunable: PrunableModel) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in prunable.model.state_dict().items()}


# ---------------------------------------------------------------------------------------------- kl_to_teacher
def _kl_by_hand(p_logits: list[float], q_logits: list[float], temperature: float = 1.0) -> float:
    """KL(p || q) of softmax(p_logits / T) and softmax(q_logits / T), in plain Python floats."""
    def softmax(values):
        top = max(values)
        exps = [math.exp((v - top) / temperature) for v in values]
        total = sum(exps)
        return [e / total for e in exps]
    p, q = softmax(p_logits), softmax(q_logits)
    return sum(pi * (math.log(pi) - math.log(qi)) for pi, qi in zip(p, q))


def test_kl_sequence_level_is_batchmean():
    student = torch.tensor([[0.0, 1.0, 2.0], [1.5, -0.5, 0.25], [3.0, 3.0, -1.0]])
    teacher = torch.tensor([[2.0, 1.0, 0.0], [1.0, 1.0, 1.0], [0.5, 2.5, -3.0]])
    by_hand = sum(_kl_by_hand(t, s) for t, s in zip(teacher.tolist(), student.tolist())) / 3
    assert float(kl_to_teacher(student, teacher)) == pytest.approx(by_hand, rel=1e-6)
    # The reference formula of torch agrees too, and identical logits give 0.
    reference = F.kl_div(F.log_softmax(student, -1), F.log_softmax(teacher, -1), log_target=True,
                         reduction="batchmean")
    assert float(kl_to_teacher(student, teacher)) == pytest.approx(float(reference), rel=1e-6)
    assert float(kl_to_teacher(teacher, teacher)) == 0.0
    # Temperature: softmax(x / T) in both, times T^2.
    by_hand_t = sum(_kl_by_hand(t, s, 2.0) for t, s in zip(teacher.tolist(), student.tolist())) / 3 * 4.0
    assert float(kl_to_teacher(student, teacher, temperature=2.0)) == pytest.approx(by_hand_t, rel=1e-6)
    # The attention mask plays no role for sequence-level logits.
    assert float(kl_to_teacher(student, teacher, torch.tensor([[1, 0], [1, 1], [0, 0]]))) == pytest.approx(by_hand)


def test_kl_per_position_is_mean_over_real_positions():
    g = torch.Generator().manual_seed(0)
    student = torch.randn(2, 4, 5, generator=g)
    teacher = torch.randn(2, 4, 5, generator=g)
    attention_mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    real = [(b, i) for b in range(2) for i in range(4) if attention_mask[b, i]]
    by_hand = sum(_kl_by_hand(teacher[b, i].tolist(), student[b, i].tolist()) for b, i in real) / len(real)
    assert float(kl_to_teacher(student, teacher, attention_mask)) == pytest.approx(by_hand, rel=1e-6)
    # Padding positions do not count, whatever their logits hold.
    noisy = student.clone()
    noisy[attention_mask == 0] = 1e4 * torch.randn(int((attention_mask == 0).sum()), 5, generator=g)
    assert float(kl_to_teacher(noisy, teacher, attention_mask)) == pytest.approx(by_hand, rel=1e-6)
    # Without a mask: the mean over every position (not a sum, not per batch).
    everything = sum(_kl_by_hand(teacher[b, i].tolist(), student[b, i].tolist())
                     for b in range(2) for i in range(4)) / 8
    assert float(kl_to_teacher(student, teacher)) == pytest.approx(everything, rel=1e-6)
    # bf16 logits are promoted to fp32 before the softmax.
    assert kl_to_teacher(student.bfloat16(), teacher.bfloat16(), attention_mask).dtype == torch.float32
    with pytest.raises(PruningError, match="differ in shape"):
        kl_to_teacher(student, teacher[:, :3])


# ---------------------------------------------------------------------------------------------- the loss
@pytest.mark.parametrize("penalty", ["sampled", "expected"])
def test_compute_loss_is_kl_plus_lagrangian(tmp_path, penalty):
    prunable = tiny_prunable()
    data = tiny_dataset(16)
    args = prune_args(tmp_path, sparsity_penalty=penalty, sparsity_warmup_steps=10, start_sparsity=0.1,
                      target_sparsity=0.6)
    trainer = PruningTrainer(model=prunable, args=args, train_dataset=data)
    heads = torch.tensor([[1.0, 0.0, 1.0, 1.0], [0.0, 1.0, 1.0, 0.0]])
    mlps = torch.tensor([1.0, 0.0])
    prunable.set_masks(heads=heads, mlps=mlps)  # 4 of 10 units off: the fixed-mask forward has c = 0.4
    with torch.no_grad():
        trainer.lagrangian.lambda_1.fill_(0.7)
        trainer.lagrangian.lambda_2.fill_(1.3)
    trainer.state.global_step = 4  # linear schedule: t = 0.1 + 0.5 * 4 / 10 = 0.3
    batch = batch_of(data)
    prunable.train()
    loss = trainer.compute_loss(prunable, {**batch, "labels": torch.zeros(4, dtype=torch.long)})

    # Independently: teacher = the unwrapped model without hooks; student = the same model with heads/MLPs zeroed
    # by hand through plain forward hooks, both in eval mode (dropout off).
    reference = tiny_model()
    with torch.no_grad():
        teacher = reference(**batch).logits
        handles = []
        for layer_index, layer in enumerate(reference.bert.encoder.layer):
            keep = heads[layer_index].repeat_interleave(HIDDEN // HEADS)
            handles.append(layer.attention.output.dense.register_forward_pre_hook(
                lambda module, a, keep=keep: (a[0] * keep,)))
            handles.append(layer.output.dense.register_forward_hook(
                lambda module, a, out, z=float(mlps[layer_index]): out * z))
        student = reference(**batch).logits
        for handle in handles:
            handle.remove()
    kl = F.kl_div(F.log_softmax(student, -1), F.log_softmax(teacher, -1), log_target=True, reduction="batchmean")
    t = 0.3
    if penalty == "sampled":
        c = 0.4
    else:  # 1 - E[L0] / N from the logits (fixed masks do not enter the expected L0)
        shift = (2 / 3) * math.log(0.1 / 1.1)
        logits = torch.cat([prunable.mask_logits.heads.detach().flatten(), prunable.mask_logits.mlps.detach()])
        c = 1 - sum(1 / (1 + math.exp(-(v - shift))) for v in logits.tolist()) / UNITS
    expected = float(kl) + 0.7 * (t - c) + 1.3 * (t - c) ** 2
    assert trainer.current_target() == pytest.approx(t)
    assert float(loss.detach()) == pytest.approx(expected, rel=1e-5, abs=1e-6)
    assert float(kl) > 1e-3  # the check above is not vacuous: masking 4 units changes the outputs


def test_compute_loss_causal_lm_padding_matches_unpadded_examples(tmp_path):
    """Per-position KL over real tokens: a right-padded batch gives the token-weighted mean of the KL of each example
    run alone without padding (the positions predicting the next token, padding excluded)."""
    prunable = tiny_prunable("gpt2", "causal")
    data = tiny_dataset(8, seq=9, task="causal", pad=True)
    trainer = PruningTrainer(model=prunable, args=prune_args(tmp_path), train_dataset=data)
    heads = torch.tensor([[1.0, 0.0, 1.0, 1.0], [1.0, 1.0, 0.0, 1.0]])
    prunable.set_masks(heads=heads, mlps=torch.tensor([0.0, 1.0]))
    batch = batch_of(data, slice(0, 4))
    assert int(batch["attention_mask"].sum()) < batch["attention_mask"].numel()  # there is padding
    prunable.train()
    loss = trainer.compute_loss(prunable, dict(batch))  # lambda = 0: the loss is the KL
    prunable.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for row in range(4):
            length = int(batch["attention_mask"][row].sum())
            ids = batch["input_ids"][row:row + 1, :length]
            with prunable.masks_disabled():
                teacher = prunable(input_ids=ids).logits[0]
            student = prunable(input_ids=ids).logits[0]
            total += float(F.kl_div(F.log_softmax(student, -1), F.log_softmax(teacher, -1), log_target=True,
                                    reduction="sum"))
            count += length
    assert float(loss) == pytest.approx(total / count, rel=1e-4)


# ---------------------------------------------------------------------------------------------- optimizer
def test_only_masks_and_multipliers_train(tmp_path):
    prunable = tiny_prunable(init_mean=3.0, init_std=0.01)  # masks mostly on: c < t = 0.3 .. 0.5 for the whole run
    before = weight_snapshot(prunable)
    args = prune_args(tmp_path, max_steps=5, start_sparsity=0.3, sparsity_warmup_steps=2, mask_learning_rate=0.05,
                      reg_learning_rate=0.5, weight_decay=0.1)  # weight_decay of TrainingArguments must not leak into either group
    trainer = PruningTrainer(model=prunable, args=args, train_dataset=tiny_dataset(40))
    optimizer = trainer.create_optimizer()
    logit_ids = {id(prunable.mask_logits.heads), id(prunable.mask_logits.mlps)}
    lambda_ids = {id(trainer.lagrangian.lambda_1), id(trainer.lagrangian.lambda_2)}
    assert len(optimizer.param_groups) == 2
    masks_group, lambda_group = optimizer.param_groups
    assert {id(p) for p in masks_group["params"]} == logit_ids
    assert {id(p) for p in lambda_group["params"]} == lambda_ids
    assert all(group["weight_decay"] == 0.0 for group in optimizer.param_groups)
    assert masks_group["maximize"] is False and lambda_group["maximize"] is True
    assert masks_group["lr"] == 0.05 and lambda_group["lr"] == 0.5
    trainable = {id(p) for p in prunable.parameters() if p.requires_grad}
    assert trainable == logit_ids  # the multipliers are the trainer's, not the model's
    assert not any(p.requires_grad for p in prunable.model.parameters())

    logits_before = mask_logits(prunable)
    trainer.train()
    assert getattr(trainer.optimizer, "optimizer", trainer.optimizer) is optimizer  # accelerate wraps, never rebuilds
    logged = [entry for entry in trainer.state.log_history if "lambda_1" in entry]
    assert all(entry["sparsity_sampled"] < 0.3 for entry in logged)  # the premise
    # t > c throughout, so gradient ascent raises lambda1 (d/dl1 = t - c > 0) and lambda2 (d/dl2 = (t - c)^2 >= 0).
    lambda_1 = float(trainer.lagrangian.lambda_1)
    lambda_2 = float(trainer.lagrangian.lambda_2)
    assert lambda_1 > 0.1 and lambda_2 > 0.0
    assert [e["lambda_1"] for e in logged] == sorted(e["lambda_1"] for e in logged)
    # The mask logits moved (toward pruning), the model weights did not move by a single bit.
    after = mask_logits(prunable)
    assert not torch.equal(after["heads"], logits_before["heads"])
    for name, tensor in weight_snapshot(prunable).items():
        assert torch.equal(tensor, before[name]), name
    assert prunable.mask_logits.heads.dtype == torch.float32


# ---------------------------------------------------------------------------------------------- schedule
def test_sparsity_schedule_linear_and_log(tmp_path):
    linear = PruningArguments(output_dir=str(tmp_path), start_sparsity=0.1, target_sparsity=0.7, use_cpu=True,
                              report_to="none")
    assert linear.target_at(0, 100) == pytest.approx(0.1)
    assert linear.target_at(25, 100) == pytest.approx(0.1 + 0.6 * 0.25)
    assert linear.target_at(50, 100) == pytest.approx(0.4)
    assert linear.target_at(100, 100) == pytest.approx(0.7)
    assert linear.target_at(1000, 100) == pytest.approx(0.7)  # flat after the warm-up
    assert linear.target_at(3, 0) == pytest.approx(0.7)  # no warm-up: the target from step 0
    log = PruningArguments(output_dir=str(tmp_path), start_sparsity=0.1, target_sparsity=0.7, sparsity_schedule="log",
                           use_cpu=True, report_to="none")
    # 1 - (1 - s0)^(1 - p) (1 - sT)^p: the kept fraction decays geometrically.
    for step in (0, 10, 50, 90, 100):
        p = step / 100
        assert log.target_at(step, 100) == pytest.approx(1 - 0.9 ** (1 - p) * 0.3 ** p, rel=1e-9)
    assert log.target_at(50, 100) == pytest.approx(1 - math.sqrt(0.9 * 0.3))
    assert log.target_at(50, 100) > linear.target_at(50, 100)  # log front-loads the pruning
    assert log.target_at(200, 100) == pytest.approx(0.7)


def test_paper_default_sparsity_warmup(tmp_path, caplog):
    args = PruningArguments(output_dir=str(tmp_path), use_cpu=True, report_to="none")
    assert args.target_sparsity == 0.5 and args.sparsity_warmup_steps is None
    assert args.paper_sparsity_warmup() == 9000  # 6500 + 50 * 50
    assert PruningArguments(output_dir=str(tmp_path), target_sparsity=0.7, use_cpu=True,
                            report_to="none").paper_sparsity_warmup() == 10000
    # The other defaults of the recipe: left to the recipe until a trainer resolves it.
    assert args.recipe == "auto" and args.reg_learning_rate is None and args.sparsity_penalty is None
    assert (args.mask_learning_rate, args.kl_temperature) == (0.1, 1.0)
    assert (args.sparsity_schedule, args.teacher) == ("linear", "same_model")
    assert args.keep_dropout is False and args.final_binarization == "topk" and args.warmup_steps == 200
    assert args.weight_decay == 0.0
    paper = PruningTrainer(model=tiny_prunable(), args=PruningArguments(output_dir=str(tmp_path), use_cpu=True,
                                                                        report_to="none", max_steps=9000),
                           train_dataset=tiny_dataset(16))
    assert paper.recipe.name == "paper"   # auto: long enough for the paper's schedule
    assert (paper.args.reg_learning_rate, paper.args.sparsity_penalty, paper.args.warmup_steps) == (1.0, "sampled", 200)
    assert args.reg_learning_rate is None   # the caller's arguments are left alone

    trainer = PruningTrainer(model=tiny_prunable(), args=prune_args(tmp_path, sparsity_warmup_steps=None),
                             train_dataset=tiny_dataset(16))
    trainer.state.max_steps = 20000
    assert trainer.sparsity_warmup() == 9000
    trainer.state.global_step = 4500
    assert trainer.current_target() == pytest.approx(0.25)
    # A run shorter than the paper's warm-up: capped at 90% of it, with a warning.
    short = PruningTrainer(model=tiny_prunable(), args=prune_args(tmp_path, sparsity_warmup_steps=None),
                           train_dataset=tiny_dataset(16))
    short.state.max_steps = 100
    with caplog.at_level("WARNING", logger="hf_heuristic_core.training.trainer"):
        assert short.sparsity_warmup() == 90
    assert "9000" in caplog.text


# ---------------------------------------------------------------------------------------------- logging
class _CaptureLogs(TrainerCallback):
    def __init__(self):
        self.logs: list[tuple[int, dict]] = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        self.logs.append((state.global_step, dict(logs or {})))


def test_every_logging_step_reports_sparsity_lambdas_and_kl(tmp_path):
    capture = _CaptureLogs()
    args = prune_args(tmp_path, max_steps=6, logging_steps=2, sparsity_warmup_steps=4)
    trainer = PruningTrainer(model=tiny_prunable(), args=args, train_dataset=tiny_dataset(32), callbacks=[capture])
    trainer.train()
    training_logs = [(step, logs) for step, logs in capture.logs if "loss" in logs]
    assert [step for step, _ in training_logs] == [2, 4, 6]
    for step, logs in training_logs:
        for key in LOG_KEYS:
            assert key in logs, (step, key, logs)
            assert math.isfinite(logs[key])
        assert logs["kl"] >= 0
        assert 0 <= logs["sparsity_sampled"] <= 1 and 0 <= logs["sparsity_expected"] <= 1
        assert logs["sparsity_target"] == pytest.approx(args.target_at(step, 4))
    last = training_logs[-1][1]
    assert last["lambda_1"] == pytest.approx(float(trainer.lagrangian.lambda_1))
    assert last["lambda_2"] == pytest.approx(float(trainer.lagrangian.lambda_2))


# ---------------------------------------------------------------------------------------------- artifacts
def _folder_size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def test_final_artifact_and_checkpoints_hold_masks_only(tmp_path):
    out = tmp_path / "out"
    args = prune_args(out, max_steps=4, save_strategy="steps", save_steps=2, target_sparsity=0.5)
    prunable = tiny_prunable()
    trainer = PruningTrainer(model=prunable, args=args, train_dataset=tiny_dataset(32))
    trainer.train()
    names = set(os.listdir(out))
    assert {"pruning_config.json", "masks.safetensors", "README.md"} <= names
    assert not names & set(WEIGHT_FILES)
    final = load_file(str(out / "masks.safetensors"))
    assert pruned_units({"heads": final["mask.heads"], "mlps": final["mask.mlps"]}) == round(0.5 * UNITS)
    assert set(final["mask.heads"].unique().tolist()) <= {0.0, 1.0}
    assert not any(key.startswith(("bert.", "classifier")) for key in final)  # no weight tensors
    config = json.loads((out / "pruning_config.json").read_text())
    assert config["model_type"] == "bert" and config["num_heads"] == HEADS
    # The model now runs with the final binary masks.
    masks = prunable.get_masks()
    assert torch.equal(masks["heads"], final["mask.heads"]) and torch.equal(masks["mlps"], final["mask.mlps"])

    for checkpoint in ("checkpoint-2", "checkpoint-4"):
        folder = out / checkpoint
        files = set(os.listdir(folder))
        assert {"masks.safetensors", "pruning_config.json", "optimizer.pt", "pruning_state.pt"} <= files, files
        assert not files & set(WEIGHT_FILES), files
        assert _folder_size(folder) < 1_000_000
        state = torch.load(folder / "pruning_state.pt", weights_only=True)
        assert set(state["lagrangian"]) == {"lambda_1", "lambda_2"}
        optimizer = torch.load(folder / "optimizer.pt", weights_only=True)
        assert len(optimizer["state"]) == 4  # two mask tensors + two multipliers, nothing else
    state = torch.load(out / "checkpoint-4" / "pruning_state.pt", weights_only=True)
    assert float(state["lagrangian"]["lambda_1"]) == pytest.approx(float(trainer.lagrangian.lambda_1))


@pytest.mark.parametrize("target", [0.3, 0.5, 0.7])
def test_final_topk_hits_target_exactly(tmp_path, target):
    prunable = tiny_prunable()
    trainer = PruningTrainer(model=prunable, args=prune_args(tmp_path, max_steps=2, target_sparsity=target),
                             train_dataset=tiny_dataset(16))
    trainer.train()
    masks = prunable.get_masks()
    assert pruned_units(masks) == round(target * UNITS)
    # Top-k on log_alpha: every pruned unit has a lower logit than every kept one.
    logits = torch.cat([prunable.mask_logits.heads.detach().flatten(), prunable.mask_logits.mlps.detach()])
    keep = torch.cat([masks["heads"].flatten(), masks["mlps"]]).bool()
    assert logits[~keep].max() < logits[keep].min()


def test_final_threshold_binarization(tmp_path):
    prunable = tiny_prunable(init_mean=0.0, init_std=3.0)
    args = prune_args(tmp_path, max_steps=2, final_binarization="threshold", final_threshold=0.5)
    PruningTrainer(model=prunable, args=args, train_dataset=tiny_dataset(16)).train()
    masks = prunable.get_masks()
    # The paper's rule, per mask tensor: the round(sum P(z = 0)) lowest logits are 0, the rest keep
    # sigmoid(0.8 * log_alpha / beta) and pass if it is above the threshold.
    hc = HardConcrete()
    for kind in ("heads", "mlps"):
        logit = getattr(prunable.mask_logits, kind).detach().flatten()
        zeros = int(round(float((1 - hc.prob_nonzero(logit)).sum())))
        soft = torch.sigmoid(0.8 * logit / (2 / 3))
        soft[torch.sort(logit, stable=True).indices[:zeros]] = 0.0
        assert torch.equal(masks[kind].flatten(), (soft > 0.5).float()), kind
    assert prunable.pruning_config.binarization == "topk"  # the override does not leak into the saved config
    saved = load_file(str(tmp_path / "masks.safetensors"))
    assert torch.equal(saved["mask.heads"], masks["heads"])


# ---------------------------------------------------------------------------------------------- equivalences
def _train_and_logits(tmp_path, name, prunable=None, data=None, **overrides):
    prunable = prunable or tiny_prunable()
    data = data if data is not None else tiny_dataset(32)
    args = prune_args(tmp_path / name, **overrides)
    trainer = PruningTrainer(model=prunable, args=args, train_dataset=data)
    trainer.train()
    return trainer, mask_logits(prunable)


def test_gradient_accumulation_matches_full_batch(tmp_path):
    """2 x batch 4 with accumulation must train like 1 x batch 8: same data, same seed, dropout off."""
    _, full = _train_and_logits(tmp_path, "full", max_steps=6, per_device_train_batch_size=8)
    _, accumulated = _train_and_logits(tmp_path, "ga", max_steps=6, per_device_train_batch_size=4,
                                       gradient_accumulation_steps=2)
    for kind in full:
        torch.testing.assert_close(accumulated[kind], full[kind], atol=1e-5, rtol=0)


@pytest.mark.parametrize("kind,task,pad", [("bert", "seq", False), ("gpt2", "causal", True)],
                         ids=["seq-classification", "causal-lm-padded"])
def test_gradient_accumulation_matches_with_one_noise_draw_per_step(tmp_path, monkeypatch, kind, task, pad):
    """Diagnostic for the test above: the mask noise is made a function of the optimizer step (one draw shared by the
    micro-batches of a step, as the single batch of 8 gets). Sequence classification then matches: the loss scaling,
    the batchmean KL and the Lagrangian terms are right under accumulation. A padded causal LM must match too: its KL
    is the mean over the real positions of the whole batch of 8, not the mean of two per-micro-batch means (the two
    micro-batches hold different numbers of real tokens)."""
    holder: dict = {}

    def sample_once_per_step(self, log_alpha, generator=None):
        g = torch.Generator().manual_seed(1000 * holder["trainer"].state.global_step + log_alpha.numel())
        u = torch.rand(log_alpha.shape, generator=g, dtype=log_alpha.dtype)
        u = u * (1 - 2 * self.eps) + self.eps
        s = torch.sigmoid((torch.log(u) - torch.log1p(-u) + log_alpha) / self.temperature)
        return self._stretch_and_clip(s)

    monkeypatch.setattr(HardConcrete, "sample", sample_once_per_step)
    data = tiny_dataset(32, seq=10, task=task, pad=pad)
    if pad:  # the premise: micro-batches of 4 hold different numbers of real tokens
        tokens = torch.tensor(data["attention_mask"]).sum(1)
        assert len(set(tokens.view(-1, 4).sum(1).tolist())) > 1
    results = {}
    for name, overrides in (("full", dict(per_device_train_batch_size=8)),
                            ("ga", dict(per_device_train_batch_size=4, gradient_accumulation_steps=2))):
        prunable = tiny_prunable(kind, task)
        trainer = PruningTrainer(model=prunable, args=prune_args(tmp_path / name, max_steps=6, **overrides),
                                 train_dataset=data)
        holder["trainer"] = trainer
        trainer.train()
        results[name] = mask_logits(prunable)
    for kind_ in results["full"]:
        torch.testing.assert_close(results["ga"][kind_], results["full"][kind_], atol=1e-5, rtol=0)


def test_gradient_checkpointing_runs_and_matches(tmp_path):
    _, plain = _train_and_logits(tmp_path, "plain", max_steps=4)
    prunable = tiny_prunable()
    trainer, checkpointed = _train_and_logits(tmp_path, "gc", prunable=prunable, max_steps=4,
                                              activation_checkpointing=True)
    assert any(getattr(m, "gradient_checkpointing", False) for m in prunable.model.modules())  # switched on
    # ... through PrunableModel, whose recompute context replays each forward pass's masks
    functions = [m._gradient_checkpointing_func for m in prunable.model.modules()
                 if getattr(m, "_gradient_checkpointing_func", None) is not None]
    assert functions and all(f.keywords["context_fn"] == prunable._checkpoint_contexts for f in functions)
    start = mask_logits(tiny_prunable())
    for kind in plain:
        assert not torch.equal(checkpointed[kind], start[kind])  # the masks learned something
        torch.testing.assert_close(checkpointed[kind], plain[kind], atol=1e-5, rtol=0)


def test_gradient_checkpointing_recomputes_the_student_layers(tmp_path):
    """Checkpointing must really happen in the student pass: every layer's inner modules run a second time in the
    backward pass (teacher 1 + student 1 + recompute 1 calls per step), otherwise the flag saves no memory."""
    prunable = tiny_prunable()
    args = prune_args(tmp_path, max_steps=3, activation_checkpointing=True, convergence_check=False)
    trainer = PruningTrainer(model=prunable, args=args, train_dataset=tiny_dataset(32))
    calls = {"grad": 0, "no_grad": 0}

    def count(module, inputs, output):
        calls["grad" if torch.is_grad_enabled() else "no_grad"] += 1

    prunable.model.bert.encoder.layer[1].intermediate.dense.register_forward_hook(count)
    trainer.train()
    assert calls["no_grad"] == 3  # the teacher, once per step
    assert calls["grad"] == 3 * 2, (f"{calls['grad']} student calls in 3 steps: the student layers were not "
                                    "checkpointed (no recomputation in the backward pass)")


@pytest.mark.parametrize("keep_dropout", [False, True])
def test_teacher_is_the_same_model_without_masks_or_dropout(tmp_path, keep_dropout):
    prunable = tiny_prunable(init_mean=10.0, init_std=0.01)  # every sampled z is 1: the student is the full model
    data = tiny_dataset(16)
    trainer = PruningTrainer(model=prunable, args=prune_args(tmp_path, keep_dropout=keep_dropout), train_dataset=data)
    # No second copy of the model anywhere in the trainer.
    modules = [value for value in vars(trainer).values() if isinstance(value, torch.nn.Module)]
    assert all(module is prunable or module is trainer.lagrangian for module in modules)
    batch = batch_of(data, slice(0, 8))
    prunable.train()
    teacher = trainer.teacher_logits(batch, None)
    with torch.no_grad():
        reference = tiny_model()(**batch).logits  # the unwrapped model, eval mode
    torch.testing.assert_close(teacher, reference, atol=1e-6, rtol=0)
    # modes are restored after the teacher pass: the wrapper samples masks, dropout only with keep_dropout
    assert prunable.training and prunable.model.training == keep_dropout
    torch.manual_seed(0)
    loss = trainer.compute_loss(prunable, dict(batch))
    assert float(prunable.sampled_sparsity()) == 0.0
    if keep_dropout:
        assert float(loss.detach()) > 1e-3  # dropout in the student only
    else:
        assert float(loss.detach()) == pytest.approx(0.0, abs=1e-7)  # no dropout anywhere: KL 0 at full masks
    assert prunable.training and prunable.model.training == keep_dropout


def test_bf16_autocast_on_cpu(tmp_path):
    prunable = tiny_prunable()
    start = mask_logits(prunable)
    args = prune_args(tmp_path, max_steps=4, bf16=True)
    trainer = PruningTrainer(model=prunable, args=args, train_dataset=tiny_dataset(32))
    trainer.train()
    assert trainer.accelerator.mixed_precision == "bf16"
    for kind, logit in dict(prunable.mask_logits.items()).items():
        assert logit.dtype == torch.float32  # mask logits stay fp32
        assert torch.isfinite(logit).all() and not torch.equal(logit.detach(), start[kind])
    assert trainer.lagrangian.lambda_1.dtype == torch.float32
    assert next(prunable.model.parameters()).dtype == torch.float32  # autocast, not a cast of the weights
    assert pruned_units(prunable.get_masks()) == 5
    logs = [entry for entry in trainer.state.log_history if "kl" in entry]
    assert logs and all(math.isfinite(entry["kl"]) for entry in logs)


# ---------------------------------------------------------------------------------------------- cached teacher
def test_cached_teacher_matches_same_model_teacher(tmp_path):
    data = tiny_dataset(32)
    _, live = _train_and_logits(tmp_path, "live", data=data, max_steps=6)
    prunable = tiny_prunable()
    trainer, cached = _train_and_logits(tmp_path, "cached", prunable=prunable, data=data, max_steps=6,
                                        teacher="cached")
    assert trainer.teacher_cache is not None and len(trainer.teacher_cache.logits) == 32
    assert EXAMPLE_INDEX_COLUMN in trainer.train_dataset.column_names  # added to the trainer's copy...
    assert EXAMPLE_INDEX_COLUMN not in data.column_names  # ...not to the caller's dataset
    assert not trainer.teacher_cache.per_position
    for kind in live:
        torch.testing.assert_close(cached[kind], live[kind], atol=1e-5, rtol=0)
    assert pruned_units(prunable.get_masks()) == 5


def test_cached_teacher_per_position_with_padding(tmp_path):
    data = tiny_dataset(16, seq=9, task="causal", pad=True)
    _, live = _train_and_logits(tmp_path, "live", prunable=tiny_prunable("gpt2", "causal"), data=data, max_steps=4)
    trainer, cached = _train_and_logits(tmp_path, "cached", prunable=tiny_prunable("gpt2", "causal"), data=data,
                                        max_steps=4, teacher="cached", teacher_cache_dtype="float32")
    assert trainer.teacher_cache.per_position and trainer.teacher_cache.storage == "float32"
    lengths = [sum(row) for row in data["attention_mask"]]
    assert [entry.shape for entry in trainer.teacher_cache.logits] == [(n, VOCAB) for n in lengths]
    for kind in live:
        torch.testing.assert_close(cached[kind], live[kind], atol=1e-5, rtol=0)
    # The default keeps per-token logits in bf16: half the memory, and the masks move by bf16 rounding only.
    trainer, compact = _train_and_logits(tmp_path, "bf16", prunable=tiny_prunable("gpt2", "causal"), data=data,
                                         max_steps=4, teacher="cached")
    assert trainer.teacher_cache.storage == "bfloat16"
    assert trainer.teacher_cache.nbytes() == sum(lengths) * VOCAB * 2
    assert 0 < trainer.teacher_cache.approximation_kl < 1e-4
    for kind in live:
        torch.testing.assert_close(compact[kind], live[kind], atol=2e-3, rtol=0)


def test_cached_teacher_mismatch_errors(tmp_path):
    small = tiny_dataset(8)
    builder = PruningTrainer(model=tiny_prunable(), args=prune_args(tmp_path / "b", teacher="cached"),
                             train_dataset=small)
    cache = builder.build_teacher_cache()
    assert len(cache.logits) == 8
    # A cache built for a shorter dataset: indices past its end.
    trainer = PruningTrainer(model=tiny_prunable(), args=prune_args(tmp_path / "x", teacher="cached", max_steps=4),
                             train_dataset=tiny_dataset(32), teacher_cache=cache)
    with pytest.raises(PruningError, match=r"Mismatched teacher cache: example index \d+ is outside the cache "
                                           r"\(8 entries\)"):
        trainer.train()
    # A cache whose entries have another shape (a 2-class model).
    two_class = TeacherCache([torch.zeros(2) for _ in range(32)], per_position=False)
    trainer = PruningTrainer(model=tiny_prunable(), args=prune_args(tmp_path / "y", teacher="cached", max_steps=2),
                             train_dataset=tiny_dataset(32), teacher_cache=two_class)
    with pytest.raises(PruningError, match=r"Mismatched teacher cache entry for example \d+: cached logits \(2,\), "
                                           r"model gives \(3,\)"):
        trainer.train()
    # Per-position entries made with other padding.
    causal = tiny_dataset(16, seq=9, task="causal", pad=True)
    wrong = TeacherCache([torch.zeros(9, VOCAB) for _ in range(16)], per_position=True)
    trainer = PruningTrainer(model=tiny_prunable("gpt2", "causal"),
                             args=prune_args(tmp_path / "z", teacher="cached", max_steps=2),
                             train_dataset=causal, teacher_cache=wrong)
    with pytest.raises(PruningError, match=r"Mismatched teacher cache entry .* real positions"):
        trainer.train()


# ---------------------------------------------------------------------------------------------- resume
def test_resume_restores_masks_lambdas_and_optimizer_exactly(tmp_path):
    out = tmp_path / "run"
    overrides = dict(max_steps=30, save_strategy="steps", save_steps=15, logging_steps=5, sparsity_warmup_steps=20)
    first = tiny_prunable()
    first_trainer = PruningTrainer(model=first, args=prune_args(out, **overrides), train_dataset=tiny_dataset(32))
    first_trainer.train()
    uninterrupted = mask_logits(first)
    lambdas = (first_trainer.lagrangian.lambda_1.detach().clone(), first_trainer.lagrangian.lambda_2.detach().clone())
    uninterrupted_masks = first.get_masks()

    shutil.rmtree(out / "checkpoint-30")
    for name in ("masks.safetensors", "pruning_config.json", "README.md"):
        os.remove(out / name)
    resumed = tiny_prunable(seed=0)
    # Different mask init: resuming must overwrite it from the checkpoint.
    with torch.no_grad():
        resumed.mask_logits.heads.fill_(3.0)
    trainer = PruningTrainer(model=resumed, args=prune_args(out, **overrides), train_dataset=tiny_dataset(32))
    trainer.train(resume_from_checkpoint=str(out / "checkpoint-15"))
    assert trainer.state.global_step == 30
    for kind, logit in mask_logits(resumed).items():
        assert torch.equal(logit, uninterrupted[kind]), kind
    assert torch.equal(trainer.lagrangian.lambda_1.detach(), lambdas[0])
    assert torch.equal(trainer.lagrangian.lambda_2.detach(), lambdas[1])
    masks = resumed.get_masks()
    assert torch.equal(masks["heads"], uninterrupted_masks["heads"])
    assert torch.equal(masks["mlps"], uninterrupted_masks["mlps"])


def test_resume_restores_optimizer_state(tmp_path):
    out = tmp_path / "run"
    overrides = dict(max_steps=4, save_strategy="steps", save_steps=2)
    PruningTrainer(model=tiny_prunable(), args=prune_args(out, **overrides), train_dataset=tiny_dataset(32)).train()
    prunable = tiny_prunable()
    trainer = PruningTrainer(model=prunable, args=prune_args(out, **overrides), train_dataset=tiny_dataset(32))
    trainer.create_optimizer()
    trainer.create_scheduler(num_training_steps=4, optimizer=trainer.optimizer)
    trainer._load_from_checkpoint(str(out / "checkpoint-2"))
    trainer._load_optimizer_and_scheduler(str(out / "checkpoint-2"))
    saved = torch.load(out / "checkpoint-2" / "optimizer.pt", weights_only=True)
    state = trainer.optimizer.state_dict()
    for index, entry in saved["state"].items():
        assert torch.equal(state["state"][index]["exp_avg"], entry["exp_avg"])
        assert torch.equal(state["state"][index]["exp_avg_sq"], entry["exp_avg_sq"])
    pruning_state = torch.load(out / "checkpoint-2" / "pruning_state.pt", weights_only=True)
    assert torch.equal(trainer.lagrangian.lambda_1.detach(), pruning_state["lagrangian"]["lambda_1"])
    saved_masks = load_file(str(out / "checkpoint-2" / "masks.safetensors"))
    assert torch.equal(prunable.mask_logits.heads.detach(), saved_masks["logits.heads"])
    assert prunable.mask_state.fixed.get("heads") is None  # training resumes from the learned logits, not a binarized mask


# ---------------------------------------------------------------------------------------------- forced units
def test_forced_units_survive_strong_pressure(tmp_path):
    prunable = tiny_prunable(init_mean=0.5, init_std=0.1)
    keep_heads, drop_heads = [(0, 0), (1, 3)], [(0, 2)]
    prunable.force_units(heads=keep_heads, mlps=[0], keep=True)
    prunable.force_units(heads=drop_heads, keep=False)
    # Strong pressure: a high target reached at once, large learning rates.
    args = prune_args(tmp_path, max_steps=8, target_sparsity=0.7, sparsity_warmup_steps=0, mask_learning_rate=1.0,
                      reg_learning_rate=10.0)
    trainer = PruningTrainer(model=prunable, args=args, train_dataset=tiny_dataset(64))
    trainer.train()
    masks = prunable.get_masks()
    for layer, head in keep_heads:
        assert masks["heads"][layer, head] == 1.0
    assert masks["mlps"][0] == 1.0
    for layer, head in drop_heads:
        assert masks["heads"][layer, head] == 0.0
    assert pruned_units(masks) == 7
    # The pinned logits (the paper's +/-10) did not move: forced units get no gradient through the masks.
    assert float(prunable.mask_logits.heads[0, 0]) == 10.0 and float(prunable.mask_logits.heads[0, 2]) == -10.0
    assert float(prunable.mask_logits.mlps[0]) == 10.0
    # Sampled masks honour the forcing too (what the student saw during training).
    prunable.clear_masks()
    prunable.train()
    sampled = prunable.current_masks()
    assert sampled["heads"][0, 0] == 1.0 and sampled["heads"][1, 3] == 1.0 and sampled["heads"][0, 2] == 0.0
    saved = load_file(str(tmp_path / "masks.safetensors"))
    assert saved["forced.heads"][0, 0] == 1.0 and saved["forced.heads"][0, 2] == -1.0


# ---------------------------------------------------------------------------------------------- tasks
@pytest.mark.parametrize("kind,task", [("bert", "seq"), ("roberta", "seq"), ("gpt2", "seq"), ("gpt2", "causal"),
                                       ("llama", "causal"), ("bert", "token")])
def test_tasks_train_and_produce_final_masks(tmp_path, kind, task):
    prunable = tiny_prunable(kind, task)
    pad = task != "seq" or kind == "gpt2"  # gpt2 classification finds the last real token through pad_token_id
    data = tiny_dataset(16, seq=9, task=task, pad=pad)
    args = prune_args(tmp_path, max_steps=3, per_device_train_batch_size=4, logging_steps=1)
    trainer = PruningTrainer(model=prunable, args=args, train_dataset=data)
    trainer.train()
    logs = [entry for entry in trainer.state.log_history if "kl" in entry]
    assert len(logs) == 3 and all(math.isfinite(entry["kl"]) and entry["kl"] >= 0 for entry in logs)
    assert pruned_units(prunable.get_masks()) == 5
    assert (tmp_path / "masks.safetensors").is_file()


def test_mean_ablation_trains_and_checkpoints_carry_the_means(tmp_path):
    prunable = tiny_prunable(ablation="mean")
    data = tiny_dataset(16)
    prunable.compute_means(data, batch_size=8, show_progress=False)
    args = prune_args(tmp_path, max_steps=2, save_strategy="steps", save_steps=2)
    PruningTrainer(model=prunable, args=args, train_dataset=data).train()
    saved = load_file(str(tmp_path / "checkpoint-2" / "masks.safetensors"))
    assert torch.equal(saved["means.heads"], prunable.get_means()["heads"].cpu())


def test_faithfulness_of_the_final_masks(tmp_path):
    data = tiny_dataset(16)
    # Target 0: nothing is pruned, so the final model is the full model.
    trainer = PruningTrainer(model=tiny_prunable(), args=prune_args(tmp_path / "a", max_steps=2, target_sparsity=0.0),
                             train_dataset=data)
    trainer.train()
    assert pruned_units(trainer.prunable.get_masks()) == 0
    assert trainer.faithfulness() == {"kl": 0.0, "agreement": 1.0}
    # Target 0.5: the KL of the final masks, by hand over the whole dataset.
    prunable = tiny_prunable()
    trainer = PruningTrainer(model=prunable, args=prune_args(tmp_path / "b", max_steps=2), train_dataset=data)
    trainer.train()
    result = trainer.faithfulness(data)
    batch = batch_of(data, slice(0, 16))
    prunable.eval()
    with torch.no_grad():
        with prunable.masks_disabled():
            teacher = prunable(**batch).logits
        student = prunable(**batch).logits
    kl = F.kl_div(F.log_softmax(student, -1), F.log_softmax(teacher, -1), log_target=True, reduction="batchmean")
    assert result["kl"] == pytest.approx(float(kl), rel=1e-4)
    assert result["agreement"] == pytest.approx(float((student.argmax(-1) == teacher.argmax(-1)).float().mean()))


# ---------------------------------------------------------------------------------------------- errors
def test_unreachable_target_errors(tmp_path):
    prunable = tiny_prunable()
    prunable.force_units(heads=[(l, h) for l in range(LAYERS) for h in range(HEADS)], mlps=[0], keep=True)  # 9 of 10
    with pytest.raises(PruningError, match=r"target_sparsity=0.5 cannot be reached.*9 are forced in"):
        PruningTrainer(model=prunable, args=prune_args(tmp_path), train_dataset=tiny_dataset(16))
    # Forced out beyond the target.
    prunable = tiny_prunable()
    prunable.force_units(heads=[(0, 0), (0, 1), (0, 2), (0, 3)], keep=False)
    with pytest.raises(PruningError, match=r"cannot be reached.*4 forced out"):
        PruningTrainer(model=prunable, args=prune_args(tmp_path, target_sparsity=0.2), train_dataset=tiny_dataset(16))
    # MLP blocks only (2 units): both forced in leaves nothing to prune.
    prunable = tiny_prunable(prune_heads=False)
    prunable.force_units(mlps=[0, 1], keep=True)
    with pytest.raises(PruningError, match=r"prunes 1 of the 2 enabled units \(mlps\)"):
        PruningTrainer(model=prunable, args=prune_args(tmp_path), train_dataset=tiny_dataset(16))


def test_positive_target_that_rounds_to_no_pruned_unit_errors(tmp_path):
    """MLP blocks only: 2 units, so the reachable sparsities are 0, 0.5 and 1. target_sparsity=0.2 would prune
    round(0.4) = 0 units: the run would train against a target it can never binarize to and silently prune nothing.
    That target cannot be reached with the units enabled, so the trainer must refuse it up front."""
    prunable = tiny_prunable(prune_heads=False)
    with pytest.raises(PruningError, match=r"target_sparsity=0.2 cannot be reached"):
        PruningTrainer(model=prunable, args=prune_args(tmp_path, target_sparsity=0.2), train_dataset=tiny_dataset(16))
    # 0.3 of 2 units rounds to 1 unit (sparsity 0.5): reachable, accepted.
    PruningTrainer(model=tiny_prunable(prune_heads=False), args=prune_args(tmp_path, target_sparsity=0.3),
                   train_dataset=tiny_dataset(16))


def test_dataset_without_model_inputs_errors(tmp_path):
    text_only = Dataset.from_dict({"text": ["a b c", "d e f"] * 8, "label": [0, 1] * 8})
    with pytest.raises(PruningError, match=r"no 'input_ids'.*Tokenize it first"):
        PruningTrainer(model=tiny_prunable(), args=prune_args(tmp_path), train_dataset=text_only)


def test_nonfinite_loss_stops_with_step_and_last_good_masks(tmp_path):
    prunable = tiny_prunable()
    holder: dict = {}

    def poison(module, args, output):
        if holder["trainer"].state.global_step == 3:
            return torch.full_like(output, float("nan"))
        return None

    prunable.model.classifier.register_forward_hook(poison)
    args = prune_args(tmp_path, max_steps=6)
    trainer = PruningTrainer(model=prunable, args=args, train_dataset=tiny_dataset(64))
    holder["trainer"] = trainer
    good: dict = {}

    class Snapshot(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            good.update(mask_logits(prunable))

    trainer.add_callback(Snapshot())
    with pytest.raises(PruningError, match=r"Non-finite pruning loss at step 3"):
        trainer.train()
    saved = tmp_path / "last-good-masks" / "masks.safetensors"
    assert saved.is_file()
    tensors = load_file(str(saved))
    assert torch.isfinite(tensors["logits.heads"]).all()
    assert torch.equal(tensors["logits.heads"], good["heads"])  # the masks after step 3, before the bad batch


def test_non_frozen_base_model_errors(tmp_path):
    prunable = tiny_prunable(freeze_base_model=False)
    with pytest.raises(PruningError, match=r"base model is not frozen"):
        PruningTrainer(model=prunable, args=prune_args(tmp_path), train_dataset=tiny_dataset(16))


def test_wrong_model_or_args_types(tmp_path):
    with pytest.raises(TypeError, match="needs a PrunableModel"):
        PruningTrainer(model=tiny_model(), args=prune_args(tmp_path), train_dataset=tiny_dataset(16))


@pytest.mark.parametrize("field,value,message", [
    ("target_sparsity", 50, r"target_sparsity=50 must be a fraction in \[0, 1\)"),
    ("target_sparsity", 1.0, "target_sparsity"),
    ("target_sparsity", -0.1, "target_sparsity"),
    ("start_sparsity", 1.5, "start_sparsity"),
    ("sparsity_schedule", "cosine", r"sparsity_schedule='cosine' must be one of \('linear', 'log'\)"),
    ("sparsity_penalty", "l1", "sparsity_penalty"),
    ("teacher", "other_model", "teacher"),
    ("final_binarization", "round", "final_binarization"),
    ("mask_learning_rate", 0.0, "mask_learning_rate"),
    ("reg_learning_rate", -1.0, "reg_learning_rate"),
    ("kl_temperature", 0.0, "kl_temperature"),
    ("final_threshold", 1.0, "final_threshold"),
    ("sparsity_warmup_steps", -5, "sparsity_warmup_steps"),
])
def test_bad_arguments(tmp_path, field, value, message):
    with pytest.raises(ValueError, match=message):
        PruningArguments(output_dir=str(tmp_path), use_cpu=True, report_to="none", **{field: value})
