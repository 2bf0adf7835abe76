"""`analyze(runs_dir)`: the heuristic-core report of a `prune_many` runs folder.

Mask statistics and the accuracy figures need only the saved artifacts and result files, so they work anywhere,
long after the runs. The ablation table and the attention patterns need the model and the evaluation data: they
are reloaded from what `manifest.json` records (model path, data spec), or passed in, or skipped.

Writes `report.md`, `report.json` and the figures (PNG + PDF) into `runs_dir/report/`.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import torch

from ..data.spec import MissingDataSpecError, eval_sets_from_spec
from .prune_many import (MANIFEST_NAME, ablation_table, collect_results, parse_unit, read_json,
                       sparsity_tag, unit_label, write_json)
from ..artifacts import read_artifact
from ..io_utils import atomic_write_text
from .mask_stats import MaskStatsError, core, head_frequency, iomin, iou, joint_frequency, mlp_frequency, spearman

logger = logging.getLogger(__name__)

__all__ = ["analyze", "mask_statistics", "render_markdown"]

REPORT_DIR = "report"


# --------------------------------------------------------------------------------------------------------------------
# Mask statistics (no model needed)
# --------------------------------------------------------------------------------------------------------------------


def _load_masks(runs_dir: Path, rows: Sequence[Mapping[str, Any]]) -> dict[float, list[dict[str, Any]]]:
    """`{sparsity: [{"seed", "heads", "mlps"}, ...]}` from the run artifacts, seeds in order."""
    by_sparsity: dict[float, list[dict[str, Any]]] = {}
    for row in sorted(rows, key=lambda r: (r["sparsity"], r["seed"])):
        artifact = read_artifact(runs_dir / row["run"])
        by_sparsity.setdefault(row["sparsity"], []).append(
            {"seed": row["seed"], "heads": artifact.heads.round().long(), "mlps": artifact.mlps.round().long(),
             "prune_mlps": artifact.config.prune_mlps})
    return by_sparsity


def _pairwise(masks: Sequence[torch.Tensor]) -> dict[str, Any]:
    """IoU and IoMin of kept heads over every pair of seeds: mean, std, min, max."""
    pairs = list(itertools.combinations(range(len(masks)), 2))
    if not pairs:
        return {"num_pairs": 0}
    out: dict[str, Any] = {"num_pairs": len(pairs)}
    for name, fn in (("iou", iou), ("iomin", iomin)):
        values = np.array([fn(masks[i], masks[j]) for i, j in pairs], dtype=float)
        out[name] = {"mean": float(values.mean()), "std": float(values.std()), "min": float(values.min()),
                     "max": float(values.max())}
    return out


def mask_statistics(masks: Mapping[float, Sequence[Mapping[str, Any]]]) -> dict[str, Any]:
    """Head frequency, the core with its chance size, IoU / IoMin between seeds per sparsity, and Spearman's rho
    (with the joint frequency matrix) for every pair of sparsities. Heads follow the paper's definitions (the
    chance size `N (1 - s)^k` uses N heads and the mean realized head sparsity s); MLP blocks are listed
    alongside (their frequency and the core MLPs; `None` when the runs did not prune MLP blocks)."""
    per_sparsity: dict[str, Any] = {}
    for sparsity, runs in masks.items():
        heads = [r["heads"] for r in runs]
        mlps = [r["mlps"] for r in runs]
        head_core = core(heads)
        mlps_pruned = all(r.get("prune_mlps", True) for r in runs)
        mlp_core = [unit_label(("mlp", u[0])) for u in core(mlps).units] if mlps_pruned else None
        per_sparsity[sparsity_tag(sparsity)] = {
            "sparsity": sparsity, "seeds": [r["seed"] for r in runs], "num_masks": len(runs),
            "head_frequency": head_frequency(heads).tolist(), "mlp_frequency": mlp_frequency(mlps).tolist(),
            "core": {"heads": [unit_label(u) for u in head_core.units],
                     "mlps": mlp_core,
                     "size": head_core.size, "chance_size": head_core.chance_size, "num_heads": head_core.num_units,
                     "head_sparsity": head_core.sparsity},
            "overlap": _pairwise(heads),
        }
    correlations = []
    for a, b in itertools.combinations(list(masks), 2):
        heads_a, heads_b = [r["heads"] for r in masks[a]], [r["heads"] for r in masks[b]]
        entry: dict[str, Any] = {"sparsity_a": a, "sparsity_b": b,
                                 "joint_frequency": joint_frequency(heads_a, heads_b).tolist()}
        try:
            entry["rho"], entry["p_value"] = spearman(head_frequency(heads_a), head_frequency(heads_b))
        except MaskStatsError as err:
            entry["rho"], entry["p_value"], entry["note"] = None, None, str(err)
        correlations.append(entry)
    return {"per_sparsity": per_sparsity, "spearman": correlations}


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
        entry = next((e for e in reversed(entries) if e["core"]["heads"] or e["core"]["mlps"]), entries[-1])
    return entry["sparsity"], [parse_unit(u) for u in entry["core"]["heads"] + (entry["core"]["mlps"] or [])]


def _load_model(manifest: Mapping[str, Any], path: str | None) -> Any:
    """The model named by `path` or manifest.json, with the pruning settings of the runs and eager attention."""
    from ..config import PruningConfig
    from ..model import PrunableModel
    path = path or manifest.get("model")
    if not path:
        raise _Unavailable("manifest.json names no model; pass model= (or --model)")
    settings = {**(manifest.get("pruning_config") or {}), "num_layers": None, "head_dim": None, "hidden_size": None,
                "base_model_name_or_path": None, "base_model_revision": None, "base_model_class": None}
    return PrunableModel.from_pretrained(path, PruningConfig.from_dict(settings), attn_implementation="eager")


def _install_means(model: Any, runs_dir: Path, run: str) -> None:
    """Mean ablation uses the means the runs were pruned with (saved in every artifact)."""
    if getattr(model, "has_means", True):
        return
    artifact = read_artifact(runs_dir / run)
    if "means.heads" in artifact.tensors and "means.mlps" in artifact.tensors:
        model.set_means(artifact.tensors["means.heads"], artifact.tensors["means.mlps"])


def _load_tokenizer(manifest: Mapping[str, Any], model_path: str | None) -> Any:
    from transformers import AutoTokenizer
    data = manifest.get("data") or {}
    source = model_path or data.get("tokenizer") or manifest.get("model")
    if not source:
        raise _Unavailable("no tokenizer recorded; pass tokenizer=")
    return AutoTokenizer.from_pretrained(source)


def _load_eval_sets(manifest: Mapping[str, Any], tokenizer: Any) -> dict[str, Any]:
    try:
        return eval_sets_from_spec(manifest.get("data"), tokenizer)
    except MissingDataSpecError as reason:
        raise _Unavailable(str(reason)) from None


def _attention_section(model: Any, tokenizer: Any, eval_sets: Mapping[str, Any], core_heads: Sequence[tuple],
                       frequency: Sequence[Sequence[int]], attention_set: str | None, max_examples: int,
                       heatmaps: int, report_dir: Path, batch_size: int) -> dict[str, Any]:
    from .attention_patterns import collect_attention_shares, plot_head_examples
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
    from .. import plotting
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


def analyze(runs_dir: str | os.PathLike, *, output_dir: str | os.PathLike | None = None, ablation: bool = True,
            attention: bool = True, core_sparsity: float | None = None, ablation_mode: str = "mean",
            ablation_units: Sequence[Any] | None = None, max_core_units: int | None = None,
            joint: Sequence[Sequence[Any]] | None = None, non_core_sample: int | None = None,
            attention_set: str | None = None, attention_examples: int = 128, heatmaps: int = 3,
            model: str | os.PathLike | Any = None, tokenizer: Any = None, eval_sets: Mapping[str, Any] | None = None,
            batch_size: int | None = None, seed: int = 0, device: str | None = None,
            show_progress: bool = True) -> dict[str, Any]:
    """Build the report of a `prune_many` runs folder; returns what `report.json` holds.

    Sections: accuracy per evaluation set (min / max / mean / std over seeds vs the full model), head frequency
    per sparsity, the core with its chance size, Spearman's rho between sparsities, IoU / IoMin between seeds,
    control subnetworks, and (with a model) the ablation table and the attention patterns of core heads.

    The core that drives the ablation table and the attention section is the one at `core_sparsity` (default: the
    highest sparsity with a non-empty core). `ablation_units` overrides the units ablated one at a time (default:
    the core, the first `max_core_units` of it if given); `joint` the groups ablated together (default: those units
    together); `non_core_sample` how many non-core heads are averaged (default: all). `model` (a path or a loaded
    `PrunableModel`), `tokenizer` and `eval_sets` override what manifest.json records; `ablation=False` /
    `attention=False` skip those sections.
    """
    runs_dir = Path(runs_dir)
    report_dir = Path(output_dir) if output_dir is not None else runs_dir / REPORT_DIR
    report_dir.mkdir(parents=True, exist_ok=True)
    manifest = read_json(runs_dir / MANIFEST_NAME) if (runs_dir / MANIFEST_NAME).is_file() else {}
    results = collect_results(runs_dir)
    if not results.results:
        raise FileNotFoundError(f"{runs_dir} holds no finished runs (sp*-seed*/result.json); run prune_many first.")
    names = results.eval_sets
    masks = _load_masks(runs_dir, results.results)
    stats = mask_statistics(masks)
    chosen_sparsity, core_units = _pick_core(stats, core_sparsity)
    show_mlps = all(r["prune_mlps"] for runs in masks.values() for r in runs)
    figures = _figures(report_dir, stats, results.results, results.full_model, names, show_mlps)
    report: dict[str, Any] = {
        "runs_dir": str(runs_dir), "model": manifest.get("model"), "eval_sets": names,
        "sparsities": sorted(masks), "seeds": sorted({r["seed"] for r in results.results}),
        "full_model": results.full_model, "summary": results.summary, "faithfulness": _faithfulness(results.results,
                                                                                                    names),
        "results": results.results, "controls": results.controls, "mask_statistics": stats,
    }
    report["core_sparsity"] = chosen_sparsity
    report["core_units"] = [unit_label(u) for u in core_units]

    need_model = ablation or attention
    loaded: dict[str, Any] = {}
    if need_model:
        try:
            path = str(model) if isinstance(model, (str, os.PathLike)) else None
            if model is None and not manifest.get("model"):
                raise _Unavailable("manifest.json names no model; pass model= (or --model)")
            loaded["tokenizer"] = tokenizer if tokenizer is not None else _load_tokenizer(manifest, path)
            loaded["eval_sets"] = dict(eval_sets) if eval_sets is not None else _load_eval_sets(manifest,
                                                                                               loaded["tokenizer"])
            prunable = model if model is not None and path is None else _load_model(manifest, path)
            _install_means(prunable, runs_dir, results.results[0]["run"])
            if device:
                prunable.to(device)
            loaded["model"] = prunable.eval()
        except _Unavailable as reason:
            logger.warning("Skipping the ablation table and attention patterns: %s", reason)
            loaded = {"skipped": str(reason)}
    batch = batch_size or int(manifest.get("eval_batch_size") or 32)

    if ablation and "model" in loaded:
        units = [parse_unit(u) for u in ablation_units] if ablation_units is not None else core_units
        if max_core_units is not None and ablation_units is None:
            units = units[:max_core_units]
        if units:
            table = ablation_table(loaded["model"], loaded["eval_sets"], units, core=core_units,
                                   joint=joint, non_core_sample=non_core_sample, mode=ablation_mode, seed=seed,
                                   batch_size=batch, entailment_id=int(manifest.get("entailment_id", 0)),
                                   collapse_to_entailment=manifest.get("collapse_to_entailment", "auto"),
                                   show_progress=show_progress)
            report["ablation"] = table.to_dict()
            from ..plotting import plot_ablation_table
            plot_ablation_table(table.plot_table(), path=report_dir / "ablation_table").clear()
            figures["ablation_table"] = "ablation_table.png"
        else:
            report["ablation"] = {"skipped": f"the core at {chosen_sparsity:.0%} sparsity is empty; pass "
                                             "ablation_units= to choose units"}
    elif ablation:
        report["ablation"] = {"skipped": loaded.get("skipped")}
    if attention and "model" in loaded:
        core_heads = [u for u in core_units if u[0] != "mlp"]
        frequency = stats["per_sparsity"][sparsity_tag(chosen_sparsity)]["head_frequency"]
        report["attention"] = _attention_section(loaded["model"], loaded["tokenizer"], loaded["eval_sets"],
                                                 core_heads, frequency, attention_set, attention_examples, heatmaps,
                                                 report_dir, min(batch, 16))
        for name in report["attention"]["figures"]:
            figures[Path(name).stem] = name
    elif attention:
        report["attention"] = {"skipped": loaded.get("skipped")}
    report["figures"] = figures
    write_json(report_dir / "report.json", report)
    atomic_write_text(report_dir / "report.md", render_markdown(report))
    logger.info("Report written to %s", report_dir / "report.md")
    return report


def _faithfulness(rows: Sequence[Mapping[str, Any]], names: Sequence[str]) -> list[dict[str, Any]]:
    """Mean agreement with the full model and mean KL to it, per sparsity and evaluation set."""
    out = []
    for sparsity in sorted({r["sparsity"] for r in rows}):
        group = [r for r in rows if r["sparsity"] == sparsity]
        for name in names:
            agreement = [r[f"agreement/{name}"] for r in group if r.get(f"agreement/{name}") is not None]
            kl = [r[f"kl/{name}"] for r in group if r.get(f"kl/{name}") is not None]
            if agreement:
                out.append({"sparsity": sparsity, "eval_set": name, "agreement": float(np.mean(agreement)),
                            "kl": float(np.mean(kl)) if kl else None})
    return out


# --------------------------------------------------------------------------------------------------------------------
# Markdown
# --------------------------------------------------------------------------------------------------------------------


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join("–" if v is None else str(v) for v in row) + " |" for row in rows]
    return lines + [""]


def _pct(value: Any, digits: int = 1) -> str | None:
    return None if value is None else f"{100 * value:.{digits}f}"


def _delta(value: Any) -> str | None:
    return None if value is None else f"{100 * value:+.1f}"


def _spread(values: Mapping[str, float]) -> str:
    return f"{values['mean']:.3f} ± {values['std']:.3f} ({values['min']:.3f}–{values['max']:.3f})"


def _image(figures: Mapping[str, str], key: str, alt: str) -> list[str]:
    return [f"![{alt}]({figures[key]})", ""] if key in figures else []


def render_markdown(report: Mapping[str, Any]) -> str:
    """report.md: every table of the report, with the figures inline (paths relative to the report folder)."""
    names, figures, full = report["eval_sets"], report["figures"], report["full_model"]
    stats = report["mask_statistics"]
    lines = [f"# Heuristic-core report: `{report.get('model') or report['runs_dir']}`", "",
             f"{len(report['results'])} subnetworks: sparsities "
             f"{', '.join(f'{s:.0%}' for s in report['sparsities'])} x seeds "
             f"{', '.join(str(s) for s in report['seeds'])}. Evaluation sets: {', '.join(names)}. "
             "Accuracies and changes are in percent (points).", ""]

    lines += ["## Accuracy per evaluation set", "",
              "Subnetwork accuracy over seeds (std: population, ddof=0) next to the full model.", ""]
    lines += _table(["sparsity", "evaluation set", "full model", "min", "max", "mean", "std", "runs"],
                    [[f"{r['sparsity']:.0%}", r["eval_set"], _pct(r["full_model"]), _pct(r["min"]), _pct(r["max"]),
                      _pct(r["mean"]), _pct(r["std"]), r["num_runs"]] for r in report["summary"]])
    lines += _image(figures, "accuracy_vs_sparsity", "accuracy vs sparsity")
    lines += _image(figures, "subnetwork_accuracies", "subnetwork accuracies per evaluation set")
    lines += ["Faithfulness to the full model (mean over seeds):", ""]
    lines += _table(["sparsity", "evaluation set", "agreement", "KL"],
                    [[f"{r['sparsity']:.0%}", r["eval_set"], _pct(r["agreement"]),
                      None if r["kl"] is None else f"{r['kl']:.4f}"] for r in report["faithfulness"]])

    lines += ["## Head frequency", "", "How many seeds' subnetworks keep each head (rows: layers, columns: heads; "
              "the MLP column is the layer's MLP block, when MLP blocks were pruned).", ""]
    for tag, entry in stats["per_sparsity"].items():
        freq, mlp = entry["head_frequency"], entry["mlp_frequency"]
        with_mlp = entry["core"]["mlps"] is not None
        lines += [f"### {entry['sparsity']:.0%} sparsity ({entry['num_masks']} seeds)", ""]
        lines += _table(["layer", *[f"H{h}" for h in range(len(freq[0]))], *(["MLP"] if with_mlp else [])],
                        [[f"L{l}", *row, *([mlp[l]] if with_mlp else [])] for l, row in enumerate(freq)])
        lines += _image(figures, f"mask_grid_{tag}", f"head frequency at {entry['sparsity']:.0%}")

    lines += ["## The core", "", "Heads kept by every seed's subnetwork at one sparsity, next to the size expected "
              "if each of k subnetworks kept each of N heads independently with probability 1 - s (s: mean "
              "realized head sparsity).", ""]
    lines += _table(["sparsity", "seeds k", "heads N", "head sparsity s", "core size", "chance N(1-s)^k",
                     "core heads", "core MLPs"],
                    [[f"{e['sparsity']:.0%}", e["num_masks"], e["core"]["num_heads"],
                      f"{e['core']['head_sparsity']:.3f}", e["core"]["size"], f"{e['core']['chance_size']:.3g}",
                      ", ".join(e["core"]["heads"]) or "none",
                      "not pruned" if e["core"]["mlps"] is None else ", ".join(e["core"]["mlps"]) or "none"]
                     for e in stats["per_sparsity"].values()])

    if stats["spearman"]:
        lines += ["## Head frequency across sparsities", "",
                  "Spearman's rho between the head-frequency vectors of two sparsities (two-sided p-value).", ""]
        lines += _table(["sparsity A", "sparsity B", "rho", "p-value", "note"],
                        [[f"{e['sparsity_a']:.0%}", f"{e['sparsity_b']:.0%}",
                          None if e["rho"] is None else f"{e['rho']:.3f}",
                          None if e["p_value"] is None else f"{e['p_value']:.2g}", e.get("note", "")]
                         for e in stats["spearman"]])
        for e in stats["spearman"]:
            key = f"joint_frequency_{sparsity_tag(e['sparsity_a'])}_{sparsity_tag(e['sparsity_b'])}"
            lines += _image(figures, key, "joint head frequency")

    lines += ["## Overlap between seeds", "", "IoU and IoMin of the kept heads over every pair of seeds.", ""]
    overlap_rows = []
    for e in stats["per_sparsity"].values():
        o = e["overlap"]
        if o["num_pairs"]:
            overlap_rows.append([f"{e['sparsity']:.0%}", o["num_pairs"],
                                 *[_spread(o[m]) for m in ("iou", "iomin")]])
    if overlap_rows:
        lines += _table(["sparsity", "pairs", "IoU mean ± std (min–max)", "IoMin mean ± std (min–max)"],
                        overlap_rows)
    else:
        lines += ["One seed per sparsity: no pairs to compare.", ""]

    if report["controls"]:
        lines += ["## Control subnetworks", "", "Accuracy of the first seed's subnetwork next to random subnetworks "
                  "with the same number of heads per layer (random_like), random subnetworks drawn from the units "
                  "it prunes (random_from_complement) and its complement (inverse).", ""]
        learned = {(r["sparsity"], r["seed"]): r for r in report["results"]}
        rows = [["full model", "–", "0.00", *[_pct(full.get(n)) for n in names]]]
        for sparsity in report["sparsities"]:
            controls = [c for c in report["controls"] if c["sparsity"] == sparsity]
            if not controls:
                continue
            source = learned.get((sparsity, controls[0]["source_seed"]))
            if source:
                rows.append([f"learned (seed {source['seed']})", f"{sparsity:.0%}",
                             f"{source['realized_sparsity']:.2f}", *[_pct(source.get(n)) for n in names]])
            rows += [[c["control"], f"{sparsity:.0%}", f"{c['realized_sparsity']:.2f}",
                      *[_pct(c.get(n)) for n in names]] for c in controls]
        lines += _table(["subnetwork", "sparsity", "realized sparsity", *names], rows)

    lines += _ablation_markdown(report.get("ablation"), figures, report.get("core_sparsity"))
    lines += _attention_markdown(report.get("attention"), figures)
    return "\n".join(lines)


def _ablation_markdown(ablation: Mapping[str, Any] | None, figures: Mapping[str, str],
                       core_sparsity: float | None) -> list[str]:
    if not ablation:
        return []
    lines = ["## Ablation table", ""]
    if "skipped" in ablation:
        return lines + [f"Skipped: {ablation['skipped']}.", ""]
    full = ablation["full_accuracy"]
    cases = list(full)
    lines += [f"{ablation['mode'].capitalize()}-ablating units of the full model, one at a time (the core at "
              f"{core_sparsity:.0%} sparsity) and together. Cells: accuracy change in points (accuracy after).", ""]
    rows = [["none (full model)", *[_pct(full[c]) for c in cases]]]
    for row in ablation["rows"]:
        label = row["label"] if row["kind"] != "joint" else " + ".join(row["units"])
        rows.append([label, *[f"{_delta(row['delta'][c])} ({_pct(row['accuracy'][c])})" for c in cases]])
        if row["kind"] == "joint":
            rows.append([f"sum of the {len(row['units'])} single changes",
                         *[_delta(row["sum_of_singles"][c]) for c in cases]])
    lines += _table(["ablated", *cases], rows)
    for row in (r for r in ablation["rows"] if r["kind"] == "joint"):
        larger = [c for c in cases if row["super_additive"][c]]
        lines += [f"Super-additivity of {' + '.join(row['units'])}: the joint change is larger in size than the sum "
                  f"of the single changes on {len(larger)} of {len(cases)} sets"
                  + (f" ({', '.join(larger)})." if larger else "."), ""]
    return lines + _image(figures, "ablation_table", "ablation table")


def _attention_markdown(attention: Mapping[str, Any] | None, figures: Mapping[str, str]) -> list[str]:
    if not attention:
        return []
    lines = ["## Attention patterns of core heads", ""]
    if "skipped" in attention:
        return lines + [f"Skipped: {attention['skipped']}.", ""]
    if attention.get("note"):
        lines += [attention["note"], ""]
    lines += [f"Share of attention mass (percent), averaged over the real query positions of "
              f"{attention['num_examples']} examples of `{attention['eval_set']}`: on a token repeated in the other "
              "segment (premise / hypothesis), the previous token, the next token, and special tokens. The last row "
              "is what uniform attention over the allowed keys would give.", ""]
    rows = [[r["head"], _pct(r["repeated"]), _pct(r["previous"]), _pct(r["next"]), _pct(r["special"])]
            for r in attention["rows"]]
    uniform = attention["uniform"]
    rows.append(["uniform attention", _pct(uniform["repeated"]), _pct(uniform["previous"]), _pct(uniform["next"]),
                 _pct(uniform["special"])])
    lines += _table(["head", "repeated across segments", "previous token", "next token", "special tokens"], rows)
    for name in attention.get("figures", []):
        lines += _image(figures, Path(name).stem, f"attention of {Path(name).stem.removeprefix('attention-')}")
    return lines
