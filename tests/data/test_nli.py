"""Tests for hf_heuristic_core.data: HANS loading and filtering, Hub wrappers (monkeypatched), the offline generator."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import pytest
import torch
from datasets import ClassLabel, Dataset, DatasetDict, Features, Value

from hf_heuristic_core.data import (
    GENERATED_SUBCASES,
    GENERATOR_VOCABULARY,
    HANS_ABBREVIATIONS,
    HANS_COLUMNS,
    PAPER_OOD_SUBCASES,
    collapse_nli_predictions,
    entailment_id_from_labels,
    filter_subcases,
    generate_nli,
    hans_subsets,
    load_hans,
    load_mnli,
    load_paws,
    load_qqp,
    mnli_label_names,
    nli_label_names,
    paraphrase_label_names,
)

HANS_DIR = Path(__file__).resolve().parents[3] / "shared" / "data" / "hans"


def _rows(dataset: Dataset) -> list[tuple[Any, ...]]:
    cols = dataset.select_columns(["premise", "hypothesis", "label", "subcase_full"])[:]
    return list(zip(cols["premise"], cols["hypothesis"], cols["label"], cols["subcase_full"]))


# ---------------------------------------------------------------------------------------------------------------
# HANS from the shared copy
# ---------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hans_val() -> Dataset:
    if not HANS_DIR.is_dir():
        pytest.skip(f"shared HANS copy not found at {HANS_DIR} (expected ../shared/data/hans next to the repo)")
    return load_hans(HANS_DIR, split="validation")


def test_load_hans_local_schema_and_counts(hans_val: Dataset) -> None:
    assert len(hans_val) == 30_000
    assert set(HANS_COLUMNS) | {"template"} == set(hans_val.column_names)
    assert hans_val.features["label"].names == nli_label_names
    counts = Counter(hans_val["subcase_full"])
    assert len(counts) == 30 and set(counts.values()) == {1000}
    # HANS's "ln_subject/object_swap" becomes the paper's filesystem-safe name
    assert "lexical_overlap_ln_subject-object_swap" in counts and "subsequence_sn_NP-S" in counts
    cols = hans_val.select_columns(["label", "heuristic", "subcase", "subcase_full", "counter_heuristic"])[:]
    for label, heur, sub, full, counter in zip(*cols.values()):
        assert full == f"{heur}_{sub}"
        assert label == (1 if sub[1] == "n" else 0)
        assert counter == (sub[1] == "n")


@pytest.mark.parametrize("names", [
    ["SO-Swap"], ["so-swap"], ["ln_subject-object_swap"], ["ln_subject/object_swap"],
    ["lexical_overlap_ln_subject-object_swap"], "ln_subject-object_swap",
])
def test_filter_by_full_short_and_abbreviated_names(hans_val: Dataset, names: Any) -> None:
    subset = filter_subcases(hans_val, names)
    assert len(subset) == 1000
    assert set(subset["subcase_full"]) == {"lexical_overlap_ln_subject-object_swap"}


def test_load_hans_paper_subcases_both_splits(hans_val: Dataset) -> None:
    for split in ("validation", "train"):
        subset = load_hans(HANS_DIR, split=split, subcases=["SO-Swap", "Prep", "Embed-If", "Embed-Verb"])
        assert len(subset) == 4000
        assert set(subset["subcase_full"]) == set(PAPER_OOD_SUBCASES)
        assert set(subset["label"]) == {1}
    # Mixed forms, duplicates collapse
    mixed = filter_subcases(hans_val, ["Embed-If", "constituent_cn_embedded_under_if", "cn_embedded_under_verb"])
    assert Counter(mixed["subcase_full"]) == {
        "constituent_cn_embedded_under_if": 1000, "constituent_cn_embedded_under_verb": 1000}


def test_hans_subsets(hans_val: Dataset) -> None:
    parts = hans_subsets(hans_val)
    assert len(parts) == 30 and list(parts) == sorted(parts)
    for name, part in parts.items():
        assert len(part) == 1000 and set(part["subcase_full"]) == {name}


def test_unknown_subcase_lists_valid_names_and_suggests(hans_val: Dataset) -> None:
    with pytest.raises(ValueError, match="unknown subcase 'SO-Swapp'") as info:
        filter_subcases(hans_val, ["SO-Swapp"])
    message = str(info.value)
    assert "Did you mean 'SO-Swap'" in message
    assert "lexical_overlap_ln_preposition" in message and "cn_embedded_under_if" in message
    with pytest.raises(ValueError, match="unknown subcase 'nonsense'"):
        load_hans(HANS_DIR, subcases="nonsense")


def test_missing_path_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="HANS data not found") as info:
        load_hans(tmp_path / "nope")
    assert str(tmp_path / "nope") in str(info.value) and "save_to_disk" in str(info.value)
    with pytest.raises(FileNotFoundError, match="hans.jsonl.gz does not exist"):
        load_hans("./no/such/dir/hans.jsonl.gz")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match="no data files"):
        load_hans(empty)


# ---------------------------------------------------------------------------------------------------------------
# Round trips through local formats
# ---------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hans_subset(hans_val: Dataset) -> Dataset:
    return filter_subcases(hans_val, ["SO-Swap", "Embed-If", "sn_NP-S"]).select(range(0, 3000, 10))


def test_round_trip_save_to_disk(hans_subset: Dataset, tmp_path: Path) -> None:
    hans_subset.save_to_disk(tmp_path / "ds")
    assert _rows(load_hans(tmp_path / "ds")) == _rows(hans_subset)
    # a single arrow shard written by save_to_disk (IPC stream format)
    shard = next((tmp_path / "ds").glob("*.arrow"))
    assert _rows(load_hans(shard)) == _rows(hans_subset)

    train = hans_subset.select(range(20))
    DatasetDict({"train": train, "validation": hans_subset}).save_to_disk(tmp_path / "dd")
    assert _rows(load_hans(tmp_path / "dd")) == _rows(hans_subset)
    assert _rows(load_hans(str(tmp_path / "dd"), split="train")) == _rows(train)
    assert len(load_hans(tmp_path / "dd", split="all")) == len(hans_subset) + 20
    with pytest.raises(ValueError, match=r"split 'test' not in .*available splits: \['train', 'validation'\]"):
        load_hans(tmp_path / "dd", split="test")


def test_round_trip_parquet_and_jsonl_files(hans_subset: Dataset, tmp_path: Path) -> None:
    hans_subset.to_parquet(tmp_path / "hans.parquet")
    hans_subset.to_json(tmp_path / "hans.jsonl")
    assert _rows(load_hans(tmp_path / "hans.parquet")) == _rows(hans_subset)
    assert _rows(load_hans(tmp_path / "hans.jsonl")) == _rows(hans_subset)


def test_folder_of_split_files(hans_subset: Dataset, tmp_path: Path) -> None:
    folder = tmp_path / "hub_layout" / "data"
    folder.mkdir(parents=True)
    hans_subset.to_parquet(folder / "validation-00000-of-00001.parquet")
    hans_subset.select(range(7)).to_parquet(folder / "train-00000-of-00001.parquet")
    (folder / "README.md").write_text("not data")
    assert _rows(load_hans(tmp_path / "hub_layout")) == _rows(hans_subset)
    assert len(load_hans(tmp_path / "hub_layout", split="train")) == 7
    with pytest.raises(ValueError, match="no file for split 'test'"):
        load_hans(tmp_path / "hub_layout", split="test")


def test_original_release_txt_format(hans_subset: Dataset, tmp_path: Path) -> None:
    """McCoy et al.'s own release: TSV with gold_label strings, sentence1/2, parses and 'ln_subject/object_swap'."""
    header = ["gold_label", "sentence1_binary_parse", "sentence2_binary_parse", "sentence1_parse", "sentence2_parse",
              "sentence1", "sentence2", "pairID", "heuristic", "subcase", "template"]
    lines = ["\t".join(header)]
    for i, row in enumerate(hans_subset):
        sub = row["subcase"].replace("subject-object", "subject/object").replace("NP-S", "NP/S")
        lines.append("\t".join([nli_label_names[row["label"]], "( x )", "( y )", "(ROOT x)", "(ROOT y)",
                                row["premise"], row["hypothesis"], f"ex{i}", row["heuristic"], sub, row["template"]]))
    (tmp_path / "heuristics_evaluation_set.txt").write_text("\n".join(lines) + "\n")
    (tmp_path / "heuristics_train_set.txt").write_text(lines[0] + "\n" + lines[1] + "\n")
    loaded = load_hans(tmp_path, split="validation")
    assert _rows(loaded) == _rows(hans_subset)
    assert set(loaded.column_names) == set(HANS_COLUMNS) | {"template"}
    assert len(load_hans(tmp_path, split="train")) == 1


# ---------------------------------------------------------------------------------------------------------------
# Hub wrappers, through a fake datasets.load_dataset
# ---------------------------------------------------------------------------------------------------------------


def _fake_hub(monkeypatch: pytest.MonkeyPatch, result: Any) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    def fake_load_dataset(*args: Any, **kwargs: Any) -> Any:
        calls.append((args, kwargs))
        if isinstance(result, Exception):
            raise result
        return result

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    return calls


def _hub_hans(label_names: list[str]) -> Dataset:
    """Shaped like the Hub's jhu-cogsci/hans: parse columns, ClassLabel labels, original subcase names."""
    ent = label_names.index("entailment")
    return Dataset.from_dict(
        {
            "premise": ["The doctor advised the president .", "The author was helped by the judge ."],
            "hypothesis": ["The president advised the doctor .", "The judge helped the author ."],
            "label": [1 - ent, ent],
            "parse_premise": ["(ROOT)", "(ROOT)"], "parse_hypothesis": ["(ROOT)", "(ROOT)"],
            "binary_parse_premise": ["( )", "( )"], "binary_parse_hypothesis": ["( )", "( )"],
            "heuristic": ["lexical_overlap", "lexical_overlap"],
            "subcase": ["ln_subject/object_swap", "le_passive"],
            "template": ["temp1", "temp2"],
        },
        features=Features({
            "premise": Value("string"), "hypothesis": Value("string"), "label": ClassLabel(names=label_names),
            "parse_premise": Value("string"), "parse_hypothesis": Value("string"),
            "binary_parse_premise": Value("string"), "binary_parse_hypothesis": Value("string"),
            "heuristic": Value("string"), "subcase": Value("string"), "template": Value("string"),
        }),
    )


@pytest.mark.parametrize("label_names", [["entailment", "non-entailment"], ["non-entailment", "entailment"]])
def test_load_hans_from_hub(monkeypatch: pytest.MonkeyPatch, label_names: list[str]) -> None:
    calls = _fake_hub(monkeypatch, _hub_hans(label_names))
    hans = load_hans("hans", subcases="SO-Swap")
    assert calls == [(("jhu-cogsci/hans",), {"split": "validation"})]
    assert set(hans.column_names) == set(HANS_COLUMNS) | {"template"}
    assert hans[0]["subcase_full"] == "lexical_overlap_ln_subject-object_swap" and hans[0]["label"] == 1
    both = load_hans("jhu-cogsci/hans", split="train", revision="refs/convert/parquet")
    assert calls[-1] == (("jhu-cogsci/hans",), {"split": "train", "revision": "refs/convert/parquet"})
    assert both["label"] == [1, 0] and both["counter_heuristic"] == [True, False]


def test_hub_failure_keeps_type_and_adds_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_hub(monkeypatch, ConnectionError("offline"))
    with pytest.raises(ConnectionError) as info:
        load_hans("someone/hans-copy")
    assert any("treated as a Hub id" in note for note in getattr(info.value, "__notes__", []))


def test_load_mnli(monkeypatch: pytest.MonkeyPatch) -> None:
    glue = Dataset.from_dict(
        {"premise": ["p0", "p1", "p2", "p3"], "hypothesis": ["h0", "h1", "h2", "h3"], "label": [0, 1, 2, -1],
         "idx": [0, 1, 2, 3]},
        features=Features({"premise": Value("string"), "hypothesis": Value("string"),
                           "label": ClassLabel(names=mnli_label_names), "idx": Value("int32")}),
    )
    calls = _fake_hub(monkeypatch, glue)
    mnli = load_mnli()
    assert calls == [(("nyu-mll/glue", "mnli"), {"split": "validation_matched"})]
    assert mnli.column_names == ["premise", "hypothesis", "label"] and mnli["label"] == [0, 1, 2]
    assert mnli.features["label"].names == mnli_label_names
    two = load_mnli(split="validation_mismatched", two_way=True)
    assert calls[-1] == (("nyu-mll/glue", "mnli"), {"split": "validation_mismatched"})
    assert two["label"] == [0, 1, 1] and two.features["label"].names == nli_label_names
    assert len(load_mnli(drop_unlabeled=False)) == 4
    load_mnli("nyu-mll/multi_nli", split="train")
    assert calls[-1] == (("nyu-mll/multi_nli",), {"split": "train"})


def test_load_mnli_local_release_format(tmp_path: Path) -> None:
    rows = [
        '{"gold_label": "contradiction", "sentence1": "A man sleeps.", "sentence2": "A man runs.", "genre": "x"}',
        '{"gold_label": "entailment", "sentence1": "A man sleeps.", "sentence2": "A man rests.", "genre": "x"}',
        '{"gold_label": "-", "sentence1": "A man sleeps.", "sentence2": "Someone.", "genre": "x"}',
    ]
    (tmp_path / "dev_matched.jsonl").write_text("\n".join(rows) + "\n")
    mnli = load_mnli(tmp_path / "dev_matched.jsonl")
    assert mnli.column_names == ["premise", "hypothesis", "label"]
    assert mnli["label"] == [2, 0] and mnli.features["label"].names == mnli_label_names


def test_load_qqp(monkeypatch: pytest.MonkeyPatch) -> None:
    glue = Dataset.from_dict(
        {"question1": ["a?", "b?"], "question2": ["c?", "d?"], "label": [1, 0], "idx": [0, 1]},
        features=Features({"question1": Value("string"), "question2": Value("string"),
                           "label": ClassLabel(names=["not_duplicate", "duplicate"]), "idx": Value("int32")}),
    )
    calls = _fake_hub(monkeypatch, glue)
    qqp = load_qqp()
    assert calls == [(("nyu-mll/glue", "qqp"), {"split": "validation"})]
    assert qqp.column_names == ["sentence1", "sentence2", "label"] and qqp["label"] == [1, 0]
    assert qqp.features["label"].names == paraphrase_label_names


def _paws_wiki(split_sizes: dict[str, int]) -> DatasetDict:
    features = Features({"id": Value("int32"), "sentence1": Value("string"), "sentence2": Value("string"),
                         "label": ClassLabel(names=["0", "1"])})
    return DatasetDict({
        split: Dataset.from_dict({"id": list(range(n)), "sentence1": [f"s{i}" for i in range(n)],
                                  "sentence2": [f"t{i}" for i in range(n)], "label": [i % 2 for i in range(n)]},
                                 features=features)
        for split, n in split_sizes.items()
    })


def test_load_paws_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    wiki = _paws_wiki({"train": 6, "validation": 4, "test": 4})
    calls = _fake_hub(monkeypatch, wiki["test"])
    paws = load_paws()
    assert calls == [(("google-research-datasets/paws", "labeled_final"), {"split": "test"})]
    assert paws.column_names == ["sentence1", "sentence2", "label"] and paws["label"] == [0, 1, 0, 1]
    assert paws.features["label"].names == paraphrase_label_names
    assert load_paws(not_equivalent_only=True)["label"] == [0, 0]
    calls = _fake_hub(monkeypatch, wiki)
    assert len(load_paws(split="all")) == 14
    assert calls == [(("google-research-datasets/paws", "labeled_final"), {})]


def test_load_paws_qqp_local_folder(tmp_path: Path) -> None:
    header = "id\tsentence1\tsentence2\tlabel\n"
    (tmp_path / "train.tsv").write_text(
        header + "1\tb'How is Perth better than Melbourne?'\tb'How is Melbourne better than Perth?'\t0\n"
        "2\tb'What\\'s up?'\tb'What is up?'\t1\n")
    (tmp_path / "dev_and_test.tsv").write_text(header + '3\tIs a contagious yawn fake?\tIs a fake yawn contagious?\t0\n')
    everything = load_paws(tmp_path, split="all")
    assert len(everything) == 3
    firsts = everything["sentence1"]
    assert "How is Perth better than Melbourne?" in firsts and "What's up?" in firsts  # b'...' literals decoded
    assert load_paws(tmp_path, split="all", not_equivalent_only=True)["label"] == [0, 0]
    assert load_paws(tmp_path, split="test")["sentence1"] == ["Is a contagious yawn fake?"]
    assert load_paws(str(tmp_path), split="validation")["sentence1"] == ["Is a contagious yawn fake?"]
    assert len(load_paws(tmp_path, split="train")) == 2


# ---------------------------------------------------------------------------------------------------------------
# Predictions
# ---------------------------------------------------------------------------------------------------------------


def test_collapse_nli_predictions() -> None:
    assert collapse_nli_predictions([0, 1, 2, 0]).tolist() == [0, 1, 1, 0]
    out = collapse_nli_predictions(np.array([2, 1, 0]), entailment_id=2)
    assert out.dtype == np.int64 and out.tolist() == [0, 1, 1]
    tensor = collapse_nli_predictions(torch.tensor([0, 2, 1]))
    assert isinstance(tensor, torch.Tensor) and tensor.tolist() == [0, 1, 1]
    assert collapse_nli_predictions([]).tolist() == []
    with pytest.raises(ValueError, match="argmax"):
        collapse_nli_predictions(np.array([[0.1, 0.9]]))
    with pytest.raises(ValueError, match="argmax"):
        collapse_nli_predictions(torch.randn(3, 3))


def test_entailment_id_from_labels() -> None:
    assert entailment_id_from_labels({0: "ENTAILMENT", 1: "NEUTRAL", 2: "CONTRADICTION"}) == 0
    assert entailment_id_from_labels({"0": "contradiction", "1": "neutral", "2": "entailment"}) == 2

    class Config:
        id2label = {0: "non_entailment", 1: "entailment"}

    assert entailment_id_from_labels(Config()) == 1
    with pytest.raises(ValueError, match="no entailment label"):
        entailment_id_from_labels({0: "LABEL_0", 1: "LABEL_1"})


# ---------------------------------------------------------------------------------------------------------------
# Generator: a checker for the generator's grammar, written independently of its templates
# ---------------------------------------------------------------------------------------------------------------

V = GENERATOR_VOCABULARY
NOUNS = {s: (s, False) for s, _ in V.nouns} | {p: (s, True) for s, p in V.nouns}
VERB_GROUPS = ("transitive", "intransitive", "np_or_clause", "factive", "nonfactive")
FINITE: dict[str, tuple[str, str, bool | None]] = {}  # form -> (lemma, tense, plural subject?)
VERB_CLASS: dict[str, str] = {}
for _group in VERB_GROUPS:
    for _forms in getattr(V, _group):
        _base, _third, _past = _forms[:3]
        FINITE.update({_base: (_base, "present", True), _third: (_base, "present", False), _past: (_base, "past", None)})
        VERB_CLASS[_base] = _group
PARTICIPLES = {forms[3]: forms[0] for forms in V.transitive}
BE = {"was": ("past", False), "were": ("past", True), "is": ("present", False), "are": ("present", True)}


class Parser:
    """Recursive descent over the generator's grammar; asserts agreement and records tenses."""

    def __init__(self, sentence: str) -> None:
        assert sentence.endswith("."), sentence
        self.sentence = sentence
        self.toks = sentence[:-1].replace(",", " ,").split()
        self.toks[0] = self.toks[0].lower()
        self.i = 0
        self.tenses: list[str] = []

    def peek(self) -> str | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self, options: tuple[str, ...]) -> str | None:
        for option in sorted(options, key=lambda o: -len(o.split())):
            words = option.split()
            if self.toks[self.i:self.i + len(words)] == words:
                self.i += len(words)
                return option
        return None

    def expect(self, word: str) -> None:
        assert self.peek() == word, f"expected {word!r} at {self.i} in {self.sentence!r}"
        self.i += 1

    def np(self) -> tuple[str, bool]:
        self.expect("the")
        word = self.peek()
        assert word in NOUNS, f"expected a noun at {self.i} in {self.sentence!r}"
        self.i += 1
        return NOUNS[word]

    def finite(self, subject: tuple[str, bool], groups: tuple[str, ...]) -> str:
        word = self.peek()
        assert word in FINITE, f"expected a finite verb at {self.i} in {self.sentence!r}"
        lemma, tense, plural = FINITE[word]
        assert VERB_CLASS[lemma] in groups, f"{word!r} is not {groups} in {self.sentence!r}"
        if tense == "present":
            assert plural == subject[1], f"agreement: {subject} with {word!r} in {self.sentence!r}"
        self.tenses.append(tense)
        self.i += 1
        return lemma

    def clause(self, subject: tuple[str, bool] | None = None) -> dict[str, Any]:
        node: dict[str, Any] = {"subj": subject, "mod": None, "voice": "active", "verb": None, "obj": None,
                                "obj_pp": None, "comp": None, "agent": None}
        if subject is None:
            node["subj"] = subject = self.np()
            if self.take(V.relative_pronouns):
                node["mod"] = ("rel", self.finite(subject, ("transitive",)), self.np())
            elif (prep := self.take(V.prepositions)) is not None:
                node["mod"] = ("pp", prep, self.np())
        if self.peek() in BE:
            tense, plural = BE[self.toks[self.i]]
            assert plural == subject[1], f"agreement: {subject} with {self.peek()!r} in {self.sentence!r}"
            self.tenses.append(tense)
            self.i += 1
            assert self.peek() in PARTICIPLES, f"expected a participle in {self.sentence!r}"
            node["verb"], node["voice"] = PARTICIPLES[self.toks[self.i]], "passive"
            self.i += 1
            self.expect("by")
            node["agent"] = self.np()
            return node
        node["verb"] = self.finite(subject, VERB_GROUPS)
        group = VERB_CLASS[node["verb"]]
        if group == "transitive":
            node["obj"] = self.np()
            if (prep := self.take(V.prepositions)) is not None:
                node["obj_pp"] = (prep, self.np())
        elif group == "np_or_clause":
            noun_phrase = self.np()
            if self.peek() in FINITE or self.peek() in BE:
                node["comp"] = self.clause(subject=noun_phrase)
            else:
                node["obj"] = noun_phrase
        elif group in ("factive", "nonfactive"):
            self.expect("that")
            node["comp"] = self.clause()
        return node

    def parse(self) -> dict[str, Any]:
        adverb = self.take(V.factive_adverbs + V.nonfactive_adverbs)
        cond = None if adverb else self.take(V.conditionals)
        clauses = [self.clause()]
        if cond:
            self.expect(",")
            clauses.append(self.clause())
        assert self.i == len(self.toks), f"trailing words in {self.sentence!r}"
        return {"adverb": adverb, "cond": cond, "clauses": clauses, "tenses": self.tenses}


def content_lemmas(sentence: str) -> Counter[str]:
    words = sentence[:-1].replace(",", " ").lower().split()
    lemmas = Counter()
    for word in words:
        if word in NOUNS:
            lemmas[NOUNS[word][0]] += 1
        elif word in FINITE:
            lemmas[FINITE[word][0]] += 1
        elif word in PARTICIPLES:
            lemmas[PARTICIPLES[word]] += 1
    return lemmas


def _strip(clause: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in clause.items() if k not in keys}


def check_pair(premise: str, hypothesis: str, label: int, subcase: str) -> None:
    """Surface form, agreement, tense, label, and the structural relation each subcase promises."""
    for sentence in (premise, hypothesis):
        assert sentence[0].isupper() and sentence.endswith(".") and sentence == sentence.strip(), sentence
        assert "  " not in sentence and " ." not in sentence and " ," not in sentence and ".." not in sentence
    p, h = Parser(premise).parse(), Parser(hypothesis).parse()
    assert len(set(p["tenses"] + h["tenses"])) == 1, f"tense mismatch: {premise!r} / {hypothesis!r}"
    assert label == (1 if subcase[1] == "n" else 0), subcase
    pc, hc = content_lemmas(premise), content_lemmas(hypothesis)
    if subcase.startswith("xn_"):
        shared = set(pc) & set(hc)
        if subcase == "xn_unrelated":
            assert not shared, (premise, hypothesis)
        else:
            assert len(shared) == 1 and shared.pop() in {s for s, _ in V.nouns}, (premise, hypothesis)
        return
    assert h["adverb"] is None and h["cond"] is None and len(h["clauses"]) == 1
    assert set(hc) <= set(pc), f"hypothesis words missing from premise: {premise!r} / {hypothesis!r}"
    if subcase[0] in "sc":  # subsequence and constituent: the hypothesis is a contiguous piece of the premise
        assert hypothesis[0].lower() + hypothesis[1:-1] in premise[0].lower() + premise[1:], (premise, hypothesis)
    P, H = p["clauses"][0], h["clauses"][0]
    if subcase == "ln_subject-object_swap":
        assert pc == hc and P["mod"] is None and P["obj_pp"] is None
        assert (H["subj"], H["verb"], H["obj"]) == (P["obj"], P["verb"], P["subj"]) and P["subj"] != P["obj"]
    elif subcase == "ln_preposition":
        assert P["mod"][0] == "pp" and (H["subj"], H["verb"], H["obj"]) == (P["subj"], P["verb"], P["mod"][2])
        assert H["obj"] != P["obj"]
    elif subcase == "le_passive":
        assert P["voice"] == "passive" and H["voice"] == "active"
        assert (H["subj"], H["verb"], H["obj"]) == (P["agent"], P["verb"], P["subj"])
    elif subcase == "le_around_relative_clause":
        assert P["mod"][0] == "rel" and H["mod"] is None and _strip(P, "mod") == _strip(H, "mod")
    elif subcase == "se_PP_on_obj":
        assert P["obj_pp"] is not None and H["obj_pp"] is None and _strip(P, "obj_pp") == _strip(H, "obj_pp")
    elif subcase == "sn_NP-S":
        assert VERB_CLASS[P["verb"]] == "np_or_clause" and P["comp"] is not None and H["comp"] is None
        assert (H["subj"], H["verb"], H["obj"]) == (P["subj"], P["verb"], P["comp"]["subj"])
    elif subcase == "sn_relative_clause_on_subject":
        assert P["mod"][0] == "rel" and H["subj"] == P["mod"][2]
        assert _strip(H, "subj") == _strip(P, "subj", "mod") | {"mod": None}
    elif subcase == "cn_embedded_under_if":
        assert p["cond"] in V.conditionals and H == p["clauses"][0]
    elif subcase in ("cn_embedded_under_verb", "ce_embedded_under_verb"):
        group = "nonfactive" if subcase.startswith("cn") else "factive"
        assert VERB_CLASS[P["verb"]] == group and H == P["comp"]
    elif subcase in ("cn_adverb", "ce_adverb"):
        adverbs = V.nonfactive_adverbs if subcase.startswith("cn") else V.factive_adverbs
        assert p["adverb"] in adverbs and H == P
    else:
        raise AssertionError(f"no check for generated subcase {subcase}")


def overlap_heuristic(premise: str, hypothesis: str) -> int:
    """McCoy et al.'s lexical-overlap heuristic: entailment iff every hypothesis word occurs in the premise."""
    return 0 if set(content_lemmas(hypothesis)) <= set(content_lemmas(premise)) else 1


@pytest.fixture(scope="module")
def generated() -> DatasetDict:
    return generate_nli(train_size=2000, id_eval_size=400, ood_eval_size_per_subcase=60, seed=0)


def test_vocabulary_is_unambiguous() -> None:
    all_verb_forms = [f for g in VERB_GROUPS for forms in getattr(V, g) for f in forms[:3]]
    assert len(all_verb_forms) == len(set(all_verb_forms))
    assert not set(NOUNS) & (set(FINITE) | set(PARTICIPLES) | set(BE))


def test_every_generated_pair_is_grammatical_and_correctly_labeled(generated: DatasetDict) -> None:
    seen = set()
    for split in generated.values():
        cols = split.select_columns(["premise", "hypothesis", "label", "subcase"])[:]
        for premise, hypothesis, label, subcase in zip(*cols.values()):
            check_pair(premise, hypothesis, label, subcase)
            seen.add(subcase)
    assert seen == {s.subcase for s in GENERATED_SUBCASES.values()}


def test_checker_catches_broken_templates() -> None:
    with pytest.raises(AssertionError, match="agreement"):
        check_pair("The pilots thanks the nurse.", "The nurse thank the pilots.", 1, "ln_subject-object_swap")
    with pytest.raises(AssertionError, match="agreement"):
        check_pair("The nurse were thanked by the pilot.", "The pilot thanked the nurse.", 0, "le_passive")
    with pytest.raises(AssertionError, match="tense"):
        check_pair("The pilot thanked the nurse.", "The nurse thanks the pilot.", 1, "ln_subject-object_swap")
    with pytest.raises(AssertionError):
        check_pair("The pilot thanked the nurse.", "The pilot thanked the nurse.", 1, "ln_subject-object_swap")
    with pytest.raises(AssertionError):
        check_pair("The pilot knew that the nurse slept.", "The nurse slept.", 1, "cn_embedded_under_verb")
    with pytest.raises(AssertionError):
        check_pair("the pilot slept.", "The pilot slept.", 0, "ce_adverb")


def test_sizes_schema_and_subcases(generated: DatasetDict) -> None:
    assert list(generated) == ["train", "id_eval", "ood_eval"]
    assert [len(generated[k]) for k in generated] == [2000, 400, 60 * 7]
    for split in generated.values():
        assert split.column_names == list(HANS_COLUMNS)
        assert split.features["label"].names == nli_label_names
    ood = Counter(generated["ood_eval"]["subcase_full"])
    counter = {name for name, spec in GENERATED_SUBCASES.items() if spec.counter_heuristic}
    assert set(ood) == counter and set(ood.values()) == {60}
    assert all(generated["ood_eval"]["counter_heuristic"]) and set(generated["ood_eval"]["label"]) == {1}
    # the paper's four subcases exist under the same names in generated data
    assert set(PAPER_OOD_SUBCASES) <= set(ood)
    assert set(hans_subsets(generated["ood_eval"])) == counter
    assert len(filter_subcases(generated["ood_eval"], ["SO-Swap", "Embed-Verb"])) == 120


def test_train_is_heuristic_friendly_and_balanced(generated: DatasetDict) -> None:
    for name in ("train", "id_eval"):
        split = generated[name]
        cols = split.select_columns(["premise", "hypothesis", "label", "counter_heuristic", "heuristic"])[:]
        n = len(split)
        assert abs(sum(cols["label"]) / n - 0.5) <= 0.01
        assert abs(sum(cols["counter_heuristic"]) / n - 0.05) <= 0.01
        right = sum(overlap_heuristic(p, h) == y for p, h, y in zip(cols["premise"], cols["hypothesis"], cols["label"]))
        assert right / n == pytest.approx(1 - sum(cols["counter_heuristic"]) / n)
        assert {"lexical_overlap", "subsequence", "constituent", "control"} == set(cols["heuristic"])


@pytest.mark.parametrize("fraction", [0.0, 0.2, 0.5])
def test_counter_heuristic_fraction(fraction: float) -> None:
    data = generate_nli(train_size=1000, id_eval_size=100, ood_eval_size_per_subcase=5,
                        counter_heuristic_fraction=fraction, seed=1)
    train = data["train"]
    assert abs(sum(train["counter_heuristic"]) / len(train) - fraction) <= 0.01
    assert abs(sum(train["label"]) / len(train) - 0.5) <= 0.01


def test_determinism_and_seed_sensitivity() -> None:
    kwargs = dict(train_size=300, id_eval_size=50, ood_eval_size_per_subcase=10)
    first, again, other = (generate_nli(seed=s, **kwargs) for s in (7, 7, 8))
    for name in first:
        assert first[name].to_dict() == again[name].to_dict()
        assert list(first[name]["premise"]) != list(other[name]["premise"])


def test_no_duplicates_within_or_across_splits(generated: DatasetDict) -> None:
    pairs = {name: list(zip(split["premise"], split["hypothesis"])) for name, split in generated.items()}
    for name, items in pairs.items():
        assert len(items) == len(set(items)), name
    assert not set(pairs["train"]) & set(pairs["id_eval"])
    assert not set(pairs["train"]) & set(pairs["ood_eval"])
    assert not set(pairs["id_eval"]) & set(pairs["ood_eval"])


def test_ood_and_counter_subcase_selection() -> None:
    data = generate_nli(train_size=400, id_eval_size=40, ood_eval_size_per_subcase=10, seed=2,
                        ood_subcases=["SO-Swap", "cn_embedded_under_if", "ce_adverb"], counter_heuristic_fraction=0.1)
    assert set(data["ood_eval"]["subcase"]) == {"ln_subject-object_swap", "cn_embedded_under_if", "ce_adverb"}
    train = data["train"]
    counter_subcases = {s for s, c in zip(train["subcase"], train["counter_heuristic"]) if c}
    assert counter_subcases == {"ln_subject-object_swap", "cn_embedded_under_if"}
    assert "ce_adverb" not in set(train["subcase"])  # an entailed OOD subcase leaves the training mix

    held_out = generate_nli(train_size=400, id_eval_size=40, ood_eval_size_per_subcase=10, seed=2,
                            counter_subcases=["Prep"])
    assert {s for s, c in zip(held_out["train"]["subcase"], held_out["train"]["counter_heuristic"]) if c} == {
        "ln_preposition"}
    assert len(set(held_out["ood_eval"]["subcase"])) == 7
    # held-out constructions do not leak into training through the control premises
    for premise in list(held_out["train"]["premise"]) + list(held_out["id_eval"]["premise"]):
        parsed = Parser(premise).parse()
        assert parsed["cond"] is None and parsed["adverb"] not in V.nonfactive_adverbs, premise
        assert not {FINITE[w][0] for w in Parser(premise).toks if w in FINITE} & {
            forms[0] for forms in V.nonfactive + V.np_or_clause}, premise


def test_generator_argument_errors() -> None:
    with pytest.raises(ValueError, match=r"\[0, 0.5\]"):
        generate_nli(train_size=10, counter_heuristic_fraction=0.6)
    with pytest.raises(ValueError, match="Did you mean 'SO-Swap'"):
        generate_nli(train_size=10, ood_subcases=["SO-swapp"])
    with pytest.raises(ValueError, match="does not contain"):
        generate_nli(train_size=10, ood_subcases=[next(k for k in HANS_ABBREVIATIONS if k == "Rel-Clause")])
    with pytest.raises(ValueError, match="counter-heuristic"):
        generate_nli(train_size=10, counter_subcases=["le_passive"])


def test_hans_spacing() -> None:
    data = generate_nli(train_size=50, id_eval_size=0, ood_eval_size_per_subcase=3, seed=0, hans_spacing=True)
    for premise in list(data["train"]["premise"]) + list(data["ood_eval"]["premise"]):
        assert premise.endswith(" .") and "  " not in premise
        assert "," not in premise or " , " in premise


# Hashes of the rows generated before generate_nli moved out of the 1141-line nli.py (same seed -> same bytes).
PINNED_GENERATED = [
    ({"train_size": 300, "id_eval_size": 60, "ood_eval_size_per_subcase": 8, "seed": 3},
     {"train": "2f25053ece844e01", "id_eval": "f2eff4f360d8624d", "ood_eval": "b2e9df6fb9d334b9"}),
    ({"train_size": 200, "id_eval_size": 40, "ood_eval_size_per_subcase": 5, "seed": 1,
      "counter_heuristic_fraction": 0.2, "ood_subcases": ["SO-Swap", "Embed-If", "le_passive"], "hans_spacing": True},
     {"train": "b1dd2faa4fa6805c", "id_eval": "cb36925af15a7998", "ood_eval": "bc7265a9b6121607"}),
]


@pytest.mark.parametrize(("kwargs", "expected"), PINNED_GENERATED)
def test_generated_rows_are_bit_identical_to_the_pinned_hashes(kwargs: dict[str, Any], expected: dict[str, str]) -> None:
    import hashlib
    import json

    data = generate_nli(**kwargs)
    digests = {name: hashlib.sha256(json.dumps(split.to_dict(), sort_keys=True).encode()).hexdigest()[:16]
               for name, split in data.items()}
    assert digests == expected


def test_old_import_paths_of_the_split_module_still_work() -> None:
    import hf_heuristic_core
    from hf_heuristic_core.data import nli
    from hf_heuristic_core.data.generate import generate_nli as moved

    assert nli.generate_nli is moved is hf_heuristic_core.generate_nli
    for name in nli.__all__:
        assert getattr(nli, name) is getattr(hf_heuristic_core.data, name)
