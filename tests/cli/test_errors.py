"""A user's mistakes on the command line get one line naming the problem and the fix, no traceback (unless
`--debug`); the API refuses an empty training set before torch's sampler does."""

from __future__ import annotations

import pytest

from hf_heuristic_core.cli import main
from hf_heuristic_core.errors import EmptyDatasetError, UsageError


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory, minilm_dir):
    """A tiny random BERT classifier with MiniLM's tokenizer (what `prune` needs to get past loading)."""
    import torch
    import transformers
    folder = tmp_path_factory.mktemp("tiny-errors") / "model"
    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    config = transformers.BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_attention_heads=4,
                                     num_hidden_layers=2, intermediate_size=37, max_position_embeddings=64,
                                     num_labels=2)
    torch.manual_seed(0)
    transformers.BertForSequenceClassification(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture
def data_file(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text('{"premise": "a b", "hypothesis": "a", "label": 0}\n' * 4)
    return path


def _prune(model, data, output, *extra) -> list[str]:
    return ["prune", "--model", str(model), "--dataset", str(data), "--output_dir", str(output), "--max_steps", "2",
            "--report_to", "none", "--use_cpu", *extra]


def _error_line(capsys) -> str:
    """The one stderr line of a failed command (log lines from `logging` are not counted)."""
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("hf-heuristic-core")]
    assert len(lines) == 1, err
    assert "Traceback" not in err, err
    return lines[0]


def test_missing_local_model_folder_is_named_not_a_repo_id_error(tmp_path, data_file, capsys):
    assert main(_prune(tmp_path / "no-such-model", data_file, tmp_path / "out")) == 2
    line = _error_line(capsys)
    assert "no-such-model: no such folder" in line and "check the path" in line
    assert "Repo id" not in line


def test_folder_without_a_saved_model_is_refused(tmp_path, data_file, capsys):
    (tmp_path / "empty-folder").mkdir()
    assert main(_prune(tmp_path / "empty-folder", data_file, tmp_path / "out")) == 2
    assert "has no config.json" in _error_line(capsys)


def test_empty_dataset_file_gives_no_rows_not_stopiteration(tiny_model_dir, tmp_path, capsys):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert main(_prune(tiny_model_dir, empty, tmp_path / "out")) == 2
    line = _error_line(capsys)
    assert "empty.jsonl (split 'train') has no rows" in line and "StopIteration" not in line


def test_missing_data_file_is_named(tiny_model_dir, tmp_path, capsys):
    assert main(_prune(tiny_model_dir, tmp_path / "nowhere.jsonl", tmp_path / "out")) == 2
    assert "nowhere.jsonl does not exist" in _error_line(capsys)


@pytest.mark.parametrize("flag, value, fix", [
    ("--learning_rate", "-1", "--mask_learning_rate"),
    ("--learning-rate", "0.5", "--reg_learning_rate"),
    ("--weight_decay", "0.01", "without weight decay"),
    ("--optim", "sgd", "always AdamW"),
    ("--eval_strategy", "steps", "--eval_split"),
])
def test_flags_the_mask_optimizer_ignores_are_refused(tmp_path, data_file, capsys, flag, value, fix):
    assert main(_prune(tmp_path / "model", data_file, tmp_path / "out", flag, value)) == 2
    line = _error_line(capsys)
    assert f"{flag.replace('-', '_').replace('__', '--')} is not used by prune" in line and fix in line


@pytest.mark.parametrize("extra, message", [
    (["--target_sparsity", "50"], "must be a fraction in [0, 1) (pass 0.5 for 50%)"),
    (["--max_train_examples", "0"], "--max_train_examples 0 must be >= 1"),
    (["--prune_heads", "false", "--prune_mlps", "false"], "leave nothing to prune"),
    (["--ablation", "mean_and_zero"], "--ablation 'mean_and_zero' is not one of mean, zero, resample"),
    (["--task", "regression"], "--task 'regression' is not one of auto"),
])
def test_values_that_cannot_work_fail_before_loading(tiny_model_dir, data_file, tmp_path, capsys, extra, message):
    assert main(_prune(tiny_model_dir, data_file, tmp_path / "out", *extra)) == 2
    assert message in _error_line(capsys)
    assert not (tmp_path / "out").exists()


def test_debug_shows_the_exception_instead(tmp_path, data_file):
    with pytest.raises(UsageError, match="no such folder"):
        main(_prune(tmp_path / "no-such-model", data_file, tmp_path / "out", "--debug"))


def test_unknown_flag_is_named_with_the_closest_real_one(tmp_path, data_file, capsys):
    assert main(_prune(tmp_path / "m", data_file, tmp_path / "out", "--target_sparsityy", "0.5")) == 2
    assert "unknown flag(s) --target_sparsityy (did you mean --target_sparsity?)" in _error_line(capsys)


def test_effective_size_without_checkpoints_is_one_line(tmp_path, capsys):
    assert main(["effective-size", str(tmp_path), "--id_eval", "generated"]) == 2
    assert "has no checkpoint-* folders" in _error_line(capsys)


def test_analyze_missing_runs_folder_is_one_line(tmp_path, capsys):
    assert main(["analyze", str(tmp_path / "no-runs")]) == 2
    assert "no-runs" in _error_line(capsys)


def test_trainer_refuses_an_empty_training_set_before_the_sampler(tiny_model_dir, tmp_path):
    import datasets
    import transformers

    from hf_heuristic_core import (
        PrunableModel,
        PruningArguments,
        PruningConfig,
        PruningTrainer,
    )
    model = PrunableModel(transformers.AutoModelForSequenceClassification.from_pretrained(tiny_model_dir),
                          PruningConfig(ablation="zero"))
    empty = datasets.Dataset.from_dict({"input_ids": [], "attention_mask": []})
    args = PruningArguments(output_dir=str(tmp_path), max_steps=2, report_to="none", use_cpu=True)
    with pytest.raises(EmptyDatasetError, match="The training dataset has no rows"):
        PruningTrainer(model=model, args=args, train_dataset=empty)


@pytest.mark.parametrize("flag", ["--model", "--ood_eval"])
def test_study_names_a_missing_local_path(tmp_path, capsys, flag):
    assert main(["study", "--output_dir", str(tmp_path / "study"), flag, str(tmp_path / "missing")]) == 2
    line = _error_line(capsys)
    assert f"{flag} {tmp_path / 'missing'}" in line and "no such" in line and "Repo id" not in line


def test_a_bad_value_gets_a_short_usage_and_one_error_line(tmp_path, data_file, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(_prune(tmp_path / "m", data_file, tmp_path / "out", "--max_steps", "abc"))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "argument --max_steps/--max-steps: invalid int value: 'abc'" in err
    assert len(err.splitlines()) <= 3, err   # not the ~150-flag usage argparse writes by default


def test_effective_size_parse_errors_get_a_short_usage(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["effective-size", str(tmp_path), "--steps_per_run", "abc"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "invalid int value: 'abc'" in err
    assert err.startswith("usage: hf-heuristic-core effective-size RUN_DIR") and len(err.splitlines()) <= 3, err
