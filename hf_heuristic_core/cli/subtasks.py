"""`hf-heuristic-core subtasks`: compare the masks of several subtasks (Csordás' sharing, IoU / IoMin per layer).

    hf-heuristic-core subtasks --masks runs/pair1 runs/pair2 --names pair1 pair2 --reference runs/full \\
        --output_dir runs/subtasks

Reads mask artifacts only (no model, no data): writes `subtasks.json` (per-layer IoU, IoMin and sizes of the first
two masks, each mask's shared fraction per layer, and with `--reference` the fraction of the full-task mask each
subtask mask keeps), `subtasks.md` and the sharing figure. Accuracy-based analyses (Lepori's subtask test, the
inverted-mask performance-drop table) need the model and each subtask's data: run
`hf_heuristic_core.analysis.subtasks.subtask_test` / `performance_drop_table` from Python, and record the accuracies
in a `subtasks.json` beside the masks for `hf-heuristic-core analyze` to put them in its report
(`analysis.subtask_report`; `benchmarks/reproductions/repro_lepori_subtasks.py --masks_dir` writes one).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from transformers import HfArgumentParser

from ..analysis.subtasks import mask_overlap, remaining_fraction, sharing_fractions, sharing_over_union
from ..artifacts import check_finished, read_artifact
from ..errors import ArtifactError
from ..io_utils import atomic_write_text
from ..plotting.subtasks import plot_sharing_bars
from ..run_folder import claim_output_dir, local_paths
from .flags.subtasks import DESCRIPTION, SubtasksArguments

__all__ = ["DESCRIPTION", "SubtasksArguments", "run_subtasks", "subtasks_command"]


def run_subtasks(args: SubtasksArguments) -> dict[str, Any]:
    """Claim the output folder, then compare the masks (see the module docstring)."""
    if len(args.masks) < 2:
        raise ArtifactError(f"subtasks compares masks: pass at least two artifacts to --masks, got {args.masks}.")
    names = list(args.names) if args.names else [Path(m).name for m in args.masks]
    if len(names) != len(args.masks) or len(set(names)) != len(names):
        raise ArtifactError(f"--names must give one distinct name per mask ({len(args.masks)}), got {names}.")
    settings = {"masks": [local_paths(m) for m in args.masks], "names": names,
                "reference": local_paths(args.reference)}
    inputs = [("--masks", m) for m in args.masks] + [("--reference", args.reference)]
    with claim_output_dir(args.output_dir, "subtasks", settings, overwrite=args.overwrite_output_dir,
                          inputs=inputs) as claim:
        summary = _compare(args, names)
        claim.finish()
    return summary


def _compare(args: SubtasksArguments, names: list[str]) -> dict[str, Any]:
    artifacts = [read_artifact(m) for m in args.masks]
    unfinished = {m: check_finished(m, args.allow_unfinished, "--masks", a) for m, a in zip(args.masks, artifacts)}
    granularities = {a.config.granularity for a in artifacts}
    shapes = [{k: tuple(v.shape) for k, v in a.masks.items()} for a in artifacts]
    if len(granularities) != 1 or any(s != shapes[0] for s in shapes):
        raise ArtifactError(f"The masks are of different granularities {sorted(granularities)} or shapes; compare "
                            "masks of one granularity made for one model.")
    masks = {name: artifact.masks for name, artifact in zip(names, artifacts)}
    summary: dict[str, Any] = {"names": names, "granularity": granularities.pop(),
                               "overlap": {f"{names[0]} vs {names[1]}": mask_overlap(masks[names[0]],
                                                                                     masks[names[1]])},
                               "sharing": sharing_fractions(masks), "sharing_over_union": sharing_over_union(masks),
                               "unfinished_masks": {m: r for m, r in unfinished.items() if r}}
    if args.reference:
        reference_artifact = read_artifact(args.reference)
        check_finished(args.reference, args.allow_unfinished, "--reference", reference_artifact)
        reference = reference_artifact.masks
        summary["remaining"] = {name: remaining_fraction(m, reference) for name, m in masks.items()}
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "subtasks.json", json.dumps(summary, indent=2, default=_json_number) + "\n")
    atomic_write_text(out / "subtasks.md", _markdown(summary))
    if args.figure:
        plot_sharing_bars(summary["sharing"], path=out / "sharing")
    return summary


def _json_number(value: Any) -> Any:
    return None if isinstance(value, float) and math.isnan(value) else str(value)


def _fmt(value: float) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.3f}"


def _markdown(summary: dict[str, Any]) -> str:
    names = summary["names"]
    (pair, rows), = summary["overlap"].items()
    lines = [f"# Subtask masks ({summary['granularity']})", "", f"## Overlap: {pair}", "",
             "| layer | kept A | kept B | IoU | IoMin |", "|---|---|---|---|---|"]
    lines += [f"| {layer} | {r['size_a']} | {r['size_b']} | {_fmt(r['iou'])} | {_fmt(r['iomin'])} |"
              for layer, r in rows.items()]
    lines += ["", "## Shared fraction of each mask's weights", "",
              "Per layer |M_i & OR_{j != i} M_j| / |M_i|; total: the same ratio over all layers. Over the union of "
              "all masks instead (Csordás' plotting code; the IoU for two masks): "
              + ", ".join(f"{n} {_fmt(summary['sharing_over_union'][n])}" for n in names) + ".", "",
              "| layer | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for layer in summary["sharing"][names[0]]:
        lines.append(f"| {layer} | " + " | ".join(_fmt(summary["sharing"][n][layer]) for n in names) + " |")
    if "remaining" in summary:
        lines += ["", "## Share of the full-task mask kept", "", "| mask | total |", "|---|---|"]
        lines += [f"| {n} | {_fmt(summary['remaining'][n]['total'])} |" for n in names]
    return "\n".join(lines) + "\n"


def subtasks_command(argv: Sequence[str]) -> int:
    parser = HfArgumentParser(SubtasksArguments, prog="hf-heuristic-core subtasks", description=DESCRIPTION)
    (args,) = parser.parse_args_into_dataclasses(args=list(argv))
    summary = run_subtasks(args)
    for masks, reasons in summary["unfinished_masks"].items():
        print(f"WARNING: {masks} are unfinished masks (--allow_unfinished): {'; '.join(reasons)}")
    totals = ", ".join(f"{n} {_fmt(summary['sharing'][n]['total'])}" for n in summary["names"])
    print(f"Shared fraction (total over layers, of each mask's kept entries): {totals}. Written to "
          f"{args.output_dir}/subtasks.md")
    return 0
