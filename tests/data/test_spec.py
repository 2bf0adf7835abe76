"""One data-spec format: the study's sets are built from the spec it records, older study records still load, and
the spec reproduces the sets the study built before there was a spec (checked against the old recipe by hand)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from datasets import Dataset

from hf_heuristic_core.data import generate_nli, hans_subsets
from hf_heuristic_core.data.spec import (
    datasets_from_spec,
    eval_sets_from_spec,
    load_source,
    normalize_spec,
)
from hf_heuristic_core.data.study_spec import nli_study_spec, spec_from_study_record
from hf_heuristic_core.data.tokenize import (
    text_columns,
    tokenize_dataset,
    tokenize_pairs,
)
from hf_heuristic_core.study.data import build_study_data

SIZES = {"train_size": 64, "id_eval_size": 16, "ood_per_case": 3, "counter_heuristic_fraction": 0.1, "seed": 5}
OLD_RECORD = {"train": None, "id_eval": None, "ood_eval": None, "max_length": 24,
              "generated": {"train_size": 64, "id_eval_size": 16, "ood_per_case": 3,
                            "counter_heuristic_fraction": 0.1, "seed": 5}}


@pytest.fixture(scope="module")
def tokenizer():
    import transformers

    from hf_heuristic_core.offline_models import minilm_path
    return transformers.AutoTokenizer.from_pretrained(minilm_path())


def _rows(dataset: Dataset) -> list[dict]:
    return dataset.to_list()


def test_generated_study_data_equals_the_pre_spec_recipe() -> None:
    """Before the spec, the study took generate_nli's train / id_eval and hans_subsets of its ood_eval."""
    data = build_study_data(**SIZES)
    reference = generate_nli(train_size=64, id_eval_size=16, ood_eval_size_per_subcase=3,
                             counter_heuristic_fraction=0.1, seed=5)
    assert _rows(data.train) == _rows(reference["train"])
    assert list(data.id_eval) == ["id"] and _rows(data.id_eval["id"]) == _rows(reference["id_eval"])
    expected_ood = hans_subsets(reference["ood_eval"])
    assert list(data.ood) == list(expected_ood) and len(expected_ood) == 7
    for name, subset in expected_ood.items():
        assert _rows(data.ood[name]) == _rows(subset)
    assert data.spec["eval_sets"]["id"] == {"source": "generate_nli", "split": "id_eval", "kwargs": {
        "train_size": 64, "id_eval_size": 16, "ood_eval_size_per_subcase": 3, "counter_heuristic_fraction": 0.1,
        "seed": 5}}
    assert data.spec["groups"] == {"id": ["id"], "ood": list(expected_ood)}
    json.dumps(data.spec)   # recordable in manifest.json as is


def test_user_ood_source_is_split_per_counter_heuristic_subcase(tmp_path: Path) -> None:
    """A HANS-shaped file: only the non-entailed (counter-heuristic) subcases, each shuffled with the seed and capped."""
    rows = [{"premise": f"p{i}", "hypothesis": f"h{i}", "label": "non-entailment" if sub.startswith("ln") else
             "entailment", "heuristic": "lexical_overlap", "subcase": sub}
            for i, sub in enumerate(["ln_preposition", "le_passive", "ln_subject/object_swap"] * 5)]
    path = tmp_path / "hans.jsonl"
    Dataset.from_list(rows).to_json(path)
    spec = nli_study_spec(ood_eval=str(path), ood_per_case=4, seed=1)
    names = ["lexical_overlap_ln_preposition", "lexical_overlap_ln_subject-object_swap"]
    assert spec["groups"]["ood"] == names
    for name, wanted in zip(names, ["ln_preposition", "ln_subject/object_swap"]):
        premises = [r["premise"] for r in rows if r["subcase"] == wanted]          # 5 rows, in file order
        order = Dataset.from_dict({"p": premises}).shuffle(seed=1)["p"][:4]        # the old per-case cap
        assert load_source(spec["eval_sets"][name])["premise"] == order


def test_an_older_study_record_loads_as_todays_spec(tokenizer) -> None:
    spec = nli_study_spec(**SIZES, max_length=24)
    assert normalize_spec(OLD_RECORD) == spec == spec_from_study_record(OLD_RECORD)
    old_sets = eval_sets_from_spec(OLD_RECORD, tokenizer)
    data = build_study_data(**SIZES)
    assert list(old_sets) == list(data.eval_sets())
    for name, raw in data.eval_sets().items():
        assert old_sets[name].to_dict() == tokenize_dataset(raw, tokenizer, max_length=24).to_dict()
    with pytest.raises(ValueError, match=r"not a study data record: it lacks \['max_length'\]"):
        spec_from_study_record({"generated": {}})


def test_one_tokenizer_and_one_column_guesser(tokenizer) -> None:
    table = Dataset.from_dict({"sentence1": ["A cat sat."], "sentence2": ["A cat."], "label": [1], "idx": [0]})
    assert text_columns(table.column_names) == ["sentence1", "sentence2"]
    assert text_columns(["question", "sentence", "text"]) == ["question", "sentence"]
    assert text_columns(table.column_names, "sentence2") == ["sentence2"]
    with pytest.raises(ValueError, match=r"text columns \['nope'\] are not in the dataset"):
        text_columns(table.column_names, "nope")
    with pytest.raises(ValueError, match="Cannot tell the text columns among \\['a', 'b'\\]"):
        text_columns(["a", "b"])
    tokens = tokenize_dataset(table, tokenizer, max_length=16)
    expected = tokenizer("A cat sat.", "A cat.", truncation=True, max_length=16)
    assert tokens[0] == {**dict(expected), "labels": 1}
    assert "labels" not in tokenize_dataset(table, tokenizer, keep_labels=False).column_names
    assert tokenize_pairs(table, tokenizer, max_length=16).to_dict() == tokens.to_dict()


def test_spec_errors_name_the_fix(tokenizer) -> None:
    with pytest.raises(ValueError, match="Unknown data source 'csv'.*'table' \\(with 'path'"):
        datasets_from_spec({"eval_sets": {"x": {"source": "csv"}}}, tokenizer)
