"""`tokenize_dataset` names its output table itself (`datasets`' `new_fingerprint`) instead of letting `datasets`
pickle the tokenizer to hash it: the table is the one the slow path gives, and the name changes with anything that
changes the tokens (a cached table of another tokenizer or length would otherwise be reused silently)."""

from __future__ import annotations

import datasets
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from hf_heuristic_core.data.tokenize import _map_fingerprint, tokenize_dataset

WORDS = ["[PAD]", "[UNK]", "the", "judge", "saw", "lawyer", "artist", "slept", "ran"]


def _tokenizer(words=WORDS) -> PreTrainedTokenizerFast:
    backend = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="[PAD]", unk_token="[UNK]")


@pytest.fixture(scope="module")
def table() -> datasets.Dataset:
    return datasets.Dataset.from_dict({"premise": ["the judge saw the lawyer", "the artist slept"],
                                       "hypothesis": ["the lawyer saw the judge", "the artist ran"],
                                       "label": [0, 1], "note": ["x", "y"]})


def test_the_table_equals_the_one_datasets_hashes_itself(table):
    tokenizer = _tokenizer()
    ours = tokenize_dataset(table, tokenizer, max_length=4)
    theirs = table.map(lambda b: tokenizer(b["premise"], b["hypothesis"], truncation=True, max_length=4),
                       batched=True, remove_columns=["premise", "hypothesis", "note"]).rename_column("label", "labels")
    assert ours.column_names == theirs.column_names
    assert ours.to_dict() == theirs.to_dict()
    assert ours.to_dict()["input_ids"][0] == [2, 3, 2, 5]


def test_the_name_follows_everything_that_changes_the_tokens(table):
    base = _map_fingerprint(table, _tokenizer(), ["premise", "hypothesis"], 4, ["note"])
    assert base is not None and base == _map_fingerprint(table, _tokenizer(), ["premise", "hypothesis"], 4, ["note"])
    others = [
        _map_fingerprint(table, _tokenizer(WORDS[:-1] + ["walked"]), ["premise", "hypothesis"], 4, ["note"]),  # vocab
        _map_fingerprint(table, _tokenizer(), ["premise", "hypothesis"], 5, ["note"]),                     # length
        _map_fingerprint(table, _tokenizer(), ["hypothesis", "premise"], 4, ["note"]),                     # columns
        _map_fingerprint(table.select([1, 0]), _tokenizer(), ["premise", "hypothesis"], 4, ["note"]),      # rows
    ]
    assert len({base, *others}) == 5
    flipped = _tokenizer()
    flipped.truncation_side = "left"
    assert _map_fingerprint(table, flipped, ["premise", "hypothesis"], 4, ["note"]) != base


def test_a_tokenizer_without_a_fast_backend_is_left_to_datasets(table):
    class Slow:   # what matters: no `backend_tokenizer`
        model_input_names = ("input_ids",)
    assert _map_fingerprint(table, Slow(), ["premise"], 4, []) is None
