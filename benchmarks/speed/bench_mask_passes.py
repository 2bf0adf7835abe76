"""The fixed cost of the mask hooks per training step, in microseconds, against another copy of the package.

On a model so small that Python dominates (2 layers, hidden 32), the time of a masked training step (sampled masks,
forward + backward into the mask logits) minus the plain model's forward + backward is what the hooks add per step,
whatever the model size: the per-pass bookkeeping (entry hooks, drawing the masks) and one hook call per head and
MLP block. Interleaved with a baseline copy of the package in the same process (`--baseline DIR`, holding its
`hf_heuristic_core/`), CPU time of this process, 1 thread: steady on a machine other jobs load.

    python benchmarks/speed/bench_mask_passes.py --baseline /tmp/base [--model bert] [--rounds 5] [--steps 200]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from transformers import AutoConfig, AutoModelForSequenceClassification  # noqa: E402

import hf_heuristic_core  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from bench_pruning import load_baseline  # noqa: E402


def tiny(model_type: str) -> torch.nn.Module:
    torch.manual_seed(0)
    config = AutoConfig.for_model(model_type, hidden_size=32, num_attention_heads=4, num_hidden_layers=2,
                                  intermediate_size=48, vocab_size=99, num_labels=3, max_position_embeddings=64,
                                  pad_token_id=0)
    return AutoModelForSequenceClassification.from_config(config).eval()


def per_step_seconds(step, steps: int) -> float:
    step()
    start = time.process_time()
    for _ in range(steps):
        step()
    return (time.process_time() - start) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", required=True)
    parser.add_argument("--model", default="bert")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    torch.set_num_threads(1)
    baseline = load_baseline(args.baseline)
    model = tiny(args.model)
    inputs = {"input_ids": torch.randint(3, 99, (2, 8), generator=torch.Generator().manual_seed(0))}
    plain = copy.deepcopy(model).requires_grad_(False)
    embeddings = plain.get_input_embeddings()

    def plain_step():
        embeds = embeddings(inputs["input_ids"]).detach().requires_grad_(True)
        plain(inputs_embeds=embeds).logits.sum().backward()

    def masked(package):
        prunable = package.PrunableModel(copy.deepcopy(model), package.PruningConfig(init_mean=0.0, init_std=1.0,
                                                                                     ablation="zero"))
        prunable.train_dropout = False
        prunable.train()

        def step():
            prunable.zero_grad(set_to_none=True)
            prunable(**inputs).logits.sum().backward()
        return step

    steps = {"plain": plain_step, "baseline": masked(baseline), "current": masked(hf_heuristic_core)}
    times: dict[str, list[float]] = {key: [] for key in steps}
    order = list(steps)
    for round_index in range(args.rounds):
        for key in order[round_index % 3:] + order[:round_index % 3]:   # rotated: no side always runs first
            times[key].append(per_step_seconds(steps[key], args.steps))
    best = {key: min(values) for key, values in times.items()}
    median = {key: statistics.median(values) for key, values in times.items()}
    report = {"model": args.model, "layers": 2, "clock": "process", "threads": 1, "steps": args.steps,
              "rounds": args.rounds,
              "step_us": {key: round(value * 1e6, 1) for key, value in best.items()},
              "hooks_us": {"baseline": round((best["baseline"] - best["plain"]) * 1e6, 1),
                           "current": round((best["current"] - best["plain"]) * 1e6, 1)},
              "median_step_us": {key: round(value * 1e6, 1) for key, value in median.items()},
              "median_hooks_us": {"baseline": round((median["baseline"] - median["plain"]) * 1e6, 1),
                                  "current": round((median["current"] - median["plain"]) * 1e6, 1)}}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
