"""Reproduction of Zhang, Lepori & Pavlick, *Instilling Inductive Biases with Subnetworks* (arithmetic), across sources.

A 2-layer GPT-2 (d 64, 4 heads, MLP 256, untied embeddings, no dropout) learns T1 = a + ab mod 7 on half of the
40 x 40 pairs; continuous sparsification finds the weights that do S1 = ab (token embedding and every attention /
MLP Conv1D masked); then each arm (the transplanted subnetwork, a random subnetwork of equal per-tensor size,
scratch, optionally the full source) is trained on T2 = a^2 + ab from the 40 ambiguous diagonal pairs (i, i) plus k
disambiguating pairs, and scored on 400 held-out pairs at its best validation epoch. Everything runs through
`hf_heuristic_core.induction.run_induction` (the same code as `hf-heuristic-core induce --arithmetic`).

One source is not enough to judge the method: the effect at k = 100 was +0.12 on one source run and +0.05 on
another. So this script repeats the whole pipeline for several *sources* (`--sources`, the runner's `data_seed`):
each source has its own initialization, its own T1 train/test split, its own discovered subnetwork and its own T2
splits (diagonal + k disambiguating pairs, validation, test). Within a source, `--seeds` vary the arms' fresh
initialization and data order. The summary answers, per k: does the subnetwork arm beat scratch and the random
subnetwork in every source, and by how much (mean and spread over sources of the per-source mean differences)?

| setting | paper (Zhang et al.) | here | why |
|---|---|---|---|
| numbers N, modulus | a, b < 1000, mod 7 | N = 40, mod 7 | CPU |
| model | GPT-2, d 128, 4 heads, 2-12 layers | 2 layers, d 64, MLP 256 | CPU |
| T1 training data | 20% of pairs | 50% of 1600 pairs, 150 epochs | N = 40 has few pairs |
| masked weights | attention + MLP | + token embedding (`--mask_target_modules`) | no effect without it at N = 40 |
| discovery | CS, 50 epochs, lambda 1e-7..1e-8 | 30 epochs, lambda 1e-6, beta 1 -> 100 | CPU |
| T2 data | 1000 diagonal + 10..10^4 rows | 40 diagonal + k in {20, 100} | N = 40 |
| runs | 5 seeds, one source per depth | `--sources` x `--seeds` | the source varies too |

    python benchmarks/repro_subtask_induction.py --sources 0,1,2 --seeds 0,1,2 --output_dir runs/repro_si_sources \\
        --results benchmarks/results_subtask_induction_sources.json

Resumable: every (source, arm, k, seed) record is a file under `--output_dir`/source<d>/runs; rerun to continue.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import time
from typing import Any

import torch

from hf_heuristic_core.induction.runner import InductionArguments, run_induction
from hf_heuristic_core.io_utils import atomic_write_text


def spread(values: list[float]) -> dict[str, float]:
    return {"mean": statistics.fmean(values), "std": statistics.stdev(values) if len(values) > 1 else 0.0,
            "min": min(values), "max": max(values), "n": len(values)}


def source_means(report: dict[str, Any]) -> dict[tuple[str, int], list[float]]:
    """(arm, k) -> the test accuracies of every seed in one source's report."""
    out: dict[tuple[str, int], list[float]] = {}
    for row in report["summary"]:
        out[(row["arm"], int(row["k"]))] = list(row["values"])
    return out


def across_sources(reports: dict[int, dict[str, Any]], arms: list[str], ks: list[int]) -> dict[str, Any]:
    """Per k: each arm over all (source, seed) runs and over source means; the subnetwork's per-source lead."""
    table: dict[str, Any] = {}
    per_source = {d: source_means(r) for d, r in reports.items()}
    for k in ks:
        row: dict[str, Any] = {"arms": {}, "lead": {}}
        for arm in arms:
            runs = [v for d in per_source for v in per_source[d].get((arm, k), [])]
            means = [statistics.fmean(per_source[d][(arm, k)]) for d in per_source if (arm, k) in per_source[d]]
            row["arms"][arm] = {"all_runs": spread(runs), "source_means": spread(means),
                                "per_source": {d: statistics.fmean(per_source[d][(arm, k)]) for d in per_source
                                               if (arm, k) in per_source[d]}}
        for control in (a for a in arms if a != "subnetwork"):
            leads = {d: statistics.fmean(per_source[d][("subnetwork", k)]) - statistics.fmean(per_source[d][(control, k)])
                     for d in per_source}
            seedwise = {d: sum(min(per_source[d][("subnetwork", k)]) > v for v in per_source[d][(control, k)])
                        for d in per_source}
            row["lead"][control] = {"per_source": leads, "over_sources": spread(list(leads.values())),
                                    "positive_in_every_source": all(v > 0 for v in leads.values()),
                                    "worst_subnetwork_seed_above_control_seeds": seedwise}
        table[str(k)] = row
    return table


def print_table(table: dict[str, Any], arms: list[str], diagnostics: dict[int, dict[str, Any]]) -> None:
    for d, diag in diagnostics.items():
        print(f"source {d}: T1 test {diag.get('source_test_accuracy', float('nan')):.3f}, subnetwork keeps "
              f"{diag.get('kept_fraction', float('nan')):.3f}, S1 {diag.get('subnetwork_accuracy', float('nan')):.3f}"
              f", T1 {diag.get('subnetwork_source_task_accuracy', float('nan')):.3f}")
    print("\n| k | arm | mean over all runs (std, min-max) | source means |\n|---|---|---|---|")
    for k, row in table.items():
        for arm in arms:
            a = row["arms"][arm]
            runs = a["all_runs"]
            print(f"| {k} | {arm} | {runs['mean']:.3f} ({runs['std']:.3f}, {runs['min']:.3f}-{runs['max']:.3f}) | "
                  + ", ".join(f"{v:.3f}" for v in a["per_source"].values()) + " |")
    print("\n| k | subnetwork minus | per source | mean ± std over sources | > 0 in every source |\n|---|---|---|---|---|")
    for k, row in table.items():
        for control, lead in row["lead"].items():
            over = lead["over_sources"]
            print(f"| {k} | {control} | " + ", ".join(f"{v:+.3f}" for v in lead["per_source"].values())
                  + f" | {over['mean']:+.3f} ± {over['std']:.3f} | {lead['positive_in_every_source']} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output_dir", default="runs/repro_si_sources")
    parser.add_argument("--sources", default="0,1,2", help="data seeds: source init, T1 split, discovery, T2 splits")
    parser.add_argument("--arms", default="subnetwork,random,scratch")
    parser.add_argument("--seeds", default="0,1,2", help="arm seeds within each source")
    parser.add_argument("--ks", default="20,100")
    parser.add_argument("--mask_target_modules", default="wte,c_attn,c_proj,c_fc")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--results", default=None, help="Write the per-source reports and the summary as JSON here.")
    options = parser.parse_args()
    torch.set_num_threads(options.threads)
    logging.basicConfig(format="%(asctime)s %(message)s", level=logging.INFO)
    for name in ("transformers", "datasets", "httpx", "filelock"):
        logging.getLogger(name).setLevel(logging.WARNING)
    arms = options.arms.split(",")
    ks = [int(k) for k in options.ks.split(",")]
    if "subnetwork" not in arms:
        raise SystemExit("--arms must include subnetwork: the summary compares it with the other arms.")
    started = time.time()
    reports, seconds = {}, {}
    for source in (int(d) for d in options.sources.split(",")):
        begun = time.time()
        args = InductionArguments(output_dir=f"{options.output_dir}/source{source}", arithmetic=True,
                                  data_seed=source, arms=options.arms, seeds=options.seeds, ks=options.ks,
                                  mask_target_modules=options.mask_target_modules, figure=False)
        reports[source] = run_induction(args)
        seconds[source] = time.time() - begun
        table = across_sources(reports, arms, ks)
        result = {"sources": {d: {"diagnostics": r["diagnostics"], "summary": r["summary"], "warnings": r["warnings"],
                                  "seconds_this_invocation": seconds[d]} for d, r in reports.items()},
                  "across_sources": table, "settings": vars(options), "threads": options.threads,
                  "seconds_this_invocation": time.time() - started}
        if options.results:
            atomic_write_text(options.results, json.dumps(result, indent=2) + "\n")
    print_table(across_sources(reports, arms, ks), arms, {d: r["diagnostics"] for d, r in reports.items()})
    print(f"total {time.time() - started:.0f} s (this invocation; finished runs are skipped on restart)")


if __name__ == "__main__":
    main()
