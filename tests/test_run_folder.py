"""Output folders: claimed before any work, one writer at a time, refused when they hold another run's or another
command's files or the run's own inputs, and never emptied."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from hf_heuristic_core.run_folder import (
    LOCK_NAME,
    RECORD_NAME,
    OutputFolderError,
    check_writable,
    claim_output_dir,
    read_record,
)


def test_a_new_folder_is_locked_while_claimed_and_recorded(tmp_path):
    out = tmp_path / "out"
    with claim_output_dir(out, "prune", {"seed": 1}) as claim:
        lock = json.loads((out / LOCK_NAME).read_text())
        assert lock["pid"] == os.getpid() and lock["kind"] == "prune"
        assert read_record(out)["finished"] is False
        (out / "masks.safetensors").write_text("x")
        claim.finish(summary={"units_kept": 3})
    assert not (out / LOCK_NAME).exists()
    record = read_record(out)
    assert record["kind"] == "prune" and record["settings"] == {"seed": 1} and record["finished"] is True
    assert record["summary"] == {"units_kept": 3}


def test_a_second_run_into_a_locked_folder_refuses(tmp_path):
    with claim_output_dir(tmp_path / "out", "prune", {"seed": 1}):
        with pytest.raises(OutputFolderError, match=rf"being written by another run \(pid {os.getpid()}"):
            claim_output_dir(tmp_path / "out", "prune", {"seed": 1})


def test_a_stale_lock_is_taken_over(tmp_path, caplog):
    out = tmp_path / "out"
    out.mkdir()
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    import socket
    (out / LOCK_NAME).write_text(json.dumps({"pid": int(gone.stdout), "host": socket.gethostname(), "since": "x"}))
    with claim_output_dir(out, "prune", {}):
        assert json.loads((out / LOCK_NAME).read_text())["pid"] == os.getpid()
    assert "stale lock" in caplog.text


def test_a_reused_pid_does_not_keep_a_lock_alive(tmp_path):
    """The lock records the process start time: a live process with the lock's pid but another start is not it."""
    out = tmp_path / "out"
    out.mkdir()
    import socket
    (out / LOCK_NAME).write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                             "process_start": "1", "since": "x"}))
    with claim_output_dir(out, "prune", {}):
        pass


def test_another_runs_folder_is_refused_naming_the_difference_unless_overwrite(tmp_path):
    out = tmp_path / "out"
    with claim_output_dir(out, "prune", {"seed": 1, "target_sparsity": 0.5}) as claim:
        (out / "masks.safetensors").write_text("first run")
        claim.finish()
    with pytest.raises(OutputFolderError, match=r"settings differ: seed: 1 -> 2.*--overwrite_output_dir"):
        claim_output_dir(out, "prune", {"seed": 2, "target_sparsity": 0.5})
    with claim_output_dir(out, "prune", {"seed": 1, "target_sparsity": 0.5}):   # the same run: resumes
        pass
    with claim_output_dir(out, "prune", {"seed": 2, "target_sparsity": 0.5}, overwrite=True):
        pass   # wrote nothing and did not finish: the folder is still the first run's
    assert read_record(out)["settings"]["seed"] == 1 and read_record(out)["finished"] is True
    with claim_output_dir(out, "prune", {"seed": 2, "target_sparsity": 0.5}, overwrite=True) as claim:
        (out / "checkpoint-2").mkdir()
        claim.finish()
    assert (out / "masks.safetensors").read_text() == "first run"   # overwrite deletes nothing
    assert read_record(out)["settings"]["seed"] == 2


def test_another_commands_folder_and_unrecorded_files_are_refused(tmp_path):
    with claim_output_dir(tmp_path / "a", "study", {}) as claim:
        (tmp_path / "a" / "report.md").write_text("x")
        claim.finish()
    with pytest.raises(OutputFolderError, match=r"another command \('study', not 'export'\)"):
        claim_output_dir(tmp_path / "a", "export", {})
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "notes.txt").write_text("mine")
    with pytest.raises(OutputFolderError, match=r"not empty and no run of 'prune' recorded its files \(notes.txt\)"):
        claim_output_dir(tmp_path / "b", "prune", {})
    legacy = lambda folder: {"seed": 1} if (folder / "notes.txt").exists() else None  # noqa: E731
    with claim_output_dir(tmp_path / "b", "prune", {"seed": 1}, legacy_settings=legacy):
        pass


def test_an_input_is_never_the_output(tmp_path):
    masks = tmp_path / "masks"
    masks.mkdir()
    with pytest.raises(OutputFolderError, match="is this command's input --masks"):
        claim_output_dir(masks, "export", {}, overwrite=True, inputs=[("--masks", str(masks))])
    with pytest.raises(OutputFolderError, match="holds this command's input --masks"):
        claim_output_dir(tmp_path, "export", {}, overwrite=True, inputs=[("--masks", str(masks))])
    claim_output_dir(tmp_path / "slim", "export", {}, inputs=[("--masks", str(masks)), ("--model", "org/hub-id")])


def test_an_unwritable_folder_fails_before_any_work(tmp_path):
    (tmp_path / "file").write_text("x")
    for target in (tmp_path / "file" / "out", "/proc/hf-heuristic-core-test"):
        with pytest.raises(OutputFolderError, match="is not writable.*Nothing was run"):
            claim_output_dir(target, "prune", {})
        with pytest.raises(OutputFolderError, match="is not writable"):
            check_writable(target)


def test_a_run_that_fails_before_writing_leaves_no_claim(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(RuntimeError):
        with claim_output_dir(out, "export", {"masks": "a"}):
            raise RuntimeError("the masks did not load")
    assert not out.exists()
    with claim_output_dir(out, "export", {"masks": "b"}) as claim:   # a later, other run is not refused
        (out / "config.json").write_text("{}")
        claim.finish()
    assert read_record(out)["settings"] == {"masks": "b"} and (out / RECORD_NAME).is_file()


def test_a_killed_run_that_wrote_nothing_leaves_a_free_folder(tmp_path):
    """SIGKILL skips every cleanup: the lock and an unfinished record stay; the next run of any settings takes the
    folder (nothing there to lose) and the stale lock."""
    out = tmp_path / "out"
    code = ("import os; from hf_heuristic_core.run_folder import claim_output_dir; "
            f"claim_output_dir({str(out)!r}, 'prune', {{'seed': 1}}); os._exit(0)")
    subprocess.run([sys.executable, "-c", code], check=True)
    assert (out / LOCK_NAME).exists() and read_record(out)["finished"] is False
    with claim_output_dir(out, "prune", {"seed": 2}):
        pass


def test_nested_settings_are_compared_entry_by_entry_and_new_fields_are_not_differences():
    from hf_heuristic_core.run_folder import settings_differences
    old = {"model": "m", "pruning_config": {"init_mean": 10.0, "ablation": "mean"}}
    new = {"model": "m", "pruning_config": {"init_mean": 3.0, "ablation": "mean", "added_by_a_later_release": 1}}
    assert settings_differences(old, new) == ["pruning_config.init_mean: 10.0 -> 3.0"]
    assert settings_differences(old, old) == []
