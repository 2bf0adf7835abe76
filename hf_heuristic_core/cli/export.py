"""`hf-heuristic-core export`: turn a mask artifact (unit or neuron masks) into a slim model folder (see
`hf_heuristic_core.export`).

    hf-heuristic-core export --model NAME_OR_PATH --masks DIR_OR_REPO --output_dir OUT
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import transformers

from ..artifacts import check_finished, read_artifact, recorded_gguf_file
from ..export import parameter_count, push_slim_to_hub, save_slim
from ..export.io import folder_state
from ..export.shrink import shrink_notes
from ..model import PrunableModel
from ..run_folder import claim_output_dir, local_paths
from .checks import check_model_source, missing_tokenizer
from .export_checks import check_masks_fit_model, exported_granularity, loading_mismatch
from .flags.export import DESCRIPTION, ExportScriptArguments

__all__ = ["DESCRIPTION", "ExportScriptArguments", "export_command", "run_export", "source_tokenizer"]

logger = logging.getLogger(__name__)


def run_export(script: ExportScriptArguments) -> dict:
    """Claim the output folder, check the masks, load, export and save; returns the parameter counts, whether plain
    transformers loads the folder, and where."""
    if not script.gguf_file and recorded_gguf_file(script.masks, script.model):
        script = replace(script, gguf_file=recorded_gguf_file(script.masks, script.model))
        logger.info("--gguf_file not given: reading %s, the GGUF file the --masks artifact records.", script.gguf_file)
    settings = {k: v for k, v in asdict(script).items()
                if k not in ("overwrite_output_dir", "push_to_hub", "output_dir", "allow_unfinished")}
    settings.update(model=local_paths(script.model), masks=local_paths(script.masks))
    with claim_output_dir(script.output_dir, "export", settings, overwrite=script.overwrite_output_dir,
                          inputs=[("--masks", script.masks), ("--model", script.model)],
                          own_files=_is_previous_export) as claim:
        summary = _export(script)
        claim.finish(summary=summary)
    return summary


def _is_previous_export(folder) -> bool:
    return folder_state(folder) == "slim"


def _export(script: ExportScriptArguments) -> dict:
    artifact = read_artifact(script.masks)
    exported_granularity(artifact, script.masks)
    unfinished = check_finished(script.masks, script.allow_unfinished, artifact=artifact)
    gguf_file = script.gguf_file or _recorded_gguf(artifact, script.model)
    check_model_source(script.model, gguf_file)   # a folder of GGUF files only: the error names --gguf_file
    hf_kwargs = {k: v for k, v in {"revision": script.model_revision, "gguf_file": gguf_file}.items() if v}
    config = transformers.AutoConfig.from_pretrained(script.model, **hf_kwargs)
    check_masks_fit_model(artifact, config, script.model, script.masks)
    saved_class = artifact.config.base_model_class
    model_class = getattr(transformers, saved_class, None) if saved_class else None
    try:
        prunable = PrunableModel.from_pretrained(script.model, pruning_config=artifact.config.settings_only(),
                                                 masks=script.masks, model_class=model_class, config=config,
                                                 **hf_kwargs)
    except RuntimeError as err:
        raise loading_mismatch(err, artifact, script.model, script.masks) from err
    prunable.eval()
    tokenizer, no_tokenizer = source_tokenizer(script.model, hf_kwargs)
    slim = prunable.export_slim(ablation=script.ablation, source=str(script.masks))
    target = save_slim(slim, script.output_dir, overwrite=script.overwrite_output_dir, tokenizer=tokenizer)
    summary = {"parameters_before": parameter_count(prunable.model), "parameters_after": parameter_count(slim),
               "stock": slim.config.hf_heuristic_core_slim["stock"], "output_dir": str(target),
               "model_class": type(slim).__name__, "unfinished_masks": unfinished,
               "not_removed": shrink_notes(slim.config.hf_heuristic_core_slim),
               "tokenizer": None if tokenizer is None else type(tokenizer).__name__, "no_tokenizer": no_tokenizer}
    if script.push_to_hub:
        push_slim_to_hub(slim, script.push_to_hub, tokenizer=tokenizer)
        summary["hub_repo"] = script.push_to_hub
    return summary


def _recorded_gguf(artifact, model: str) -> str | None:
    """The GGUF file a (downloaded) artifact records, when the --model folder holds it."""
    name = artifact.config.base_model_gguf_file
    return name if name and (Path(model).expanduser() / name).is_file() else None


def source_tokenizer(model: str, hf_kwargs: dict) -> tuple[Any, str | None]:
    """The tokenizer saved with `--model`, to copy into the slim folder (so `pipeline(task, model=folder)` works), or
    None and why not: a model saved without one still exports, and the output says that the folder has none."""
    if missing_tokenizer(model, hf_kwargs.get("gguf_file")):
        return None, (f"--model {model} has no tokenizer (no tokenizer file in the folder); the slim folder has none "
                      "either: save one into it with tokenizer.save_pretrained(folder) before using "
                      "transformers.pipeline on it")
    try:
        return transformers.AutoTokenizer.from_pretrained(model, **hf_kwargs), None
    except (OSError, ValueError, TypeError, KeyError) as err:
        return None, (f"--model {model} has no tokenizer that AutoTokenizer loads ({' '.join(str(err).split())[:160]}); "
                      "the slim folder has none either: save one into it with tokenizer.save_pretrained(folder) "
                      "before using transformers.pipeline on it")


def export_command(argv: Sequence[str]) -> int:
    parser = transformers.HfArgumentParser(ExportScriptArguments, prog="hf-heuristic-core export",
                                           description=DESCRIPTION)
    (script,) = parser.parse_args_into_dataclasses(args=list(argv))
    summary = run_export(script)
    for reason in summary.get("unfinished_masks") or []:
        print(f"WARNING: exported unfinished masks (--allow_unfinished): {reason}")
    before, after = summary["parameters_before"], summary["parameters_after"]
    print(f"parameters: {before:,} -> {after:,} ({after / before:.1%} kept)")
    for note in summary.get("not_removed") or []:
        print(f"note: {note}")
    print(f"slim model ({summary['model_class']}) written to {summary['output_dir']}"
          + (f", with the model's tokenizer ({summary['tokenizer']})" if summary.get("tokenizer") else ""))
    if summary.get("no_tokenizer"):
        print(f"note: {summary['no_tokenizer']}")
    if summary["stock"]:
        print("load it with plain transformers: AutoModelFor*.from_pretrained(dir)")
    else:
        print("load it with transformers and the folder's own code: AutoModelFor*.from_pretrained(dir, "
              "trust_remote_code=True); or: from hf_heuristic_core import load_slim; load_slim(dir)")
    if summary.get("hub_repo"):
        print(f"pushed to the Hub: {summary['hub_repo']}")
    return 0
