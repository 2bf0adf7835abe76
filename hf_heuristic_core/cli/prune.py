"""`hf-heuristic-core prune`: learn a mask at a target sparsity for one model and dataset.

    hf-heuristic-core prune --model NAME_OR_PATH --dataset NAME_OR_FILES --target_sparsity 0.5 --output_dir DIR

`--help` shows the pruning flags and the training-loop flags that matter (built without importing torch, so it is
fast); `--help-all` lists every `TrainingArguments` flag, all of which are still accepted. Flags the mask optimizer
would silently ignore (`--learning_rate`, `--weight_decay`, `--optim`, ...) are refused with the flag to use instead.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar

from ..ablation.names import ABLATION_MODES
from ..config import PruningConfig, registered_settings_classes, route_method_settings
from ..errors import PruningError, UsageError
from ..granularity import GRANULARITIES
from ..granularity.weight.settings import parse_layers as _parse_layers
from ..relaxations import RELAXATIONS, relaxation_settings_class
from .settings_flags import SettingsFlag
from ..training.fields import PruningFields
from .checks import (
    check_model_source,
    check_rows,
    check_tokenizer,
    resolve_text_columns,
)
from .help import render_help, render_source_help, source_fields, wants_help
from .prune_data import DEFAULT_EVAL_EXAMPLES, check_labels, check_split_flags, load_prune_data
from .settings_flags import flag_values, settings_flags, settings_flags_dataclass, unset_flags_check

DESCRIPTION = "Learn a mask at a target sparsity for one model and dataset; writes the mask artifact."
PROG = "hf-heuristic-core prune"

TASK_CLASSES = {
    "sequence_classification": "AutoModelForSequenceClassification",
    "causal_lm": "AutoModelForCausalLM",
    "token_classification": "AutoModelForTokenClassification",
}
ABLATIONS = ABLATION_MODES

# One flag per field of the registered granularities' and relaxations' settings dataclasses (`cli.settings_flags`): a
# field added there, or a method registered from outside, is a prune flag, with its help, and reaches the chosen
# method's settings in PruningConfig, without an edit here. These are the flags at import; a method registered later
# adds its own when the command line is parsed (`current_settings_flags`, `prune_arguments_class`).
SETTINGS_FLAGS = settings_flags(registered_settings_classes())
PruneSettingsFlags = settings_flags_dataclass(SETTINGS_FLAGS, "PruneSettingsFlags")


@dataclass
class PruneScriptArguments(PruneSettingsFlags):
    """What to prune and on which data (the pruning hyperparameters are `PruningArguments`); the granularity and
    relaxation settings flags come from `PruneSettingsFlags`."""

    # The method selectors' choices, read from the registries when help is drawn (not a dataclass field).
    flag_choices: ClassVar[dict[str, Callable[[], list[str]]]] = {"granularity": GRANULARITIES.names,
                                                                  "relaxation": RELAXATIONS.names}

    _argument_group_name = "what to prune"

    model: str = field(metadata={"help": "Hub id or local folder of a fine-tuned model (classifier or causal LM)."})
    dataset: str = field(metadata={
        "help": "Hub dataset id, a save_to_disk folder, or local json/jsonl/csv/parquet file(s), comma-separated."})
    dataset_config: str | None = field(default=None, metadata={"help": "Hub dataset configuration name."})
    train_split: str = field(default="train", metadata={"help": "Split to prune on."})
    eval_split: str | None = field(default=None, metadata={
        "help": "Split for the final KL / agreement summary (a Hub dataset or a folder with one file per split; a "
                "single data file has no splits: use --eval_fraction). Default: the first 256 training examples."})
    eval_fraction: float | None = field(default=None, metadata={
        "help": "Hold out this share of the training rows (a random split seeded with --seed) for the final KL / "
                "agreement; the mask is learned on the rest."})
    text_columns: str | None = field(default=None, metadata={
        "help": "Comma-separated text column(s); default: premise,hypothesis / sentence1,sentence2 / "
                "question1,question2 / text / sentence, whichever exist."})
    max_length: int = field(default=128, metadata={"help": "Tokenizer truncation length (the paper: 128)."})
    max_train_examples: int | None = field(default=None, metadata={"help": "Use at most this many examples."})
    means_examples: int = field(default=1024, metadata={"help": "Training examples used for mean activations."})
    task: str = field(default="auto", metadata={
        "help": "auto, sequence_classification, causal_lm or token_classification."})
    ablation: str | None = field(default=None, metadata={
        "help": "mean, zero or resample (default: mean; zero for --granularity weight)."})
    granularity: str = field(default="unit", metadata={
        "help": "What one mask entry is: a head or MLP block (unit), an MLP neuron, a weight, an edge of the "
                "residual graph (pre-LN decoders) (granularity/<name>/)."})
    uniform_layers: bool = field(default=False, metadata={
        "help": "Binarize to the same number of heads (whole key/value groups under GQA) and the same MLP width in "
                "every layer, so that `export` writes a stock config plain transformers loads "
                "(PruningConfig.uniform_layers). This can move the sparsity away from the target; the summary and "
                "the card then say by how much and why."})
    relaxation: str = field(default="hard_concrete", metadata={
        "help": "How mask values are drawn (each relaxation's constants are its settings' fields, "
                "relaxations/<name>/settings.py)."})
    model_revision: str | None = field(default=None, metadata={"help": "Model revision on the Hub."})
    gguf_file: str | None = field(default=None, metadata={
        "help": "GGUF file inside --model: dequantized to float32 on load; --task auto reads the GGUF's "
                "architecture (a Llama GGUF is a causal LM)."})
    overwrite_output_dir: bool = field(default=False, metadata={
        "help": "Write into an --output_dir that holds another run's or another command's files (nothing is "
                "deleted; files of the same name are replaced). Without it such a folder is refused."})


def current_settings_flags() -> list[SettingsFlag]:
    """The settings flags of every method registered now (those at import, then any registered since)."""
    return settings_flags(registered_settings_classes())


def prune_arguments_class() -> type:
    """`PruneScriptArguments`, plus a flag for each setting of a method registered after this module was imported."""
    known = {flag.name for flag in SETTINGS_FLAGS}
    added = [flag for flag in current_settings_flags() if flag.name not in known]
    if not added:
        return PruneScriptArguments
    fields = [(f.name, f.type, field(default=f.default, metadata={"help": f.help})) for f in added]
    return dataclasses.make_dataclass("PruneScriptArguments", fields, bases=(PruneScriptArguments,), kw_only=True)


@dataclass
class TrainingLoopFlags:
    """The `TrainingArguments` fields that shape a pruning run, for `prune --help` (defaults checked in the tests)."""

    output_dir: str | None = field(default=None, metadata={
        "help": "Where the mask artifact (and checkpoints) go (required). A folder holding another run's files is "
                "refused (see --overwrite_output_dir); two runs into one folder: the second refuses."})
    max_steps: int = field(default=-1, metadata={"help": "Optimizer steps; overrides num_train_epochs when > 0."})
    num_train_epochs: float = field(default=3.0, metadata={"help": "Epochs over the data (when max_steps <= 0)."})
    per_device_train_batch_size: int = field(default=8, metadata={"help": "Pruning batch size."})
    per_device_eval_batch_size: int = field(default=8, metadata={
        "help": "Batch size of the means and of the final KL / agreement."})
    gradient_accumulation_steps: int = field(default=1, metadata={"help": "Batches per optimizer step."})
    seed: int = field(default=42, metadata={"help": "Seed of the mask init and the hard-concrete noise."})
    lr_scheduler_type: str = field(default="linear", metadata={
        "help": "Schedule of both learning rates after warm-up (the paper: linear)."})
    max_grad_norm: float = field(default=1.0, metadata={"help": "Gradient clipping (0 disables)."})
    adam_beta1: float = field(default=0.9, metadata={"help": "AdamW beta1 of the mask optimizer."})
    adam_beta2: float = field(default=0.999, metadata={"help": "AdamW beta2 of the mask optimizer."})
    adam_epsilon: float = field(default=1e-08, metadata={"help": "AdamW epsilon of the mask optimizer."})
    logging_steps: float = field(default=500, metadata={"help": "Log every N steps."})
    save_strategy: str = field(default="steps", metadata={"help": "no, steps or epoch: when to checkpoint."})
    save_steps: float = field(default=500, metadata={"help": "Checkpoint every N steps."})
    save_total_limit: int | None = field(default=None, metadata={"help": "Keep at most N checkpoints."})
    resume_from_checkpoint: str | None = field(default=None, metadata={
        "help": "A checkpoint-* folder, or 'last' for the newest under --output_dir that this run wrote (a "
                "checkpoint of a run with other settings is refused, naming the difference)."})
    report_to: str = field(default="none", metadata={"help": "Logging integrations (e.g. tensorboard, wandb)."})
    use_cpu: bool = field(default=False, metadata={"help": "Run on the CPU even when a GPU is present."})
    bf16: bool = field(default=False, metadata={"help": "bfloat16 mixed precision."})
    disable_tqdm: bool | None = field(default=None, metadata={"help": "Hide progress bars."})


TRAINING_GROUP = "training loop (TrainingArguments; --help-all lists every one, all accepted)"
MASK_GROUP = "mask learning (PruningArguments)"

# TrainingArguments flags the mask optimizer never reads: refused, naming what to pass instead.
REFUSED_FLAGS = {
    "learning_rate": "the mask optimizer does not read it; use --mask_learning_rate (mask logits, default 0.1) "
                     "and --reg_learning_rate (Lagrange multipliers, default: the recipe's)",
    "weight_decay": "mask logits and multipliers train without weight decay (it would pull the logits toward 0); "
                    "drop the flag",
    "optim": "the mask optimizer is always AdamW over two groups; tune --adam_beta1/--adam_beta2/--adam_epsilon",
    "optim_args": "the mask optimizer is always AdamW over two groups; tune --adam_beta1/--adam_beta2/--adam_epsilon",
    "optim_target_modules": "the optimizer trains the mask logits only; drop the flag",
    "eval_strategy": "prune evaluates once, at the end, on --eval_split (KL and agreement); drop the flag",
    "do_eval": "prune evaluates once, at the end, on --eval_split (KL and agreement); drop the flag",
    "do_predict": "prune does not predict; drop the flag",
    "do_train": "the Trainer never reads it (a switch for training scripts); prune always trains; drop the flag",
    "label_smoothing_factor": "the loss is the KL to the full model (or --objective task's own loss), which the "
                              "Trainer's label smoother never sees; drop the flag",
    "neftune_noise_alpha": "it adds noise to the student's embeddings, so the masks would be learned against a "
                           "perturbed model; drop the flag",
    "average_tokens_across_devices": "prune always averages the per-token KL over the real tokens of every device; "
                                     "drop the flag",
    "load_best_model_at_end": "prune judges its masks once, at the end (no evaluation during the run to pick from); "
                              "drop the flag",
    "metric_for_best_model": "prune judges its masks once, at the end (no evaluation during the run); drop the flag",
    "greater_is_better": "prune judges its masks once, at the end (no evaluation during the run); drop the flag",
    **dict.fromkeys(("eval_steps", "eval_delay", "eval_on_start", "eval_do_concat_batches", "eval_use_gather_object",
                     "eval_accumulation_steps", "include_for_metrics", "batch_eval_metrics", "prediction_loss_only",
                     "bf16_full_eval", "fp16_full_eval"),
                    "prune runs no evaluation loop (it evaluates once, at the end, on --eval_split or "
                    "--eval_fraction); drop the flag"),
    "debug": "--debug is the command line's switch for tracebacks; TrainingArguments' debug modes are not available "
             "from prune",
}


def given_flags(argv: Sequence[str]) -> list[str]:
    """Field names of the `--flags` on a command line (`--a-b`, `--a_b` and `--a_b=1` all give `a_b`)."""
    return [token[2:].split("=", 1)[0].replace("-", "_") for token in argv
            if token.startswith("--") and len(token) > 2]


def refuse_ignored_flags(argv: Sequence[str]) -> None:
    for name in given_flags(argv):
        name = name[3:] if name.startswith("no_") and name[3:] in REFUSED_FLAGS else name
        if name in REFUSED_FLAGS:
            raise UsageError(f"--{name} is not used by prune: {REFUSED_FLAGS[name]}.")


def prune_help(everything: bool = False) -> str:
    """`prune --help`: pruning flags first, then the training-loop flags that apply; no torch import."""
    if everything:
        return prune_help_all()
    flags = current_settings_flags()
    epilog = ("Dashes and underscores both work (--target-sparsity). Booleans take true/false; those on by default "
              "also take --no_FLAG.\nEach relaxation's constants, listed by --help-all (unset: the recipe's or "
              "PruningConfig's value): " + ", ".join(f"--{f.name}" for f in flags if not f.brief) + "."
              "\nRefused (the mask optimizer ignores them, or they would change nothing in a "
              "pruning run; --help-all says why): " + ", ".join(f"--{name}" for name in REFUSED_FLAGS) + ".")
    return render_help(PROG, DESCRIPTION, [("what to prune", prune_arguments_class(), brief_script_flags()),
                                           (MASK_GROUP, PruningFields, None),
                                           (TRAINING_GROUP, TrainingLoopFlags, None)], epilog=epilog)


def brief_script_flags() -> list[str]:
    """The "what to prune" flags `--help` lists: the script's own, then the brief generated ones."""
    flags = current_settings_flags()
    generated = {f.name for f in flags}
    own = [f.name for f in dataclasses.fields(PruneScriptArguments) if f.name not in generated]
    return own + [f.name for f in flags if f.brief]


def prune_help_all() -> str:
    """`prune --help-all`: every flag `prune` accepts, the `TrainingArguments` ones read from transformers' source
    (not imported: that costs torch, seconds), each refused one marked with its reason."""
    own = {f.name for f in dataclasses.fields(PruningFields)}
    training = [f for f in source_fields("transformers", "training_args.py", "TrainingArguments") if f.name not in own]
    notes = {name: f"REFUSED by prune: {reason}." for name, reason in REFUSED_FLAGS.items()}
    epilog = ("Dashes and underscores both work. Booleans take true/false; those on by default also take --no_FLAG. "
              "Flags marked REFUSED change nothing in a pruning run and are refused with the reason shown.")
    return render_source_help(PROG, DESCRIPTION, [("what to prune", prune_arguments_class(), None),
                                                  (MASK_GROUP, PruningFields, None),
                                                  ("every TrainingArguments flag", training, notes)], epilog=epilog)


def full_parser():
    from transformers import HfArgumentParser

    from ..training.arguments import PruningArguments  # lazy: `--help` does not load it
    # A short usage line: argparse's default lists all ~150 flags before every parse error.
    return HfArgumentParser((prune_arguments_class(), PruningArguments), prog=PROG, description=DESCRIPTION,
                            usage=f"{PROG} --model M --dataset D --output_dir DIR [flags] (see --help)")


def parse_prune_arguments(argv: Sequence[str]) -> tuple[PruneScriptArguments, Any]:
    """Refuse ignored flags, parse with every `TrainingArguments` flag, then check the values."""
    argv = list(argv)
    refuse_ignored_flags(argv)
    parser = full_parser()
    try:
        script, args, unknown = parser.parse_args_into_dataclasses(args=argv, return_remaining_strings=True)
    except ValueError as err:  # PruningArguments.__post_init__ and TrainingArguments' own checks
        raise UsageError(str(err).strip().replace("\n", " ")) from err
    if unknown:
        raise UsageError(unknown_flags_message(unknown, [o for a in parser._actions for o in a.option_strings]))
    refuse_target_flags_under_penalty(argv, args)
    check_script_arguments(script)
    return script, args


# PruningArguments that only the Lagrangian target reads (its schedule, its multipliers, the top-k at the target).
TARGET_FLAGS = ("target_sparsity", "start_sparsity", "sparsity_warmup_steps", "sparsity_schedule", "reg_learning_rate",
                "sparsity_penalty")


def refuse_target_flags_under_penalty(argv: Sequence[str], args: Any) -> None:
    """Under `--sparsity_control penalty` the fixed penalty decides how much is pruned and the final masks take the
    relaxation's threshold: a target flag given with it would change nothing (`--target_sparsity 0.5` ended at
    sparsity 0.0 without a word), and `--final_binarization topk` was replaced by the threshold rule."""
    if getattr(args, "sparsity_control", "lagrangian") != "penalty":
        return
    given = given_flags(argv)
    ignored = [f"--{name}" for name in TARGET_FLAGS if name in given]
    if ignored:
        raise UsageError(f"{', '.join(ignored)} {'does' if len(ignored) == 1 else 'do'} nothing under "
                         "--sparsity_control penalty (the fixed penalty decides how much is pruned: there is no "
                         "target, schedule or multiplier); drop it, or use --sparsity_control lagrangian to prune to "
                         "--target_sparsity.")
    if "final_binarization" in given and args.final_binarization == "topk":
        raise UsageError("--final_binarization topk takes the top units at the target, and --sparsity_control penalty "
                         "has none: its final masks use the threshold rule (--final_threshold); drop the flag, or use "
                         "--sparsity_control lagrangian.")


def unknown_flags_message(unknown: Sequence[str], known: Sequence[str]) -> str:
    """Name the unknown flags and the closest real ones."""
    import difflib
    flags = [u for u in unknown if u.startswith("-")] or list(unknown)
    close = {f: difflib.get_close_matches(f.split("=")[0], known, n=1) for f in flags}
    hints = [f"{f} (did you mean {m[0]}?)" if m else f for f, m in close.items()]
    return f"unknown flag(s) {', '.join(hints)}; see `{PROG} --help` (--help-all lists every flag)."


def check_script_arguments(script: PruneScriptArguments) -> None:
    """Values that cannot work, refused before any model or data is loaded."""
    if script.task != "auto" and script.task not in TASK_CLASSES:
        raise UsageError(f"--task {script.task!r} is not one of auto, {', '.join(TASK_CLASSES)}.")
    if script.ablation is not None and script.ablation not in ABLATIONS:
        raise UsageError(f"--ablation {script.ablation!r} is not one of {', '.join(ABLATIONS)}.")
    for name in ("max_length", "means_examples", "max_train_examples"):
        value = getattr(script, name)
        if value is not None and value < 1:
            raise UsageError(f"--{name} {value} must be >= 1 (leave --max_train_examples out to use every example).")
    pruning_config_from_flags(script)   # every method's own checks, before anything is loaded
    check_model_source(script.model, script.gguf_file)


def prune_command(argv: Sequence[str]) -> int:
    argv = list(argv)
    if wants_help(argv, ("--help-all",)):
        print(prune_help(everything=True))
        return 0
    if wants_help(argv):
        print(prune_help())
        return 0
    script_args, pruning_args = parse_prune_arguments(argv)
    summary = run_prune(script_args, pruning_args)
    print(format_summary(summary))
    return 0


def run_prune(script: PruneScriptArguments, args) -> dict:
    """Claim the output folder, load, tokenize, compute means, prune, binarize, save; returns the summary printed by
    the CLI (and recorded in the folder's run record)."""
    from ..run_folder import claim_output_dir  # lazy: `--help` does not load it

    check_script_arguments(script)
    check_split_flags(script)
    if not args.output_dir:
        raise UsageError("prune needs --output_dir DIR (where the mask artifact goes).")
    claim = claim_output_dir(args.output_dir, "prune", prune_settings(script, args),
                             overwrite=script.overwrite_output_dir,
                             inputs=[("--model", script.model), ("--dataset", script.dataset)])
    with claim:
        summary = _prune(script, args)
        claim.finish(summary=summary)
    return summary


def prune_settings(script: PruneScriptArguments, args) -> dict[str, Any]:
    """What decides this run's masks: every flag of `PruneScriptArguments` but the overwrite switch, and the training
    settings of the run fingerprint (`training.fingerprint`)."""
    from dataclasses import asdict

    from ..run_folder import local_paths  # lazy: `--help` does not load it
    from ..training.fingerprint import SETTING_FIELDS  # lazy: `--help` does not load it
    settings = {k: v for k, v in asdict(script).items() if k != "overwrite_output_dir"}
    settings.update(model=local_paths(script.model), dataset=local_paths(script.dataset))
    settings.update({name: getattr(args, name, None) for name in SETTING_FIELDS})
    return settings


def _prune(script: PruneScriptArguments, args) -> dict:
    import transformers

    from ..data.tokenize import tokenize_dataset  # lazy: `--help` does not load it
    from ..model import PrunableModel  # lazy: `--help` does not load it
    from ..training.trainer import PruningTrainer  # lazy: `--help` does not load it

    resume = resume_checkpoint(args)
    hf_kwargs = {k: v for k, v in {"revision": script.model_revision, "gguf_file": script.gguf_file}.items() if v}
    config = load_model_config(script)
    task = resolve_task(script, config)
    data = load_prune_data(script, args.seed)
    train = data.train
    columns = resolve_text_columns(train.column_names, script.text_columns)
    task_loss = getattr(args, "objective", "kl") != "kl"   # the task loss needs the subtask's labels
    if task_loss:
        train = check_labels(train, config, task)

    check_tokenizer(script.model, script.gguf_file)
    tokenizer = transformers.AutoTokenizer.from_pretrained(script.model, **hf_kwargs)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = PrunableModel.from_pretrained(script.model, pruning_config=pruning_config_from_flags(script),
                                          model_class=getattr(transformers, TASK_CLASSES[task]), config=config,
                                          **hf_kwargs)
    if getattr(model.config, "pad_token_id", None) is None:
        model.config.pad_token_id = tokenizer.pad_token_id

    train_tok = tokenize_dataset(train, tokenizer, columns, script.max_length, keep_labels=task_loss)
    collator = transformers.DataCollatorWithPadding(tokenizer)
    means_data = train_tok.select(range(min(script.means_examples, len(train_tok))))
    if model.pruning_config.ablation == "mean":
        model.compute_means(means_data, batch_size=args.per_device_eval_batch_size,
                            collate_fn=collator, device=args.device, keep_dropout=args.keep_dropout)
    if data.eval is not None:
        eval_tok = tokenize_dataset(data.eval, tokenizer, columns, script.max_length, keep_labels=False)
    else:
        eval_tok = train_tok.select(range(min(DEFAULT_EVAL_EXAMPLES, len(train_tok))))
    trainer = PruningTrainer(model=model, args=args, train_dataset=train_tok, data_collator=collator,
                             processing_class=tokenizer)
    trainer.train(resume_from_checkpoint=resume)
    report = model.sparsity_report()
    faithful = trainer.faithfulness(eval_tok)
    penalty = getattr(trainer.args, "sparsity_control", "lagrangian") == "penalty"
    convergence = trainer.convergence.to_dict() if trainer.convergence is not None else None
    return {"output_dir": args.output_dir, "task": task, "granularity": script.granularity, **report,
            "target_sparsity": None if penalty else args.target_sparsity,
            "sparsity_control": "penalty" if penalty else "lagrangian",
            "kl_to_full_model": faithful["kl"], "agreement_with_full_model": faithful["agreement"],
            "evaluated_on": data.eval_description, "convergence": convergence,
            "sparsity_constraint": model.pruning_config.extra.get("sparsity_constraint")}


def selection_settings(script: PruneScriptArguments) -> dict:
    """The granularity / relaxation flags as `PruningConfig` keywords: the methods' names and their settings
    (`relaxation_settings`, `granularity_settings`: the settings flags only when given, in the chosen method's)."""
    settings: dict = {"granularity": script.granularity, "relaxation": script.relaxation}
    if script.uniform_layers:
        settings["uniform_layers"] = True
    try:
        settings.update(route_method_settings(settings_flag_values(script), script.relaxation, script.granularity))
    except ValueError as err:
        raise UsageError(f"--{str(err).removeprefix('PruningConfig: ')}") from err
    return settings


def pruning_config_from_flags(script: PruneScriptArguments) -> PruningConfig:
    """The `PruningConfig` the flags ask for; a value no method would accept is refused, naming the flag."""
    settings = selection_settings(script)
    try:
        return PruningConfig(ablation=script.ablation, **settings)
    except ValueError as err:
        raise UsageError(f"{err} (flags: --{', --'.join(_flag_names(settings))})") from err


def _flag_names(settings: dict[str, Any]) -> list[str]:
    names = [name for name, value in settings.items() if not isinstance(value, dict)]
    return names + [name for value in settings.values() if isinstance(value, dict) for name in value]


def settings_flag_values(script: Any, flags=None) -> dict[str, Any]:
    """The generated settings flags that were given, as flat setting values; a relaxation's constant given for
    another relaxation (it would change nothing) and unparsable text are refused, naming the flag."""
    flags = current_settings_flags() if flags is None else flags
    try:
        values = flag_values(script, flags)
        if script.relaxation in RELAXATIONS:
            unset_flags_check(values, flags, [relaxation_settings_class(script.relaxation)],
                              f"--relaxation {script.relaxation}")
    except ValueError as err:
        raise UsageError(str(err)) from err
    return values


def parse_layers(text: str) -> list[int]:
    """'0,2-4' -> [0, 2, 3, 4] (the `--layers_to_transform` text form; `granularity.weight.settings.parse_layers`)."""
    try:
        return _parse_layers(text) or []
    except ValueError as err:
        raise UsageError(str(err)) from err


def resume_checkpoint(args) -> str | bool | None:
    """`--resume_from_checkpoint DIR` or `last`, checked before any work so that a typo fails now instead of silently
    restarting from step 0. `last` stays `True`: the trainer picks the newest checkpoint *of this run* (its settings
    fingerprint, `training.fingerprint`), and refuses a checkpoint of another run naming the difference."""
    wanted = args.resume_from_checkpoint
    if wanted in (None, "", "False", "false"):
        return None
    if str(wanted).lower() in ("last", "true"):
        from pathlib import Path
        if not any(Path(args.output_dir).glob("checkpoint-*")):
            raise PruningError(f"--resume_from_checkpoint {wanted}: no checkpoint-* folder under {args.output_dir}; "
                               "run without it to start from step 0, or pass a checkpoint folder.")
        return True
    if not os.path.isfile(os.path.join(wanted, "trainer_state.json")):
        raise PruningError(f"--resume_from_checkpoint {wanted}: not a finished Trainer checkpoint (no "
                           "trainer_state.json); pass a checkpoint-* folder written by --save_strategy steps, or "
                           "'last'.")
    return wanted


def load_model_config(script: PruneScriptArguments):
    """The model's config, read once (a GGUF file is parsed in full for it, so it is not read twice)."""
    import transformers
    kwargs = {k: v for k, v in {"revision": script.model_revision, "gguf_file": script.gguf_file}.items() if v}
    return transformers.AutoConfig.from_pretrained(script.model, **kwargs)


def resolve_task(script: PruneScriptArguments, config: Any = None) -> str:
    """`--task`, or for `auto` the task of the head `config.architectures` names. A GGUF file names no class, only
    its architecture: decoder families (llama, qwen2, ...) are causal LMs. A config with no task head (e.g.
    `BertModel`) is refused: a head would be added with random weights and every verdict would be inconclusive."""
    if script.task != "auto":
        if script.task not in TASK_CLASSES:
            raise UsageError(f"--task {script.task!r} is not one of auto, {', '.join(TASK_CLASSES)}.")
        return script.task
    if config is None:
        config = load_model_config(script)
    names = " ".join(getattr(config, "architectures", None) or [])
    if "ForCausalLM" in names or "LMHeadModel" in names:
        return "causal_lm"
    if "ForTokenClassification" in names:
        return "token_classification"
    if "ForSequenceClassification" in names:
        return "sequence_classification"
    model_type = getattr(config, "model_type", None)
    from ..artifacts import is_decoder_type  # lazy: `--help` does not load it
    if script.gguf_file and is_decoder_type(model_type):
        return "causal_lm"
    what = f"the GGUF architecture {model_type!r}" if script.gguf_file else \
        f"config.architectures {names.split() or None}"
    raise UsageError(f"--task auto cannot tell the task of --model {script.model}: {what} names no task head. Pass "
                     "--task causal_lm, sequence_classification or token_classification (a classification head "
                     "missing from the checkpoint starts random, and pruning an untrained head gives inconclusive "
                     "verdicts: fine-tune it first).")


UNIT_WORDS = {"heads": "heads", "mlps": "MLPs", "neurons": "MLP neurons"}


def units_line(summary: dict) -> str:
    """`units kept  K of N (...)`, the parenthesis naming what the entries are: heads and MLP blocks, MLP neurons, or
    weights in so many masked tensors (weight masks are keyed by parameter name, one kind per tensor)."""
    kinds = [key[:-len("_kept")] for key in summary if key.endswith("_kept") and key != "units_kept"]
    if _keyed_by_parameter(summary.get("granularity")) or any("." in kind for kind in kinds):
        detail = f"weights, in {len(kinds)} masked tensor{'s' if len(kinds) != 1 else ''}"
    else:
        detail = ", ".join(f"{UNIT_WORDS.get(kind, kind)} {summary[kind + '_kept']}/{summary[kind + '_total']}"
                           for kind in kinds) or "-"
    return f"units kept          {summary['units_kept']} of {summary['units_total']} ({detail})"


def _keyed_by_parameter(granularity: str | None) -> bool:
    """Whether the granularity's masks are keyed by parameter name (one mask per weight tensor)."""
    from ..granularity import get_granularity  # lazy: `--help` does not load it
    return granularity in GRANULARITIES and bool(get_granularity(granularity).keyed_by_parameter)


def format_summary(summary: dict) -> str:
    """The lines `prune` prints: units kept, the sparsity reached (against the target, or the penalty's outcome) and
    what moved it (a `--uniform_layers` layout), faithfulness and the data it was measured on, and the convergence
    verdict (always)."""
    from ..verdicts import verdict_line  # lazy: `--help` does not load it
    lines = ["", "Pruning summary", "---------------"]
    lines.append(f"{units_line(summary)}")
    if summary.get("target_sparsity") is None:
        lines.append(f"sparsity reached    {summary['sparsity']:.4f} ({summary['sparsity_params']:.4f} of unit "
                     "parameters; --sparsity_control penalty has no target: this is what the penalty left)")
    else:
        lines.append(f"realized sparsity   {summary['sparsity']:.4f} (target {summary['target_sparsity']:.4f}; "
                     f"{summary['sparsity_params']:.4f} of unit parameters)")
    constraint = summary.get("sparsity_constraint")
    if constraint:
        lines.append(f"moved by constraint {constraint['reason']}")
    lines.append(f"KL to full model    {summary['kl_to_full_model']:.5f}")
    lines.append(f"agreement           {summary['agreement_with_full_model']:.4f}")
    lines.append(f"evaluated on        {summary.get('evaluated_on', '-')}")
    lines.append(f"verdict             {verdict_line(summary.get('convergence'))}")
    lines.append(f"masks saved to      {summary['output_dir']}")
    lines.append(json.dumps(summary, default=str))
    return "\n".join(lines)


__all__ = [
    "TASK_CLASSES",
    "PruneScriptArguments",
    "TrainingLoopFlags",
    "check_rows",
    "format_summary",
    "parse_prune_arguments",
    "prune_command",
    "prune_help",
    "resolve_task",
    "run_prune",
]
