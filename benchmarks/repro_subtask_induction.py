"""CPU-scale reproduction of Zhang, Lepori & Pavlick, *Instilling Inductive Biases with Subnetworks* (arithmetic).

A 2-layer GPT-2 (d 64, 4 heads, MLP 256, untied embeddings, no dropout) learns T1 = a + ab mod 7 on half of the
40 x 40 pairs; continuous sparsification finds the weights that do S1 = ab (token embedding and every attention /
MLP Conv1D masked); then each arm (the transplanted subnetwork, a random subnetwork of equal per-tensor size, the
full source, scratch) is trained on T2 = a^2 + ab from the 40 ambiguous diagonal pairs (i, i) plus k disambiguating
pairs, and scored on 400 held-out pairs at its best validation epoch. Everything runs through
`hf_heuristic_core.induction.run_induction` (the same code as `hf-heuristic-core induce --arithmetic`), so the run
is resumable: rerun the command with more --seeds to add seeds.

    python benchmarks/repro_subtask_induction.py --output_dir runs/repro_si \\
        --results benchmarks/results_subtask_induction.json
"""

from __future__ import annotations

import argparse
import json
import logging
import time

import torch

from hf_heuristic_core.induction.runner import InductionArguments, run_induction


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output_dir", default="runs/repro_si")
    parser.add_argument("--arms", default="subnetwork,random,scratch,full")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--ks", default="20,100")
    parser.add_argument("--mask_target_modules", default="wte,c_attn,c_proj,c_fc")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--results", default=None, help="Write the report and timing as JSON here.")
    options = parser.parse_args()
    torch.set_num_threads(options.threads)
    logging.basicConfig(format="%(asctime)s %(message)s", level=logging.INFO)
    for name in ("transformers", "datasets", "httpx", "filelock"):
        logging.getLogger(name).setLevel(logging.WARNING)
    started = time.time()
    args = InductionArguments(output_dir=options.output_dir, arithmetic=True, arms=options.arms, seeds=options.seeds,
                              ks=options.ks, mask_target_modules=options.mask_target_modules)
    report = run_induction(args)
    seconds = time.time() - started
    print(open(f"{options.output_dir}/report.md").read())
    print(f"total {seconds:.0f} s (this invocation; finished runs are skipped on restart)")
    if options.results:
        report["seconds_this_invocation"] = seconds
        report["threads"] = options.threads
        with open(options.results, "w") as handle:
            json.dump(report, handle, indent=2)


if __name__ == "__main__":
    main()
