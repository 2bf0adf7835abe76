"""One launch for the DDP and the FSDP cases of tests/training/test_trainer_distributed.py: each `--case NAME=FLAGS`
names its helper first (`ddp ...` runs ddp_prune_script.py's run, `fsdp ...` fsdp_prune_script.py's), so the
single-process references of both share one process and the two-process cases one torchrun launch (a launch costs
~10-20 s of imports on 2 cores; the cases themselves take a second or two).

    python -m torch.distributed.run --nproc_per_node=2 tests/training/distributed_prune_script.py --output DIR \\
        --batch 4 --case "ddp-seq=ddp --task seq" --case "fsdp-seq=fsdp --task seq --fsdp"

The DDP cases must come first: a FSDP case lets accelerate keep its FSDP plugin on the CPU for the rest of the
launch (fsdp_prune_script.allow_fsdp_on_cpu), which changes nothing for a case without FSDP settings, but the order
keeps each DDP case exactly what ddp_prune_script.py alone runs.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ddp_prune_script
import fsdp_prune_script

HELPERS = {"ddp": ddp_prune_script, "fsdp": fsdp_prune_script}


def main() -> None:
    launcher = argparse.ArgumentParser()
    launcher.add_argument("--output", required=True)
    launcher.add_argument("--batch", type=int, required=True)
    launcher.add_argument("--case", action="append", required=True, metavar="NAME=HELPER FLAGS")
    options = launcher.parse_args()
    torch.set_num_threads(1)
    seen_fsdp = False
    for spec in options.case:
        name, _, rest = spec.partition("=")
        helper, *flags = shlex.split(rest)
        if helper not in HELPERS:
            raise SystemExit(f"case {name!r}: the helper must be one of {sorted(HELPERS)}, got {helper!r}")
        if helper == "ddp" and seen_fsdp:
            raise SystemExit(f"case {name!r}: DDP cases must come before the FSDP ones (see the module docstring)")
        seen_fsdp |= helper == "fsdp"
        module = HELPERS[helper]
        module.run(module.parser().parse_args(["--output", os.path.join(options.output, name),
                                                "--batch", str(options.batch), *flags]))


if __name__ == "__main__":
    main()
