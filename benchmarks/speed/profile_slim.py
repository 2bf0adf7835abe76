"""Where a slim model's forward time goes: torch.profiler over full and slim BERT-base (or SmolLM2) forwards.

Prints, per operator, the self CPU time of the full and the slim model (summed over `--forwards` forwards, run
round-robin after a warm-up), each operator's share of the slim total, and the time the FLOPs share predicts. The
operators whose time does not shrink with the removed units (LayerNorm, embeddings, residual adds, softmax of
kept heads, per-call overhead) are the part of the gap that slicing cannot remove.

    python benchmarks/speed/profile_slim.py [--model bert-base] [--ratio 0.5] [--threads 1] [--forwards 3]
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import defaultdict

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch
from bench_slim import build, flops, masks
from torch.profiler import ProfilerActivity, profile

from hf_heuristic_core import PrunableModel, PruningConfig


def self_times(model: torch.nn.Module, inputs: dict, forwards: int) -> dict[str, float]:
    """Self CPU seconds per operator over `forwards` forwards."""
    with torch.inference_mode(), profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(forwards):
            model(**inputs)
    totals: dict[str, float] = defaultdict(float)
    for event in prof.key_averages():
        totals[event.key] += event.self_cpu_time_total / 1e6
    return dict(totals)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="bert-base")
    parser.add_argument("--ratio", type=float, default=0.5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--forwards", type=int, default=3)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=128)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model = build(args.model)
    generator = torch.Generator().manual_seed(1)
    inputs = {"input_ids": torch.randint(5, 1000, (args.batch, args.seq), generator=generator),
              "attention_mask": torch.ones(args.batch, args.seq, dtype=torch.long)}
    prunable = PrunableModel(model, PruningConfig(ablation="mean"))
    prunable.compute_means([inputs], show_progress=False)
    prunable.set_masks(masks(prunable.num_layers, prunable.num_heads, args.ratio, with_mlps=True))
    slim = prunable.export_slim().eval()
    full = prunable.unwrap().eval()
    share = flops(slim, args.seq) / flops(full, args.seq)
    with torch.inference_mode():
        full(**inputs), slim(**inputs)   # warm-up
    full_ops, slim_ops = defaultdict(float), defaultdict(float)
    for _ in range(args.forwards):   # alternate one forward each, so load swings hit both alike
        for op, seconds in self_times(full, inputs, 1).items():
            full_ops[op] += seconds / args.forwards
        for op, seconds in self_times(slim, inputs, 1).items():
            slim_ops[op] += seconds / args.forwards
    full_total, slim_total = sum(full_ops.values()), sum(slim_ops.values())
    print(f"{args.model}, {args.ratio:.0%} heads + {args.ratio:.0%} MLP blocks removed, batch {args.batch} x "
          f"{args.seq}, {args.threads} thread(s), mean of {args.forwards} profiled forwards")
    print(f"FLOPs share {share:.3f}; profiled self CPU per forward: full {full_total * 1e3:.1f} ms, slim "
          f"{slim_total * 1e3:.1f} ms; slim / (share x full) = {slim_total / (share * full_total):.3f}")
    print(f"{'operator':<48} {'full ms':>9} {'slim ms':>9} {'slim/full':>9} {'% of slim':>9}")
    for op in sorted(set(full_ops) | set(slim_ops), key=lambda o: -slim_ops.get(o, 0))[:18]:
        f, s = full_ops.get(op, 0.0), slim_ops.get(op, 0.0)
        print(f"{op[:48]:<48} {f * 1e3:9.2f} {s * 1e3:9.2f} {s / f if f else float('nan'):9.2f} "
              f"{100 * s / slim_total:8.1f}%")


if __name__ == "__main__":
    main()
