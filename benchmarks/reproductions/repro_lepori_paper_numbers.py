"""Lepori et al.'s own subtask-test numbers, recomputed from the `results.csv` files in his repository.

The paper shows D_sub / D_abl as figures; the reference numbers our reproduction compares with come from here.
`Language/Results/<variant>/<model>/Mask_Training/<base model>_T<task>/results.csv` holds, per mask run (3 seeds per
base model and subroutine), the test accuracies of the subnetwork (`0_ablation` empty) and of the zero-ablated model
(`0_ablation == "zero"`) on every test task. Target / other test sets per mask task (his `syntax_datamodule.py`
`TASKS` names: `..._ablate_v` means only the subject differs in the odd sentence, and so on):

    SV agreement singular: 1 (subject) -> 4 / 3, 2 (verb) -> 3 / 4;  plural: 6 -> 9 / 8, 7 -> 8 / 9
    anaphora singular: 11 (pronoun) -> 14 / 13, 12 (antecedent) -> 13 / 14;  plural: 16 -> 19 / 18, 17 -> 18 / 19

Accuracies are clamped to [0.25, 1] before the differences, as in the paper.

    git clone https://github.com/mlepori1/Compositional_Subnetworks /tmp/cs
    python benchmarks/reproductions/repro_lepori_paper_numbers.py --repo /tmp/cs            # BERT-Small from scratch
    python benchmarks/reproductions/repro_lepori_paper_numbers.py --repo /tmp/cs --model BERT_Small_LM
"""

from __future__ import annotations

import argparse
import csv
import io
import statistics
import subprocess
from typing import Any

TARGET_OTHER = {"SV_Agr_Singular": {1: (4, 3), 2: (3, 4)}, "SV_Agr_Plural": {6: (9, 8), 7: (8, 9)},
                "Anaphora_Singular": {11: (14, 13), 12: (13, 14)}, "Anaphora_Plural": {16: (19, 18), 17: (18, 19)}}
CHANCE = 0.25


def git(repo: str, *args: str) -> str:
    return subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True, check=True).stdout


def mask_runs(repo: str, model: str) -> list[dict[str, Any]]:
    runs = []
    for path in git(repo, "ls-tree", "-r", "--name-only", "HEAD", "Language/Results").split():
        parts = path.split("/")
        if len(parts) != 7 or parts[3] != model or parts[4] != "Mask_Training" or parts[6] != "results.csv":
            continue
        rows = [r for r in csv.DictReader(io.StringIO(git(repo, "show", f"HEAD:{path}"))) if r["0_train"] == "0"]
        by_id: dict[str, list[dict[str, str]]] = {}
        for row in rows:
            by_id.setdefault(row["0_Model_ID"], []).append(row)
        for group in by_id.values():
            task = int(float(group[0]["0_train_task"]))
            target, other = TARGET_OTHER[parts[2]][task]
            def acc(ablation: str, test: int) -> float:
                return next(float(r["2_test_acc"]) for r in group if r["0_ablation"] == ablation
                            and int(float(r["1_task"])) == test)
            clamp = lambda a: max(a, CHANCE)
            sub = next(r for r in group if r["0_ablation"] == "")
            runs.append({"variant": parts[2], "task": task, "own": acc("", task),
                         "d_sub": clamp(acc("", target)) - clamp(acc("", other)),
                         "d_abl": clamp(acc("zero", target)) - clamp(acc("zero", other)),
                         "kept": float(sub["2_test_L0"]) / float(sub["2_test_L0_Max"])})
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repo", required=True, help="a clone of mlepori1/Compositional_Subnetworks")
    parser.add_argument("--model", default="BERT_Small", help="BERT_Small (from scratch) or BERT_Small_LM")
    args = parser.parse_args()
    runs = mask_runs(args.repo, args.model)
    if not runs:
        raise SystemExit(f"No {args.model} Mask_Training results.csv under {args.repo}/Language/Results.")
    d_sub, d_abl, kept = ([r[k] for r in runs] for k in ("d_sub", "d_abl", "kept"))
    print(f"{args.model}: {len(runs)} masks")
    print(f"D_sub {statistics.fmean(d_sub):+.3f} ± {statistics.stdev(d_sub):.3f}, "
          f"D_abl {statistics.fmean(d_abl):+.3f} ± {statistics.stdev(d_abl):.3f} (mean ± std)")
    print(f"|D_sub| <= 0.05: {sum(abs(v) <= 0.05 for v in d_sub)} of {len(runs)}; D_sub > 0 and D_abl < 0: "
          f"{sum(s > 0 and a < 0 for s, a in zip(d_sub, d_abl))}; own task >= 0.9: "
          f"{sum(r['own'] >= 0.9 for r in runs)}")
    print(f"kept: min {min(kept):.4f}, median {statistics.median(kept):.4f}, max {max(kept):.4f}")
    for variant in TARGET_OTHER:
        part = [r for r in runs if r["variant"] == variant]
        if part:
            print(f"  {variant}: D_sub {statistics.fmean(r['d_sub'] for r in part):+.3f}, "
                  f"D_abl {statistics.fmean(r['d_abl'] for r in part):+.3f}, "
                  f"kept median {statistics.median(r['kept'] for r in part):.3f} ({len(part)} masks)")


if __name__ == "__main__":
    main()
