"""Flags of `hf-heuristic-core induce` (torch-free: `--help` is drawn from them; the run is `cli/induce.py`).

The flags themselves are `induction.arguments.InductionArguments`: the library owns them and this command reads them,
so the library never imports the CLI.
"""

from __future__ import annotations

from ...induction.arguments import ARM_CHOICES, MASK_FIELDS, RUN_FIELDS, SOURCE_FIELDS, InductionArguments

__all__ = ["ARM_CHOICES", "DESCRIPTION", "MASK_FIELDS", "RUN_FIELDS", "SOURCE_FIELDS", "InductionArguments"]

DESCRIPTION = ("Subtask Induction: transplant a subnetwork into fresh models and train them on the target task "
               "(arms x k x seeds, resumable); --arithmetic runs the whole a+ab / ab / a^2+ab reproduction.")
