"""Faithfulness over circuit size, and its two areas (CPR, CMD), as MIB's circuit-localization track reports them.

From `MIB_circuit_track/evaluation.py` (`evaluate_area_under_curve`, repository `hannamw/MIB-circuit-track`):

    f(C) = (m(C) - m(empty)) / (m(full) - m(empty))

at each circuit size `p` in `(.001, .002, .005, .01, .02, .05, .1, .2, .5, 1)` (fractions of the scored units), with `m`
the mean logit difference (`circuits.metrics`). The areas use the trapezoid rule over those ten points on a linear
axis of fractions (MIB's default, `log_scale=False`):

    area under  = sum_i (p_{i+1} - p_i) * (f_i + f_{i+1}) / 2                  (CPR, higher is better)
    area from 1 = sum_i (p_{i+1} - p_i) * (|1 - f_i| + |1 - f_{i+1}|) / 2      (CMD, lower is better)

**Two rankings, two curves.** `run_evaluation.py` ranks by the signed score, or by |score| with `--absolute`, and
saves both areas of that one curve; `print_results.py` (what the paper and the leaderboard report) takes **CPR from
the signed run** (`abs-False`) and **CMD from the |score| run** (`abs-True`) whenever both exist. So each curve here
is drawn for both rankings: `cpr` and `cmd` are MIB's; `cmd_signed_ranking` and `cpr_absolute_ranking` are the
other areas of each curve, kept under names that say what they are. Sizes where both rankings pick the same units
are evaluated once (always so for scores of one sign, e.g. exported mask scores).

How this package evaluates a circuit: the circuit's heads and MLP blocks keep their activations and every other one
is ablated with `PrunableModel.set_masks` (mean, zero or resample ablation, the package's own hooks). MIB replaces an
excluded node's output in every downstream input, which for a node-level circuit is the same as replacing the node's
output. Two differences remain and are stated with every result: MIB's default ablation is patching from a designed
counterfactual prompt (resample takes another example of the batch, mean takes the data mean); and MIB's `m(empty)`
(`graph.apply_topn(0)` at edge level) also ablates the token embeddings, which this package never does, so here
`m(empty)` is the model with every head and MLP block ablated and the embeddings intact.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from .._keywords import settings_from_keywords
from ..errors import PruningError
from .batches import MetricBatch, metric_batches, metric_mean
from .metrics import Metric, logit_difference
from .ranking import MIB_CURVE_SIZES, circuit_size, scored_count, top_units

logger = logging.getLogger(__name__)

__all__ = ["CurveSettings", "FaithfulnessCurve", "area_under_curves", "faithfulness_curve", "faithfulness_curves"]

# |m(full) - m(empty)| below this share of the metric's typical size makes f a ratio of noise.
MIN_RELATIVE_GAP = 1e-3


def area_under_curves(sizes: Sequence[float], faithfulness: Sequence[float],
                      log_scale: bool = False) -> tuple[float, float]:
    """(CPR, CMD) of a faithfulness curve by MIB's trapezoid rule (see the module docstring)."""
    if len(sizes) != len(faithfulness) or len(sizes) < 2:
        raise ValueError(f"a curve needs at least two points and one faithfulness per size; got {len(sizes)} sizes "
                         f"and {len(faithfulness)} values.")
    if any(b <= a for a, b in zip(sizes, sizes[1:])):
        raise ValueError(f"circuit sizes must increase, got {list(sizes)}.")
    under = from_one = 0.0
    for i in range(len(sizes) - 1):
        x1, x2 = (math.log(sizes[i]), math.log(sizes[i + 1])) if log_scale else (sizes[i], sizes[i + 1])
        f1, f2 = faithfulness[i], faithfulness[i + 1]
        under += (x2 - x1) * (f1 + f2) / 2
        from_one += (x2 - x1) * (abs(1.0 - f1) + abs(1.0 - f2)) / 2
    return under, from_one


@dataclass
class FaithfulnessCurve:
    """One ranking's curves: per size the units kept, `m(C)` and `f` of the signed ranking (and of the |score|
    ranking, `*_absolute`); the references; MIB's CPR (signed ranking) and CMD (|score| ranking); the mean f of the
    signed curve (`average`). A curve read from a file written before both rankings were drawn has no
    `faithfulness_absolute`, and its `cmd` is that of the signed ranking (`mib_cmd` says which)."""

    name: str
    sizes: list[float]
    units: list[int]
    metric_values: list[float]
    faithfulness: list[float]
    m_full: float
    m_empty: float
    cpr: float
    cmd: float
    average: float
    ablation: str
    metric: str = "logit_difference"
    n_scored: int = 0
    n_units: int = 0
    examples: int = 0
    warnings: list[str] = field(default_factory=list)
    # The |score| ranking's curve (MIB's CMD is its area from 1) and the areas MIB does not report.
    metric_values_absolute: list[float] = field(default_factory=list)
    faithfulness_absolute: list[float] = field(default_factory=list)
    cmd_signed_ranking: float | None = None
    cpr_absolute_ranking: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "mib_cmd": self.mib_cmd}

    @property
    def mib_cmd(self) -> bool:
        """Whether `cmd` is MIB's (from the |score| ranking): false only for curves saved by earlier versions."""
        return self.cmd_signed_ranking is not None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "FaithfulnessCurve":
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


def _all_units(prunable: Any, value: float) -> dict[str, torch.Tensor]:
    return {kind: torch.full(tuple(shape), float(value)) for kind, shape in prunable.mask_shapes().items()}


def _check_scores(prunable: Any, scores: Mapping[str, Any], name: str) -> dict[str, torch.Tensor]:
    shapes = prunable.mask_shapes()
    unknown = sorted(set(scores) - set(shapes))
    if unknown:
        raise PruningError(f"Ranking {name!r} scores unknown unit kind(s) {unknown}; this model's kinds are "
                           f"{sorted(shapes)}.")
    checked = {}
    for kind, shape in shapes.items():
        value = scores.get(kind)
        tensor = torch.full(tuple(shape), float("nan"), dtype=torch.float64) if value is None else \
            torch.as_tensor(value, dtype=torch.float64).detach().cpu()
        if tuple(tensor.shape) != tuple(shape):
            raise PruningError(f"Ranking {name!r}: {kind} scores have shape {tuple(tensor.shape)}, this model needs "
                               f"{list(shape)}.")
        checked[kind] = tensor
    if scored_count(checked) == 0:
        raise PruningError(f"Ranking {name!r} scores no unit (all NaN); there is nothing to rank.")
    return checked


@dataclass(frozen=True)
class CurveSettings:
    """How `faithfulness_curves` draws its curves: the `ablation` mode (None: the model's), the circuit `sizes`, the
    `metric` and a progress bar. (`absolute` is gone: both rankings are always drawn, see the module docstring.)"""

    ablation: str | None = None
    sizes: Sequence[float] = MIB_CURVE_SIZES
    metric: Metric = logit_difference
    absolute: bool | None = None
    show_progress: bool = False

    def __post_init__(self) -> None:
        if self.absolute is not None:
            raise PruningError(f"CurveSettings(absolute={self.absolute!r}): faithfulness curves now draw both "
                               "rankings, as MIB reports them: `cpr` from the signed ranking, `cmd` from the |score| "
                               "ranking (`faithfulness_absolute` is that curve). Drop `absolute`.")


def faithfulness_curves(prunable: Any, data: Any, rankings: Mapping[str, Mapping[str, Any]],
                        settings: CurveSettings | None = None, *, batch_size: int = 32, collate_fn: Any = None,
                        batches: list[MetricBatch] | None = None, **keywords: Any) -> dict[str, FaithfulnessCurve]:
    """MIB's faithfulness curve of each ranking (name -> unit scores by kind; NaN = unscored, always kept).

    `m(full)` and `m(empty)` are computed once and shared. `ablation` (default: the model's) must have its means
    computed for mean ablation. Returns the curves by ranking name, in the order given. The curve settings travel as
    one `CurveSettings`; its fields are also accepted as keywords (`ablation=`, `sizes=`, ...).
    """
    settings = settings_from_keywords("faithfulness_curves", CurveSettings, settings, keywords)
    mode = settings.ablation or prunable.pruning_config.ablation
    checked = {name: _check_scores(prunable, scores, name) for name, scores in rankings.items()}
    batches = batches if batches is not None else metric_batches(prunable, data, batch_size, collate_fn)
    examples = sum(batch.size for batch in batches)
    metric = settings.metric
    was_training = prunable.training
    prunable.eval()
    try:
        with prunable.using_ablation(mode):
            with prunable.masks_disabled():
                m_full = metric_mean(prunable, batches, metric)
            with prunable.masks_applied(_all_units(prunable, 0.0)):
                m_empty = metric_mean(prunable, batches, metric)
            curves = {}
            for name, scores in checked.items():
                curves[name] = _curve(prunable, batches, metric, name, scores, settings.sizes, m_full, m_empty,
                                      mode, examples, settings.show_progress)
    finally:
        prunable.train(was_training)
    return curves


def faithfulness_curve(prunable: Any, data: Any, scores: Mapping[str, Any], name: str = "ranking",
                       **kwargs: Any) -> FaithfulnessCurve:
    """`faithfulness_curves` for one ranking."""
    return faithfulness_curves(prunable, data, {name: scores}, **kwargs)[name]


def _curve(prunable: Any, batches: list[MetricBatch], metric: Metric, name: str, scores: dict[str, torch.Tensor],
           sizes: Sequence[float], m_full: float, m_empty: float, ablation: str, examples: int,
           show_progress: bool) -> FaithfulnessCurve:
    n_scored = scored_count(scores)
    n_units = sum(int(t.numel()) for t in scores.values())
    gap = m_full - m_empty
    warnings = []
    scale = max(abs(m_full), abs(m_empty), 1e-12)
    if abs(gap) < MIN_RELATIVE_GAP * scale or gap == 0:
        warnings.append(f"m(full) = {m_full:.4g} and m(empty) = {m_empty:.4g} are (almost) equal: f divides by "
                        f"{gap:.3g} and means nothing. The task metric does not depend on these units under "
                        f"{ablation} ablation; check the data (labels / answer tokens) and the ablation.")
        logger.warning("Faithfulness of %r: %s", name, warnings[-1])
    measured: dict[bytes, float] = {}   # the same circuit (both rankings, or two sizes) is evaluated once

    def value_of(masks: dict[str, torch.Tensor]) -> float:
        key = b"".join(masks[kind].to(torch.bool).numpy().tobytes() for kind in sorted(masks))
        if key not in measured:
            with prunable.masks_applied(masks):
                measured[key] = metric_mean(prunable, batches, metric)
        return measured[key]

    units, values, faithful, values_abs, faithful_abs = [], [], [], [], []
    for fraction in sizes:
        count = circuit_size(fraction, n_scored)
        for absolute, into, f_into in ((False, values, faithful), (True, values_abs, faithful_abs)):
            value = value_of(top_units(scores, count, absolute))
            into.append(value)
            f_into.append((value - m_empty) / gap if gap != 0 else float("nan"))
        units.append(count)
        if show_progress:
            logger.info("%s: %s of %d units (%d kept): m = %.4g, f = %.4f (|score| ranking: %.4f)", name,
                        f"{fraction:.1%}", n_scored, count, values[-1], faithful[-1], faithful_abs[-1])
    cpr, cmd_signed = area_under_curves(list(sizes), faithful)
    cpr_absolute, cmd = area_under_curves(list(sizes), faithful_abs)
    return FaithfulnessCurve(name, [float(s) for s in sizes], units, values, faithful, m_full, m_empty, cpr, cmd,
                             sum(faithful) / len(faithful), ablation, getattr(metric, "__name__", str(metric)),
                             n_scored, n_units, examples, warnings, values_abs, faithful_abs, cmd_signed,
                             cpr_absolute)
