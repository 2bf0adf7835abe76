"""Flags of `hf-heuristic-core finetune` (torch-free: `--help` is drawn from them and from `TrainingArguments`'
source, read with `ast`; the run is `cli/finetune.py`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..help import render_source_help, source_fields

__all__ = ["DESCRIPTION", "PROG", "REFUSED_FLAGS", "TASKS", "FinetuneScriptArguments", "finetune_help"]

DESCRIPTION = ("Fine-tune a base model on a dataset into the checkpoints prune and effective-size read "
               "(checkpoint-* folders, and the final model with its tokenizer in OUTPUT_DIR/final).")
PROG = "hf-heuristic-core finetune"
TASKS = ("sequence_classification", "causal_lm")
# TrainingArguments flags that a stock Trainer run never reads (switches for training scripts): refused with why.
REFUSED_FLAGS = {
    "do_train": "finetune always trains (the Trainer never reads the switch); drop the flag",
    "do_predict": "finetune does not predict; drop the flag",
    "debug": "--debug is the command line's switch for tracebacks; TrainingArguments' debug modes are not available "
             "from finetune",
}


@dataclass
class FinetuneScriptArguments:
    """What to fine-tune on which data (the training loop is the stock `TrainingArguments`)."""

    model: str = field(metadata={"help": "Hub id or local folder of the base model, with its tokenizer (e.g. "
                                         "MiniLM: the folder `python -c 'from hf_heuristic_core.offline_models "
                                         "import minilm_path; print(minilm_path())'` prints)."})
    dataset: str = field(metadata={
        "help": "Hub dataset id, a save_to_disk folder, or local json/jsonl/csv/parquet file(s), comma-separated."})
    dataset_config: str | None = field(default=None, metadata={"help": "Hub dataset configuration name."})
    train_split: str = field(default="train", metadata={"help": "Split to train on."})
    eval_split: str | None = field(default=None, metadata={
        "help": "Split to evaluate on (accuracy and loss, at the end and at every --eval_strategy step); a single "
                "data file has no splits: use --eval_fraction. Default: no evaluation."})
    eval_fraction: float | None = field(default=None, metadata={
        "help": "Hold out this share of the training rows (a random split seeded with --seed) for evaluation."})
    text_columns: str | None = field(default=None, metadata={
        "help": "Comma-separated text column(s); default: premise,hypothesis / sentence1,sentence2 / "
                "question1,question2 / text / sentence, whichever exist."})
    max_length: int = field(default=128, metadata={"help": "Tokenizer truncation length (the paper: 128)."})
    max_train_examples: int | None = field(default=None, metadata={"help": "Use at most this many examples."})
    task: str = field(default="sequence_classification", metadata={
        "help": "sequence_classification (a classification head on the base model, from the 'label' column) or "
                "causal_lm (language modelling on the text)."})
    num_labels: int | None = field(default=None, metadata={
        "help": "Classes of the classification head. Default: the training labels' (class ids 0..N-1, or the "
                "sorted distinct strings, which become the config's id2label)."})
    model_revision: str | None = field(default=None, metadata={"help": "Model revision on the Hub."})
    gguf_file: str | None = field(default=None, metadata={
        "help": "GGUF file inside --model: dequantized to float32 on load (the final model and the checkpoints are "
                "plain safetensors folders that prune and effective-size read)."})
    overwrite_output_dir: bool = field(default=False, metadata={
        "help": "Write into an --output_dir that holds another run's or another command's files (nothing is "
                "deleted; files of the same name are replaced). Without it such a folder is refused."})


def finetune_help() -> str:
    """`finetune --help`: this command's flags, then every `TrainingArguments` flag read from transformers' source
    (importing it costs torch, seconds)."""
    training = source_fields("transformers", "training_args.py", "TrainingArguments")
    notes = {name: f"REFUSED by finetune: {reason}." for name, reason in REFUSED_FLAGS.items()}
    notes["output_dir"] = ("Required. checkpoint-* folders and final/ go here; a folder holding another run's files "
                           "is refused (see --overwrite_output_dir).")
    notes["resume_from_checkpoint"] = "A checkpoint-* folder, or 'last' for the newest under --output_dir."
    epilog = ("Dashes and underscores both work. Booleans take true/false; those on by default also take --no_FLAG."
              "\nThen: hf-heuristic-core prune --model OUTPUT_DIR/final --dataset ... ; "
              "hf-heuristic-core effective-size OUTPUT_DIR ...")
    return render_source_help(PROG, DESCRIPTION, [("what to fine-tune", FinetuneScriptArguments, None),
                                                  ("training (every TrainingArguments flag)", training, notes)],
                              epilog=epilog)
