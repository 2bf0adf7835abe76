"""Output folders: claimed before any work, one writer at a time, refused when they hold another run's or another
command's files or the run's own inputs, and never emptied."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import socket
import subprocess
import sys

import pytest

from hf_heuristic_core.run_folder import (
    LOCK_NAME,
    RECORD_NAME,
    FolderLock,
    OutputFolderError,
    check_writable,
    claim_output_dir,
    read_record,
)


def _locked(path) -> bool:
    """Whether another process holds an flock on `path`, asked of the kernel directly (not through filelock)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)   # closing drops the probe's own flock, if it got one
    return False


def test_a_new_folder_is_locked_while_claimed_and_recorded(tmp_path):
    out = tmp_path / "out"
    with claim_output_dir(out, "prune", {"seed": 1}) as claim:
        assert _locked(out / LOCK_NAME)
        assert read_record(out)["finished"] is False
        (out / "masks.safetensors").write_text("x")
        claim.finish(summary={"units_kept": 3})
    assert not (out / LOCK_NAME).exists()   # the run that created the lock file removes it
    record = read_record(out)
    assert record["kind"] == "prune" and record["settings"] == {"seed": 1} and record["finished"] is True
    assert record["summary"] == {"units_kept": 3}


def test_a_second_run_into_a_locked_folder_refuses(tmp_path):
    out = tmp_path / "out"
    with claim_output_dir(out, "prune", {"seed": 1}):
        with pytest.raises(OutputFolderError, match=rf"{out} is being written by another run \(it holds the lock "
                                                    rf"{out / LOCK_NAME}\); wait for it to finish or choose another "
                                                    r"output folder\. .*even if it is killed"):
            claim_output_dir(out, "prune", {"seed": 1})
        with pytest.raises(OutputFolderError, match="being written by another run"):
            FolderLock(out, "effective-size")
        assert _locked(out / LOCK_NAME)   # the refused runs left the holder's lock alone
    with claim_output_dir(out, "prune", {"seed": 1}):   # released: the next run takes it
        pass


def test_the_lock_of_a_killed_run_is_released_by_the_operating_system(tmp_path):
    """A process that holds the claim is SIGKILLed (no cleanup runs): the lock, refused while it lived, is free
    once it is gone, with no stale-lock detection of ours in between."""
    out = tmp_path / "out"
    code = ("import sys; from hf_heuristic_core.run_folder import claim_output_dir; "
            f"claim = claim_output_dir({str(out)!r}, 'prune', {{'seed': 1}}); print('held', flush=True); "
            "sys.stdin.read()")
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "held\n"
        with pytest.raises(OutputFolderError, match="being written by another run"):
            claim_output_dir(out, "prune", {"seed": 1})
    finally:
        child.kill()
        child.wait()
    assert child.returncode == -signal.SIGKILL
    assert (out / LOCK_NAME).exists() and not _locked(out / LOCK_NAME)
    with claim_output_dir(out, "prune", {"seed": 1}):   # the same run resumes: its record is unfinished and empty
        assert _locked(out / LOCK_NAME)


@pytest.mark.parametrize("pid", ["gone", "alive"])
def test_a_lock_file_of_an_earlier_version_neither_blocks_nor_confuses(tmp_path, pid):
    """Earlier versions wrote the holder's pid, host and start time into the same file and refused while that pid
    lived. Its text is ignored now: a leftover file, even one naming this very (live) process, takes no part."""
    out = tmp_path / "out"
    out.mkdir()
    if pid == "gone":
        pid = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                                 text=True, check=True).stdout)
    else:
        pid = os.getpid()
    (out / LOCK_NAME).write_text(json.dumps({"pid": pid, "host": socket.gethostname(), "kind": "prune",
                                             "process_start": "1", "since": "2026-01-01 00:00:00"}))
    with claim_output_dir(out, "prune", {}) as claim:
        assert _locked(out / LOCK_NAME)
        with pytest.raises(OutputFolderError, match="being written by another run"):
            claim_output_dir(out, "prune", {})
        (out / "masks.safetensors").write_text("x")
        claim.finish()
    assert not _locked(out / LOCK_NAME)
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
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == [RECORD_NAME, "report.md"]   # no lock file left
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
    """SIGKILL skips every cleanup: the lock file (unlocked by the operating system) and an unfinished record stay;
    the next run of any settings takes the folder (nothing there to lose) and the lock."""
    out = tmp_path / "out"
    code = ("import os; from hf_heuristic_core.run_folder import claim_output_dir; "
            f"claim_output_dir({str(out)!r}, 'prune', {{'seed': 1}}); os._exit(0)")
    subprocess.run([sys.executable, "-c", code], check=True)
    assert (out / LOCK_NAME).exists() and read_record(out)["finished"] is False
    with claim_output_dir(out, "prune", {"seed": 2}):
        assert _locked(out / LOCK_NAME)


def test_nested_settings_are_compared_entry_by_entry_and_new_fields_are_not_differences():
    from hf_heuristic_core.run_folder import settings_differences
    old = {"model": "m", "pruning_config": {"init_mean": 10.0, "ablation": "mean"}}
    new = {"model": "m", "pruning_config": {"init_mean": 3.0, "ablation": "mean", "added_by_a_later_release": 1}}
    assert settings_differences(old, new) == ["pruning_config.init_mean: 10.0 -> 3.0"]
    assert settings_differences(old, old) == []


def test_a_flat_config_record_of_an_earlier_release_is_compared_with_the_nested_one():
    """Records (run folders, checkpoint fingerprints) of the flat-config releases hold the methods' settings at the
    config's top level; today's nest them. A changed setting is still found, whichever side is older."""
    from hf_heuristic_core import PruningConfig
    from hf_heuristic_core.config import METHOD_KINDS
    from hf_heuristic_core.run_folder import METHOD_SETTINGS_KEYS, settings_differences
    # run_folder sits below config (it cannot import it): its copy of the key names must stay the config's.
    assert METHOD_SETTINGS_KEYS == tuple(kind.settings_field for kind in METHOD_KINDS)
    flat = {"pruning_config": {"ablation": "mean", "init_mean": 10.0, "prune_mlps": True, "cs_beta": 1.0}}
    nested = {"pruning_config": PruningConfig(relaxation_settings={"init_mean": 3.0}).to_dict()}
    assert settings_differences(flat, nested) == ["pruning_config.init_mean: 10.0 -> 3.0"]
    assert settings_differences(nested, flat) == ["pruning_config.init_mean: 3.0 -> 10.0"]
    same = {"pruning_config": PruningConfig().to_dict()}
    assert settings_differences(flat, same) == []


def test_a_slim_export_swapped_into_a_claimed_folder_keeps_it_locked(tmp_path):
    """`save_slim` builds the new folder beside the claimed one and swaps it in, carrying the hidden files across:
    the lock file must be the same file (a hard link), as a copy would be a new, unlocked one and let a second run
    in while the export is still running."""
    import torch
    from tiny_models import tiny_model

    from hf_heuristic_core import PrunableModel, PruningConfig, save_slim
    prunable = PrunableModel(tiny_model("bert"), PruningConfig(ablation="zero"))
    prunable.set_masks(heads=torch.tensor([[1., 0, 1, 1], [0, 1, 0, 0]]), mlps=torch.tensor([1., 0]))
    slim = prunable.eval().export_slim()
    out = tmp_path / "slim"
    with claim_output_dir(out, "export", {"masks": "m"}) as claim:
        save_slim(slim, out)   # the claimed folder holds only the lock and the record: it is swapped whole
        assert (out / "config.json").is_file() and read_record(out)["kind"] == "export"
        assert _locked(out / LOCK_NAME)
        with pytest.raises(OutputFolderError, match="being written by another run"):
            claim_output_dir(out, "export", {"masks": "m"})
        claim.finish()
    assert not (out / LOCK_NAME).exists() and read_record(out)["finished"] is True
