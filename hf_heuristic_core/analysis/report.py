"""`analyze(runs_dir)`: the heuristic-core report of a `prune_many` runs folder.

Mask statistics and the accuracy figures need only the saved artifacts and result files, so they work anywhere,
long after the runs. The ablation table and the attention patterns need the model and the evaluation data: they
are reloaded from what `manifest.json` records (model path, data spec), or passed in, or skipped.

Writes `report.md`, `report.json` and the figures (PNG + PDF) into `runs_dir/report/`.
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch

from ..artifacts import read_artifact
from ..data.spec import MissingDataSpecError, eval_sets_from_spec
from ..errors import ArtifactError, UsageError
from ..evaluation.options import EvaluationOptions
from ..io_utils import atomic_write_text
from ..tokenizer_loading import load_tokenizer
from .ablation_table import AblationOptions, ablation_table
from .markdown import render_markdown
from .report_settings import AnalyzeSettings
from .results import CONTROLS_DIR, MANIFEST_NAME, collect_results, faithfulness, read_json, write_json
from .statistics import load_run_masks, mask_statistics
from .subtask_report import read_subtask_declaration, subtask_markdown, subtask_section
from .units import BLOCK_KIND, HEAD_KIND, parse_unit, run_name, sparsity_tag, unit_kind, unit_label
from .. import plotting
from ..circuits.report import circuit_markdown, circuit_section, runs_curves
from ..config import PruningConfig
from ..model import PrunableModel
from .attention_patterns import collect_attention_shares, plot_head_examples

logger = logging.getLogger(__name__)

__all__ = ["AnalyzeSettings", "analyze", "mask_statistics", "render_markdown"]

REPORT_DIR = "report"


# --------------------------------------------------------------------------------------------------------------------
# Model-dependent parts: reloading, ablation table, attention patterns
# --------------------------------------------------------------------------------------------------------------------


class _Unavailable(Exception):
    """A model-dependent section cannot run with what was recorded or passed; it is skipped with this reason."""


def _pick_core(stats: Mapping[str, Any], core_sparsity: float | None) -> tuple[float, list[Any]]:
    """The sparsity whose core drives ablation and attention: the given one, else the highest with a non-empty
    core (the most selective), else the highest."""
    entries = sorted(stats["per_sparsity"].values(), key=lambda e: e["sparsity"])
    if core_sparsity is not None:
        chosen = [e for e in entries if math.isclose(e["sparsity"], core_sparsity, abs_tol=1e-9)]
        if not chosen:
            raise ValueError(f"core_sparsity={core_sparsity} is not among the runs' sparsities "
                             f"{[e['sparsity'] for e in entries]}.")
        entry = chosen[0]
    else:
        entry = next((e for e in reversed(entries) if e["core"][HEAD_KIND] or e["core"][BLOCK_KIND]), entries[-1])
    return entry["sparsity"], [parse_unit(u) for u in entry["core"][HEAD_KIND] + (entry["core"][BLOCK_KIND] or [])]


def _load_model(manifest: Mapping[str, Any], path: str | None) -> Any:
    """The model named by `path` or manifest.json, with the pruning settings of the runs and eager attention."""
    path = path or manifest.get("model")
    if not path:
        raise _Unavailable("manifest.json names no model; pass model= (or --model)")
    settings = {**(manifest.get("pruning_config") or {}), "num_layers": None, "head_dim": None, "hidden_size": None,
                "base_model_name_or_path": None, "base_model_revision": None, "base_model_class": None,
                "base_model_gguf_file": None}
    return PrunableModel.from_pretrained(path, PruningConfig.from_dict(settings), attn_implementation="eager")


def _install_means(model: Any, runs_dir: Path, run: str) -> None:
    """Mean ablation uses the means the runs were pruned with (saved in every artifact)."""
    if getattr(model, "has_means", True):
        return
    artifact = read_artifact(runs_dir / run)
    if "means.heads" in artifact.tensors and "means.mlps" in artifact.tensors:
        model.set_means(artifact.tensors["means.heads"], artifact.tensors["means.mlps"])


def _load_tokenizer(manifest: Mapping[str, Any], model_path: str | None) -> Any:
    data = manifest.get("data") or {}
    source = model_path or data.get("tokenizer") or manifest.get("model")
    if not source:
        raise _Unavailable("no tokenizer recorded; pass tokenizer=")
    try:
        return load_tokenizer(source, "model=" if model_path else "the manifest's model")
    except UsageError as reason:   # a folder without a tokenizer: skipped with the reason, never read as [UNK]s
        raise _Unavailable(f"{reason} Or pass tokenizer=.") from None


def _load_eval_sets(manifest: Mapping[str, Any], tokenizer: Any) -> dict[str, Any]:
    try:
        return eval_sets_from_spec(manifest.get("data"), tokenizer)
    except MissingDataSpecError as reason:
        raise _Unavailable(str(reason)) from None


def _attention_section(model: Any, tokenizer: Any, eval_sets: Mapping[str, Any], core_heads: Sequence[tuple],
                       frequency: Sequence[Sequence[int]], attention_set: str | None, max_examples: int,
                       heatmaps: int, report_dir: Path, batch_size: int) -> dict[str, Any]:
    name = attention_set or next((n for n in eval_sets if "ood" in n.lower()), next(iter(eval_sets)))
    if name not in eval_sets:
        raise ValueError(f"attention_set {name!r} is not an evaluation set ({list(eval_sets)}).")
    heads = [tuple(u) for u in core_heads]
    note = None
    if not heads:
        freq = torch.tensor(frequency)
        order = torch.argsort(freq.flatten(), descending=True, stable=True)[:3].tolist()
        heads = [divmod(i, freq.shape[1]) for i in order]
        note = "The core has no heads; showing the three most frequent heads instead."
    shares = collect_attention_shares(model, eval_sets[name], special_ids=tokenizer.all_special_ids,
                                      sep_id=tokenizer.sep_token_id, max_examples=max_examples,
                                      batch_size=batch_size)
    others = [(l, h) for l in range(shares.shares.shape[0]) for h in range(shares.shares.shape[1])
              if (l, h) not in heads]
    rows = shares.rows(heads)
    if others:
        rows.append(shares.mean_row(others, f"mean of {len(others)} other heads"))
    example = eval_sets[name][0]
    figures = plot_head_examples(model, tokenizer, example, heads[:heatmaps], report_dir) if heatmaps else []
    return {"eval_set": name, "rows": rows, "uniform": shares.uniform, "num_examples": shares.num_examples,
            "num_queries": shares.num_queries, "causal": shares.causal, "all_heads": shares.to_dict(),
            "figures": [p.name for p in figures], "note": note}


# --------------------------------------------------------------------------------------------------------------------
# Figures
# --------------------------------------------------------------------------------------------------------------------


def _figures(report_dir: Path, stats: Mapping[str, Any], rows: Sequence[Mapping[str, Any]],
             full: Mapping[str, float], cases: Sequence[str], show_mlps: bool) -> dict[str, str]:
    made: dict[str, str] = {}

    def keep(key: str, fig: Any, stem: str) -> None:
        fig.clear()
        made[key] = f"{stem}.png"

    for tag, entry in stats["per_sparsity"].items():
        stem = f"mask_grid_{tag}"
        fig = plotting.plot_mask_grid(entry["head_frequency"], num_masks=entry["num_masks"],
                                      title=f"Head frequency at {entry['sparsity']:.0%} sparsity "
                                            f"({entry['num_masks']} seeds)",
                                      mlp=entry["mlp_frequency"] if show_mlps else None, path=report_dir / stem)
        keep(stem, fig, stem)
    for entry in stats["spearman"]:
        stem = f"joint_frequency_{sparsity_tag(entry['sparsity_a'])}_{sparsity_tag(entry['sparsity_b'])}"
        fig = plotting.plot_joint_frequency(entry["joint_frequency"], f"{entry['sparsity_a']:.0%} sparsity",
                                            f"{entry['sparsity_b']:.0%} sparsity", rho=entry.get("rho"),
                                            p_value=entry.get("p_value"), path=report_dir / stem)
        keep(stem, fig, stem)
    cases = [c for c in cases if any(r.get(c) is not None for r in rows)]
    if cases and rows:
        fig = plotting.plot_accuracy_vs_sparsity(rows, full, cases=cases, path=report_dir / "accuracy_vs_sparsity")
        keep("accuracy_vs_sparsity", fig, "accuracy_vs_sparsity")
        fig = plotting.plot_subnetwork_accuracies(rows, full, cases=cases, kind="strip",
                                                  path=report_dir / "subnetwork_accuracies")
        keep("subnetwork_accuracies", fig, "subnetwork_accuracies")
    return made


# --------------------------------------------------------------------------------------------------------------------
# analyze
# --------------------------------------------------------------------------------------------------------------------


def analyze(runs_dir: str | os.PathLike, settings: AnalyzeSettings | None = None, **keywords: Any) -> dict[str, Any]:
    """Build the report of a `prune_many` runs folder; returns what `report.json` holds.

    `settings` (`AnalyzeSettings`) carries every option below; the old keyword form (``analyze(runs_dir,
    ablation=False, core_sparsity=0.5, ...)``) fills one in. The work runs in phases: collect (result files,
    masks, statistics), load (model and data, or skip), compute (ablation table, attention, subtasks, circuits),
    draw (figures, report.md / report.json).

    Sections: accuracy per evaluation set (min / max / mean / std over seeds vs the full model), head frequency
    per sparsity, the core with its chance size, Spearman's rho between sparsities, IoU / IoMin between seeds,
    control subnetworks, and (with a model) the ablation table and the attention patterns of core heads.

    The core that drives the ablation table and the attention section is the one at `core_sparsity` (default: the
    highest sparsity with a non-empty core). `ablation_units` overrides the units ablated one at a time (default:
    the core, the first `max_core_units` of it if given); `joint` the groups ablated together (default: those units
    together); `non_core_sample` how many non-core heads are averaged (default: all). `model` (a path or a loaded
    `PrunableModel`), `tokenizer` and `eval_sets` override what manifest.json records; `ablation=False` /
    `attention=False` skip those sections.

    Subtask masks (weight, neuron or unit masks each trained on one subtask's data) are declared in
    `runs_dir/subtasks.json` or by `subtasks` (name -> mask folder; see `analysis.subtask_report`): the report then
    adds their per-layer IoU / IoMin, shared fractions and sharing figure, and with recorded accuracies the
    performance-drop table and specialization scores. A folder holding only subtask masks gets only that section.

    A runs folder whose manifest plans runs that have no result yet (an interrupted prune_many) is refused, since
    its statistics would silently cover fewer seeds: finish it (run prune_many again) or pass
    `allow_unfinished=True`, and the report lists what is missing.
    Circuits (`hf_heuristic_core.circuits`): `RUNS_DIR/circuits/curves.json` (MIB faithfulness curves, written by
    `hf-heuristic-core circuit faithfulness --runs_dir RUNS_DIR`) adds a section with CPR, CMD and f per circuit size;
    `circuits=True` computes that file first, on the first evaluation set, with every run's logits as a ranking.
    """
    settings = AnalyzeSettings.from_keywords(settings, keywords)
    runs_dir = Path(runs_dir)
    report_dir = Path(settings.output_dir) if settings.output_dir is not None else runs_dir / REPORT_DIR
    report_dir.mkdir(parents=True, exist_ok=True)
    collected = _collect(runs_dir, settings)
    if collected is None:   # only subtask masks
        return _subtask_only_report(runs_dir, report_dir, read_subtask_declaration(runs_dir, settings.subtasks),
                                    settings.allow_unfinished)
    report, figures = _statistics_section(runs_dir, report_dir, collected)
    loaded = _load_inputs(runs_dir, collected, settings) if settings.needs_model else {}
    batch = settings.batch_size or int(collected.manifest.get("eval_batch_size") or 32)
    if settings.ablation:
        report["ablation"] = _ablation_section(loaded, collected, settings, batch, report_dir, figures)
    if settings.attention:
        report["attention"] = _attention_of_core(loaded, collected, settings, batch, report_dir, figures)
    if collected.declaration is not None:
        report["subtasks"] = subtask_section(collected.declaration, report_dir,
                                             allow_unfinished=settings.allow_unfinished)
        figures["subtask_sharing"] = report["subtasks"].get("figure")
    return _write_report(runs_dir, report_dir, report, figures, loaded, collected, settings.circuits, batch)


@dataclass
class _Collected:
    """What the runs folder holds, read without the model."""

    manifest: dict[str, Any]
    results: Any
    declaration: Mapping[str, Any] | None
    unfinished: list[str]
    masks: dict[float, Any]
    stats: dict[str, Any]
    core_sparsity: float
    core_units: list[Any]


def _collect(runs_dir: Path, settings: AnalyzeSettings) -> _Collected | None:
    """Phase 1: result files, masks and their statistics (None: the folder holds subtask masks only)."""
    manifest = read_json(runs_dir / MANIFEST_NAME) if (runs_dir / MANIFEST_NAME).is_file() else {}
    results = collect_results(runs_dir)
    declaration = read_subtask_declaration(runs_dir, settings.subtasks)
    if not results.results and declaration is not None:
        return None
    if not results.results:
        raise FileNotFoundError(f"{runs_dir} holds no finished runs (sp*-seed*/result.json); run prune_many first.")
    unfinished = unfinished_runs(runs_dir, manifest, results.results)
    if unfinished and not settings.allow_unfinished:
        raise ArtifactError(f"{runs_dir} is unfinished: {len(unfinished)} planned runs have no result yet "
                            f"({', '.join(unfinished[:6])}{' ...' if len(unfinished) > 6 else ''}), so the report "
                            "would cover fewer seeds than the folder promises. Run prune_many (or the study) again "
                            "to finish them, or pass allow_unfinished=True (--allow_unfinished) to report on the "
                            "finished runs only.")
    masks = load_run_masks(runs_dir, results.results)
    stats = mask_statistics(masks)
    chosen_sparsity, core_units = _pick_core(stats, settings.core_sparsity)
    return _Collected(manifest, results, declaration, unfinished, masks, stats, chosen_sparsity, core_units)


def _statistics_section(runs_dir: Path, report_dir: Path, collected: _Collected
                        ) -> tuple[dict[str, Any], dict[str, Any]]:
    """Phase 2 (no model): the report's accuracy, statistics and core entries, and their figures."""
    results, masks, names = collected.results, collected.masks, collected.results.eval_sets
    show_mlps = all(r["prune_mlps"] for runs in masks.values() for r in runs)
    figures = _figures(report_dir, collected.stats, results.results, results.full_model, names, show_mlps)
    report: dict[str, Any] = {
        "runs_dir": str(runs_dir), "model": collected.manifest.get("model"), "eval_sets": names,
        "sparsities": sorted(masks), "seeds": sorted({r["seed"] for r in results.results}),
        "full_model": results.full_model, "summary": results.summary,
        "faithfulness": faithfulness(results.results, names),
        "results": results.results, "controls": _note_short_controls(results.results, results.controls, runs_dir),
        "mask_statistics": collected.stats, "not_converged": _flagged(results.results, "not_converged"),
        "inconclusive": _flagged(results.results, "inconclusive"), "verdicts": _verdict_counts(results.results),
        "unfinished": collected.unfinished,
    }
    report["core_sparsity"] = collected.core_sparsity
    report["core_units"] = [unit_label(u) for u in collected.core_units]
    return report, figures


def _load_inputs(runs_dir: Path, collected: _Collected, settings: AnalyzeSettings) -> dict[str, Any]:
    """Phase 3: the model, tokenizer and evaluation sets (given, or as manifest.json records), or why not."""
    manifest, model = collected.manifest, settings.model
    try:
        path = str(model) if isinstance(model, (str, os.PathLike)) else None
        if model is None and not manifest.get("model"):
            raise _Unavailable("manifest.json names no model; pass model= (or --model)")
        tokenizer = settings.tokenizer if settings.tokenizer is not None else _load_tokenizer(manifest, path)
        eval_sets = dict(settings.eval_sets) if settings.eval_sets is not None else _load_eval_sets(manifest,
                                                                                                    tokenizer)
        prunable = model if model is not None and path is None else _load_model(manifest, path)
        _install_means(prunable, runs_dir, collected.results.results[0]["run"])
        if settings.device:
            prunable.to(settings.device)
        return {"tokenizer": tokenizer, "eval_sets": eval_sets, "model": prunable.eval()}
    except _Unavailable as reason:
        logger.warning("Skipping the ablation table and attention patterns: %s", reason)
        return {"skipped": str(reason)}


def _ablation_section(loaded: Mapping[str, Any], collected: _Collected, settings: AnalyzeSettings, batch: int,
                      report_dir: Path, figures: dict[str, Any]) -> dict[str, Any]:
    """Phase 4a: the ablation table of the core (or of the units asked for)."""
    if "model" not in loaded:
        return {"skipped": loaded.get("skipped")}
    core_units = collected.core_units
    units = [parse_unit(u) for u in settings.ablation_units] if settings.ablation_units is not None else core_units
    if settings.max_core_units is not None and settings.ablation_units is None:
        units = units[:settings.max_core_units]
    if not units:
        return {"skipped": f"the core at {collected.core_sparsity:.0%} sparsity is empty; pass "
                           "ablation_units= to choose units"}
    manifest = collected.manifest
    options = AblationOptions(core=core_units, joint=settings.joint, non_core_sample=settings.non_core_sample,
                              mode=settings.ablation_mode, seed=settings.seed, show_progress=settings.show_progress)
    evaluation = EvaluationOptions(batch_size=batch, entailment_id=int(manifest.get("entailment_id", 0)),
                                   collapse_to_entailment=manifest.get("collapse_to_entailment", "auto"))
    table = ablation_table(loaded["model"], loaded["eval_sets"], units, options=options, evaluation=evaluation)
    from ..plotting import plot_ablation_table   # matplotlib: only when a table is drawn
    plot_ablation_table(table.plot_table(), path=report_dir / "ablation_table").clear()
    figures["ablation_table"] = "ablation_table.png"
    return table.to_dict()


def _attention_of_core(loaded: Mapping[str, Any], collected: _Collected, settings: AnalyzeSettings, batch: int,
                       report_dir: Path, figures: dict[str, Any]) -> dict[str, Any]:
    """Phase 4b: attention patterns of the core's heads."""
    if "model" not in loaded:
        return {"skipped": loaded.get("skipped")}
    core_heads = [u for u in collected.core_units if unit_kind(u) == HEAD_KIND]
    frequency = collected.stats["per_sparsity"][sparsity_tag(collected.core_sparsity)]["head_frequency"]
    section = _attention_section(loaded["model"], loaded["tokenizer"], loaded["eval_sets"], core_heads, frequency,
                                 settings.attention_set, settings.attention_examples, settings.heatmaps,
                                 report_dir, min(batch, 16))
    for name in section["figures"]:
        figures[Path(name).stem] = name
    return section


def _write_report(runs_dir: Path, report_dir: Path, report: dict[str, Any], figures: dict[str, Any],
                  loaded: Mapping[str, Any], collected: _Collected, circuits: bool, batch: int) -> dict[str, Any]:
    """Phase 5: the circuits section (computed first with `circuits`), then report.json and report.md."""
    if circuits and "model" not in loaded:
        logger.warning("Skipping the circuit faithfulness curves: %s", loaded.get("skipped"))
    elif circuits:
        first = next(iter(loaded["eval_sets"]))
        runs_curves(runs_dir, collected.results.results, loaded["model"], loaded["eval_sets"][first], first,
                    batch_size=min(batch, 16))
    if (section := circuit_section(runs_dir, report_dir)) is not None:
        report["circuits"] = section
        figures["faithfulness_curves"] = section["figure"]
    report["figures"] = {k: v for k, v in figures.items() if v}
    write_json(report_dir / "report.json", report)
    atomic_write_text(report_dir / "report.md", render_markdown(report) + "\n".join(circuit_markdown(section)))
    logger.info("Report written to %s", report_dir / "report.md")
    return report


def _subtask_only_report(runs_dir: Path, report_dir: Path, declaration: Mapping[str, Any],
                         allow_unfinished: bool = False) -> dict[str, Any]:
    """A folder of subtask masks without unit pruning runs: report.md / report.json with the subtask section only."""
    section = subtask_section(declaration, report_dir, allow_unfinished=allow_unfinished)
    report = {"runs_dir": str(runs_dir), "results": [], "summary": [], "subtasks": section,
              "figures": {"subtask_sharing": section["figure"]} if section.get("figure") else {}}
    write_json(report_dir / "report.json", report)
    atomic_write_text(report_dir / "report.md", "\n".join([f"# Subtask report: `{runs_dir}`", "",
                                                           *subtask_markdown(section)]))
    return report


def _not_converged(results: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return _flagged(results, "not_converged")


def _flagged(results: Sequence[Mapping[str, Any]], status: str) -> list[dict[str, Any]]:
    """Runs whose convergence check said `status` ("not_converged": no better than random subnetworks of its size;
    "inconclusive": random subnetworks of its size are as faithful, so faithfulness cannot tell): their masks are
    not evidence of anything, and the report says so at the top."""
    flagged = []
    for row in results:
        if row.get("verdict") == status:
            verdict = row.get("convergence") or status.replace("_", " ")
            flagged.append({"run": row["run"], "verdict": verdict})
            if status == "not_converged":
                logger.warning("Run %s did not converge (%s): its subnetwork is no better than random subnetworks of "
                               "its size; prune longer or with recipe='short' before reading its masks.", row["run"],
                               verdict)
            else:
                logger.warning("Run %s: the convergence check is inconclusive (%s): random subnetworks of its size "
                               "are as faithful, so its masks cannot be told from chance; prune a model trained for "
                               "this data.", row["run"], verdict)
    return flagged


def _verdict_counts(results: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    counts = {"converged": 0, "not_converged": 0, "inconclusive": 0, "not_checked": 0}
    for row in results:
        counts[row.get("verdict") or "not_checked"] += 1
    return counts


def unfinished_runs(runs_dir: Path, manifest: Mapping[str, Any], results: Sequence[Mapping[str, Any]]) -> list[str]:
    """Runs the manifest plans (sparsities x seeds) that have no result yet: prune_many stopped before them."""
    done = {row["run"] for row in results}
    planned = [run_name(float(s), int(seed)) for s in manifest.get("sparsities") or []
               for seed in manifest.get("seeds") or []]
    return [name for name in planned if name not in done]


def _note_short_controls(results: Sequence[Mapping[str, Any]], controls: Sequence[Mapping[str, Any]],
                         runs_dir: Path) -> list[dict[str, Any]]:
    """Control rows, with a note (and a warning) on complement controls that keep fewer units than their learned
    subnetwork and say nothing about it: those of runs folders written before complement controls matched the
    learned mask's size, which `prune_many` keeps when it resumes."""
    learned = {(r["sparsity"], r["seed"]): r for r in results}
    rows = []
    for control in controls:
        control = dict(control)
        source = learned.get((control["sparsity"], control.get("source_seed")), {})
        kept, wanted = control.get("units_kept"), source.get("units_kept")
        if (control.get("control") == "random_from_complement" and not control.get("note")
                and kept is not None and wanted is not None and kept < wanted):
            control["note"] = (f"it keeps {kept} units, fewer than the {wanted} of the learned subnetwork: it was "
                               "drawn by an older prune_many, which capped each layer at that layer's complement. "
                               f"Delete {runs_dir / CONTROLS_DIR / control['run']} and run prune_many again to "
                               "redraw it.")
            logger.warning("Control %s: %s", control["run"], control["note"])
        rows.append(control)
    return rows
