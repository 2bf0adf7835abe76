"""The command-line workflows lose nothing and report what happened (issue #24): output folders of another run are
refused, resume continues this run only, exports refuse unfinished masks and never replace their inputs, split
flags act or are refused, and the summary always prints the verdict."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from hf_heuristic_core.cli import main
from hf_heuristic_core.run_folder import read_record


@pytest.fixture(scope="module")
def tiny(tiny_bert_nli):
    """A tiny random BERT classifier with MiniLM's tokenizer (`model/`), and 96 generated NLI pairs as one jsonl
    file (`train.jsonl`): the session's shared `tiny_bert_nli` folder (read-only)."""
    return tiny_bert_nli


def _prune(tiny: Path, output: Path, *extra: str) -> list[str]:
    return ["prune", "--model", str(tiny / "model"), "--dataset", str(tiny / "train.jsonl"), "--target_sparsity",
            "0.5", "--output_dir", str(output), "--max_steps", "8", "--per_device_train_batch_size", "8",
            "--means_examples", "32", "--max_length", "32", "--use_cpu", "--disable_tqdm", "true",
            "--logging_strategy", "no", "--save_strategy", "steps", "--save_steps", "4", "--seed", "7",
            "--convergence_subnetworks", "2", "--convergence_batches", "1", *extra]


def _error(capsys) -> str:
    return " ".join(capsys.readouterr().err.split())


@pytest.fixture(scope="module")
def finished(tiny, tmp_path_factory):
    """One finished prune run (seed 7) with checkpoints 4 and 8."""
    out = tmp_path_factory.mktemp("finished") / "run"
    assert main(_prune(tiny, out)) == 0
    return out


def test_a_second_prune_with_other_settings_is_refused_and_loses_nothing(tiny, finished, capsys):
    before = (finished / "masks.safetensors").read_bytes()
    assert main(_prune(tiny, finished, "--seed", "8")) == 2
    assert "holds another run's output (settings differ: seed: 7 -> 8)" in _error(capsys)
    assert (finished / "masks.safetensors").read_bytes() == before
    assert read_record(finished)["settings"]["seed"] == 7 and read_record(finished)["finished"] is True


def test_resume_last_takes_only_this_runs_checkpoints(tiny, finished, tmp_path, capsys):
    # An overwriting run with another seed finds checkpoints of the seed-7 run only: refused, naming the difference.
    assert main(_prune(tiny, finished, "--seed", "8", "--overwrite_output_dir", "--resume_from_checkpoint",
                       "last")) == 2
    text = _error(capsys)
    assert "none of the 2 checkpoints under" in text and "checkpoint-8: settings.seed: 7 -> 8" in text
    assert read_record(finished)["settings"]["seed"] == 7   # the refused run wrote nothing: the record is restored
    # An explicit checkpoint of another run, from another output folder: refused too.
    assert main(_prune(tiny, tmp_path / "other", "--seed", "8", "--resume_from_checkpoint",
                       str(finished / "checkpoint-4"))) == 2
    assert "is a checkpoint of another run: settings.seed: 7 -> 8" in _error(capsys)
    assert main(_prune(tiny, tmp_path / "other2", "--target_sparsity", "0.3", "--resume_from_checkpoint",
                       str(finished / "checkpoint-4"))) == 2
    assert "settings.target_sparsity: 0.5 -> 0.3" in _error(capsys)


def test_export_refuses_a_midrun_checkpoint_and_never_writes_over_its_masks(tiny, finished, tmp_path, capsys):
    model = str(tiny / "model")
    assert main(["export", "--model", model, "--masks", str(finished / "checkpoint-4"),
                 "--output_dir", str(tmp_path / "slim")]) == 2
    text = _error(capsys)
    assert "is not a finished run's masks: it is a mid-run training checkpoint (step 4 of 8)" in text
    assert "--allow_unfinished" in text and not (tmp_path / "slim").exists()
    masks = (finished / "masks.safetensors").read_bytes()
    assert main(["export", "--model", model, "--masks", str(finished), "--output_dir", str(finished),
                 "--overwrite_output_dir"]) == 2
    assert "is this command's input --masks" in _error(capsys)
    assert (finished / "masks.safetensors").read_bytes() == masks
    # A folder with someone's files: refused; with --overwrite_output_dir the files stay.
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    assert main(["export", "--model", model, "--masks", str(finished), "--output_dir", str(tmp_path / "mine")]) == 2
    assert "is not empty and no run of 'export' recorded its files (notes.txt)" in _error(capsys)
    assert main(["export", "--model", model, "--masks", str(finished), "--output_dir", str(tmp_path / "mine"),
                 "--overwrite_output_dir"]) == 0
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me" and (tmp_path / "mine" / "config.json").is_file()
    # The same export again replaces its own previous export; another model's folder is never mixed into.
    assert main(["export", "--model", model, "--masks", str(finished), "--output_dir", str(tmp_path / "slim")]) == 0
    assert main(["export", "--model", model, "--masks", str(finished), "--output_dir", str(tmp_path / "slim")]) == 0
    assert main(["export", "--model", model, "--masks", str(finished / "checkpoint-4"), "--allow_unfinished",
                 "--output_dir", str(tmp_path / "ckpt")]) == 0
    assert "WARNING: exported unfinished masks (--allow_unfinished): it is a mid-run" in capsys.readouterr().out
    assert main(["export", "--model", model, "--masks", str(finished), "--output_dir", model,
                 "--overwrite_output_dir"]) == 2
    assert "is this command's input --model" in _error(capsys)


def test_split_flags_on_a_single_file_act_or_are_refused(tiny, tmp_path, capsys):
    assert main(_prune(tiny, tmp_path / "a", "--eval_split", "validation")) == 2
    assert "read whole (data files have no splits), so --eval_split validation cannot select" in _error(capsys)
    assert main(_prune(tiny, tmp_path / "b", "--train_split", "validation")) == 2
    assert "so --train_split validation would select nothing" in _error(capsys)
    assert main(_prune(tiny, tmp_path / "c", "--eval_fraction", "0.25", "--save_strategy", "no")) == 0
    out = capsys.readouterr().out
    assert "evaluated on        24 examples held out of" in out and "seeded random split with seed 7" in out
    assert "the mask was learned on the other 72" in out
    assert "verdict             " in out   # always printed


def test_a_read_only_output_folder_fails_before_the_model_loads(tiny, tmp_path, capsys, monkeypatch):
    import hf_heuristic_core.model as model_module

    def never(*args, **kwargs):
        raise AssertionError("the model was loaded")
    monkeypatch.setattr(model_module.PrunableModel, "from_pretrained", classmethod(never))
    (tmp_path / "file").write_text("x")
    assert main(_prune(tiny, tmp_path / "file" / "out")) == 2
    assert "is not writable" in _error(capsys)


def test_summary_reports_the_sparsity_a_penalty_reached_and_the_three_valued_verdict():
    from hf_heuristic_core.cli.prune import format_summary
    summary = {"units_kept": 10, "units_total": 10, "sparsity": 0.0, "sparsity_params": 0.0, "target_sparsity": None,
               "kl_to_full_model": 0.0, "agreement_with_full_model": 1.0, "output_dir": "out", "evaluated_on": "x",
               "convergence": {"converged": True, "verdict": "inconclusive: random subnetworks of this size are "
                               "faithful too", "kl": 1e-6, "random_kl_median": 2e-6, "subnetworks": 8}}
    text = format_summary(summary)
    assert "sparsity reached    0.0000" in text and "penalty has no target" in text and "target 0.5" not in text
    assert "verdict             inconclusive: random subnetworks of this size are faithful too" in text  # old artifact
    summary["convergence"] = None
    assert "verdict             not checked" in format_summary(summary)


def test_labels_the_task_loss_cannot_use_are_named():
    import datasets
    from transformers import BertConfig

    from hf_heuristic_core.cli.prune_data import check_labels
    from hf_heuristic_core.errors import UsageError
    config = BertConfig(num_labels=2)
    with pytest.raises(UsageError, match=r"values outside the model's classes 0..1: \[-1\].*unlabelled"):
        check_labels(datasets.Dataset.from_dict({"text": ["a", "b"], "label": [0, -1]}), config,
                     "sequence_classification")
    with pytest.raises(UsageError, match=r"holds strings \(\['contradiction', 'entailment'\]\).*does not name"):
        check_labels(datasets.Dataset.from_dict({"label": ["entailment", "contradiction"]}), config,
                     "sequence_classification")
    config.label2id = {"entailment": 0, "contradiction": 1}
    mapped = check_labels(datasets.Dataset.from_dict({"label": ["entailment", "contradiction"]}), config,
                          "sequence_classification")
    assert mapped["label"] == [0, 1]


def test_task_auto_reads_a_gguf_architecture_and_refuses_a_headless_config():
    from transformers import BertConfig, LlamaConfig

    from hf_heuristic_core.cli.prune import PruneScriptArguments, resolve_task
    from hf_heuristic_core.errors import UsageError
    gguf = PruneScriptArguments(model="m", dataset="d", gguf_file="x.gguf")
    assert resolve_task(gguf, LlamaConfig()) == "causal_lm"   # a GGUF config names no class, only its architecture
    plain = PruneScriptArguments(model="m", dataset="d")
    with pytest.raises(UsageError, match=r"names no task head. Pass --task causal_lm"):
        resolve_task(plain, BertConfig(architectures=["BertModel"]))
    assert resolve_task(plain, BertConfig(architectures=["BertForSequenceClassification"])) == \
        "sequence_classification"


def test_induce_refuses_a_bert_source_naming_what_it_is(minilm_dir, tmp_path, capsys):
    assert main(["induce", "--source", str(minilm_dir), "--masks", str(tmp_path), "--output_dir",
                 str(tmp_path / "si")]) == 2
    text = _error(capsys)
    assert "is a BertModel model; induce's command line trains the arithmetic target task" in text
    assert "--num_tokens" not in text and not (tmp_path / "si").exists()


def test_weight_masks_and_another_models_masks_are_named_by_export(tiny, finished, tmp_path, capsys):
    import transformers

    from hf_heuristic_core import PrunableModel, PruningConfig
    model = transformers.AutoModelForSequenceClassification.from_pretrained(tiny / "model")
    weights = PrunableModel(model, PruningConfig(granularity="weight", target_modules=["query"]))
    weights.set_masks({k: torch.ones(v) for k, v in weights.mask_shapes().items()})
    weights.save_pretrained(tmp_path / "weight-masks")
    assert main(["export", "--model", str(tiny / "model"), "--masks", str(tmp_path / "weight-masks"),
                 "--output_dir", str(tmp_path / "a")]) == 2
    assert "holds 'weight' masks (single weights zeroed inside their matrices); a slim model can only drop" in \
        _error(capsys)
    config = transformers.BertConfig.from_pretrained(tiny / "model")
    config.num_hidden_layers = 3
    transformers.BertForSequenceClassification(config).save_pretrained(tmp_path / "deeper")
    assert main(["export", "--model", str(tmp_path / "deeper"), "--masks", str(finished), "--output_dir",
                 str(tmp_path / "b")]) == 2
    assert "were made for another model than --model" in _error(capsys)


def test_an_artifact_names_its_local_base_model_by_absolute_path(tiny, tmp_path, monkeypatch):
    from hf_heuristic_core import PrunableModel, PruningConfig, read_artifact
    monkeypatch.chdir(tiny)
    prunable = PrunableModel.from_pretrained("model", PruningConfig(ablation="zero"))
    prunable.save_pretrained(tmp_path / "masks")
    assert read_artifact(tmp_path / "masks").config.base_model_name_or_path == str(tiny / "model")
    monkeypatch.chdir(tmp_path)   # elsewhere: the artifact still finds its base model
    reloaded = PrunableModel.from_pretrained(tmp_path / "masks")
    assert reloaded.num_layers == 2


def test_old_verdicts_read_three_valued(tmp_path):
    from hf_heuristic_core.training.convergence import check_convergence, verdict_status
    old = {"converged": True, "verdict": "inconclusive: random subnetworks of this size are faithful too"}
    assert verdict_status(old) == "inconclusive"
    assert verdict_status({"converged": False, "verdict": "x"}) == "not_converged"
    report = check_convergence(1e-5, [1e-4, 2e-4, 3e-4], 0.2, 4)   # random subnetworks are faithful too
    assert report.status == "inconclusive" and report.converged is None and "untrained" in report.advice
    assert check_convergence(0.01, [1.0, 1.0], 0.2, 4).status == "converged"
    assert check_convergence(0.9, [1.0, 1.0], 0.2, 4).status == "not_converged"


def test_analyze_refuses_an_unfinished_runs_folder(tmp_path, capsys):
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "manifest.json").write_text(json.dumps({"sparsities": [0.5], "seeds": [0, 1], "eval_sets": ["id"]}))
    (runs / "full_model.json").write_text(json.dumps({"accuracy": {"id": 0.9}}))
    from hf_heuristic_core import PrunableModel, PruningConfig
    from tiny_models import tiny_model
    prunable = PrunableModel(tiny_model("bert", num_layers=2), PruningConfig(ablation="zero"))
    prunable.set_masks(heads=torch.tensor([[1., 0, 1, 0], [0, 1, 0, 1]]))
    prunable.save_pretrained(runs / "sp50-seed0")
    (runs / "sp50-seed0" / "result.json").write_text(json.dumps(
        {"run": "sp50-seed0", "sparsity": 0.5, "seed": 0, "eval": {"id": {"accuracy": 0.8}}}))
    assert main(["analyze", str(runs), "--no_ablation", "--no_attention"]) == 2
    assert "is unfinished: 1 planned runs have no result yet (sp50-seed1)" in _error(capsys)
    assert main(["analyze", str(runs), "--no_ablation", "--no_attention", "--allow_unfinished"]) == 0
    assert "planned run sp50-seed1 has no result" in capsys.readouterr().out
    assert "Unfinished runs folder" in (runs / "report" / "report.md").read_text()


def test_study_refuses_a_folder_of_another_study_before_any_work(tmp_path, capsys, monkeypatch):
    import hf_heuristic_core.study.run as study_run
    from dataclasses import asdict
    monkeypatch.setattr(study_run, "_run_study", lambda args: (_ for _ in ()).throw(AssertionError("ran")))
    out = tmp_path / "study"
    out.mkdir()
    old = asdict(study_run.StudyArguments(output_dir=str(out), prune_steps=100))   # written by an older release
    (out / "study_args.json").write_text(json.dumps(old))
    assert main(["study", "--output_dir", str(out)]) == 2
    assert "holds another run's output (settings differ: prune_steps: 100 -> 200)" in _error(capsys)
    seen = []
    monkeypatch.setattr(study_run, "_run_study", lambda args: seen.append(args) or {})
    study_run.run_study(study_run.StudyArguments(output_dir=str(out), prune_steps=100, seeds="0,1,2,3,4"))
    assert len(seen) == 1   # the same study with more seeds resumes


WRITERS = {   # command -> (argv with OUT for the output folder, the kind it records)
    "prune": (["prune", "--model", "{model}", "--dataset", "{data}", "--output_dir", "OUT"], "prune"),
    "export": (["export", "--model", "{model}", "--masks", "{masks}", "--output_dir", "OUT"], "export"),
    "subtasks": (["subtasks", "--masks", "{masks}", "{masks}", "--names", "a", "b", "--output_dir", "OUT"],
                 "subtasks"),
    "analyze": (["analyze", "{masks}", "--output_dir", "OUT"], "analyze"),
    "study": (["study", "--output_dir", "OUT"], "study"),
    "induce": (["induce", "--arithmetic", "--output_dir", "OUT"], "induce"),
}


@pytest.mark.parametrize("command", sorted(WRITERS))
def test_every_writer_refuses_a_foreign_or_locked_folder_before_any_work(command, tiny, finished, tmp_path,
                                                                           capsys):
    from filelock import FileLock
    argv, kind = WRITERS[command]
    fill = {"{model}": str(tiny / "model"), "{data}": str(tiny / "train.jsonl"), "{masks}": str(finished)}
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    command_line = [fill.get(a, str(out) if a == "OUT" else a) for a in argv]
    assert main(command_line) == 2
    assert f"is not empty and no run of {kind!r} recorded its files (notes.txt)" in _error(capsys)
    (out / "notes.txt").unlink()
    with FileLock(out / ".hf_heuristic_core.lock"):   # another run holds the folder's lock
        assert main(command_line) == 2
    assert "is being written by another run" in _error(capsys)


def test_effective_size_takes_the_lock_of_the_run_it_writes_into(tmp_path, capsys):
    from filelock import FileLock
    run = tmp_path / "finetune"
    (run / "checkpoint-2").mkdir(parents=True)
    with FileLock(run / ".hf_heuristic_core.lock"):   # another effective-size run holds the folder's lock
        assert main(["effective-size", str(run), "--id_eval", "generated"]) == 2
    assert "is being written by another run" in _error(capsys)


def test_non_binary_or_never_fixed_masks_are_unfinished(tmp_path):
    from hf_heuristic_core import PrunableModel, PruningConfig
    from hf_heuristic_core.artifacts import check_finished, unfinished_reasons
    from hf_heuristic_core.errors import ArtifactError
    from tiny_models import tiny_model
    prunable = PrunableModel(tiny_model("bert", num_layers=2), PruningConfig(ablation="zero"))
    prunable.save_pretrained(tmp_path / "learned")   # logits only, never fixed: a state saved during training
    assert "its masks were never fixed" in unfinished_reasons(tmp_path / "learned")[0]
    prunable.set_masks(heads=torch.tensor([[1., 0.5, 1, 0], [0, 1, 0, 1]]))
    prunable.save_pretrained(tmp_path / "soft")
    with pytest.raises(ArtifactError, match=r"its heads mask is not binary \(1 entries strictly between 0 and 1\)"):
        check_finished(tmp_path / "soft")
    assert check_finished(tmp_path / "soft", allow_unfinished=True)
    prunable.set_masks(heads=torch.tensor([[1., 0, 1, 0], [0, 1, 0, 1]]))
    prunable.save_pretrained(tmp_path / "fixed")
    assert check_finished(tmp_path / "fixed") == []


def test_penalty_mode_prints_the_sparsity_it_reached_not_a_target(tiny, tmp_path, capsys):
    argv = _prune(tiny, tmp_path / "p", "--sparsity_control", "penalty", "--penalty_weight", "0.001",
                  "--save_strategy", "no")
    at = argv.index("--target_sparsity")
    assert main(argv) == 2   # a target does nothing under a fixed penalty: refused, not silently dropped
    assert "--target_sparsity does nothing under --sparsity_control penalty" in _error(capsys)
    assert main(argv[:at] + argv[at + 2:]) == 0
    out = capsys.readouterr().out
    assert "sparsity reached" in out and "penalty has no target" in out and "(target 0.5000" not in out
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["target_sparsity"] is None and summary["sparsity_control"] == "penalty"
    assert summary["convergence"]["status"] in ("converged", "not_converged", "inconclusive")
