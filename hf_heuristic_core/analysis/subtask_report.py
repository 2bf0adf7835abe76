"""The subtask section of `analyze`: which masks are which subtask's, and what they share.

How a runs folder declares its subtasks: a `subtasks.json` beside the runs (or `analyze(subtasks=...)` /
`--subtasks name=path,...`, which replaces the file's mask mapping):

    {"masks": {"sr1": "sr1/sp0-seed0", "sr2": "sr2/sp0-seed0"},     # mask artifact folders, relative to the runs
     "reference": "full/sp0-seed0",                                 # optional: the full-task mask (Csordás' M_0)
     "accuracy": {"full": {"sr1": 0.99, "sr2": 0.98},               # optional: measured accuracies per task of
                  "sr1": {"sr1": 0.97, "sr2": 0.31},                # the full model, of each mask, and of each
                  "NOT sr1": {"sr1": 0.22, "sr2": 0.91}, ...}}      # inverted mask ("NOT <name>")

Why a declaration and not a guess: a mask's subtask is the data it was trained on, which a runs folder records as
a data spec but not as "the subroutine this isolates"; and the accuracy of an inverted mask on another subtask's data
needs that task's own evaluation (an odd-one-out head, a digit decoder), which only the code that trained the masks
has. So masks are read from their artifacts (the overlap numbers need nothing else) and accuracies are recorded
where they were measured. Without `accuracy`, the section has the mask comparisons only and says so.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..artifacts import check_finished, read_artifact
from ..errors import ArtifactError
from .results import read_json
from .subtasks import (
    layer_masks,
    mask_overlap,
    performance_drop_table,
    remaining_fraction,
    sharing_fractions,
    sharing_over_union,
    specialization_scores,
)
from ..plotting.subtasks import plot_sharing_bars

__all__ = ["SUBTASKS_FILE", "chance_overlap", "parse_subtasks_flag", "read_subtask_declaration", "subtask_markdown",
           "subtask_section"]

SUBTASKS_FILE = "subtasks.json"


def parse_subtasks_flag(text: str | None) -> dict[str, str] | None:
    """`"sr1=runs/a,sr2=runs/b"` -> `{"sr1": "runs/a", "sr2": "runs/b"}` (the CLI's `--subtasks`)."""
    if not text:
        return None
    mapping: dict[str, str] = {}
    for item in (part.strip() for part in text.split(",") if part.strip()):
        name, sep, path = item.partition("=")
        if not sep or not name.strip() or not path.strip():
            raise ValueError(f"--subtasks takes name=mask_folder pairs separated by commas "
                             f"(e.g. sr1=runs/sr1,sr2=runs/sr2); {item!r} is not one.")
        if name.strip() in mapping:
            raise ValueError(f"--subtasks names subtask {name.strip()!r} twice; give each subtask one mask folder.")
        mapping[name.strip()] = path.strip()
    return mapping


def read_subtask_declaration(runs_dir: Path, subtasks: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """The declaration from `runs_dir/subtasks.json`, with `subtasks` (name -> mask folder) replacing its masks;
    None when there is neither. Paths are resolved against `runs_dir`; at least two subtasks are required."""
    path = runs_dir / SUBTASKS_FILE
    try:
        declaration: dict[str, Any] = dict(read_json(path)) if path.is_file() else {}
    except ValueError as err:   # JSONDecodeError, or JSON that is not an object
        raise ArtifactError(f"{path} is not a JSON object ({err}); see analysis.subtask_report for its "
                            "format, or pass the masks with --subtasks.") from None
    if subtasks:
        declaration["masks"] = dict(subtasks)
    if not declaration:
        return None
    masks = declaration.get("masks")
    if not isinstance(masks, Mapping) or len(masks) < 2:
        raise ArtifactError(f"The subtask declaration ({path if path.is_file() else 'subtasks='}) must map at least "
                            f"two subtask names to mask folders under 'masks', got {masks!r}.")
    resolve = lambda p: p if Path(p).is_absolute() else str(runs_dir / p)
    declaration["masks"] = {str(name): resolve(str(folder)) for name, folder in masks.items()}
    if declaration.get("reference"):
        declaration["reference"] = resolve(str(declaration["reference"]))
    return declaration


def _read_masks(folder: str, name: str, allow_unfinished: bool = False) -> tuple[str, dict[str, Any]]:
    if not Path(folder).exists():
        raise ArtifactError(f"Subtask {name!r}: mask folder {folder} does not exist; fix its path in subtasks.json "
                            "or --subtasks.")
    artifact = read_artifact(folder)
    check_finished(folder, allow_unfinished, f"Subtask {name!r}: mask folder", artifact)
    return artifact.config.granularity, dict(artifact.masks)


def subtask_section(declaration: Mapping[str, Any], report_dir: Path | None = None,
                    figure: bool = True, allow_unfinished: bool = False) -> dict[str, Any]:
    """Overlap (IoU / IoMin per layer) of every pair of subtask masks, each mask's shared fraction per layer, the
    kept share of the reference mask, and with recorded accuracies Csordás' performance-drop table and the
    specialization / exclusivity scores of every ordered pair."""
    names = list(declaration["masks"])
    loaded = {name: _read_masks(folder, name, allow_unfinished) for name, folder in declaration["masks"].items()}
    granularities = {g for g, _ in loaded.values()}
    shapes = [{k: tuple(v.shape) for k, v in m.items()} for _, m in loaded.values()]
    if len(granularities) != 1 or any(s != shapes[0] for s in shapes):
        raise ArtifactError(f"The subtask masks are of different granularities {sorted(granularities)} or shapes; "
                            "declare masks of one granularity made for one model.")
    masks = {name: m for name, (_, m) in loaded.items()}
    section: dict[str, Any] = {
        "names": names, "granularity": granularities.pop(),
        "kept": {name: _kept(m) for name, m in masks.items()},
        "overlap": {f"{a} vs {b}": mask_overlap(masks[a], masks[b]) for a, b in itertools.combinations(names, 2)},
        "chance_overlap": {f"{a} vs {b}": chance_overlap(masks[a], masks[b])
                           for a, b in itertools.combinations(names, 2)},
        "sharing": sharing_fractions(masks), "sharing_over_union": sharing_over_union(masks)}
    if declaration.get("reference"):
        _, reference = _read_masks(declaration["reference"], "reference", allow_unfinished)
        section["remaining"] = {name: remaining_fraction(m, reference) for name, m in masks.items()}
    accuracy = declaration.get("accuracy")
    if accuracy:
        section.update(_accuracy_part(accuracy, names))
    if figure and report_dir is not None:
        plot_sharing_bars(section["sharing"], path=report_dir / "subtask_sharing").clear()
        section["figure"] = "subtask_sharing.png"
    return section


def chance_overlap(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, float]:
    """Total IoU / IoMin expected of two independent random masks with the same kept count per layer: E|A&B| =
    sum_l |A_l| |B_l| / n_l. Without it an IoU of 0.5 reads as "half shared" when chance alone may give 0.3."""
    la, lb = layer_masks(a), layer_masks(b)
    inter = sum(float(la[k].sum()) * float(lb[k].sum()) / la[k].numel() for k in la if la[k].numel())
    size_a, size_b = sum(float(m.sum()) for m in la.values()), sum(float(m.sum()) for m in lb.values())
    union = size_a + size_b - inter
    return {"iou": inter / union if union else math.nan,
            "iomin": inter / min(size_a, size_b) if min(size_a, size_b) else math.nan}


def _kept(masks: Mapping[str, Any]) -> float:
    return sum(float((m > 0.5).sum()) for m in masks.values()) / sum(m.numel() for m in masks.values())


def _accuracy_part(accuracy: Mapping[str, Mapping[str, float]], names: Sequence[str]) -> dict[str, Any]:
    missing = [f"{row}/{task}" for row in names for task in names if task not in accuracy.get(row, {})]
    if "full" not in accuracy or any(t not in accuracy["full"] for t in names) or missing:
        raise ArtifactError(f"subtasks.json 'accuracy' needs 'full' and every mask's accuracy on every subtask "
                            f"({', '.join(names)}); missing: {', '.join(missing) or 'full'}.")
    bad = [f"{row}/{task}={value!r}" for row, values in accuracy.items() for task, value in values.items()
           if not isinstance(value, (int, float)) or not 0.0 <= float(value) <= 1.0]
    if bad:
        raise ArtifactError(f"subtasks.json 'accuracy' values must be numbers in [0, 1]; got {', '.join(bad)}.")
    scored = {row: values for row, values in accuracy.items() if row != "full"}
    scores = []
    for own, other in itertools.permutations(names, 2):
        inverted = accuracy.get(f"NOT {own}")
        row = {"mask": own, "other": other,
               "specialization": float(accuracy[own][own]) - float(accuracy[own][other])}
        if inverted and own in inverted and other in inverted:
            row["exclusivity"] = specialization_scores(accuracy[own], inverted, own, other)["exclusivity"]
        scores.append(row)
    return {"performance_drop": performance_drop_table(accuracy["full"], scored), "scores": scores}


def _fmt(value: Any) -> str:
    return "–" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.3f}"


def subtask_markdown(section: Mapping[str, Any] | None) -> list[str]:
    """The report.md lines of the subtask section (empty without one)."""
    if not section:
        return []
    names = section["names"]
    lines = ["## Subtask masks", "",
             f"{section['granularity'].capitalize()} masks of {len(names)} subtasks: "
             + ", ".join(f"{n} keeps {100 * section['kept'][n]:.1f}%" for n in names)
             + ". Per layer (one weight tensor, or one row of a unit kind): IoU |A&B|/|A|B|, IoMin "
               "|A&B|/min(|A|,|B|) (– where both are empty).", ""]
    for pair, rows in section["overlap"].items():
        lines += [f"### Overlap: {pair}", "", "| layer | kept A | kept B | IoU | IoMin |", "|---|---|---|---|---|"]
        lines += [f"| {layer} | {r['size_a']} | {r['size_b']} | {_fmt(r['iou'])} | {_fmt(r['iomin'])} |"
                  for layer, r in rows.items()] + [""]
        chance = section.get("chance_overlap", {}).get(pair)
        if chance:
            lines += [f"Two independent random masks with these kept counts per layer would give a total IoU of about "
                      f"{_fmt(chance['iou'])} and IoMin of {_fmt(chance['iomin'])}: compare the totals with these, "
                      "not with 0.", ""]
    lines += ["### Shared fraction per layer", "",
              "Csordás' shared weights: the fraction of a mask's kept weights also kept by another subtask's mask "
              "(total: the same fraction over all layers). Near 1: the subtasks reuse weights (P_reuse-style); near "
              "0: each has its own (P_specialize-style). Shared weights over the union of all masks (Csordás' "
              "plotting code's total; the IoU for two masks): "
              + ", ".join(f"{n} {_fmt(section.get('sharing_over_union', {}).get(n))}" for n in names) + ".", "",
              "| layer | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for layer in section["sharing"][names[0]]:
        lines.append(f"| {layer} | " + " | ".join(_fmt(section["sharing"][n][layer]) for n in names) + " |")
    lines.append("")
    if section.get("figure"):
        lines += [f"![weights shared per layer]({section['figure']})", ""]
    if "remaining" in section:
        lines += ["Share of the full-task mask each subtask mask keeps: "
                  + ", ".join(f"{n} {_fmt(section['remaining'][n]['total'])}" for n in names) + ".", ""]
    if "scores" not in section:
        return lines + ["No accuracies recorded (subtasks.json 'accuracy'), so no performance-drop table or "
                        "specialization scores.", ""]
    tasks = names
    lines += ["### Performance of masks and inverted masks", "",
              "| mask | " + " | ".join(f"acc {t} (drop)" for t in tasks) + " |", "|---|" + "---|" * len(tasks)]
    for row in section["performance_drop"]:
        lines.append(f"| {row['mask']} | " + " | ".join(
            f"{_fmt(row.get(f'acc_{t}'))} ({_fmt(row.get(f'drop_{t}'))})" for t in tasks) + " |")
    lines += ["", "### Specialization (P_specialize / P_reuse-style)", "",
              "spec = acc(M_A; A) − acc(M_A; B); excl = acc(NOT M_A; B) − acc(NOT M_A; A). Both high: A has "
              "weights of its own (P_specialize-style); spec high but excl near 0: the weights A needs are also "
              "B's, or redundant copies exist; both near 0: one set of weights serves both (P_reuse-style). "
              "These scores are ours; the papers read the same accuracies.", "",
              "| mask A | task B | spec | excl |", "|---|---|---|---|"]
    lines += [f"| {r['mask']} | {r['other']} | {_fmt(r['specialization'])} | {_fmt(r.get('exclusivity'))} |"
              for r in section["scores"]]
    return lines + [""]
