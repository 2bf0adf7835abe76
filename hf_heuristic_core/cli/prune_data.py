"""The data of `hf-heuristic-core prune`: which rows train the mask, which judge it, and labels the task loss can use.

Every data flag acts or is refused. A single data file has no splits, so `--train_split` / `--eval_split` on one
would select nothing (they used to be ignored silently, and the final KL / agreement came from the training file);
`--eval_fraction` holds out a seeded share of the training rows instead, and the summary says which data judged the
mask.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import UsageError
from .checks import has_splits, load_dataset_checked

__all__ = ["DEFAULT_EVAL_EXAMPLES", "PruneData", "check_labels", "check_split_flags", "load_prune_data"]

DEFAULT_EVAL_EXAMPLES = 256


@dataclass
class PruneData:
    """Raw training and evaluation tables, and what the evaluation set is (printed in the summary)."""

    train: Any
    eval: Any | None
    eval_description: str


def check_split_flags(script: Any) -> None:
    """Refuse split flags that a source without splits would ignore, before anything is loaded."""
    if script.eval_split and script.eval_fraction is not None:
        raise UsageError("--eval_split and --eval_fraction both choose the evaluation data; pass one of them.")
    if script.eval_fraction is not None and not 0.0 < script.eval_fraction < 1.0:
        raise UsageError(f"--eval_fraction {script.eval_fraction} must be a fraction in (0, 1), e.g. 0.1 to hold out "
                         "10% of the training rows.")
    if has_splits(script.dataset):
        return
    if script.train_split != "train":
        raise UsageError(f"--dataset {script.dataset} is read whole (data files have no splits), so --train_split "
                         f"{script.train_split} would select nothing; drop it, or point --dataset at a folder with "
                         "one file per split.")
    if script.eval_split:
        raise UsageError(f"--dataset {script.dataset} is read whole (data files have no splits), so --eval_split "
                         f"{script.eval_split} cannot select held-out data; pass --eval_fraction 0.1 to hold out a "
                         "seeded 10% of its rows, or point --dataset at a folder with one file per split.")


def load_prune_data(script: Any, seed: int, trained: str = "the mask was learned") -> PruneData:
    """The training rows (after `--max_train_examples` and any held-out share) and the evaluation rows; `trained`
    says what the training rows are for, in the description (`finetune`: "the model was trained")."""
    train = load_dataset_checked(script.dataset, script.dataset_config, script.train_split, "--dataset")
    if script.max_train_examples:
        train = train.select(range(min(script.max_train_examples, len(train))))
    if script.eval_split:
        evaluation = load_dataset_checked(script.dataset, script.dataset_config, script.eval_split, "--eval_split")
        return PruneData(train, evaluation, f"split {script.eval_split!r} of {script.dataset} ({len(evaluation)} "
                                            "examples)")
    if script.eval_fraction is not None:
        if len(train) < 2:
            raise UsageError(f"--eval_fraction needs at least 2 training rows to hold one out; {script.dataset} has "
                             f"{len(train)}.")
        parts = train.train_test_split(test_size=script.eval_fraction, seed=seed, shuffle=True)
        held, kept = parts["test"], parts["train"]
        return PruneData(kept, held, f"{len(held)} examples held out of {script.dataset} (--eval_fraction "
                                     f"{script.eval_fraction}, a seeded random split with seed {seed}); {trained} on "
                                     f"the other {len(kept)}")
    count = min(DEFAULT_EVAL_EXAMPLES, len(train))
    return PruneData(train, None, f"the first {count} training examples, i.e. data the mask was learned on (pass "
                                  "--eval_fraction or --eval_split for held-out data)")


def check_labels(data: Any, config: Any, task: str) -> Any:
    """Labels for the task loss: class ids in [0, num_labels) (string labels the model's `label2id` names are mapped
    to ids); anything else is refused naming the bad values, instead of an IndexError inside the loss."""
    column = next((c for c in ("labels", "label") if c in data.column_names), None)
    if column is None:
        if task == "causal_lm":
            return data
        raise UsageError(f"--objective task needs a 'label' column; the dataset's columns are {data.column_names}.")
    if task == "causal_lm":
        return data
    values = data.unique(column) if hasattr(data, "unique") else list(set(data[column]))
    flat = {v for item in values for v in (item if isinstance(item, list) else [item])}
    num_labels = int(getattr(config, "num_labels", 0) or 0)
    strings = sorted(str(v) for v in flat if isinstance(v, str))
    if strings:
        label2id = dict(getattr(config, "label2id", None) or {})
        missing = [s for s in strings if s not in label2id]
        if missing:
            raise UsageError(f"The {column!r} column holds strings ({strings[:5]}); the task loss needs class ids "
                             f"0..{num_labels - 1}. The model's label2id ({label2id}) does not name {missing[:5]}: "
                             "map the labels to ids first (e.g. dataset.class_encode_column) or fine-tune a model "
                             "whose config.label2id names them.")
        mapping = {name: int(index) for name, index in label2id.items()}
        return data.map(lambda row: {column: mapping[row[column]]}, desc="labels to ids")
    bad = sorted(v for v in flat if v is not None and not (isinstance(v, int) and 0 <= v < max(num_labels, 1)))
    if bad or None in flat:
        shown = bad[:5] + ([None] if None in flat else [])
        raise UsageError(f"The {column!r} column holds values outside the model's classes 0..{num_labels - 1}: "
                         f"{shown} (-1 marks unlabelled rows, e.g. GLUE test splits). Filter those rows out, pick a "
                         "labelled split, or load the model with the right num_labels.")
    return data
