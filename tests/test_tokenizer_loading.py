"""A model folder without a tokenizer is refused (or skipped with the reason) wherever a tokenizer is loaded from a
path the user gave. transformers 5 builds a tokenizer of the model's class holding only its special tokens from such a
folder, without a word: every text becomes [UNK] and every score computed on it is meaningless."""

from __future__ import annotations

from pathlib import Path

import pytest
import transformers

from hf_heuristic_core import EffectiveSizeError
from hf_heuristic_core.analysis.report import _load_tokenizer as analysis_tokenizer, _Unavailable
from hf_heuristic_core.cli.effective_size import EffectiveSizeArguments, _load_tokenizer as effective_size_tokenizer
from hf_heuristic_core.errors import UsageError
from hf_heuristic_core.tokenizer_loading import load_tokenizer, missing_tokenizer
from tiny_models import tiny_bert_classifier


@pytest.fixture(scope="module")
def folders(tmp_path_factory, minilm_dir) -> dict[str, Path]:
    """A tiny BERT saved without a tokenizer (as a stock Trainer checkpoint without processing_class), and one with
    MiniLM's."""
    root = tmp_path_factory.mktemp("tokenizers")
    model = tiny_bert_classifier(num_labels=2)
    model.save_pretrained(root / "bare" / "checkpoint-4")
    model.save_pretrained(root / "with" / "checkpoint-4")
    transformers.AutoTokenizer.from_pretrained(minilm_dir).save_pretrained(root / "with")
    return {"bare": root / "bare", "with": root / "with"}


def test_the_trap_is_real_and_load_tokenizer_refuses_it(folders):
    """The reference: what transformers itself returns for the bare folder (kept, so this test notices the day
    transformers raises instead)."""
    bare = folders["bare"] / "checkpoint-4"
    empty = transformers.AutoTokenizer.from_pretrained(bare)
    assert len(empty) < 10 and set(empty("the cat sat")["input_ids"][1:-1]) == {empty.unk_token_id}
    assert missing_tokenizer(bare) and not missing_tokenizer(folders["with"]) and not missing_tokenizer("org/name")
    with pytest.raises(UsageError, match=f"--tokenizer {bare} holds no tokenizer .* reads every word as unknown"):
        load_tokenizer(bare, "--tokenizer")
    assert len(load_tokenizer(folders["with"])) > 30000
    assert not missing_tokenizer(bare, gguf_file="model.gguf")   # a GGUF file carries its tokenizer


def test_effective_size_skips_a_checkpoint_without_a_tokenizer(folders):
    """It looks in the first checkpoint, then in the run folder; a bare checkpoint used to win with its empty
    tokenizer."""
    run = folders["with"]
    tokenizer = effective_size_tokenizer(EffectiveSizeArguments(output_dir=str(run)), run / "checkpoint-4")
    assert len(tokenizer) > 30000
    bare = folders["bare"]
    with pytest.raises(EffectiveSizeError, match="no tokenizer found in .*pass --tokenizer NAME_OR_PATH"):
        effective_size_tokenizer(EffectiveSizeArguments(output_dir=str(bare)), bare / "checkpoint-4")
    with pytest.raises(UsageError, match="--tokenizer .* holds no tokenizer"):
        effective_size_tokenizer(EffectiveSizeArguments(output_dir=str(run), tokenizer=str(bare / "checkpoint-4")),
                                 run / "checkpoint-4")


def test_analyze_skips_the_model_sections_with_the_reason(folders):
    bare = str(folders["bare"] / "checkpoint-4")
    with pytest.raises(_Unavailable, match="the manifest's model .* holds no tokenizer.*Or pass tokenizer="):
        analysis_tokenizer({"model": bare}, None)
    with pytest.raises(_Unavailable, match="model= .* holds no tokenizer"):
        analysis_tokenizer({"model": str(folders["with"])}, bare)
    assert len(analysis_tokenizer({"model": bare, "data": {"tokenizer": str(folders["with"])}}, None)) > 30000


def test_study_refuses_a_model_folder_without_a_tokenizer_before_writing(folders, tmp_path):
    from hf_heuristic_core.study import StudyArguments
    from hf_heuristic_core.study.run import run_study
    bare = folders["bare"] / "checkpoint-4"
    with pytest.raises(UsageError, match=f"--model {bare} holds no tokenizer"):
        run_study(StudyArguments(output_dir=str(tmp_path / "study"), model=str(bare)))
    assert not (tmp_path / "study").exists()
