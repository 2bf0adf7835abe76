"""`generate_nli`: HANS-style NLI data generated offline, with a controlled share of counter-heuristic examples.

See :mod:`hf_heuristic_core.data.nli` for the design. Same seed -> identical datasets (a test pins their hashes).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from datasets import Dataset, DatasetDict

from .hans import nli_features, resolve_subcases
from .tables import from_columns
from .templates import (
    GENERATED_SUBCASES,
    SUBCASE_SPECS,
    GeneratedSubcase,
    Pair,
    TemplateContext,
)
from .vocabulary import GENERATOR_VOCABULARY, Vocabulary

__all__ = ["generate_nli"]

_SPECS = SUBCASE_SPECS

_MAX_TRIES = 200


def _render(tokens: Sequence[str], hans_spacing: bool) -> str:
    text = " ".join([*tokens, "."])
    if not hans_spacing:
        text = text.replace(" ,", ",").replace(" .", ".")
    return text[0].upper() + text[1:]


def _example(spec: GeneratedSubcase, rng: random.Random, vocab: Vocabulary, hans_spacing: bool,
             seen: set[tuple[str, str]], premise_pool: Sequence[Callable[[TemplateContext], Pair]]) -> dict[str, Any]:
    """One new (premise, hypothesis) pair of ``spec`` not in ``seen``; re-draws on collision."""
    for _ in range(_MAX_TRIES):
        ctx = TemplateContext(rng, vocab, rng.choice(("past", "present")), premise_pool)
        premise_tokens, hypothesis_tokens = spec.make(ctx)
        pair = (_render(premise_tokens, hans_spacing), _render(hypothesis_tokens, hans_spacing))
        if pair not in seen:
            seen.add(pair)
            return {
                "premise": pair[0], "hypothesis": pair[1], "label": spec.label, "heuristic": spec.heuristic,
                "subcase": spec.subcase, "subcase_full": spec.full_name, "counter_heuristic": spec.counter_heuristic,
            }
    raise RuntimeError(f"could not draw a new {spec.full_name} example in {_MAX_TRIES} tries; "
                       "the vocabulary is too small for the requested sizes")


def _spread(names: Sequence[str], count: int) -> list[str]:
    """``count`` subcase names, as even across ``names`` as possible."""
    return [names[i % len(names)] for i in range(count)] if names else []


def _training_plan(size: int, fraction: float, entailed: Sequence[str], counter: Sequence[str],
                   controls: Sequence[str]) -> list[str]:
    """Half entailed (heuristic right), ``fraction`` counter-heuristic, the rest low-overlap controls."""
    n_counter = round(fraction * size)
    n_entailed = size // 2
    n_control = size - n_entailed - n_counter
    return _spread(entailed, n_entailed) + _spread(counter, n_counter) + _spread(controls, n_control)


def _to_dataset(rows: list[dict[str, Any]]) -> Dataset:
    features = nli_features()
    columns = {name: [row[name] for row in rows] for name in features}
    return from_columns(columns, features)


def _generated_names(requested: Iterable[str] | None, default: Iterable[str]) -> list[str]:
    available = [(s.full_name, s.subcase) for s in _SPECS if s.heuristic != "control"]
    return list(default) if requested is None else resolve_subcases(requested, available)


def generate_nli(train_size: int = 20_000, id_eval_size: int = 2_000, ood_eval_size_per_subcase: int = 500, *,
                 counter_heuristic_fraction: float = 0.05, ood_subcases: Iterable[str] | None = None,
                 counter_subcases: Iterable[str] | None = None, seed: int = 0, hans_spacing: bool = False,
                 vocabulary: Vocabulary = GENERATOR_VOCABULARY) -> DatasetDict:
    """Generate a heuristic-friendly NLI training set and ID / OOD evaluation sets, offline.

    Returns a DatasetDict with ``train``, ``id_eval`` (training distribution, disjoint examples) and ``ood_eval``
    (``ood_eval_size_per_subcase`` pairs of each OOD subcase), all with :data:`HANS_COLUMNS`.
    See the module docstring for the design. ``ood_subcases`` (default: every counter-heuristic subcase) accepts
    full, short or abbreviated names; entailed subcases listed there leave the training mix. Counter-heuristic
    training examples come from ``counter_subcases`` (default: the counter-heuristic ones among ``ood_subcases``).
    ``hans_spacing=True`` writes "waited ." like HANS instead of "waited.". Same seed -> identical datasets; no
    (premise, hypothesis) pair occurs twice across or within splits.
    """
    if not 0.0 <= counter_heuristic_fraction <= 0.5:
        raise ValueError("counter_heuristic_fraction must be in [0, 0.5] (labels are kept balanced)")
    if min(train_size, id_eval_size, ood_eval_size_per_subcase) < 0:
        raise ValueError("sizes must be non-negative")
    vocabulary.validate()
    counter_all = [s.full_name for s in _SPECS if s.counter_heuristic]
    ood = _generated_names(ood_subcases, counter_all)
    counter = _generated_names(counter_subcases, [n for n in ood if GENERATED_SUBCASES[n].counter_heuristic])
    if any(not GENERATED_SUBCASES[n].counter_heuristic for n in counter):
        raise ValueError(f"counter_subcases must be counter-heuristic subcases, one of {counter_all}")
    entailed = [s.full_name for s in _SPECS if s.label == 0 and s.full_name not in ood]
    controls = [s.full_name for s in _SPECS if s.heuristic == "control"]
    if not entailed:
        raise ValueError("ood_subcases leaves no entailed subcase for training")
    if counter_heuristic_fraction > 0 and not counter:
        raise ValueError("counter_heuristic_fraction > 0 needs at least one counter-heuristic subcase")

    rng = random.Random(seed)
    seen: set[tuple[str, str]] = set()
    trained = [*entailed, *(counter if counter_heuristic_fraction > 0 else [])]
    pool = [GENERATED_SUBCASES[n].make for n in trained]  # premise shapes the controls may use

    def build(plan: list[str], shuffle: bool) -> Dataset:
        rows = [_example(GENERATED_SUBCASES[name], rng, vocabulary, hans_spacing, seen, pool) for name in plan]
        if shuffle:
            rng.shuffle(rows)
        return _to_dataset(rows)

    # Evaluation sets first, so they get first pick and training examples avoid them.
    ood_eval = build([n for n in ood for _ in range(ood_eval_size_per_subcase)], shuffle=False)
    id_eval = build(_training_plan(id_eval_size, counter_heuristic_fraction, entailed, counter, controls), True)
    train = build(_training_plan(train_size, counter_heuristic_fraction, entailed, counter, controls), True)
    return DatasetDict({"train": train, "id_eval": id_eval, "ood_eval": ood_eval})
