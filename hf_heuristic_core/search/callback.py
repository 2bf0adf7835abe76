"""`EffectiveSizeCallback`: effective size of each checkpoint while an ordinary `Trainer` fine-tunes.

On each save (or every N steps) the callback prunes a *copy* of the model with `search_effective_size`, using means
from the training data at that checkpoint, writes the result to ``effective_size.json`` (temp file + rename after
every checkpoint) and logs ``effective_size/<group>`` and ``full_accuracy/<group>``. The fine-tuning run itself is
left exactly as it was: the copy is pruned, and the RNG states (python, numpy, torch, CUDA), module train/eval
flags and Accelerate's shared gradient state are restored, so a run with the callback ends with the same weights as
one without it. Deferred mode only records the checkpoints, for `track_effective_size` to compute later.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import logging
import os
import random
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import numpy as np
import torch
from torch import nn
from transformers import TrainerCallback

from ..evaluation.effective_size import EffectiveSizeError
from ..evaluation.options import EvaluationOptions
from ..training.setup import PruningSetup
from .run import search_effective_size, search_inputs
from .settings import SearchSettings, check_groups
from .tracking import RESULTS_NAME, EffectiveSizeResults, model_signature

logger = logging.getLogger(__name__)

__all__ = ["EffectiveSizeCallback", "preserved_training_state"]


@contextlib.contextmanager
def preserved_training_state(model: nn.Module) -> Iterator[None]:
    """Restore every RNG, the model's per-module train/eval flags and Accelerate's gradient state on exit, so work
    done inside (including building another `Trainer`, which reseeds everything) leaves the outer run untouched."""
    python_state, numpy_state = random.getstate(), np.random.get_state()
    cpu_state = torch.get_rng_state()
    cuda_states = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() \
        else None
    modes = [module.training for module in model.modules()]
    gradient_state = _gradient_state_dict()
    saved_gradient_state = {k: (list(v) if isinstance(v, list) else v) for k, v in gradient_state.items()} \
        if gradient_state is not None else None
    try:
        yield
    finally:
        random.setstate(python_state)
        np.random.set_state(numpy_state)
        torch.set_rng_state(cpu_state)
        if cuda_states is not None:
            torch.cuda.set_rng_state_all(cuda_states)
        for module, mode in zip(model.modules(), modes):
            module.training = mode
        if gradient_state is not None and saved_gradient_state is not None:
            gradient_state.clear()
            gradient_state.update(saved_gradient_state)


def _gradient_state_dict() -> dict | None:
    try:
        from accelerate.state import GradientState
    except ImportError:  # pragma: no cover - accelerate is a Trainer dependency
        return None
    shared = getattr(GradientState, "_shared_state", None)
    return shared if isinstance(shared, dict) else None


class EffectiveSizeCallback(TrainerCallback):
    """Effective size per checkpoint of a fine-tuning run with the stock `Trainer`.

    `eval_sets` / `groups` / `train_dataset` as in `search_effective_size` (tokenized; the training data gives the
    means and the pruning objective). `every_n_steps=None` computes on each save (``checkpoint-<step>``), otherwise
    every N optimizer steps. `deferred=True` records saved checkpoints only (compute later with
    `track_effective_size(output_dir, ...)`, which reads the same file). Results go to `results_file` (default
    ``<output_dir>/effective_size.json``) and to the logs: pass `trainer=` or call `bind(trainer)` to send them
    through `trainer.log` (every `report_to` logger); otherwise they are appended to `state.log_history` and added
    to the next `on_log` call. `settings` (`SearchSettings`) and the other keyword arguments go to
    `search_effective_size` (`evaluation=`, `pruning=`, or its old keywords: `strategy`, `sparsities`, ...).
    """

    def __init__(self, eval_sets: Mapping[str, Any] | None = None, train_dataset: Any = None,
                 groups: Mapping[str, Sequence[str]] | None = None, *, every_n_steps: int | None = None,
                 deferred: bool = False, results_file: str | os.PathLike | None = None, trainer: Any = None,
                 settings: SearchSettings | None = None, figure: bool = True, **search_kwargs: Any) -> None:
        if every_n_steps is not None and (isinstance(every_n_steps, bool) or not isinstance(every_n_steps, int)
                                          or every_n_steps < 1):
            raise EffectiveSizeError(f"every_n_steps must be a positive integer or None (= on each save), got "
                                     f"{every_n_steps!r}")
        if deferred and every_n_steps is not None:
            raise EffectiveSizeError("deferred=True records saved checkpoints for later; it cannot be combined with "
                                     "every_n_steps (nothing is saved between saves to compute from later).")
        self.deferred = deferred
        self.every_n_steps = every_n_steps
        self.results_file = results_file
        self.trainer = trainer
        self.figure = figure
        self.eval_sets, self.train_dataset = eval_sets, train_dataset
        self.settings: dict[str, Any] | None = None   # the results file's settings block
        self.search: tuple[SearchSettings, EvaluationOptions, PruningSetup] | None = None
        if not deferred:
            if not eval_sets or train_dataset is None:
                raise EffectiveSizeError("EffectiveSizeCallback needs eval_sets (labelled, tokenized) and the "
                                         "tokenized train_dataset (for the means), or deferred=True.")
            evaluation, pruning = search_kwargs.pop("evaluation", None), search_kwargs.pop("pruning", None)
            wanted, evaluation, pruning = search_inputs(settings, evaluation, pruning, check_groups(groups, eval_sets),
                                                        search_kwargs)
            resolved = wanted.resolve(eval_sets)
            self.search = (resolved, evaluation, pruning)
            self.settings = resolved.block()
        self.results: EffectiveSizeResults | None = None
        self._pending_logs: dict[str, float] = {}

    def bind(self, trainer: Any) -> "EffectiveSizeCallback":
        """Log through `trainer.log`, so the metrics reach every `report_to` logger."""
        self.trainer = trainer
        return self

    # ------------------------------------------------------------------ events
    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if not state.is_world_process_zero:
            return control
        path = Path(self.results_file) if self.results_file else Path(args.output_dir) / RESULTS_NAME
        self.results = EffectiveSizeResults.load(path)
        if self.settings is not None:
            self.results.adopt_settings(self.settings)
            reference = self.results.reference_signature()
            if model is not None and reference is not None and reference != model_signature(model.config):
                raise EffectiveSizeError(f"{path} holds results of another architecture ({reference}); use another "
                                         "results_file or output_dir for this model.")
        return control

    def on_save(self, args, state, control, model=None, **kwargs):
        if self.every_n_steps is not None or not state.is_world_process_zero:
            return control
        checkpoint = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if self.deferred:
            results = self._results(args)
            results.record_pending(state.global_step, checkpoint)
            results.save()
            return control
        self._compute(args, state, model, checkpoint)
        return control

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if self.every_n_steps is not None and state.global_step % self.every_n_steps == 0 \
                and state.is_world_process_zero:
            self._compute(args, state, model, None)
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self._pending_logs and logs is not None:
            logs.update(self._pending_logs)
            self._pending_logs = {}
        return control

    # ------------------------------------------------------------------ work
    def _results(self, args) -> EffectiveSizeResults:
        if self.results is None:
            path = Path(self.results_file) if self.results_file else Path(args.output_dir) / RESULTS_NAME
            self.results = EffectiveSizeResults.load(path)
            if self.settings is not None:
                self.results.adopt_settings(self.settings)
        return self.results

    def _compute(self, args, state, model: nn.Module | None, checkpoint: Path | None) -> None:
        if model is None:
            raise EffectiveSizeError("the Trainer passed no model to EffectiveSizeCallback.")
        results = self._results(args)
        if state.global_step in results.done_steps():
            return
        assert self.search is not None
        settings, evaluation, pruning = self.search
        with preserved_training_state(model):
            clone = copy.deepcopy(model)
            clone.zero_grad(set_to_none=True)
            try:
                search = search_effective_size(clone, self.train_dataset, self.eval_sets, settings=settings,
                                               evaluation=evaluation, pruning=self._pruning(pruning, args))
            finally:
                del clone
                gc.collect()
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
        results.record(state.global_step, checkpoint, search, model_signature(model.config))
        results.save()
        if self.figure:
            try:
                results.plot()
            except ImportError as err:  # matplotlib is the optional `plot` extra
                logger.warning("no effective-size figure: %s", err)
        metrics = {f"effective_size/{g}": v for g, v in search.effective_size.items()}
        if len(search.seeds) > 1:   # the band across pruning seeds
            for group, (low, high) in search.effective_size_range().items():
                metrics[f"effective_size_min/{group}"], metrics[f"effective_size_max/{group}"] = low, high
        metrics.update({f"full_accuracy/{g}": v for g, v in search.group_full_accuracy().items()})
        metrics["effective_size/pruning_steps"] = float(search.cost_steps)
        logger.info("step %d: %s", state.global_step, metrics)
        self._emit(state, metrics)

    @staticmethod
    def _pruning(pruning: PruningSetup, args: Any) -> PruningSetup:
        """The inner PruningTrainer shares Accelerate's process-wide state with the fine-tuning Trainer, which
        refuses a different mixed-precision setting: inherit the run's unless the caller overrode it."""
        precision = {"bf16": bool(getattr(args, "bf16", False)), "fp16": bool(getattr(args, "fp16", False))}
        return replace(pruning, overrides={**precision, **pruning.overrides})

    def _emit(self, state, metrics: dict[str, float]) -> None:
        if self.trainer is not None:
            self.trainer.log(dict(metrics))
            return
        state.log_history.append({**metrics, "step": state.global_step})
        self._pending_logs.update(metrics)
