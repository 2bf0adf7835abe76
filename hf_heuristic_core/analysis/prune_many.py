"""`prune_many`: one model pruned at several sparsities x seeds, every subnetwork evaluated, and its controls.

It prunes at every sparsity x seed (the paper's 12-seed tables), evaluates every subnetwork and three control
subnetworks per sparsity on every evaluation set, and leaves a *runs folder* (see `results.py`) that
`hf_heuristic_core.analysis.report.analyze` turns into tables and figures without the model. Finished runs are
skipped, so an interrupted call resumes where it stopped.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch

from ..artifacts import MASKS_NAME, read_artifact
from ..config import CONFIG_NAME, PruningConfig
from ..data.spec import datasets_from_spec
from ..evaluation.subnetwork import evaluate_subnetwork
from ..model import PrunableModel
from .ablation_table import AblationTable, ablation_table
from .mask_stats import inverse, random_from_complement, random_like
from .results import (CONTROLS_DIR, FULL_MODEL_NAME, MANIFEST_NAME, RESULT_NAME, PruneManyResult, collect_results,
                      read_json, write_json, write_results)
from .units import read_masks, run_name, sparsity_tag

logger = logging.getLogger(__name__)

# `hf_heuristic_core` resolves these public names through this module (its `_EXPORTS`), so they are imported here.
__all__ = ["AblationTable", "PruneManyResult", "ablation_table", "complement_mix", "complement_shortfall",
           "control_masks", "datasets_from_spec", "prune_many"]

RESERVED_OVERRIDES = ("output_dir", "target_sparsity", "seed")


def _is_finished(run_dir: Path) -> bool:
    return (run_dir / RESULT_NAME).is_file() and _has_artifact(run_dir)


def _has_artifact(run_dir: Path) -> bool:
    return (run_dir / MASKS_NAME).is_file() and (run_dir / CONFIG_NAME).is_file()


def _load_model(model: str | os.PathLike | PrunableModel, pruning_config: PruningConfig | None,
                model_kwargs: Mapping[str, Any] | None) -> PrunableModel:
    if isinstance(model, PrunableModel):
        if pruning_config is not None:
            logger.warning("prune_many got a loaded PrunableModel; its own pruning config is used and "
                           "pruning_config is ignored.")
        return model
    return PrunableModel.from_pretrained(model, pruning_config or PruningConfig(), **dict(model_kwargs or {}))


def _default_collator(model: PrunableModel, tokenizer: Any) -> Any:
    if tokenizer is not None:
        from transformers import DataCollatorWithPadding
        return DataCollatorWithPadding(tokenizer)
    from ..batching import PadCollator
    return PadCollator(getattr(model.config, "pad_token_id", None) or 0)


# What makes two prune_many calls the same series of runs (sparsities and seeds may be added later).
IDENTITY_KEYS = ("model", "model_class", "pruning_config", "pruning_overrides", "data", "means_examples",
                 "collapse_to_entailment", "entailment_id", "controls", "control_seed")


def _identity(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """The manifest's identity keys, local model folders as absolute paths (a relative path and its absolute form
    name the same model)."""
    from ..training.fingerprint import _base_model
    identity = {key: manifest.get(key) for key in IDENTITY_KEYS if key in manifest}
    identity["model"] = _base_model(identity.get("model"))
    if isinstance(identity.get("pruning_config"), dict):
        config = {k: v for k, v in identity["pruning_config"].items() if k != "extra"}
        config["base_model_name_or_path"] = _base_model(config.get("base_model_name_or_path"))
        identity["pruning_config"] = config
    return identity


def _legacy_identity(folder: Path) -> dict[str, Any] | None:
    """The identity of a runs folder written before run records, from its manifest.json."""
    path = folder / MANIFEST_NAME
    return _identity(read_json(path)) if path.is_file() else None


def _write_manifest(runs_dir: Path, manifest: dict[str, Any]) -> None:
    """Merge with an existing manifest so that adding seeds or sparsities later keeps the earlier ones listed (the
    run record refused a folder of another model or other settings before this point)."""
    path = runs_dir / MANIFEST_NAME
    if path.is_file():
        previous = read_json(path)
        for key in ("sparsities", "seeds"):
            manifest[key] = sorted(set(previous.get(key, [])) | set(manifest[key]))
        if manifest.get("data") is None and previous.get("data") is not None:
            manifest["data"] = previous["data"]
    write_json(path, manifest)


def prune_many(model: str | os.PathLike | PrunableModel, train_dataset: Any, eval_sets: Mapping[str, Any],
               runs_dir: str | os.PathLike, sparsities: Sequence[float], seeds: Sequence[int], *,
               pruning_config: PruningConfig | None = None, pruning_overrides: Mapping[str, Any] | None = None,
               data_collator: Any = None, tokenizer: Any = None, means_examples: int | None = 1024,
               eval_batch_size: int = 32, collapse_to_entailment: Any = "auto", entailment_id: int = 0,
               controls: bool = True, control_seed: int = 0, data_spec: Mapping[str, Any] | None = None,
               model_kwargs: Mapping[str, Any] | None = None, show_progress: bool = True,
               overwrite_output_dir: bool = False) -> PruneManyResult:
    """Prune `model` at every sparsity x seed, evaluate each subnetwork on every set, save masks and results.

    `model`: a path / Hub id (loaded with `pruning_config`) or a loaded `PrunableModel` (its config is used).
    `train_dataset`: tokenized training data (mean activations are computed once on its first `means_examples`
    examples unless the model already has means). `eval_sets`: `{name: tokenized dataset with labels}`.
    `pruning_overrides`: `PruningArguments` kwargs shared by every run (target sparsity, seed and output_dir are
    set per run). `data_spec`: how the data was built (see `datasets_from_spec`), recorded in manifest.json so that
    `analyze` can rebuild the evaluation sets. Finished runs (artifact + result.json) are skipped; a run whose
    artifact exists but whose evaluation did not finish is evaluated from the artifact without re-training.
    `controls`: also evaluate the control subnetworks (random with the same per-layer counts, random from the
    complement with as many units, inverse) of the first seed's mask at each sparsity; see `control_masks`.
    `runs_dir` must be new, empty or a runs folder of the same model, settings and data (more sparsities and seeds
    may be added); another one is refused unless `overwrite_output_dir` (see `run_folder`), and two calls into one
    folder at once are refused (a lock).
    """
    from ..run_folder import check_writable
    overrides = dict(pruning_overrides or {})
    reserved = [k for k in RESERVED_OVERRIDES if k in overrides]
    if reserved:
        raise ValueError(f"pruning_overrides may not set {reserved}: prune_many sets them per run "
                         "(pass sparsities=, seeds= and runs_dir= instead).")
    if not eval_sets:
        raise ValueError("prune_many needs at least one evaluation set, e.g. {'id': tokenized_dataset}.")
    if not sparsities or not seeds:
        raise ValueError("prune_many needs at least one sparsity and one seed.")
    runs_dir = Path(runs_dir)
    check_writable(runs_dir, "runs_dir")   # before the model loads
    prunable = _load_model(model, pruning_config, model_kwargs)
    model_path = str(model) if not isinstance(model, PrunableModel) else prunable.pruning_config.base_model_name_or_path
    if model_path and not os.path.isabs(model_path) and Path(model_path).is_dir():
        model_path = str(Path(model_path).resolve())   # analyze reloads it from anywhere
    collator = data_collator or _default_collator(prunable, tokenizer)
    names = list(eval_sets)
    eval_kwargs = dict(batch_size=eval_batch_size, collapse_to_entailment=collapse_to_entailment,
                       entailment_id=entailment_id)
    manifest = {
        "format": "hf_heuristic_core.prune_many", "format_version": 1, "model": model_path,
        "model_class": prunable.pruning_config.base_model_class,
        "pruning_config": {k: v for k, v in prunable.pruning_config.to_dict().items() if k != "extra"},
        "pruning_overrides": overrides, "sparsities": [float(s) for s in sparsities], "seeds": [int(s) for s in seeds],
        "eval_sets": names, "data": dict(data_spec) if data_spec is not None else None,
        "means_examples": means_examples, "eval_batch_size": eval_batch_size,
        "collapse_to_entailment": collapse_to_entailment, "entailment_id": entailment_id,
        "controls": controls, "control_seed": control_seed,
    }
    from ..run_folder import claim_output_dir
    from ..training.fingerprint import _data_fingerprint
    identity = {**_identity(manifest), "train_data": _data_fingerprint(train_dataset),
                "eval_data": {name: _data_fingerprint(data) for name, data in eval_sets.items()}}
    with claim_output_dir(runs_dir, "prune_many", identity, overwrite=overwrite_output_dir,
                          legacy_settings=_legacy_identity, flag="runs_dir") as claim:
        _write_manifest(runs_dir, manifest)
        result = _prune_all(prunable, train_dataset, eval_sets, runs_dir, sparsities, seeds, overrides, collator,
                            means_examples, eval_kwargs, controls, control_seed, show_progress)
        claim.finish(runs=len(result.results))
    return result


def _prune_all(prunable: PrunableModel, train_dataset: Any, eval_sets: Mapping[str, Any], runs_dir: Path,
               sparsities: Sequence[float], seeds: Sequence[int], overrides: dict[str, Any], collator: Any,
               means_examples: int | None, eval_kwargs: dict[str, Any], controls: bool, control_seed: int,
               show_progress: bool) -> PruneManyResult:
    from ..training.arguments import PruningArguments
    from ..training.convergence import verdict_status
    from ..training.trainer import PruningTrainer

    names = list(eval_sets)

    cache: dict[str, list[torch.Tensor]] = {}
    full_path = runs_dir / FULL_MODEL_NAME
    if full_path.is_file() and set(read_json(full_path).get("accuracy", {})) >= set(names):
        full = read_json(full_path)
    else:
        with prunable.masks_disabled():
            evaluation = evaluate_subnetwork(prunable, eval_sets, full_model_cache=cache, **eval_kwargs)
        full = {"accuracy": {n: e.get("accuracy") for n, e in evaluation.items()},
                "num_examples": {n: e["num_examples"] for n, e in evaluation.items()}}
        write_json(full_path, full)
    logger.info("Full model accuracy: %s", full["accuracy"])

    plan = [(float(s), int(seed)) for s in sparsities for seed in seeds]
    teacher_cache = None
    for index, (sparsity, seed) in enumerate(plan):
        run_dir = runs_dir / run_name(sparsity, seed)
        if _is_finished(run_dir):
            logger.info("[%d/%d] %s: finished earlier, skipped.", index + 1, len(plan), run_dir.name)
            continue
        started = time.time()
        if _has_artifact(run_dir):
            logger.info("[%d/%d] %s: artifact found, evaluating it.", index + 1, len(plan), run_dir.name)
            masks = read_masks(run_dir)
            convergence = read_artifact(run_dir).config.extra.get("convergence")
        else:
            if not prunable.has_means and prunable.pruning_config.ablation == "mean":
                data = train_dataset if means_examples is None or not hasattr(train_dataset, "select") \
                    else train_dataset.select(range(min(means_examples, len(train_dataset))))
                prunable.compute_means(data, collate_fn=collator, show_progress=show_progress,
                                       keep_dropout=bool(overrides.get("keep_dropout", False)))
            logger.info("[%d/%d] %s: pruning.", index + 1, len(plan), run_dir.name)
            prunable.reset_masks(seed)
            args = PruningArguments(**{"report_to": "none", "save_strategy": "no", "disable_tqdm": not show_progress,
                                       **overrides, "output_dir": str(run_dir), "target_sparsity": sparsity,
                                       "seed": seed})
            trainer = PruningTrainer(model=prunable, args=args, train_dataset=train_dataset, data_collator=collator,
                                     teacher_cache=teacher_cache)
            trainer.train()
            teacher_cache = trainer.teacher_cache or teacher_cache
            masks = prunable.get_masks(binary=True)
            convergence = trainer.convergence.to_dict() if trainer.convergence is not None else None
            prunable.eval()
        evaluation = evaluate_subnetwork(prunable, eval_sets, masks=masks, full_model_cache=cache, **eval_kwargs)
        report = prunable.sparsity_report(masks)
        write_json(run_dir / RESULT_NAME, {
            "run": run_dir.name, "sparsity": sparsity, "seed": seed, "realized_sparsity": report["sparsity"],
            "sparsity_params": report["sparsity_params"], "units_kept": report["units_kept"],
            "units_total": report["units_total"], "heads_kept": report.get("heads_kept"),
            "mlps_kept": report.get("mlps_kept"), "eval": evaluation, "seconds": round(time.time() - started, 2),
            "converged": None if convergence is None else convergence["converged"],
            "verdict": verdict_status(convergence), "convergence": convergence})
        prunable.clear_masks()
        logger.info("%s: sparsity %.3f, accuracy %s", run_dir.name, report["sparsity"],
                    {n: e.get("accuracy") for n, e in evaluation.items()})

    if controls:
        _run_controls(prunable, runs_dir, eval_sets, sparsities, seeds, control_seed, cache, eval_kwargs)
    result = collect_results(runs_dir)
    write_results(result)
    return result


# --------------------------------------------------------------------------------------------------------------------
# Control subnetworks
# --------------------------------------------------------------------------------------------------------------------


def control_masks(masks: Mapping[str, torch.Tensor], pruned_kinds: Sequence[str],
                  generator: torch.Generator) -> dict[str, dict[str, torch.Tensor]]:
    """The three control subnetworks of one learned mask (masks by kind); kinds that were not pruned stay all-ones.

    random_like: the same number of kept units in every layer (over the whole mask for kinds with one unit per
    layer, such as MLP blocks, where per layer would copy the mask). random_from_complement: only units the mask
    prunes, as many as it keeps (see `_matched_complement`), or the whole complement where that is smaller.
    inverse: the complement itself.
    """
    learned = {kind: mask.long() for kind, mask in masks.items()}
    pruned = {kind: mask for kind, mask in learned.items() if kind in pruned_kinds}
    drawn = {"random_like": {kind: random_like(m, generator, per_layer=m.dim() > 1) for kind, m in pruned.items()},
             "random_from_complement": _matched_complement(pruned, generator),
             "inverse": {kind: inverse(m) for kind, m in pruned.items()}}
    return {name: {kind: control.get(kind, torch.ones_like(m)).float() for kind, m in learned.items()}
            for name, control in drawn.items()}


def _matched_complement(masks: Mapping[str, torch.Tensor], generator: torch.Generator) -> dict[str, torch.Tensor]:
    """Units `masks` prune, as many as they keep, so the control is as sparse as the learned subnetwork.

    Each layer first takes as many units as the mask keeps there from its own complement; what a full layer cannot
    take goes to other layers of its kind, and what a kind's complement cannot hold to other kinds' complements,
    each time drawn uniformly from the complement units still free. Where the whole complement is smaller than the
    kept set, all of it is kept.
    """
    control = {kind: random_from_complement(m, generator=generator, redistribute=True) for kind, m in masks.items()}
    if not masks:
        return control
    taken = torch.cat([(masks[kind] + control[kind]).flatten() for kind in masks])
    missing = sum(int(m.sum()) for m in masks.values()) - sum(int(c.sum()) for c in control.values())
    extra = random_from_complement(taken, num_keep=min(missing, int((taken == 0).sum())), generator=generator)
    for kind, part in zip(masks, extra.split([m.numel() for m in masks.values()])):
        control[kind] = control[kind] + part.reshape(masks[kind].shape)
    return control


def complement_shortfall(masks: Mapping[str, torch.Tensor], control: Mapping[str, torch.Tensor],
                         pruned_kinds: Sequence[str]) -> str | None:
    """The note (and warning) of a complement control that keeps fewer units than the learned mask."""
    kept = sum(int(masks[kind].sum()) for kind in pruned_kinds)
    pruned = sum(masks[kind].numel() for kind in pruned_kinds) - kept
    if sum(int(control[kind].sum()) for kind in pruned_kinds) >= kept:
        return None
    return (f"The learned subnetwork keeps more units than it prunes ({kept} kept, {pruned} pruned), so this control "
            "keeps the whole complement and is sparser than the learned subnetwork.")


def complement_mix(masks: Mapping[str, torch.Tensor], control: Mapping[str, torch.Tensor],
                   pruned_kinds: Sequence[str]) -> str | None:
    """The note of a complement control with as many units as the learned mask in another mix of kinds."""
    if sum(int(control[kind].sum()) for kind in pruned_kinds) != sum(int(masks[kind].sum()) for kind in pruned_kinds):
        return None
    mix = [f"{kind}: {int(masks[kind].sum())} kept, {int(control[kind].sum())} drawn" for kind in pruned_kinds
           if int(control[kind].sum()) != int(masks[kind].sum())]
    if not mix:
        return None
    return (f"The units come in another mix of kinds than the learned subnetwork's ({'; '.join(mix)}): where the "
            "complement of a kind was smaller than what the learned subnetwork keeps of it, the rest was drawn from "
            "other kinds' complements.")


def _run_controls(model: PrunableModel, runs_dir: Path, eval_sets: Mapping[str, Any], sparsities: Sequence[float],
                  seeds: Sequence[int], control_seed: int, cache: dict, eval_kwargs: dict) -> None:
    """Evaluate the control subnetworks of the first seed's mask at each sparsity (resumable like the runs)."""
    kinds = model.enabled_kinds()
    for sparsity in sparsities:
        learned = read_masks(runs_dir / run_name(float(sparsity), int(seeds[0])))
        generator = torch.Generator().manual_seed(int(control_seed))
        for kind, control in control_masks(learned, kinds, generator).items():
            folder = runs_dir / CONTROLS_DIR / f"{sparsity_tag(float(sparsity))}-{kind}"
            if (folder / RESULT_NAME).is_file():
                continue
            folder.mkdir(parents=True, exist_ok=True)
            note = None
            if kind == "random_from_complement":
                short = complement_shortfall(learned, control, kinds)
                if short:
                    logger.warning("%s: %s", folder.name, short)
                note = short or complement_mix(learned, control, kinds)
            evaluation = evaluate_subnetwork(model, eval_sets, masks=control, full_model_cache=cache, **eval_kwargs)
            report = model.sparsity_report(control)
            write_json(folder / RESULT_NAME, {
                "run": folder.name, "control": kind, "sparsity": float(sparsity), "source_seed": int(seeds[0]),
                "realized_sparsity": report["sparsity"], "units_kept": report["units_kept"],
                "units_total": report["units_total"], "eval": evaluation,
                "masks": {k: m.int().tolist() for k, m in control.items()}, **({"note": note} if note else {})})
