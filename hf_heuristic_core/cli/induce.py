"""`hf-heuristic-core induce`: Subtask Induction (Zhang, Lepori & Pavlick) over arms x k x seeds, resumable.

    hf-heuristic-core induce --arithmetic --output_dir runs/si                  # the CPU-scale reproduction
    hf-heuristic-core induce --source runs/si/source --masks my_masks --output_dir runs/si2 --arms subnetwork,scratch

The flags are `induction.arguments.InductionArguments` (torch-free; the library owns them and this command reads
them, so the library never imports the CLI); `cli/flags/induce.py` names them for `--help`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from transformers import AutoConfig, HfArgumentParser

from ..artifacts import CONFIG_NAME, check_finished
from ..errors import UsageError
from ..induction.runner import run_induction
from ..run_folder import claim_output_dir
from .flags.induce import ARM_CHOICES, DESCRIPTION, MASK_FIELDS, RUN_FIELDS, SOURCE_FIELDS, InductionArguments

__all__ = ["ARM_CHOICES", "DESCRIPTION", "MASK_FIELDS", "NOT_IDENTITY", "RUN_FIELDS", "SOURCE_FIELDS",
           "InductionArguments", "check_source", "induce_command", "induce_inputs"]

# Flags that add runs to an experiment or only change its report, not what its existing records mean.
NOT_IDENTITY = ("output_dir", "arms", "seeds", "ks", "figure", "overwrite_output_dir", "allow_unfinished",
                "min_source_accuracy", "min_subnetwork_accuracy")


def check_source(args: InductionArguments) -> None:
    """From the command line the target task is the arithmetic one, so the source must be a causal LM over the
    number tokens (+ a separator); a BERT or any general LM is refused now, naming what it is, instead of a
    vocabulary-size hint that cannot help."""
    if args.arithmetic or not args.source:
        return
    if not (Path(args.source) / "config.json").is_file():
        raise UsageError(f"--source {args.source}: no saved model there (config.json missing); pass the folder "
                         "save_pretrained wrote, or --arithmetic to train one.")
    config = AutoConfig.from_pretrained(args.source)
    classes = config.architectures or []
    causal = any(name.endswith(("ForCausalLM", "LMHeadModel")) for name in classes)
    vocab = getattr(config, "vocab_size", None)
    if not causal or getattr(config, "is_encoder_decoder", False):
        raise UsageError(f"--source {args.source} is a {', '.join(classes) or config.model_type} model; induce's "
                         "command line trains the arithmetic target task (a^2 + ab mod p, next-token prediction), "
                         "which needs a causal LM trained on the arithmetic source task over number tokens. Train one "
                         "with --arithmetic, or call run_induction(args, source=..., masks=..., data=...) from Python "
                         "for another model and task.")
    if vocab is not None and vocab != args.num_tokens + 1 and vocab > 4 * max(args.num_tokens, 100):
        raise UsageError(f"--source {args.source} has a vocabulary of {vocab} tokens, a general language model's, not "
                         f"the {args.num_tokens} number tokens plus a separator of the arithmetic task that induce "
                         "trains; use an arithmetic source (--arithmetic trains one), or run_induction from Python "
                         "with your own data.")


def induce_command(argv: Sequence[str]) -> int:
    parser = HfArgumentParser(InductionArguments, prog="hf-heuristic-core induce", description=DESCRIPTION)
    (args,) = parser.parse_args_into_dataclasses(args=list(argv))
    check_source(args)
    if args.masks and (Path(args.masks) / CONFIG_NAME).is_file():
        for reason in check_finished(args.masks, args.allow_unfinished):
            print(f"WARNING: unfinished masks (--allow_unfinished): {reason}")
    settings = {k: v for k, v in asdict(args).items() if k not in NOT_IDENTITY}
    with claim_output_dir(args.output_dir, "induce", settings, overwrite=args.overwrite_output_dir,
                          inputs=induce_inputs(args), legacy_settings=_legacy_experiment) as claim:
        report = run_induction(args)
        claim.finish()
    for warning in report["warnings"]:
        print(f"WARNING: {warning}")
    for row in report["summary"]:
        print(f"{row['arm']:>10} k={row['k']:<5} test accuracy {row['mean']:.3f} "
              f"({row['min']:.3f}-{row['max']:.3f}, {row['n']} seeds)")
    print(f"Report: {args.output_dir}/report.md (report.json, induction.png)")
    return 0


def induce_inputs(args: InductionArguments) -> list[tuple[str, Any]]:
    """What the run reads. With --arithmetic, a --source inside the output folder is the run's own product (trained
    there when absent, reused on resume), not an input; anywhere else, and as the output folder itself, it is."""
    source = args.source
    if args.arithmetic and source:
        source_path, out = Path(source).expanduser().resolve(), Path(args.output_dir).expanduser().resolve()
        if out in source_path.parents:
            source = None
    return [("--source", source), ("--masks", args.masks)]


def _legacy_experiment(folder) -> dict[str, Any] | None:
    """An induce folder written before run records: its records carry their own settings, which the runner checks
    run by run, so the folder itself is accepted."""
    return {} if (folder / "runs").is_dir() or (folder / "report.json").is_file() else None
