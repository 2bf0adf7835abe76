"""Generation speed of slim decoders: tokens per second of the full model, the hooked subnetwork and the slim model.

The real SmolLM2-135M (Llama, 30 layers, 9 query / 3 key-value heads; the offline GGUF, dequantized to float32),
random masks removing 50% of the heads and 50% of the MLP blocks (mean ablation, means from one batch), greedy
`generate` of a fixed number of new tokens (`min_new_tokens = max_new_tokens`, so EOS cannot shorten a run) from a
random prompt, at batch 1 and 8. Two slim models: the free layout of those masks (reloads with `load_slim`) and a
uniform layout (`uniform_layers`: the same whole key/value groups and MLP blocks in every layer, from the same
random scores; reloads with plain `from_pretrained`) next to its own hooked subnetwork. All models of a batch size
run round-robin in one process (`export.latency.round_robin_latency`), so load changes on a shared machine hit all
of them alike; ratios are the numbers to read, absolute tokens/s depend on the machine's load.

    python benchmarks/speed/bench_slim_generate.py --threads 2 \\
        --json benchmarks/speed/results/bench_slim_generate/smollm2_cpu_t2.json
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import transformers  # noqa: E402

from hf_heuristic_core import PrunableModel, PruningConfig  # noqa: E402
from hf_heuristic_core.export.latency import round_robin_latency  # noqa: E402
from hf_heuristic_core.offline_models import smollm2_gguf, smollm2_shaped_config  # noqa: E402


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--prompt", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--ratio", type=float, default=0.5)
    parser.add_argument("--json", default=None)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    parser.add_argument("--random_weights", action="store_true",
                        help="SmolLM2-135M's shape with random weights (no GGUF file needed)")
    return parser.parse_args()


def random_masks(layers: int, heads: int, ratio: float, seed: int = 0) -> dict[str, torch.Tensor]:
    """`ratio` of the heads and of the MLP blocks removed, uniformly at random."""
    generator = torch.Generator().manual_seed(seed)
    head_mask = torch.ones(layers * heads)
    head_mask[torch.randperm(layers * heads, generator=generator)[:round(ratio * layers * heads)]] = 0
    mlp_mask = torch.ones(layers)
    mlp_mask[torch.randperm(layers, generator=generator)[:round(ratio * layers)]] = 0
    return {"heads": head_mask.view(layers, heads), "mlps": mlp_mask}


def main() -> None:
    args = parse()
    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    if args.random_weights:
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(smollm2_shaped_config(), dtype=dtype,
                                                              attn_implementation="sdpa")
    else:
        folder, name = smollm2_gguf()
        model = transformers.AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=dtype,
                                                                  attn_implementation="sdpa")
    model = model.to(args.device).eval()
    config = model.config
    layers, heads = config.num_hidden_layers, config.num_attention_heads
    generator = torch.Generator().manual_seed(0)
    means_batch = {"input_ids": torch.randint(10, config.vocab_size, (4, 64), generator=generator)}
    means_batch["attention_mask"] = torch.ones_like(means_batch["input_ids"])
    means_batch = {key: value.to(args.device) for key, value in means_batch.items()}

    free = PrunableModel(model, PruningConfig(ablation="mean"))
    free.compute_means([means_batch], show_progress=False)
    free.set_masks(**random_masks(layers, heads, args.ratio))
    free.eval()
    slim_free = free.export_slim()
    free_masks = free.get_masks()

    # the uniform layout from random scores at the same sparsity (re-selected per layer, whole kv groups)
    with torch.no_grad():
        for _, logits in free.mask_logits.items():
            logits.copy_(torch.randn(logits.shape, generator=generator))
    free.pruning_config.uniform_layers = True
    uniform_masks = free.get_masks(binary=True, sparsity=args.ratio, ignore_fixed=True)
    free.pruning_config.uniform_layers = False
    slim_uniform = free.export_slim(masks=uniform_masks, uniform=True)

    def run(model_or_wrapper, batch, masks=None, unmasked=False):
        def generate():
            if masks is not None:
                free.set_masks(**masks)
            kwargs = {"max_new_tokens": args.new_tokens, "min_new_tokens": args.new_tokens, "do_sample": False,
                      "pad_token_id": config.eos_token_id}
            with torch.no_grad():
                if unmasked:
                    with free.masks_disabled():
                        out = model_or_wrapper.generate(**batch, **kwargs)
                else:
                    out = model_or_wrapper.generate(**batch, **kwargs)
            if out.device.type == "cuda":
                torch.cuda.synchronize()
            return out
        return generate

    results = {"setting": vars(args), "torch": torch.__version__, "transformers": transformers.__version__,
               "device": torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu",
               "parameters": {"full": sum(p.numel() for p in model.parameters()),
                              "slim_free": sum(p.numel() for p in slim_free.parameters()),
                              "slim_uniform": sum(p.numel() for p in slim_uniform.parameters())},
               "uniform_layout": {"heads_per_layer": int(uniform_masks["heads"][0].sum()),
                                  "mlps_kept": int(uniform_masks["mlps"].sum()),
                                  "stock": slim_uniform.config.hf_heuristic_core_slim["stock"]},
               "free_layout": {"heads_kept": int(free_masks["heads"].sum()),
                               "mlps_kept": int(free_masks["mlps"].sum())},
               "rows": {}}
    for batch_size in [int(b) for b in args.batches.split(",")]:
        prompt = torch.randint(10, config.vocab_size, (batch_size, args.prompt), generator=generator)
        batch = {"input_ids": prompt.to(args.device), "attention_mask": torch.ones_like(prompt).to(args.device)}
        fns = {"full": run(free, batch, unmasked=True), "hooked_free": run(free, batch, free_masks),
               "slim_free": run(slim_free, batch), "hooked_uniform": run(free, batch, uniform_masks),
               "slim_uniform": run(slim_uniform, batch)}
        timing = round_robin_latency(fns, repeats=args.repeats, warmup=1)
        tokens = batch_size * args.new_tokens
        row = {name: {"seconds": seconds, "tokens_per_s": tokens / seconds}
               for name, seconds in timing.median_s.items()}
        for name in row:
            row[name]["vs_full"] = row[name]["tokens_per_s"] / row["full"]["tokens_per_s"]
        row["rounds"] = timing.rounds
        results["rows"][str(batch_size)] = row
        print(f"batch {batch_size}: " + ", ".join(f"{n} {v['tokens_per_s']:.1f} tok/s ({v['vs_full']:.2f}x)"
                                                   for n, v in row.items() if isinstance(v, dict)), flush=True)
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps({k: v for k, v in results.items() if k != "rows"}, indent=2))


if __name__ == "__main__":
    main()
