"""`hf-heuristic-core effective-size OUTPUT_DIR ...`: effective size of every checkpoint of a fine-tuning run.

    hf-heuristic-core effective-size runs/mnli --train_data generated --id_eval generated --ood_eval generated

Evaluation and training data are local files / folders, Hub dataset ids, or ``generated`` (`generate_nli`, offline).
OOD sets with HANS-style ``subcase`` columns are split into one case per subcase. Groups: ID (the --id_eval sets),
OOD (the --ood_eval sets) and mixed (all of them, when both are given). Resumable: results are stored per checkpoint
(atomically), so a run that was interrupted, even killed, computes only the checkpoints not yet in the results file
when started again with the same flags; there is nothing to pass. `--seeds 0,1,2` repeats each search per pruning
seed and reports the mean ± half the min-max range. Writes ``effective_size.json`` and ``effective_size.png`` /
``.pdf`` into OUTPUT_DIR.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from transformers import AutoTokenizer, DataCollatorWithPadding, HfArgumentParser

from ..data.nli import generate_nli, hans_subsets
from ..data.tables import load_table
from ..data.tokenize import tokenize_dataset
from ..evaluation.effective_size import EffectiveSizeError
from ..run_folder import FolderLock, check_inputs, refuse_other_commands
from ..search.run import ClimbSchedule
from ..search.tracking import find_checkpoints, summary_table, track_effective_size
from ..tokenizer_loading import check_tokenizer, missing_tokenizer
from .checks import resolve_text_columns
from .flags.effective_size import DESCRIPTION, GENERATED, EffectiveSizeArguments

__all__ = ["DESCRIPTION", "FINE_TUNING_KINDS", "GENERATED", "EffectiveSizeArguments", "data_inputs",
           "effective_size_command", "run_effective_size"]

logger = logging.getLogger(__name__)


def effective_size_command(argv: Sequence[str]) -> int:
    """Entry point of the subcommand (wired into `hf_heuristic_core.cli`)."""
    argv = list(argv)
    if argv and not argv[0].startswith("-"):
        argv = ["--output_dir", argv[0], *argv[1:]]
    parser = HfArgumentParser(EffectiveSizeArguments, prog="hf-heuristic-core effective-size",
                              description=DESCRIPTION,
                              usage="hf-heuristic-core effective-size RUN_DIR [flags] (see --help)")
    (arguments,) = parser.parse_args_into_dataclasses(args=argv)
    results_folder = Path(arguments.results_file).parent if arguments.results_file else Path(arguments.output_dir)
    if not Path(arguments.output_dir).is_dir():
        raise EffectiveSizeError(f"{arguments.output_dir}: no such folder; pass the output_dir of a fine-tuning run "
                                 "that saved checkpoint-* folders.")
    check_inputs(results_folder, data_inputs(arguments), holding=False)
    refuse_other_commands(arguments.output_dir, FINE_TUNING_KINDS, "a fine-tuning run's folder", "OUTPUT_DIR")
    refuse_other_commands(results_folder, FINE_TUNING_KINDS, "a fine-tuning run's folder or one of your own",
                          "--results_file folder")
    with FolderLock(results_folder, "effective-size", "--results_file folder"):   # writable, one writer at a time
        results = run_effective_size(arguments)
    print(summary_table(results))
    print(f"results: {results.path}")
    return 0


# Commands whose run record may mark the folder effective-size reads (a `prune` folder's checkpoint-* are mask
# checkpoints, not a fine-tuning run's); a folder without a record (a Trainer's output_dir) is always accepted.
FINE_TUNING_KINDS = ("finetune",)


def data_inputs(arguments: EffectiveSizeArguments) -> list[tuple[str, str]]:
    """The data the command reads: its results folder may not be one of them (a folder of per-split files would take
    a results file for a data file). Data kept inside the fine-tuning run's folder is fine: the command writes only
    its results file and figure, so it does not refuse a folder that holds its inputs, as it holds its checkpoints."""
    pairs = [("--train_data", arguments.train_data)]
    pairs += [("--id_eval", item) for item in arguments.id_eval] + [("--ood_eval", item) for item in arguments.ood_eval]
    return [(flag, value.split("=", 1)[-1]) for flag, value in pairs if value.split("=", 1)[-1] != GENERATED]


def run_effective_size(arguments: EffectiveSizeArguments):
    """Load and tokenize the data, then `track_effective_size` over the run's checkpoints."""
    if not arguments.id_eval and not arguments.ood_eval:
        raise EffectiveSizeError("no evaluation data: pass --id_eval and/or --ood_eval (files, Hub ids or "
                                 "'generated').")
    checkpoints = find_checkpoints(arguments.output_dir)
    if not checkpoints:
        raise EffectiveSizeError(f"{arguments.output_dir} has no checkpoint-* folders; point this at the "
                                 "output_dir of a fine-tuning run that saved checkpoints.")
    tokenizer = _load_tokenizer(arguments, checkpoints[0][1])
    generated = _generated(arguments) if GENERATED in {arguments.train_data, *_sources(arguments)} else None

    train = generated["train"] if arguments.train_data == GENERATED else \
        load_table(arguments.train_data, arguments.dataset_config, arguments.train_split)
    if arguments.max_train_examples:
        train = train.select(range(min(arguments.max_train_examples, len(train))))
    id_sets = _eval_sets(arguments.id_eval, arguments, generated, "id_eval", split_subcases=False)
    ood_sets = _eval_sets(arguments.ood_eval, arguments, generated, "ood_eval", split_subcases=True)
    clash = set(id_sets) & set(ood_sets)
    if clash:
        raise EffectiveSizeError(f"--id_eval and --ood_eval both give cases named {sorted(clash)}; name them "
                                 "apart with NAME=SOURCE.")
    columns = resolve_text_columns(train.column_names, arguments.text_columns)
    train_tokens = tokenize_dataset(train, tokenizer, columns, arguments.max_length, keep_labels=False)
    eval_sets = {name: tokenize_dataset(data, tokenizer, columns, arguments.max_length)
                 for name, data in {**id_sets, **ood_sets}.items()}
    groups: dict[str, list[str]] = {}
    if id_sets:
        groups["ID"] = list(id_sets)
    if ood_sets:
        groups["OOD"] = list(ood_sets)
    if id_sets and ood_sets:
        groups["mixed"] = list(id_sets) + list(ood_sets)

    climb = ClimbSchedule(ramp_steps=arguments.ramp_steps, settle_steps=arguments.settle_steps,
                          max_wait_steps=arguments.max_wait_steps)
    overrides: dict[str, Any] = {"per_device_train_batch_size": arguments.batch_size,
                                 "per_device_eval_batch_size": arguments.eval_batch_size}
    if arguments.use_cpu:
        overrides["use_cpu"] = True
    return track_effective_size(
        arguments.output_dir, train_tokens, eval_sets, groups, strategy=arguments.strategy,
        sparsities=_floats(arguments.sparsities, "--sparsities"), seeds=_ints(arguments.seeds, "--seeds"),
        steps_per_run=arguments.steps_per_run, climb=climb, margin=arguments.margin,
        results_file=arguments.results_file, max_checkpoints=arguments.max_checkpoints, figure=arguments.figure,
        pruning_overrides=overrides, collate_fn=DataCollatorWithPadding(tokenizer),
        means_examples=arguments.means_examples, eval_batch_size=arguments.eval_batch_size,
        entailment_id=arguments.entailment_id, early_stopping=arguments.early_stopping)


# ------------------------------------------------------------------ helpers
def _sources(arguments: EffectiveSizeArguments) -> list[str]:
    return [item.split("=", 1)[-1] for item in [*arguments.id_eval, *arguments.ood_eval]]


def _generated(arguments: EffectiveSizeArguments):
    return generate_nli(train_size=arguments.generated_train_size, id_eval_size=arguments.generated_id_size,
                        ood_eval_size_per_subcase=arguments.generated_ood_size, seed=arguments.data_seed)


def _eval_sets(items: list[str], arguments: EffectiveSizeArguments, generated: Any, generated_split: str,
               split_subcases: bool) -> dict[str, Any]:
    sets: dict[str, Any] = {}
    for item in items:
        name, source = item.split("=", 1) if "=" in item else ("", item)
        if source == GENERATED:
            data, default_name = generated[generated_split], generated_split
        else:
            data = load_table(source, arguments.dataset_config, arguments.eval_split)
            default_name = Path(source.split(",")[0]).name.split(".")[0] or source
        parts = _subcases(data) if split_subcases and not name else None
        for case, part in (parts or {name or default_name: data}).items():
            if case in sets:
                raise EffectiveSizeError(f"two evaluation sets are named {case!r}; name them with NAME=SOURCE.")
            if arguments.max_eval_examples:
                part = part.select(range(min(arguments.max_eval_examples, len(part))))
            if "label" not in part.column_names and "labels" not in part.column_names:
                raise EffectiveSizeError(f"evaluation set {case!r} has no label column (columns: "
                                         f"{part.column_names}); effective size compares accuracies.")
            sets[case] = part
    return sets


def _subcases(data) -> dict[str, Any] | None:
    """One set per HANS-style subcase, when the data says which subcase each row belongs to."""
    columns = set(data.column_names)
    if "subcase_full" in columns or {"heuristic", "subcase"} <= columns:
        return hans_subsets(data)
    return None


def _load_tokenizer(arguments: EffectiveSizeArguments, first_checkpoint: Path):
    if arguments.tokenizer:
        check_tokenizer(arguments.tokenizer, flag="--tokenizer")
    candidates = [arguments.tokenizer] if arguments.tokenizer else [str(first_checkpoint), arguments.output_dir]
    for candidate in candidates:
        if missing_tokenizer(candidate):   # transformers would build an empty tokenizer from it, without a word
            continue
        try:
            tokenizer = AutoTokenizer.from_pretrained(candidate)
        except (OSError, ValueError):
            continue
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        return tokenizer
    raise EffectiveSizeError(f"no tokenizer found in {candidates}; pass --tokenizer NAME_OR_PATH (Trainer saves "
                             "one into each checkpoint when given processing_class=tokenizer).")


def _floats(text: str, flag: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError as err:
        raise EffectiveSizeError(f"{flag} must be comma-separated numbers, e.g. 0.1,0.2,0.3; got {text!r}") from err


def _ints(text: str, flag: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError as err:
        raise EffectiveSizeError(f"{flag} must be comma-separated integers, e.g. 0,1,2; got {text!r}") from err
