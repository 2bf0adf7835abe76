"""Modular arithmetic data for Subtask Induction (Zhang, Lepori & Pavlick), as `datasets.Dataset`s.

Every row is the four tokens `<a> <b> <sep> <c>`: each number 0..N-1 is its own token, `<sep>` is token N, and the
result `c` (mod p, so 0..p-1) reuses the number tokens. Training is next-token prediction scored on the last token
only: `labels` is -100 everywhere but the result, so a Transformers causal-LM loss (which shifts labels by one)
reads exactly the prediction made at `<sep>`.

Tasks: T1 = a + ab (the source model's task), S1 = ab (the subtask whose subnetwork is transplanted), T2 = a^2 + ab
(the target task). T2's training data is ambiguous on purpose: the N diagonal pairs (i, i), where a^2 + ab = 2a^2 =
a^2 + b^2 = ..., plus k random off-diagonal "disambiguating" pairs. Validation and test are held-out off-diagonal
pairs, disjoint from training and from each other, and the same for every k (nested training sets), so accuracies
at different k compare like with like.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from datasets import Dataset, DatasetDict

__all__ = ["TASKS", "arithmetic_dataset", "induction_splits", "result", "separator_token", "source_splits",
           "vocab_size"]

TASKS: dict[str, Callable[[int, int], int]] = {
    "t1": lambda a, b: a + a * b,
    "s1": lambda a, b: a * b,
    "t2": lambda a, b: a * a + a * b,
}


def _check(num_tokens: int, modulus: int) -> None:
    if num_tokens < 2 or modulus < 2:
        raise ValueError(f"arithmetic data needs num_tokens >= 2 and modulus >= 2, got {num_tokens}, {modulus}.")
    if modulus > num_tokens:
        raise ValueError(f"results mod {modulus} reuse the number tokens, so modulus must be <= num_tokens "
                         f"({num_tokens}); raise num_tokens or lower the modulus.")


def separator_token(num_tokens: int) -> int:
    return num_tokens


def vocab_size(num_tokens: int) -> int:
    """N number tokens and the separator."""
    return num_tokens + 1


def result(task: str, a: int, b: int, modulus: int) -> int:
    if task not in TASKS:
        raise ValueError(f"unknown arithmetic task {task!r}; choose one of {sorted(TASKS)}.")
    return TASKS[task](a, b) % modulus


def arithmetic_dataset(task: str, pairs: Sequence[tuple[int, int]], num_tokens: int, modulus: int) -> Dataset:
    """One row per (a, b): input_ids `[a, b, sep, c]`, labels `[-100, -100, -100, c]`, and a, b, c as columns."""
    _check(num_tokens, modulus)
    bad = [(a, b) for a, b in pairs if not (0 <= a < num_tokens and 0 <= b < num_tokens)]
    if bad:
        raise ValueError(f"pairs must hold numbers in [0, {num_tokens}); got {bad[:3]}.")
    sep = separator_token(num_tokens)
    rows = {"input_ids": [], "labels": [], "a": [], "b": [], "c": []}
    for a, b in pairs:
        c = result(task, a, b, modulus)
        rows["input_ids"].append([a, b, sep, c])
        rows["labels"].append([-100, -100, -100, c])
        rows["a"].append(a)
        rows["b"].append(b)
        rows["c"].append(c)
    return Dataset.from_dict(rows)


def _all_pairs(num_tokens: int) -> list[tuple[int, int]]:
    return [(a, b) for a in range(num_tokens) for b in range(num_tokens)]


def source_splits(num_tokens: int = 40, modulus: int = 7, train_fraction: float = 0.5, seed: int = 0,
                  task: str = "t1") -> DatasetDict:
    """The source task on a random `train_fraction` of all N^2 pairs (train) and the rest (test)."""
    if not 0 < train_fraction < 1:
        raise ValueError(f"train_fraction must be in (0, 1), got {train_fraction}.")
    pairs = _all_pairs(num_tokens)
    random.Random(seed).shuffle(pairs)
    cut = int(round(train_fraction * len(pairs)))
    return DatasetDict(train=arithmetic_dataset(task, pairs[:cut], num_tokens, modulus),
                       test=arithmetic_dataset(task, pairs[cut:], num_tokens, modulus))


def induction_splits(k: int, num_tokens: int = 40, modulus: int = 7, eval_size: int = 400, seed: int = 0,
                     task: str = "t2") -> DatasetDict:
    """T2 data: train = the N diagonal pairs + the first k of a seeded shuffle of the off-diagonal pairs; validation
    and test = the next `eval_size` pairs each. The shuffle depends on `seed` only, so a larger k extends a smaller
    k's training set and validation/test never change with k."""
    pool = [(a, b) for a, b in _all_pairs(num_tokens) if a != b]
    if k < 0 or eval_size < 1:
        raise ValueError(f"k must be >= 0 and eval_size >= 1, got k={k}, eval_size={eval_size}.")
    if k + 2 * eval_size > len(pool):
        raise ValueError(f"k={k} disambiguating pairs plus validation and test of {eval_size} each need "
                         f"{k + 2 * eval_size} off-diagonal pairs, but N={num_tokens} has only {len(pool)}; lower k "
                         "or eval_size, or raise num_tokens.")
    random.Random(seed).shuffle(pool)
    validation, test = pool[:eval_size], pool[eval_size:2 * eval_size]
    disambiguating = pool[2 * eval_size:2 * eval_size + k]
    diagonal = [(i, i) for i in range(num_tokens)]
    return DatasetDict(train=arithmetic_dataset(task, diagonal + disambiguating, num_tokens, modulus),
                       validation=arithmetic_dataset(task, validation, num_tokens, modulus),
                       test=arithmetic_dataset(task, test, num_tokens, modulus))


def arithmetic_model(num_tokens: int = 40, layers: int = 2, hidden: int = 64, heads: int = 4, inner: int = 256,
                     seed: int = 0, dropout: float = 0.0):
    """A small GPT-2 for the rows above: untied embeddings (a weight mask on `wte` must not also mask the head),
    4 positions, `dropout` on residuals, embeddings and attention (default none; Zhang et al. train with 0.1).
    Discovery and scoring run in eval mode, so dropout acts only while the source and the arms train."""
    if not 0 <= dropout < 1:
        raise ValueError(f"dropout must be in [0, 1), got {dropout}.")
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=vocab_size(num_tokens), n_positions=4, n_embd=hidden, n_layer=layers,
                        n_head=heads, n_inner=inner, resid_pdrop=dropout, embd_pdrop=dropout, attn_pdrop=dropout,
                        tie_word_embeddings=False, bos_token_id=None, eos_token_id=None)
    torch.manual_seed(seed)
    return GPT2LMHeadModel(config)
