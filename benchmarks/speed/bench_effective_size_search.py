"""Effective size over fine-tuning checkpoints: the paper's grid vs the cheap searches (nested, climb), on a real run.

MiniLM (all-MiniLM-L6-v2, real weights) is fine-tuned on `generate_nli` data with a checkpoint every `--save-steps`
steps; at every checkpoint the effective size (ID / OOD / mixed) is computed with each strategy through the public
`track_effective_size` (one results file per strategy, checkpoints in lockstep, so an interrupted benchmark resumes).
Reported, for each cheap strategy against the grid: on what fraction of checkpoints they agree within one grid step
(per group, and for all groups at once), and the ratio of pruning steps.

    python benchmarks/speed/bench_effective_size_search.py --output bench_effective_size.json [--workdir DIR]

The strategies can run in separate processes sharing one --workdir (e.g. `--strategies grid` and
`--strategies climb,nested` side by side on two cores); `--summarize` then only reads the results files.
`--rescore-into DIR --eval-ood-size N` judges the subnetworks already found on a larger OOD evaluation set, without
pruning again (the results files store every mask).

The criterion (`--criterion SUMMARY.json ...`, no computation: it reads summaries written by `--summarize`): a cheap
strategy passes when (1) its disagreement with the grid -- the mean absolute effective-size difference over
checkpoints and groups, in grid steps, averaged over every (cheap seed, grid seed) pair -- is no larger than the
grid's disagreement with itself across pruning seeds (every pair of distinct grid seeds), with a bootstrap interval
over checkpoints; (2) it uses <= 0.10 of the grid's pruning steps; (3) <= 0.20 of its wall time, evaluation included
(from `--timing`). `--timing` runs the strategies on the first `--max-checkpoints` checkpoints with early stopping,
then re-scores the same masks with and without it: evaluation seconds per checkpoint before / after, and whether
the effective sizes are identical.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import transformers  # noqa: E402

from hf_heuristic_core import generate_nli, hans_subsets  # noqa: E402
from hf_heuristic_core.data.pairs import NLI_COLUMNS  # noqa: E402
from hf_heuristic_core.data.tokenize import tokenize_dataset  # noqa: E402
from hf_heuristic_core.io_utils import atomic_write_text  # noqa: E402
from hf_heuristic_core.offline_models import minilm_path  # noqa: E402
from hf_heuristic_core.search import ClimbSchedule, search_effective_size  # noqa: E402
from hf_heuristic_core.search.tracking import EffectiveSizeResults, find_checkpoints, track_effective_size  # noqa: E402

logger = logging.getLogger("bench_effective_size_search")


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", required=True, help="JSON file for the results")
    parser.add_argument("--workdir", default="bench_effective_size_run", help="fine-tuning run and results files")
    parser.add_argument("--finetune-steps", type=int, default=400)
    parser.add_argument("--save-steps", type=int, default=40)
    parser.add_argument("--finetune-lr", type=float, default=1e-4)
    parser.add_argument("--train-size", type=int, default=2048)
    parser.add_argument("--id-size", type=int, default=500)
    parser.add_argument("--ood-size", type=int, default=64, help="OOD examples per subcase")
    parser.add_argument("--prune-examples", type=int, default=1024, help="training examples used for pruning")
    parser.add_argument("--max-length", type=int, default=40)
    parser.add_argument("--sparsities", default="0.1,0.2,0.3,0.4,0.5,0.6,0.7")
    parser.add_argument("--grid-steps", type=int, default=150, help="pruning steps per grid run")
    parser.add_argument("--ramp-steps", type=int, default=ClimbSchedule.ramp_steps)
    parser.add_argument("--settle-steps", type=int, default=ClimbSchedule.settle_steps)
    parser.add_argument("--max-wait-steps", type=int, default=ClimbSchedule.max_wait_steps)
    parser.add_argument("--climb-overrides", default="{}", help="JSON of PruningArguments fields for the climb")
    parser.add_argument("--strategies", default="nested,climb,grid")
    parser.add_argument("--nested-steps", type=int, default=100, help="pruning steps of the nested run")
    parser.add_argument("--summarize", action="store_true", help="only summarize the existing results files")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest on a shared 2-core box)")
    parser.add_argument("--seed", type=int, default=0, help="data and fine-tuning seed")
    parser.add_argument("--pruning-seeds", default="0", help="pruning seeds of every strategy, e.g. 0,1,2")
    parser.add_argument("--tag", default="", help="suffix of the results files, e.g. _seed1 for a second grid "
                                                  "(compared with the grid like a cheap strategy: the noise floor)")
    parser.add_argument("--finetune-only", action="store_true", help="only make the checkpoints")
    parser.add_argument("--eval-ood-size", type=int, default=None,
                        help="OOD evaluation pairs per subcase, drawn separately from the training data (seed "
                             "--seed + 1, pairs seen in training removed); default: the --ood-size pairs generated "
                             "with the training data")
    parser.add_argument("--rescore-into", default=None,
                        help="no pruning: evaluate the masks stored in --workdir's results files on the current "
                             "evaluation sets and write same-named results files into this folder (pruning costs "
                             "carried over); --rescore-names picks the files")
    parser.add_argument("--criterion", nargs="+", default=None, metavar="SUMMARY",
                        help="only judge the stored summaries (see the module docstring); --timing-file adds the "
                             "measured wall times")
    parser.add_argument("--timing", action="store_true", help="measure evaluation time with and without early "
                        "stopping, and each strategy's wall time, on --max-checkpoints checkpoints")
    parser.add_argument("--timing-strategies", default="nested,grid")
    parser.add_argument("--timing-file", default=None, help="--timing's output, read by --criterion")
    parser.add_argument("--max-checkpoints", type=int, default=3)
    parser.add_argument("--bootstrap", type=int, default=5000, help="bootstrap resamples of the checkpoints")
    parser.add_argument("--rescore-names", default=None,
                        help="results files to rescore, e.g. grid,grid_seed1 (default: all in --workdir)")
    return parser.parse_args()


def fine_tune(args: argparse.Namespace, data, tokenizer, run_dir: Path) -> None:
    """MiniLM with a fresh 2-way head, checkpoints every `save_steps` steps (weights only)."""
    if len(find_checkpoints(run_dir)) if run_dir.is_dir() else 0:
        logger.info("reusing the checkpoints in %s", run_dir)
        return
    torch.manual_seed(args.seed)
    train = tokenize(data["train"], tokenizer, args.max_length)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(minilm_path(), num_labels=2)
    training = transformers.TrainingArguments(
        output_dir=str(run_dir), max_steps=args.finetune_steps, per_device_train_batch_size=16,
        learning_rate=args.finetune_lr, warmup_steps=20, save_strategy="steps", save_steps=args.save_steps,
        save_only_model=True, logging_steps=args.save_steps, report_to="none", use_cpu=True, disable_tqdm=True,
        seed=args.seed)
    started = time.perf_counter()
    transformers.Trainer(model=model, args=training, train_dataset=train, processing_class=tokenizer,
                         data_collator=transformers.DataCollatorWithPadding(tokenizer)).train()
    logger.info("fine-tuned %d steps in %.0f s", args.finetune_steps, time.perf_counter() - started)


def tokenize(dataset, tokenizer, max_length: int, keep_labels: bool = True):
    return tokenize_dataset(dataset, tokenizer, NLI_COLUMNS, max_length, keep_labels=keep_labels)


def larger_ood_set(args: argparse.Namespace, train):
    """`--eval-ood-size` pairs per counter-heuristic subcase from their own generator call. Asking `generate_nli` for
    more OOD pairs with the run's seed would change the training data too (the splits share one random stream), so
    the larger set has seed + 1, and any pair that also occurs in the training data is removed."""
    seen = set(zip(train["premise"], train["hypothesis"]))
    extra = generate_nli(train_size=0, id_eval_size=0, ood_eval_size_per_subcase=args.eval_ood_size,
                         seed=args.seed + 1)["ood_eval"]
    kept = extra.filter(lambda row: (row["premise"], row["hypothesis"]) not in seen)
    logger.info("larger OOD evaluation set: %d pairs (%d removed as training pairs)", len(kept),
                len(extra) - len(kept))
    return kept


def rescore(args: argparse.Namespace, workdir: Path, target_dir: Path, prune_train, eval_sets, groups,
            collate) -> None:
    """Evaluate the subnetworks stored in each results file again, on the current evaluation sets
    (`search_effective_size(masks=...)`: no pruning). Pruning does not see the evaluation data, so this gives exactly
    what rerunning the searches with these evaluation sets would give, at the cost of the evaluation alone.
    Resumable: checkpoints already in the target file are skipped."""
    names = args.rescore_names.split(",") if args.rescore_names else \
        [f.stem.removeprefix("effective_size_") for f in sorted(workdir.glob("effective_size_*.json"))]
    for name in names:
        source = EffectiveSizeResults.load(workdir / f"effective_size_{name}.json")
        if source.settings is None:
            raise SystemExit(f"{source.path} does not exist or has no results; nothing to rescore.")
        target = EffectiveSizeResults.load(target_dir / source.path.name)
        target.adopt_settings({**source.settings, "groups": groups})
        for step in sorted(source.done_steps() - target.done_steps()):
            entry = source.entries[step]
            checkpoint = source.checkpoint_path(entry)
            started = time.perf_counter()
            search = search_effective_size(checkpoint, prune_train, eval_sets, groups,
                                           strategy=source.settings["strategy"], masks=entry["masks"],
                                           margin=source.settings["margin"], collate_fn=collate)
            search.cost_steps, search.runs = entry["cost_steps"], entry["runs"]   # what finding them cost
            target.record(step, checkpoint, search, signature=entry.get("model"))
            target.entries[step]["rescored_from"] = str(source.path)
            target.save()
            logger.info("rescored %s step %d: effective size %s (was %s), %.0f s", name, step,
                        {g: round(v, 2) for g, v in search.effective_size.items()},
                        {g: round(v, 2) for g, v in entry["effective_size"].items()},
                        time.perf_counter() - started)


def reference_of(name: str, tables: dict[str, dict]) -> str:
    """A tagged run ("nested_seed1") is compared with the grid of the same tag ("grid_seed1") when there is one; a
    tagged grid, and anything else, with the untagged grid (grid vs grid: the noise floor of one-seed grids). Seed
    means ("nested_mean") are compared with the grid's seed mean ("grid_mean")."""
    strategy, _, tag = name.partition("_")
    if strategy != "grid" and tag and f"grid_{tag}" in tables:
        return f"grid_{tag}"
    return "grid"


def seed_means(tables: dict[str, dict]) -> dict[str, dict]:
    """Per strategy with results for several pruning seeds (untagged and `_seedN` files): the mean effective size over
    those seeds at the checkpoints every seed has (the paper's released code averages per-seed effective sizes)."""
    means = {}
    for strategy in sorted({name.partition("_")[0] for name in tables}):
        runs = [t for name, t in tables.items() if name == strategy or name.startswith(f"{strategy}_seed")]
        if len(runs) < 2:
            continue
        steps = set.intersection(*(set(t) for t in runs))
        means[f"{strategy}_mean"] = {step: {
            "effective_size": {g: sum(t[step]["effective_size"][g] for t in runs) / len(runs)
                               for g in runs[0][step]["effective_size"]},
            "cost_steps": sum(t[step]["cost_steps"] for t in runs),
            "wall_seconds": sum(t[step]["wall_seconds"] for t in runs),
            "seeds": len(runs)} for step in steps}
    return means


def agreement(results: dict[str, EffectiveSizeResults], step_size: float) -> dict:
    """Each cheap strategy (and each extra grid, and each seed mean) against its reference grid, on the checkpoints
    both have."""
    tables = {name: {step: r.entries[step] for step in r.done_steps()} for name, r in results.items()}
    tables.update(seed_means(tables))
    groups = list(results["grid"].settings["groups"])
    summary: dict = {"step_size": step_size, "strategies": {}}
    for name, cheap in tables.items():
        reference = "grid_mean" if name.endswith("_mean") else reference_of(name, tables)
        if name == reference or reference not in tables:
            continue
        grid = tables[reference]
        steps = sorted(set(cheap) & set(grid))
        if not steps:
            continue

        def gap(step: int, group: str) -> float:
            return abs(cheap[step]["effective_size"][group] - grid[step]["effective_size"][group])

        grid_cost = sum(grid[s]["cost_steps"] for s in steps)
        cheap_cost = sum(cheap[s]["cost_steps"] for s in steps)
        summary["strategies"][name] = {
            "reference": reference,
            "checkpoints_compared": len(steps),
            "within_one_step_per_group": {g: sum(gap(s, g) <= step_size + 1e-9 for s in steps) / len(steps)
                                          for g in groups},
            "within_one_step_all_groups": sum(all(gap(s, g) <= step_size + 1e-9 for g in groups)
                                              for s in steps) / len(steps),
            "identical_per_group": {g: sum(gap(s, g) < 1e-9 for s in steps) / len(steps) for g in groups},
            "mean_abs_difference_per_group": {g: sum(gap(s, g) for s in steps) / len(steps) for g in groups},
            "pruning_steps": {reference: grid_cost, name: cheap_cost},
            "pruning_step_ratio": grid_cost / max(cheap_cost, 1),
            "search_wall_seconds": {reference: sum(grid[s]["wall_seconds"] for s in steps),
                                    name: sum(cheap[s]["wall_seconds"] for s in steps)},
        }
    summary["per_checkpoint"] = [
        {"step": s, "full_accuracy": tables["grid"][s]["full_accuracy_by_group"],
         **{f"{name}/{g}": round(t[s]["effective_size"][g], 4) for name, t in tables.items() if s in t
            for g in groups},
         **{f"{name}/cost": t[s]["cost_steps"] for name, t in tables.items() if s in t}}
        for s in sorted(tables["grid"])]
    return summary


def write_summary(args: argparse.Namespace, workdir: Path, step_size: float) -> dict | None:
    results = {file.stem.removeprefix("effective_size_"): EffectiveSizeResults.load(file)
               for file in sorted(workdir.glob("effective_size_*.json"))}
    if "grid" not in results or len(results) < 2:
        return None
    summary = {"command": vars(args), "device": "cpu", **agreement(results, step_size)}
    atomic_write_text(Path(args.output), json.dumps(summary, indent=1) + "\n")
    return summary


# ------------------------------------------------------------------------------------------ the honest criterion
def stored_tables(path: str) -> tuple[float, dict[str, dict[int, dict[str, float]]], dict[str, dict[int, float]]]:
    """Per-seed effective sizes ``{name: {step: {group: size}}}`` and pruning costs from a `--summarize` file."""
    data = json.loads(Path(path).read_text())
    tables: dict[str, dict[int, dict[str, float]]] = {}
    costs: dict[str, dict[int, float]] = {}
    for row in data["per_checkpoint"]:
        for key, value in row.items():
            name, _, group = key.partition("/")
            if not group or name.endswith("_mean"):
                continue
            if group == "cost":
                costs.setdefault(name, {})[row["step"]] = value
            else:
                tables.setdefault(name, {}).setdefault(row["step"], {})[group] = value
    return float(data["step_size"]), tables, costs


def seed_runs(tables: dict, strategy: str) -> list[str]:
    return sorted(n for n in tables if n == strategy or n.startswith(f"{strategy}_seed"))


def mean_disagreement(a: dict, b: dict, steps: list[int], groups: list[str], step_size: float) -> float:
    """Mean |a - b| over the (resampled) checkpoints and the groups, in grid steps."""
    gaps = [abs(a[s][g] - b[s][g]) / step_size for s in steps for g in groups]
    return sum(gaps) / len(gaps)


def judge(path: str, cheap: str = "nested", reference: str = "grid", resamples: int = 5000,
          timing: dict | None = None) -> dict:
    """The criterion on one stored summary (see the module docstring)."""
    import random
    step_size, tables, costs = stored_tables(path)
    cheap_runs, grid_runs = seed_runs(tables, cheap), seed_runs(tables, reference)
    if len(grid_runs) < 2 or not cheap_runs:
        raise SystemExit(f"{path}: need >= 2 {reference} seeds and >= 1 {cheap} seed, found {grid_runs}, {cheap_runs}")
    steps = sorted(set.intersection(*(set(tables[n]) for n in cheap_runs + grid_runs)))
    groups = sorted(tables[grid_runs[0]][steps[0]])
    cross = [(c, g) for c in cheap_runs for g in grid_runs]
    noise = [(a, b) for i, a in enumerate(grid_runs) for b in grid_runs[i + 1:]]

    def both(sample: list[int]) -> tuple[float, float]:
        cheap_gap = sum(mean_disagreement(tables[c], tables[g], sample, groups, step_size) for c, g in cross)
        noise_gap = sum(mean_disagreement(tables[a], tables[b], sample, groups, step_size) for a, b in noise)
        return cheap_gap / len(cross), noise_gap / len(noise)

    point = both(steps)
    rng = random.Random(0)
    draws = sorted(both([rng.choice(steps) for _ in steps]) for _ in range(resamples))
    differences = sorted(c - n for c, n in draws)

    def interval(values: list[float]) -> list[float]:
        return [round(values[int(0.025 * (len(values) - 1))], 4), round(values[int(0.975 * (len(values) - 1))], 4)]

    cheap_steps = sum(costs[c][s] for c in cheap_runs for s in steps) / len(cheap_runs)
    grid_steps = sum(costs[g][s] for g in grid_runs for s in steps) / len(grid_runs)
    verdict = {
        "summary": path, "cheap": cheap, "reference": reference, "cheap_seeds": cheap_runs, "grid_seeds": grid_runs,
        "checkpoints": len(steps), "groups": groups, "step_size": step_size,
        "cheap_vs_grid_steps": round(point[0], 4), "grid_vs_grid_steps": round(point[1], 4),
        "cheap_vs_grid_interval": interval(sorted(c for c, _ in draws)),
        "grid_vs_grid_interval": interval(sorted(n for _, n in draws)),
        "difference_interval": interval(differences),
        "per_group_steps": {g: {"cheap_vs_grid": round(sum(mean_disagreement(tables[c], tables[r], steps, [g],
                                                                            step_size) for c, r in cross) / len(cross), 4),
                                "grid_vs_grid": round(sum(mean_disagreement(tables[a], tables[b], steps, [g], step_size)
                                                          for a, b in noise) / len(noise), 4)} for g in groups},
        "agreement_passes": point[0] <= point[1],
        "pruning_step_ratio": round(cheap_steps / grid_steps, 4),
        "pruning_steps_pass": cheap_steps <= 0.10 * grid_steps,
    }
    if timing:
        walls = timing["wall_seconds"]
        if cheap in walls and reference in walls:
            verdict["wall_ratio"] = round(walls[cheap] / walls[reference], 4)
            verdict["wall_pass"] = walls[cheap] <= 0.20 * walls[reference]
            verdict["wall_ratio_without_early_stopping"] = round(
                timing["wall_seconds_without_early_stopping"][cheap] /
                timing["wall_seconds_without_early_stopping"][reference], 4)
    return verdict


def evaluation_work(path: str, examples: dict[str, int], groups: dict[str, list[str]]) -> dict:
    """Evaluation work per checkpoint and seed, in examples run through a model, that the stored effective sizes imply:
    today's code (the full model twice -- once for its accuracies, once to fill the logits cache -- and every level on
    every set) vs early stopping (the full model once, and each level on the sets of the groups whose scan reached it:
    a group with effective size e stops at sparsity 1 - e; one with nothing faithful scans every level). Exact counts
    from the stored tables; time is about proportional (one forward pass per example for the pruned and the full
    model alike)."""
    step_size, tables, _ = stored_tables(path)
    levels = [round(step_size * i, 6) for i in range(1, 8)]
    total = sum(examples.values())
    fractions = []
    for name in [n for n in tables if n.partition("_")[0] in ("grid", "nested", "climb")]:
        for sizes in tables[name].values():
            work = total   # the full model, once
            for level in levels:
                reached = {case for g, cases in groups.items() if sizes[g] >= 1.0 - 1e-9 or level >= 1 - sizes[g] - 1e-9
                           for case in cases}
                work += sum(examples[c] for c in reached)
            fractions.append(work / (total * (len(levels) + 2)))
    return {"summary": path, "examples": examples, "checkpoints_x_seeds": len(fractions),
            "mean_fraction": round(sum(fractions) / len(fractions), 4), "min_fraction": round(min(fractions), 4),
            "max_fraction": round(max(fractions), 4)}


def measure_timing(args: argparse.Namespace, run_dir: Path, prune_train, eval_sets, groups, collate,
                   sparsities: list[float]) -> dict:
    """Per checkpoint and strategy: the search with early stopping, then its masks re-scored with and without it.
    Evaluation seconds before/after, identical effective sizes, and the wall time with and without early stopping
    (the search's own wall time, minus its evaluation, plus the full evaluation)."""
    rows = []
    steps_of = {"grid": args.grid_steps, "nested": args.nested_steps, "climb": None}
    for step, path in find_checkpoints(run_dir)[: args.max_checkpoints]:
        for strategy in args.timing_strategies.split(","):
            common = {"collate_fn": collate, "sparsities": sparsities, "seeds": [0]}
            found = search_effective_size(path, prune_train, eval_sets, groups, strategy=strategy,
                                          steps_per_run=steps_of[strategy], early_stopping=True, **common)
            rescored = {flag: search_effective_size(path, prune_train, eval_sets, groups, strategy=strategy,
                                                    masks=found.masks, early_stopping=flag, collate_fn=collate)
                        for flag in (False, True)}
            row = {"step": step, "strategy": strategy, "pruning_steps": found.cost_steps,
                   "wall_seconds": found.wall_seconds,
                   "wall_seconds_without_early_stopping": found.wall_seconds - found.evaluation_seconds
                   + rescored[False].evaluation_seconds,
                   "evaluation_seconds_full": rescored[False].evaluation_seconds,
                   "evaluation_seconds_early": rescored[True].evaluation_seconds,
                   "evaluation_seconds_in_search": found.evaluation_seconds,
                   "evaluations_full": rescored[False].evaluation_count(),
                   "evaluations_early": rescored[True].evaluation_count(),
                   "effective_size": found.effective_size,
                   "identical": found.effective_size_per_seed == rescored[False].effective_size_per_seed
                   == rescored[True].effective_size_per_seed,
                   "converged": found.converged}
            rows.append(row)
            atomic_write_text(Path(args.output), json.dumps({"partial": True, "rows": rows}, indent=1) + "\n")
            logger.info("timing step %d %s: ES %s, eval %.1f s -> %.1f s (%d -> %d evaluations), identical %s, "
                        "wall %.0f s", step, strategy, {g: round(v, 2) for g, v in found.effective_size.items()},
                        row["evaluation_seconds_full"], row["evaluation_seconds_early"], row["evaluations_full"],
                        row["evaluations_early"], row["identical"], row["wall_seconds"])
    totals = {key: {s: sum(r[key] for r in rows if r["strategy"] == s) for s in {r["strategy"] for r in rows}}
              for key in ("wall_seconds", "wall_seconds_without_early_stopping", "evaluation_seconds_full",
                          "evaluation_seconds_early")}
    return {"command": vars(args), "device": "cpu", "rows": rows, **totals,
            "evaluation_time_ratio": sum(r["evaluation_seconds_early"] for r in rows)
            / max(sum(r["evaluation_seconds_full"] for r in rows), 1e-9),
            "all_identical": all(r["identical"] for r in rows)}


def main() -> None:
    args = parse()
    if args.criterion:
        timing = json.loads(Path(args.timing_file).read_text()) if args.timing_file else None
        verdicts = []
        for path in args.criterion:
            names = stored_tables(path)[1]
            verdicts += [judge(path, cheap, resamples=args.bootstrap, timing=timing)
                         for cheap in ("nested", "climb") if seed_runs(names, cheap)]
        ood = [f"ood{i}" for i in range(7)]
        work = [evaluation_work(path, {"id": args.id_size, **dict.fromkeys(ood, args.eval_ood_size or args.ood_size)},
                                {"ID": ["id"], "OOD": ood, "mixed": ["id", *ood]}) for path in args.criterion]
        verdicts.append({"evaluation_work": work})
        atomic_write_text(Path(args.output), json.dumps(verdicts, indent=1) + "\n")
        print(json.dumps(verdicts, indent=1))
        return
    logging.basicConfig(format="%(asctime)s %(message)s", level=logging.INFO)
    for noisy in ("transformers", "datasets", "hf_heuristic_core.search"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    torch.set_num_threads(args.threads)
    workdir = Path(args.workdir)
    run_dir = workdir / "finetune"
    sparsities = [float(x) for x in args.sparsities.split(",")]
    step_size = min(b - a for a, b in zip(sparsities, sparsities[1:])) if len(sparsities) > 1 else 1.0
    if args.summarize:
        summary = write_summary(args, workdir, step_size)
        print(json.dumps({k: v for k, v in (summary or {}).items() if k != "per_checkpoint"}, indent=1))
        return
    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_path())
    data = generate_nli(train_size=args.train_size, id_eval_size=args.id_size,
                        ood_eval_size_per_subcase=args.ood_size, seed=args.seed)
    fine_tune(args, data, tokenizer, run_dir)
    if args.finetune_only:
        return

    prune_train = tokenize(data["train"].select(range(min(args.prune_examples, args.train_size))), tokenizer,
                           args.max_length, keep_labels=False)
    eval_sets = {"id": tokenize(data["id_eval"], tokenizer, args.max_length)}
    ood = data["ood_eval"] if args.eval_ood_size is None else larger_ood_set(args, data["train"])
    for name, subset in hans_subsets(ood).items():
        eval_sets[name] = tokenize(subset, tokenizer, args.max_length)
    groups = {"ID": ["id"], "OOD": [n for n in eval_sets if n != "id"], "mixed": list(eval_sets)}
    climb = ClimbSchedule(ramp_steps=args.ramp_steps, settle_steps=args.settle_steps,
                          max_wait_steps=args.max_wait_steps)
    common = {"sparsities": sparsities, "seeds": [int(x) for x in args.pruning_seeds.split(",")],
              "collate_fn": transformers.DataCollatorWithPadding(tokenizer),
              "show_progress": False, "figure": True, "climb": climb}
    per_strategy = {"grid": {"steps_per_run": args.grid_steps}, "nested": {"steps_per_run": args.nested_steps},
                    "climb": {"pruning_overrides": json.loads(args.climb_overrides)}}
    if args.timing:
        timing = measure_timing(args, run_dir, prune_train, eval_sets, groups, common["collate_fn"], sparsities)
        atomic_write_text(Path(args.output), json.dumps(timing, indent=1) + "\n")
        print(json.dumps({k: v for k, v in timing.items() if k not in ("rows", "command")}, indent=1))
        return
    if args.rescore_into:
        rescore(args, workdir, Path(args.rescore_into), prune_train, eval_sets, groups, common["collate_fn"])
        summary = write_summary(args, Path(args.rescore_into), step_size)
        if summary:
            print(json.dumps({k: v for k, v in summary.items() if k != "per_checkpoint"}, indent=1))
        return
    strategies = args.strategies.split(",")
    checkpoints = find_checkpoints(run_dir)
    logger.info("%d checkpoints; %d eval cases; strategies %s", len(checkpoints), len(eval_sets), strategies)
    for index in range(len(checkpoints)):
        for strategy in strategies:
            file = workdir / f"effective_size_{strategy}{args.tag}.json"
            before = EffectiveSizeResults.load(file).done_steps() if file.is_file() else set()
            results = track_effective_size(
                run_dir, prune_train, eval_sets, groups, strategy=strategy, results_file=file, max_checkpoints=1,
                **per_strategy[strategy], **common)
            for step in sorted(results.done_steps() - before):
                entry = results.entries[step]
                logger.info("[%d/%d] step %d %-6s effective size %s, %s pruning steps, %.0f s", index + 1,
                            len(checkpoints), step, strategy,
                            {g: round(v, 2) for g, v in entry["effective_size"].items()}, entry["cost_steps"],
                            entry["wall_seconds"])
        write_summary(args, workdir, step_size)
    summary = write_summary(args, workdir, step_size)
    if summary:
        print(json.dumps({k: v for k, v in summary.items() if k != "per_checkpoint"}, indent=1))


if __name__ == "__main__":
    main()
