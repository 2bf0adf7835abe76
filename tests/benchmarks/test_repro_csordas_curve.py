"""`repro_csordas_double_addition.py`'s inversion curve: when it saturates, and that its checkpoint spacing
(`--eval_every`) is a recorded run-directory setting, so a resume with another spacing stops instead of mixing."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from types import ModuleType

import pytest
from benchmark_scripts import load_script

STEPS = [1000, 2000, 3000, 4000, 5000, 6000]



@pytest.fixture(scope="module")
def csordas() -> ModuleType:
    return load_script("reproductions/repro_csordas_double_addition")


def test_still_rising_curve_is_not_saturated(csordas: ModuleType) -> None:
    """The old rule (first step within 0.02 of the last value) called any curve saturated at its last step at the
    latest, also one that gains 0.05 per checkpoint to the end."""
    rising = [0.50, 0.60, 0.70, 0.80, 0.85, 0.90]
    assert csordas.inversion_saturates_at_step(STEPS, rising) is None
    assert csordas.inversion_saturates_at_step(STEPS, [0.90, 0.91, 0.92, 0.93, 0.94, 0.97]) is None
    assert csordas.inversion_saturates_at_step([1000], [0.95]) is None   # one checkpoint shows no stop


def test_plateau_reports_its_first_step(csordas: ModuleType) -> None:
    """Moves within the tolerance after the climb (up or down) are the plateau; its first step is reported."""
    plateau = [0.40, 0.70, 0.90, 0.91, 0.905, 0.915]
    assert csordas.inversion_saturates_at_step(STEPS, plateau) == 3000
    assert csordas.inversion_saturates_at_step(STEPS, [0.9] * 6) == 1000
    falling = [0.50, 0.95, 0.90, 0.85, 0.84, 0.84]     # a peak then a decline: nothing rises after the peak
    assert csordas.inversion_saturates_at_step(STEPS, falling) == 2000
    # the tolerance bounds the whole climb after the reported step, not only each step's rise
    creeping = [0.80, 0.815, 0.83, 0.845, 0.86, 0.875]
    assert csordas.inversion_saturates_at_step(STEPS, creeping) == 5000


def test_rise_dip_rise(csordas: ModuleType) -> None:
    """A climb back from a dip is a rise: the first peak is not the saturation step when the curve climbs again
    by more than the tolerance (the old rule reported 2000 for both curves)."""
    again = [0.30, 0.90, 0.60, 0.92, 0.93, 0.93]
    assert csordas.inversion_saturates_at_step(STEPS, again) == 4000
    still_climbing = [0.30, 0.90, 0.60, 0.70, 0.80, 0.90]
    assert csordas.inversion_saturates_at_step(STEPS, still_climbing) is None
    shallow_dip = [0.30, 0.90, 0.89, 0.905, 0.90, 0.90]   # dip and recovery within the tolerance
    assert csordas.inversion_saturates_at_step(STEPS, shallow_dip) == 2000


def test_summary_reports_a_still_rising_mean_curve_as_not_saturated(csordas: ModuleType,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """`summarize` (what --output records and print_summary prints) uses the rule on the mean over seeds."""
    def run(seed: int, inversion: list[float]) -> dict:
        curve = [{"step": s, "M": [1.0, 0.0], "NOT_M": [0.2, v], "kept": 0.1} for s, v in zip(STEPS, inversion)]
        return {"seed": seed, "base": [1.0, 1.0], "M_pair1": [1.0, 0.01], "NOT M_pair1": [0.2, inversion[-1]],
                "M_pair2": [0.01, 1.0], "NOT M_pair2": [0.9, 0.2], "kept_pair1": 0.1, "kept_pair2": 0.1,
                "iou_per_layer": {"0.weight": 0.0}, "iou_per_layer_by_step": {}, "curve_pair1": curve,
                "curve_pair2": curve}
    rising = csordas.summarize([run(0, [0.5, 0.6, 0.7, 0.8, 0.85, 0.9]), run(1, [0.5, 0.6, 0.7, 0.8, 0.85, 0.92])])
    assert rising["inversion_saturates_at_step"] is None
    csordas.print_summary(rising)
    assert "not saturated" in capsys.readouterr().out
    flat = csordas.summarize([run(0, [0.5, 0.9, 0.9, 0.9, 0.9, 0.9])])
    assert flat["inversion_saturates_at_step"] == 2000
    assert json.loads(json.dumps(rising))["inversion_saturates_at_step"] is None     # --output stays valid JSON


def _settings(csordas: ModuleType, **changes) -> argparse.Namespace:
    """The script's defaults (as `main()` parses them) with `changes`."""
    values = {"hidden": "400,400,128", "base_steps": 20000, "alpha": 4e-4, "mask_lr": 1e-2, "mask_init": 2.0,
              "mask_samples": 4, "grad_clip": 1.0, "batch": 128, "train_size": 1_000_000, "valid_size": 10_000,
              "eval_every": 1000, "mask_steps": 20000, "clip_scope": "all", "experiment": "double_addition"}
    values.update(changes)
    return argparse.Namespace(**values)


def test_eval_every_is_recorded_and_checked_on_resume(csordas: ModuleType, tmp_path: Path) -> None:
    """The curve's steps (and the masks_*_step*.pt files) follow --eval_every; a run directory resumed with another
    one got a curve of mixed spacing whose points summarize() averaged across seeds by index."""
    assert "eval_every" in csordas.RUN_DIR_SETTINGS
    csordas.check_run_dir(tmp_path, _settings(csordas))
    assert json.loads((tmp_path / "run_settings.json").read_text())["eval_every"] == 1000
    csordas.check_run_dir(tmp_path, _settings(csordas, mask_steps=30000))    # mask_steps may still grow
    with pytest.raises(SystemExit, match=r"other settings.*'eval_every': \(1000, 500\)"):
        csordas.check_run_dir(tmp_path, _settings(csordas, eval_every=500))


def test_record_without_eval_every_is_refused(csordas: ModuleType, tmp_path: Path) -> None:
    """A record written before eval_every was recorded does not say which spacing its curves have."""
    old = {k: v for k, v in vars(_settings(csordas)).items() if k in csordas.RUN_DIR_SETTINGS and k != "eval_every"}
    (tmp_path / "run_settings.json").write_text(json.dumps(old))
    with pytest.raises(SystemExit, match=r"'eval_every': \(None, 1000\)"):
        csordas.check_run_dir(tmp_path, _settings(csordas))


def test_merge_still_refuses_another_eval_every(csordas: ModuleType, tmp_path: Path) -> None:
    """merge_outputs compared eval_every before; with it now among RUN_DIR_SETTINGS it must still be compared."""
    def output(path: Path, seed: int, **changes) -> str:
        path.write_text(json.dumps({"settings": vars(_settings(csordas, **changes)), "runs": [{"seed": seed}],
                                    "seconds": 1.0}))
        return str(path)
    with pytest.raises(SystemExit, match="other settings"):
        csordas.merge_outputs([output(tmp_path / "a.json", 0), output(tmp_path / "b.json", 1, eval_every=500)])
