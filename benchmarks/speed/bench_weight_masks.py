"""Cost of weight masks: a masked training step against a plain fwd+bwd, and the memory the mask logits add.

A BERT-base-shaped encoder (hidden 768, 12 layers, intermediate 3072; random init from a config, no download) with
Gumbel-sigmoid weight masks on every Linear (or a `--target_modules` / `--layers` subset). Measured, per step (median
of `--repeats` after a warm-up):

- plain: fwd + bwd of the unmasked model with trainable weights (what fine-tuning the model costs);
- masked: fwd + bwd of the frozen model through the masks (sample, w * m per weight, gradients to the logits only);

and the peak resident memory of each setting in its own process. The logits add 4 bytes per masked weight, their
gradients 4, Adam's moments 8: 16 bytes per masked weight against the 4 (fp32) or 2 (bf16) of the weight itself;
`--logits_dtype bfloat16` (`PruningConfig.logits_dtype`) halves all four: 8 bytes per masked weight.

    python benchmarks/speed/bench_weight_masks.py --batch 8 --seq 128 --repeats 5 \\
        --output benchmarks/speed/results/bench_weight_masks/bert-base_b8_fp32_cpu_t2.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def parse(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--layers", type=str, default=None, help="layers_to_transform, e.g. 8-11")
    parser.add_argument("--target_modules", type=str, default=None, help="comma-separated module names")
    parser.add_argument("--relaxation", default="gumbel_sigmoid")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--logits_dtype", choices=("float32", "bfloat16"), default="float32",
                        help="PruningConfig.logits_dtype: bfloat16 stores logits, grads and Adam state in 2 bytes")
    parser.add_argument("--precision_check", action="store_true",
                        help="Instead: train masks on a small MLP with fp32 and with bf16 logits and compare them")
    parser.add_argument("--mode", choices=("plain", "masked"), default=None, help="(internal) one setting only")
    parser.add_argument("--output", default=None)
    return parser.parse_args(argv)


def build_model():
    import torch
    import transformers
    config = transformers.BertConfig(hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                                     intermediate_size=3072, num_labels=3, hidden_dropout_prob=0.0,
                                     attention_probs_dropout_prob=0.0)
    torch.manual_seed(0)
    return transformers.BertForSequenceClassification(config).eval()


def run_one(args: argparse.Namespace) -> dict:
    import torch
    torch.set_num_threads(args.threads)
    from hf_heuristic_core import PrunableModel, PruningConfig
    from hf_heuristic_core.cli.prune import parse_layers
    model = build_model()
    ids = torch.randint(1000, 20000, (args.batch, args.seq), generator=torch.Generator().manual_seed(0))
    labels = torch.randint(0, 3, (args.batch,))
    masked_weights = 0
    if args.mode == "masked":
        config = PruningConfig(granularity="weight", relaxation=args.relaxation, mask_samples=1,
                               logits_dtype=args.logits_dtype,
                               target_modules=args.target_modules.split(",") if args.target_modules else None,
                               layers_to_transform=parse_layers(args.layers) if args.layers else None)
        model = PrunableModel(model, config)
        model.train()
        params = [p for _, p in model.mask_logits.items()]
        masked_weights = sum(p.numel() for p in params)
    else:
        params = list(model.parameters())
    optimizer = torch.optim.Adam(params, lr=1e-3)
    times = []
    for step in range(args.repeats + 1):
        start = time.perf_counter()
        logits = model(input_ids=ids).logits
        loss = torch.nn.functional.cross_entropy(logits, labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step > 0:
            times.append(time.perf_counter() - start)
    return {"mode": args.mode, "median_s": statistics.median(times), "times_s": times,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "masked_weights": masked_weights,
            "model_params": sum(p.numel() for p in build_model().parameters())}


def precision_check() -> list[dict]:
    """Does bf16 storage of the logits change what masks learn? A 16-128-128-4 MLP trained on 4 classes from two
    input signs, frozen; then 600 mask steps (Adam) with fp32 and with bf16 logits from the same seed: final task loss,
    accuracy of the binary masks, kept share, and agreement of the two binary masks."""
    import copy
    import torch
    from torch import nn
    from hf_heuristic_core import PrunableModel, PruningConfig
    from hf_heuristic_core.training.objectives import sparsity_penalty
    torch.set_num_threads(1)
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(1024, 16, generator=generator)
    y = (x[:, 0] > 0).long() + 2 * (x[:, 1] > 0).long()
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(16, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 4))
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-2)
    for _ in range(300):
        optimizer.zero_grad()
        nn.functional.cross_entropy(net(x), y).backward()
        optimizer.step()
    net.requires_grad_(False)
    rows = []
    for relaxation, lr, weight in (("continuous_sparsification", 1e-2, 1e-4), ("continuous_sparsification", 1e-4, 1e-4),
                                   ("gumbel_sigmoid", 1e-2, 1e-3)):
        out = {}
        for dtype in ("float32", "bfloat16"):
            pm = PrunableModel(copy.deepcopy(net), PruningConfig(granularity="weight", relaxation=relaxation,
                                                                 logits_dtype=dtype, mask_samples=1))
            pm.generator = torch.Generator().manual_seed(0)
            pm.reset_masks(0)
            opt = torch.optim.Adam([p for _, p in pm.mask_logits.items()], lr=lr)
            pm.train()
            for step in range(600):
                if relaxation == "continuous_sparsification" and step % 60 == 59:   # 10 "epochs", beta 1 -> 200
                    pm.update_relaxation(cs_beta=200 ** ((step + 1) / 600))
                loss = nn.functional.cross_entropy(pm(x), y)
                opt.zero_grad()
                (loss + sparsity_penalty(pm, weight, len(y))).backward()
                opt.step()
            pm.eval()
            masks = pm.get_masks()
            with torch.no_grad():
                accuracy = float((pm(x).argmax(-1) == y).float().mean())
            kept = sum(float(m.sum()) for m in masks.values()) / sum(m.numel() for m in masks.values())
            out[dtype] = {"loss": float(loss.detach()), "accuracy": accuracy, "kept": kept, "masks": masks}
        a, b = out["float32"]["masks"], out["bfloat16"]["masks"]
        agree = sum(float((a[k] == b[k]).sum()) for k in a) / sum(a[k].numel() for k in a)
        row = {"relaxation": relaxation, "lr": lr, "mask_agreement": agree,
               **{f"{key}_{dtype}": out[dtype][key] for dtype in out for key in ("loss", "accuracy", "kept")}}
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def main(argv=None) -> int:
    args = parse(argv)
    if args.precision_check:
        rows = precision_check()
        if args.output:
            with open(args.output, "w") as handle:
                json.dump(rows, handle, indent=2)
        return 0
    if args.mode is not None:
        print(json.dumps(run_one(args)))
        return 0
    results = {}
    for mode in ("plain", "masked"):
        command = [sys.executable, __file__, "--mode", mode] + [
            flag for key in ("batch", "seq", "repeats", "layers", "target_modules", "relaxation", "threads",
                                "logits_dtype")
            if getattr(args, key) is not None for flag in (f"--{key}", str(getattr(args, key)))]
        output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
        results[mode] = json.loads(output.strip().splitlines()[-1])
    ratio = results["masked"]["median_s"] / results["plain"]["median_s"]
    width = 2 if args.logits_dtype == "bfloat16" else 4
    summary = {"settings": {k: v for k, v in vars(args).items() if k not in ("mode", "output")},
               "plain": results["plain"], "masked": results["masked"], "step_ratio": ratio,
               "logit_bytes": width * results["masked"]["masked_weights"],
               "logit_training_bytes": 4 * width * results["masked"]["masked_weights"],   # logit, grad, 2 moments
               "peak_rss_ratio": results["masked"]["peak_rss_mb"] / results["plain"]["peak_rss_mb"]}
    print(json.dumps({k: v for k, v in summary.items() if k not in ("plain", "masked")}, indent=2))
    print(f"plain {results['plain']['median_s']:.3f} s/step, masked {results['masked']['median_s']:.3f} s/step "
          f"-> ratio {ratio:.2f} (target <= 1.5); peak RSS {results['plain']['peak_rss_mb']:.0f} MB vs "
          f"{results['masked']['peak_rss_mb']:.0f} MB")
    if args.output:
        with open(args.output, "w") as handle:
            json.dump(summary, handle, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
