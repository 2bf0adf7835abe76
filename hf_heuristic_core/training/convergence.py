"""Does a pruning run's subnetwork mean anything? The check every run ends with.

A run too short for its recipe returns exactly as many pruned units as asked, so its sparsity looks right while its
ranking is little more than the initialization noise. Two measurements tell the difference:

* **faithfulness against chance:** the KL to the full model of the learned subnetwork, next to the median KL of
  random subnetworks with the same number of units in every layer (same kinds, same per-layer counts). A learned
  subnetwork should be far more faithful than random ones; "converged" asks for at most `MAX_KL_RATIO` of their median.
  When random subnetworks of this size are already faithful (median KL below `MIN_RANDOM_KL`), the comparison says
  nothing and the verdict rests on the second measurement alone;
* **whether the logits moved:** the rank correlation between the final and the initial logits. Near 1, the final
  ranking is the initial one, i.e. noise.

The verdict has three values (`status`): "converged", "not_converged", or "inconclusive" when random subnetworks of
this size are already faithful, so faithfulness cannot tell a learned subnetwork from chance (e.g. a classifier with
an untrained head, whose outputs hardly depend on its heads). `converged` is True, False or None (inconclusive).
Artifacts written before the third value (`converged: true` with an "inconclusive: ..." verdict) read as
inconclusive through `verdict_status`.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterable, Mapping

import torch

from ..verdicts import CONVERGED, INCONCLUSIVE, NOT_CONVERGED, verdict_line, verdict_status
from .losses import kl_to_teacher

__all__ = ["CONVERGED", "ConvergenceReport", "INCONCLUSIVE", "MAX_KL_RATIO", "MAX_INIT_CORRELATION", "MIN_RANDOM_KL",
           "NOT_CONVERGED", "check_convergence", "inconclusive_advice", "init_rank_correlation", "not_converged_advice",
           "nothing_pruned_advice", "random_masks_like", "verdict_line", "verdict_status"]

MAX_KL_RATIO = 0.5
MIN_RANDOM_KL = 1e-3
MAX_INIT_CORRELATION = 0.9


@dataclass
class ConvergenceReport:
    """The verdict of `check_convergence`, stored in the artifact (config `extra["convergence"]`, model card).
    `converged` is None when the check is inconclusive (`status` says which of the three it is)."""

    converged: bool | None
    verdict: str
    kl: float
    random_kl_median: float
    kl_ratio: float | None
    init_rank_correlation: float | None
    random_kl: list[float]
    subnetworks: int
    batches: int
    advice: str | None = None
    status: str = ""

    def __post_init__(self) -> None:
        if not self.status:
            self.status = CONVERGED if self.converged else INCONCLUSIVE if self.converged is None else NOT_CONVERGED

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def random_masks_like(masks: Mapping[str, torch.Tensor], kinds: Mapping[str, Any], enabled: Iterable[str],
                      generator: torch.Generator) -> dict[str, torch.Tensor]:
    """A random subnetwork with as many kept entries as `masks` in every layer of every enabled kind (kinds with one
    entry per layer, such as MLP blocks, keep their total count instead); other kinds stay as they are."""
    enabled = set(enabled)
    out = {}
    for name, mask in masks.items():
        mask = mask.detach().float().cpu()
        spec = kinds.get(name)
        if name not in enabled:
            out[name] = mask.clone()
            continue
        per_layer = spec is not None and spec.layer_dim == 0 and mask.dim() > 1
        rows = mask.reshape(mask.shape[0], -1) if per_layer else mask.reshape(1, -1)
        shuffled = torch.stack([row[torch.randperm(row.numel(), generator=generator)] for row in rows])
        out[name] = shuffled.reshape(mask.shape)
    return out


def init_rank_correlation(initial: Mapping[str, torch.Tensor], final: Mapping[str, torch.Tensor]) -> float | None:
    """Spearman's rho between the initial and the final logits of all entries (None with fewer than 3)."""
    kinds = [k for k in final if k in initial]
    if not kinds:
        return None
    a = torch.cat([initial[k].detach().double().flatten().cpu() for k in kinds])
    b = torch.cat([final[k].detach().double().flatten().cpu() for k in kinds])
    if a.numel() < 3 or bool((a == a[0]).all()) or bool((b == b[0]).all()):
        return None   # a constant side has no ranking to keep or lose
    from scipy.stats import spearmanr
    return float(spearmanr(a.numpy(), b.numpy()).statistic)


@torch.no_grad()
def subnetwork_kls(forward: Callable[[dict], torch.Tensor], teacher: list[torch.Tensor], batches: list[dict],
                   apply_masks: Callable[[Mapping[str, torch.Tensor]], Any],
                   subnetworks: list[Mapping[str, torch.Tensor]]) -> list[float]:
    """KL(full || subnetwork) of each subnetwork, averaged over the items of `batches` (examples, or real tokens)."""
    results = []
    for masks in subnetworks:
        total = count = 0.0
        with apply_masks(masks):
            for batch, full in zip(batches, teacher):
                student = forward(batch)
                mask = batch.get("attention_mask")
                items = student.shape[0] if student.dim() == 2 else float(mask.sum()) if mask is not None \
                    else student.shape[0] * student.shape[1]
                total += float(kl_to_teacher(student, full, mask)) * items
                count += items
        results.append(total / max(count, 1.0))
    return results


def check_convergence(kl: float, random_kl: list[float], correlation: float | None, batches: int,
                      recipe: str | None = None, control: str = "lagrangian", nothing_pruned: str | None = None,
                      sparsity: float | None = None) -> ConvergenceReport:
    """The verdict from the measurements (see the module docstring). `recipe` and `control` (the run's recipe and
    sparsity control) shape the advice, which never suggests the setting already in use. `nothing_pruned`: why the
    final masks keep every unit (e.g. a fixed penalty too weak to prune anything), which makes the run not converged
    whatever the KLs say (the subnetwork is the full model, so random ones of its size are too). `sparsity`: what the
    final masks pruned, named by the advice of an inconclusive fixed-penalty run (it decides that size)."""
    median = statistics.median(random_kl)
    ratio = kl / median if median > 0 else None
    moved = correlation is None or correlation <= MAX_INIT_CORRELATION
    converged: bool | None
    if nothing_pruned:
        return ConvergenceReport(False, f"nothing was pruned: {nothing_pruned}", kl, median, ratio, correlation,
                                 random_kl, len(random_kl), batches, nothing_pruned_advice(control))
    if median < MIN_RANDOM_KL:
        verdict = "inconclusive: random subnetworks of this size are faithful too"
        converged = None
    elif ratio is not None and ratio <= MAX_KL_RATIO:
        verdict = "converged"
        converged = True
    else:
        verdict = "no more faithful than random subnetworks of the same size"
        converged = False
    if not moved:
        verdict = "the mask logits kept their initial ranking"
        converged = False
    advice = None
    if converged is None:
        advice = inconclusive_advice(control, sparsity)
    elif not converged:
        advice = not_converged_advice(moved, recipe, control)
    return ConvergenceReport(converged, verdict, kl, median, ratio, correlation, random_kl, len(random_kl), batches,
                             advice)


def inconclusive_advice(control: str, sparsity: float | None = None) -> str:
    """What to change when random subnetworks of the run's size match the full model. Under a fixed penalty the
    penalty chose that size, and a small one is the likely cause (1 unit of 78 pruned was blamed on an untrained
    head); an untrained head is the other cause either way."""
    first = (f"Random subnetworks of this size already match the full model (median KL below {MIN_RANDOM_KL:g}), so "
             "faithfulness cannot tell this subnetwork from chance")
    head = ("the model's outputs hardly depend on the pruned units (an untrained classification head?). Prune a model "
            "that was trained for its task, or judge the subnetwork on data where the full model's predictions vary.")
    if control != "penalty":
        return f"{first}: {head}"
    pruned = f"pruned only {sparsity:.1%} of the units" if sparsity is not None else "chose this size"
    return (f"{first}. The fixed penalty (sparsity_control='penalty') {pruned}: subnetworks that close to the full "
            "model are faithful whatever they keep; raise penalty_weight (e.g. 10x), train longer, or set a target with "
            f"sparsity_control='lagrangian' and target_sparsity. Otherwise {head}")


def nothing_pruned_advice(control: str) -> str:
    """What to change when the final masks keep every unit."""
    if control == "penalty":
        return ("The fixed penalty (sparsity_control='penalty') was too weak to prune any unit in this run: raise "
                "penalty_weight (e.g. 10x), train longer, or set a target with sparsity_control='lagrangian' and "
                "target_sparsity.")
    return ("The final binarization kept every unit: use final_binarization='topk' (exactly target_sparsity of the "
            "units pruned), lower final_threshold, or train longer.")


def not_converged_advice(moved: bool, recipe: str | None, control: str) -> str:
    """Advice for a run that did not converge, without the setting it already uses."""
    if control == "penalty":
        return ("The masks " + ("barely moved from their initialization" if not moved else
                                "are no more faithful than random ones of their size") +
                " under the fixed penalty: train longer, or change penalty_weight (a weaker penalty prunes less); "
                "check that the training data exercises the behaviour you prune for.")
    if not moved:
        if recipe == "short":
            return ("The masks barely moved from their initialization, even with the short recipe: train longer "
                    "(more max_steps), or raise mask_learning_rate.")
        return ("The run was too short for its recipe: the masks barely moved from their initialization. Use "
                "PruningArguments(recipe='short') (init 3, expected-L0 penalty, multiplier lr 0.1) for runs of a "
                "few hundred steps, or train longer (the paper's recipe needs ~9000 steps).")
    shorter = "" if recipe == "short" else ", or use recipe='short' for a short run"
    return (f"Train longer, lower target_sparsity{shorter}; check that the training data exercises the behaviour you "
            "prune for.")
