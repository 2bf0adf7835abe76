"""Flags of `hf-heuristic-core prune` (torch-free: `--help` and `--help-all` are drawn from them, `TrainingArguments`'
fields read from transformers' source with `ast`; the run is `cli/prune.py`).

The granularity and relaxation settings flags are generated from the registered methods' settings dataclasses
(`cli.settings_flags`): `SETTINGS_FLAGS` at import, `current_settings_flags()` / `prune_arguments_class()` with any
method registered since.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Callable, ClassVar

from ...ablation.names import ABLATION_MODES
from ...config import GRANULARITY_KIND, RELAXATION_KIND, registered_settings_classes
from ...errors import UsageError
from ...granularity import GRANULARITIES
from ...relaxations import RELAXATIONS
from ...training.fields import PruningFields
from ..help import render_help, render_source_help, source_fields
from ..settings_flags import SettingsFlag, settings_flags, settings_flags_dataclass

__all__ = ["ABLATIONS", "DESCRIPTION", "MASK_GROUP", "PROG", "REFUSED_FLAGS", "SETTINGS_FLAGS", "TASK_CLASSES",
           "TRAINING_GROUP", "PruneScriptArguments", "PruneSettingsFlags", "TrainingLoopFlags", "brief_script_flags",
           "current_settings_flags", "given_flags", "prune_arguments_class", "prune_help", "prune_help_all",
           "refuse_ignored_flags"]

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
    granularity: str = field(default=GRANULARITY_KIND.default, metadata={
        "help": "What one mask entry is: a head or MLP block (unit), an MLP neuron, a weight, an edge of the "
                "residual graph (pre-LN decoders) (granularity/<name>/)."})
    uniform_layers: bool = field(default=False, metadata={
        "help": "Binarize to the same number of heads (whole key/value groups under GQA) and the same MLP width in "
                "every layer, so that `export` writes a stock config plain transformers loads "
                "(PruningConfig.uniform_layers). This can move the sparsity away from the target; the summary and "
                "the card then say by how much and why."})
    relaxation: str = field(default=RELAXATION_KIND.default, metadata={
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
