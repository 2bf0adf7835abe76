"""How far a slim SmolLM2-135M's logits are from the hooked subnetwork's, and why: fp32 rounding or a real error.

For several random subnetworks (50% of the heads, 50% of the MLP blocks, mean ablation with means from real text)
it measures, over the real tokens of a batch of real sentences:

- `slim_vs_hooked_fp32`: the largest |logit difference| between the slim model and the hooked subnetwork in fp32
  (what the README's tolerance is about);
- `slim_vs_hooked_fp64`: the same with both models (and the folded means) in float64: if the export is exact, this is
  ~1e-12 and the fp32 difference is rounding (the slim model sums fewer, differently ordered terms);
- `fp32_vs_fp64_hooked`: the hooked subnetwork in fp32 against itself in fp64, the size of fp32 rounding of these
  logits with no export involved;
- `logit_scale`: the largest |logit|, for a relative reading.

    python benchmarks/quality/bench_slim_precision.py [--seeds 0,1,2] \\
        [--json benchmarks/quality/results/bench_slim_precision/smollm2_3seeds.json]
"""

from __future__ import annotations

import argparse
import json
import time

import torch
import transformers

from hf_heuristic_core import PrunableModel, PruningConfig, generate_nli
from hf_heuristic_core.offline_models import smollm2_gguf


def random_masks(layers: int, heads: int, seed: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    head_scores = torch.rand(layers, heads, generator=generator)
    head_mask = (head_scores < head_scores.flatten().median()).float()   # 50% of the heads
    mlp_scores = torch.rand(layers, generator=generator)
    mlp_mask = (mlp_scores < mlp_scores.median()).float()
    return {"heads": head_mask, "mlps": mlp_mask}


def batch_of_text(tokenizer, count: int, max_length: int) -> dict[str, torch.Tensor]:
    data = generate_nli(train_size=count, id_eval_size=2, ood_eval_size_per_subcase=1, seed=0)["train"]
    texts = [f"{p} {h}" for p, h in zip(data["premise"], data["hypothesis"])]
    return dict(tokenizer(texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt"))


def measure(model, batch, masks, dtype) -> tuple[torch.Tensor, torch.Tensor, int, int]:
    model = model.to(dtype)
    prunable = PrunableModel(model, PruningConfig(ablation="mean"))
    prunable.compute_means([batch], show_progress=False)   # kept in fp32; hooked and slim use the same values
    prunable.set_masks(masks)
    prunable.eval()
    with torch.no_grad():
        hooked = prunable(**batch).logits
        slim = prunable.export_slim()
        ours = slim(**batch).logits
        kv = sum(len(layer["kv_slots"]) for layer in slim.config.hf_heuristic_core_slim["layers"]
                 if layer["kv_slots"] != [-1])
    prunable.unwrap()
    original_kv = model.config.num_key_value_heads * model.config.num_hidden_layers
    return hooked, ours, kv, original_kv


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--examples", type=int, default=16)
    parser.add_argument("--max_length", type=int, default=48)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", default=None)
    options = parser.parse_args()
    torch.set_num_threads(options.threads)
    folder, name = smollm2_gguf()
    started = time.time()
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=name)
    tokenizer.pad_token = tokenizer.pad_token or tokenizer.eos_token
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32).eval()
    batch = batch_of_text(tokenizer, options.examples, options.max_length)
    real = batch["attention_mask"].bool()
    rows = []
    for seed in (int(s) for s in options.seeds.split(",")):
        masks = random_masks(model.config.num_hidden_layers, model.config.num_attention_heads, seed)
        hooked32, slim32, kv, original_kv = measure(model, batch, masks, torch.float32)
        hooked64, slim64, _, _ = measure(model, batch, masks, torch.float64)
        model.to(torch.float32)
        row = {"seed": seed,
               "slim_vs_hooked_fp32": float((hooked32 - slim32)[real].abs().max()),
               "slim_vs_hooked_fp64": float((hooked64 - slim64)[real].abs().max()),
               "fp32_vs_fp64_hooked": float((hooked32.double() - hooked64)[real].abs().max()),
               "fp32_vs_fp64_slim": float((slim32.double() - slim64)[real].abs().max()),
               "logit_scale": float(hooked64[real].abs().max()),
               "kv_heads_slim": kv, "kv_heads_original": original_kv}
        rows.append(row)
        print(json.dumps(row), flush=True)
    result = {"model": "SmolLM2-135M (GGUF, dequantized to fp32)", "examples": options.examples,
              "max_length": options.max_length, "real_tokens": int(real.sum()), "threads": options.threads,
              "seconds": round(time.time() - started, 1), "rows": rows}
    if options.json:
        with open(options.json, "w") as handle:
            json.dump(result, handle, indent=2)


if __name__ == "__main__":
    main()
