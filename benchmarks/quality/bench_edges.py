"""Edge masks vs node masks on IOI (SmolLM2-135M): MIB's curves of each level, and the cost of a step.

Per seed, two `PruningTrainer` runs with the short recipe on IOI-style template prompts (generated offline): node
masks (`granularity="unit"`, target `--node_target`) and edge masks (`granularity="edge"`, target `--edge_target`,
Edge Pruning's formulation through hooks). Each run's mask logits rank its units or edges as exported
(`softplus(logit)`), and each ranking gets MIB's faithfulness curve at its own level on a held-out set (`--ablation`,
logit difference): CPR (signed ranking) and CMD (|score| ranking) as MIB's print_results reports them. For the
comparison at equal faithfulness, every node circuit is also placed at the share of MIB's edges it implies (the
edges between its kept nodes, `circuits.export.edge_counts`), and the smallest edge share reaching f >= 0.8 is
read off both curves (linear between evaluated points; the summary's `f_reached_below_full` says whether any size
short of the full model reached it: if not, that share is the interpolation's, not the circuits').

Cost: seconds per training step and peak resident memory of the run (`ru_maxrss`, whole process, so the node run
goes first), per level. `--cost` measures only that, cleanly: one forward + backward of a batch of 8 prompts of 15
tokens with soft masks, best of 3, each level in its own process (peak memory above the loaded model's).

    python benchmarks/quality/bench_edges.py --seeds 0,1,2 --steps 300 \\
        --output benchmarks/quality/results/bench_edges/ioi_3seeds_300steps.json
    python benchmarks/quality/bench_edges.py --seeds 0 --steps 20 --eval_examples 16 --output /tmp/edges_smoke.json  # smoke
    python benchmarks/quality/bench_edges.py --cost \\
        --output benchmarks/quality/results/bench_edges/step-cost_smollm2_cpu_t2_idle.json

On a GPU (`--device cuda`), each run also records the CUDA peak memory it allocated (`peak_cuda_mb`, reset before the
run), and `--cost` times with CUDA synchronizes; `--random_weights` makes `--cost` build SmolLM2-135M's shape with
random weights (`offline_models.SMOLLM2_SHAPE`) where the GGUF file is not at hand (a step's cost does not depend on
the weights' values). Seeds run as separate processes (one `--output` each) are joined with `--merge`:

    python benchmarks/quality/bench_edges.py --merge s0.json s1.json s2.json --output ioi_3seeds.json

Results are written after every run; a re-run skips the runs already in `--output` (same settings).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).parent))

import torch  # noqa: E402
import transformers  # noqa: E402

from bench_circuits import ioi_task  # noqa: E402
from hf_heuristic_core import PrunableModel, PruningArguments, PruningConfig, PruningTrainer  # noqa: E402
from hf_heuristic_core.circuits.batches import metric_batches  # noqa: E402
from hf_heuristic_core.circuits.export import edge_counts  # noqa: E402
from hf_heuristic_core.circuits.faithfulness import faithfulness_curves  # noqa: E402
from hf_heuristic_core.circuits.mib import mib_config  # noqa: E402
from hf_heuristic_core.circuits.ranking import top_units  # noqa: E402
from hf_heuristic_core.circuits.sources import importance_from_logits  # noqa: E402
from hf_heuristic_core.io_utils import atomic_write_text  # noqa: E402

THRESHOLD = 0.8


def train(task: dict[str, Any], level: str, seed: int, options: argparse.Namespace) -> dict[str, Any]:
    """One pruning run of `level`; its logits, seconds per step and the process's peak memory after it."""
    granularity, target = ("edge", options.edge_target) if level == "edge" else ("unit", options.node_target)
    prunable = PrunableModel(task["model"], PruningConfig(granularity=granularity, ablation=options.ablation,
                                                          relaxation_settings={"init_mean": 3.0}))
    prunable.reset_masks(seed)
    args = PruningArguments(output_dir=str(Path(options.cache_dir) / f"{level}-{seed}"), recipe="short",
                            target_sparsity=target, max_steps=options.steps,
                            sparsity_warmup_steps=max(1, options.steps // 2),
                            per_device_train_batch_size=options.batch_size, teacher="cached",
                            convergence_check=False, use_cpu=options.device == "cpu", report_to="none",
                            save_strategy="no", disable_tqdm=True, logging_steps=50, seed=seed)
    train = task["train"].remove_columns([c for c in ("labels", "answer_id", "foil_id")
                                          if c in task["train"].column_names])
    train = train.select(range(min(len(train), options.steps * options.batch_size)))
    trainer = PruningTrainer(model=prunable, args=args, train_dataset=train, data_collator=task["collator"])
    on_cuda = options.device.startswith("cuda")
    if on_cuda:
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    peak_cuda = torch.cuda.max_memory_allocated() / 2**20 if on_cuda else None
    logits = {kind: value.detach().double().cpu().clone() for kind, value in prunable.mask_logits.items()}
    report = prunable.sparsity_report()
    prunable.unwrap()
    return {"seconds": seconds, "seconds_per_step": seconds / options.steps, "sparsity": report["sparsity"],
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "peak_cuda_mb": peak_cuda,
            "logits": {kind: value.tolist() for kind, value in logits.items()}}


def curve(task: dict[str, Any], level: str, runs: dict[str, dict], options: argparse.Namespace) -> dict[str, Any]:
    granularity = "edge" if level == "edge" else "unit"
    prunable = PrunableModel(task["model"], PruningConfig(granularity=granularity, ablation=options.ablation)).eval()
    if options.ablation == "mean":
        prunable.compute_means(task["train"].select(range(256)).remove_columns(["answer_id", "foil_id"]),
                               batch_size=16, collate_fn=task["collator"], show_progress=False)
    rankings = {name: {kind: importance_from_logits(torch.tensor(values)) for kind, values in run["logits"].items()}
                for name, run in runs.items()}
    batches = metric_batches(prunable, task["eval"], 16, task["collator"])
    curves = faithfulness_curves(prunable, None, rankings, batches=batches)
    out = {}
    cfg = mib_config(prunable)
    for name, result in curves.items():
        entry = result.to_dict()
        if level == "node":   # the share of MIB's edges each node circuit keeps
            entry["edge_share"] = [edge_counts(cfg, top_units(rankings[name], count))[0] /
                                   edge_counts(cfg, top_units(rankings[name], 0))[1] for count in result.units]
        else:
            entry["edge_share"] = [count / result.n_scored for count in result.units]
        entry["edge_share_for_f"] = share_reaching(entry["edge_share"], result.faithfulness, THRESHOLD)
        out[name] = entry
    prunable.unwrap()
    return out


def share_reaching(shares: list[float], faithfulness: list[float], threshold: float) -> float | None:
    """The smallest edge share at which f reaches `threshold`, linear between evaluated points (None: never)."""
    points = sorted(zip(shares, faithfulness))
    for (x1, y1), (x2, y2) in zip(points, points[1:]):
        if y1 >= threshold:
            return x1
        if y2 >= threshold:
            return x1 + (x2 - x1) * (threshold - y1) / (y2 - y1)
    return points[-1][0] if points and points[-1][1] >= threshold else None


def reached_below_full(shares: list[float], faithfulness: list[float], threshold: float) -> bool:
    """Whether some evaluated size short of the full model (share < 1) reaches f >= `threshold`. When none does, the
    interpolated `edge_share_for_f` lies on the last segment, which ends at the full model (f = 1 by definition): a
    number drawn by the interpolation, not by the circuits."""
    return any(share < 1.0 and f >= threshold for share, f in zip(shares, faithfulness))


def step_cost(level: str, options: argparse.Namespace) -> dict[str, Any]:
    """Seconds of one forward + backward (best of 3) and the memory it adds over the loaded model, in this process."""
    from hf_heuristic_core.offline_models import smollm2_gguf, smollm2_shaped_config
    if options.random_weights:
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(smollm2_shaped_config(), dtype=torch.float32)
    else:
        folder, name = smollm2_gguf()
        model = transformers.AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    on_cuda = options.device.startswith("cuda")
    model.to(options.device)
    loaded = (torch.cuda.memory_allocated() / 2**20 if on_cuda else
              resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    prunable = PrunableModel(model, PruningConfig(granularity="edge" if level == "edge" else "unit",
                                                  ablation="zero", relaxation_settings={"init_mean": 0.5})).train()
    ids = torch.randint(10, 1000, (8, 15), generator=torch.Generator().manual_seed(0)).to(options.device)
    times = []
    for _ in range(5 if on_cuda else 3):
        if on_cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        prunable(input_ids=ids).logits.pow(2).mean().backward()
        if on_cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    peak = (torch.cuda.max_memory_allocated() / 2**20 if on_cuda else
            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    return {"level": level, "seconds": min(times), "all_seconds": times,
            "memory": "CUDA allocated" if on_cuda else "process peak RSS", "peak_mb": peak, "loaded_mb": loaded,
            "added_mb": peak - loaded, "threads": options.threads, "device": options.device,
            "random_weights": options.random_weights}


def cost(options: argparse.Namespace) -> None:
    results = {}
    for level in ("node", "edge"):
        command = [sys.executable, __file__, "--cost_level", level, "--threads", str(options.threads),
                   "--device", options.device, "--output", "-"] + (["--random_weights"] if options.random_weights else [])
        done = subprocess.run(command, capture_output=True, text=True, check=True)
        results[level] = json.loads(done.stdout.strip().splitlines()[-1])
    results["edge_over_node_seconds"] = results["edge"]["seconds"] / results["node"]["seconds"]
    results["machine"] = {"cpu_count": os.cpu_count(), "platform": platform.platform(), "torch": torch.__version__,
                          "gpu": torch.cuda.get_device_name() if options.device.startswith("cuda") else None}
    Path(options.output).write_text(json.dumps(results, indent=1) + "\n")
    print(json.dumps(results, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--eval_examples", type=int, default=64)
    parser.add_argument("--node_target", type=float, default=0.5)
    parser.add_argument("--edge_target", type=float, default=0.9)
    parser.add_argument("--ablation", choices=("mean", "zero", "resample"), default="resample")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--cache_dir", default="/tmp/hhc_bench_edges")
    parser.add_argument("--output", required=True)
    parser.add_argument("--cost", action="store_true", help="only the cost of a step, per level (see the docstring)")
    parser.add_argument("--random_weights", action="store_true",
                        help="--cost only: SmolLM2-135M's shape with random weights (no GGUF file needed)")
    parser.add_argument("--merge", nargs="+", metavar="JSON",
                        help="join the --output files of one setting's seeds into --output and stop")
    parser.add_argument("--cost_level", choices=("node", "edge"), help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.merge:
        print(json.dumps(merge(options.merge, options.output)["summary"], indent=1))
        return
    torch.set_num_threads(options.threads)
    if options.cost_level:
        print(json.dumps(step_cost(options.cost_level, options)))
        return
    if options.cost:
        cost(options)
        return
    transformers.logging.set_verbosity_error()
    settings = {k: v for k, v in vars(options).items() if k not in ("output", "cache_dir", "device", "threads",
                                                                    "seeds")}
    path = Path(options.output)
    results = json.loads(path.read_text()) if path.is_file() else {"settings": settings, "runs": {}}
    if results["settings"] != settings:
        raise SystemExit(f"{path} was written with other settings ({results['settings']}); pass another --output.")
    results["machine"] = {"cpu_count": os.cpu_count(), "platform": platform.platform(), "torch": torch.__version__,
                          "transformers": transformers.__version__, "device": options.device,
                          "gpu": torch.cuda.get_device_name() if options.device.startswith("cuda") else None}

    def save() -> None:
        atomic_write_text(path, json.dumps(results, indent=1) + "\n")

    task = ioi_task(argparse.Namespace(steps=options.steps, batch_size=options.batch_size,
                                       eval_examples=options.eval_examples))
    task["model"].to(options.device)
    seeds = [int(s) for s in options.seeds.split(",")]
    for seed in seeds:
        for level in ("node", "edge"):      # node first: the process's peak memory then grows to the edge run's
            key = f"{level}/seed{seed}"
            if key not in results["runs"]:
                results["runs"][key] = train(task, level, seed, options)
                print(key, {k: v for k, v in results["runs"][key].items() if k != "logits"}, flush=True)
                save()
    for level in ("node", "edge"):
        runs = {key: run for key, run in results["runs"].items() if key.startswith(level)}
        results.setdefault("curves", {}).update(curve(task, level, runs, options))
        save()
    results["summary"] = summarize(results)
    save()
    print(json.dumps(results["summary"], indent=1))


def summarize(results: dict[str, Any]) -> dict[str, Any]:
    """Per level: the mean CPR and CMD over seeds, and each seed's edge share at f >= THRESHOLD (with whether any
    size short of the full model reached it: `reached_below_full`), step time, memory."""
    summary = {}
    for level in ("node", "edge"):
        names = sorted(k for k in results["curves"] if k.startswith(level))
        values = [results["curves"][k] for k in names]
        runs = [results["runs"][k] for k in names]
        summary[level] = {"seeds": len(names), "cpr_mean": sum(c["cpr"] for c in values) / len(values),
                          "cmd_mean": sum(c["cmd"] for c in values) / len(values),
                          "edge_share_for_f": [c["edge_share_for_f"] for c in values],
                          "f_reached_below_full": [reached_below_full(c["edge_share"], c["faithfulness"], THRESHOLD)
                                                   for c in values],
                          "seconds_per_step": [r["seconds_per_step"] for r in runs],
                          "peak_rss_mb": [r["peak_rss_mb"] for r in runs],
                          "peak_cuda_mb": [r.get("peak_cuda_mb") for r in runs]}
    return summary


def merge(files: list[str], output: str) -> dict[str, Any]:
    """Join the `--output` files of one setting's seeds (run as separate processes) into `output`.

    The curves of each seed were scored in its own process on the same held-out prompts (the task is generated from
    fixed seeds), so joining them is exact; files of other settings or with overlapping seeds are refused."""
    parts = [json.loads(Path(f).read_text()) for f in files]
    settings = parts[0]["settings"]
    joined: dict[str, Any] = {"settings": settings, "runs": {}, "curves": {}, "machine": parts[0]["machine"],
                              "merged_from": list(files)}
    for file, part in zip(files, parts):
        if part["settings"] != settings:
            raise SystemExit(f"{file} was written with other settings ({part['settings']}); merge one setting.")
        if "curves" not in part:
            raise SystemExit(f"{file} has no curves (its run did not finish); rerun it before merging.")
        for section in ("runs", "curves"):
            overlap = set(joined[section]) & set(part[section])
            if overlap:
                raise SystemExit(f"{file} repeats {sorted(overlap)}; each seed belongs in one file.")
            joined[section].update(part[section])
    joined["summary"] = summarize(joined)
    atomic_write_text(Path(output), json.dumps(joined, indent=1) + "\n")
    return joined


if __name__ == "__main__":
    main()
