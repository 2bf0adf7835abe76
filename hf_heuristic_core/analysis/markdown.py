"""report.md: the report's tables in Markdown, with its figures inline.

`render_markdown` reads only the report dict that `analyze` returns (and writes as report.json), so a report can be
re-rendered from report.json alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from .units import BLOCK_KIND, HEAD_KIND, sparsity_tag
from .subtask_report import subtask_markdown

__all__ = ["render_markdown"]


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


def _verdict_lines(report: Mapping[str, Any]) -> list[str]:
    """The convergence checks of the runs (always), with a warning per kind of doubtful run, and unfinished runs."""
    counts = report.get("verdicts") or {}
    lines = []
    if counts:
        lines += ["Convergence checks: " + ", ".join(f"{counts.get(key, 0)} {word}" for key, word in (
            ("converged", "converged"), ("not_converged", "not converged"), ("inconclusive", "inconclusive"),
            ("not_checked", "not checked"))) + ".", ""]
    if report.get("not_converged"):
        lines += [f"**Warning: {len(report['not_converged'])} of {len(report['results'])} pruning runs did not "
                  "converge** (their subnetwork is no better than random subnetworks of the same size, so their masks "
                  "say nothing about the model; prune longer or with the short-run recipe): "
                  + ", ".join(f"{r['run']} ({r['verdict']})" for r in report["not_converged"]) + ".", ""]
    if report.get("inconclusive"):
        lines += [f"**Warning: the convergence check of {len(report['inconclusive'])} of {len(report['results'])} "
                  "pruning runs is inconclusive** (random subnetworks of the same size are as faithful to the full "
                  "model, so faithfulness cannot tell these masks from chance; is the model trained for this "
                  "data?): " + ", ".join(r["run"] for r in report["inconclusive"]) + ".", ""]
    if report.get("unfinished"):
        lines += [f"**Unfinished runs folder:** {len(report['unfinished'])} planned runs have no result "
                  f"({', '.join(report['unfinished'])}); this report covers the finished ones only.", ""]
    return lines


def render_markdown(report: Mapping[str, Any]) -> str:
    """report.md: every table of the report, with the figures inline (paths relative to the report folder)."""
    names, figures = report["eval_sets"], report["figures"]
    stats = report["mask_statistics"]
    lines = [f"# Heuristic-core report: `{report.get('model') or report['runs_dir']}`", "",
             f"{len(report['results'])} subnetworks: sparsities "
             f"{', '.join(f'{s:.0%}' for s in report['sparsities'])} x seeds "
             f"{', '.join(str(s) for s in report['seeds'])}. Evaluation sets: {', '.join(names)}. "
             "Accuracies and changes are in percent (points).", ""]
    lines += _verdict_lines(report)
    lines += _accuracy_markdown(report, figures)
    lines += _mask_statistics_markdown(stats, figures)
    lines += _controls_markdown(report)
    lines += _ablation_markdown(report.get("ablation"), figures, report.get("core_sparsity"))
    lines += _attention_markdown(report.get("attention"), figures)
    lines += subtask_markdown(report.get("subtasks"))
    return "\n".join(lines)


def _accuracy_markdown(report: Mapping[str, Any], figures: Mapping[str, Any]) -> list[str]:
    """Accuracy per evaluation set over seeds, and faithfulness to the full model."""
    lines = ["## Accuracy per evaluation set", "",
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
    return lines


def _mask_statistics_markdown(stats: Mapping[str, Any], figures: Mapping[str, Any]) -> list[str]:
    """Head frequency, the core, Spearman's rho across sparsities and the overlap between seeds."""
    lines = ["## Head frequency", "", "How many seeds' subnetworks keep each head (rows: layers, columns: heads; "
              "the MLP column is the layer's MLP block, when MLP blocks were pruned).", ""]
    for tag, entry in stats["per_sparsity"].items():
        freq, mlp = entry["head_frequency"], entry["mlp_frequency"]
        with_mlp = entry["core"][BLOCK_KIND] is not None
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
                      ", ".join(e["core"][HEAD_KIND]) or "none",
                      "not pruned" if e["core"][BLOCK_KIND] is None else ", ".join(e["core"][BLOCK_KIND]) or "none"]
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
    return lines


def _controls_markdown(report: Mapping[str, Any]) -> list[str]:
    if not report["controls"]:
        return []
    names, full = report["eval_sets"], report["full_model"]
    lines = ["## Control subnetworks", "",
             "Accuracy of the first seed's subnetwork next to random subnetworks with the same number of heads per "
             "layer (random_like), random subnetworks with as many units drawn from the units it prunes "
             "(random_from_complement; the whole complement where that is smaller) and its complement (inverse).", ""]
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
    for control in report["controls"]:
        if control.get("note"):
            lines += [f"Note on {control['control']} at {control['sparsity']:.0%} sparsity: {control['note']}", ""]
    return lines


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
