"""Effective size over fine-tuning checkpoints: the paper's grid vs the cheap searches (nested, climb), on a real run.

MiniLM (all-MiniLM-L6-v2, real weights) is fine-tuned on `generate_nli` data with a checkpoint every `--save-steps`
steps; at every checkpoint the effective size (ID / OOD / mixed) is computed with each strategy through the public
`track_effective_size` (one results file per strategy, checkpoints in lockstep, so an interrupted benchmark resumes).
Reported, for each cheap strategy against the grid: on what fraction of checkpoints they agree within one grid step
(per group, and for all groups at once), and the ratio of pruning steps.

    python benchmarks/bench_effective_size_search.py --output bench_effective_size.json [--workdir DIR]

The strategies can run in separate processes sharing one --workdir (e.g. `--strategies grid` and
`--strategies climb,nested` side by side on two cores); `--summarize` then only reads the results files.
`--rescore-into DIR --eval-ood-size N` judges the subnetworks already found on a larger OOD evaluation set, without
pruning again (the results files store every mask).
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


def main() -> None:
    args = parse()
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
