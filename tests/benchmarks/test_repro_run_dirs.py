"""The reproduction scripts' run directories and `--merge`: a resume with other settings must stop, not mix runs."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from benchmark_scripts import load_script




@pytest.fixture(scope="module")
def lepori():
    return load_script("reproductions/repro_lepori_subtasks")


@pytest.fixture(scope="module")
def csordas():
    return load_script("reproductions/repro_csordas_double_addition")


def _args(module, **changes) -> argparse.Namespace:
    values = {key: 1 for key in module.RUN_DIR_SETTINGS}
    values.update(changes)
    return argparse.Namespace(**values)


@pytest.mark.parametrize("name", ["lepori", "csordas"])
def test_run_dir_records_settings_then_refuses_others(name, request, tmp_path):
    module = request.getfixturevalue(name)
    module.check_run_dir(tmp_path, _args(module))
    assert json.loads((tmp_path / "run_settings.json").read_text()) == {k: 1 for k in module.RUN_DIR_SETTINGS}
    module.check_run_dir(tmp_path, _args(module))       # same settings: resumes
    key = module.RUN_DIR_SETTINGS[0]
    with pytest.raises(SystemExit, match=rf"other settings.*'{key}': \(1, 2\)"):
        module.check_run_dir(tmp_path, _args(module, **{key: 2}))


def test_run_dir_without_record_but_with_runs_is_refused(lepori, csordas, tmp_path):
    (tmp_path / "base0.pt").write_bytes(b"old")
    with pytest.raises(SystemExit, match="no run_settings.json"):
        lepori.check_run_dir(tmp_path, _args(lepori))
    (tmp_path / "seed0").mkdir()
    (tmp_path / "seed0" / "base.pt").write_bytes(b"old")
    with pytest.raises(SystemExit, match="no run_settings.json"):
        csordas.check_run_dir(tmp_path, _args(csordas))


def _lepori_output(path: Path, seed: int, subtask: str, d_sub: float, d_abl: float, **settings) -> str:
    mask = {"d_sub": d_sub, "d_abl": d_abl, "kept": 0.5, "sub_other_margin_share": 0.0,
            "abl_target_margin_share": 0.0, "paper_pattern": d_sub > 0 > d_abl, "evidence": True, "mask_ok": True,
            "chosen_without_passing_90": False}
    run = {"seed": seed, "base_ok": True, subtask: {"masks": [mask]}}
    path.write_text(json.dumps({"runs": [run], "seconds": 1.0, "settings": {"hidden": 32, **settings}}))
    return str(path)


def test_lepori_merge_joins_subroutines_of_one_base_seed(lepori, tmp_path):
    files = [_lepori_output(tmp_path / "a.json", 0, "sr1", 0.4, -0.2),
             _lepori_output(tmp_path / "b.json", 0, "sr2", 0.6, -0.4),
             _lepori_output(tmp_path / "c.json", 1, "sr1", 0.5, -0.3)]
    merged = lepori.merge_outputs(files)
    assert [run["seed"] for run in merged["runs"]] == [0, 1]
    assert set(merged["runs"][0]) >= {"sr1", "sr2"}
    summary = merged["summary"]
    assert summary["masks"] == 3 and summary["base_models"] == 2
    assert summary["d_sub"]["mean"] == pytest.approx(0.5)
    assert summary["d_abl"]["mean"] == pytest.approx(-0.3)


def test_lepori_merge_refuses_other_settings_and_duplicates(lepori, tmp_path):
    first = _lepori_output(tmp_path / "a.json", 0, "sr1", 0.4, -0.2)
    other = _lepori_output(tmp_path / "b.json", 1, "sr1", 0.4, -0.2, hidden=64)
    with pytest.raises(SystemExit, match="other settings"):
        lepori.merge_outputs([first, other])
    other_grid = _lepori_output(tmp_path / "d.json", 1, "sr1", 0.4, -0.2, mask_lambdas=[1e-5])
    with pytest.raises(SystemExit, match="other settings"):
        lepori.merge_outputs([first, other_grid])
    again = _lepori_output(tmp_path / "c.json", 0, "sr1", 0.5, -0.1)
    with pytest.raises(SystemExit, match="appears twice"):
        lepori.merge_outputs([first, again])


def test_csordas_merge_refuses_repeated_seed_and_other_settings(csordas, tmp_path):
    def output(path: Path, seed: int, **settings) -> str:
        path.write_text(json.dumps({"settings": {"hidden": "8", "mask_steps": 4, **settings},
                                    "runs": [{"seed": seed}], "seconds": 1.0}))
        return str(path)
    with pytest.raises(SystemExit, match="other settings"):
        csordas.merge_outputs([output(tmp_path / "a.json", 0), output(tmp_path / "b.json", 1, mask_steps=8)])
    with pytest.raises(SystemExit, match="appears twice"):
        csordas.merge_outputs([output(tmp_path / "a.json", 0), output(tmp_path / "c.json", 0)])
