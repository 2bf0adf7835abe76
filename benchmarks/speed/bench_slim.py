"""Slim export benchmark: forward latency of the full model, the hooked subnetwork and the slim model, in one run.

Shapes (random weights; latency does not depend on the values): BERT-base (12 layers x 12 heads, hidden 768,
intermediate 3072) at batch 8 x 128, and SmolLM2-135M (Llama, 30 layers, 9 query / 3 kv heads, hidden 576,
intermediate 1536, vocab 49152) prefill at 8 x 128 and per-token `generate` cost. Random masks remove 30 / 50 / 70%
of the heads, without and with the same share of MLP blocks; mean ablation (means from one batch), so output
biases are added where the architecture has none.

The FLOPs share (slim / full: 2 x in x out per token for every Linear / Conv1D, plus 4 x seq x head width for each
layer's attention scores) is the physical limit of the speed-up; `slim/(share x full)` near 1 means the slim model
gets all of it. Model memory is parameters + buffers. That ratio is also taken round by round (full, hooked and slim
run in turn each round, so each round's three times share the machine's load): the table gives its median and, after
"±", the half-width of that median's ~95% confidence interval (distribution-free, from the rounds' order
statistics) relative to it (`slim_over_limit_spread`; the per-round ratios are in the JSON). It narrows as
`--repeats` grows: raise it until the spread is as small as the comparison needs.

    python benchmarks/speed/bench_slim.py [--models bert-base,smollm2] [--repeats 3] [--threads 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoModelForSequenceClassification,
)

from hf_heuristic_core import PrunableModel, PruningConfig
from hf_heuristic_core.export.latency import round_robin_latency, round_robin_times

RATIOS = (0.3, 0.5, 0.7)


def build(name: str) -> torch.nn.Module:
    torch.manual_seed(0)
    if name == "bert-base":
        config = AutoConfig.for_model("bert", hidden_size=768, num_attention_heads=12, num_hidden_layers=12,
                                      intermediate_size=3072, num_labels=3)
        return AutoModelForSequenceClassification.from_config(config, attn_implementation="sdpa").eval()
    config = AutoConfig.for_model("llama", hidden_size=576, num_attention_heads=9, num_key_value_heads=3,
                                  num_hidden_layers=30, intermediate_size=1536, vocab_size=49152,
                                  tie_word_embeddings=True, head_dim=64, max_position_embeddings=2048)
    return AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").eval()


def flops(model: torch.nn.Module, seq: int) -> int:
    """Multiply-adds x 2 per token: every projection, plus the attention scores and weighted sum."""
    total = 0
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            total += 2 * module.in_features * module.out_features
        elif type(module).__name__ == "Conv1D":
            total += 2 * module.nx * module.nf
    for name, module in model.named_modules():
        for attribute in ("o_proj", "dense"):
            projection = getattr(module, attribute, None)
            if name.endswith(("self_attn", "attention.output")) and isinstance(projection, torch.nn.Linear):
                total += 4 * seq * projection.in_features
    return total


def masks(layers: int, heads: int, ratio: float, with_mlps: bool, seed: int = 0) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    head_mask = torch.ones(layers * heads)
    head_mask[torch.randperm(layers * heads, generator=generator)[:round(ratio * layers * heads)]] = 0
    mlp_mask = torch.ones(layers)
    if with_mlps:
        mlp_mask[torch.randperm(layers, generator=generator)[:round(ratio * layers)]] = 0
    return {"heads": head_mask.view(layers, heads), "mlps": mlp_mask}


def compare(fns: dict, repeats: int) -> dict[str, float]:
    """Median seconds of each function, run round-robin (full, hooked, slim, full, ...) so that load changes on a
    shared machine hit all of them alike."""
    return round_robin_latency(fns, repeats=repeats).median_s


def median_interval(values: list[float]) -> tuple[float, float]:
    """Distribution-free ~95% confidence interval of the median: the order statistics k and n + 1 - k (1-based) with
    k = floor(n / 2 - 0.98 sqrt(n)) (the normal approximation of the binomial), at least 1: for 10 values or fewer
    it is their whole range."""
    ordered = sorted(values)
    k = max(int(len(ordered) / 2 - 0.98 * len(ordered) ** 0.5), 1)
    return ordered[k - 1], ordered[-k]


def ratio_with_spread(numerators: list[float], denominators: list[float],
                      scale: float = 1.0) -> tuple[float, float, list[float]]:
    """Median of the per-round ratios numerator / (scale x denominator), the half-width of its ~95% confidence
    interval relative to it (`median_interval`: how well the rounds pin the ratio down; it narrows as rounds are
    added), and the ratios."""
    ratios = [n / (scale * d) for n, d in zip(numerators, denominators)]
    median = statistics.median(ratios)
    low, high = median_interval(ratios)
    return median, (high - low) / 2 / median, ratios


def memory_mb(model: torch.nn.Module) -> float:
    return sum(t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers()]) / 2**20


@torch.no_grad()
def run(name: str, repeats: int, batch: int, seq: int, new_tokens: int) -> list[dict]:
    model = build(name)
    generator = torch.Generator().manual_seed(1)
    inputs = {"input_ids": torch.randint(5, 1000, (batch, seq), generator=generator),
              "attention_mask": torch.ones(batch, seq, dtype=torch.long)}
    causal = name != "bert-base"
    prunable = PrunableModel(model, PruningConfig(ablation="mean"))
    prunable.compute_means([inputs], show_progress=False)
    prunable.eval()

    def forward(m):
        return lambda: m(**inputs)

    prefix = {k: v[:, :32] for k, v in inputs.items()}

    def generate(m, tokens):
        return lambda: m.generate(**prefix, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False,
                                  pad_token_id=0)

    def unmasked(fn):
        def run_full():
            with prunable.masks_disabled():
                return fn()
        return run_full

    full_flops, full_memory = flops(model, seq), memory_mb(model)
    layers, heads = prunable.num_layers, prunable.num_heads
    rows, fulls = [], []
    for with_mlps in (False, True):
        for ratio in RATIOS:
            prunable.set_masks(masks(layers, heads, ratio, with_mlps))
            slim = prunable.export_slim()
            share = flops(slim, seq) / full_flops
            times = round_robin_times({"full": unmasked(forward(prunable)), "hooked": forward(prunable),
                                       "slim": forward(slim)}, repeats=repeats)
            full, hooked, ours = (statistics.median(times[name]) for name in ("full", "hooked", "slim"))
            over_limit, spread, per_round = ratio_with_spread(times["slim"], times["full"], share)
            fulls.append(full)
            row = {"model": name, "setting": f"{ratio:.0%} heads" + (f" + {ratio:.0%} MLPs" if with_mlps else ""),
                   "flops_share": share, "hooked_ratio": hooked / full, "slim_ratio": ours / full,
                   "slim_over_limit": over_limit, "slim_over_limit_spread": spread, "rounds": len(times["full"]),
                   "slim_over_limit_per_round": per_round,
                   "slim_over_limit_of_medians": ours / (share * full), "memory_ratio": memory_mb(slim) / full_memory,
                   "params_ratio": sum(p.numel() for p in slim.parameters())
                   / sum(p.numel() for p in model.parameters())}
            if causal and ratio == 0.5 and with_mlps:
                runs = compare({f"{what}{n}": (unmasked(generate(m, n)) if what == "full" else generate(m, n))
                                for what, m in (("full", prunable), ("hooked", prunable), ("slim", slim))
                                for n in (1, new_tokens + 1)}, repeats)
                token = {what: (runs[f"{what}{new_tokens + 1}"] - runs[f"{what}1"]) / new_tokens
                         for what in ("full", "hooked", "slim")}
                row.update(per_token_full_s=token["full"], per_token_hooked_ratio=token["hooked"] / token["full"],
                           per_token_slim_ratio=token["slim"] / token["full"])
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
            del slim
    return [{"model": name, "setting": "full", "latency_s": statistics.median(fulls),
             "per_token_s": next((r["per_token_full_s"] for r in rows if "per_token_full_s" in r), None)}, *rows]


def table(rows: list[dict]) -> str:
    lines = [("| model | removed | FLOPs share | hooked / full | slim / full | slim / (share x full) | params | "
             "model memory | per-token generate (hooked, slim) / full |"), "|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        if row["setting"] == "full":
            token = f", per token {row['per_token_s'] * 1e3:.1f} ms" if row["per_token_s"] else ""
            lines.append(f"| {row['model']} | none (full: {row['latency_s'] * 1e3:.0f} ms per forward{token}) "
                         "| 1 | 1 | 1 | 1 | 1 | 1 | |")
            continue
        token = (f"{row['per_token_hooked_ratio']:.2f}, {row['per_token_slim_ratio']:.2f}"
                 if "per_token_slim_ratio" in row else "")
        lines.append(f"| {row['model']} | {row['setting']} | {row['flops_share']:.2f} | {row['hooked_ratio']:.2f} | "
                     f"{row['slim_ratio']:.2f} | {row['slim_over_limit']:.2f} ± {row['slim_over_limit_spread']:.1%} | "
                     f"{row['params_ratio']:.2f} | "
                     f"{row['memory_ratio']:.2f} | {token} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="bert-base,smollm2")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--new_tokens", type=int, default=8)
    parser.add_argument("--json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rows = [row for name in args.models.split(",") for row in run(name, args.repeats, args.batch, args.seq,
                                                                  args.new_tokens)]
    print(table(rows))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(rows, handle, indent=2)


if __name__ == "__main__":
    main()
