"""Learned masks vs attribution on MIB's circuit metrics, CPU scale: CPR, CMD, wall time, steps to the cold KL.

Per task and seed, on data generated offline:

* **learned (cold)**: `PruningTrainer`, short recipe, target sparsity `--target`, `--steps` steps; its logits rank the
  units for the faithfulness curve, as the importance score a mask artifact exports (softplus of the logit: the
  logits' order, by the signed score and by |score| alike);
* **attribution patching** and **integrated gradients** (`--ig_steps`) on `--attr_examples` training examples (a
  different slice per seed), through the mask hooks;
* **learned (warm)**: the same pruning run, mask logits warm-started from the integrated-gradients scores;
* **random**: a random ranking.

Every ranking gets MIB's faithfulness curve (`--ablation`, the pruning run's too: mean with the pruning means by
default, resample for IOI as the closest to MIB's counterfactual patching; logit difference; sizes 0.1% .. 100% of
heads + MLP blocks) on a held-out evaluation set; CPR (signed ranking) and CMD (|score| ranking) as MIB's
print_results reports them, by MIB's trapezoid rule. Both pruning runs
record KL(full || subnetwork at the target sparsity) on the evaluation set every `--eval_every` steps (and at step
0); "steps to the cold KL" is the first step at which the warm run's KL is at or below the cold run's final KL.

Tasks: `nli` (the study's generated HANS-style NLI on all-MiniLM-L6-v2 with a 2-way head fine-tuned here first,
cached in `--cache_dir`) and `ioi` (IOI-style template prompts on SmolLM2-135M, GGUF weights). Results are written
to `--output` after every stage, and a re-run skips stages already there.

    python benchmarks/quality/bench_circuits.py --task nli --seeds 0,1,2 --device cuda \
        --output benchmarks/quality/results/bench_circuits/nli_h200.json
    python benchmarks/quality/bench_circuits.py --task ioi --ablation resample --steps 300 --eval_examples 64 \
        --attr_examples 64 --seeds 0,1,2 --device cuda --output benchmarks/quality/results/bench_circuits/ioi_h200.json

`--curves_only --recompute_curves` redraws every curve from the stored scores (the runs themselves are not repeated;
the curves' machine is recorded as `curves_machine`). (The results in docs/benchmarks/circuits.md; on a CPU leave out
`--device cuda`, and run under `nice` on a shared
machine: a 300-step NLI pruning run takes ~15-20 minutes on one loaded core, ~35 s on an H200)
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
import transformers  # noqa: E402

from hf_heuristic_core import PrunableModel, PruningArguments, PruningConfig, PruningTrainer  # noqa: E402
from hf_heuristic_core.circuits.attribution import attribution_scores  # noqa: E402
from hf_heuristic_core.circuits.batches import metric_batches  # noqa: E402
from hf_heuristic_core.circuits.faithfulness import faithfulness_curves  # noqa: E402
from hf_heuristic_core.circuits.ioi import generate_ioi, tokenize_ioi  # noqa: E402
from hf_heuristic_core.circuits.mib import mib_config, write_mib_circuit  # noqa: E402
from hf_heuristic_core.circuits.ranking import random_scores  # noqa: E402
from hf_heuristic_core.circuits.sources import importance_from_logits  # noqa: E402
from hf_heuristic_core.training.losses import kl_to_teacher  # noqa: E402

logger = logging.getLogger("bench_circuits")


# ------------------------------------------------------------------ results file
class Results:
    def __init__(self, path: Path, settings: dict[str, Any]) -> None:
        self.path = path
        self.data = json.loads(path.read_text()) if path.is_file() else {}
        old = self.data.get("settings")
        free = ("threads", "seeds", "extra_spreads")   # more seeds or arms may be added to a results file later
        implied = {"ablation": "mean"}                 # settings older files were written without
        keys = (set(old or {}) | set(settings)) - set(free)
        if old is not None and any(old.get(k, implied.get(k)) != settings.get(k, implied.get(k)) for k in keys):
            raise SystemExit(f"{path} was written with other settings ({old}); pass another --output.")
        self.data["settings"] = settings
        self.data.setdefault("stages", {})

    def has(self, key: str) -> bool:
        return key in self.data["stages"]

    def get(self, key: str) -> Any:
        return self.data["stages"][key]

    def put(self, key: str, value: Any) -> None:
        self.data["stages"][key] = value
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1) + "\n")
        tmp.replace(self.path)


# ------------------------------------------------------------------ tasks
def nli_task(options) -> dict[str, Any]:
    from hf_heuristic_core import generate_nli
    from hf_heuristic_core.data.tokenize import tokenize_dataset
    from hf_heuristic_core.offline_models import minilm_path
    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_path())
    folder = Path(options.cache_dir) / "minilm-nli"
    data = generate_nli(train_size=4000, id_eval_size=options.eval_examples, ood_eval_size_per_subcase=0, seed=0)
    train = tokenize_dataset(data["train"], tokenizer, None, 40, keep_labels=True)
    evaluation = tokenize_dataset(data["id_eval"], tokenizer, None, 40, keep_labels=True)
    if not (folder / "done.json").is_file():
        start = time.time()
        torch.manual_seed(0)
        model = transformers.AutoModelForSequenceClassification.from_pretrained(minilm_path(), num_labels=2)
        args = transformers.TrainingArguments(output_dir=str(folder / "run"), max_steps=100,
                                              per_device_train_batch_size=32, learning_rate=1e-4, warmup_steps=10,
                                              report_to="none", use_cpu=options.device == "cpu", save_strategy="no",
                                              disable_tqdm=True, seed=0, logging_steps=40)
        transformers.Trainer(model=model, args=args, train_dataset=train,
                             data_collator=transformers.DataCollatorWithPadding(tokenizer)).train()
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        (folder / "done.json").write_text(json.dumps({"seconds": time.time() - start, "steps": 100, "batch": 32}))
    model = transformers.AutoModelForSequenceClassification.from_pretrained(folder)
    return {"model": model, "tokenizer": tokenizer, "train": train, "eval": evaluation,
            "collator": transformers.DataCollatorWithPadding(tokenizer), "name": "MiniLM-L6 (fine-tuned 2-way head), "
            "generated HANS-style NLI"}


def ioi_task(options) -> dict[str, Any]:
    from hf_heuristic_core.offline_models import smollm2_gguf
    folder, name = smollm2_gguf()
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=name)
    tokenizer.pad_token = tokenizer.pad_token or tokenizer.eos_token
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    model.config.pad_token_id = tokenizer.pad_token_id
    # GGUF weights are dequantized to fp32, but the model keeps its GGUF quantizer (is_quantized True), and
    # transformers' Trainer refuses to train "purely quantized models" (PruningTrainer included, though only mask
    # logits train). Drop the quantizer with transformers' own call.
    model.hf_quantizer.remove_quantization_config(model)
    train = tokenize_ioi(generate_ioi(options.steps * options.batch_size, seed=1), tokenizer)
    evaluation = tokenize_ioi(generate_ioi(options.eval_examples, seed=2), tokenizer)
    return {"model": model, "tokenizer": tokenizer, "train": train, "eval": evaluation,
            "collator": transformers.DataCollatorWithPadding(tokenizer), "name": "SmolLM2-135M, IOI templates"}


# ------------------------------------------------------------------ measurements
class KLTrace(transformers.TrainerCallback):
    """KL(full || subnetwork at the target sparsity, the run's own binarization) on fixed batches, every N steps."""

    def __init__(self, batches: list, teacher: list, every: int) -> None:
        self.batches, self.teacher, self.every = batches, teacher, every
        self.trainer = None
        self.trace: list[tuple[int, float]] = []
        self.seconds = 0.0   # time spent measuring, left out of the run's wall time

    def measure(self, step: int) -> None:
        start = time.perf_counter()
        prunable = self.trainer.prunable
        masks = self.trainer.final_masks()
        was_training = prunable.training
        prunable.eval()
        total = count = 0.0
        with torch.no_grad(), prunable.masks_applied(masks):
            for batch, full in zip(self.batches, self.teacher):
                student = prunable(**batch.inputs).logits
                mask = batch.inputs.get("attention_mask") if student.dim() == 3 else None
                items = float(mask.sum()) if mask is not None else student.shape[0]
                total += float(kl_to_teacher(student, full, mask)) * items
                count += items
        prunable.train(was_training)
        self.trace.append((step, total / count))
        self.seconds += time.perf_counter() - start

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step % self.every == 0:
            self.measure(state.global_step)


def prune(task, prunable, options, seed: int, warm_scores: str | None, kl_batches, teacher, out_dir: Path,
          spread: float):
    prunable.reset_masks(seed)   # N(init_mean = 3, 0.01) from this seed; a warm start then replaces them
    args = PruningArguments(output_dir=str(out_dir), recipe="short", target_sparsity=options.target,
                            max_steps=options.steps, sparsity_warmup_steps=max(1, options.steps // 2),
                            per_device_train_batch_size=options.batch_size, per_device_eval_batch_size=16,
                            teacher="cached", convergence_subnetworks=4, convergence_batches=2,
                            use_cpu=options.device == "cpu",
                            report_to="none", save_strategy="no", disable_tqdm=True, logging_steps=50, seed=seed,
                            warm_start_scores=warm_scores, warm_start_spread=spread)
    trace = KLTrace(kl_batches, teacher, options.eval_every)
    train = task["train"].remove_columns([c for c in ("labels", "answer_id", "foil_id")
                                          if c in task["train"].column_names])
    train = train.select(range(min(len(train), options.steps * options.batch_size)))   # one pass, as the study
    trainer = PruningTrainer(model=prunable, args=args, train_dataset=train, data_collator=task["collator"],
                             callbacks=[trace])
    trace.trainer = trainer
    trace.measure(0)
    trace.seconds = 0.0
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start - trace.seconds
    logits = {kind: value.detach().double().cpu().clone() for kind, value in prunable.mask_logits.items()}
    report = prunable.sparsity_report()
    convergence = trainer.convergence.to_dict() if trainer.convergence else None
    prunable.clear_masks()
    return {"seconds": seconds, "kl_trace": trace.trace, "final_kl": trace.trace[-1][1], "sparsity": report["sparsity"],
            "convergence": convergence, "recipe": trainer.recipe_settings}, logits


LABELS = {"learned_cold": "learned masks", "learned_warm": "learned, warm start (IG)",
          "patching": "attribution patching", "integrated_gradients": "integrated gradients",
          "random": "random ranking"}


def to_lists(scores: dict[str, torch.Tensor]) -> dict[str, list]:
    return {k: v.tolist() for k, v in scores.items()}


def from_lists(scores: dict[str, list]) -> dict[str, torch.Tensor]:
    return {k: torch.tensor(v, dtype=torch.float64) for k, v in scores.items()}


def steps_to_reach(trace: list, target: float) -> int | None:
    return next((step for step, kl in trace if kl <= target), None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", choices=("nli", "ioi"), required=True)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--steps", type=int, default=None, help="pruning steps (nli 300, ioi 150)")
    parser.add_argument("--batch_size", type=int, default=None, help="pruning batch (nli 16, ioi 8)")
    parser.add_argument("--eval_examples", type=int, default=None, help="held-out examples (nli 200, ioi 64)")
    parser.add_argument("--attr_examples", type=int, default=128)
    parser.add_argument("--means_examples", type=int, default=512)
    parser.add_argument("--ig_steps", type=int, default=5)
    parser.add_argument("--target", type=float, default=0.5)
    parser.add_argument("--ablation", choices=("mean", "zero", "resample"), default="mean",
                        help="for pruning, attribution and the curves (resample: closest to MIB's patching)")
    parser.add_argument("--spread", type=float, default=3.0)
    parser.add_argument("--extra_spreads", default="", help="more warm-start arms, e.g. 1,0.5")
    parser.add_argument("--eval_every", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu", help="cpu or cuda (every stage runs there)")
    parser.add_argument("--cache_dir", default="/tmp/hhc_bench_circuits")
    parser.add_argument("--output", required=True)
    parser.add_argument("--figure", default=None, help="also draw the curves (mean and min-max over seeds) here")
    parser.add_argument("--curves_only", action="store_true",
                        help="run no attribution or pruning: curves and summary for the stages already in --output "
                             "(a run cut off before its last seed still gets its numbers)")
    parser.add_argument("--recompute_curves", action="store_true",
                        help="with --curves_only: draw every curve again (the earlier ones are kept under "
                             "'curves_before_recompute')")
    options = parser.parse_args()
    defaults = {"nli": (300, 16, 200), "ioi": (150, 8, 64)}[options.task]
    options.steps = options.steps or defaults[0]
    options.batch_size = options.batch_size or defaults[1]
    options.eval_examples = options.eval_examples or defaults[2]
    torch.set_num_threads(options.threads)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    transformers.logging.set_verbosity_error()
    seeds = [int(s) for s in options.seeds.split(",")]
    options.extra_spreads = [float(v) for v in options.extra_spreads.split(",") if v.strip()]
    settings = {k: v for k, v in vars(options).items()
                if k not in ("output", "cache_dir", "figure", "curves_only", "device")}
    if options.recompute_curves and not options.curves_only:
        raise SystemExit("--recompute_curves redraws the curves of stored runs: pass --curves_only with it.")
    settings = {k: v for k, v in settings.items() if k != "recompute_curves"}
    results = Results(Path(options.output), settings)
    gpu = torch.cuda.get_device_name() if options.device.startswith("cuda") else None
    machine_key = "curves_machine" if options.curves_only and "machine" in results.data else "machine"
    results.data[machine_key] = {"cpu_count": os.cpu_count(), "platform": platform.platform(), "torch": torch.__version__,
                               "transformers": transformers.__version__, "device": options.device, "gpu": gpu,
                               "note": f"one {gpu}" if gpu else "shared 2-core machine, loaded (nice 10)"}

    task = {"nli": nli_task, "ioi": ioi_task}[options.task](options)
    results.data["task"] = task["name"]
    task["model"].to(options.device)
    config = PruningConfig(ablation=options.ablation, relaxation_settings={"init_mean": 3.0})
    prunable = PrunableModel(task["model"], config).eval()
    if options.ablation == "mean":
        means_data = task["train"].select(range(min(options.means_examples, len(task["train"]))))
        prunable.compute_means(means_data.remove_columns([c for c in ("labels", "answer_id", "foil_id")
                                                          if c in means_data.column_names]),
                               batch_size=16, collate_fn=task["collator"], show_progress=False)
    eval_batches = metric_batches(prunable, task["eval"], 16, task["collator"])
    with torch.no_grad(), prunable.masks_disabled():
        teacher = [prunable(**b.inputs).logits for b in eval_batches]
    cache = Path(options.cache_dir) / f"scores-{options.task}"
    cache.mkdir(parents=True, exist_ok=True)
    cfg = mib_config(prunable)

    rankings: dict[str, dict[str, Any]] = {}
    for seed in seeds:
        # Attribution on a seed-dependent slice of the training data.
        subset = task["train"].select(range(seed * options.attr_examples, (seed + 1) * options.attr_examples))
        for method in ("patching", "integrated_gradients"):
            key = f"{method}/seed{seed}"
            if not results.has(key) and options.curves_only:
                continue
            if not results.has(key):
                result = attribution_scores(prunable, subset, method=method, steps=options.ig_steps, batch_size=16,
                                            collate_fn=task["collator"])
                results.put(key, {**result.describe(), "scores": to_lists(result.scores)})
            rankings[key] = from_lists(results.get(key)["scores"])
        if options.curves_only and f"integrated_gradients/seed{seed}" not in rankings:
            rankings[f"random/seed{seed}"] = random_scores(prunable.mask_shapes(), seed)
            continue
        write_mib_circuit(cache / f"ig-seed{seed}.json", cfg, scores=rankings[f"integrated_gradients/seed{seed}"])
        ig_file = str(cache / f"ig-seed{seed}.json")
        arms = [("learned_cold", None, options.spread), ("learned_warm", ig_file, options.spread)]
        arms += [(f"learned_warm_spread{v:g}", ig_file, v) for v in options.extra_spreads]
        for arm, warm, spread in arms:
            key = f"{arm}/seed{seed}"
            if not results.has(key) and options.curves_only:
                continue
            if not results.has(key):
                record, logits = prune(task, prunable, options, seed, warm, eval_batches, teacher,
                                       Path(options.cache_dir) / f"{options.task}-{arm}-{seed}", spread)
                results.put(key, {**record, "scores": to_lists(logits)})
                logger.info("%s: %.0f s, final KL %.4g", key, record["seconds"], record["final_kl"])
            stored = results.get(key)["scores"]      # the mask logits; ranked as an artifact exports them
            rankings[key] = {**{k: torch.full(tuple(s), float("nan")) for k, s in prunable.mask_shapes().items()},
                             **{k: importance_from_logits(v) for k, v in from_lists(stored).items()}}
        rankings[f"random/seed{seed}"] = random_scores(prunable.mask_shapes(), seed)

    stored = results.get("curves") if results.has("curves") else {}
    if options.recompute_curves and stored:
        results.data.setdefault("curves_before_recompute", stored)
        stored = {}
    missing = {name: scores for name, scores in rankings.items() if name not in stored}
    if missing:
        start = time.perf_counter()
        curves = faithfulness_curves(prunable, None, missing, batches=eval_batches)
        results.put("curves", {**stored, **{name: curve.to_dict() for name, curve in curves.items()}})
        results.data[f"curves_seconds_{len(missing)}_rankings"] = time.perf_counter() - start
    done = sorted({int(k.split("seed")[-1]) for k in results.get("curves") if k.split("/")[0] != "random"})
    results.put("summary", summarize(results, done))
    print(json.dumps(results.get("summary"), indent=1))
    if options.figure:
        from hf_heuristic_core.plotting import plot_faithfulness_curves
        grouped: dict[str, list] = {}
        for name, curve in results.get("curves").items():
            grouped.setdefault(LABELS.get(name.split("/")[0], name.split("/")[0]), []).append(curve)
        plot_faithfulness_curves(grouped, path=options.figure,
                                 title=f"{task['name']} ({options.ablation} ablation)").clear()


def summarize(results: Results, seeds: list[int]) -> dict[str, Any]:
    curves = results.get("curves")
    summary: dict[str, Any] = {"methods": {}, "per_seed": {}}
    extra = sorted({k.split("/")[0] for k in curves if k.startswith("learned_warm_spread")})
    for method in ("learned_cold", "learned_warm", "patching", "integrated_gradients", "random", *extra):
        have = [s for s in seeds if f"{method}/seed{s}" in curves]
        if not have:
            continue
        cprs = [curves[f"{method}/seed{s}"]["cpr"] for s in have]
        cmds = [curves[f"{method}/seed{s}"]["cmd"] for s in have]
        signed = [curves[f"{method}/seed{s}"].get("cmd_signed_ranking") for s in have]
        entry = {"seeds": have, "cpr": cprs, "cmd": cmds, "cpr_mean": sum(cprs) / len(cprs),
                 "cmd_mean": sum(cmds) / len(cmds), "cmd_signed_ranking": signed,
                 "cmd_signed_ranking_mean": sum(signed) / len(signed) if None not in signed else None,
                 "f_mean": [sum(curves[f"{method}/seed{s}"]["faithfulness"][i] for s in have) / len(have)
                            for i in range(len(curves[f"{method}/seed{have[0]}"]["sizes"]))]}
        if method != "random":
            entry["seconds"] = [results.get(f"{method}/seed{s}")["seconds"] for s in have]
        if method.startswith("learned"):
            entry["final_kl"] = [results.get(f"{method}/seed{s}")["final_kl"] for s in have]
        summary["methods"][method] = entry
    for s in seeds:
        if not results.has(f"learned_cold/seed{s}"):
            continue
        cold = results.get(f"learned_cold/seed{s}")
        target = cold["final_kl"]
        row = {"cold_final_kl": target, "cold_kl_at_step0": cold["kl_trace"][0][1],
               "steps_cold_to_own_final_kl": steps_to_reach(cold["kl_trace"], target),
               "total_steps": results.data["settings"]["steps"]}
        for arm in ("learned_warm", *extra):
            if results.has(f"{arm}/seed{s}"):
                warm = results.get(f"{arm}/seed{s}")
                row[arm] = {"final_kl": warm["final_kl"], "kl_at_step0": warm["kl_trace"][0][1],
                            "steps_to_cold_final_kl": steps_to_reach(warm["kl_trace"], target)}
        summary["per_seed"][s] = row
    # Goals on the seeds that have both sides; a goal without data is None, never True.
    methods = summary["methods"]
    learned, attribution = methods.get("learned_cold"), methods.get("integrated_gradients")
    both = sorted(set(learned["seeds"]) & set(attribution["seeds"])) if learned and attribution else []

    def mean(method: str, key: str) -> float:
        return sum(curves[f"{method}/seed{s}"][key] for s in both) / len(both)

    warm = [v for v in summary["per_seed"].values() if "learned_warm" in v]
    summary["goals"] = {
        "seeds_compared": both,
        "learned_cpr_ge_attribution": mean("learned_cold", "cpr") >= mean("integrated_gradients", "cpr")
        if both else None,
        "learned_cmd_le_attribution": mean("learned_cold", "cmd") <= mean("integrated_gradients", "cmd")
        if both else None,
        "warm_seeds_compared": [s for s, v in summary["per_seed"].items() if "learned_warm" in v],
        "warm_reaches_cold_kl_in_half_the_steps": all(
            (v["learned_warm"]["steps_to_cold_final_kl"] is not None and
             v["learned_warm"]["steps_to_cold_final_kl"] <= v["steps_cold_to_own_final_kl"] / 2)
            for v in warm) if warm else None}
    return summary


if __name__ == "__main__":
    main()
