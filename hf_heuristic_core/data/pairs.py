"""In-domain and paraphrase sets (MNLI, QQP, PAWS): `datasets` loaders that also take local copies, with column
names and label order normalized, so a QQP model reads PAWS and an MNLI model's label ids mean the same everywhere."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from datasets import ClassLabel, Dataset, Features, Value

from .labels import (
    MNLI_LABELS,
    PARAPHRASE_LABELS,
    label_ids,
    mnli_label_names,
    nli_label_names,
    paraphrase_label_names,
    replace_labels,
)
from .tables import column, from_columns, load_table, rename_to

__all__ = ["NLI_COLUMNS", "PARAPHRASE_COLUMNS", "load_mnli", "load_paws", "load_qqp"]

NLI_COLUMNS: tuple[str, str] = ("premise", "hypothesis")
PARAPHRASE_COLUMNS: tuple[str, str] = ("sentence1", "sentence2")
_GLUE_IDS = {"glue", "nyu-mll/glue"}


def _normalize_pairs(dataset: Dataset, names: tuple[str, str], candidates: tuple[Sequence[str], Sequence[str]],
                     label_names: list[str], aliases: Mapping[str, int], drop_unlabeled: bool) -> Dataset:
    """Rename the two text columns, put labels in ``label_names`` order, drop everything else."""
    for name, cands in zip(names, candidates):
        dataset = rename_to(dataset, name, cands)
    dataset = rename_to(dataset, "label", ("gold_label", "labels"))
    labels = label_ids(dataset, aliases, n_classes=len(label_names))
    dataset = dataset.select_columns([*names, "label"])
    feature = dataset.features["label"]
    if not (isinstance(feature, ClassLabel) and list(feature.names) == label_names):
        dataset = replace_labels(dataset, labels, label_names)
    if drop_unlabeled:
        keep = [i for i, v in enumerate(labels) if v >= 0]
        if len(keep) < len(labels):
            dataset = dataset.select(keep)
    return dataset


def load_mnli(hub_id: str | os.PathLike[str] = "nyu-mll/glue", split: str = "validation_matched", *,
              config: str | None = None, two_way: bool = False, drop_unlabeled: bool = True,
              **load_kwargs: Any) -> Dataset:
    """MNLI as ``premise, hypothesis, label`` with labels in :data:`mnli_label_names` order.

    Works with ``nyu-mll/glue`` (config ``mnli``, chosen automatically; splits ``train``, ``validation_matched``,
    ``validation_mismatched``), ``nyu-mll/multi_nli`` and local copies (jsonl with ``sentence1``/``sentence2``/
    ``gold_label`` as released is fine). The paper's ID set is matched + mismatched: load both, or use
    ``split="validation"`` on a local folder (matches both files). ``two_way=True`` collapses to
    :data:`nli_label_names` (entailment vs. not) for HANS-style training. Unlabeled rows (-1, as in GLUE's test
    splits) are dropped unless ``drop_unlabeled=False``.
    """
    if config is None and str(hub_id).lower() in _GLUE_IDS:
        config = "mnli"
    raw = load_table(hub_id, config, split, what="MNLI data", hub_example="nyu-mll/glue",
                     **load_kwargs)
    dataset = _normalize_pairs(raw, NLI_COLUMNS, (("sentence1",), ("sentence2",)), mnli_label_names,
                               MNLI_LABELS, drop_unlabeled)
    if two_way:
        collapsed = [v if v < 0 else int(v != 0) for v in column(dataset, "label")]
        dataset = replace_labels(dataset, collapsed, nli_label_names)
    return dataset


def load_qqp(hub_id: str | os.PathLike[str] = "nyu-mll/glue", split: str = "validation", *,
             config: str | None = None, drop_unlabeled: bool = True, **load_kwargs: Any) -> Dataset:
    """QQP as ``sentence1, sentence2, label`` (0 not duplicate, 1 duplicate).

    GLUE's ``question1``/``question2`` are renamed to :data:`PARAPHRASE_COLUMNS` so QQP and PAWS share column names
    and a QQP model can be evaluated on PAWS without remapping.
    """
    if config is None and str(hub_id).lower() in _GLUE_IDS:
        config = "qqp"
    raw = load_table(hub_id, config, split, what="QQP data", hub_example="nyu-mll/glue",
                     **load_kwargs)
    return _normalize_pairs(raw, PARAPHRASE_COLUMNS, (("question1", "text_a"), ("question2", "text_b")),
                            paraphrase_label_names, PARAPHRASE_LABELS, drop_unlabeled)


_BYTES_LITERAL = re.compile(r"""^b(['"])(.*)\1$""", re.DOTALL)


def _strip_bytes_literal(text: str) -> str:
    """PAWS-QQP's generation script, run under Python 3, can write sentences as ``b'...'`` literals."""
    match = _BYTES_LITERAL.match(text)
    if not match:
        return text
    import ast

    try:
        return ast.literal_eval(text).decode("utf-8")
    except (ValueError, SyntaxError, UnicodeDecodeError):
        return match.group(2)


def load_paws(path_or_hub_id: str | os.PathLike[str] = "google-research-datasets/paws", split: str = "test", *,
              config: str | None = "labeled_final", not_equivalent_only: bool = False,
              **load_kwargs: Any) -> Dataset:
    """PAWS as ``sentence1, sentence2, label`` in :data:`paraphrase_label_names` order (1 = paraphrase).

    Expected layouts:

    * **PAWS-QQP** (the paper's OOD set for QQP) is not on the Hub because QQP's license forbids redistribution;
      build it with the PAWS repository's ``qqp_generate_data.py`` and pass the output folder holding
      ``train.tsv`` and ``dev_and_test.tsv`` (columns ``id, sentence1, sentence2, label``). ``split="all"`` reads
      both files (about 12.7k pairs, as the paper counts), ``split="test"``/``"validation"`` reads
      ``dev_and_test.tsv``. ``b'...'`` byte literals written by the script are decoded.
    * **PAWS-Wiki** from the Hub (``google-research-datasets/paws``, configs ``labeled_final`` (default),
      ``labeled_swap``, ``unlabeled_final``; splits train/validation/test) — same columns. ``config`` is ignored
      for local paths.

    ``not_equivalent_only=True`` keeps the non-paraphrase pairs only: the paper evaluates on those (8,696 of
    PAWS-QQP), because the paraphrase pairs are heuristic-friendly.
    """
    kind_is_hub = isinstance(path_or_hub_id, str) and not Path(path_or_hub_id).expanduser().exists()
    raw = load_table(path_or_hub_id, config if kind_is_hub else None, split, what="PAWS data",
                     hub_example="google-research-datasets/paws", **load_kwargs)
    dataset = _normalize_pairs(raw, PARAPHRASE_COLUMNS, (("question1", "text_a"), ("question2", "text_b")),
                               paraphrase_label_names, PARAPHRASE_LABELS, drop_unlabeled=True)
    first, second = PARAPHRASE_COLUMNS
    texts = [column(dataset, first), column(dataset, second)]
    if any(_BYTES_LITERAL.match(t) for values in texts for t in values):
        labels = column(dataset, "label")
        dataset = from_columns(
            {first: [_strip_bytes_literal(t) for t in texts[0]], second: [_strip_bytes_literal(t) for t in texts[1]],
             "label": labels},
            features=Features({first: Value("string"), second: Value("string"),
                               "label": ClassLabel(names=paraphrase_label_names)}),
        )
    if not_equivalent_only:
        dataset = dataset.select([i for i, v in enumerate(column(dataset, "label")) if v == 0])
    return dataset
