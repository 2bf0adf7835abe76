"""The climbing search's schedule: one run per seed whose target climbs through the levels, snapshotting each.

Each level is reached by a short ramp, held until the learned (expected) sparsity has reached it and stayed
``settle_steps`` more steps, and then the binarized masks are snapshotted at exactly that level
(``get_masks(binary=True, sparsity=level)``). Later levels start from the masks learned for the earlier ones.
"""

from __future__ import annotations

import logging
import numbers
from dataclasses import dataclass
from typing import Any, Sequence

import torch
from transformers import TrainerCallback

from ..model import PrunableModel
from ..training.trainer import PruningTrainer

logger = logging.getLogger(__name__)

__all__ = ["ClimbSchedule", "ClimbingTrainer", "LevelClimb"]


@dataclass
class ClimbSchedule:
    """How the climbing run moves from one level to the next.

    The target ramps linearly from the previous level to the next over ``ramp_steps`` (the first level, from 0, over
    ``first_ramp_steps``, default ``ramp_steps``), then holds. A level counts as reached once the expected sparsity
    is within ``tolerance_units`` units of it (or beyond it, in the direction of travel); the masks are snapshotted
    ``settle_steps`` steps later. A level not reached within ``max_wait_steps`` of holding is left behind (flagged
    ``reached: False``); its masks are then the top-k of the run's final logits (as in ``nested``) rather than an
    early, barely trained snapshot. ``order="descending"`` prunes to the highest level first and then lets units back
    in level by level.
    """

    ramp_steps: int = 8
    settle_steps: int = 4
    max_wait_steps: int = 12
    tolerance_units: float = 0.5
    first_ramp_steps: int | None = None
    order: str = "ascending"

    def __post_init__(self) -> None:
        for name in ("ramp_steps", "settle_steps", "max_wait_steps", "first_ramp_steps"):
            value = getattr(self, name)
            if value is None and name == "first_ramp_steps":
                continue
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
                raise ValueError(f"ClimbSchedule.{name} must be an integer >= 0, got {value!r}")
        if not self.tolerance_units >= 0:
            raise ValueError(f"ClimbSchedule.tolerance_units must be >= 0, got {self.tolerance_units!r}")
        if self.order not in ("ascending", "descending"):
            raise ValueError(f"ClimbSchedule.order must be 'ascending' or 'descending', got {self.order!r}")

    def ramp(self, index: int) -> int:
        return self.first_ramp_steps if index == 0 and self.first_ramp_steps is not None else self.ramp_steps

    def max_steps(self, num_levels: int) -> int:
        extra = self.max_wait_steps + self.settle_steps + 1
        return sum(self.ramp(i) + extra for i in range(num_levels))


class LevelClimb(TrainerCallback):
    """Target schedule and snapshot taker of one climbing run (read by `ClimbingTrainer.current_target`)."""

    def __init__(self, levels: Sequence[float], num_units: int, schedule: ClimbSchedule) -> None:
        self.levels = sorted(levels, reverse=schedule.order == "descending")
        self.num_units = num_units
        self.schedule = schedule
        self.index = 0
        self.phase_start = 0
        self.reached_at: int | None = None
        self.snapshots: dict[float, dict[str, torch.Tensor]] = {}
        self.events: list[dict[str, Any]] = []

    @property
    def done(self) -> bool:
        return self.index >= len(self.levels)

    def max_steps(self) -> int:
        return self.schedule.max_steps(len(self.levels))

    def _previous(self) -> float:
        return self.levels[self.index - 1] if self.index else 0.0

    def target(self, step: int) -> float:
        if self.done:
            return self.levels[-1]
        level, previous = self.levels[self.index], self._previous()
        ramp = self.schedule.ramp(self.index)
        progress = 1.0 if ramp <= 0 else min(1.0, (step - self.phase_start) / ramp)
        return previous + (level - previous) * progress

    def _reached(self, expected_pruned: float, level: float) -> bool:
        wanted = round(level * self.num_units)
        tolerance = self.schedule.tolerance_units
        if level >= self._previous():
            return expected_pruned >= wanted - tolerance
        return expected_pruned <= wanted + tolerance

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if self.done or model is None:
            return control
        step, level = state.global_step, self.levels[self.index]
        ramp = self.schedule.ramp(self.index)
        held = step - self.phase_start >= ramp
        with torch.no_grad():
            expected_pruned = float(model.expected_sparsity()) * self.num_units
        if held and self.reached_at is None and self._reached(expected_pruned, level):
            self.reached_at = step
        settled = self.reached_at is not None and step - self.reached_at >= self.schedule.settle_steps
        gave_up = step - self.phase_start >= ramp + self.schedule.max_wait_steps + \
            (self.schedule.settle_steps if self.reached_at is not None else 0)
        if settled or gave_up:
            self.snapshot(model, step, expected_pruned / self.num_units, reached=self.reached_at is not None)
            if self.done:
                control.should_training_stop = True
        return control

    def snapshot(self, model: PrunableModel, step: int, expected: float, reached: bool) -> None:
        level = self.levels[self.index]
        self.snapshots[level] = model.get_masks(binary=True, sparsity=level)
        self.events.append({"sparsity": level, "step": step, "expected_sparsity": expected, "reached": reached,
                            "reached_at": self.reached_at})
        if not reached:
            logger.info("climb: expected sparsity %.3f had not reached level %.3f after %d steps; snapshotting the "
                        "top-k masks anyway.", expected, level, step - self.phase_start)
        self.index += 1
        self.phase_start, self.reached_at = step, None


class ClimbingTrainer(PruningTrainer):
    """A `PruningTrainer` whose target follows a `LevelClimb` instead of the linear warm-up schedule."""

    def __init__(self, *args: Any, climb: LevelClimb, **kwargs: Any) -> None:
        self.climb = climb
        super().__init__(*args, **kwargs)
        self.add_callback(climb)

    def current_target(self) -> float:
        return self.climb.target(self.state.global_step)

