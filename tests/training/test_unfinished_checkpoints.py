"""A checkpoint cut short by a kill while the Trainer saved it is refused by name, and 'last' skips it."""

from __future__ import annotations

import json

import pytest

from hf_heuristic_core.errors import PruningError
from hf_heuristic_core.training.fingerprint import FINGERPRINT_KEY, checkpoint_of_this_run

FINGERPRINT = {"settings": {"seed": 0}, "model": {"base_model": "tiny"}, "data": {"rows": 8}}


def _checkpoint(root, step: int, state_text: str):
    folder = root / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    (folder / "pruning_config.json").write_text(json.dumps({"extra": {FINGERPRINT_KEY: FINGERPRINT}}))
    (folder / "trainer_state.json").write_text(state_text)
    return folder


def test_last_skips_a_checkpoint_cut_short_while_saving(tmp_path):
    whole = _checkpoint(tmp_path, 4, json.dumps({"global_step": 4}))
    _checkpoint(tmp_path, 8, '{"global_step": 8, "log_hi')
    assert checkpoint_of_this_run(tmp_path, "last", FINGERPRINT) == str(whole)


def test_a_named_checkpoint_cut_short_is_refused_with_the_fix(tmp_path):
    _checkpoint(tmp_path, 4, json.dumps({"global_step": 4}))
    cut = _checkpoint(tmp_path, 8, "")
    with pytest.raises(PruningError, match="is unfinished: its trainer_state.json is cut short .*checkpoint before it"):
        checkpoint_of_this_run(tmp_path, str(cut), FINGERPRINT)


def test_last_with_only_unfinished_checkpoints_says_why(tmp_path):
    _checkpoint(tmp_path, 8, "{")
    with pytest.raises(PruningError, match="none of the 1 checkpoints .* checkpoint-8: its trainer_state.json is cut"):
        checkpoint_of_this_run(tmp_path, "last", FINGERPRINT)


def test_a_whole_checkpoint_of_another_run_is_still_refused(tmp_path):
    folder = _checkpoint(tmp_path, 4, json.dumps({"global_step": 4}))
    other = {**FINGERPRINT, "settings": {"seed": 1}}
    with pytest.raises(PruningError, match="checkpoint of another run: .*seed"):
        checkpoint_of_this_run(tmp_path, str(folder), other)
