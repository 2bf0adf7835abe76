"""Templates of the offline HANS-style generator: one function per subcase, drawing words from a :class:`Vocabulary`.

Each template returns ``(premise tokens, hypothesis tokens)``; :data:`GENERATED_SUBCASES` says which heuristic a
template belongs to, its label and whether the lexical-overlap heuristic gets it wrong (counter-heuristic).
The order of random draws inside each template is part of the generator's output: changing it changes the data
generated for a seed.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .vocabulary import Vocabulary

__all__ = ["GENERATED_SUBCASES", "SUBCASE_SPECS", "GeneratedSubcase", "Pair", "TemplateContext"]

_NP = tuple[tuple[str, str], bool]  # ((singular, plural), is_plural)


class TemplateContext:
    """Per-example state: tense, and the nouns/verbs already used (so nouns are distinct and controls can pick
    words that are *not* in the premise)."""

    def __init__(self, rng: random.Random, vocab: Vocabulary, tense: str,
                 premise_pool: Sequence[Callable[[TemplateContext], Pair]] = ()) -> None:
        self.rng, self.vocab, self.tense = rng, vocab, tense
        self.premise_pool = premise_pool
        self.nouns: list[_NP] = []
        self.verbs: list[str] = []

    def person(self, plural: bool | None = None) -> _NP:
        used = {n for n, _ in self.nouns}
        noun = self.rng.choice([n for n in self.vocab.nouns if n not in used])
        entry = (noun, self.rng.random() < 0.5 if plural is None else plural)
        self.nouns.append(entry)
        return entry

    def verb(self, group: Sequence[tuple[str, ...]]) -> tuple[str, ...]:
        forms = self.rng.choice([v for v in group if v[0] not in self.verbs])
        self.verbs.append(forms[0])
        return forms

    def finite(self, verb: tuple[str, ...], subject: _NP) -> str:
        if self.tense == "past":
            return verb[2]
        return verb[0] if subject[1] else verb[1]

    def be(self, subject: _NP) -> str:
        if self.tense == "past":
            return "were" if subject[1] else "was"
        return "are" if subject[1] else "is"

    def pick(self, options: Sequence[str]) -> list[str]:
        return self.rng.choice(options).split()


def _np(entry: _NP) -> list[str]:
    noun, plural = entry
    return ["the", noun[1] if plural else noun[0]]


def _clause(ctx: TemplateContext, subject: _NP, verb: tuple[str, ...], obj: _NP | None) -> list[str]:
    return _np(subject) + [ctx.finite(verb, subject)] + (_np(obj) if obj else [])


def _random_clause(ctx: TemplateContext, subject: _NP | None = None) -> list[str]:
    """A simple clause, transitive two times in three."""
    subject = subject or ctx.person()
    if ctx.rng.random() < 2 / 3:
        verb = ctx.verb(ctx.vocab.transitive)
        return _clause(ctx, subject, verb, ctx.person())
    return _clause(ctx, subject, ctx.verb(ctx.vocab.intransitive), None)


def _main_predicate(ctx: TemplateContext, subject: _NP) -> list[str]:
    """Verb (+ object) of a main clause whose subject carries a modifier."""
    if ctx.rng.random() < 2 / 3:
        return [ctx.finite(ctx.verb(ctx.vocab.transitive), subject)] + _np(ctx.person())
    return [ctx.finite(ctx.verb(ctx.vocab.intransitive), subject)]


Pair = tuple[list[str], list[str]]


def _ln_subject_object_swap(ctx: TemplateContext) -> Pair:
    a, b, verb = ctx.person(), ctx.person(), ctx.verb(ctx.vocab.transitive)
    return _clause(ctx, a, verb, b), _clause(ctx, b, verb, a)


def _ln_preposition(ctx: TemplateContext) -> Pair:
    # "The pilot near the nurses thanked the chef." -/-> "The pilot thanked the nurses."
    a, b, c = ctx.person(), ctx.person(), ctx.person()
    verb, prep = ctx.verb(ctx.vocab.transitive), ctx.pick(ctx.vocab.prepositions)
    premise = _np(a) + prep + _np(b) + [ctx.finite(verb, a)] + _np(c)
    return premise, _clause(ctx, a, verb, b)


def _sn_np_s(ctx: TemplateContext) -> Pair:
    # "The pilot forgot the nurses waited." -/-> "The pilot forgot the nurses."
    a, b = ctx.person(), ctx.person()
    verb = ctx.verb(ctx.vocab.np_or_clause)
    head = _np(a) + [ctx.finite(verb, a)]
    return head + _random_clause(ctx, b), head + _np(b)


def _sn_relative_clause_on_subject(ctx: TemplateContext) -> Pair:
    # "The pilot who greeted the nurse waited." -/-> "The nurse waited."
    a = ctx.person()
    # In the present tense the main verb agrees with `a`; give `b` the same number so the subsequence is grammatical.
    b = ctx.person(plural=a[1] if ctx.tense == "present" else None)
    rel = ctx.verb(ctx.vocab.transitive)
    predicate = _main_predicate(ctx, a)
    premise = _np(a) + ctx.pick(ctx.vocab.relative_pronouns) + [ctx.finite(rel, a)] + _np(b) + predicate
    return premise, _np(b) + predicate


def _cn_embedded_under_if(ctx: TemplateContext) -> Pair:
    # "If the pilot waited, the nurses left." -/-> "The pilot waited."
    condition = _random_clause(ctx)
    return ctx.pick(ctx.vocab.conditionals) + condition + [","] + _random_clause(ctx), condition


def _embedded_under(group: str) -> Callable[[TemplateContext], Pair]:
    def make(ctx: TemplateContext) -> Pair:
        a = ctx.person()
        verb = ctx.verb(getattr(ctx.vocab, group))
        embedded = _random_clause(ctx)
        return _np(a) + [ctx.finite(verb, a), "that"] + embedded, embedded

    return make


def _adverb(group: str) -> Callable[[TemplateContext], Pair]:
    def make(ctx: TemplateContext) -> Pair:
        clause = _random_clause(ctx)
        return ctx.pick(getattr(ctx.vocab, group)) + clause, clause

    return make


def _le_passive(ctx: TemplateContext) -> Pair:
    # "The nurses were thanked by the pilot." -> "The pilot thanked the nurses."
    agent, patient, verb = ctx.person(), ctx.person(), ctx.verb(ctx.vocab.transitive)
    premise = _np(patient) + [ctx.be(patient), verb[3], "by"] + _np(agent)
    return premise, _clause(ctx, agent, verb, patient)


def _le_around_relative_clause(ctx: TemplateContext) -> Pair:
    # "The pilot who greeted the nurses thanked the chef." -> "The pilot thanked the chef."
    a, b = ctx.person(), ctx.person()
    rel = ctx.verb(ctx.vocab.transitive)
    predicate = _main_predicate(ctx, a)
    premise = _np(a) + ctx.pick(ctx.vocab.relative_pronouns) + [ctx.finite(rel, a)] + _np(b) + predicate
    return premise, _np(a) + predicate


def _se_pp_on_obj(ctx: TemplateContext) -> Pair:
    # "The pilot thanked the nurses near the chef." -> "The pilot thanked the nurses."
    a, b, verb = ctx.person(), ctx.person(), ctx.verb(ctx.vocab.transitive)
    clause = _clause(ctx, a, verb, b)
    return clause + ctx.pick(ctx.vocab.prepositions) + _np(ctx.person()), clause


def _control_premise(ctx: TemplateContext) -> list[str]:
    """A premise from a template of the training mix, so premise shape alone never gives the label away
    (and constructions held out of training do not leak in through the controls)."""
    return ctx.rng.choice(ctx.premise_pool)(ctx)[0]


def _xn_unrelated(ctx: TemplateContext) -> Pair:
    # Hypothesis about other people doing other things: no content word in common.
    premise = _control_premise(ctx)
    return premise, _random_clause(ctx)


def _xn_partial_overlap(ctx: TemplateContext) -> Pair:
    # One person of the premise, doing something the premise never mentions (ctx.verb skips used verbs).
    premise = _control_premise(ctx)
    shared = ctx.rng.choice(ctx.nouns)
    roll = ctx.rng.random()
    if roll < 1 / 3:
        hypothesis = _clause(ctx, shared, ctx.verb(ctx.vocab.intransitive), None)
    elif roll < 2 / 3:
        hypothesis = _clause(ctx, shared, ctx.verb(ctx.vocab.transitive), ctx.person())
    else:
        subject = ctx.person()
        hypothesis = _clause(ctx, subject, ctx.verb(ctx.vocab.transitive), shared)
    return premise, hypothesis


@dataclass(frozen=True)
class GeneratedSubcase:
    """One template family of :func:`generate_nli`."""

    heuristic: str
    subcase: str
    label: int
    counter_heuristic: bool
    description: str
    make: Callable[[TemplateContext], Pair]

    @property
    def full_name(self) -> str:
        return f"{self.heuristic}_{self.subcase}"


_S = GeneratedSubcase
_SPECS = [
    _S("lexical_overlap", "ln_subject-object_swap", 1, True, "subject and object swapped", _ln_subject_object_swap),
    _S("lexical_overlap", "ln_preposition", 1, True, "object replaced by the noun of a PP on the subject",
       _ln_preposition),
    _S("lexical_overlap", "le_passive", 0, False, "passive premise, active hypothesis", _le_passive),
    _S("lexical_overlap", "le_around_relative_clause", 0, False, "relative clause on the subject dropped",
       _le_around_relative_clause),
    _S("subsequence", "sn_NP-S", 1, True, "clause complement read as an object NP", _sn_np_s),
    _S("subsequence", "sn_relative_clause_on_subject", 1, True,
       "object of a subject relative clause taken as the main subject", _sn_relative_clause_on_subject),
    _S("subsequence", "se_PP_on_obj", 0, False, "PP on the object dropped", _se_pp_on_obj),
    _S("constituent", "cn_embedded_under_if", 1, True, "clause of a conditional", _cn_embedded_under_if),
    _S("constituent", "cn_embedded_under_verb", 1, True, "clause under a non-factive verb",
       _embedded_under("nonfactive")),
    _S("constituent", "cn_adverb", 1, True, "clause under a non-factive adverb", _adverb("nonfactive_adverbs")),
    _S("constituent", "ce_embedded_under_verb", 0, False, "clause under a factive verb",
       _embedded_under("factive")),
    _S("constituent", "ce_adverb", 0, False, "clause under a factive adverb", _adverb("factive_adverbs")),
    _S("control", "xn_unrelated", 1, False, "hypothesis shares no content word", _xn_unrelated),
    _S("control", "xn_partial_overlap", 1, False, "hypothesis shares one noun, new verb", _xn_partial_overlap),
]
SUBCASE_SPECS: tuple[GeneratedSubcase, ...] = tuple(_SPECS)
"""Every template family, in the order the generator lists them."""

GENERATED_SUBCASES: dict[str, GeneratedSubcase] = {s.full_name: s for s in _SPECS}
"""Template families of :func:`generate_nli`, by full name. ``heuristic='control'`` marks the low-overlap,
non-entailed pairs on which the overlap heuristic is right."""
