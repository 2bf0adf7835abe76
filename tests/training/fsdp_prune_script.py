"""Prune a tiny random model with `PruningTrainer` under FSDP2 on the CPU (2 processes, gloo); run by
tests/training/test_trainer_distributed.py (through distributed_prune_script.py), and as a single process without FSDP for the reference.

    python -m torch.distributed.run --nproc_per_node=2 tests/training/fsdp_prune_script.py --output DIR --batch 4 --fsdp
    python tests/training/fsdp_prune_script.py --output DIR --batch 8

accelerate 1.15 enables FSDP only on accelerators: on a multi-process CPU run `AcceleratorState` drops the FSDP plugin
and the Trainer runs DDP instead (`training.sharding.ACCELERATE_CPU_FALLBACK`). `--fsdp` therefore flips that one
decision back (`allow_fsdp_on_cpu`), so the very code path a GPU run takes (accelerate's `fsdp2_prepare_model`,
torch's `fully_shard`, the Trainer's FSDP branches) runs here on gloo. Nothing else is patched.

Writes `DIR/result.pt` (rank 0: mask logits, binary masks, lambdas, logged KL values, world size, and what FSDP
wrapped) and `DIR/seen-rank{r}.pt` (the input ids every student forward pass of rank r saw). Several cases in one
launch: `--case NAME=FLAGS`, repeated, as in ddp_prune_script.py.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ddp_prune_script import (build_dataset, build_model, record_student_inputs, run_cases,  # noqa: E402
                              save_result, save_seen)

from hf_heuristic_core import PrunableModel, PruningConfig  # noqa: E402
from hf_heuristic_core.training.arguments import PruningArguments  # noqa: E402
from hf_heuristic_core.training.trainer import PruningTrainer  # noqa: E402

LAYER_CLASSES = {"seq": "BertLayer", "causal": "GPT2Block"}
WEIGHT_TARGETS = {"seq": ["attention.output.dense", "output.dense"], "causal": ["attn.c_proj", "mlp.c_proj"]}


def allow_fsdp_on_cpu() -> None:
    """Keep accelerate's FSDP plugin on a multi-process CPU run (see the module docstring); test-only."""
    from accelerate.state import AcceleratorState
    from accelerate.utils import DistributedType

    original = AcceleratorState.__init__
    if getattr(original, "allows_fsdp_on_cpu", False):   # a later case of the same launch
        return

    def init(self, *args, fsdp_plugin=None, **kwargs):
        original(self, *args, fsdp_plugin=fsdp_plugin, **kwargs)
        if fsdp_plugin is not None and self.distributed_type == DistributedType.MULTI_CPU:
            self.distributed_type = DistributedType.FSDP
            self.fsdp_plugin = fsdp_plugin

    init.allows_fsdp_on_cpu = True
    AcceleratorState.__init__ = init


def fsdp_layout(prunable: PrunableModel) -> dict:
    """What FSDP manages: the modules it wrapped, and per module whether its own parameters mix frozen and trainable
    ones; which parameters are sharded (DTensor) and which stayed whole."""
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.tensor import DTensor
    units = [name or "<root>" for name, module in prunable.named_modules() if isinstance(module, FSDPModule)]
    sharded = [name for name, p in prunable.named_parameters() if isinstance(p, DTensor)]
    whole = [name for name, p in prunable.named_parameters() if not isinstance(p, DTensor)]
    trainable_sharded = [name for name, p in prunable.named_parameters() if isinstance(p, DTensor) and p.requires_grad]
    return {"units": units, "sharded": sharded, "whole": whole, "trainable_sharded": trainable_sharded}


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    parser.add_argument("--output", required=True)
    parser.add_argument("--batch", type=int, required=True, help="per-device batch size")
    parser.add_argument("--task", choices=("seq", "causal"), default="seq")
    parser.add_argument("--granularity", choices=("unit", "weight"), default="unit")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--fsdp", action="store_true")
    parser.add_argument("--save-steps", type=int, default=0, help="checkpoint every N steps (0: none)")
    parser.add_argument("--resume", default=None, help="checkpoint folder to resume from")
    parser.add_argument("--max-grad-norm", type=float, default=1.0)
    parser.add_argument("--activation-checkpointing", action="store_true")
    parser.add_argument("--cuda", action="store_true", help="one GPU per process (nccl); no CPU shim")
    parser.add_argument("--convergence-check", action="store_true")
    parser.add_argument("--case", action="append", default=[], metavar="NAME=FLAGS",
                        help="run a case into OUTPUT/NAME with these flags (repeatable); without it, one run into OUTPUT")
    return parser


def run(options: argparse.Namespace) -> None:
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if options.fsdp and not options.cuda:
        allow_fsdp_on_cpu()

    torch.manual_seed(1000)
    config = (PruningConfig(ablation="zero", init_mean=1.0, init_std=0.5) if options.granularity == "unit" else
              PruningConfig(granularity="weight", relaxation="hard_concrete", init_mean=1.0, init_std=0.5,
                            target_modules=WEIGHT_TARGETS[options.task]))
    prunable = PrunableModel(build_model(options.task), config)
    fsdp = {}
    if options.fsdp:
        fsdp = dict(fsdp=True, fsdp_config={"version": 2, "transformer_layer_cls_to_wrap": [LAYER_CLASSES[options.task]]})
    args = PruningArguments(output_dir=options.output, per_device_train_batch_size=options.batch,
                            max_steps=options.steps, use_cpu=not options.cuda,
                            ddp_backend=("nccl" if options.cuda else "gloo") if distributed else None,
                            dataloader_drop_last=True, seed=0, report_to="none", disable_tqdm=True, warmup_steps=1,
                            logging_steps=1, save_strategy="steps" if options.save_steps else "no",
                            save_steps=options.save_steps or 500, sparsity_warmup_steps=3, target_sparsity=0.5,
                            max_grad_norm=options.max_grad_norm, convergence_check=options.convergence_check,
                            activation_checkpointing=options.activation_checkpointing, **fsdp)
    trainer = PruningTrainer(model=prunable, args=args, train_dataset=build_dataset(options.task))

    seen = record_student_inputs(prunable)
    trainer.train(resume_from_checkpoint=options.resume)
    rank = save_seen(seen, trainer, options.output)
    layout = fsdp_layout(prunable) if options.fsdp else {}
    if rank == 0:
        save_result(prunable, trainer, options.output, device=str(prunable.mask_logits_device),
                    kl=[entry["kl"] for entry in trainer.state.log_history if "kl" in entry],
                    fsdp_enabled=bool(trainer.is_fsdp_enabled), layout=layout)


def main() -> None:
    run_cases(parser(), run)


if __name__ == "__main__":
    main()
