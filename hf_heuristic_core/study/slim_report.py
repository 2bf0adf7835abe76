"""The study's slim report: one 50% subnetwork exported as a slim model, checked against the hooked subnetwork.

Structured pruning promises a smaller, faster model; the study shows it on one run (sparsity nearest 0.5, lowest
seed): the parameter count of the slim model against the full one, the forward latency of the full model, the
hooked subnetwork and the slim model on one of the study's evaluation batches (one process, round-robin, median),
and the accuracy of slim against hooked on every ID and OOD set. Slim and hooked must predict the same class on every
example, and the hooked accuracy must be the one the study's pruning run recorded; if not, the report says so in
capitals (a slim model that silently differs would be the worst outcome).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from ..analysis.results import FULL_MODEL_NAME, RESULT_NAME, read_json
from ..artifacts import read_artifact
from ..errors import UnsupportedArchitectureError
from ..export import parameter_count, slim_info
from ..export.latency import round_robin_latency
from ..model import PrunableModel
from ..tokenizer_loading import load_tokenizer
from ..architectures.registry import ARCHITECTURES
from ..batching import LABEL_KEYS, iterate_batches, model_input_names
from ..data.spec import eval_sets_from_spec
from ..evaluation.subnetwork import collapse_predictions, labels_of, should_collapse

__all__ = ["choose_run", "slim_report_for_runs", "slim_report_lines", "study_slim_report"]

logger = logging.getLogger(__name__)

# fp32 logits of a slim model and its hooked subnetwork differ only by float rounding (the folds run in float64).
EXACT_ATOL = 1e-4


# how a slim folder that no stock config states loads (export/remote_code.py)
_OWN_CODE = "transformers and the folder's own code (`trust_remote_code=True`), or hf_heuristic_core.load_slim"


def choose_run(runs_dir: str | Path, sparsity: float = 0.5) -> Path | None:
    """The finished run whose target sparsity is nearest `sparsity` (lowest seed on ties); None when there is none."""
    candidates = []
    for result in Path(runs_dir).glob(f"*/{RESULT_NAME}"):
        data = read_json(result)
        if "sparsity" in data and "seed" in data:
            candidates.append((abs(float(data["sparsity"]) - sparsity), int(data["seed"]), result.parent))
    return min(candidates)[2] if candidates else None


def _inputs(batch: Mapping[str, Any], accepted: Sequence[str], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device) for k, v in batch.items() if isinstance(v, torch.Tensor) and k not in LABEL_KEYS
            and (not accepted or k in accepted)}


@torch.no_grad()
def _compare(prunable: Any, slim: torch.nn.Module, data: Any, collate_fn: Any, batch_size: int,
             device: torch.device) -> dict[str, Any]:
    """Hooked and slim predictions on one evaluation set: accuracies, disagreements, largest logit difference."""
    accepted = model_input_names(prunable.model)
    pad = getattr(prunable.config, "pad_token_id", None) or 0
    batches, _ = iterate_batches(data, batch_size, pad, collate_fn, extra_columns=LABEL_KEYS)
    hooked_pred, slim_pred, labels = [], [], []
    max_diff = 0.0
    for batch in batches:
        inputs = _inputs(batch, accepted, device)
        hooked = prunable(**inputs).logits.float()
        ours = slim(**inputs).logits.float()
        max_diff = max(max_diff, float((hooked - ours).abs().max()))
        hooked_pred.append(hooked.argmax(-1).cpu())
        slim_pred.append(ours.argmax(-1).cpu())
        label = labels_of(batch)
        if label is not None:
            labels.append(label.cpu())
    hooked_all, slim_all = torch.cat(hooked_pred), torch.cat(slim_pred)
    entry: dict[str, Any] = {"num_examples": int(hooked_all.numel()), "max_logit_diff": max_diff,
                             "disagreements": int((hooked_all != slim_all).sum())}
    if labels:
        gold = torch.cat(labels)
        num_labels = getattr(prunable.config, "num_labels", None) or 0
        if should_collapse("auto", "", num_labels, gold):   # as evaluate_subnetwork scores HANS-style sets
            hooked_all, slim_all = collapse_predictions(hooked_all, 0), collapse_predictions(slim_all, 0)
        # correct / count in Python floats, as evaluate_subnetwork computes it, so the two compare exactly
        entry["hooked_accuracy"] = int((hooked_all == gold).sum()) / gold.numel()
        entry["slim_accuracy"] = int((slim_all == gold).sum()) / gold.numel()
    return entry


def _group_means(accuracy: Mapping[str, float | None], groups: Mapping[str, Sequence[str]]) -> dict[str, float]:
    """Mean accuracy over each group's sets, every set weighted equally (as the effective-size groups are)."""
    out = {}
    for group, names in groups.items():
        values = [accuracy.get(name) for name in names]
        if values and all(v is not None for v in values):
            out[group] = sum(values) / len(values)
    return out


def study_slim_report(model_path: str | Path, runs_dir: str | Path, eval_sets: Mapping[str, Any],
                      groups: Mapping[str, Sequence[str]], *, collate_fn: Any = None, sparsity: float = 0.5,
                      batch_size: int = 32, repeats: int = 5, min_seconds: float = 2.0,
                      device: str | torch.device = "cpu") -> dict[str, Any]:
    """Export the run nearest `sparsity` as a slim model and compare it with the full model and the hooked
    subnetwork (see the module docstring). Latency: at least `repeats` round-robin rounds, more until `min_seconds`
    of forwards were timed. Returns a JSON-able dict; `{"skipped": reason}` when it cannot run.

    `collate_fn` None batches as the study's evaluation (`prune_many`) does, so the hooked accuracies can be checked
    against the ones the run recorded."""
    run_dir = choose_run(runs_dir, sparsity)
    if run_dir is None:
        return {"skipped": f"no finished pruning run under {runs_dir}"}
    device = torch.device(device)
    artifact = read_artifact(run_dir)
    prunable = PrunableModel.from_pretrained(str(model_path), pruning_config=artifact.config.settings_only(),
                                             masks=run_dir)
    prunable.set_masks(artifact.masks)   # the binary masks the run evaluated, not a re-binarization of its logits
    prunable.to(device).eval()
    try:
        slim = prunable.export_slim(source=str(run_dir)).to(device).eval()
    except UnsupportedArchitectureError as error:
        return {"run": run_dir.name, "skipped": str(error)}
    full = type(prunable.model).from_pretrained(str(model_path)).to(device).eval()

    per_set = {name: _compare(prunable, slim, data, collate_fn, batch_size, device)
               for name, data in eval_sets.items()}
    problems = _problems(per_set, read_json(run_dir / RESULT_NAME).get("eval", {}))
    if problems:
        logger.error("SLIM MODEL DIFFERS FROM THE HOOKED SUBNETWORK: %s", "; ".join(problems))

    first = next(iter(groups.get("id") or eval_sets))
    inputs = _inputs(_first_batch(eval_sets[first], prunable, collate_fn, batch_size), _accepted(prunable), device)
    with torch.inference_mode():
        latency, rounds = round_robin_latency({"full": lambda: full(**inputs), "hooked": lambda: prunable(**inputs),
                                               "slim": lambda: slim(**inputs)}, repeats=repeats,
                                              min_seconds=min_seconds)
    result = read_json(run_dir / RESULT_NAME)
    full_accuracy = read_json(Path(runs_dir) / FULL_MODEL_NAME).get("accuracy", {}) \
        if (Path(runs_dir) / FULL_MODEL_NAME).is_file() else {}
    info = slim_info(slim)
    return {
        "run": run_dir.name, "run_dir": str(run_dir), "sparsity": result.get("sparsity"),
        "realized_sparsity": result.get("realized_sparsity"), "heads_kept": result.get("heads_kept"),
        "mlps_kept": result.get("mlps_kept"), "ablation": info["ablation"], "loads_with_plain_transformers":
        info["stock"],
        "parameters": {"full": parameter_count(full), "slim": parameter_count(slim),
                       "full_layers": _layer_parameters(full), "slim_layers": _layer_parameters(slim)},
        "model": str(model_path),
        "latency_s": latency, "latency_setting": {
            "device": str(device), "threads": torch.get_num_threads() if device.type == "cpu" else None,
            "batch": list(inputs["input_ids"].shape), "eval_set": first, "repeats": rounds,
            "method": "median of round-robin forwards (full, hooked, slim) after one warm-up, in one process"},
        "per_set": per_set,
        "groups": {"full": _group_means(full_accuracy, groups),
                   **{what: _group_means({n: e.get(f"{what}_accuracy") for n, e in per_set.items()}, groups)
                      for what in ("hooked", "slim")}},
        "identical": not problems, "problems": problems,
    }


def _problems(per_set: Mapping[str, Mapping[str, Any]], recorded: Mapping[str, Any]) -> list[str]:
    """Where the slim model differs from the hooked subnetwork (predictions, logits), or the hooked subnetwork
    from what the study's run recorded."""
    problems = []
    for name, entry in per_set.items():
        if entry["disagreements"]:
            problems.append(f"{name}: slim and hooked predictions differ on {entry['disagreements']} of "
                            f"{entry['num_examples']} examples")
        if entry["max_logit_diff"] > EXACT_ATOL:
            problems.append(f"{name}: logits differ by up to {entry['max_logit_diff']:.3g} (> {EXACT_ATOL:g})")
        study = recorded.get(name, {}).get("accuracy")
        if study is not None and entry.get("hooked_accuracy") is not None \
                and abs(study - entry["hooked_accuracy"]) > 1e-9:
            problems.append(f"{name}: the hooked subnetwork scores {entry['hooked_accuracy']:.4f} here but "
                            f"{study:.4f} in the study's run")
    return problems


def slim_report_for_runs(runs_dir: str | Path, model: str | Path | None = None, **kwargs: Any) -> dict[str, Any]:
    """`study_slim_report` on a finished study's runs folder, read-only: the model, tokenizer and evaluation sets
    come from what its manifest.json records (`model` overrides the recorded model path)."""
    from ..analysis.results import MANIFEST_NAME, read_json  # local: the name clashes with a module-level one
    manifest = read_json(Path(runs_dir) / MANIFEST_NAME)
    model = model or manifest["model"]
    tokenizer = load_tokenizer(model, "model=")
    data = manifest.get("data") or {}
    eval_sets = eval_sets_from_spec(data, tokenizer)
    groups = dict(data.get("groups") or {"id": list(eval_sets)[:1], "ood": list(eval_sets)[1:]})
    groups["mixed"] = [name for names in groups.values() for name in names]
    return study_slim_report(model, runs_dir, eval_sets, groups, **kwargs)


def _layer_parameters(model: torch.nn.Module) -> int:
    """Parameters of the transformer layers alone (embeddings and the task head do not shrink with pruning)."""
    from ..export import parameter_count  # local: the name clashes with a module-level one
    # the map's path, not resolve_architecture: that checks head widths, which a slim layer no longer has
    return parameter_count(model.base_model.get_submodule(ARCHITECTURES[model.config.model_type].layers))


def _accepted(prunable: Any) -> Sequence[str]:
    return model_input_names(prunable.model)


def _first_batch(data: Any, prunable: Any, collate_fn: Any, batch_size: int) -> Mapping[str, Any]:
    pad = getattr(prunable.config, "pad_token_id", None) or 0
    batches, _ = iterate_batches(data, batch_size, pad, collate_fn)
    return next(iter(batches))


def slim_report_lines(report: Mapping[str, Any] | None) -> list[str]:
    """The report.md section of `study_slim_report`'s result (nothing when there is none)."""
    if not report:
        return []
    lines = ["## Slim model of one 50% subnetwork", ""]
    if "skipped" in report:
        return [*lines, f"Not exported: {report['skipped']}", ""]
    params = report["parameters"]
    latency = report["latency_s"]
    setting = report["latency_setting"]
    where = "CPU, " + f"{setting['threads']} thread{'s' if setting['threads'] != 1 else ''}" \
        if setting["device"] == "cpu" else setting["device"]
    groups = report["groups"]
    lines += [(f"Run `{report['run']}` (target sparsity {report['sparsity']:.2f}, realized "
              f"{report['realized_sparsity']:.3f}: {report['heads_kept']} heads, {report['mlps_kept']} MLP blocks "
              f"kept) with the pruned units physically removed and their {report['ablation']} outputs folded into "
              f"biases (`export_slim`); it loads with "
              f"{'plain transformers' if report['loads_with_plain_transformers'] else _OWN_CODE}."),
              "",
              "| | full model | hooked subnetwork | slim model |", "|---|---|---|---|",
              (f"| parameters | {params['full']:,} | {params['full']:,} (+ masks) | {params['slim']:,} "
              f"({params['slim'] / params['full']:.1%}) |"),
              (f"| parameters of the transformer layers | {params['full_layers']:,} | {params['full_layers']:,} | "
               f"{params['slim_layers']:,} ({params['slim_layers'] / params['full_layers']:.1%}) |"),
              (f"| forward latency, batch {setting['batch'][0]} x {setting['batch'][1]} | "
              f"{latency['full'] * 1e3:.1f} ms | {latency['hooked'] * 1e3:.1f} ms "
              f"({latency['hooked'] / latency['full']:.2f}x) | {latency['slim'] * 1e3:.1f} ms "
              f"({latency['slim'] / latency['full']:.2f}x) |")]
    for group in ("id", "ood", "mixed"):
        if group in groups["slim"]:
            full = groups["full"].get(group)
            lines.append(f"| {group.upper() if group != 'mixed' else 'mixed'} accuracy | "
                         f"{'' if full is None else f'{full:.4f}'} | {groups['hooked'][group]:.4f} | "
                         f"{groups['slim'][group]:.4f} |")
    examples = sum(entry["num_examples"] for entry in report["per_set"].values())
    largest = max(entry["max_logit_diff"] for entry in report["per_set"].values())
    lines += ["", (f"Latency: {where}, {setting['method']}, {setting['repeats']} repeats, on the first batch of "
              f"`{setting['eval_set']}`; a loaded machine moves all three alike. Accuracies: the mean over each "
              "group's sets.")]
    if report["identical"]:
        lines += ["", (f"Slim and hooked subnetwork predict the same class on all {examples:,} evaluation examples "
                  f"(largest logit difference {largest:.2g}), and the hooked accuracies equal the study's run.")]
    else:
        lines += ["", ("**WARNING: THE SLIM MODEL DOES NOT REPRODUCE THE HOOKED SUBNETWORK.** Do not use it; "
                  "please report this as a bug."), "", *[f"- {problem}" for problem in report["problems"]]]
    lines += ["", (f"Export it yourself: `hf-heuristic-core export --model {report['model']} --masks "
              f"{report['run_dir']} --output-dir slim`."), ""]
    return lines
