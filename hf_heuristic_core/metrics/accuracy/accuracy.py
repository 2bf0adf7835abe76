"""Accuracy as an `evaluate` module that loads offline: the fraction of predictions equal to the references.

Optionally weighted per example (`sample_weight`) or returned as a count (`normalize=False`).
"""

import datasets
import evaluate
import numpy as np

_DESCRIPTION = "Accuracy: the (optionally weighted) fraction of predicted class ids equal to the reference ids."

_KWARGS_DESCRIPTION = """
Args:
    predictions (list of int): predicted class ids.
    references (list of int): true class ids.
    normalize (bool): True (default) gives a fraction, False the number (or total weight) of correct predictions.
    sample_weight (list of float, optional): a weight per example.
Returns:
    accuracy (float).
Example:
    >>> import evaluate
    >>> from hf_heuristic_core.metrics import metric_path
    >>> evaluate.load(metric_path("accuracy")).compute(predictions=[0, 1, 1], references=[0, 1, 0])
    {'accuracy': 0.6666666666666666}
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Accuracy(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation="",
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features({"predictions": datasets.Value("int64"),
                                        "references": datasets.Value("int64")}),
        )

    def _compute(self, predictions, references, normalize=True, sample_weight=None):
        predictions = np.asarray(predictions, dtype=np.int64)
        references = np.asarray(references, dtype=np.int64)
        if predictions.size == 0:
            raise ValueError("accuracy of zero examples is undefined; pass at least one prediction.")
        weights = np.ones(len(predictions)) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
        if weights.shape != predictions.shape:
            raise ValueError(f"sample_weight has {weights.size} entries for {predictions.size} predictions.")
        correct = float(np.sum(weights * (predictions == references)))
        return {"accuracy": correct / float(np.sum(weights)) if normalize else correct}
