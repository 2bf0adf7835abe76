"""Each relaxation owns a torch-free settings dataclass, held by `PruningConfig` as its own object; the defaults that
depend on the relaxation come from it, so no code outside `relaxations/` switches on a relaxation's name."""

from __future__ import annotations

import ast
import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest
import torch

from fresh_process import python_output
from name_switches import name_switches

import hf_heuristic_core
from hf_heuristic_core import PruningConfig
from hf_heuristic_core.relaxations import (
    RELAXATION_SETTINGS,
    RELAXATIONS,
    RelaxationSettings,
    get_relaxation,
    register_relaxation,
    relaxation_settings_class,
)
from hf_heuristic_core.relaxations.continuous_sparsification import ContinuousSparsificationSettings
from hf_heuristic_core.relaxations.gumbel_sigmoid import GumbelSigmoidSettings
from hf_heuristic_core.relaxations.hard_concrete import HardConcreteSettings
from hf_heuristic_core.training.objectives import DEFAULT_PENALTY_WEIGHTS

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
BUILT_IN = {"hard_concrete": HardConcreteSettings, "continuous_sparsification": ContinuousSparsificationSettings,
            "gumbel_sigmoid": GumbelSigmoidSettings}
PACKAGE = Path(hf_heuristic_core.__file__).parent


def test_every_registered_relaxation_has_its_settings_class():
    assert RELAXATION_SETTINGS.names() == RELAXATIONS.names()
    for name in RELAXATIONS.names():
        assert get_relaxation(name).settings_class is relaxation_settings_class(name)
        # The torch-side ClassVar and the torch-free one say the same rule.
        assert get_relaxation(name).paper_binarization == relaxation_settings_class(name).paper_binarization


def test_settings_and_config_import_no_torch():
    code = ("import sys; from hf_heuristic_core.config import PruningConfig; "
            "from hf_heuristic_core.relaxations.hard_concrete import HardConcreteSettings; "
            "c = PruningConfig(relaxation='gumbel_sigmoid', gumbel_tau=0.5); print(c.relaxation_settings); "
            "print('torch' in sys.modules)")
    out = python_output(code)
    assert out[0] == "GumbelSigmoidSettings(gumbel_init_prob=0.9, gumbel_tau=0.5)"
    assert out[1] == "False"


def test_a_config_holds_the_chosen_relaxation_settings_and_reads_them_flat():
    config_fields = {f.name for f in dataclasses.fields(PruningConfig)}
    for name, settings_class in BUILT_IN.items():
        config = PruningConfig(relaxation=name)
        assert config.relaxation_settings == settings_class()
        for f in dataclasses.fields(settings_class):
            assert f.name not in config_fields   # a method's setting is not a config field
            assert getattr(config, f.name) == f.default


@pytest.mark.parametrize(("relaxation", "expected"), [
    ("hard_concrete", HardConcreteSettings(temperature=0.5, init_mean=3.0)),
    ("continuous_sparsification", ContinuousSparsificationSettings(cs_init=-0.1, cs_beta_max=100.0)),
    ("gumbel_sigmoid", GumbelSigmoidSettings(gumbel_tau=0.5)),
])
def test_flat_keywords_reach_the_relaxation_settings_and_round_trip(tmp_path, relaxation, expected):
    config = PruningConfig(relaxation=expected)
    assert config.relaxation == relaxation and config.relaxation_settings == expected
    assert PruningConfig(relaxation=relaxation, relaxation_settings=expected.to_dict()) == config
    assert PruningConfig.from_dict(config.to_dict()) == config
    config.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "pruning_config.json").read_text())
    assert saved["relaxation"] == relaxation and saved["relaxation_settings"] == expected.to_dict()
    assert not set(expected.to_dict()) & set(saved)   # nested on disk, under the relaxation's name
    loaded = PruningConfig.from_pretrained(tmp_path)
    assert loaded == config and loaded.relaxation_settings == expected
    # The relaxation object is built from the same constants.
    built = get_relaxation(relaxation).from_config(loaded)
    assert built.settings_class.from_config(loaded) == expected


def test_a_config_saved_before_the_settings_split_loads():
    saved = json.loads((FIXTURES / "artifact_v1_bert" / "pruning_config.json").read_text())
    config = PruningConfig.from_pretrained(FIXTURES / "artifact_v1_bert")
    assert config.relaxation_settings == HardConcreteSettings(
        **{f.name: saved[f.name] for f in dataclasses.fields(HardConcreteSettings)})
    assert config.to_dict() == PruningConfig.from_dict(saved).to_dict()


def test_settings_validation_names_the_field():
    with pytest.raises(ValueError, match=r"PruningConfig: temperature must be > 0"):
        HardConcreteSettings(temperature=0.0).validate()
    with pytest.raises(ValueError, match=r"continuous sparsification needs cs_beta > 0"):
        PruningConfig(relaxation="continuous_sparsification", relaxation_settings={"cs_beta": 0.0})
    with pytest.raises(ValueError, match=r"gumbel_init_prob must be in \(0, 1\)"):
        GumbelSigmoidSettings(gumbel_init_prob=1.0).validate()


def test_paper_defaults_come_from_the_relaxation_settings():
    assert (PruningConfig().binarization, PruningConfig().mask_samples) == ("topk", 1)
    cs = PruningConfig(relaxation="continuous_sparsification")
    assert (cs.binarization, cs.mask_samples) == ("threshold", 1)
    gumbel = PruningConfig(relaxation="gumbel_sigmoid")
    assert (gumbel.binarization, gumbel.mask_samples) == ("threshold", 4)
    assert DEFAULT_PENALTY_WEIGHTS == {"continuous_sparsification": 1e-8, "gumbel_sigmoid": 1e-4}


@dataclass(kw_only=True)
class _ToySettings(RelaxationSettings):
    paper_binarization: ClassVar[str] = "threshold"
    default_mask_samples: ClassVar[int] = 2
    default_penalty_weight: ClassVar[float | None] = 0.25


def test_a_registered_relaxation_brings_its_defaults_without_edits_elsewhere():
    base = get_relaxation("gumbel_sigmoid")

    class Toy(base):
        name = "toy_settings"
        settings_class = _ToySettings
        penalty_per_example = False

    register_relaxation("toy_settings", Toy)
    try:
        config = PruningConfig(relaxation="toy_settings")
        assert (config.binarization, config.mask_samples) == ("threshold", 2)
        assert isinstance(config.relaxation_settings, _ToySettings)
        from hf_heuristic_core.training.objectives import sparsity_penalty

        class Holder:   # what sparsity_penalty reads of a PrunableModel
            relaxation = Toy()
            mask_logits = {"heads": torch.zeros(2, 3)}
        assert float(sparsity_penalty(Holder(), 2.0, batch_size=4)) == pytest.approx(2.0 * 0.0)
        Holder.mask_logits = {"heads": torch.ones(2, 3)}
        assert float(sparsity_penalty(Holder(), 2.0, batch_size=4)) == pytest.approx(2.0 * 6.0)   # not / 4
        Toy.penalty_per_example = True
        assert float(sparsity_penalty(Holder(), 2.0, batch_size=4)) == pytest.approx(2.0 * 6.0 / 4)
    finally:
        RELAXATIONS._entries.pop("toy_settings", None)
        RELAXATION_SETTINGS._entries.pop("toy_settings", None)


def test_no_name_switch_on_a_relaxation_outside_relaxations():
    names = set(RELAXATIONS.names())
    found = {}
    for path in PACKAGE.rglob("*.py"):
        if "relaxations" in path.relative_to(PACKAGE).parts or path.name == "_compat.py":
            continue
        lines = name_switches(ast.parse(path.read_text()), names)
        if lines:
            found[str(path.relative_to(PACKAGE))] = lines
    assert found == {}
    # The detector itself finds the switches the code used to have.
    assert name_switches(ast.parse('if relaxation.name == "gumbel_sigmoid": pass'), names) == [1]
    assert name_switches(ast.parse('x = r in ("continuous_sparsification", "gumbel_sigmoid")'),
                                     names) == [1]
    assert name_switches(ast.parse('W = {"gumbel_sigmoid": 1e-4}'), names) == [1]
