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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch

from ..artifacts import MASKS_NAME, read_artifact
from ..config import CONFIG_NAME, PruningConfig
from ..data.spec import datasets_from_spec
from ..evaluation.options import EvaluationOptions
from ..evaluation.subnetwork import evaluate_subnetwork
from ..model import PrunableModel
from ..run_folder import check_writable, claim_output_dir
from ..training.arguments import PruningArguments
from ..verdicts import verdict_status
from ..training.fingerprint import base_model_path, data_fingerprint
from ..training.setup import PER_RUN_ARGUMENTS, PruningSetup
from ..training.trainer import PruningTrainer
from .ablation_table import AblationTable, ablation_table
from .mask_stats import inverse, random_from_complement, random_like
from .results import (CONTROLS_DIR, FULL_MODEL_NAME, MANIFEST_NAME, RESULT_NAME, PruneManyResult, collect_results,
                      read_json, write_json, write_results)
from .units import read_masks, run_name, sparsity_tag
from ..batching import PadCollator

logger = logging.getLogger(__name__)

# `hf_heuristic_core` resolves these public names through this module (its `_EXPORTS`), so they are imported here.
__all__ = ["AblationTable", "EvaluationOptions", "PruneManyResult", "PruningSetup", "SeriesOptions", "ablation_table",
           "complement_mix", "complement_shortfall", "control_masks", "datasets_from_spec", "prune_many",
           "prune_many_inputs"]

RESERVED_OVERRIDES = PER_RUN_ARGUMENTS


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
    return PadCollator(getattr(model.config, "pad_token_id", None) or 0)


# What makes two prune_many calls the same series of runs (sparsities and seeds may be added later).
IDENTITY_KEYS = ("model", "model_class", "pruning_config", "pruning_overrides", "data", "means_examples",
                 "collapse_to_entailment", "entailment_id", "controls", "control_seed")


def _identity(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """The manifest's identity keys, local model folders as absolute paths (a relative path and its absolute form
    name the same model)."""
    identity = {key: manifest.get(key) for key in IDENTITY_KEYS if key in manifest}
    identity["model"] = base_model_path(identity.get("model"))
    if isinstance(identity.get("pruning_config"), dict):
        config = {k: v for k, v in identity["pruning_config"].items() if k != "extra"}
        config["base_model_name_or_path"] = base_model_path(config.get("base_model_name_or_path"))
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


@dataclass
class SeriesOptions:
    """What else a series of runs needs besides the pruning and evaluation settings: the training `data_collator`
    (or a `tokenizer` to pad with), `model_kwargs` for loading a path, the control subnetworks (`controls`,
    `control_seed`), the `data_spec` recorded for `analyze`, and `overwrite_output_dir`."""

    data_collator: Any = None
    tokenizer: Any = None
    model_kwargs: Mapping[str, Any] | None = None
    controls: bool = True
    control_seed: int = 0
    data_spec: Mapping[str, Any] | None = None
    overwrite_output_dir: bool = False


# The old keyword form: each keyword and (object, field) that now carries it.
PRUNE_MANY_KEYWORDS = {
    "pruning_config": ("pruning", "config"), "pruning_overrides": ("pruning", "overrides"),
    "means_examples": ("pruning", "means_examples"), "show_progress": ("pruning", "show_progress"),
    "eval_batch_size": ("evaluation", "batch_size"), "collapse_to_entailment": ("evaluation", "collapse_to_entailment"),
    "entailment_id": ("evaluation", "entailment_id"),
    **{name: ("options", name) for name in ("data_collator", "tokenizer", "model_kwargs", "controls", "control_seed",
                                            "data_spec", "overwrite_output_dir")},
}


def prune_many_inputs(pruning: PruningSetup | None, evaluation: EvaluationOptions | None,
                      options: SeriesOptions | None, keywords: Mapping[str, Any]
                      ) -> tuple[PruningSetup, EvaluationOptions, SeriesOptions]:
    """The settings objects of `prune_many` from the objects given and the old keywords (defaults: the old ones;
    a keyword of an object passed whole is refused, since one of the two would be ignored)."""
    unknown = sorted(set(keywords) - set(PRUNE_MANY_KEYWORDS))
    if unknown:
        raise TypeError(f"prune_many() got unexpected keyword argument(s) {unknown}.")
    given = {"pruning": pruning, "evaluation": evaluation, "options": options}
    values: dict[str, dict[str, Any]] = {"pruning": {"means_examples": 1024, "show_progress": True},
                                         "evaluation": {}, "options": {}}
    for keyword, value in keywords.items():
        owner, name = PRUNE_MANY_KEYWORDS[keyword]
        if given[owner] is not None:
            raise ValueError(f"prune_many got {owner}= and {keyword}=; set {name} in the {owner} object instead.")
        values[owner][name] = value
    return (pruning or PruningSetup(**values["pruning"]), evaluation or EvaluationOptions(**values["evaluation"]),
            options or SeriesOptions(**values["options"]))


def prune_many(model: str | os.PathLike | PrunableModel, train_dataset: Any, eval_sets: Mapping[str, Any],
               runs_dir: str | os.PathLike, sparsities: Sequence[float], seeds: Sequence[int], *,
               pruning: PruningSetup | None = None, evaluation: EvaluationOptions | None = None,
               options: SeriesOptions | None = None, **keywords: Any) -> PruneManyResult:
    """Prune `model` at every sparsity x seed, evaluate each subnetwork on every set, save masks and results.

    `model`: a path / Hub id (loaded with `pruning.config`) or a loaded `PrunableModel` (its config is used).
    `train_dataset`: tokenized training data (mean activations are computed once on its first
    `pruning.means_examples` examples unless the model already has means). `eval_sets`: `{name: tokenized dataset
    with labels}`. `pruning` (`PruningSetup`): the wrap config, `PruningArguments` fields shared by every run (target
    sparsity, seed and output_dir are set per run), means examples (default 1024), progress bars (default on).
    `evaluation` (`EvaluationOptions`): batch size and label collapse. `options` (`SeriesOptions`): collator,
    controls, data spec, overwrite. The old keywords (``pruning_overrides=``, ``eval_batch_size=``,
    ``controls=``, ...) still work (`prune_many_inputs`).

    `data_spec`: how the data was built (see `datasets_from_spec`), recorded in manifest.json so that `analyze`
    can rebuild the evaluation sets. Finished runs (artifact + result.json) are skipped; a run whose artifact exists
    but whose evaluation did not finish is evaluated from the artifact without re-training. `controls`: also
    evaluate the control subnetworks (random with the same per-layer counts, random from the complement with as
    many units, inverse) of the first seed's mask at each sparsity; see `control_masks`. `runs_dir` must be new,
    empty or a runs folder of the same model, settings and data (more sparsities and seeds may be added); another
    one is refused unless `overwrite_output_dir` (see `run_folder`), and two calls into one folder at once are
    refused (a lock).
    """
    pruning, evaluation, options = prune_many_inputs(pruning, evaluation, options, keywords)
    if not eval_sets:
        raise ValueError("prune_many needs at least one evaluation set, e.g. {'id': tokenized_dataset}.")
    if not sparsities or not seeds:
        raise ValueError("prune_many needs at least one sparsity and one seed.")
    runs_dir = Path(runs_dir)
    check_writable(runs_dir, "runs_dir")   # before the model loads
    prunable = _load_model(model, pruning.config, options.model_kwargs)
    plan = _Plan(runs_dir, [float(s) for s in sparsities], [int(s) for s in seeds])
    manifest = _manifest(model, prunable, list(eval_sets), plan, pruning, evaluation, options)
    identity = {**_identity(manifest), "train_data": data_fingerprint(train_dataset),
                "eval_data": {name: data_fingerprint(data) for name, data in eval_sets.items()}}
    with claim_output_dir(runs_dir, "prune_many", identity, overwrite=options.overwrite_output_dir,
                          legacy_settings=_legacy_identity, flag="runs_dir") as claim:
        _write_manifest(runs_dir, manifest)
        collator = options.data_collator or _default_collator(prunable, options.tokenizer)
        series = _Series(prunable, train_dataset, eval_sets, collator, pruning, evaluation)
        result = series.run(plan, options)
        claim.finish(runs=len(result.results))
    return result


@dataclass
class _Plan:
    runs_dir: Path
    sparsities: list[float]
    seeds: list[int]


def _manifest(model: Any, prunable: PrunableModel, names: list[str], plan: _Plan, pruning: PruningSetup,
              evaluation: EvaluationOptions, options: SeriesOptions) -> dict[str, Any]:
    """manifest.json: what `analyze` needs to reload the model and rebuild the data, and the series' identity."""
    model_path = str(model) if not isinstance(model, PrunableModel) else prunable.pruning_config.base_model_name_or_path
    if model_path and not os.path.isabs(model_path) and Path(model_path).is_dir():
        model_path = str(Path(model_path).resolve())   # analyze reloads it from anywhere
    return {
        "format": "hf_heuristic_core.prune_many", "format_version": 1, "model": model_path,
        "model_class": prunable.pruning_config.base_model_class,
        "pruning_config": {k: v for k, v in prunable.pruning_config.to_dict().items() if k != "extra"},
        "pruning_overrides": dict(pruning.overrides), "sparsities": plan.sparsities, "seeds": plan.seeds,
        "eval_sets": names, "data": dict(options.data_spec) if options.data_spec is not None else None,
        "means_examples": pruning.means_examples, "eval_batch_size": evaluation.batch_size,
        "collapse_to_entailment": evaluation.collapse_to_entailment, "entailment_id": evaluation.entailment_id,
        "controls": options.controls, "control_seed": options.control_seed,
    }


class _Series:
    """The runs of one `prune_many` call, in phases: the full model, each run (train or reload, then evaluate),
    the controls, the collected results."""

    def __init__(self, prunable: PrunableModel, train_dataset: Any, eval_sets: Mapping[str, Any], collator: Any,
                 pruning: PruningSetup, evaluation: EvaluationOptions) -> None:
        self.prunable, self.train_dataset, self.eval_sets, self.collator = prunable, train_dataset, eval_sets, collator
        self.pruning = pruning
        self.eval_kwargs = evaluation.evaluate_kwargs(with_collator=False)
        self.cache: dict[str, list[torch.Tensor]] = {}
        self.teacher_cache = None

    def run(self, plan: _Plan, options: SeriesOptions) -> PruneManyResult:
        self.full_model(plan.runs_dir)
        todo = [(s, seed) for s in plan.sparsities for seed in plan.seeds]
        for index, (sparsity, seed) in enumerate(todo):
            run_dir = plan.runs_dir / run_name(sparsity, seed)
            if _is_finished(run_dir):
                logger.info("[%d/%d] %s: finished earlier, skipped.", index + 1, len(todo), run_dir.name)
                continue
            logger.info("[%d/%d] %s: %s.", index + 1, len(todo), run_dir.name,
                        "artifact found, evaluating it" if _has_artifact(run_dir) else "pruning")
            self.one_run(run_dir, sparsity, seed)
        if options.controls:
            _run_controls(self.prunable, plan.runs_dir, self.eval_sets, plan.sparsities, plan.seeds,
                          options.control_seed, self.cache, self.eval_kwargs)
        result = collect_results(plan.runs_dir)
        write_results(result)
        return result

    def full_model(self, runs_dir: Path) -> dict[str, Any]:
        full_path = runs_dir / FULL_MODEL_NAME
        if full_path.is_file() and set(read_json(full_path).get("accuracy", {})) >= set(self.eval_sets):
            full = read_json(full_path)
        else:
            with self.prunable.masks_disabled():
                evaluation = evaluate_subnetwork(self.prunable, self.eval_sets, full_model_cache=self.cache,
                                                 **self.eval_kwargs)
            full = {"accuracy": {n: e.get("accuracy") for n, e in evaluation.items()},
                    "num_examples": {n: e["num_examples"] for n, e in evaluation.items()}}
            write_json(full_path, full)
        logger.info("Full model accuracy: %s", full["accuracy"])
        return full

    def one_run(self, run_dir: Path, sparsity: float, seed: int) -> None:
        started = time.time()
        if _has_artifact(run_dir):
            masks = read_masks(run_dir)
            convergence = read_artifact(run_dir).config.extra.get("convergence")
        else:
            masks, convergence = self.train(run_dir, sparsity, seed)
        prunable = self.prunable
        evaluation = evaluate_subnetwork(prunable, self.eval_sets, masks=masks, full_model_cache=self.cache,
                                         **self.eval_kwargs)
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

    def train(self, run_dir: Path, sparsity: float, seed: int) -> tuple[dict[str, torch.Tensor], Any]:
        """Learn one run's masks; the target sparsity and the seed reach `PruningArguments` as typed keywords."""
        prunable, overrides, show_progress = self.prunable, self.pruning.overrides, self.pruning.show_progress
        if not prunable.has_means and prunable.pruning_config.ablation == "mean":
            self.collect_means()
        prunable.reset_masks(seed)
        shared = {"report_to": "none", "save_strategy": "no", "disable_tqdm": not show_progress, **overrides}
        args = PruningArguments(output_dir=str(run_dir), target_sparsity=sparsity, seed=seed, **shared)
        trainer = PruningTrainer(model=prunable, args=args, train_dataset=self.train_dataset,
                                 data_collator=self.collator, teacher_cache=self.teacher_cache)
        trainer.train()
        self.teacher_cache = trainer.teacher_cache or self.teacher_cache
        masks = prunable.get_masks(binary=True)
        convergence = trainer.convergence.to_dict() if trainer.convergence is not None else None
        prunable.eval()
        return masks, convergence

    def collect_means(self) -> None:
        data, limit = self.train_dataset, self.pruning.means_examples
        if limit is not None and hasattr(data, "select"):
            data = data.select(range(min(limit, len(data))))
        self.prunable.compute_means(data, collate_fn=self.collator, show_progress=self.pruning.show_progress,
                                    keep_dropout=bool(self.pruning.overrides.get("keep_dropout", False)))


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
