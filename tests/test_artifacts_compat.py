"""Mask artifacts saved by the format-1 release (tests/fixtures/make_artifact_v1.py, commit 64ace62) still load."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from hf_heuristic_core import PrunableModel, PruningConfig, read_artifact
from tiny_models import make_batch, tiny_model

FIXTURES = Path(__file__).resolve().parent / "fixtures"
EXPECTED = load_file(str(FIXTURES / "expected_v1.safetensors"))


@pytest.mark.parametrize("model_type", ["bert", "gpt2"])
def test_format_1_artifact_loads_with_the_same_masks_means_and_outputs(model_type):
    folder = FIXTURES / f"artifact_v1_{model_type}"
    model = PrunableModel(tiny_model(model_type), PruningConfig()).load_masks(folder).eval()
    masks = model.get_masks()
    assert torch.equal(masks["heads"], EXPECTED[f"{model_type}.heads"])
    assert torch.equal(masks["mlps"], EXPECTED[f"{model_type}.mlps"])
    with torch.no_grad():
        logits = model(**make_batch(model_type)).logits
    torch.testing.assert_close(logits, EXPECTED[f"{model_type}.logits"], rtol=0, atol=1e-6)
    # A full model differs, so the comparison above checks the masks and means really apply.
    with torch.no_grad(), model.masks_disabled():
        assert not torch.allclose(model(**make_batch(model_type)).logits, logits, atol=1e-4)


@pytest.mark.parametrize("model_type", ["bert", "gpt2"])
def test_format_1_artifact_reads_without_a_model(model_type):
    artifact = read_artifact(FIXTURES / f"artifact_v1_{model_type}")
    assert torch.equal(artifact.heads, EXPECTED[f"{model_type}.heads"])
    assert torch.equal(artifact.mlps, EXPECTED[f"{model_type}.mlps"])
    assert artifact.config.model_type == model_type
    assert artifact.config.init_mean == 3.0
