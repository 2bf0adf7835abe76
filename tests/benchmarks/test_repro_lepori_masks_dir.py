"""`repro_lepori_subtasks.py --masks_dir`: the documented route into `hf-heuristic-core analyze` must write a folder
that `analyze` reads (it crashed with a NameError before writing anything)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from types import ModuleType

import pytest

from benchmark_scripts import load_script




@pytest.fixture(scope="module")
def lepori() -> ModuleType:
    return load_script("reproductions/repro_lepori_subtasks")


def _tiny_args(masks_dir: Path) -> argparse.Namespace:
    """The script's settings after `main()` parses them, shrunk so a base model, both searches (one grid point, one
    mask step each) and the evaluation take about a second."""
    return argparse.Namespace(
        hidden=8, layers=1, heads=2, words_per_class=4, train_examples=64, validation_examples=16,
        test_examples=16, base_lr=1e-3, base_epochs=1, mask_epochs=1, mask_epoch_examples=64, inits=[0.05],
        mask_lrs=[0.01], mask_lambdas=[1e-5], mask_seeds=[0], subtasks=["sr1", "sr2"], random_controls=1,
        device="cpu", masks_dir=str(masks_dir), first_seed=0,
        random_init_control=False)   # the control has its own tests (test_repro_lepori_control.py)


def test_masks_dir_is_written_and_analyze_reads_it(lepori: ModuleType, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Drives `run_seed` (which calls `write_masks_folder` for the first seed) and then `analyze` on the folder.
    A tiny base model trained for one epoch is far below the 90% compositional accuracy that gates the masks
    folder (his fig. 5 drop rule), so every score reads 1.0 here: this checks the plumbing, not the numbers."""
    from hf_heuristic_core.analysis.report import analyze
    from hf_heuristic_core.data.compositional import AgreementVocabulary

    monkeypatch.setattr(lepori, "scores", lambda model, data, batch=250: (1.0, 1.0))
    run_dir, masks_dir = tmp_path / "run", tmp_path / "masks"
    run_dir.mkdir()
    args = _tiny_args(masks_dir)
    out = lepori.run_seed(0, args, AgreementVocabulary(words_per_class=args.words_per_class), run_dir)

    assert out["base_ok"] and set(out) >= {"sr1", "sr2"}
    declaration = json.loads((masks_dir / "subtasks.json").read_text())
    assert declaration["masks"] == {"sr1": "sr1", "sr2": "sr2"}
    assert set(declaration["accuracy"]) == {"full", "sr1", "sr2", "NOT sr1", "NOT sr2"}
    report = analyze(masks_dir, output_dir=str(tmp_path / "report"))
    section = report["subtasks"]
    assert section["names"] == ["sr1", "sr2"] and section["granularity"] == "weight"
    for subtask in ("sr1", "sr2"):    # the saved masks are the chosen search masks, as the docstring says
        chosen = out[subtask]["chosen"]
        saved = lepori.torch.load(lepori.mask_file(run_dir, 0, subtask, chosen["init"], chosen["lr"],
                                                   chosen["lambda"]), weights_only=False)
        assert section["kept"][subtask] == pytest.approx(lepori.kept_fraction(saved))
    assert "performance_drop" in section
    assert (tmp_path / "report" / "report.md").is_file()
