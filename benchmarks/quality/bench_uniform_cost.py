"""What the uniform-layout constraint costs on the study's model: free vs uniform subnetworks at the same sparsity.

The study's model: the real all-MiniLM-L6-v2 (BERT, 6 layers x 12 heads) with a fresh 2-way head, fine-tuned on
generated NLI data where lexical overlap almost always works (as `hf-heuristic-core study` does, shorter). Per seed,
one pruning run (hard concrete, KL to the full model, 50% of the 78 units) learns mask logits; the run's own
convergence check (learned vs random subnetworks, `training.convergence`) says whether they mean anything. From the
*same* logits, two binary subnetworks at the same target sparsity:

- **free**: exact top-k over all units (the default binarization);
- **uniform**: `PruningConfig(uniform_layers=True)`: the same number of heads in every layer and every MLP block kept
  or every one removed, the free masks' per-kind budget rounded per layer (`relaxations.uniform`).

Uniform binarization changes no training step (the masks are sampled from the same relaxation), so binarizing one
run both ways isolates the constraint. Reported per subnetwork: units kept, KL to the full model and agreement with
it, accuracy on the in-distribution eval set and on real HANS (validation, `--hans-per-subcase` pairs of each of the 30
subcases; entailed and non-entailed halves reported apart), and for the uniform one whether its slim export is a
stock config.

    python benchmarks/quality/bench_uniform_cost.py --seeds 0,1,2 \\
        --json benchmarks/quality/results/bench_uniform_cost/minilm_sparsity50.json

Seeds already in the JSON are skipped, so `--seeds 0`, `--seeds 1`, `--seeds 2` in turn give the same file.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
import transformers  # noqa: E402

from hf_heuristic_core import PrunableModel, PruningArguments, PruningConfig, PruningTrainer  # noqa: E402
from hf_heuristic_core import generate_nli, hans_subsets  # noqa: E402
from hf_heuristic_core.data.hans import load_hans  # noqa: E402
from hf_heuristic_core.data.tokenize import tokenize_dataset  # noqa: E402
from hf_heuristic_core.offline_models import minilm_path  # noqa: E402

logger = logging.getLogger("bench_uniform_cost")
COLUMNS = ["premise", "hypothesis"]


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--sparsity", type=float, default=0.5)
    parser.add_argument("--prune-steps", type=int, default=300)
    parser.add_argument("--prune-batch-size", type=int, default=16)
    parser.add_argument("--finetune-epochs", type=float, default=2.0)
    parser.add_argument("--max-length", type=int, default=64)
    parser.add_argument("--hans", default="../shared/data/hans", help="folder of HANS jsonl(.gz) files")
    parser.add_argument("--hans-per-subcase", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--workdir", default="/tmp/bench_uniform_cost")
    parser.add_argument("--json", default=None)
    parser.add_argument("--reuse-pruned", action="store_true",
                        help="score the pruning runs already under WORKDIR/prune-SEED (their saved logits) instead of "
                             "training again; a seed without one is trained")
    return parser.parse_args()


def fine_tune(data, tokenizer, args, folder: Path) -> Path:
    """MiniLM + fresh 2-way head, as in the tests' `finetuned_minilm` (2 epochs of 1024 pairs, lr 1e-4)."""
    target = folder / "model"
    if (target / "config.json").is_file():
        return target
    torch.manual_seed(0)
    train = tokenize_dataset(data["train"], tokenizer, COLUMNS, args.max_length, keep_labels=True)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(minilm_path(), num_labels=2)
    training = transformers.TrainingArguments(
        output_dir=str(folder / "run"), per_device_train_batch_size=32, num_train_epochs=args.finetune_epochs,
        learning_rate=1e-4, warmup_steps=5, report_to="none", use_cpu=True, save_strategy="no", disable_tqdm=True,
        seed=0)
    transformers.Trainer(model=model, args=training, train_dataset=train,
                         data_collator=transformers.DataCollatorWithPadding(tokenizer)).train()
    model.save_pretrained(target)
    tokenizer.save_pretrained(target)
    return target


@torch.no_grad()
def evaluate(prunable: PrunableModel, dataset, collator, batch_size: int = 64) -> dict[str, float]:
    """KL(full || subnetwork) per example, agreement with the full model, accuracy against the labels."""
    prunable.eval()
    kl = agree = correct = count = 0.0
    labels = dataset["labels"]
    inputs = dataset.remove_columns([c for c in dataset.column_names if c not in ("input_ids", "attention_mask",
                                                                                  "token_type_ids")])
    for start in range(0, len(inputs), batch_size):
        batch = collator([inputs[i] for i in range(start, min(start + batch_size, len(inputs)))])
        with prunable.masks_disabled():
            teacher = prunable(**batch).logits.float()
        student = prunable(**batch).logits.float()
        gold = torch.tensor(labels[start:start + len(student)])
        kl += float(torch.nn.functional.kl_div(student.log_softmax(-1), teacher.log_softmax(-1), log_target=True,
                                               reduction="sum"))
        agree += float((student.argmax(-1) == teacher.argmax(-1)).sum())
        correct += float((student.argmax(-1) == gold).sum())
        count += len(student)
    return {"kl": kl / count, "agreement": agree / count, "accuracy": correct / count, "examples": int(count)}


@torch.no_grad()
def _plain_accuracy(prunable: PrunableModel, dataset, collator, batch_size: int = 64) -> float:
    correct = 0
    inputs = dataset.remove_columns([c for c in dataset.column_names if c not in ("input_ids", "attention_mask",
                                                                                  "token_type_ids")])
    with prunable.masks_disabled():
        for start in range(0, len(inputs), batch_size):
            batch = collator([inputs[i] for i in range(start, min(start + batch_size, len(inputs)))])
            logits = prunable(**batch).logits
            correct += int((logits.argmax(-1) == torch.tensor(dataset["labels"][start:start + len(logits)])).sum())
    return correct / len(inputs)


def hans_sample(path: str, per_subcase: int):
    hans = load_hans(path, split="validation")
    parts = [subset.select(range(min(per_subcase, len(subset)))) for subset in hans_subsets(hans).values()]
    from datasets import concatenate_datasets
    return concatenate_datasets(parts)


def score_subnetworks(prunable: PrunableModel, entry: dict, seed: int, id_eval, hans_tok, collator,
                      args: argparse.Namespace) -> dict:
    """Binarize one run's logits three ways and score each: free top-k, uniform, and free top-k keeping as many
    units as the uniform one (its rounding can keep more than the target; this row compares at equal size)."""
    for name, uniform in (("free", False), ("uniform", True), ("free_same_units", False)):
        prunable.pruning_config.uniform_layers = uniform
        sparsity = args.sparsity
        if name == "free_same_units":
            sparsity = 1 - entry["uniform"]["units_kept"] / entry["uniform"]["units_total"]
        masks = prunable.get_masks(binary=True, sparsity=sparsity)
        prunable.set_masks(**masks)
        report = prunable.sparsity_report(masks)
        row = {"heads_per_layer": [int(v) for v in masks["heads"].sum(dim=1)],
               "mlps": [int(v) for v in masks["mlps"]], "units_kept": report["units_kept"],
               "units_total": report["units_total"], "sparsity": report["sparsity"],
               "id": evaluate(prunable, id_eval, collator),
               **{n: evaluate(prunable, d, collator) for n, d in hans_tok.items()}}
        if uniform:
            slim = prunable.export_slim(ablation="mean", uniform=True)
            row["slim_stock"] = slim.config.hf_heuristic_core_slim["stock"]
            row["slim_parameters"] = slim.config.hf_heuristic_core_slim["parameters"]
        entry[name] = row
        logger.info("seed %d %s: kept %d, heads/layer %s, mlps %s, ID KL %.4f acc %.3f, HANS acc %.3f", seed,
                    name, row["units_kept"], row["heads_per_layer"], row["mlps"], row["id"]["kl"],
                    row["id"]["accuracy"], row["hans"]["accuracy"])
    if entry["free_same_units"]["units_kept"] != entry["uniform"]["units_kept"]:
        matched, uniform_kept = entry["free_same_units"]["units_kept"], entry["uniform"]["units_kept"]
        raise RuntimeError(f"seed {seed}: the size-matched free subnetwork kept {matched} units, the uniform one "
                           f"{uniform_kept}; the comparison would be unfair.")
    return entry


def main() -> None:
    args = parse()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    torch.set_num_threads(args.threads)
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_path())
    data = generate_nli(train_size=1024, id_eval_size=256, ood_eval_size_per_subcase=20, seed=0)
    model_dir = fine_tune(data, tokenizer, args, workdir)
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    collator = transformers.DataCollatorWithPadding(tokenizer)
    train = tokenize_dataset(data["train"], tokenizer, COLUMNS, args.max_length, keep_labels=False)
    id_eval = tokenize_dataset(data["id_eval"], tokenizer, COLUMNS, args.max_length, keep_labels=True)
    hans = hans_sample(args.hans, args.hans_per_subcase)
    entailed = hans.filter(lambda row: row["label"] == 0)
    hans_sets = {"hans": hans, "hans_entailed": entailed, "hans_non_entailed": hans.filter(lambda r: r["label"] == 1)}
    hans_tok = {name: tokenize_dataset(d, tokenizer, COLUMNS, args.max_length, keep_labels=True)
                for name, d in hans_sets.items()}
    results = {"setting": vars(args), "torch": torch.__version__, "transformers": transformers.__version__,
               "seeds": {}}
    if args.json and Path(args.json).is_file():   # one seed per invocation keeps each run short; results add up
        previous = json.loads(Path(args.json).read_text())
        results["seeds"], results["full_model"] = previous.get("seeds", {}), previous.get("full_model")

    for seed in [int(s) for s in args.seeds.split(",")]:
        if str(seed) in results["seeds"]:
            logger.info("seed %d already in %s", seed, args.json)
            continue
        started = time.perf_counter()
        model = transformers.AutoModelForSequenceClassification.from_pretrained(model_dir)
        prunable = PrunableModel(model, PruningConfig(relaxation_settings={"init_mean": 3.0}))
        saved = workdir / f"prune-{seed}"
        if args.reuse_pruned and (saved / "masks.safetensors").is_file():
            prunable.load_mask_state_dict(load_file(saved / "masks.safetensors"))
            extra = json.loads((saved / "pruning_config.json").read_text()).get("extra", {})
            entry = {"prune_seconds": None, "reused": str(saved), "convergence": extra.get("convergence")}
            results["seeds"][str(seed)] = score_subnetworks(prunable, entry, seed, id_eval, hans_tok, collator, args)
            if args.json:
                Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
            continue
        prunable.compute_means(train.select(range(256)), collate_fn=collator, show_progress=False)
        training = PruningArguments(
            output_dir=str(workdir / f"prune-{seed}"), target_sparsity=args.sparsity,
            sparsity_warmup_steps=args.prune_steps // 2, max_steps=args.prune_steps, warmup_steps=10,
            per_device_train_batch_size=args.prune_batch_size, teacher="cached", sparsity_penalty="expected",
            reg_learning_rate=0.1, report_to="none", use_cpu=True, disable_tqdm=True, save_strategy="no",
            logging_steps=100, seed=seed)
        trainer = PruningTrainer(model=prunable, args=training, train_dataset=train, data_collator=collator)
        trainer.train()
        convergence = trainer.convergence.to_dict() if trainer.convergence is not None else None
        entry = {"prune_seconds": round(time.perf_counter() - started, 1), "convergence": convergence}
        if not results.get("full_model"):
            results["full_model"] = {"id_accuracy": _plain_accuracy(prunable, id_eval, collator),
                                     **{f"{n}_accuracy": _plain_accuracy(prunable, d, collator)
                                        for n, d in hans_tok.items()}}
        results["seeds"][str(seed)] = score_subnetworks(prunable, entry, seed, id_eval, hans_tok, collator, args)
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=2) + "\n")

    summary = {}
    for name in ("free", "uniform", "free_same_units"):
        rows = [entry[name] for entry in results["seeds"].values() if name in entry]
        if not rows:
            continue
        summary[name] = {f"{split}_{metric}": statistics.mean(r[split][metric] for r in rows)
                         for split in ("id", "hans", "hans_entailed", "hans_non_entailed")
                         for metric in ("kl", "accuracy")}
        summary[name]["units_kept"] = statistics.mean(r["units_kept"] for r in rows)
    results["mean_over_seeds"] = summary
    print(json.dumps(summary, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
