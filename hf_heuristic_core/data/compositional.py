"""A synthetic two-subroutine language task for Lepori's subtask test (odd-one-out, agreement-style).

Lepori et al. (*Break It Down*, sec. 6) build odd-one-out tasks from Marvin & Linzen's agreement data: four
sentences, three follow a rule, the model names the one that does not. The compositional rule is
`C = SR1 & SR2` with SR1 = "the subject is singular" and SR2 = "the verb is singular"; the rule-breakers are
(plural subject, singular verb) and (singular subject, plural verb). This module generates the same structure from a
small closed vocabulary, so a from-scratch model can learn it on a CPU in seconds:

    [CLS] subject preposition attractor verb filler [SEP]

`subject` is a singular or plural noun (SR1), `verb` a singular or plural verb (SR2); `attractor` is a noun of
random number between them (as in "the house near the fields is ..."), so the subject's number must be read at its
position, not from any noun. The tasks (`TASKS`):

- `compositional`: rule-followers are (+SR1, +SR2); the odd one is (-, +) or (+, -) (base-model training).
- `sr1` / `sr2`: rule-followers have +SR_i and a random other feature; the odd one has -SR_i (mask training).
- `odd_sr1` / `odd_sr2`: rule-followers are (+, +); the odd one differs only in SR_i: (-, +) or (+, -). For the
  SR1 subnetwork, `odd_sr1` is Test-Target and `odd_sr2` is Test-Other.

Chance is 1/4. Every example is `input_ids` `[4, 7]` and the index of the odd sentence.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["CHANCE", "SENTENCE_LENGTH", "TASKS", "AgreementVocabulary", "odd_one_out", "sentence_features"]

TASKS = ("compositional", "sr1", "sr2", "odd_sr1", "odd_sr2")
CHANCE = 0.25
SENTENCE_LENGTH = 7
_SUBJECT, _ATTRACTOR, _VERB = 1, 3, 4   # token positions in a sentence


@dataclass(frozen=True)
class AgreementVocabulary:
    """Token ids: 0 [PAD], 1 [CLS], 2 [SEP], then blocks of singular / plural nouns and verbs, prepositions,
    fillers (`words_per_class` each for nouns and verbs)."""

    words_per_class: int = 12
    prepositions: int = 4
    fillers: int = 8

    def block(self, index: int) -> torch.Tensor:
        """Ids of block `index`: 0 singular nouns, 1 plural nouns, 2 singular verbs, 3 plural verbs."""
        start = 3 + index * self.words_per_class
        return torch.arange(start, start + self.words_per_class)

    @property
    def preposition_ids(self) -> torch.Tensor:
        start = 3 + 4 * self.words_per_class
        return torch.arange(start, start + self.prepositions)

    @property
    def filler_ids(self) -> torch.Tensor:
        start = 3 + 4 * self.words_per_class + self.prepositions
        return torch.arange(start, start + self.fillers)

    @property
    def size(self) -> int:
        return 3 + 4 * self.words_per_class + self.prepositions + self.fillers


def _pick(ids: torch.Tensor, n: int, generator: torch.Generator) -> torch.Tensor:
    return ids[torch.randint(0, len(ids), (n,), generator=generator)]


def _sentences(singular_subject: torch.Tensor, singular_verb: torch.Tensor, vocab: AgreementVocabulary,
               generator: torch.Generator) -> torch.Tensor:
    """One sentence per entry of the two boolean feature vectors: `[n, SENTENCE_LENGTH]`."""
    n = singular_subject.numel()
    nouns = torch.stack([vocab.block(0), vocab.block(1)])          # [number, words]; number 0 singular, 1 plural
    verbs = torch.stack([vocab.block(2), vocab.block(3)])
    word = lambda table, number: table[number, torch.randint(0, table.shape[1], (n,), generator=generator)]
    subject = word(nouns, (~singular_subject).long())
    attractor = word(nouns, torch.randint(0, 2, (n,), generator=generator))
    verb = word(verbs, (~singular_verb).long())
    return torch.stack([torch.full((n,), 1), subject, _pick(vocab.preposition_ids, n, generator), attractor, verb,
                        _pick(vocab.filler_ids, n, generator), torch.full((n,), 2)], 1)


def sentence_features(input_ids: torch.Tensor, vocab: AgreementVocabulary) -> tuple[torch.Tensor, torch.Tensor]:
    """(+SR1, +SR2) of each sentence, read back from its tokens (for checks): singular subject, singular verb."""
    return (torch.isin(input_ids[..., _SUBJECT], vocab.block(0)), torch.isin(input_ids[..., _VERB], vocab.block(2)))


def odd_one_out(task: str, n: int, generator: torch.Generator, vocab: AgreementVocabulary | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """`n` odd-one-out examples of `task` (see `TASKS`): `input_ids` `[n, 4, SENTENCE_LENGTH]`, labels `[n]`."""
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
        varies_other = task in ("sr1", "sr2")        # mask training: the other feature is random
        target, other = (sr1, sr2) if task.endswith("sr1") else (sr2, sr1)
        target[rows, labels] = False                  # the odd one lacks SR_i
        if varies_other:
            other.copy_(torch.rand(n, 4, generator=generator) < 0.5)
    ids = _sentences(sr1.flatten(), sr2.flatten(), vocab, generator)
    return ids.view(n, 4, SENTENCE_LENGTH), labels
