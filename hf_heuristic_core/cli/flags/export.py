"""Flags of `hf-heuristic-core export` (torch-free: `--help` is drawn from them; the run is `cli/export.py`)."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["DESCRIPTION", "ExportScriptArguments"]

DESCRIPTION = ("Turn a mask artifact (heads and MLP blocks, or MLP neurons) into a smaller plain Transformers model "
               "(pruned units removed, their means folded into biases), with --model's tokenizer; the output says "
               "which pruned units it could not remove, and why.")


@dataclass
class ExportScriptArguments:
    """Which model and masks to export, and where to."""

    model: str = field(metadata={"help": "Hub id or local folder of the model the masks were learned on."})
    masks: str = field(metadata={"help": "Mask artifact folder or Hub repo id (PrunableModel.save_pretrained)."})
    output_dir: str = field(metadata={
        "help": "Folder to write the slim model to: new, empty, or a previous export (replaced). A folder holding "
                "anything else is refused (see --overwrite_output_dir), and so is the --masks folder."})
    ablation: str | None = field(default=None, metadata={
        "help": "mean or zero; default: the artifact's own ablation (mean needs the artifact's means)."})
    model_revision: str | None = field(default=None, metadata={"help": "Model revision on the Hub."})
    gguf_file: str | None = field(default=None, metadata={
        "help": "GGUF file inside --model, if any (default: the one the --masks artifact records, when --model holds "
                "it)."})
    push_to_hub: str | None = field(default=None, metadata={"help": "Also upload the slim model to this Hub repo."})
    overwrite_output_dir: bool = field(default=False, metadata={
        "help": "Write into an --output_dir that holds other files (nothing is deleted; another model's files are "
                "refused even so)."})
    allow_unfinished: bool = field(default=False, metadata={
        "help": "Export masks that are not a finished run's (a mid-run checkpoint-N, masks never fixed); refused "
                "without it."})
