"""The default study's findings beside the Heuristic Core paper's released MNLI numbers (Bhaskar, Friedman & Chen).

The paper prunes BERT-base fine-tuned on MNLI for 61,360 steps and evaluates on HANS; the default study
(`hf-heuristic-core study`, committed under `docs/study_default/`) prunes MiniLM fine-tuned for 240 steps on generated
HANS-style data. The scales differ, so this script compares shapes, not values:
- over fine-tuning: does OOD (HANS) accuracy lag ID accuracy? (x axis: fraction of the fine-tuning steps)
- over sparsity: does accuracy fall earlier on OOD than on ID; do seeds at 50% agree ID but spread OOD?
- the core: how many heads every subnetwork keeps, against the kept heads and the chance size N(1-s)^k;
- effective size over fine-tuning: does the OOD effective size rise while the ID one stays flat?

The paper's side is read from its released tables (`--paper_dir`, never copied into the repository); numbers that
exist only in the paper's text (its core size, Spearman rho, chance size) are written into the JSON under
`paper_text`, marked as quoted. Every number the reproductions page shows comes from the JSON this script writes.

    python benchmarks/reproductions/compare_heuristic_core.py --study_dir docs/study_default \\
        --paper_dir ../shared/data/heuristic-core-eval \\
        --output benchmarks/reproductions/results/compare_heuristic_core/study-default_vs_paper-mnli.json \\
        --figure docs/figures/heuristic_core_side_by_side.png
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from hf_heuristic_core.io_utils import atomic_write, atomic_write_text

# The HANS subcases the paper's figures use (all four are among the study's seven OOD subcases).
SHARED_OOD = (
    "lexical_overlap_ln_subject-object_swap",
    "lexical_overlap_ln_preposition",
    "constituent_cn_embedded_under_if",
    "constituent_cn_embedded_under_verb",
)
SHORT = {
    "lexical_overlap_ln_subject-object_swap": "SO-Swap",
    "lexical_overlap_ln_preposition": "Prep",
    "constituent_cn_embedded_under_if": "Embed-If",
    "constituent_cn_embedded_under_verb": "Embed-Verb",
}
PAPER_ID = ("validation_matched", "validation_mismatched")        # acc_over_ft, acc_vs_sparsity, the grid
PAPER_SP_ID = ("mnli-matched", "mnli-mismatched")                  # the same sets in the sp50 / sp70 tables
OUR_ID = ("id",)
MARGIN = 0.03            # the paper's faithfulness margin (absolute accuracy)
REACH_SHARE = 0.9        # "learned": the first checkpoint at 90% of the final accuracy
RISE = 0.1               # an effective size "rises" when it ends at least this much above where it started
FLAT = 0.15              # ... and "stays flat" when it ends within this of where it started
CHANCE_FACTOR = 10       # a core "far above chance" is at least this many times its chance size
EPS = 1e-9               # sizes are multiples of the level spacing: a difference at a threshold counts as reaching it
PAPER_UNITS, PAPER_HEADS = 156, 144     # BERT-base: 144 heads + 12 MLP blocks, every unit counted once

PAPER_FILES = {
    "acc_over_ft": "mnli-acc_over_ft.json",
    "acc_vs_sparsity": "mnli-acc_vs_sparsity.json",
    "grid": "mnli-sparsity-grid-acc.json",
    "sp50": "mnli-sp50.json",
    "sp70": "mnli-sp70.json",
}
STUDY_FILES = {"report": "report.json", "effective_size": "finetune/effective_size.json"}

# In the paper's text only (no masks were released): quoted, never recomputed.
PAPER_TEXT = {
    "core_heads_all_subnetworks": {"value": 9, "source": "section 4 and Figure 5: heads kept by all 12 subnetworks "
                                                         "at 50% and all 12 at 70% sparsity (BERT/MNLI)"},
    "spearman_rho_50_70": {"value": 0.82, "p_value": 1.6e-36, "source": "section 4, Figure 13"},
    "chance_core_size_70": {"value": 7.7e-5, "source": "section 4: expected intersection of 12 random 70% "
                                                       "subnetworks, 144 * 0.3^12"},
    "id_within_points_at_50": {"value": "2-3", "source": "section 3, Figure 2"},
    "id_accuracy_at_70": {"value": "74-76%", "source": "section 3"},
    "mlps_never_pruned": {"value": True, "source": "section 3: the MLP layers are never pruned (although allowed)"},
}


FIGURE_ONLY = "_figure_only"   # drawn but not written to the JSON


def without_figure_only(result: Mapping[str, Any]) -> dict[str, Any]:
    """The result as written: every side's figure-only entries dropped."""
    return {key: ({k: v for k, v in value.items() if k != FIGURE_ONLY} if isinstance(value, Mapping) else value)
            for key, value in result.items()}


class InputError(Exception):
    """A missing or malformed input file; the message names the path and the fix."""


# ------------------------------------------------------------------------------------------------ pure functions


def mean_over(row: Mapping[str, float], cases: Sequence[str]) -> float:
    """Equally weighted mean of `cases` in one accuracy row (the paper's group accuracy)."""
    missing = [c for c in cases if c not in row]
    if missing:
        raise KeyError(f"cases {missing} not in the row (it has {sorted(row)})")
    return statistics.fmean(float(row[c]) for c in cases)


def seed_stats(values: Sequence[float]) -> dict[str, float]:
    """Mean, population std (ddof=0, as the study's report), min, max and count over seeds."""
    values = [float(v) for v in values]
    if not values:
        raise ValueError("no values")
    return {"mean": statistics.fmean(values), "std": statistics.pstdev(values), "min": min(values),
            "max": max(values), "n": len(values)}


def curve_over_finetuning(acc_over_ft: Mapping[str, Mapping[str, float]],
                          groups: Mapping[str, Sequence[str]]) -> dict[str, Any]:
    """`{step: {case: acc}}` -> steps in order, the fraction of the last step, and each group's mean per step."""
    steps = sorted(acc_over_ft, key=int)
    last = int(steps[-1])
    out: dict[str, Any] = {"steps": [int(s) for s in steps], "fraction": [int(s) / last for s in steps]}
    for name, cases in groups.items():
        out[name] = [mean_over(acc_over_ft[s], cases) for s in steps]
    return out


def first_fraction_reaching(fractions: Sequence[float], values: Sequence[float],
                            share: float = REACH_SHARE) -> float | None:
    """The first x at which a curve reaches `share` of its final value; None when the final value is 0 (never
    learned). With sparse checkpoints the answer is bounded below by the first checkpoint's x."""
    final = values[-1]
    if final <= 0:
        return None
    for x, v in zip(fractions, values):
        if v >= share * final:
            return x
    return None   # unreachable: the last value always reaches its own share


def sparsity_key(key: str | float, percent: bool) -> float:
    """Sparsity keys as fractions: the paper's tables key by percent strings ("5"), the study by fractions ("0.4")."""
    value = float(key)
    return round(value / 100, 6) if percent else round(value, 6)


def accuracy_vs_sparsity(table: Mapping[str, Mapping[str, Mapping[str, float]]],
                         groups: Mapping[str, Sequence[str]], percent: bool) -> dict[float, dict[str, Any]]:
    """`{seed: {sparsity: {case: acc}}}` -> `{sparsity: {group: seed_stats}}` over the seeds that have every case of
    the group at that sparsity (the study's early-stopped search leaves some cells out; `n` says how many seeds)."""
    per_sparsity: dict[float, dict[str, list[float]]] = {}
    for by_sparsity in table.values():
        for key, row in by_sparsity.items():
            cell = per_sparsity.setdefault(sparsity_key(key, percent), {g: [] for g in groups})
            for name, cases in groups.items():
                if all(c in row for c in cases):
                    cell[name].append(mean_over(row, cases))
    return {sp: {name: seed_stats(vals) for name, vals in cell.items() if vals}
            for sp, cell in sorted(per_sparsity.items())}


def highest_faithful_sparsity(curve: Mapping[float, Mapping[str, Any]], group: str, full: float,
                              margin: float = MARGIN) -> float:
    """The paper's effective-size rule on the seed-mean curve: the highest measured sparsity whose mean accuracy is
    above `full - margin` (0.0, the full model, when none is)."""
    faithful = [sp for sp, cell in curve.items() if group in cell and cell[group]["mean"] > full - margin]
    return max(faithful, default=0.0)


def first_sparsity_below(curve: Mapping[float, Mapping[str, Any]], group: str, full: float,
                         margin: float = MARGIN) -> float | None:
    """The lowest measured sparsity whose seed-mean accuracy is at or below `full - margin` (the paper's
    faithfulness rule, on the mean); None when every measured level stays within the margin."""
    for sp in sorted(curve):
        if group in curve[sp] and curve[sp][group]["mean"] <= full - margin:
            return sp
    return None


def multiseed_table(table: Mapping[str, Sequence[Any]]) -> dict[str, Any]:
    """A released sp50 / sp70 table (`{"seed": ["original", seeds...], "sparsity": [...], case: [...]}`) ->
    the full model's accuracy per case, and per case the stats over the pruned seeds."""
    seeds = list(table["seed"])
    if not seeds or seeds[0] != "original":
        raise ValueError(f"the first column must be the full model ('original'), got {seeds[:1]}")
    cases = [k for k in table if k not in ("seed", "sparsity")]
    return {
        "seeds": seeds[1:],
        "realized_sparsity": seed_stats(table["sparsity"][1:]),
        "full": {c: float(table[c][0]) for c in cases},
        "pruned": {c: seed_stats(table[c][1:]) for c in cases},
    }


def group_over_seeds(table: Mapping[str, Sequence[Any]], cases: Sequence[str]) -> dict[str, Any]:
    """Per seed the mean over `cases` (first column: the full model), then the stats over the pruned seeds."""
    per_column = [statistics.fmean(float(table[c][i]) for c in cases) for i in range(len(table["seed"]))]
    return {"full": per_column[0], "pruned": seed_stats(per_column[1:])}


def paper_kept_heads(unit_sparsities: Sequence[float], num_units: int = PAPER_UNITS,
                     num_heads: int = PAPER_HEADS) -> list[int]:
    """Heads kept per released subnetwork. Its sparsity counts heads and MLP blocks alike (x 156 gives whole
    numbers); the paper reports that no MLP block was ever pruned, so every pruned unit is a head."""
    kept = []
    for s in unit_sparsities:
        pruned = s * num_units
        if abs(pruned - round(pruned)) > 0.05:
            raise ValueError(f"sparsity {s} x {num_units} units = {pruned:.3f} is not a whole number of units")
        kept.append(num_heads - round(pruned))
    return kept


def chance_core_size(num_heads: int, head_sparsity: float, num_subnetworks: int) -> float:
    """Heads kept by all k subnetworks if each kept each head independently with probability 1 - s: N (1-s)^k."""
    return num_heads * (1.0 - head_sparsity) ** num_subnetworks


def drop(full: float, pruned_mean: float) -> float:
    """Accuracy lost by the subnetworks on average (positive: worse than the full model)."""
    return full - pruned_mean


# ------------------------------------------------------------------------------------------------ the two sides


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise InputError(f"{path} is not valid JSON ({exc}); restore it from its source") from exc


def require_files(folder: Path, files: Mapping[str, str], fix: str) -> dict[str, Path]:
    """Every expected file of a folder, or one error naming each missing path and how to get it."""
    paths = {name: folder / rel for name, rel in files.items()}
    missing = [str(p) for p in paths.values() if not p.is_file()]
    if missing:
        raise InputError(f"missing input file(s): {', '.join(missing)}. {fix}")
    return paths


def paper_side(paper_dir: Path) -> dict[str, Any]:
    """The paper's quantities from its released MNLI tables."""
    paths = require_files(
        paper_dir, PAPER_FILES,
        "Pass --paper_dir the folder with the paper's released tables (from the repository root: "
        "../shared/data/heuristic-core-eval).")
    raw = {name: _read_json(path) for name, path in paths.items()}
    over_ft = curve_over_finetuning(raw["acc_over_ft"], {"id": PAPER_ID, "ood": SHARED_OOD})
    # Single-subcase curves are the released values themselves: drawn, but kept out of the JSON (not a copy).
    subcases = curve_over_finetuning(raw["acc_over_ft"], {SHORT[c]: (c,) for c in SHARED_OOD})
    final_step = str(over_ft["steps"][-1])
    vs_sparsity = accuracy_vs_sparsity(raw["acc_vs_sparsity"], {"id": PAPER_ID, "ood": SHARED_OOD}, percent=True)
    full_id, full_ood = vs_sparsity[0.0]["id"]["mean"], vs_sparsity[0.0]["ood"]["mean"]
    multiseed: dict[str, Any] = {}
    for name, level in (("sp50", 0.5), ("sp70", 0.7)):
        table = raw[name]
        stats = multiseed_table(table)
        kept = paper_kept_heads(table["sparsity"][1:])
        head_sparsity = statistics.fmean(1 - k / PAPER_HEADS for k in kept)
        id_group, ood_group = group_over_seeds(table, PAPER_SP_ID), group_over_seeds(table, SHARED_OOD)
        multiseed[name] = {
            "sparsity": level,
            "num_seeds": len(stats["seeds"]),
            "id_cases": list(PAPER_SP_ID),
            "realized_sparsity": stats["realized_sparsity"],
            "id": id_group, "ood": ood_group,
            "id_drop": drop(id_group["full"], id_group["pruned"]["mean"]),
            "ood_drop": drop(ood_group["full"], ood_group["pruned"]["mean"]),
            "cases": {c: {"full": stats["full"][c], **stats["pruned"][c]} for c in (*PAPER_SP_ID, *SHARED_OOD)},
            "entailed_subcases_mean": statistics.fmean(
                stats["pruned"][c]["mean"] for c in stats["pruned"] if "_le_" in c or "_se_" in c or "_ce_" in c),
            "kept_heads": seed_stats(kept),
            "head_sparsity": head_sparsity,
            "chance_core_size": chance_core_size(PAPER_HEADS, head_sparsity, len(kept)),
        }
    return {
        "source": "Bhaskar, Friedman & Chen, The Heuristic Core: BERT-base-cased on MNLI, released tables",
        "files": {name: PAPER_FILES[name] for name in PAPER_FILES},
        "model": {"layers": 12, "heads_per_layer": 12, "heads": PAPER_HEADS, "units": PAPER_UNITS},
        "groups": {"id": list(PAPER_ID), "ood": list(SHARED_OOD)},
        "over_finetuning": over_ft,
        FIGURE_ONLY: {"over_finetuning": subcases},
        "last_checkpoint_full": {c: float(v) for c, v in raw["acc_over_ft"][final_step].items()},
        "reach_fraction": {g: first_fraction_reaching(over_ft["fraction"], over_ft[g]) for g in ("id", "ood")},
        "accuracy_vs_sparsity": {str(sp): cell for sp, cell in vs_sparsity.items()},
        "accuracy_vs_sparsity_full": {"id": full_id, "ood": full_ood},
        "first_sparsity_below_margin": {
            "id": first_sparsity_below(vs_sparsity, "id", full_id),
            "ood": first_sparsity_below(vs_sparsity, "ood", full_ood),
            "measured_levels": sorted(vs_sparsity),
        },
        "highest_faithful_sparsity": {
            "id": highest_faithful_sparsity(vs_sparsity, "id", full_id),
            "ood": highest_faithful_sparsity(vs_sparsity, "ood", full_ood),
        },
        "multiseed": multiseed,
        "chance_core_size_all_subnetworks": PAPER_HEADS * math.prod(
            (1 - multiseed[n]["head_sparsity"]) ** multiseed[n]["num_seeds"] for n in ("sp50", "sp70")),
        "effective_size": paper_effective_size(raw["acc_over_ft"], raw["grid"]),
    }


def paper_effective_size(acc_over_ft: Mapping[str, Any], grid: Mapping[str, Any]) -> dict[str, Any]:
    """Effective size per checkpoint from the released grid, with the library's definition (per seed, then the
    mean; margin 0.03): ID = MNLI matched + mismatched, OOD = the four HANS subcases, mixed = all six."""
    from hf_heuristic_core.evaluation.effective_size import effective_size_per_seed

    steps = sorted(acc_over_ft, key=int)
    out: dict[str, Any] = {"steps": [int(s) for s in steps], "fraction": [int(s) / int(steps[-1]) for s in steps]}
    for name, cases in (("id", list(PAPER_ID)), ("ood", list(SHARED_OOD)), ("mixed", None)):
        means, stds = [], []
        for step in steps:
            pruned = {seed: {sparsity_key(pct, True): row for pct, row in by_step[step].items()}
                      for seed, by_step in grid.items()}
            result = effective_size_per_seed(acc_over_ft[step], pruned, cases=cases, margin=MARGIN)
            means.append(result["mean"])
            stds.append(result["std"])
        out[name], out[f"{name}_std"] = means, stds
    out["num_seeds"] = len(grid)
    return out


def study_side(study_dir: Path) -> dict[str, Any]:
    """The default study's quantities from its report.json and finetune/effective_size.json."""
    paths = require_files(
        study_dir, STUDY_FILES,
        "Pass --study_dir a study's output folder (the committed one is docs/study_default; a new one comes from "
        "`hf-heuristic-core study --output_dir DIR`).")
    report, tracking = _read_json(paths["report"]), _read_json(paths["effective_size"])
    analysis = report["analysis"]
    ood_all = list(report["study"]["groups"]["ood"])
    missing = [c for c in SHARED_OOD if c not in ood_all]
    if missing:
        raise InputError(f"{paths['report']}: the study has no OOD subcase(s) {missing}, so it cannot be set beside "
                         "the paper's four; run the study with the default generated data")
    checkpoints = [c for c in tracking["checkpoints"] if c.get("status") == "done"]
    groups = {"id": OUR_ID, "ood": SHARED_OOD, "ood_all": ood_all, **{SHORT[c]: (c,) for c in SHARED_OOD}}
    over_ft = curve_over_finetuning({str(c["step"]): c["full_accuracy"] for c in checkpoints}, groups)
    final = checkpoints[-1]

    full = analysis["full_model"]
    full_id, full_ood = mean_over(full, OUR_ID), mean_over(full, SHARED_OOD)
    # Accuracy vs sparsity, two sources: the multi-seed analysis (200-step runs) and the tracking's nested search of
    # the final checkpoint (100-step runs, cells left out where early stopping had settled the answer).
    by_seed: dict[str, dict[str, dict[str, float]]] = {}
    for row in analysis["results"]:
        by_seed.setdefault(str(row["seed"]), {})[str(row["sparsity"])] = row
    analysis_curve = accuracy_vs_sparsity(by_seed, {"id": OUR_ID, "ood": SHARED_OOD, "ood_all": ood_all},
                                          percent=False)
    tracking_curve = accuracy_vs_sparsity(final["pruned_accuracy"],
                                          {"id": OUR_ID, "ood": SHARED_OOD, "ood_all": ood_all}, percent=False)
    with_full = {0.0: {"id": seed_stats([full_id]), "ood": seed_stats([full_ood]),
                       "ood_all": seed_stats([mean_over(full, ood_all)])}, **analysis_curve}

    multiseed: dict[str, Any] = {}
    stats = analysis["mask_statistics"]["per_sparsity"]
    for name, level in (("sp50", 0.5), ("sp70", 0.7)):
        rows = [r for r in analysis["results"] if math.isclose(r["sparsity"], level)]
        per_seed_id = [mean_over(r, OUR_ID) for r in rows]
        per_seed_ood = [mean_over(r, SHARED_OOD) for r in rows]
        mask = stats[name]
        kept = [sum(map(sum, mask["head_frequency"])) / mask["num_masks"]]
        multiseed[name] = {
            "sparsity": level,
            "num_seeds": len(rows),
            "id_cases": list(OUR_ID),
            "realized_sparsity": seed_stats([r["realized_sparsity"] for r in rows]),
            "id": {"full": full_id, "pruned": seed_stats(per_seed_id)},
            "ood": {"full": full_ood, "pruned": seed_stats(per_seed_ood)},
            "id_drop": drop(full_id, statistics.fmean(per_seed_id)),
            "ood_drop": drop(full_ood, statistics.fmean(per_seed_ood)),
            "cases": {c: {"full": float(full[c]), **seed_stats([r[c] for r in rows])} for c in (*OUR_ID, *SHARED_OOD)},
            "kept_heads_mean": kept[0],
            "head_sparsity": mask["core"]["head_sparsity"],
            "core_size": mask["core"]["size"],
            "core_heads": mask["core"]["heads"],
            "core_mlps": mask["core"]["mlps"],
            "mlps_kept_by_all": len(mask["core"]["mlps"]),
            "chance_core_size": mask["core"]["chance_size"],
            "chance_core_size_recomputed": chance_core_size(mask["core"]["num_heads"], mask["core"]["head_sparsity"],
                                                            mask["num_masks"]),
        }
    both = sorted(set(stats["sp50"]["core"]["heads"]) & set(stats["sp70"]["core"]["heads"]))
    num_heads = stats["sp70"]["core"]["num_heads"]
    chance_both = num_heads * math.prod((1 - stats[n]["core"]["head_sparsity"]) ** stats[n]["num_masks"]
                                        for n in ("sp50", "sp70"))
    spearman = analysis["mask_statistics"]["spearman"][0]
    return {
        "source": "hf-heuristic-core study (defaults): MiniLM, generated HANS-style data, CPU",
        "study_dir": str(study_dir),
        "model": {"layers": len(stats["sp70"]["head_frequency"]), "heads": num_heads},
        "groups": {"id": list(OUR_ID), "ood": list(SHARED_OOD), "ood_all": ood_all},
        "finetune_steps": over_ft["steps"][-1],
        "over_finetuning": over_ft,
        "last_checkpoint_full": {c: float(v) for c, v in final["full_accuracy"].items()},
        "reach_fraction": {g: first_fraction_reaching(over_ft["fraction"], over_ft[g]) for g in ("id", "ood",
                                                                                                  "ood_all")},
        "accuracy_vs_sparsity": {str(sp): cell for sp, cell in with_full.items()},
        "accuracy_vs_sparsity_tracking_final": {str(sp): cell for sp, cell in tracking_curve.items()},
        "accuracy_vs_sparsity_full": {"id": full_id, "ood": full_ood},
        "first_sparsity_below_margin": {
            "id": first_sparsity_below(with_full, "id", full_id),
            "ood": first_sparsity_below(with_full, "ood", full_ood),
            "measured_levels": sorted(with_full),
        },
        "highest_faithful_sparsity": {
            "id": highest_faithful_sparsity(with_full, "id", full_id),
            "ood": highest_faithful_sparsity(with_full, "ood", full_ood),
        },
        "multiseed": multiseed,
        "core_all_subnetworks": {"heads": both, "size": len(both),
                                 "num_subnetworks": stats["sp50"]["num_masks"] + stats["sp70"]["num_masks"],
                                 "chance_size": chance_both},
        "spearman_50_70": {"rho": spearman["rho"], "p_value": spearman["p_value"]},
        "effective_size": {
            "steps": over_ft["steps"],
            "fraction": over_ft["fraction"],
            **{g: [c["effective_size"][g] for c in checkpoints] for g in ("id", "ood", "mixed")},
            **{f"{g}_std": [c["effective_size_std"][g] for c in checkpoints] for g in ("id", "ood", "mixed")},
            "num_seeds": len(tracking["settings"]["seeds"]),
            "levels": tracking["settings"]["sparsities"],
            "ood_cases": tracking["settings"]["groups"]["ood"],
        },
    }


def findings(paper: Mapping[str, Any], ours: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The qualitative claims, each as a yes/no per side (None: cannot be judged from that side's data)."""
    def lag(side: Mapping[str, Any]) -> bool | None:
        id_x, ood_x = side["reach_fraction"]["id"], side["reach_fraction"]["ood"]
        return None if id_x is None or ood_x is None else ood_x > id_x

    def falls_earlier(side: Mapping[str, Any]) -> bool:
        faithful = side["highest_faithful_sparsity"]
        return faithful["ood"] < faithful["id"]

    def same_id_spread_ood(side: Mapping[str, Any]) -> bool:
        """Within the margin of the full model on ID at 50%, with one OOD subcase spread over 3x the widest ID range."""
        spread = spreads(side)
        return (side["multiseed"]["sp50"]["id_drop"] <= MARGIN
                and spread["widest_ood_case_50"]["range"] > 3 * spread["id_range_50"])

    def sparser_worse(side: Mapping[str, Any]) -> bool:
        """More OOD accuracy lost at 70% than at 50%, by more than the seeds' spread (std) at either sparsity."""
        spread = spreads(side)
        return spread["ood_extra_drop_70"] > spread["ood_seed_std"]

    def size_rises(side: Mapping[str, Any], group: str) -> bool:
        values = side["effective_size"][group]
        return values[-1] - values[0] >= RISE - EPS

    def id_flat(side: Mapping[str, Any]) -> bool:
        values = side["effective_size"]["id"]
        return abs(values[-1] - values[0]) <= FLAT + EPS

    return {
        "ood_lags_id_over_finetuning": {"paper": lag(paper), "ours": lag(ours)},
        "ood_falls_at_lower_sparsity_than_id": {"paper": falls_earlier(paper), "ours": falls_earlier(ours)},
        "same_id_different_ood_at_50": {"paper": same_id_spread_ood(paper), "ours": same_id_spread_ood(ours)},
        "sparser_subnetworks_generalize_worse": {"paper": sparser_worse(paper), "ours": sparser_worse(ours)},
        "ood_effective_size_rises": {"paper": size_rises(paper, "ood"), "ours": size_rises(ours, "ood")},
        "id_effective_size_flat": {"paper": id_flat(paper), "ours": id_flat(ours)},
        "core_far_above_chance": {
            "paper": PAPER_TEXT["core_heads_all_subnetworks"]["value"]
            >= CHANCE_FACTOR * paper["chance_core_size_all_subnetworks"],
            "ours": ours["core_all_subnetworks"]["size"]
            >= CHANCE_FACTOR * ours["core_all_subnetworks"]["chance_size"]},
        "every_mlp_kept": {
            "paper": True if PAPER_TEXT["mlps_never_pruned"]["value"] else None,
            "ours": all(ours["multiseed"][n]["mlps_kept_by_all"] == ours["model"]["layers"] for n in ("sp50", "sp70"))},
    }


def spreads(side: Mapping[str, Any]) -> dict[str, Any]:
    """How far the seeds spread at 50% (widest ID set, widest shared OOD subcase) and how much more OOD accuracy 70%
    loses than 50%, next to the seeds' spread of the OOD mean."""
    at50, at70 = side["multiseed"]["sp50"], side["multiseed"]["sp70"]
    ranges = {c: at50["cases"][c]["max"] - at50["cases"][c]["min"] for c in SHARED_OOD}
    widest = max(ranges, key=ranges.get)
    return {
        "id_range_50": max(at50["cases"][c]["max"] - at50["cases"][c]["min"] for c in at50["id_cases"]),
        "widest_ood_case_50": {"case": widest, "name": SHORT[widest], "range": ranges[widest],
                               "min": at50["cases"][widest]["min"], "max": at50["cases"][widest]["max"]},
        "ood_extra_drop_70": at70["ood_drop"] - at50["ood_drop"],
        "ood_seed_std": max(at50["ood"]["pruned"]["std"], at70["ood"]["pruned"]["std"]),
    }


def compare(paper_dir: Path, study_dir: Path) -> dict[str, Any]:
    paper, ours = paper_side(paper_dir), study_side(study_dir)
    paper["spreads"], ours["spreads"] = spreads(paper), spreads(ours)
    kept70 = paper["multiseed"]["sp70"]["kept_heads"]["mean"]
    core = PAPER_TEXT["core_heads_all_subnetworks"]["value"]
    return {
        "settings": {"margin": MARGIN, "reach_share": REACH_SHARE, "rise": RISE, "flat": FLAT,
                     "chance_factor": CHANCE_FACTOR, "shared_ood_cases": list(SHARED_OOD), "short_names": SHORT},
        "paper": paper,
        "paper_text": PAPER_TEXT,
        "ours": ours,
        "core_vs_chance": {
            "paper": core / paper["chance_core_size_all_subnetworks"],
            "ours": ours["core_all_subnetworks"]["size"] / ours["core_all_subnetworks"]["chance_size"],
        },
        "core_share_of_kept_heads_70": {
            "paper": core / kept70,
            "ours": ours["multiseed"]["sp70"]["core_size"] / ours["multiseed"]["sp70"]["kept_heads_mean"],
            "ours_all_subnetworks": ours["core_all_subnetworks"]["size"] / ours["multiseed"]["sp70"][
                "kept_heads_mean"],
        },
        "findings": findings(paper, ours),
    }


# ------------------------------------------------------------------------------------------------ figure


def _legend_right(ax: Any) -> None:
    ax.legend(fontsize=7.5, loc="center left", bbox_to_anchor=(1.02, 0.5), framealpha=0.9)


def draw(result: Mapping[str, Any], figure: Path) -> None:
    """Three rows (accuracy over fine-tuning, accuracy vs sparsity, effective size), paper left, study right, on the
    same axes: x as the fraction of fine-tuning steps or the sparsity, y from 0 to 1."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 2, figsize=(13.5, 11.5), sharey="row")
    sides = (("paper", "Paper: BERT-base, MNLI / HANS", result["paper"]),
             ("ours", "Default study: MiniLM, generated HANS-style", result["ours"]))
    colors = {"id": "black", "ood": "tab:red", "ood_all": "tab:orange", "SO-Swap": "tab:blue", "Prep": "tab:cyan",
              "Embed-If": "tab:green", "Embed-Verb": "tab:olive", "mixed": "tab:purple"}
    for col, (key, title, side) in enumerate(sides):
        ax = axes[0, col]
        curve = side["over_finetuning"]
        ax.plot(curve["fraction"], curve["id"], "o-", color=colors["id"], lw=2, label="ID")
        ax.plot(curve["fraction"], curve["ood"], "o-", color=colors["ood"], lw=2, label="OOD: mean of the 4 subcases")
        if "ood_all" in curve:
            ax.plot(curve["fraction"], curve["ood_all"], "o:", color=colors["ood_all"], lw=1.5,
                    label=f"OOD: the study's {len(side['groups']['ood_all'])} subcases")
        subcases = side.get(FIGURE_ONLY, {}).get("over_finetuning", curve)
        for name in SHORT.values():
            ax.plot(subcases["fraction"], subcases[name], ".--", color=colors[name], lw=1, label=name)
        ax.set_title(f"{title}\nfull model over fine-tuning ({curve['steps'][-1]:,} steps)", fontsize=10)
        ax.set_xlabel("fraction of fine-tuning steps")
        ax.set_xlim(0, 1.02)

        ax = axes[1, col]
        cells = side["accuracy_vs_sparsity"]
        for group in ("id", "ood", "ood_all"):
            xs = sorted(float(s) for s in cells if group in cells[s])
            if not xs:
                continue
            ns = sorted({cells[str(x)][group]["n"] for x in xs if x > 0})
            name = {"id": "ID", "ood": "OOD (4 subcases)", "ood_all": f"OOD (the study's "
                    f"{len(side['groups'].get('ood_all', []))} subcases)"}[group]
            ax.errorbar([100 * x for x in xs], [cells[str(x)][group]["mean"] for x in xs],
                        yerr=[cells[str(x)][group]["std"] for x in xs], fmt="o-" if group != "ood_all" else "o:",
                        color=colors[group], capsize=3, label=f"{name}, {'/'.join(map(str, ns))} seeds")
        if key == "ours":
            tracked = side["accuracy_vs_sparsity_tracking_final"]
            for group in ("id", "ood"):
                txs = sorted(float(s) for s in tracked if group in tracked[s])
                ax.plot([100 * x for x in txs], [tracked[str(x)][group]["mean"] for x in txs], "s--",
                        color=colors[group], alpha=0.5, mfc="none",
                        label=f"{'ID' if group == 'id' else 'OOD (4)'}, effective-size search of the last checkpoint")
        ax.set_title("subnetworks of the final model (mean ± std over seeds)", fontsize=10)
        ax.set_xlabel("sparsity (%)")
        ax.set_xlim(-2, 72)

        ax = axes[2, col]
        size = side["effective_size"]
        for group in ("id", "ood", "mixed"):
            ax.errorbar(size["fraction"], size[group], yerr=size[f"{group}_std"], fmt="o-", color=colors[group],
                        capsize=3, label={"id": "ID", "ood": "OOD", "mixed": "mixed"}[group])
        ood_n = len(SHARED_OOD) if key == "paper" else len(size["ood_cases"])
        ax.set_title(f"effective size over fine-tuning ({size['num_seeds']} seeds; OOD: {ood_n} subcases)",
                     fontsize=10)
        ax.set_xlabel("fraction of fine-tuning steps")
        ax.set_xlim(0, 1.02)
    axes[0, 0].set_ylabel("accuracy")
    axes[1, 0].set_ylabel("accuracy")
    axes[2, 0].set_ylabel("effective size (1 - highest faithful sparsity)")
    axes[1, 0].legend(fontsize=7.5, loc="lower left")
    for row in range(3):
        _legend_right(axes[row, 1])
    for ax in axes.flat:
        ax.set_ylim(-0.03, 1.03)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    figure.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(figure, lambda tmp: fig.savefig(tmp, format="png", dpi=100))
    plt.close(fig)


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--study_dir", type=Path, default=Path("docs/study_default"))
    parser.add_argument("--paper_dir", type=Path, default=Path("../shared/data/heuristic-core-eval"))
    parser.add_argument("--output", type=Path, default=Path(
        "benchmarks/reproductions/results/compare_heuristic_core/study-default_vs_paper-mnli.json"))
    parser.add_argument("--figure", type=Path, default=Path("docs/figures/heuristic_core_side_by_side.png"))
    args = parser.parse_args(None if argv is None else list(argv))
    try:
        result = compare(args.paper_dir, args.study_dir)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    result["command"] = {"study_dir": str(args.study_dir), "paper_dir": str(args.paper_dir),
                         "figure": str(args.figure)}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.output, json.dumps(without_figure_only(result), indent=1) + "\n")
    draw(result, args.figure)
    print(f"wrote {args.output} and {args.figure}")
    for name, verdict in result["findings"].items():
        print(f"  {name}: paper {verdict['paper']}, ours {verdict['ours']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
