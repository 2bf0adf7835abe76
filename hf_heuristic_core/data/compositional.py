"""A synthetic two-subroutine language task for Lepori's subtask test (odd-one-out, agreement-style).

Lepori et al. (*Break It Down*, sec. 6) build odd-one-out tasks from Marvin & Linzen's agreement data: four
sentences, three follow a rule, the model names the one that does not. The compositional rule is
`C = SR1 & SR2` with SR1 = "the subject is singular" and SR2 = "the verb is singular"; the rule-breakers are
(plural subject, singular verb) and (singular subject, plural verb). This module generates the same structure from a
small closed vocabulary, so a from-scratch model can learn it on a CPU in seconds.

Two layouts:

- fixed (`nuisance=False`, the original): `[CLS] subject preposition attractor verb filler [SEP]`, 7 tokens.
  `attractor` is a noun of random number between subject and verb, so the subject's number must be read at its
  position. Every sentence has the same template, so the four sentences of a problem differ only in their words:
  any leftover trace of a feature picks the odd one, and accuracy cannot tell a strong signal from a faint one.
- varied (`nuisance=True`): like Lepori's data, whose four sentences are drawn independently from several
  Marvin & Linzen templates, each sentence picks one of four templates (`TEMPLATES`: simple, prepositional phrase,
  object relative clause with and without "that"), optional adjectives, one of several determiners and 0-3 trailing
  fillers, so lengths (5-14 tokens, right-padded with [PAD] to `MAX_LENGTH`) and the subject's and verb's positions
  vary. The relative clauses put a second verb between subject and main verb, agreeing with the attractor. The
  sentences of a problem now differ in many ways besides the rule, so only a clear feature signal finds the odd one.

The tasks (`TASKS`), as in Lepori's `create_datasets.py`:

- `compositional`: rule-followers are (+SR1, +SR2); the odd one is (-, +) or (+, -) (base-model training).
- `sr1` / `sr2`: rule-followers have +SR_i and a random other feature; the odd one is -SR_i with the other feature
  + (his mask sets: negatives only from the "SR_i flipped" pool).
- `odd_sr1` / `odd_sr2`: rule-followers are (+, +); the odd one differs only in SR_i: (-, +) or (+, -). For the
  SR1 subnetwork, `odd_sr1` is Test-Target and `odd_sr2` is Test-Other.

Chance is 1/4. Every example is `input_ids` `[4, length]` and the index of the odd sentence; `attention_mask(ids)`
gives the mask for the padded layout.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["CHANCE", "MAX_LENGTH", "PAD", "SENTENCE_LENGTH", "TASKS", "TEMPLATES", "AgreementVocabulary",
           "attention_mask", "odd_one_out", "sentence_features"]

TASKS = ("compositional", "sr1", "sr2", "odd_sr1", "odd_sr2")
TEMPLATES = ("simple", "prepositional", "object_relative", "object_relative_no_that")
CHANCE = 0.25
SENTENCE_LENGTH = 7      # the fixed layout
MAX_LENGTH = 14          # the varied layout: [CLS] D A S that D A N V V F F F [SEP]
PAD, CLS, SEP = 0, 1, 2
_SUBJECT, _ATTRACTOR, _VERB = 1, 3, 4   # token positions in a fixed-layout sentence


@dataclass(frozen=True)
class AgreementVocabulary:
    """Token ids: 0 [PAD], 1 [CLS], 2 [SEP], then blocks of singular / plural nouns and verbs, prepositions,
    fillers (`words_per_class` each for nouns and verbs), and for the varied layout determiners, "that" and
    adjectives (appended, so the fixed layout's ids do not change)."""

    words_per_class: int = 12
    prepositions: int = 4
    fillers: int = 8
    determiners: int = 3
    adjectives: int = 12

    def block(self, index: int) -> torch.Tensor:
        """Ids of block `index`: 0 singular nouns, 1 plural nouns, 2 singular verbs, 3 plural verbs."""
        start = 3 + index * self.words_per_class
        return torch.arange(start, start + self.words_per_class)

    def _range(self, offset: int, count: int) -> torch.Tensor:
        start = 3 + 4 * self.words_per_class + offset
        return torch.arange(start, start + count)

    @property
    def preposition_ids(self) -> torch.Tensor:
        return self._range(0, self.prepositions)

    @property
    def filler_ids(self) -> torch.Tensor:
        return self._range(self.prepositions, self.fillers)

    @property
    def determiner_ids(self) -> torch.Tensor:
        return self._range(self.prepositions + self.fillers, self.determiners)

    @property
    def that_id(self) -> int:
        return int(self._range(self.prepositions + self.fillers + self.determiners, 1)[0])

    @property
    def adjective_ids(self) -> torch.Tensor:
        return self._range(self.prepositions + self.fillers + self.determiners + 1, self.adjectives)

    @property
    def size(self) -> int:
        return 3 + 4 * self.words_per_class + self.prepositions + self.fillers + self.determiners + 1 + \
            self.adjectives


def _pick(ids: torch.Tensor, n: int, generator: torch.Generator) -> torch.Tensor:
    return ids[torch.randint(0, len(ids), (n,), generator=generator)]


def _fixed_sentences(singular_subject: torch.Tensor, singular_verb: torch.Tensor, vocab: AgreementVocabulary,
                     generator: torch.Generator) -> torch.Tensor:
    """One fixed-layout sentence per entry of the two boolean feature vectors: `[n, SENTENCE_LENGTH]`."""
    n = singular_subject.numel()
    nouns = torch.stack([vocab.block(0), vocab.block(1)])          # [number, words]; number 0 singular, 1 plural
    verbs = torch.stack([vocab.block(2), vocab.block(3)])
    word = lambda table, number: table[number, torch.randint(0, table.shape[1], (n,), generator=generator)]
    subject = word(nouns, (~singular_subject).long())
    attractor = word(nouns, torch.randint(0, 2, (n,), generator=generator))
    verb = word(verbs, (~singular_verb).long())
    return torch.stack([torch.full((n,), CLS), subject, _pick(vocab.preposition_ids, n, generator), attractor, verb,
                        _pick(vocab.filler_ids, n, generator), torch.full((n,), SEP)], 1)


def _varied_sentences(singular_subject: torch.Tensor, singular_verb: torch.Tensor, vocab: AgreementVocabulary,
                      generator: torch.Generator) -> torch.Tensor:
    """One varied-layout sentence per entry (template, adjectives, determiners, fillers drawn per sentence):
    `[n, MAX_LENGTH]`, right-padded with [PAD]."""
    n = singular_subject.numel()
    draw = lambda high: torch.randint(0, high, (n,), generator=generator).tolist()
    nouns = [vocab.block(0).tolist(), vocab.block(1).tolist()]
    verbs = [vocab.block(2).tolist(), vocab.block(3).tolist()]
    determiners, adjectives = vocab.determiner_ids.tolist(), vocab.adjective_ids.tolist()
    prepositions, fillers = vocab.preposition_ids.tolist(), vocab.filler_ids.tolist()
    template, attractor_number, filler_count = draw(len(TEMPLATES)), draw(2), draw(4)
    subject_word, attractor_word, verb_word, embedded_word = (draw(vocab.words_per_class) for _ in range(4))
    det1, det2, adj1, adj2 = draw(vocab.determiners), draw(vocab.determiners), draw(2), draw(2)
    adj1_word, adj2_word, preposition = draw(vocab.adjectives), draw(vocab.adjectives), draw(vocab.prepositions)
    filler_words = torch.randint(0, vocab.fillers, (n, 3), generator=generator).tolist()
    subject_number = (~singular_subject).long().tolist()
    verb_number = (~singular_verb).long().tolist()
    out = torch.full((n, MAX_LENGTH), PAD, dtype=torch.long)
    for i in range(n):
        subject = [determiners[det1[i]]] + ([adjectives[adj1_word[i]]] if adj1[i] else []) + \
            [nouns[subject_number[i]][subject_word[i]]]
        attractor = [determiners[det2[i]]] + ([adjectives[adj2_word[i]]] if adj2[i] else []) + \
            [nouns[attractor_number[i]][attractor_word[i]]]
        embedded = [verbs[attractor_number[i]][embedded_word[i]]]      # agrees with the attractor
        middle = {"simple": [], "prepositional": [prepositions[preposition[i]]] + attractor,
                  "object_relative": [vocab.that_id] + attractor + embedded,
                  "object_relative_no_that": attractor + embedded}[TEMPLATES[template[i]]]
        tokens = [CLS] + subject + middle + [verbs[verb_number[i]][verb_word[i]]] + \
            [fillers[f] for f in filler_words[i][:filler_count[i]]] + [SEP]
        out[i, :len(tokens)] = torch.tensor(tokens)
    return out


def attention_mask(input_ids: torch.Tensor) -> torch.Tensor:
    """1 for real tokens, 0 for [PAD] (the varied layout is right-padded)."""
    return (input_ids != PAD).long()


def sentence_features(input_ids: torch.Tensor, vocab: AgreementVocabulary) -> tuple[torch.Tensor, torch.Tensor]:
    """(+SR1, +SR2) of each sentence, read back from its tokens (for checks): singular subject, singular verb.

    The subject is the first noun of the sentence and the main verb its last verb, in both layouts."""
    nouns = torch.isin(input_ids, torch.cat([vocab.block(0), vocab.block(1)]))
    verbs = torch.isin(input_ids, torch.cat([vocab.block(2), vocab.block(3)]))
    positions = torch.arange(input_ids.shape[-1]).expand_as(input_ids)
    first_noun = torch.where(nouns, positions, input_ids.shape[-1]).argmin(-1, keepdim=True)
    last_verb = torch.where(verbs, positions, -1).argmax(-1, keepdim=True)
    subject, verb = input_ids.gather(-1, first_noun).squeeze(-1), input_ids.gather(-1, last_verb).squeeze(-1)
    return torch.isin(subject, vocab.block(0)), torch.isin(verb, vocab.block(2))


def odd_one_out(task: str, n: int, generator: torch.Generator, vocab: AgreementVocabulary | None = None,
                nuisance: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """`n` odd-one-out examples of `task` (see `TASKS`): `input_ids` `[n, 4, SENTENCE_LENGTH]` (or `[n, 4,
    MAX_LENGTH]`, padded, with `nuisance=True`), labels `[n]`."""
    if task not in TASKS:
        raise ValueError(f"Unknown odd-one-out task {task!r}; choose one of {TASKS}.")
    if n < 1:
        raise ValueError(f"odd_one_out needs n >= 1 examples, got {n}.")
    vocab = vocab or AgreementVocabulary()
    ones = lambda: torch.ones(n, 4, dtype=torch.bool)
    labels = torch.randint(0, 4, (n,), generator=generator)
    rows = torch.arange(n)
    sr1, sr2 = ones(), ones()
    if task == "compositional":                       # the odd one is (-, +) or (+, -)
        breaks_sr1 = torch.rand(n, generator=generator) < 0.5
        sr1[rows, labels] = ~breaks_sr1
        sr2[rows, labels] = breaks_sr1
    else:
        target, other = (sr1, sr2) if task.endswith("sr1") else (sr2, sr1)
        if task in ("sr1", "sr2"):                    # mask training: the rule-followers' other feature is random
            other.copy_(torch.rand(n, 4, generator=generator) < 0.5)
            other[rows, labels] = True                # the odd one comes from the "SR_i flipped" pool: other +
        target[rows, labels] = False                  # the odd one lacks SR_i
    build = _varied_sentences if nuisance else _fixed_sentences
    ids = build(sr1.flatten(), sr2.flatten(), vocab, generator)
    return ids.view(n, 4, ids.shape[-1]), labels
