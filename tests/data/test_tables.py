"""The one table loader (`data.tables.load_table`): every format through `datasets`' builders, splits, errors."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from datasets import Dataset, DatasetDict

from hf_heuristic_core.data.sources import load_table as load_table_old_path
from hf_heuristic_core.data.tables import load_table

ROWS = {"premise": ["A b.", "C d.", "E f."], "hypothesis": ["b.", "d.", ""], "label": [0, 1, 0]}


def test_each_format_reads_the_same_rows(tmp_path: Path) -> None:
    table = Dataset.from_dict(ROWS)
    table.to_json(tmp_path / "a.jsonl")
    table.to_parquet(tmp_path / "a.parquet")
    table.to_csv(tmp_path / "a.csv", index=False)
    table.to_pandas().to_csv(tmp_path / "a.tsv", sep="\t", index=False)
    with gzip.open(tmp_path / "a.jsonl.gz", "wt") as handle:
        handle.write((tmp_path / "a.jsonl").read_text())
    (tmp_path / "columns.json").write_text(json.dumps(ROWS))            # column-oriented JSON
    (tmp_path / "records.json").write_text(json.dumps([dict(zip(ROWS, r)) for r in zip(*ROWS.values())]))
    for name in ("a.jsonl", "a.parquet", "a.csv", "a.tsv", "a.jsonl.gz", "columns.json", "records.json"):
        loaded = load_table(str(tmp_path / name))
        assert loaded.to_dict() == ROWS, name    # empty strings stay strings (no NaN)


def test_comma_separated_files_are_read_together(tmp_path: Path) -> None:
    Dataset.from_dict(ROWS).to_json(tmp_path / "a.jsonl")
    Dataset.from_dict({k: v[:1] for k, v in ROWS.items()}).to_json(tmp_path / "b.jsonl")
    assert len(load_table(f"{tmp_path / 'a.jsonl'},{tmp_path / 'b.jsonl'}")) == 4
    Dataset.from_dict(ROWS).to_csv(tmp_path / "c.csv", index=False)
    with pytest.raises(ValueError, match="different formats"):
        load_table(f"{tmp_path / 'a.jsonl'},{tmp_path / 'c.csv'}")


def test_folders_pick_the_split(tmp_path: Path) -> None:
    Dataset.from_dict(ROWS).to_json(tmp_path / "files" / "train.jsonl")
    Dataset.from_dict({k: v[:2] for k, v in ROWS.items()}).to_json(tmp_path / "files" / "dev.jsonl")
    assert len(load_table(tmp_path / "files")) == 3
    assert len(load_table(tmp_path / "files", split="validation")) == 2    # 'dev' is an alias
    DatasetDict({"train": Dataset.from_dict(ROWS)}).save_to_disk(tmp_path / "saved")
    assert load_table(str(tmp_path / "saved")).to_dict() == ROWS
    with pytest.raises(ValueError, match=r"split 'test' not in .*available splits: \['train'\]"):
        load_table(tmp_path / "saved", split="test")


def test_missing_paths_fail_before_any_hub_lookup(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist.*Hub dataset id"):
        load_table(str(tmp_path / "train.jsonl"))
    with pytest.raises(FileNotFoundError, match="Dataset not found"):
        load_table("./nope")
    assert load_table_old_path is load_table
