"""CPU-scale reproduction of Lepori et al., *Break It Down* (fig. 4/5, BERT): the subtask test on a Transformers model.

Task (`hf_heuristic_core.data.compositional`): Lepori's language odd-one-out in synthetic form. Four 7-token
sentences `[CLS] subject prep attractor verb filler [SEP]`; three follow `C = SR1 & SR2` (singular subject AND
singular verb), the odd one is (plural subject, singular verb) or (singular subject, plural verb); chance 0.25.

Why this task and not a simpler two-subroutine classifier: Lepori's test needs the ablated model to *keep* the other
subroutine. In a binary "SR1 AND SR2" classifier, breaking SR1 makes the AND fail on every input, so the ablated
model would lose both test sets and D_abl would measure nothing. Odd-one-out scores are relative (which of four
embeddings is least similar to the rest), so a model whose SR1 feature is gone still finds an odd one that differs
in SR2 - the property the paper's D_abl < 0 rests on. It is also his language setup (Marvin & Linzen agreement with an
attractor noun), with a closed vocabulary instead of real sentences so that a model trained from scratch learns it in
seconds.

Model: a `transformers.BertModel` from a config (4 layers like BERT-Small, hidden 64, 4 heads, no dropout, no weight
decay: the brief's conditions); a sentence's embedding is the pooler output of [CLS] (Lepori: the [CLS]
representation, no MLP), the odd one is the sentence with the lowest summed dot product with the other three
(Zerroug et al.'s head), trained with cross-entropy over the four.

Masks: continuous sparsification through `PrunableModel(granularity="weight",
relaxation="continuous_sparsification")` on every Linear weight of the encoder and the pooler (no embeddings,
LayerNorms or biases, as Lepori; `--mask_from_layer 3|4` gives his other mask configurations), beta 1 -> 200
multiplied at every epoch end, Adam lr 1e-2, batch 64, lambda = his 1e-8 scaled by his BERT-Small's masked-weight
count over this model's (so the penalty weighs against the task loss as in the paper; at 1e-8 a model this small
barely moves its masks from init), s init searched over `--inits` (default {0.05, -0.05}; his grid is
{0.1, 0.05, 0, -0.05}) with his selection rule (subnetwork >= 90% on its own subtask, then the largest clamped
a(Abl, Other) - a(Abl, Target) on a validation split); evaluation with 1[s > 0]. Epochs are cut from 90 to
`--mask_epochs` over `--mask_examples` examples; a mask below 90% on its own subtask is flagged `mask_ok: false`.
Then `subtask_test` (accuracies clamped to [0.25, 1]; D_sub = a(Sub, Target) - a(Sub, Other),
D_abl = a(Abl, Target) - a(Abl, Other), Abl = w * (1 - m)) with random ablations of equal per-layer size, on test
splits. Control: the same mask training (same settings as chosen
for the trained model) on a randomly initialized model of the same config.

Paper pattern: D_sub > 0 and D_abl < 0 for most masks; on random BERT-Small, D_sub > 0 but D_abl >= 0.

    python benchmarks/repro_lepori_subtasks.py --seeds 0,1 --output benchmarks/results_repro_lepori.json
    python benchmarks/repro_lepori_subtasks.py --seeds 0 --masks_dir runs/lepori
    hf-heuristic-core analyze runs/lepori
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import BertConfig, BertModel

from hf_heuristic_core import PrunableModel, PruningConfig
from hf_heuristic_core.analysis.subtasks import lepori_differences, subtask_test
from hf_heuristic_core.data.compositional import CHANCE, SENTENCE_LENGTH, AgreementVocabulary, odd_one_out
from hf_heuristic_core.io_utils import atomic_write_text
from hf_heuristic_core.relaxations.continuous_sparsification import LEPORI_LAMBDA, beta_after_epochs
from hf_heuristic_core.training.objectives import sparsity_penalty

VOCAB = AgreementVocabulary()
LEPORI_BERT_SMALL_MASKED = 12_845_056     # app. H: encoder Linear weights + pooler of BERT-Small


def build_model(seed: int, hidden: int, layers: int) -> BertModel:
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=VOCAB.size, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=4,
                        intermediate_size=2 * hidden, max_position_embeddings=SENTENCE_LENGTH + 1, type_vocab_size=1,
                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return BertModel(config)


def odd_logits(model: nn.Module, input_ids: torch.Tensor) -> torch.Tensor:
    """Per sentence, minus its summed dot product with the other three ([CLS] pooler embeddings): `[batch, 4]`."""
    batch = input_ids.shape[0]
    embeddings = model(input_ids=input_ids.reshape(-1, SENTENCE_LENGTH)).pooler_output.view(batch, 4, -1)
    similarity = embeddings @ embeddings.transpose(1, 2)
    return -(similarity.sum(-1) - similarity.diagonal(dim1=1, dim2=2))


@torch.no_grad()
def accuracy(model: nn.Module, data: tuple[torch.Tensor, torch.Tensor], batch: int = 500) -> float:
    x, y = data
    right = sum(int((odd_logits(model, x[i:i + batch]).argmax(-1) == y[i:i + batch]).sum())
                for i in range(0, len(y), batch))
    return right / len(y)


def mask_configuration(from_layer: int, layers: int) -> str | None:
    """Lepori's mask configurations: every Linear (0), or from the given 1-based layer on, plus the pooler."""
    if from_layer <= 1:
        return None
    if from_layer > layers:
        raise SystemExit(f"--mask_from_layer {from_layer} is past the model's {layers} layers.")
    indices = "|".join(str(i) for i in range(from_layer - 1, layers))
    return rf"(encoder\.layer\.({indices})\..*|pooler\.dense)"


def train_base(model: BertModel, steps: int, seed: int) -> None:
    generator = torch.Generator().manual_seed(1000 + seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)        # no weight decay
    model.train()
    for step in range(steps):
        x, y = odd_one_out("compositional", 64, generator)
        loss = nn.functional.cross_entropy(odd_logits(model, x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 500 == 0:
            print(f"  base step {step}: loss {loss.item():.3f}", flush=True)
    model.eval().requires_grad_(False)


def train_mask(pm: PrunableModel, subtask: str, init: float, args: argparse.Namespace, seed: int
               ) -> dict[str, torch.Tensor]:
    """Lepori's continuous sparsification on the subtask's own odd-one-out data; returns the 1[s > 0] masks."""
    pm.clear_masks()
    pm.update_relaxation(cs_init=init, cs_beta=1.0)
    pm.reset_masks(seed)
    generator = torch.Generator().manual_seed(2000 + seed)
    x, y = odd_one_out(subtask, args.mask_examples, generator)
    optimizer = torch.optim.Adam([p for _, p in pm.mask_logits.items()], lr=args.mask_lr)
    pm.train()
    for epoch in range(args.mask_epochs):
        order = torch.randperm(len(y), generator=generator)
        for i in range(0, len(y), 64):
            index = order[i:i + 64]
            loss = nn.functional.cross_entropy(odd_logits(pm, x[index]), y[index])
            loss = loss + sparsity_penalty(pm, args.mask_lambda, len(index))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        pm.update_relaxation(cs_beta=beta_after_epochs(epoch + 1, args.mask_epochs, 200.0))
    pm.eval()
    return pm.get_masks(binary=True)


def kept_fraction(masks: dict[str, torch.Tensor]) -> float:
    return sum(float(m.sum()) for m in masks.values()) / sum(m.numel() for m in masks.values())


def evaluate(pm: PrunableModel, masks: dict[str, torch.Tensor], sets: dict[str, Any], subtask: str,
             controls: int, seed: int) -> dict[str, Any]:
    target, other = ("odd_sr1", "odd_sr2") if subtask == "sr1" else ("odd_sr2", "odd_sr1")
    result = subtask_test(pm, masks, lambda m: accuracy(m, sets[target]), lambda m: accuracy(m, sets[other]),
                          chance=CHANCE, random_controls=controls, seed=seed).to_dict()
    with pm.masks_applied(masks):
        result["sub_own_task"] = accuracy(pm, sets[subtask])
    result["kept"] = kept_fraction(masks)
    # Lepori's criterion: a subnetwork below 90% on its own subtask means mask training failed; its D's say nothing.
    result["mask_ok"] = result["sub_own_task"] >= 0.9
    result["paper_pattern"] = result["d_sub"] > 0 and result["d_abl"] < 0
    return result


def choose_init(pm: PrunableModel, subtask: str, args: argparse.Namespace, seed: int, validation: dict[str, Any]
                ) -> tuple[float, dict[str, torch.Tensor], list[dict[str, float]]]:
    """Lepori's selection: among inits whose subnetwork reaches >= 90% on its subtask (validation), the one with the
    largest clamped a(Abl, Other) - a(Abl, Target). Falls back to the best subnetwork when none reaches 90%."""
    target, other = ("odd_sr1", "odd_sr2") if subtask == "sr1" else ("odd_sr2", "odd_sr1")
    tried = []
    for init in args.inits:
        masks = train_mask(pm, subtask, init, args, seed)
        with pm.masks_applied(masks):
            own = accuracy(pm, validation[subtask])
        with pm.masks_applied({k: 1 - v for k, v in masks.items()}):
            abl_t, abl_o = accuracy(pm, validation[target]), accuracy(pm, validation[other])
        score = -lepori_differences(0, 0, abl_t, abl_o, CHANCE)[1]
        tried.append({"init": init, "sub_own_task": own, "ablation_score": score, "kept": kept_fraction(masks),
                      "masks": masks})
        print(f"    init {init:+.2f}: own task {own:.3f}, ablation score {score:+.3f}, kept "
              f"{tried[-1]['kept']:.3f}", flush=True)
    passing = [t for t in tried if t["sub_own_task"] >= 0.9]
    best = max(passing, key=lambda t: t["ablation_score"]) if passing else max(tried, key=lambda t: t["sub_own_task"])
    summary = [{k: v for k, v in t.items() if k != "masks"} for t in tried]
    return best["init"], best["masks"], summary


def run_seed(seed: int, args: argparse.Namespace) -> dict[str, Any]:
    start = time.time()
    data_gen = torch.Generator().manual_seed(10_000 + seed)
    tasks = ("compositional", "sr1", "sr2", "odd_sr1", "odd_sr2")
    test = {t: odd_one_out(t, args.test_examples, data_gen) for t in tasks}
    validation = {t: odd_one_out(t, args.test_examples // 2, data_gen) for t in tasks}
    model = build_model(seed, args.hidden, args.layers)
    train_base(model, args.base_steps, seed)
    base = {t: accuracy(model, test[t]) for t in tasks}
    print(f"seed {seed} base model: " + ", ".join(f"{t} {a:.3f}" for t, a in base.items())
          + f" ({time.time() - start:.0f} s)", flush=True)
    if args.mask_lambda is None:   # per-weight lambda from the whole model's count, for every mask configuration
        every_linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear))
        args.mask_lambda = LEPORI_LAMBDA * LEPORI_BERT_SMALL_MASKED / every_linear
    config = PruningConfig(granularity="weight", relaxation="continuous_sparsification",
                           target_modules=mask_configuration(args.mask_from_layer, args.layers))
    pm = PrunableModel(model, config)
    masked = pm.granularity.selection_summary()["masked_entries"]
    random_pm = PrunableModel(build_model(50_000 + seed, args.hidden, args.layers).eval().requires_grad_(False),
                              config)
    out: dict[str, Any] = {"seed": seed, "base": base, "masked_weights": masked, "mask_lambda": args.mask_lambda}
    chosen: dict[str, dict[str, torch.Tensor]] = {}
    for subtask in ("sr1", "sr2"):
        init, masks, search = choose_init(pm, subtask, args, seed, validation)
        chosen[subtask] = masks
        trained = evaluate(pm, masks, test, subtask, args.random_controls, seed)
        trained.update(init=init, search=search)
        random_masks = train_mask(random_pm, subtask, init, args, seed)
        control = evaluate(random_pm, random_masks, test, subtask, args.random_controls, seed)
        out[subtask] = {"trained": trained, "random_init_model": control}
        for name, r in (("trained", trained), ("random-init", control)):
            print(f"  {subtask} {name}: D_sub {r['d_sub']:+.3f}, D_abl {r['d_abl']:+.3f} (random ablation "
                  f"{r.get('random_d_abl_mean', float('nan')):+.3f}), sub own task {r['sub_own_task']:.3f}, kept "
                  f"{r['kept']:.3f}", flush=True)
    if args.masks_dir and seed == int(args.seeds.split(",")[0]):
        write_masks_folder(pm, chosen, out, Path(args.masks_dir))
    out["seconds"] = time.time() - start
    return out


def write_masks_folder(pm: PrunableModel, chosen: dict[str, dict[str, torch.Tensor]], out: dict[str, Any],
                       folder: Path) -> None:
    """The first seed's masks as artifacts plus the `subtasks.json` that `hf-heuristic-core analyze FOLDER` reads:
    the accuracies are those measured here, a task's data being its Test-Target set (odd one differs in it only)."""
    for subtask, masks in chosen.items():
        with pm.masks_applied(masks):
            pm.save_pretrained(folder / subtask)
    accuracy: dict[str, dict[str, float]] = {"full": {"sr1": out["base"]["odd_sr1"], "sr2": out["base"]["odd_sr2"]}}
    for own, other in (("sr1", "sr2"), ("sr2", "sr1")):
        r = out[own]["trained"]
        accuracy[own] = {own: r["sub_target"], other: r["sub_other"]}
        accuracy[f"NOT {own}"] = {own: r["abl_target"], other: r["abl_other"]}
    atomic_write_text(folder / "subtasks.json", json.dumps({"masks": {"sr1": "sr1", "sr2": "sr2"},
                                                            "accuracy": accuracy}, indent=2) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--base_steps", type=int, default=300)
    parser.add_argument("--mask_examples", type=int, default=1024)
    parser.add_argument("--mask_epochs", type=int, default=15)
    parser.add_argument("--mask_lr", type=float, default=1e-2)
    parser.add_argument("--mask_lambda", type=float, default=None,
                        help="Default: Lepori's 1e-8 x 12,845,056 (his BERT-Small masked weights) / this model's "
                             "masked weights, so the penalty weighs as much against the task loss as in the paper.")
    parser.add_argument("--mask_from_layer", type=int, default=0,
                        help="Lepori's mask configuration: 0 every Linear; 3 layers 3-4 + pooler; 4 layer 4 + pooler")
    parser.add_argument("--inits", default="0.05,-0.05", help="s init values searched (Lepori: 0.1,0.05,0,-0.05)")
    parser.add_argument("--test_examples", type=int, default=500)
    parser.add_argument("--random_controls", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--masks_dir", default=None,
                        help="Save the first seed's masks and a subtasks.json here (for hf-heuristic-core analyze)")
    parser.add_argument("--output", default=None)
    args = parser.parse_args()
    args.inits = [float(v) for v in args.inits.split(",")]
    torch.set_num_threads(args.threads)
    start = time.time()
    runs = [run_seed(int(seed), args) for seed in args.seeds.split(",")]
    results = {"runs": runs, "seconds": time.time() - start, "threads": args.threads,
               "settings": {k: v for k, v in vars(args).items() if k != "output"}}
    print("\n| seed | subtask | model | sub own task | kept | D_sub | D_abl | random-ablation D_abl (mean) |")
    print("|---|---|---|---|---|---|---|---|")
    trained = [run[s]["trained"] for run in runs for s in ("sr1", "sr2")]
    results["summary"] = {"trained_masks": len(trained),
                          "mask_ok": sum(r["mask_ok"] for r in trained),
                          "paper_pattern": sum(r["paper_pattern"] for r in trained),
                          "evidence_vs_random_ablation": sum(r["evidence"] for r in trained),
                          "mean_d_sub": sum(r["d_sub"] for r in trained) / len(trained),
                          "mean_d_abl": sum(r["d_abl"] for r in trained) / len(trained)}
    for run in runs:
        for subtask in ("sr1", "sr2"):
            for name in ("trained", "random_init_model"):
                r = run[subtask][name]
                failed = "" if r["mask_ok"] else " (mask failed)"
                print(f"| {run['seed']} | {subtask} | {name} | {r['sub_own_task']:.3f}{failed} | {r['kept']:.3f} | "
                      f"{r['d_sub']:+.3f} | {r['d_abl']:+.3f} | {r.get('random_d_abl_mean', float('nan')):+.3f} |")
    print(f"summary: {results['summary']}")
    print(f"total {results['seconds']:.0f} s on {args.threads} thread(s)")
    if args.output:
        atomic_write_text(args.output, json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
