"""`hf-heuristic-core export`: turn a mask artifact (unit or neuron masks) into a slim model folder (see
`hf_heuristic_core.export`).

    hf-heuristic-core export --model NAME_OR_PATH --masks DIR_OR_REPO --output_dir OUT
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["ExportScriptArguments", "export_command", "run_export"]


@dataclass
class ExportScriptArguments:
    """Which model and masks to export, and where to."""

    model: str = field(metadata={"help": "Hub id or local folder of the model the masks were learned on."})
    masks: str = field(metadata={"help": "Mask artifact folder or Hub repo id (PrunableModel.save_pretrained)."})
    output_dir: str = field(metadata={"help": "Folder to write the slim model to (replaced as a whole)."})
    ablation: str | None = field(default=None, metadata={
        "help": "mean or zero; default: the artifact's own ablation (mean needs the artifact's means)."})
    model_revision: str | None = field(default=None, metadata={"help": "Model revision on the Hub."})
    gguf_file: str | None = field(default=None, metadata={"help": "GGUF file inside --model, if any."})
    push_to_hub: str | None = field(default=None, metadata={"help": "Also upload the slim model to this Hub repo."})


def run_export(script: ExportScriptArguments) -> dict:
    """Load, export and save; returns the parameter counts, whether plain transformers loads the folder, and where."""
    import transformers

    from ..artifacts import read_artifact
    from ..export import parameter_count, push_slim_to_hub, save_slim
    from ..model import PrunableModel
    artifact = read_artifact(script.masks)
    saved_class = artifact.config.base_model_class
    model_class = getattr(transformers, saved_class, None) if saved_class else None
    hf_kwargs = {k: v for k, v in {"revision": script.model_revision, "gguf_file": script.gguf_file}.items() if v}
    prunable = PrunableModel.from_pretrained(script.model, pruning_config=artifact.config.settings_only(),
                                             masks=script.masks, model_class=model_class, **hf_kwargs)
    prunable.eval()
    slim = prunable.export_slim(ablation=script.ablation, source=str(script.masks))
    target = save_slim(slim, script.output_dir)
    summary = {"parameters_before": parameter_count(prunable.model), "parameters_after": parameter_count(slim),
               "stock": slim.config.hf_heuristic_core_slim["stock"], "output_dir": str(target),
               "model_class": type(slim).__name__}
    if script.push_to_hub:
        push_slim_to_hub(slim, script.push_to_hub)
        summary["hub_repo"] = script.push_to_hub
    return summary


def export_command(argv: Sequence[str]) -> int:
    from transformers import HfArgumentParser
    parser = HfArgumentParser(ExportScriptArguments, prog="hf-heuristic-core export",
                              description="Turn a mask artifact (heads and MLP blocks, or MLP neurons) into a smaller "
                                            "plain Transformers model.")
    (script,) = parser.parse_args_into_dataclasses(args=list(argv))
    summary = run_export(script)
    before, after = summary["parameters_before"], summary["parameters_after"]
    print(f"parameters: {before:,} -> {after:,} ({after / before:.1%} kept)")
    print(f"slim model ({summary['model_class']}) written to {summary['output_dir']}")
    if summary["stock"]:
        print("load it with plain transformers: AutoModelFor*.from_pretrained(dir)")
    else:
        print("load it with: from hf_heuristic_core import load_slim; load_slim(dir)")
    if summary.get("hub_repo"):
        print(f"pushed to the Hub: {summary['hub_repo']}")
    return 0
