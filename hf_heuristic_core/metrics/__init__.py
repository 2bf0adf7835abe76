"""`evaluate` metric modules shipped inside the package, loadable offline by path.

    import evaluate
    from hf_heuristic_core.metrics import metric_path

    faithfulness = evaluate.load(metric_path("subnetwork_faithfulness"))
    faithfulness.compute(predictions=subnetwork_logits, references=labels, full_model_predictions=full_logits)

`evaluate.load("accuracy")` needs the Hub, so an `accuracy` module ships here as well.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["METRICS", "metric_path"]

_HERE = Path(__file__).resolve().parent
METRICS = ("accuracy", "subnetwork_faithfulness")


def metric_path(name: str) -> str:
    """Folder of the metric module `name`, for `evaluate.load(metric_path(name))` without network access."""
    if name not in METRICS:
        raise ValueError(f"unknown metric {name!r}; the package ships {list(METRICS)}")
    folder = _HERE / name
    if not (folder / f"{name}.py").is_file():  # pragma: no cover - a broken install
        raise FileNotFoundError(f"{folder / (name + '.py')} is missing; reinstall hf_heuristic_core "
                                "(its package data holds metrics/*/*.py).")
    return str(folder)
