"""`hf-heuristic-core` command line. Each subcommand parses its flags with `HfArgumentParser`.

    hf-heuristic-core prune --model NAME_OR_PATH --dataset NAME_OR_FILES --target_sparsity 0.5 --output_dir DIR

Every `PruningArguments` (and so every `TrainingArguments`) field is a flag; dashes and underscores both work.
"""

from __future__ import annotations

import json
import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

logger = logging.getLogger("hf_heuristic_core")

SUBCOMMANDS = {
    "study": "The heuristic-core study end to end (fine-tune, track effective size, prune x seeds, analyze).",
    "prune": "Learn a mask at a target sparsity for one model and dataset; writes the mask artifact.",
    "effective-size": "Effective size of every checkpoint-* folder of a fine-tuning run (resumable).",
    "analyze": "Report (tables, figures) of a folder of multi-seed pruning runs.",
    "subtasks": "Compare subtask masks (weight / neuron / unit): IoU, IoMin and shared fractions per layer.",
}


@dataclass
class PruneScriptArguments:
    """What to prune and on which data (the pruning hyperparameters are `PruningArguments`)."""

    model: str = field(metadata={"help": "Hub id or local folder of a fine-tuned model (classifier or causal LM)."})
    dataset: str = field(metadata={
        "help": "Hub dataset id, a save_to_disk folder, or local json/jsonl/csv/parquet file(s), comma-separated."})
    dataset_config: str | None = field(default=None, metadata={"help": "Hub dataset configuration name."})
    train_split: str = field(default="train", metadata={"help": "Split to prune on."})
    eval_split: str | None = field(default=None, metadata={
        "help": "Split for the final KL / agreement summary (default: the first 256 training examples)."})
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
    prune_heads: bool = field(default=True, metadata={"help": "Mask attention heads."})
    prune_mlps: bool = field(default=True, metadata={"help": "Mask whole MLP blocks."})
    granularity: str = field(default="unit", metadata={"help": "unit (heads and MLP blocks), neuron or weight."})
    relaxation: str = field(default="hard_concrete", metadata={
        "help": "hard_concrete, continuous_sparsification or gumbel_sigmoid."})
    target_modules: str | None = field(default=None, metadata={
        "help": "Weight granularity: comma-separated module names (PEFT-style, e.g. query,value,output.dense) "
                "(default: every Linear / Conv1D)."})
    layers_to_transform: str | None = field(default=None, metadata={
        "help": "Weight granularity: layer indices, comma-separated or ranges, e.g. 2-3 or 0,5."})
    mask_bias: bool = field(default=False, metadata={"help": "Weight granularity: mask biases too."})
    model_revision: str | None = field(default=None, metadata={"help": "Model revision on the Hub."})
    gguf_file: str | None = field(default=None, metadata={"help": "GGUF file inside --model, if any."})


TASK_CLASSES = {
    "sequence_classification": "AutoModelForSequenceClassification",
    "causal_lm": "AutoModelForCausalLM",
    "token_classification": "AutoModelForTokenClassification",
}
TEXT_COLUMN_CANDIDATES = (("premise", "hypothesis"), ("sentence1", "sentence2"), ("question1", "question2"),
                          ("question", "sentence"), ("text",), ("sentence",), ("content",))


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: hf-heuristic-core {" + ",".join(SUBCOMMANDS) + "} [flags]\n")
        for name, text in SUBCOMMANDS.items():
            print(f"  {name:<16}{text}")
        print("\nRun `hf-heuristic-core <command> --help` for a command's flags.")
        return 0
    command, rest = argv[0], argv[1:]
    if command not in SUBCOMMANDS:
        print(f"hf-heuristic-core: unknown command '{command}'; choose one of {sorted(SUBCOMMANDS)}.",
              file=sys.stderr)
        return 2
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    return _command(command)(rest)


def _command(name: str):
    """Subcommands import their modules lazily, so `--help` stays fast."""
    if name == "prune":
        return prune_command
    if name == "study":
        return study_command
    if name == "effective-size":
        from .effective_size import effective_size_command
        return effective_size_command
    if name == "subtasks":
        from .subtasks import subtasks_command
        return subtasks_command
    from .analyze import analyze_command
    return analyze_command


def parse_study_arguments(argv: Sequence[str]):
    """`--config FILE` sets the defaults; flags given on the command line win over the file."""
    import argparse

    from transformers import HfArgumentParser

    from ..study.run import StudyArguments
    parser = HfArgumentParser(StudyArguments, prog="hf-heuristic-core study", description=SUBCOMMANDS["study"])
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--config")
    known, rest = pre.parse_known_args(list(argv))
    if known.config:
        parser.set_defaults(**StudyArguments.read_config(known.config))
    (args,) = parser.parse_args_into_dataclasses(args=rest)
    args.config = known.config
    return args


def study_command(argv: Sequence[str]) -> int:
    from ..study.run import run_study
    summary = run_study(parse_study_arguments(argv))
    print(f"\nStudy written to {summary['output_dir']}:")
    print(f"  report        {Path(summary['output_dir']) / 'report.md'} (and report.json)")
    print(f"  analysis      {summary['analysis_report']} (figures next to it)")
    print(f"  mask artifacts {summary['runs_dir']}/*/")
    if summary.get("effective_size_file"):
        print(f"  effective size {summary['effective_size_file']} (+ figure)")
    print("  timings (s)   " + ", ".join(f"{k} {v:.0f}" for k, v in summary["timings_s"].items()))
    return 0


def prune_command(argv: Sequence[str]) -> int:
    from transformers import HfArgumentParser
    from ..training.arguments import PruningArguments
    parser = HfArgumentParser((PruneScriptArguments, PruningArguments), prog="hf-heuristic-core prune",
                              description=SUBCOMMANDS["prune"])
    script_args, pruning_args = parser.parse_args_into_dataclasses(args=list(argv))
    summary = run_prune(script_args, pruning_args)
    print(format_summary(summary))
    return 0


def run_prune(script: PruneScriptArguments, args) -> dict:
    """Load, tokenize, compute means, prune, binarize, save; returns the summary printed by the CLI."""
    import transformers
    from ..config import PruningConfig
    from ..data.sources import load_table
    from ..model import PrunableModel
    from ..training.trainer import PruningTrainer

    task = resolve_task(script)
    hf_kwargs = {k: v for k, v in {"revision": script.model_revision, "gguf_file": script.gguf_file}.items() if v}
    tokenizer = transformers.AutoTokenizer.from_pretrained(script.model, **hf_kwargs)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    config = PruningConfig(ablation=script.ablation, prune_heads=script.prune_heads, prune_mlps=script.prune_mlps,
                           **selection_settings(script))
    model = PrunableModel.from_pretrained(script.model, pruning_config=config,
                                          model_class=getattr(transformers, TASK_CLASSES[task]), **hf_kwargs)
    if getattr(model.config, "pad_token_id", None) is None:
        model.config.pad_token_id = tokenizer.pad_token_id

    train = load_table(script.dataset, script.dataset_config, script.train_split)
    if script.max_train_examples:
        train = train.select(range(min(script.max_train_examples, len(train))))
    columns = resolve_text_columns(train.column_names, script.text_columns)

    def tokenize(batch):
        texts = [batch[c] for c in columns]
        return tokenizer(*texts, truncation=True, max_length=script.max_length)

    keep = {"input_ids", "attention_mask", "token_type_ids"}
    if getattr(args, "objective", "kl") != "kl":   # the task loss needs the subtask's labels
        keep |= {"label", "labels"}
    train_tok = train.map(tokenize, batched=True, remove_columns=[c for c in train.column_names if c not in keep],
                          desc="tokenizing")
    collator = transformers.DataCollatorWithPadding(tokenizer)
    means_data = train_tok.select(range(min(script.means_examples, len(train_tok))))
    if model.pruning_config.ablation == "mean":
        model.compute_means(means_data, batch_size=args.per_device_eval_batch_size,
                            collate_fn=collator, device=args.device)
    if script.eval_split:
        eval_raw = load_table(script.dataset, script.dataset_config, script.eval_split)
        eval_tok = eval_raw.map(tokenize, batched=True, desc="tokenizing",
                                remove_columns=[c for c in eval_raw.column_names if c not in keep])
    else:
        eval_tok = train_tok.select(range(min(256, len(train_tok))))
    trainer = PruningTrainer(model=model, args=args, train_dataset=train_tok, data_collator=collator,
                             processing_class=tokenizer)
    trainer.train()
    report = model.sparsity_report()
    faithful = trainer.faithfulness(eval_tok)
    return {"output_dir": args.output_dir, "task": task, **report, "target_sparsity": args.target_sparsity,
            "kl_to_full_model": faithful["kl"], "agreement_with_full_model": faithful["agreement"]}


def selection_settings(script: PruneScriptArguments) -> dict:
    """The granularity / relaxation flags as `PruningConfig` fields (weight-only fields only when given)."""
    settings: dict = {"granularity": script.granularity, "relaxation": script.relaxation}
    if script.target_modules:
        settings["target_modules"] = [name.strip() for name in script.target_modules.split(",") if name.strip()]
    if script.layers_to_transform:
        settings["layers_to_transform"] = parse_layers(script.layers_to_transform)
    if script.mask_bias:
        settings["mask_bias"] = True
    return settings


def parse_layers(text: str) -> list[int]:
    """'0,2-4' -> [0, 2, 3, 4]."""
    layers: list[int] = []
    for part in text.split(","):
        part = part.strip()
        try:
            if "-" in part:
                start, end = (int(x) for x in part.split("-", 1))
                layers.extend(range(start, end + 1))
            elif part:
                layers.append(int(part))
        except ValueError as err:
            raise ValueError(f"--layers_to_transform: {part!r} is not a layer index or a range like 2-5.") from err
    return layers


def resolve_task(script: PruneScriptArguments) -> str:
    if script.task != "auto":
        if script.task not in TASK_CLASSES:
            raise SystemExit(f"--task {script.task!r} is not one of auto, {', '.join(TASK_CLASSES)}.")
        return script.task
    import transformers
    kwargs = {k: v for k, v in {"revision": script.model_revision, "gguf_file": script.gguf_file}.items() if v}
    config = transformers.AutoConfig.from_pretrained(script.model, **kwargs)
    names = " ".join(getattr(config, "architectures", None) or [])
    if "ForCausalLM" in names or "LMHeadModel" in names:
        return "causal_lm"
    if "ForTokenClassification" in names:
        return "token_classification"
    return "sequence_classification"


def resolve_text_columns(columns: list[str], requested: str | None) -> list[str]:
    if requested:
        chosen = [c.strip() for c in requested.split(",") if c.strip()]
        missing = [c for c in chosen if c not in columns]
        if missing:
            raise SystemExit(f"--text_columns {missing} not in the dataset; its columns are {columns}.")
        return chosen
    for candidate in TEXT_COLUMN_CANDIDATES:
        if all(c in columns for c in candidate):
            return list(candidate)
    raise SystemExit(f"Could not find text columns in {columns}; pass --text_columns a,b.")


def format_summary(summary: dict) -> str:
    lines = ["", "Pruning summary", "---------------"]
    lines.append(f"units kept          {summary['units_kept']} of {summary['units_total']} "
                 f"(heads {summary.get('heads_kept', '-')}/{summary.get('heads_total', '-')}, "
                 f"MLPs {summary.get('mlps_kept', '-')}/{summary.get('mlps_total', '-')})")
    lines.append(f"realized sparsity   {summary['sparsity']:.4f} (target {summary['target_sparsity']:.4f}; "
                 f"{summary['sparsity_params']:.4f} of unit parameters)")
    lines.append(f"KL to full model    {summary['kl_to_full_model']:.5f}")
    lines.append(f"agreement           {summary['agreement_with_full_model']:.4f}")
    lines.append(f"masks saved to      {summary['output_dir']}")
    lines.append(json.dumps(summary, default=str))
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
