"""Subnetwork faithfulness as an `evaluate` module: accuracy, agreement with the full model, and KL to it.

The same three numbers `hf_heuristic_core.evaluate_subnetwork` reports, for predictions you already have (e.g. from
`Trainer.predict`), so they can be logged next to any other `evaluate` metric. Self-contained (numpy only), so
`evaluate.load(path)` can copy and import it without the package.
"""

import datasets
import evaluate
import numpy as np

_DESCRIPTION = """
How faithful a pruned subnetwork is to the full model it came from: its accuracy against the labels, the agreement of
its predicted class with the full model's, and KL(full || subnetwork) averaged over examples (when both give logits).
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions: the subnetwork's logits (a list of floats per example) or its predicted class ids.
    references (list of int): the labels.
    full_model_predictions: the full model's logits or predicted class ids, in the same form as `predictions`
        or the other one (KL needs logits on both sides).
    collapse_to_entailment (bool): score 3-way NLI predictions against 2-way HANS-style labels: a prediction counts
        as entailment (0) when it is `entailment_id`, otherwise as non-entailment (1). Default False.
    entailment_id (int): the model's class id for entailment. Default 0.
Returns:
    accuracy: the subnetwork's accuracy against `references`.
    full_model_accuracy: the full model's accuracy against `references`.
    agreement: fraction of examples whose predicted class (before any collapse) equals the full model's.
    kl: KL(full || subnetwork), mean over examples, in nats (only when both are logits).
Example:
    >>> import evaluate
    >>> from hf_heuristic_core.metrics import metric_path
    >>> metric = evaluate.load(metric_path("subnetwork_faithfulness"))
    >>> metric.compute(predictions=[[2.0, 0.0], [0.0, 1.0]], references=[0, 0],
    ...                full_model_predictions=[[2.0, 0.0], [1.0, 0.0]])["agreement"]
    0.5
"""

_LIST = getattr(datasets, "List", None) or datasets.Sequence
_LOGITS = _LIST(datasets.Value("float32"))
_IDS = datasets.Value("int64")


def _features(subnetwork, full):
    return datasets.Features({"predictions": subnetwork, "references": datasets.Value("int64"),
                              "full_model_predictions": full})


def _as_scores(values, name):
    """(class ids, logits or None) of one input column."""
    array = np.asarray(values)
    if array.ndim == 1:
        if array.size and not np.issubdtype(array.dtype, np.integer):
            if not np.all(np.equal(np.mod(array, 1), 0)):
                raise ValueError(f"{name} must be class ids or one list of logits per example, got fractional "
                                 "scalars; pass the logits (or argmax them first).")
        return array.astype(np.int64), None
    if array.ndim != 2 or array.shape[1] < 2:
        raise ValueError(f"{name} must hold one list of at least 2 logits per example, got shape {array.shape}; "
                         "rows of different lengths are not allowed.")
    logits = array.astype(np.float64)
    if not np.all(np.isfinite(logits)):
        raise ValueError(f"{name} contains NaN or inf logits.")
    return logits.argmax(-1), logits


def _log_softmax(logits):
    shifted = logits - logits.max(-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class SubnetworkFaithfulness(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation="Bhaskar, Friedman and Chen. The Heuristic Core: Understanding Subnetwork Generalization in "
                     "Pretrained Language Models. ACL 2024.",
            inputs_description=_KWARGS_DESCRIPTION,
            # Logits are tried before ids: a list never encodes as an int, while a float would round silently.
            features=[_features(_LOGITS, _LOGITS), _features(_LOGITS, _IDS), _features(_IDS, _LOGITS),
                      _features(_IDS, _IDS)],
        )

    def _compute(self, predictions, references, full_model_predictions, collapse_to_entailment=False,
                 entailment_id=0):
        references = np.asarray(references, dtype=np.int64)
        if references.size == 0:
            raise ValueError("no examples: pass at least one prediction, reference and full-model prediction.")
        sub_ids, sub_logits = _as_scores(predictions, "predictions")
        full_ids, full_logits = _as_scores(full_model_predictions, "full_model_predictions")
        if not len(sub_ids) == len(full_ids) == len(references):
            raise ValueError(f"predictions ({len(sub_ids)}), references ({len(references)}) and "
                             f"full_model_predictions ({len(full_ids)}) differ in length.")
        if sub_logits is not None and full_logits is not None and sub_logits.shape != full_logits.shape:
            raise ValueError(f"predictions have {sub_logits.shape[1]} classes but full_model_predictions have "
                             f"{full_logits.shape[1]}; both must come from the same classifier head.")
        agreement = float(np.mean(sub_ids == full_ids))
        if collapse_to_entailment:
            if set(np.unique(references).tolist()) - {0, 1}:
                raise ValueError("collapse_to_entailment=True scores against 2-way labels (0 = entailment, "
                                 f"1 = non-entailment), but references contain {sorted(set(references.tolist()))}.")
            sub_ids = (sub_ids != entailment_id).astype(np.int64)
            full_ids = (full_ids != entailment_id).astype(np.int64)
        result = {"accuracy": float(np.mean(sub_ids == references)),
                  "full_model_accuracy": float(np.mean(full_ids == references)),
                  "agreement": agreement}
        if sub_logits is not None and full_logits is not None:
            teacher = _log_softmax(full_logits)
            student = _log_softmax(sub_logits)
            result["kl"] = float(np.mean((np.exp(teacher) * (teacher - student)).sum(-1)))
        return result
