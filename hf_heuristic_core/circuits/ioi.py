"""An IOI-style (indirect object identification) task from templates, generated offline.

Wang et al.'s IOI prompts name two people, repeat one of them (the subject) and end where the other one (the indirect
object) is the natural next word: "When Mary and John went to the store, John gave a drink to" -> " Mary". The metric
is the logit difference between the indirect object and the subject (`circuits.metrics`), MIB's IOI metric. Templates
come in both name orders (ABBA and BABA). Names, places and objects are this project's own lists; only names the
tokenizer encodes as one token (with a leading space) are used.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from ..errors import UsageError

__all__ = ["IOI_NAMES", "IOI_TEMPLATES", "generate_ioi", "tokenize_ioi"]

IOI_TEMPLATES: tuple[str, ...] = (
    "When {first} and {second} went to the {place}, {S} gave a {object} to",
    "After {first} and {second} went to the {place}, {S} gave a {object} to",
    "While {first} and {second} were working at the {place}, {S} gave a {object} to",
    "Then, {first} and {second} had a long day at the {place}. {S} gave a {object} to",
    "When {first} and {second} got a {object} at the {place}, {S} decided to give it to",
    "Friends {first} and {second} found a {object} at the {place}. {S} gave it to",
)
IOI_NAMES: tuple[str, ...] = (
    "Mary", "John", "Tom", "James", "Alice", "Bob", "Sarah", "David", "Emma", "Michael", "Anna", "Paul", "Kate",
    "Mark", "Lisa", "Peter", "Susan", "George", "Laura", "Daniel", "Jack", "Emily", "Robert", "Linda", "Chris",
    "Helen", "Steve", "Rachel", "Brian", "Amy")
PLACES: tuple[str, ...] = ("store", "park", "office", "school", "station", "garden", "restaurant", "hospital",
                           "library", "market")
OBJECTS: tuple[str, ...] = ("drink", "book", "ring", "ball", "letter", "bag", "cake", "key", "flower", "basket")


def generate_ioi(size: int, seed: int = 0, names: Sequence[str] = IOI_NAMES) -> Any:
    """`size` IOI prompts as a `datasets.Dataset` with `text`, `answer` (" " + indirect object) and `foil`
    (" " + subject); half in each name order, reproducible from `seed`."""
    import datasets
    if size < 1:
        raise UsageError(f"generate_ioi: size must be >= 1, got {size}.")
    if len(set(names)) < 2:
        raise UsageError("generate_ioi needs at least two distinct names.")
    rng = random.Random(seed)
    rows: dict[str, list[str]] = {"text": [], "answer": [], "foil": [], "order": []}
    for index in range(size):
        indirect, subject = rng.sample(list(names), 2)
        template = rng.choice(IOI_TEMPLATES)
        order = "ABBA" if index % 2 == 0 else "BABA"    # ABBA: the indirect object is named first
        first, second = (indirect, subject) if order == "ABBA" else (subject, indirect)
        rows["text"].append(template.format(first=first, second=second, S=subject, place=rng.choice(PLACES),
                                            object=rng.choice(OBJECTS)))
        rows["answer"].append(" " + indirect)
        rows["foil"].append(" " + subject)
        rows["order"].append(order)
    return datasets.Dataset.from_dict(rows)


def tokenize_ioi(dataset: Any, tokenizer: Any, max_length: int = 64, text_column: str = "text",
                 answer_column: str = "answer", foil_column: str = "foil") -> Any:
    """`input_ids`, `attention_mask`, `answer_id` and `foil_id` of prompts with a correct and a counterfactual answer
    (IOI, or any table with these three columns); every answer must be one token."""
    missing = [c for c in (text_column, answer_column, foil_column) if c not in dataset.column_names]
    if missing:
        raise UsageError(f"The data has no column(s) {missing} (columns: {dataset.column_names}); a language-model "
                         "task needs the prompt, the correct answer and the counterfactual answer.")

    def single_token(text: str) -> int:
        ids = tokenizer(text, add_special_tokens=False).input_ids
        if len(ids) != 1:
            raise UsageError(f"Answer {text!r} is {len(ids)} tokens for this tokenizer; the logit difference needs "
                             "one-token answers (for IOI: names this tokenizer encodes as one token with a leading "
                             "space).")
        return int(ids[0])

    def encode(batch: dict[str, list]) -> dict[str, list]:
        encoded = tokenizer(batch[text_column], truncation=True, max_length=max_length)
        encoded["answer_id"] = [single_token(a) for a in batch[answer_column]]
        encoded["foil_id"] = [single_token(f) for f in batch[foil_column]]
        return encoded

    keep = ("input_ids", "attention_mask", "answer_id", "foil_id")
    encoded = dataset.map(encode, batched=True, desc="tokenizing prompts")
    return encoded.remove_columns([c for c in encoded.column_names if c not in keep])
