"""`hf-heuristic-core prune`: learn a mask at a target sparsity for one model and dataset.

    hf-heuristic-core prune --model NAME_OR_PATH --dataset NAME_OR_FILES --target_sparsity 0.5 --output_dir DIR

The run: parse with every `TrainingArguments` flag, check, load, tokenize, compute means, prune, binarize, save.
`--help` (the pruning flags and the training-loop flags that matter) and `--help-all` (every `TrainingArguments` flag,
all accepted) are drawn from the torch-free `cli/flags/prune.py`. Flags the mask optimizer would silently ignore
(`--learning_rate`, `--weight_decay`, `--optim`, ...) are refused with the flag to use instead.
"""

from __future__ import annotations

import difflib
import json
import os
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import transformers
from transformers import HfArgumentParser

from ..artifacts import is_decoder_type
from ..config import PruningConfig, route_method_settings
from ..data.tokenize import tokenize_dataset
from ..errors import PruningError, UsageError
from ..granularity import GRANULARITIES, get_granularity
from ..granularity.weight.settings import parse_layers as _parse_layers
from ..model import PrunableModel
from ..relaxations import RELAXATIONS, relaxation_settings_class
from ..run_folder import claim_output_dir, local_paths
from ..training.arguments import PruningArguments
from ..training.fingerprint import SETTING_FIELDS
from ..training.trainer import PruningTrainer
from ..verdicts import verdict_line
from .checks import check_model_source, check_rows, check_tokenizer, resolve_text_columns
from .flags.prune import (
    ABLATIONS,
    DESCRIPTION,
    MASK_GROUP,
    PROG,
    REFUSED_FLAGS,
    SETTINGS_FLAGS,
    TASK_CLASSES,
    TRAINING_GROUP,
    PruneScriptArguments,
    PruneSettingsFlags,
    TrainingLoopFlags,
    brief_script_flags,
    current_settings_flags,
    given_flags,
    prune_arguments_class,
    prune_help,
    prune_help_all,
    refuse_ignored_flags,
)
from .help import wants_help
from .prune_data import DEFAULT_EVAL_EXAMPLES, check_labels, check_split_flags, load_prune_data
from .settings_flags import flag_values, unset_flags_check


def full_parser():
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
    settings = {k: v for k, v in asdict(script).items() if k != "overwrite_output_dir"}
    settings.update(model=local_paths(script.model), dataset=local_paths(script.dataset))
    settings.update({name: getattr(args, name, None) for name in SETTING_FIELDS})
    return settings


def _prune(script: PruneScriptArguments, args) -> dict:
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
    return granularity in GRANULARITIES and bool(get_granularity(granularity).keyed_by_parameter)


def format_summary(summary: dict) -> str:
    """The lines `prune` prints: units kept, the sparsity reached (against the target, or the penalty's outcome) and
    what moved it (a `--uniform_layers` layout), faithfulness and the data it was measured on, and the convergence
    verdict (always)."""
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
    # The flags (cli/flags/prune.py), importable from here as before.
    "ABLATIONS", "DESCRIPTION", "MASK_GROUP", "PROG", "REFUSED_FLAGS", "SETTINGS_FLAGS", "TASK_CLASSES",
    "TRAINING_GROUP", "PruneScriptArguments", "PruneSettingsFlags", "TrainingLoopFlags", "brief_script_flags",
    "current_settings_flags", "given_flags", "prune_arguments_class", "prune_help", "prune_help_all",
    "refuse_ignored_flags",
    # The run.
    "check_rows", "format_summary", "parse_prune_arguments", "prune_command", "pruning_config_from_flags",
    "resolve_task", "resume_checkpoint", "run_prune", "selection_settings", "settings_flag_values",
]
