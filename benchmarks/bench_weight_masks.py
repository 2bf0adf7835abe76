"""Cost of weight masks: a masked training step against a plain fwd+bwd, and the memory the mask logits add.

A BERT-base-shaped encoder (hidden 768, 12 layers, intermediate 3072; random init from a config, no download) with
Gumbel-sigmoid weight masks on every Linear (or a `--target_modules` / `--layers` subset). Measured, per step (median
of `--repeats` after a warm-up):

- plain: fwd + bwd of the unmasked model with trainable weights (what fine-tuning the model costs);
- masked: fwd + bwd of the frozen model through the masks (sample, w * m per weight, gradients to the logits only);

and the peak resident memory of each setting in its own process. The logits add 4 bytes per masked weight, their
gradients 4, Adam's moments 8: 16 bytes per masked weight against the 4 (fp32) or 2 (bf16) of the weight itself;
`--logits_dtype bfloat16` (`PruningConfig.logits_dtype`) halves all four: 8 bytes per masked weight.

    python benchmarks/bench_weight_masks.py --batch 8 --seq 128 --repeats 5 --output results_weight_masks.json
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


def main(argv=None) -> int:
    args = parse(argv)
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
