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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from ..search.defaults import DEFAULT_STRATEGY
from .checks import resolve_text_columns

logger = logging.getLogger(__name__)

GENERATED = "generated"
DESCRIPTION = "Effective size (The Heuristic Core, Fig. 6) of every checkpoint-* folder of a fine-tuning run."


@dataclass
class EffectiveSizeArguments:
    """Flags of `hf-heuristic-core effective-size` (dashes and underscores both work)."""

    output_dir: str = field(metadata={"help": "The fine-tuning run's output_dir, holding checkpoint-* folders "
                                              "(may also be given as the first positional argument)."})
    id_eval: list[str] = field(default_factory=list, metadata={
        "help": "In-distribution evaluation sets: 'generated', files, save_to_disk folders or Hub ids; "
                "NAME=SOURCE names a case."})
    ood_eval: list[str] = field(default_factory=list, metadata={
        "help": "Out-of-distribution sets, as --id_eval; sets with HANS-style subcase columns become one case "
                "per subcase."})
    train_data: str = field(default=GENERATED, metadata={
        "help": "Training data for the means and the pruning objective: 'generated', files, a folder or a Hub id."})
    train_split: str = field(default="train", metadata={"help": "Split of --train_data on the Hub."})
    eval_split: str = field(default="validation", metadata={"help": "Split of Hub evaluation sets."})
    dataset_config: str | None = field(default=None, metadata={"help": "Hub dataset configuration name."})
    text_columns: str | None = field(default=None, metadata={
        "help": "Comma-separated text columns (default: premise,hypothesis / sentence1,sentence2 / ...)."})
    tokenizer: str | None = field(default=None, metadata={
        "help": "Tokenizer (default: the one saved in the first checkpoint, else in OUTPUT_DIR)."})
    max_length: int = field(default=128, metadata={"help": "Tokenizer truncation length."})
    max_train_examples: int | None = field(default=2048, metadata={"help": "Training examples used (at most)."})
    max_eval_examples: int | None = field(default=None, metadata={"help": "Examples per evaluation case (at most)."})
    generated_train_size: int = field(default=2048, metadata={"help": "Size of generated training data."})
    generated_id_size: int = field(default=500, metadata={"help": "Size of the generated ID evaluation set."})
    generated_ood_size: int = field(default=100, metadata={"help": "Generated OOD examples per subcase."})
    data_seed: int = field(default=0, metadata={"help": "Seed of the generated data."})
    strategy: str = field(default=DEFAULT_STRATEGY, metadata={
        "help": "nested (one run per seed to the highest level, every level from its final ranking; cheapest), climb "
                "(one run per seed whose target climbs through the levels) or grid (the paper: one run per level and "
                "seed)."})
    sparsities: str = field(default="0.1,0.2,0.3,0.4,0.5,0.6,0.7", metadata={
        "help": "Comma-separated sparsity levels, fractions in [0, 1)."})
    seeds: str = field(default="0", metadata={"help": "Comma-separated pruning seeds."})
    steps_per_run: int | None = field(default=None, metadata={
        "help": "Pruning steps per grid run (default 200) or of the nested run (default 100)."})
    ramp_steps: int = field(default=8, metadata={"help": "climb: steps to ramp the target to the next level."})
    settle_steps: int = field(default=4, metadata={"help": "climb: steps held at a level after reaching it."})
    max_wait_steps: int = field(default=12, metadata={"help": "climb: most steps to wait for a level."})
    batch_size: int = field(default=16, metadata={"help": "Pruning batch size."})
    eval_batch_size: int = field(default=32, metadata={"help": "Evaluation batch size."})
    margin: float = field(default=0.03, metadata={"help": "Allowed accuracy drop (absolute; 0.03 = 3 points)."})
    means_examples: int = field(default=512, metadata={"help": "Training examples for the mean activations."})
    entailment_id: int = field(default=0, metadata={
        "help": "Class id of entailment, for scoring 3-way NLI models on 2-way (HANS-style) sets."})
    max_checkpoints: int | None = field(default=None, metadata={"help": "Compute at most this many this time."})
    results_file: str | None = field(default=None, metadata={"help": "Default: OUTPUT_DIR/effective_size.json."})
    figure: bool = field(default=True, metadata={"help": "Draw effective_size.png/.pdf (--no_figure to skip)."})
    early_stopping: bool = field(default=True, metadata={
        "help": "Evaluate each group's levels sparsest first and stop at its first faithful one (identical effective "
                "sizes, fewer evaluations); --no_early_stopping evaluates every level on every set."})
    use_cpu: bool = field(default=False, metadata={"help": "Prune on the CPU even when a GPU is present."})


def effective_size_command(argv: Sequence[str]) -> int:
    """Entry point of the subcommand (wired into `hf_heuristic_core.cli`)."""
    from transformers import HfArgumentParser
    from ..search.tracking import summary_table  # lazy: `--help` does not load it
    argv = list(argv)
    if argv and not argv[0].startswith("-"):
        argv = ["--output_dir", argv[0], *argv[1:]]
    parser = HfArgumentParser(EffectiveSizeArguments, prog="hf-heuristic-core effective-size",
                              description=DESCRIPTION,
                              usage="hf-heuristic-core effective-size RUN_DIR [flags] (see --help)")
    (arguments,) = parser.parse_args_into_dataclasses(args=argv)
    # lazy: `--help` does not load it
    from ..run_folder import FolderLock, check_inputs, refuse_other_commands
    results_folder = Path(arguments.results_file).parent if arguments.results_file else Path(arguments.output_dir)
    if not Path(arguments.output_dir).is_dir():
        from ..evaluation.effective_size import EffectiveSizeError  # lazy: `--help` does not load it
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
    from ..data.tables import load_table  # lazy: `--help` does not load it
    from ..evaluation.effective_size import EffectiveSizeError  # lazy: `--help` does not load it
    from ..search.run import ClimbSchedule  # lazy: `--help` does not load it
    # lazy: `--help` does not load it
    from ..search.tracking import find_checkpoints, track_effective_size

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
    from ..data.tokenize import tokenize_dataset  # lazy: `--help` does not load it
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

    from transformers import DataCollatorWithPadding
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
    from ..data.nli import generate_nli  # lazy: `--help` does not load it
    return generate_nli(train_size=arguments.generated_train_size, id_eval_size=arguments.generated_id_size,
                        ood_eval_size_per_subcase=arguments.generated_ood_size, seed=arguments.data_seed)


def _eval_sets(items: list[str], arguments: EffectiveSizeArguments, generated: Any, generated_split: str,
               split_subcases: bool) -> dict[str, Any]:
    from ..data.tables import load_table  # lazy: `--help` does not load it
    from ..evaluation.effective_size import EffectiveSizeError  # lazy: `--help` does not load it
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
        from ..data.nli import hans_subsets  # lazy: `--help` does not load it
        return hans_subsets(data)
    return None


def _load_tokenizer(arguments: EffectiveSizeArguments, first_checkpoint: Path):
    from transformers import AutoTokenizer
    from ..evaluation.effective_size import EffectiveSizeError  # lazy: `--help` does not load it
    from ..tokenizer_loading import check_tokenizer, missing_tokenizer  # lazy: `--help` does not load it
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
    from ..evaluation.effective_size import EffectiveSizeError  # lazy: `--help` does not load it
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError as err:
        raise EffectiveSizeError(f"{flag} must be comma-separated numbers, e.g. 0.1,0.2,0.3; got {text!r}") from err


def _ints(text: str, flag: str) -> list[int]:
    from ..evaluation.effective_size import EffectiveSizeError  # lazy: `--help` does not load it
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError as err:
        raise EffectiveSizeError(f"{flag} must be comma-separated integers, e.g. 0,1,2; got {text!r}") from err
