"""The Subtask Induction report: test accuracy vs k per arm (mean, min-max over seeds), comparisons, and warnings.

A result can be meaningless without anything failing: a source that never learned T1 has no subtask to give, a
"subnetwork" that does not do the subtask transplants noise, a run shorter than one epoch has not seen its data,
and arms that all sit at chance compare nothing. `warnings_for` names each such case; the report prints them above
the table. The comparison of the subnetwork arm against each control says by how much the means differ and whether
the seed ranges overlap ("separated" only when the subnetwork's worst seed beats the control's best).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["compare_arms", "induction_markdown", "summarize", "warnings_for"]


def summarize(records: Sequence[Mapping[str, Any]], metric: str = "test_accuracy") -> list[dict[str, Any]]:
    """One row per (arm, k): mean, min, max and n of `metric` over seeds, arms in first-seen order, k ascending."""
    groups: dict[tuple[str, int], list[float]] = {}
    for record in records:
        groups.setdefault((record["arm"], int(record["k"])), []).append(float(record[metric]))
    arms = list(dict.fromkeys(record["arm"] for record in records))
    rows = []
    for arm in arms:
        for k in sorted(k for a, k in groups if a == arm):
            values = groups[(arm, k)]
            rows.append({"arm": arm, "k": k, "n": len(values), "mean": sum(values) / len(values),
                         "min": min(values), "max": max(values), "values": values})
    return rows


def compare_arms(summary: Sequence[Mapping[str, Any]], arm: str = "subnetwork") -> list[dict[str, Any]]:
    """For each k and each other arm: difference of means and whether the seed ranges are disjoint."""
    by_key = {(row["arm"], row["k"]): row for row in summary}
    comparisons = []
    for (name, k), row in by_key.items():
        if name != arm:
            continue
        for (other, other_k), control in by_key.items():
            if other_k != k or other == arm:
                continue
            comparisons.append({"k": k, "arm": arm, "control": other, "difference": row["mean"] - control["mean"],
                                "separated": row["min"] > control["max"],
                                "control_separated": control["min"] > row["max"]})
    return sorted(comparisons, key=lambda c: (c["k"], c["control"]))


def warnings_for(records: Sequence[Mapping[str, Any]], diagnostics: Mapping[str, Any], *,
                 min_source_accuracy: float = 0.9, min_subnetwork_accuracy: float = 0.9,
                 chance: float | None = None) -> list[str]:
    """Every reason the numbers could be meaningless, as sentences (empty: none found)."""
    notes = []
    source = diagnostics.get("source_accuracy")
    if source is not None and source < min_source_accuracy:
        notes.append(f"The source model scores {source:.3f} on its own task ({diagnostics.get('source_task', 'T1')}),"
                     f" below {min_source_accuracy}: it may not hold the subtask at all; train it longer.")
    sub = diagnostics.get("subnetwork_accuracy")
    if sub is not None and sub < min_subnetwork_accuracy:
        notes.append(f"The subnetwork scores {sub:.3f} on its subtask ({diagnostics.get('subtask', 'S')}), below "
                     f"{min_subnetwork_accuracy}: what is transplanted does not do the subtask; retrain the mask "
                     "(more epochs, a smaller penalty).")
    kept = diagnostics.get("kept_fraction")
    if kept is not None and not 0 < kept < 1:
        notes.append(f"The subnetwork keeps {kept:.3f} of the masked weights: nothing or everything is transplanted.")
    short = sorted({f"{r['arm']} k={r['k']} seed={r['seed']}" for r in records if float(r.get("epochs", 0)) < 1})
    if short:
        notes.append(f"{len(short)} run(s) trained for less than one epoch ({', '.join(short[:4])}): their accuracy "
                     "says nothing about the data; raise the epochs.")
    moved = sorted({f"{r['arm']} k={r['k']} seed={r['seed']}" for r in records if r.get("transplant_intact") is False})
    if moved:
        notes.append(f"Transplanted (frozen) entries changed during training in {len(moved)} run(s) "
                     f"({', '.join(moved[:4])}): those arms did not keep the source's weights; report this as a bug.")
    if chance is not None and records and max(float(r["best_validation"]) for r in records) <= chance + 0.02:
        notes.append(f"No run beats chance ({chance:.3f}) on validation: the comparison between arms is empty; "
                     "check the learning rate and the epochs.")
    return notes


def _fmt(row: Mapping[str, Any]) -> str:
    return f"{row['mean']:.3f} ({row['min']:.3f}-{row['max']:.3f})"


def induction_markdown(summary: Sequence[Mapping[str, Any]], comparisons: Sequence[Mapping[str, Any]],
                       diagnostics: Mapping[str, Any], warnings: Sequence[str], settings: Mapping[str, Any]) -> str:
    """report.md: warnings first, then the accuracy table, the comparisons, the source checks and the settings."""
    lines = ["# Subtask Induction", ""]
    if warnings:
        lines += ["## Warnings: these numbers may be meaningless", ""] + [f"- {w}" for w in warnings] + [""]
    arms = list(dict.fromkeys(row["arm"] for row in summary))
    ks = sorted({row["k"] for row in summary})
    by_key = {(row["arm"], row["k"]): row for row in summary}
    seeds = sorted({row["n"] for row in summary})
    lines += [f"Test accuracy at the best validation epoch: mean (min-max) over {'/'.join(map(str, seeds))} seeds. "
              "The data splits are the same for every arm and seed (data_seed); a seed changes the fresh "
              "initialization and the data order.",
              "", "| arm | " + " | ".join(f"k={k}" for k in ks) + " |", "|---|" + "---|" * len(ks)]
    for arm in arms:
        lines.append(f"| {arm} | " + " | ".join(_fmt(by_key[(arm, k)]) if (arm, k) in by_key else "-" for k in ks)
                     + " |")
    if comparisons:
        lines += ["", "| k | subnetwork - control | difference of means | seed ranges |", "|---|---|---|---|"]
        for c in comparisons:
            verdict = ("separated (worst subnetwork seed > best control seed)" if c["separated"] else
                       "control separated above" if c["control_separated"] else "overlap")
            lines.append(f"| {c['k']} | {c['control']} | {c['difference']:+.3f} | {verdict} |")
    if diagnostics:
        lines += ["", "## Source and subnetwork checks", "", "| check | value |", "|---|---|"]
        lines += [f"| {key} | {value:.4g} |" if isinstance(value, float) else f"| {key} | {value} |"
                  for key, value in diagnostics.items() if not isinstance(value, (dict, list))]
    lines += ["", "## Settings", "", "```", *(f"{k} = {v}" for k, v in settings.items()), "```", ""]
    return "\n".join(lines)
