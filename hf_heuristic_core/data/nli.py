"""Evaluation and training data for heuristic-core studies (re-exported from the modules that hold them).

Three groups of helpers live here:

* **HANS** (McCoy et al. 2019), the out-of-domain NLI test: :func:`load_hans` reads it from the Hub
  (``hans`` / ``jhu-cogsci/hans``) or from a local copy (JSON lines, parquet, arrow, CSV/TSV, the original
  ``heuristics_*_set.txt`` release, or a ``save_to_disk`` folder) and normalizes every source to one schema::

      premise, hypothesis, label (0 entailment / 1 non-entailment), heuristic, subcase (short, e.g.
      "ln_subject-object_swap"), subcase_full ("lexical_overlap_ln_subject-object_swap"),
      counter_heuristic (True for the ln_/sn_/cn_ subcases, where the heuristic gives the wrong answer)
      [+ template, when the source has it]

  Subcase names are made filesystem-safe the way the Heuristic Core paper writes them: the original HANS names
  ``ln_subject/object_swap``, ``sn_NP/S``, ``sn_NP/Z`` become ``ln_subject-object_swap``, ``sn_NP-S``, ``sn_NP-Z``
  (the original spellings are still accepted when filtering). :func:`filter_subcases` and :func:`hans_subsets`
  select and split by subcase using full names, short names or the paper's abbreviations (``SO-Swap`` ...).
* **In-domain / paraphrase sets**: :func:`load_mnli`, :func:`load_qqp`, :func:`load_paws` are thin wrappers over
  :func:`datasets.load_dataset` that also accept local paths and normalize column names and label order, so a
  model's label ids mean the same thing on every set.
* **An offline generator**, :func:`generate_nli`, of HANS-style premise/hypothesis pairs built from this project's
  own templates and vocabulary (:data:`GENERATOR_VOCABULARY`), for runs without network access and for controlled
  training-dynamics studies.

Design of the generated data (why it looks the way it does)
-----------------------------------------------------------
The Heuristic Core paper observes that a model fine-tuned on MNLI first learns the lexical-overlap heuristic
(in-domain accuracy saturates early) and only much later the behaviour that generalizes to HANS's
counter-heuristic subcases, and that the *effective size* of the model grows in between. :func:`generate_nli`
builds a training set with the same pressure, small enough to train in minutes:

* ``1 - counter_heuristic_fraction`` of the training examples are *heuristic-friendly*: high-overlap pairs that
  are entailed (the ``*e_`` subcases: passive, around a relative clause, PP on the object, factive verb, factive
  adverb) and low-overlap pairs that are not (the ``control`` subcases ``xn_unrelated`` and
  ``xn_partial_overlap``, whose hypotheses talk about other people or other actions). On these, "all hypothesis
  words occur in the premise => entailment" is always right.
* a small ``counter_heuristic_fraction`` (default 5%) are *counter-heuristic*: every hypothesis word occurs in
  the premise, yet the pair is not entailed (the ``*n_`` subcases). Only these force the model past the heuristic,
  and because they are rare, that happens late in training.
* labels are balanced 50/50 in every training-like split.
* ``id_eval`` has the training distribution (disjoint examples); ``ood_eval`` holds the counter-heuristic subcases,
  balanced per subcase, on which a pure overlap heuristic scores 0%.

By default the counter-heuristic training examples come from the same templates as the OOD set (the OOD set is
"out of distribution" because those templates are rare in training, as in MNLI). Pass ``counter_subcases`` to
hold some templates out of training entirely and measure generalization to unseen constructions: the control
premises are drawn only from templates of the training mix, so held-out constructions (a conditional, a
non-factive verb, ...) never occur in training at all.

The code lives in one module per job: :mod:`.tables` (the one table loader, on `datasets`' builders),
:mod:`.labels` (label orders, prediction collapsing), :mod:`.hans` (HANS schema, subcase names),
:mod:`.pairs` (MNLI / QQP / PAWS), :mod:`.vocabulary`, :mod:`.templates` and :mod:`.generate` (the generator).
This module keeps every name importable from ``hf_heuristic_core.data.nli``.
"""

from __future__ import annotations

from .generate import generate_nli
from .hans import (
                   HANS_ABBREVIATIONS,
                   HANS_COLUMNS,
                   PAPER_OOD_SUBCASES,
                   filter_subcases,
                   hans_subsets,
                   load_hans,
                   resolve_subcases,
)
from .labels import (
                   collapse_nli_predictions,
                   entailment_id_from_labels,
                   mnli_label_names,
                   nli_label_names,
                   paraphrase_label_names,
)
from .pairs import NLI_COLUMNS, PARAPHRASE_COLUMNS, load_mnli, load_paws, load_qqp
from .templates import GENERATED_SUBCASES, GeneratedSubcase
from .vocabulary import GENERATOR_VOCABULARY, Vocabulary

__all__ = [
                   "GENERATED_SUBCASES",
                   "GENERATOR_VOCABULARY",
                   "HANS_ABBREVIATIONS",
                   "HANS_COLUMNS",
                   "NLI_COLUMNS",
                   "PAPER_OOD_SUBCASES",
                   "PARAPHRASE_COLUMNS",
                   "GeneratedSubcase",
                   "Vocabulary",
                   "collapse_nli_predictions",
                   "entailment_id_from_labels",
                   "filter_subcases",
                   "generate_nli",
                   "hans_subsets",
                   "load_hans",
                   "load_mnli",
                   "load_paws",
                   "load_qqp",
                   "mnli_label_names",
                   "nli_label_names",
                   "paraphrase_label_names",
                   "resolve_subcases",
]
