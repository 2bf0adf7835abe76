"""The IOI template task (the repeated name is the foil, both name orders, one-token answers) and the curve figure."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from hf_heuristic_core.circuits.ioi import generate_ioi, tokenize_ioi
from hf_heuristic_core.errors import UsageError


def test_generated_prompts_name_the_indirect_object_once_and_the_subject_twice():
    data = generate_ioi(40, seed=3)
    assert data.column_names == ["text", "answer", "foil", "order"]
    assert data["order"].count("ABBA") == data["order"].count("BABA") == 20
    for row in data:
        indirect, subject = row["answer"].strip(), row["foil"].strip()
        assert indirect != subject
        words = row["text"].replace(",", " ").replace(".", " ").split()
        assert words.count(indirect) == 1 and words.count(subject) == 2
        first_named = next(w for w in words if w in (indirect, subject))
        assert first_named == (indirect if row["order"] == "ABBA" else subject)
    assert generate_ioi(40, seed=3)["text"] == data["text"]          # reproducible from the seed
    assert generate_ioi(40, seed=4)["text"] != data["text"]
    with pytest.raises(UsageError, match="size must be >= 1"):
        generate_ioi(0)


class _WordTokenizer:
    """A whitespace tokenizer whose vocabulary splits 'Alexandra' in two (to test the one-token check)."""

    def __init__(self):
        self.vocab: dict[str, int] = {}

    def _ids(self, text):
        ids = []
        for word in text.split():
            pieces = [word[:4], word[4:]] if word == "Alexandra" else [word]
            ids += [self.vocab.setdefault(p, len(self.vocab) + 1) for p in pieces]
        return ids

    def __call__(self, text, add_special_tokens=True, truncation=False, max_length=None):
        if isinstance(text, list):
            ids = [self._ids(t) for t in text]
            return {"input_ids": ids, "attention_mask": [[1] * len(i) for i in ids]}
        return SimpleNamespace(input_ids=self._ids(text))


def test_tokenized_prompts_carry_one_token_answers():
    tokenizer = _WordTokenizer()
    data = tokenize_ioi(generate_ioi(6, seed=0, names=("Mary", "John", "Tom")), tokenizer)
    assert data.column_names == ["input_ids", "attention_mask", "answer_id", "foil_id"]
    for row in data:
        assert row["answer_id"] != row["foil_id"]
        assert row["foil_id"] in row["input_ids"] and row["answer_id"] in row["input_ids"]
    with pytest.raises(UsageError, match="' Alexandra' is 2 tokens"):
        tokenize_ioi(generate_ioi(4, seed=0, names=("Alexandra", "Bob")), _WordTokenizer())
    with pytest.raises(UsageError, match=r"no column\(s\) \['foil'\]"):
        tokenize_ioi(generate_ioi(2).remove_columns("foil"), tokenizer)


def test_faithfulness_figure(tmp_path):
    pytest.importorskip("matplotlib")
    from hf_heuristic_core.plotting import plot_faithfulness_curves
    sizes = [0.001, 0.01, 0.1, 1.0]
    curves = {"learned": [{"sizes": sizes, "faithfulness": [0.0, 0.2, 0.7, 1.0], "cpr": 0.8, "cmd": 0.2},
                          {"sizes": sizes, "faithfulness": [0.0, 0.3, 0.8, 1.0], "cpr": 0.85, "cmd": 0.15}],
              "random": {"sizes": sizes, "faithfulness": [0.0, 0.0, 0.1, 1.0], "cpr": 0.5, "cmd": 0.5}}
    fig = plot_faithfulness_curves(curves, path=tmp_path / "curves")
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert labels == ["learned (CPR 0.825, CMD 0.175, n=2)", "random (CPR 0.500, CMD 0.500)"]
    assert (tmp_path / "curves.png").read_bytes()[:4] == b"\x89PNG" and (tmp_path / "curves.pdf").is_file()
    with pytest.raises(ValueError, match="different circuit sizes"):
        plot_faithfulness_curves({"x": [{"sizes": [0.1, 1.0], "faithfulness": [0, 1]},
                                        {"sizes": [0.2, 1.0], "faithfulness": [0, 1]}]})
    with pytest.raises(ValueError, match="needs 'faithfulness'"):
        plot_faithfulness_curves({"x": {"sizes": [0.1]}})
