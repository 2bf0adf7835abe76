"""Effective size over the checkpoints of a fine-tuning run, resumable: `track_effective_size(output_dir, ...)`.

Results live in one JSON file (default ``OUTPUT_DIR/effective_size.json``), rewritten after every checkpoint through a
temp file and a rename, so an interrupted run loses at most the checkpoint in progress and the next call computes
only what is missing. `EffectiveSizeCallback` (deferred mode) writes the same file with checkpoints marked pending.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from tqdm.auto import tqdm

from ..evaluation.effective_size import EffectiveSizeError
from ..io_utils import atomic_write_text
from .climb import ClimbSchedule
from .result import EffectiveSizeSearch
from .run import search_effective_size, search_inputs
from .settings import DEFAULT_SPARSITIES, DEFAULT_STRATEGY, SearchSettings
from ..plotting import figure_paths, plot_effective_size

logger = logging.getLogger(__name__)

__all__ = ["EffectiveSizeResults", "RESULTS_NAME", "find_checkpoints", "model_signature", "search_settings",
           "track_effective_size"]

RESULTS_NAME = "effective_size.json"
FORMAT_VERSION = 1
CHECKPOINT_PATTERN = re.compile(r"^checkpoint-(\d+)$")
# Settings that change what an effective size means; results computed under different ones do not form one curve.
COMPARED_SETTINGS = ("strategy", "sparsities", "seeds", "groups", "margin")


def find_checkpoints(output_dir: str | os.PathLike) -> list[tuple[int, Path]]:
    """`checkpoint-<step>` folders of a Trainer output dir, sorted by step (not by name: 1000 after 200)."""
    folder = Path(output_dir)
    if not folder.is_dir():
        raise EffectiveSizeError(f"{folder} is not a folder; pass the output_dir of a fine-tuning run.")
    found = [(int(m.group(1)), p) for p in folder.iterdir()
             if p.is_dir() and (m := CHECKPOINT_PATTERN.match(p.name))]
    return sorted(found)


def model_signature(config: Any) -> dict[str, Any]:
    """What must match across checkpoints for their effective sizes to be comparable (from a Transformers config)."""
    return {"model_type": getattr(config, "model_type", None),
            "architectures": list(getattr(config, "architectures", None) or []),
            "num_layers": getattr(config, "num_hidden_layers", None),
            "num_heads": getattr(config, "num_attention_heads", None),
            "hidden_size": getattr(config, "hidden_size", None),
            "num_labels": getattr(config, "num_labels", None)}


def _describe(signature: Mapping[str, Any]) -> str:
    return (f"{signature.get('model_type')} ({', '.join(signature.get('architectures') or []) or 'no class'}) with "
            f"{signature.get('num_layers')} layers x {signature.get('num_heads')} heads, hidden "
            f"{signature.get('hidden_size')}, {signature.get('num_labels')} labels")


def search_settings(strategy: str = DEFAULT_STRATEGY, sparsities: Iterable[float] = DEFAULT_SPARSITIES,
                    seeds: Iterable[int] = (0,), groups: Mapping[str, Sequence[str]] | None = None,
                    margin: float = 0.03, steps_per_run: int | None = None, climb: ClimbSchedule | None = None,
                    cases: Iterable[str] | None = None, early_stopping: bool = True) -> dict[str, Any]:
    """The settings block of the results file (validated by `SearchSettings`)."""
    settings = SearchSettings(strategy=strategy, sparsities=sparsities, seeds=seeds, groups=groups, margin=margin,
                              steps_per_run=steps_per_run, climb=climb or ClimbSchedule(),
                              early_stopping=early_stopping)
    return settings.resolve(cases or []).block()


class EffectiveSizeResults:
    """The results file of one fine-tuning run: settings, and one entry per checkpoint (``done`` or ``pending``)."""

    def __init__(self, path: str | os.PathLike, settings: dict[str, Any] | None = None,
                 entries: list[dict[str, Any]] | None = None) -> None:
        self.path = Path(path)
        self.settings = settings
        self.entries: dict[int, dict[str, Any]] = {int(e["step"]): e for e in entries or []}

    @classmethod
    def load(cls, path: str | os.PathLike) -> "EffectiveSizeResults":
        """Read the file, or start an empty one when it does not exist yet."""
        path = Path(path)
        if not path.exists():
            return cls(path)
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as err:
            raise EffectiveSizeError(f"{path} is not valid JSON ({err}); it is not a results file of this package "
                                     "(it is always written atomically). Move it away to start over.") from err
        if not isinstance(data, dict) or data.get("format_version") != FORMAT_VERSION:
            raise EffectiveSizeError(f"{path} is not an effective-size results file (format {FORMAT_VERSION}).")
        return cls(path, data.get("settings"), data.get("checkpoints", []))

    # ------------------------------------------------------------------ settings
    def adopt_settings(self, settings: dict[str, Any]) -> None:
        """Use `settings`, or check they match the ones the file was started with (resuming must not mix them)."""
        if self.settings is None:
            self.settings = settings
            return
        different = [k for k in COMPARED_SETTINGS if _normalized(self.settings.get(k)) != _normalized(settings.get(k))]
        if different:
            detail = "; ".join(f"{k}: file has {self.settings.get(k)!r}, now {settings.get(k)!r}" for k in different)
            raise EffectiveSizeError(f"{self.path} was computed with other settings ({detail}). Results under "
                                     "different settings are not comparable: pass the same settings to resume, or "
                                     "choose another results file.")

    # ------------------------------------------------------------------ entries
    def done_steps(self) -> set[int]:
        return {step for step, e in self.entries.items() if e.get("status") == "done"}

    def pending(self) -> list[dict[str, Any]]:
        return [e for step, e in sorted(self.entries.items()) if e.get("status") != "done"]

    def record_pending(self, step: int, checkpoint: str | os.PathLike | None) -> None:
        if int(step) not in self.done_steps():
            self.entries[int(step)] = {"step": int(step), "checkpoint": self._relative(checkpoint), "status": "pending"}

    def record(self, step: int, checkpoint: str | os.PathLike | None, search: EffectiveSizeSearch,
               signature: Mapping[str, Any] | None = None) -> dict[str, Any]:
        entry = {"step": int(step), "checkpoint": self._relative(checkpoint), "status": "done",
                 "model": dict(signature or {}), "full_accuracy_by_group": search.group_full_accuracy(),
                 **search.to_dict()}
        for key in ("strategy", "sparsities", "seeds", "groups", "margin"):
            entry.pop(key, None)  # in the settings block
        self.entries[int(step)] = entry
        return entry

    def reference_signature(self) -> dict[str, Any] | None:
        done = [e for _, e in sorted(self.entries.items()) if e.get("status") == "done" and e.get("model")]
        return done[0]["model"] if done else None

    def _relative(self, checkpoint: str | os.PathLike | None) -> str | None:
        if checkpoint is None:
            return None
        path = Path(checkpoint).resolve()
        try:
            return str(path.relative_to(self.path.parent.resolve()))
        except ValueError:
            return str(path)

    def checkpoint_path(self, entry: Mapping[str, Any]) -> Path | None:
        value = entry.get("checkpoint")
        if not value:
            return None
        path = Path(value)
        return path if path.is_absolute() else self.path.parent / path

    # ------------------------------------------------------------------ output
    def to_dict(self) -> dict[str, Any]:
        return {"format_version": FORMAT_VERSION, "settings": self.settings,
                "checkpoints": [e for _, e in sorted(self.entries.items())]}

    def save(self) -> Path:
        """Rewrite the whole file through a temp file and a rename (crash-safe)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.path, json.dumps(self.to_dict(), indent=1, sort_keys=False) + "\n")
        return self.path

    def records(self) -> list[dict[str, Any]]:
        """Rows for `plot_effective_size`: (step, seed, group, effective size, group's full-model accuracy)."""
        rows = []
        for step, entry in sorted(self.entries.items()):
            if entry.get("status") != "done":
                continue
            full = entry.get("full_accuracy_by_group", {})
            for group, per_seed in entry.get("effective_size_per_seed", {}).items():
                for seed, size in per_seed.items():
                    rows.append({"step": step, "seed": int(seed), "group": group, "effective_size": size,
                                 "full_accuracy": full.get(group)})
        return rows

    def bands(self) -> dict[str, dict[str, list]]:
        """Per group, over the done checkpoints in step order: the mean over pruning seeds and the min-max band,
        ``{group: {"step": [...], "mean": [...], "min": [...], "max": [...], "seeds": [...]}}`` (the figure draws the
        mean as a line and fills between min and max; with one seed the band is the line)."""
        bands: dict[str, dict[str, list]] = {}
        for step, entry in sorted(self.entries.items()):
            if entry.get("status") != "done":
                continue
            for group, per_seed in entry.get("effective_size_per_seed", {}).items():
                values = list(per_seed.values())
                if not values:
                    continue
                band = bands.setdefault(group, {"step": [], "mean": [], "min": [], "max": [], "seeds": []})
                band["step"].append(step)
                band["mean"].append(math.fsum(values) / len(values))
                band["min"].append(min(values))
                band["max"].append(max(values))
                band["seeds"].append(len(values))
        return bands

    def plot(self, path: str | os.PathLike | None = None) -> list[Path]:
        """Effective size and full-model accuracy vs step, per group: PNG + PDF next to the results file, named
        after it (``effective_size.json`` -> ``effective_size.png`` / ``.pdf``)."""
        rows = self.records()
        if not rows:
            return []
        target = Path(path) if path is not None else self.path.with_suffix("")
        plot_effective_size(rows, path=target)
        return figure_paths(target)


def _normalized(value: Any) -> Any:
    """JSON round trip, so tuples and lists (or 0.1 and 0.1000) compare equal."""
    return json.loads(json.dumps(value)) if value is not None else None


def _signature_of(path: Path) -> dict[str, Any]:
    import transformers
    try:
        config = transformers.AutoConfig.from_pretrained(path)
    except (OSError, ValueError) as err:
        raise EffectiveSizeError(f"{path} has no readable config.json ({err}); is it a complete checkpoint? "
                                 "(A checkpoint being written when the run stopped can be deleted.)") from err
    return model_signature(config)


def _checkpoints_to_track(output_dir: str | os.PathLike, results: EffectiveSizeResults) -> list[tuple[int, Path]]:
    """`checkpoint-*` folders of `output_dir` plus the pending ones the callback recorded elsewhere, by step."""
    checkpoints = find_checkpoints(output_dir)
    for entry in results.pending():   # recorded by the callback, possibly outside output_dir
        path = results.checkpoint_path(entry)
        if path is not None and path.is_dir() and all(step != entry["step"] for step, _ in checkpoints):
            checkpoints.append((int(entry["step"]), path))
        elif path is None or not path.is_dir():
            logger.warning("checkpoint of step %s (%s) no longer exists (save_total_limit?); skipping it.",
                           entry["step"], entry.get("checkpoint"))
    checkpoints.sort()
    if not checkpoints:
        raise EffectiveSizeError(f"{output_dir} has no checkpoint-* folders. Save checkpoints during fine-tuning "
                                 "(TrainingArguments(save_strategy='steps', save_steps=...)) and point this at the "
                                 "run's output_dir.")
    return checkpoints


def track_effective_size(output_dir: str | os.PathLike, train_dataset: Any, eval_sets: Mapping[str, Any],
                         groups: Mapping[str, Sequence[str]] | None = None, *, settings: SearchSettings | None = None,
                         results_file: str | os.PathLike | None = None, max_checkpoints: int | None = None,
                         figure: bool = True, show_progress: bool = True, **search_kwargs: Any
                         ) -> EffectiveSizeResults:
    """Compute the effective size of every `checkpoint-*` folder in `output_dir` not yet in the results file.

    Checkpoints are processed in step order; after each one the JSON is rewritten (atomically) and the figure
    redrawn, so interrupting and calling again resumes where it stopped. `max_checkpoints` bounds how many are
    computed in this call; `show_progress` shows a bar over the checkpoints. `settings` (`SearchSettings`) and the
    further keyword arguments go to `search_effective_size` as they are (`evaluation=`, `pruning=`, or the old
    keywords: `strategy`, `sparsities`, `seeds`, `pruning_overrides`, `collate_fn`, `means_examples`, ...).
    """
    evaluation, pruning = search_kwargs.pop("evaluation", None), search_kwargs.pop("pruning", None)
    results = EffectiveSizeResults.load(results_file or Path(output_dir) / RESULTS_NAME)
    checkpoints = _checkpoints_to_track(output_dir, results)
    if max_checkpoints is not None and (not isinstance(max_checkpoints, int) or max_checkpoints < 0):
        raise EffectiveSizeError(f"max_checkpoints must be an integer >= 0, got {max_checkpoints!r}")
    wanted, evaluation, pruning = search_inputs(settings, evaluation, pruning, groups, search_kwargs)
    resolved = wanted.resolve(eval_sets)
    results.adopt_settings(resolved.block())

    reference = results.reference_signature()
    reference_name = "the checkpoints already in the results file"
    signatures = {}
    for step, path in checkpoints:
        signatures[step] = _signature_of(path)
        if reference is None:
            reference, reference_name = signatures[step], path.name
        elif signatures[step] != reference:
            raise EffectiveSizeError(
                f"{path.name} is a {_describe(signatures[step])}, but {reference_name} is a {_describe(reference)}. "
                "Effective sizes of different architectures do not form one curve: move that checkpoint out of "
                f"{output_dir}, or track it into another results file.")

    done = results.done_steps()
    todo = [(step, path) for step, path in checkpoints if step not in done]
    if max_checkpoints is not None:
        todo = todo[:max_checkpoints]
    logger.info("effective size: %d checkpoints, %d already done, computing %d", len(checkpoints),
                len(done & {s for s, _ in checkpoints}), len(todo))
    for step, path in tqdm(todo, desc="effective size", unit="checkpoint", disable=not show_progress or not todo):
        search = search_effective_size(path, train_dataset, eval_sets, settings=resolved, evaluation=evaluation,
                                       pruning=pruning)
        results.record(step, path, search, signatures[step])
        results.save()
        logger.info("step %d: effective size %s (%d pruning steps)", step,
                    {g: round(v, 4) for g, v in search.effective_size.items()}, search.cost_steps)
        if figure:
            _plot(results)
    if not todo:
        results.save()
    return results


def _plot(results: EffectiveSizeResults) -> None:
    try:
        results.plot()
    except ImportError as err:  # matplotlib is the optional `plot` extra
        logger.warning("no figure: %s", err)


def summary_table(results: EffectiveSizeResults) -> str:
    """Plain-text table per step: each group's effective size as the mean over pruning seeds ± half its min-max range
    (with one seed, the value alone), the group's full-model accuracy, and the pruning steps spent."""
    groups = list((results.settings or {}).get("groups") or {})
    seeds = len((results.settings or {}).get("seeds") or [0])
    width = 15 if seeds > 1 else 12
    header = [f"{'step':>12}"] + [f"{g + ' size':>{width}}" for g in groups] + \
        [f"{g + ' full acc':>12}" for g in groups] + [f"{'pruning steps':>12}"]
    lines = ["  ".join(header)]
    for step, entry in sorted(results.entries.items()):
        if entry.get("status") != "done":
            lines.append(f"{step:>12}  (pending)")
            continue
        cells = [f"{step:>12}"]
        for group in groups:
            values = list(entry.get("effective_size_per_seed", {}).get(group, {}).values())
            mean = entry["effective_size"].get(group, math.nan)
            text = f"{mean:.3f}" if len(values) < 2 else f"{mean:.3f} ± {(max(values) - min(values)) / 2:.3f}"
            cells.append(f"{text:>{width}}")
        cells += [f"{entry.get('full_accuracy_by_group', {}).get(g, math.nan):>12.3f}" for g in groups]
        cells.append(f"{entry.get('cost_steps', 0):>12}")
        lines.append("  ".join(cells))
    if seeds > 1:
        lines.append(f"size: mean over {seeds} pruning seeds ± half the min-max range")
    flagged = not_converged(results)
    if flagged:
        lines.append("NOT CONVERGED (the pruning run's subnetwork was no better than random ones of its size; its "
                     "levels are not evidence): " + "; ".join(f"step {step} seed {seed}" for step, seed in flagged))
    return "\n".join(lines)


def not_converged(results: EffectiveSizeResults) -> list[tuple[int, int]]:
    """(step, seed) of every pruning run whose convergence check failed at some level (entries record
    `converged[seed][level]`; levels without a verdict, e.g. pruning nothing, are skipped)."""
    flagged = []
    for step, entry in sorted(results.entries.items()):
        for seed, levels in sorted((entry.get("converged") or {}).items(), key=lambda item: int(item[0])):
            if any(verdict is False for verdict in (levels or {}).values()):
                flagged.append((int(step), int(seed)))
    return flagged
