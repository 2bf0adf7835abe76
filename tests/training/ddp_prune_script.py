"""Prune a tiny random model with `PruningTrainer`; run by tests/training/test_trainer_distributed.py under torchrun (2 processes,
gloo, CPU) and as a single process, which must then learn the same masks.

    python -m torch.distributed.run --nproc_per_node=2 tests/training/ddp_prune_script.py --output DIR --batch 4 --task seq
    python tests/training/ddp_prune_script.py --output DIR --batch 8 --task seq

Writes `DIR/result.pt` (rank 0: mask logits, binary masks, lambdas, world size) and `DIR/seen-rank{r}.pt` (the input
ids of every student forward pass of rank r, to tell a data-sharding difference from a mask-noise difference).
Self-contained: the model and the data are built here, deterministically, from configs only.

One launch can run several cases in turn (`--case NAME=FLAGS`, repeated): each writes into `DIR/NAME`, with the
launch's `--batch` and its own flags; the process group is set up once, each case gets a fresh model, Trainer and
seed. Launching the processes is most of a case's time on a CPU.

    python -m torch.distributed.run --nproc_per_node=2 tests/training/ddp_prune_script.py --output DIR --batch 4 \
        --case seq="--task seq" --case causal="--task causal --find-unused false"
"""

from __future__ import annotations

import argparse
import os
import shlex
from collections.abc import Callable

import torch
from datasets import Dataset
from transformers import BertConfig, BertForSequenceClassification, GPT2Config, GPT2LMHeadModel

from hf_heuristic_core import PrunableModel, PruningConfig
from hf_heuristic_core.training.arguments import PruningArguments
from hf_heuristic_core.training.trainer import PruningTrainer

VOCAB, HIDDEN, HEADS, LAYERS, INTERMEDIATE, PAD = 99, 32, 4, 2, 37, 0


def build_model(task: str):
    torch.manual_seed(0)
    if task == "seq":
        config = BertConfig(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                            intermediate_size=INTERMEDIATE, max_position_embeddings=64, num_labels=3, pad_token_id=PAD,
                            initializer_range=0.3)
        return BertForSequenceClassification(config).eval()
    config = GPT2Config(vocab_size=VOCAB, n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS, n_inner=INTERMEDIATE,
                        n_positions=64, pad_token_id=PAD, bos_token_id=1, eos_token_id=2, initializer_range=0.3)
    return GPT2LMHeadModel(config).eval()


def build_dataset(task: str, n: int = 32, seq: int = 10) -> Dataset:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, VOCAB, (n, seq), generator=g)
    mask = torch.ones(n, seq, dtype=torch.long)
    if task == "causal":  # right padding, real lengths 3..10: micro-batches hold different numbers of real tokens
        lengths = torch.randint(3, seq + 1, (n,), generator=g)
        mask = (torch.arange(seq)[None, :] < lengths[:, None]).long()
        ids = ids.masked_fill(mask == 0, PAD)
    data = {"input_ids": ids.tolist(), "attention_mask": mask.tolist()}
    data["labels"] = (torch.randint(0, 3, (n,), generator=g).tolist() if task == "seq"
                      else ids.masked_fill(mask == 0, -100).tolist())
    return Dataset.from_dict(data)


def record_student_inputs(prunable: PrunableModel) -> list[list[int]]:
    """The first input id of every example of every student forward pass (teacher passes run with masks off)."""
    seen: list[list[int]] = []

    def record(module, module_args, kwargs):
        if prunable._masks_enabled and prunable.training:
            seen.append(kwargs["input_ids"][:, 0].tolist())

    prunable.model.register_forward_pre_hook(record, with_kwargs=True)
    return seen


def save_seen(seen: list[list[int]], trainer: PruningTrainer, output: str) -> int:
    """Write this rank's `seen-rank{r}.pt` into `output`; the rank."""
    rank = trainer.args.process_index
    os.makedirs(output, exist_ok=True)
    torch.save(seen, os.path.join(output, f"seen-rank{rank}.pt"))
    return rank


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    parser.add_argument("--output", required=True)
    parser.add_argument("--batch", type=int, required=True, help="per-device batch size")
    parser.add_argument("--task", choices=("seq", "causal"), default="seq")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--accumulation", type=int, default=1)
    parser.add_argument("--find-unused", choices=("default", "false"), default="default",
                        help="ddp_find_unused_parameters: the Trainer's default (None), or False")
    parser.add_argument("--case", action="append", default=[], metavar="NAME=FLAGS",
                        help="run a case into OUTPUT/NAME with these flags (repeatable); without it, one run into OUTPUT")
    return parser


def cases(parser: argparse.ArgumentParser, argv: list[str] | None = None) -> list[argparse.Namespace]:
    """The launch's cases: one per `--case NAME=FLAGS` (its own flags on top of the launch's `--output/NAME` and
    `--batch`), or the launch's own options."""
    options = parser.parse_args(argv)
    if not options.case:
        return [options]
    found = []
    for spec in options.case:
        name, _, flags = spec.partition("=")
        found.append(parser.parse_args(["--output", os.path.join(options.output, name), "--batch",
                                        str(options.batch), *shlex.split(flags)]))
    return found


def run(options: argparse.Namespace) -> None:
    # ddp_backend outside torchrun makes accelerate look for a process group that does not exist.
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1

    torch.manual_seed(1000)
    prunable = PrunableModel(build_model(options.task), PruningConfig(ablation="zero", init_mean=1.0, init_std=0.5))
    args = PruningArguments(output_dir=options.output, per_device_train_batch_size=options.batch,
                            gradient_accumulation_steps=options.accumulation, max_steps=options.steps, use_cpu=True,
                            ddp_backend="gloo" if distributed else None, dataloader_drop_last=True, seed=0, report_to="none",
                            disable_tqdm=True, warmup_steps=1, logging_steps=2, save_strategy="no",
                            sparsity_warmup_steps=3, target_sparsity=0.5,
                            ddp_find_unused_parameters=None if options.find_unused == "default" else False)
    trainer = PruningTrainer(model=prunable, args=args, train_dataset=build_dataset(options.task))

    seen = record_student_inputs(prunable)
    trainer.train()
    rank = save_seen(seen, trainer, options.output)
    if rank == 0:
        save_result(prunable, trainer, options.output)


def save_result(prunable: PrunableModel, trainer: PruningTrainer, output: str, **extra: object) -> None:
    """Rank 0's `result.pt`: mask logits, binary masks, lambdas, world size, and `extra`."""
    torch.save({
        "logits": {k: v.detach().cpu().clone() for k, v in dict(prunable.mask_logits.items()).items() if v is not None},
        "masks": prunable.get_masks(),
        "lambda_1": float(trainer.lagrangian.lambda_1.detach()),
        "lambda_2": float(trainer.lagrangian.lambda_2.detach()),
        "world_size": trainer.args.world_size,
        **extra,
    }, os.path.join(output, "result.pt"))


def run_cases(parser: argparse.ArgumentParser, run: Callable[[argparse.Namespace], None]) -> None:
    """Run each case of the launch in turn (`cases`), single-threaded."""
    torch.set_num_threads(1)
    for options in cases(parser):
        run(options)


def main() -> None:
    run_cases(parser(), run)


if __name__ == "__main__":
    main()
