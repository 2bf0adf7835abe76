"""Every subcommand follows the output-folder rules of docs/guides/command_line.md ("Output folders"): an output
folder that is, or holds, one of the command's inputs is refused, and so is a folder holding another command's output
or files no run recorded; the refusal comes before any model or data is loaded, leaves the inputs untouched and exits
with 2. A run that fails before writing leaves no claim: the corrected re-run is accepted.

The walk is driven by `hf_heuristic_core.cli.SUBCOMMANDS`: a subcommand without a row in `CASES` fails the walk.
Everything runs in-process on placeholder inputs (a config.json, a jsonl file), so the whole walk takes seconds.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from hf_heuristic_core.cli import SUBCOMMANDS, main
from hf_heuristic_core.run_folder import LOCK_NAME, RECORD_NAME, read_record

OUT = "{out}"


@dataclass
class Case:
    """One way of running a subcommand: its argv (`{out}` where the output folder goes) and the inputs it reads
    (flag -> path). `holds`: whether an output folder that merely holds an input is refused too (effective-size
    writes into the fine-tuning run's folder, which holds its checkpoints, by design); `unrecorded`: whether a folder
    of files no run recorded is refused (not for effective-size: a Trainer's output_dir has no record)."""

    argv: list[str]
    inputs: dict[str, Path]
    holds: bool = True
    unrecorded: bool = True
    other_kind: str = "export"
    extra: dict[str, str] = field(default_factory=dict)


class Inputs:
    """Placeholder inputs, each alone in its own parent folder (so that the parent holds only that input)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def folder(self, name: str, files: dict[str, str] | None = None) -> Path:
        path = self.root / "in" / name / name
        path.mkdir(parents=True)
        for file, text in (files or {"placeholder.txt": "x"}).items():
            (path / file).write_text(text)
        return path

    def file(self, name: str, text: str = "{}\n") -> Path:
        path = self.root / "in" / name.replace(".", "_") / name
        path.parent.mkdir(parents=True)
        path.write_text(text)
        return path

    def model(self, name: str = "model") -> Path:
        """A config.json of a tiny GPT-2 causal LM over 10 number tokens + separator (what induce's source is)."""
        config = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": 11, "n_layer": 1,
                  "n_head": 2, "n_embd": 16, "n_positions": 4}
        return self.folder(name, {"config.json": json.dumps(config)})

    def data(self, name: str = "data") -> Path:
        return self.folder(name, {"train.jsonl": json.dumps({"premise": "a", "hypothesis": "b", "label": 0}) + "\n"})


def _prune(i: Inputs) -> list[Case]:
    model, data = i.model(), i.data()
    return [Case(["prune", "--model", str(model), "--dataset", str(data), "--target_sparsity", "0.5", "--output_dir",
                  OUT], {"--model": model, "--dataset": data}, other_kind="study")]


def _finetune(i: Inputs) -> list[Case]:
    model, data = i.model(), i.data()
    return [Case(["finetune", "--model", str(model), "--dataset", str(data), "--output_dir", OUT],
                 {"--model": model, "--dataset": data}, other_kind="prune")]


def _export(i: Inputs) -> list[Case]:
    model, masks = i.model(), i.folder("masks", {"pruning_config.json": "{}"})
    return [Case(["export", "--model", str(model), "--masks", str(masks), "--output_dir", OUT],
                 {"--model": model, "--masks": masks}, other_kind="prune")]


def _subtasks(i: Inputs) -> list[Case]:
    a, b, reference = i.folder("masks_a"), i.folder("masks_b"), i.folder("reference")
    return [Case(["subtasks", "--masks", str(a), str(b), "--reference", str(reference), "--output_dir", OUT],
                 {"--masks": a, "--masks ": b, "--reference": reference})]


def _induce(i: Inputs) -> list[Case]:
    source, masks = i.model("source"), i.file("masks.safetensors", "x")
    elsewhere = i.model("trained_source")
    return [Case(["induce", "--source", str(source), "--masks", str(masks), "--output_dir", OUT],
                 {"--source": source, "--masks": masks}),
            # --arithmetic reads a --source that exists outside the output folder (and trains it where absent); one
            # inside the output folder is the run's own (see the last test)
            Case(["induce", "--arithmetic", "--source", str(elsewhere), "--output_dir", OUT], {"--source": elsewhere},
                 holds=False)]


def _analyze(i: Inputs) -> list[Case]:
    runs, model = i.folder("runs"), i.model()
    return [Case(["analyze", str(runs), "--model", str(model), "--output_dir", OUT],
                 {"RUNS_DIR": runs, "--model": model})]


def _effective_size(i: Inputs) -> list[Case]:
    train, id_eval, ood_eval = i.data("train"), i.data("id"), i.data("ood")
    data = ["--train_data", str(train), "--id_eval", f"hans={id_eval}", "--ood_eval", str(ood_eval)]
    run = i.folder("finetune_run")
    # The output folder is the one its results go to: OUTPUT_DIR, or the folder of --results_file.
    return [Case(["effective-size", OUT, *data], {"--train_data": train, "--id_eval": id_eval,
                                                  "--ood_eval": ood_eval}, holds=False, unrecorded=False),
            Case(["effective-size", str(run), "--results_file", f"{OUT}/effective_size.json", *data],
                 {"--train_data": train, "--id_eval": id_eval}, holds=False, unrecorded=False)]


def _study(i: Inputs) -> list[Case]:
    model, train, id_eval, ood_eval = i.model(), i.data("train"), i.data("id"), i.data("ood")
    config = i.file("study.yaml", "seed: 0\n")
    return [Case(["study", "--config", str(config), "--model", str(model), "--train", str(train), "--id_eval",
                  str(id_eval), "--ood_eval", str(ood_eval), "--output_dir", OUT],
                 {"--config": config, "--model": model, "--train": train, "--id_eval": id_eval,
                  "--ood_eval": ood_eval})]


def _circuit(i: Inputs) -> list[Case]:
    model, data, runs = i.model(), i.data(), i.folder("runs")
    artifact, importances = i.folder("artifact", {"pruning_config.json": "{}"}), i.file("importances.json")
    return [Case(["circuit", "export", "--scores", str(importances), "--model", str(model), "--output_dir", OUT],
                 {"--scores": importances, "--model": model}),
            Case(["circuit", "export", "--scores", str(artifact), "--output_dir", OUT], {"--scores": artifact}),
            Case(["circuit", "attribute", "--model", str(model), "--dataset", str(data), "--output_dir", OUT],
                 {"--model": model, "--dataset": data}),
            Case(["circuit", "faithfulness", "--model", str(model), "--dataset", str(data), "--scores",
                  f"{importances},{artifact}", "--runs_dir", str(runs), "--output_dir", OUT],
                 {"--model": model, "--dataset": data, "--scores": importances, "--scores ": artifact,
                  "--runs_dir": runs})]


# One row per subcommand: how to run it, and what it reads.
CASES: dict[str, Callable[[Inputs], list[Case]]] = {
    "finetune": _finetune, "prune": _prune, "export": _export, "subtasks": _subtasks, "induce": _induce, "analyze": _analyze,
    "effective-size": _effective_size, "study": _study, "circuit": _circuit,
}


def _tree(path: Path) -> dict[str, int]:
    """Every file and folder under `path` (or the file itself) with its modification time."""
    if path.is_file():
        return {str(path): path.stat().st_mtime_ns}
    return {str(p): p.stat().st_mtime_ns for p in sorted(path.rglob("*"))}


def _refused(argv: list[str], out: Path, capsys, *expected: str) -> None:
    argv = [a.replace(OUT, str(out)) for a in argv]
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, f"{' '.join(argv)} exited {code}, not refused: {err}"
    for text in expected:
        assert text in err, f"{' '.join(argv)}: expected {text!r} in {err!r}"


def _other_commands_folder(root: Path, kind: str) -> Path:
    folder = root / "another_commands_output"
    folder.mkdir(parents=True)
    (folder / "report.md").write_text("theirs")
    (folder / RECORD_NAME).write_text(json.dumps({"format": "hf_heuristic_core.run/1", "kind": kind,
                                                  "settings": {}, "finished": True}))
    return folder


def _unrecorded_folder(root: Path) -> Path:
    """A slim model and unrelated files that no run recorded."""
    folder = root / "slim_and_notes"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "bert", "hf_heuristic_core_slim": {}}))
    (folder / "model.safetensors").write_text("weights")
    (folder / "notes.txt").write_text("mine")
    return folder


def test_the_table_names_only_existing_subcommands():
    assert not set(CASES) - set(SUBCOMMANDS), f"rows for removed subcommands: {sorted(set(CASES) - set(SUBCOMMANDS))}"


@pytest.mark.parametrize("command", sorted(SUBCOMMANDS))
def test_every_subcommand_refuses_its_inputs_and_another_commands_folder(command, tmp_path, capsys):
    if command not in CASES:
        pytest.fail(f"The subcommand {command!r} has no row in CASES of tests/cli/test_output_folders.py: add one "
                    "(its argv with '{out}' for its output folder, and each input flag with a path), so that the "
                    "output-folder rules (inputs are never outputs, another command's folder refused) are tested "
                    "for it too.")
    for number, case in enumerate(CASES[command](Inputs(tmp_path))):
        before = {flag: _tree(path) for flag, path in case.inputs.items()}
        for flag, path in case.inputs.items():
            _refused(case.argv, path, capsys, f"is this command's input {flag.strip()}")
            if case.holds:
                _refused(case.argv, path.parent, capsys, f"holds this command's input {flag.strip()}")
            else:   # only the results folder itself is refused: nothing is written into a folder beside the input
                assert not (path.parent / RECORD_NAME).exists()
        assert {flag: _tree(path) for flag, path in case.inputs.items()} == before, "an input was changed"
        other = _other_commands_folder(tmp_path / f"other-{number}", case.other_kind)
        kept = _tree(other)
        _refused(case.argv, other, capsys, f"holds the output of another command ({case.other_kind!r}")
        assert _tree(other) == kept and read_record(other)["kind"] == case.other_kind
        if case.unrecorded:
            slim = _unrecorded_folder(tmp_path / f"slim-{number}")
            kept = _tree(slim)
            _refused(case.argv, slim, capsys, "recorded its files", "--overwrite_output_dir")
            assert _tree(slim) == kept
        # Even --overwrite_output_dir does not make an input an output.
        if "--overwrite_output_dir" not in case.argv and case.unrecorded:
            flag, path = next(iter(case.inputs.items()))
            _refused([*case.argv, "--overwrite_output_dir", "true"], path, capsys,
                     f"is this command's input {flag.strip()}")


# ------------------------------------------------------------------ a failed run leaves no claim
@pytest.fixture
def arithmetic_source(tmp_path):
    """A tiny GPT-2 over 10 number tokens + the separator (what `induce --arithmetic` would train), saved."""
    from hf_heuristic_core.induction.arithmetic import arithmetic_model
    folder = tmp_path / "source"
    arithmetic_model(num_tokens=10, layers=1, hidden=16, heads=2, inner=32).save_pretrained(folder)
    return folder


def test_a_failed_induce_leaves_no_claim_and_the_corrected_rerun_is_accepted(arithmetic_source, tmp_path, capsys):
    out = tmp_path / "si"
    tiny = ["induce", "--source", str(arithmetic_source), "--arms", "scratch", "--seeds", "0", "--ks", "2",
            "--eval_size", "10", "--epochs", "1", "--batch_size", "16", "--figure", "false", "--output_dir", str(out)]
    assert main([*tiny, "--num_tokens", "12"]) == 2   # the source has 11 tokens: --num_tokens 10
    assert "--num_tokens 10" in capsys.readouterr().err
    assert not out.exists()   # no record, no lock, no empty runs/ folder
    assert main([*tiny, "--num_tokens", "10"]) == 0, capsys.readouterr().err
    record = read_record(out)
    assert record["finished"] is True and record["settings"]["num_tokens"] == 10
    assert [p.name for p in (out / "runs").iterdir()] == ["scratch-k2-seed0.json"]


def test_a_failed_run_into_an_earlier_runs_folder_gives_it_back(arithmetic_source, tmp_path, capsys):
    """The folder of a finished run, resumed with settings that fail before writing: the record is the first run's
    again (not an unfinished one of the failed settings), and nothing else changed."""
    out = tmp_path / "si"
    tiny = ["induce", "--source", str(arithmetic_source), "--arms", "scratch", "--seeds", "0", "--ks", "2",
            "--eval_size", "10", "--epochs", "1", "--batch_size", "16", "--figure", "false", "--output_dir", str(out),
            "--overwrite_output_dir", "true"]
    assert main([*tiny, "--num_tokens", "10"]) == 0
    first, files = read_record(out), _tree(out)
    assert main([*tiny, "--num_tokens", "12"]) == 2
    assert "pass --num_tokens 10" in capsys.readouterr().err
    record = str(out / RECORD_NAME)
    assert read_record(out) == first and not (out / LOCK_NAME).exists()
    assert {k: v for k, v in _tree(out).items() if k != record} == {k: v for k, v in files.items() if k != record}


@pytest.mark.parametrize("command", [
    ["export", "--model", "{model}", "--masks", "{not_masks}", "--output_dir", "{out}"],
    ["subtasks", "--masks", "{not_masks}", "{not_masks}2", "--output_dir", "{out}"],
    ["circuit", "export", "--scores", "{not_masks}", "--output_dir", "{out}"],
    ["analyze", "{runs}", "--output_dir", "{out}", "--no_ablation", "--no_attention"],
])
def test_a_command_that_fails_after_its_claim_leaves_no_folder(command, tmp_path, capsys):
    """Each fails on its input after claiming the output folder: the new folder is gone again."""
    inputs = Inputs(tmp_path)
    names = {"model": str(inputs.model()), "not_masks": str(inputs.folder("not_masks")),
             "runs": str(inputs.folder("runs")), "out": str(tmp_path / "new" / "out")}
    (Path(names["not_masks"] + "2")).mkdir()
    argv = [part.format(**names) for part in command]
    assert main(argv) == 2
    assert "error:" in capsys.readouterr().err
    assert not (tmp_path / "new" / "out").exists()


def test_induce_with_arithmetic_treats_a_source_inside_its_output_folder_as_its_own():
    from hf_heuristic_core.cli.induce import induce_inputs
    from hf_heuristic_core.induction.arguments import InductionArguments
    own = InductionArguments(output_dir="runs/si", arithmetic=True, source="runs/si/source")
    assert induce_inputs(own) == [("--source", None), ("--masks", None)]
    elsewhere = InductionArguments(output_dir="runs/si", arithmetic=True, source="sources/a")
    assert induce_inputs(elsewhere)[0] == ("--source", "sources/a")
    itself = InductionArguments(output_dir="runs/si", arithmetic=True, source="runs/si")
    assert induce_inputs(itself)[0] == ("--source", "runs/si")


# ------------------------------------------------------------------ issue #36 review
@pytest.mark.parametrize("command", sorted(SUBCOMMANDS))
def test_no_output_folder_inside_a_data_folder(command, tmp_path, capsys):
    """A local data folder is read with every data file under it. `prune --dataset data --output_dir data/p50`
    claimed data/p50 first, then read its own run record as a data row ("DatasetGenerationError"); with split-named
    files the run went through and left its JSON files inside the data folder. Every command refuses it now, and
    writes nothing there."""
    from hf_heuristic_core.run_folder import DATA_FLAGS
    for case in CASES[command](Inputs(tmp_path / command)):
        for flag, path in case.inputs.items():
            if flag.strip() not in DATA_FLAGS or not path.is_dir():
                continue
            (path / "runs" / "out").mkdir(parents=True, exist_ok=True)   # effective-size's OUTPUT_DIR must exist
            before = _tree(path)
            _refused(case.argv, path / "runs" / "out", capsys, f"is inside this command's data folder {flag.strip()}")
            assert _tree(path) == before, "the data folder was changed"
