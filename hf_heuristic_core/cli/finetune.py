"""`hf-heuristic-core finetune`: from a base model and a dataset to the checkpoints `prune` and `effective-size` read.

    hf-heuristic-core finetune --model BASE --dataset DATA --output_dir runs/ft --max_steps 240 --save_steps 40

Writes `checkpoint-*` folders (each with the tokenizer; all but the newest keep their weights only) and the final
model with its tokenizer in `OUTPUT_DIR/final` (`prune --model OUTPUT_DIR/final`, `effective-size OUTPUT_DIR`). The
flags are this command's data flags (the same as `prune`'s) and every stock `TrainingArguments` flag; `--help` is
built without importing torch (`cli/flags/finetune.py`). The fine-tuning itself is the study's
(`hf_heuristic_core.finetuning`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import transformers
from transformers import HfArgumentParser, TrainingArguments

from ..data.tokenize import tokenize_dataset
from ..errors import UsageError
from ..finetuning import FINAL_DIR, ensure_padding_token, finetune, load_finetune_model
from ..run_folder import claim_output_dir, local_paths
from .checks import check_model_source, check_tokenizer, resolve_text_columns
from .flags.finetune import DESCRIPTION, PROG, REFUSED_FLAGS, TASKS, FinetuneScriptArguments, finetune_help
from .help import wants_help
from .prune import given_flags, resume_checkpoint, unknown_flags_message
from .prune_data import check_split_flags, load_prune_data

logger = logging.getLogger(__name__)

__all__ = ["DESCRIPTION", "REFUSED_FLAGS", "RESULT_FIELDS", "FinetuneScriptArguments", "finetune_command",
           "finetune_help", "parse_finetune_arguments", "run_finetune"]

# The TrainingArguments that decide the fine-tuned weights: a run with other values is another run (refused in the
# same folder, named difference by difference), the same values resume or repeat it.
RESULT_FIELDS = ("learning_rate", "weight_decay", "num_train_epochs", "max_steps", "per_device_train_batch_size",
                 "gradient_accumulation_steps", "seed", "data_seed", "warmup_steps", "lr_scheduler_type", "optim",
                 "adam_beta1", "adam_beta2", "adam_epsilon", "max_grad_norm", "label_smoothing_factor", "bf16", "fp16")


def parse_finetune_arguments(argv: Sequence[str]) -> tuple[FinetuneScriptArguments, Any]:
    """Refuse the flags a Trainer run never reads, parse with `HfArgumentParser`, then check the values."""
    argv = list(argv)
    if "output_dir" not in given_flags(argv):   # TrainingArguments would default it to ./trainer_output
        raise UsageError("finetune needs --output_dir DIR (where the checkpoints and the final model go).")
    for name in given_flags(argv):
        name = name[3:] if name.startswith("no_") and name[3:] in REFUSED_FLAGS else name
        if name in REFUSED_FLAGS:
            raise UsageError(f"--{name} is not used by finetune: {REFUSED_FLAGS[name]}.")
    parser = HfArgumentParser((FinetuneScriptArguments, TrainingArguments), prog=PROG, description=DESCRIPTION,
                              usage=f"{PROG} --model M --dataset D --output_dir DIR [flags] (see --help)")
    try:
        script, args, unknown = parser.parse_args_into_dataclasses(args=argv, return_remaining_strings=True)
    except ValueError as err:   # TrainingArguments' own checks
        raise UsageError(str(err).strip().replace("\n", " ")) from err
    if unknown:
        message = unknown_flags_message(unknown, [o for a in parser._actions for o in a.option_strings])
        raise UsageError(message.replace("prune", "finetune").replace(" (--help-all lists every flag)", ""))
    check_script_arguments(script)
    return script, args


def check_script_arguments(script: FinetuneScriptArguments) -> None:
    """Values that cannot work, refused before any model or data is loaded."""
    if script.task not in TASKS:
        raise UsageError(f"--task {script.task!r} is not one of {', '.join(TASKS)} (token classification needs "
                         "word-aligned labels, which this command does not build).")
    if script.num_labels is not None and (script.num_labels < 2 or script.task != "sequence_classification"):
        raise UsageError(f"--num_labels {script.num_labels}: a classification head needs at least 2 classes, and "
                         "only --task sequence_classification has one.")
    for name in ("max_length", "max_train_examples"):
        value = getattr(script, name)
        if value is not None and value < 1:
            raise UsageError(f"--{name} {value} must be >= 1 (leave --max_train_examples out to use every example).")
    check_model_source(script.model, script.gguf_file)


def finetune_settings(script: FinetuneScriptArguments, args: Any) -> dict[str, Any]:
    """What decides the fine-tuned weights: every flag of `FinetuneScriptArguments` but the overwrite switch, and
    the `RESULT_FIELDS` of `TrainingArguments` (as the folder's run record, `run_folder`)."""
    settings = {k: v for k, v in asdict(script).items() if k != "overwrite_output_dir"}
    settings.update(model=local_paths(script.model), dataset=local_paths(script.dataset))
    settings.update({name: getattr(getattr(args, name, None), "value", getattr(args, name, None))
                     for name in RESULT_FIELDS})
    return settings


def run_finetune(script: FinetuneScriptArguments, args: Any) -> dict[str, Any]:
    """Claim the output folder, load, tokenize, fine-tune, save; returns the summary the command prints."""
    check_script_arguments(script)
    check_split_flags(script)
    if not args.output_dir:
        raise UsageError("finetune needs --output_dir DIR (where the checkpoints and the final model go).")
    strategy = str(getattr(args.eval_strategy, "value", args.eval_strategy))
    if strategy != "no" and not (script.eval_split or script.eval_fraction):
        raise UsageError(f"--eval_strategy {strategy} needs evaluation data: pass --eval_split or --eval_fraction "
                         "0.1.")
    if args.do_eval and not (script.eval_split or script.eval_fraction):   # TrainingArguments sets it for a strategy
        raise UsageError("--do_eval needs evaluation data: pass --eval_split (a dataset with splits) or "
                         "--eval_fraction 0.1 (a held-out share of the training rows).")
    claim = claim_output_dir(args.output_dir, "finetune", finetune_settings(script, args),
                             overwrite=script.overwrite_output_dir,
                             inputs=[("--model", script.model), ("--dataset", script.dataset)])
    with claim:
        resume = resume_checkpoint(args)
        summary = _finetune(script, args, resume)
        claim.finish(summary=summary)
    return summary


def label_names(train: Any) -> tuple[Any, list[str] | None, int]:
    """The training table with its labels as class ids, the class names when they were strings, and the class
    count. Ids must be 0..N-1 integers; strings are sorted and numbered."""
    column = next((c for c in ("labels", "label") if c in train.column_names), None)
    if column is None:
        raise UsageError(f"--task sequence_classification needs a 'label' column; the dataset's columns are "
                         f"{train.column_names}. Pass --task causal_lm to train on the text alone.")
    values = train.unique(column)
    if any(isinstance(v, str) for v in values):
        names = sorted(str(v) for v in values)
        ids = {name: index for index, name in enumerate(names)}
        return train.map(lambda row: {column: ids[str(row[column])]}, desc="labels to ids"), names, len(names)
    bad = sorted((v for v in values if not isinstance(v, int) or v < 0), key=str)
    if bad:
        raise UsageError(f"The {column!r} column holds values that are not class ids: {bad[:5]} (-1 marks "
                         "unlabelled rows, e.g. GLUE test splits). Filter those rows out or pick a labelled split.")
    return train, None, max(values) + 1


def _finetune(script: FinetuneScriptArguments, args: Any, resume: Any) -> dict[str, Any]:
    hf_kwargs = {k: v for k, v in {"revision": script.model_revision, "gguf_file": script.gguf_file}.items() if v}
    data = load_prune_data(script, args.seed, trained="the model was trained")
    train, evaluation = data.train, data.eval
    columns = resolve_text_columns(train.column_names, script.text_columns)
    classify = script.task == "sequence_classification"
    names, num_labels = None, None
    if classify:
        train, names, num_labels = label_names(train)
        if evaluation is not None:
            evaluation = _eval_labels(evaluation, names, num_labels)
        if script.num_labels is not None:
            if script.num_labels < num_labels:
                raise UsageError(f"--num_labels {script.num_labels} is fewer than the {num_labels} classes of the "
                                 "training labels; drop the flag to take the labels' count.")
            num_labels = script.num_labels
    check_tokenizer(script.model, script.gguf_file)
    tokenizer = transformers.AutoTokenizer.from_pretrained(script.model, **hf_kwargs)
    ensure_padding_token(tokenizer)
    model = load_finetune_model(script.model, script.task, num_labels, tokenizer, names, **hf_kwargs)
    train_tok = tokenize_dataset(train, tokenizer, columns, script.max_length, keep_labels=classify)
    eval_tok = None if evaluation is None else \
        tokenize_dataset(evaluation, tokenizer, columns, script.max_length, keep_labels=classify)
    collator = transformers.DataCollatorWithPadding(tokenizer) if classify else \
        transformers.DataCollatorForLanguageModeling(tokenizer, mlm=False)
    trainer = finetune(model, args, train_tok, tokenizer=tokenizer, data_collator=collator, eval_dataset=eval_tok,
                       resume=resume, compute_metrics=_accuracy if classify else None, tokenizer_in_checkpoints=True)
    metrics = trainer.evaluate() if eval_tok is not None else {}
    checkpoints = sorted((p.name for p in Path(args.output_dir).glob("checkpoint-*") if p.is_dir()),
                         key=lambda name: int(name.rsplit("-", 1)[1]) if name.rsplit("-", 1)[1].isdigit() else -1)
    return {"output_dir": args.output_dir, "final_model": str(Path(args.output_dir) / FINAL_DIR),
            "task": script.task, "num_labels": num_labels, "labels": names, "steps": trainer.state.global_step,
            "checkpoints": checkpoints, "evaluated_on": data.eval_description if eval_tok is not None else None,
            "eval": {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float))}}


def _eval_labels(evaluation: Any, names: list[str] | None, num_labels: int) -> Any:
    """The evaluation labels as the training labels' ids; a class the training data never names is refused."""
    column = next((c for c in ("labels", "label") if c in evaluation.column_names), None)
    if column is None:
        raise UsageError(f"The evaluation data has no 'label' column (its columns are {evaluation.column_names}).")
    values = evaluation.unique(column)
    if names is not None:
        unknown = sorted(str(v) for v in values if str(v) not in names)
        if unknown:
            raise UsageError(f"The evaluation labels {unknown[:5]} do not occur in the training labels {names}.")
        ids = {name: index for index, name in enumerate(names)}
        return evaluation.map(lambda row: {column: ids[str(row[column])]}, desc="labels to ids")
    bad = sorted((v for v in values if not isinstance(v, int) or not 0 <= v < num_labels), key=str)
    if bad:
        raise UsageError(f"The evaluation labels {bad[:5]} are not class ids 0..{num_labels - 1} of the training "
                         "labels; filter those rows out or pick a labelled split.")
    return evaluation


def _accuracy(prediction: Any) -> dict[str, float]:
    logits = prediction.predictions[0] if isinstance(prediction.predictions, tuple) else prediction.predictions
    return {"accuracy": float((np.asarray(logits).argmax(-1) == np.asarray(prediction.label_ids)).mean())}


def format_summary(summary: dict[str, Any]) -> str:
    """The lines `finetune` prints: where the final model and the checkpoints are, the evaluation, and the next
    commands."""
    out = summary["output_dir"]
    lines = ["", "Fine-tuning summary", "-------------------",
             f"final model         {summary['final_model']} (with its tokenizer)",
             f"checkpoints         {len(summary['checkpoints'])} under {out}"
             + (f" ({summary['checkpoints'][0]} .. {summary['checkpoints'][-1]})" if summary["checkpoints"] else
                " (none: --save_strategy no; effective-size needs checkpoints)"),
             f"steps               {summary['steps']}"]
    if summary.get("num_labels"):
        lines.append(f"classes             {summary['num_labels']}"
                     + (f" ({', '.join(summary['labels'])})" if summary.get("labels") else ""))
    if summary.get("eval"):
        shown = ", ".join(f"{k.removeprefix('eval_')} {summary['eval'][k]:.4f}" for k in ("eval_accuracy", "eval_loss")
                          if k in summary["eval"])
        lines.append(f"evaluation          {shown} on {summary['evaluated_on']}")
    lines += [f"next                hf-heuristic-core prune --model {summary['final_model']} --dataset ... "
              f"--output_dir ...", f"                    hf-heuristic-core effective-size {out} ..."]
    return "\n".join(lines)


def finetune_command(argv: Sequence[str]) -> int:
    if wants_help(argv):
        print(finetune_help())
        return 0
    script, args = parse_finetune_arguments(argv)
    print(format_summary(run_finetune(script, args)))
    return 0
