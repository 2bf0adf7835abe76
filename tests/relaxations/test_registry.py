"""Relaxations plug in by name like granularities; a granularity may restrict the relaxations it supports."""

from __future__ import annotations

import json

import pytest
import torch

from hf_heuristic_core import PrunableModel, PruningConfig, PruningError
from hf_heuristic_core.granularity.unit import UnitGranularity
from hf_heuristic_core.relaxations import RELAXATION_SETTINGS, RELAXATIONS, get_relaxation, register_relaxation
from hf_heuristic_core.relaxations.base import Relaxation
from hf_heuristic_core.relaxations.hard_concrete import HardConcrete
from tiny_models import LAYERS, HEADS, make_batch, tiny_model


class Bernoulli(Relaxation):
    """A toy relaxation: keep probability sigmoid(logit), sampled hard (no gradient), thresholded at 0."""

    name = "toy_bernoulli"

    @classmethod
    def from_config(cls, config):
        return cls()

    def init_logits(self, shape, generator=None):
        return torch.full(shape, 2.0)

    def sample(self, logits, generator=None):
        return (torch.rand(logits.shape, generator=generator) < torch.sigmoid(logits)).float()

    def deterministic(self, logits):
        return torch.sigmoid(logits)

    def prob_keep(self, logits):
        return torch.sigmoid(logits)

    def threshold_masks(self, logits, threshold):
        return (logits.detach().cpu() > 0).float()


@pytest.fixture
def bernoulli():
    register_relaxation("toy_bernoulli", Bernoulli)
    try:
        yield
    finally:
        RELAXATIONS._entries.pop("toy_bernoulli", None)
        RELAXATION_SETTINGS._entries.pop("toy_bernoulli", None)


def test_hard_concrete_is_the_default_and_found_by_name():
    assert PruningConfig().relaxation == "hard_concrete"
    assert get_relaxation("hard_concrete") is HardConcrete
    with pytest.raises(ValueError, match=r"relaxation='gumbel' is not one of \[.*'hard_concrete'"):
        PruningConfig(relaxation="gumbel")


def test_a_registered_relaxation_draws_the_masks(bernoulli):
    pm = PrunableModel(tiny_model("bert"), PruningConfig(relaxation="toy_bernoulli", ablation="zero",
                                                         binarization="threshold"))
    assert torch.equal(pm.mask_logits["heads"].detach(), torch.full((LAYERS, HEADS), 2.0))
    with torch.no_grad():
        pm.mask_logits["heads"][0, :2] = -3.0
    expected = torch.sigmoid(torch.tensor(2.0)) * (LAYERS * HEADS - 2 + LAYERS) + 2 * torch.sigmoid(torch.tensor(-3.0))
    assert float(pm.expected_sparsity().detach()) == pytest.approx(1 - float(expected) / (LAYERS * HEADS + LAYERS))
    masks = pm.eval().get_masks()   # the relaxation's own rule: logits > 0
    assert masks["heads"][0, :2].tolist() == [0.0, 0.0] and int(masks["heads"].sum()) == LAYERS * HEADS - 2
    pm(**make_batch("bert"))


def test_a_granularity_can_refuse_a_relaxation(bernoulli, monkeypatch):
    monkeypatch.setattr(UnitGranularity, "relaxations", ("hard_concrete",))
    with pytest.raises(PruningError, match=r"'unit' granularity does not support the 'toy_bernoulli' relaxation; "
                                           r"choose one of \['hard_concrete'\]"):
        PrunableModel(tiny_model("bert"), PruningConfig(relaxation="toy_bernoulli", ablation="zero"))


def test_unregister_removes_an_added_relaxation_and_refuses_a_built_in(tmp_path):
    from hf_heuristic_core.granularity import GRANULARITIES, unregister_granularity
    from hf_heuristic_core.relaxations import unregister_relaxation
    register_relaxation("toy_removed", HardConcrete)
    assert "toy_removed" in RELAXATIONS and "toy_removed" in RELAXATION_SETTINGS
    unregister_relaxation("toy_removed")
    assert "toy_removed" not in RELAXATIONS and "toy_removed" not in RELAXATION_SETTINGS
    with pytest.raises(ValueError, match="'hard_concrete' is a built-in relaxation"):
        unregister_relaxation("hard_concrete")
    with pytest.raises(ValueError, match="'unit' is a built-in granularity"):
        unregister_granularity("unit")
    assert "hard_concrete" in RELAXATIONS and "unit" in GRANULARITIES


def test_an_artifact_of_an_unregistered_relaxation_names_it_and_the_fix(tmp_path):
    from hf_heuristic_core import read_artifact
    from hf_heuristic_core.errors import ArtifactError
    (tmp_path / "pruning_config.json").write_text(json.dumps({"relaxation": "plugin_relaxation"}))
    with pytest.raises(ArtifactError, match=r"names the relaxation 'plugin_relaxation', which is not registered.*"
                                            r"register_relaxation\('plugin_relaxation'"):
        read_artifact(tmp_path)
