"""`PruningConfig` holds each chosen method's settings as their own object, saved under the method's name; the flat
keywords and files of earlier releases keep working; a method registered from outside gets its settings, its saved
form and its `prune` flags without an edit inside the package.

References: the fixtures `artifact_flat_*` were written by the last release with a flat `pruning_config.json`
(`fixtures/make_flat_config_artifacts.py`, commit 5501851), with the masked model's logits it computed.
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import hf_heuristic_core.config as config_module
from hf_heuristic_core import PrunableModel, PruningConfig, read_artifact
from hf_heuristic_core.granularity.neuron import NeuronSettings
from hf_heuristic_core.granularity.unit import UnitSettings
from hf_heuristic_core.granularity.weight import WeightSettings
from hf_heuristic_core.relaxations import RelaxationSettings, get_relaxation, register_relaxation, unregister_relaxation
from hf_heuristic_core.relaxations.continuous_sparsification import ContinuousSparsificationSettings
from hf_heuristic_core.relaxations.gumbel_sigmoid import GumbelSigmoidSettings
from hf_heuristic_core.relaxations.hard_concrete import HardConcreteSettings

from tiny_models import one_torch_thread  # noqa: F401  (fixture)
from tiny_models import make_batch, tiny_model

pytestmark = pytest.mark.usefixtures("one_torch_thread")

FIXTURES = Path(__file__).resolve().parent / "fixtures"
# What the last release was given for each fixture (fixtures/make_flat_config_artifacts.py).
FLAT_CASES = {
    "unit_hard_concrete": ("bert", "unit", UnitSettings(prune_mlps=False), "hard_concrete",
                           HardConcreteSettings(init_mean=3.0, temperature=0.5)),
    "neuron_gumbel": ("gpt2", "neuron", NeuronSettings(), "gumbel_sigmoid",
                      GumbelSigmoidSettings(gumbel_init_prob=0.8, gumbel_tau=0.5)),
    "weight_cs": ("bert", "weight", WeightSettings(target_modules=["query", "value"], layers_to_transform=[1],
                                                   mask_bias=True),
                  "continuous_sparsification", ContinuousSparsificationSettings(cs_init=0.5, cs_beta=2.0)),
}


@pytest.mark.parametrize("name", sorted(FLAT_CASES))
def test_an_artifact_of_the_last_flat_release_loads_with_its_settings_masks_and_outputs(name):
    model_type, granularity, granularity_settings, relaxation, relaxation_settings = FLAT_CASES[name]
    folder = FIXTURES / f"artifact_flat_{name}"
    saved = json.loads((folder / "pruning_config.json").read_text())
    assert "relaxation_settings" not in saved and "init_mean" in saved   # really the flat form
    artifact = read_artifact(folder)
    config = artifact.config
    assert (config.granularity, config.relaxation) == (granularity, relaxation)
    assert config.granularity_settings == granularity_settings
    assert config.relaxation_settings == relaxation_settings
    # Wrapped again from the artifact alone, the masked model computes what the last release computed.
    model = PrunableModel(tiny_model(model_type), config.settings_only()).load_masks(folder).eval()
    with torch.no_grad():
        logits = model(**make_batch(model_type)).logits
    expected = load_file(str(FIXTURES / "expected_flat.safetensors"))[f"{name}.logits"]
    torch.testing.assert_close(logits, expected, rtol=0, atol=1e-6)
    with torch.no_grad(), model.masks_disabled():   # the masks really apply
        assert not torch.allclose(model(**make_batch(model_type)).logits, logits, atol=1e-4)
    # Saved again, it is in today's form, and it reads back equal.
    again = PruningConfig.from_dict(config.to_dict())
    assert again == config and again.to_dict()["relaxation_settings"] == relaxation_settings.to_dict()


def test_the_saved_form_is_nested_under_each_method_name(tmp_path):
    config = PruningConfig(granularity=WeightSettings(target_modules=["query"]),
                           relaxation=GumbelSigmoidSettings(gumbel_tau=0.5))
    config.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "pruning_config.json").read_text())
    assert saved["granularity"] == "weight" and saved["relaxation"] == "gumbel_sigmoid"
    assert saved["granularity_settings"] == {"target_modules": ["query"], "layers_to_transform": None,
                                             "mask_bias": False, "logits_dtype": "float32"}
    assert saved["relaxation_settings"] == {"gumbel_init_prob": 0.9, "gumbel_tau": 0.5}
    # No method's setting sits at the top level any more.
    every_setting = {f.name for cls in (UnitSettings, WeightSettings, HardConcreteSettings,
                                        ContinuousSparsificationSettings, GumbelSigmoidSettings)
                     for f in dataclasses.fields(cls)}
    assert not every_setting & set(saved)
    assert PruningConfig.from_pretrained(tmp_path) == config


def test_the_three_ways_to_give_settings_agree_and_flat_keywords_warn_once(monkeypatch):
    monkeypatch.setattr(config_module, "_flat_keywords_warned", False)
    by_object = PruningConfig(relaxation=HardConcreteSettings(init_mean=3.0),
                              granularity=UnitSettings(prune_mlps=False))
    by_dict = PruningConfig(relaxation_settings={"init_mean": 3.0}, granularity_settings={"prune_mlps": False})
    with pytest.warns(FutureWarning, match=r"pass relaxation_settings=\{'init_mean': 3.0\}, "
                                           r"granularity_settings=\{'prune_mlps': False\}"):
        flat = PruningConfig(init_mean=3.0, prune_mlps=False)
    assert by_object == by_dict == flat
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # once: the second flat call is silent
        assert PruningConfig(init_mean=3.0, prune_mlps=False) == flat
        assert PruningConfig(relaxation="continuous_sparsification", cs_init=0.5).relaxation_settings == \
            ContinuousSparsificationSettings(cs_init=0.5)
    # The new forms never warn.
    monkeypatch.setattr(config_module, "_flat_keywords_warned", False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        PruningConfig(relaxation=HardConcreteSettings(init_mean=3.0))
        PruningConfig(granularity="weight", granularity_settings={"mask_bias": True})


def test_flat_reads_and_writes_reach_the_chosen_settings():
    config = PruningConfig(relaxation=HardConcreteSettings(init_mean=3.0))
    assert config.init_mean == 3.0 and config.prune_heads is True
    config.init_mean = 4.0
    assert config.relaxation_settings.init_mean == 4.0
    with pytest.raises(AttributeError, match=r"'cs_beta': it is a setting of the 'continuous_sparsification' "
                                             r"relaxation, and this config's relaxation is 'hard_concrete'"):
        config.cs_beta
    with pytest.raises(AttributeError, match=r"cannot set 'mask_bias': it is a setting of the 'weight' granularity"):
        config.mask_bias = True
    with pytest.raises(AttributeError, match=r"cannot set 'not_a_field': it is no field"):
        config.not_a_field = 1
    assert config.with_settings(init_std=0.5).relaxation_settings == HardConcreteSettings(init_mean=4.0, init_std=0.5)
    assert config.relaxation_settings.init_std == 0.01   # with_settings returns a copy
    with pytest.raises(ValueError, match=r"gumbel_tau=0.5 is a setting of the 'gumbel_sigmoid' relaxation"):
        config.with_settings(gumbel_tau=0.5)


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    # A method's setting given for another method would change nothing: refused, naming the method that reads it.
    ({"relaxation": "gumbel_sigmoid", "init_mean": 3.0}, ValueError,
     r"init_mean=3.0 is a setting of the 'hard_concrete' relaxation, and this config's relaxation is "
     r"'gumbel_sigmoid', which does not read it; drop it or choose relaxation='hard_concrete'"),
    ({"target_modules": ["query"]}, ValueError, r"choose granularity='weight'"),
    ({"not_a_setting": 1}, TypeError, r"unexpected keyword argument 'not_a_setting'"),
    ({"relaxation": HardConcreteSettings(), "relaxation_settings": {"init_mean": 3.0}}, ValueError,
     r"relaxation was given as a settings object and relaxation_settings too"),
    ({"relaxation": "gumbel_sigmoid", "relaxation_settings": HardConcreteSettings()}, ValueError,
     r"relaxation_settings is a HardConcreteSettings, but the 'gumbel_sigmoid' relaxation reads GumbelSigmoidSettings"),
    ({"relaxation_settings": {"init_mean": 3.0, "tau": 1.0}}, ValueError,
     r"the 'hard_concrete' relaxation has no setting\(s\) \['tau'\]; its settings are \['init_mean'"),
    ({"relaxation": 3}, TypeError, r"relaxation takes a registered name or a RelaxationSettings object"),
    ({"relaxation": "hard_concret"}, ValueError, r"relaxation='hard_concret' is not one of"),
    ({"granularity": WeightSettings(), "uniform_layers": True}, ValueError,
     r"'weight' masks have no per-layer unit count"),
])
def test_bad_settings_are_refused_with_the_fix(kwargs, error, match):
    with pytest.raises(error, match=match):
        PruningConfig(**kwargs)


def test_a_flat_file_drops_only_the_unchosen_methods_fields():
    flat = json.loads((FIXTURES / "artifact_flat_neuron_gumbel" / "pruning_config.json").read_text())
    flat["init_mean"] = 5.0   # a hard-concrete constant the gumbel run never read
    config = PruningConfig.from_dict(flat)
    assert config.relaxation_settings == GumbelSigmoidSettings(gumbel_init_prob=0.8, gumbel_tau=0.5)
    with pytest.raises(ValueError, match=r"unknown field\(s\) \['bogus'\]"):
        PruningConfig.from_dict({**flat, "bogus": 1})


@dataclass(kw_only=True)
class _ScaledSettings(RelaxationSettings):
    """A relaxation defined in this test: hard concrete whose logits are scaled before sampling."""

    logit_scale: float = field(default=1.0, metadata={"help": "Scale of the mask logits (toy)."})

    def validate(self) -> None:
        if not self.logit_scale > 0:
            raise ValueError(f"PruningConfig: logit_scale must be > 0, got {self.logit_scale}.")


def _scaled_relaxation():
    base = get_relaxation("hard_concrete")

    class Scaled(base):
        settings_class = _ScaledSettings

        def __init__(self, scale: float) -> None:
            super().__init__(2.0 / 3.0, -0.1, 1.1, 1e-6, 10.0, 0.01)
            self.scale = scale

        @classmethod
        def from_config(cls, config):
            return cls(config.relaxation_settings.logit_scale)

        def deterministic(self, logits):
            return super().deterministic(logits * self.scale)

    return Scaled


def test_a_relaxation_registered_from_outside_gets_its_settings_saved_form_and_flags(tmp_path):
    register_relaxation("scaled_toy", _scaled_relaxation())
    try:
        config = PruningConfig(relaxation=_ScaledSettings(logit_scale=0.25))
        assert config.relaxation == "scaled_toy" and config.logit_scale == 0.25
        with pytest.raises(ValueError, match="logit_scale must be > 0"):
            PruningConfig(relaxation="scaled_toy", relaxation_settings={"logit_scale": 0.0})
        # Wrapped, saved and read back: the settings travel in the artifact under the relaxation's name.
        model = PrunableModel(tiny_model("bert"), config)
        assert model.relaxation.scale == 0.25
        model.save_pretrained(tmp_path / "masks")
        saved = json.loads((tmp_path / "masks" / "pruning_config.json").read_text())
        assert saved["relaxation"] == "scaled_toy" and saved["relaxation_settings"] == {"logit_scale": 0.25}
        assert read_artifact(tmp_path / "masks").config.relaxation_settings == _ScaledSettings(logit_scale=0.25)
        # Its setting is a prune flag, refused for another relaxation.
        from hf_heuristic_core.cli.prune import parse_prune_arguments, pruning_config_from_flags
        from hf_heuristic_core.errors import UsageError
        (tmp_path / "model").mkdir()
        (tmp_path / "model" / "config.json").write_text("{}")
        required = ["--model", str(tmp_path / "model"), "--dataset", "d.jsonl", "--output_dir", str(tmp_path / "o")]
        script, _ = parse_prune_arguments([*required, "--relaxation", "scaled_toy", "--logit_scale", "0.5"])
        assert pruning_config_from_flags(script).relaxation_settings == _ScaledSettings(logit_scale=0.5)
        with pytest.raises(UsageError, match=r"--logit_scale is a setting of _ScaledSettings"):
            parse_prune_arguments([*required, "--logit_scale", "0.5"])
    finally:
        unregister_relaxation("scaled_toy")
    # Unregistered, an artifact naming it is refused with the fix (not read as another relaxation).
    with pytest.raises(ValueError, match=r"relaxation='scaled_toy' is not one of"):
        PruningConfig.from_pretrained(tmp_path / "masks")


def test_a_settings_class_two_methods_share_cannot_name_one():
    base = get_relaxation("hard_concrete")
    register_relaxation("plain_a", type("PlainA", (base,), {"settings_class": RelaxationSettings}))
    register_relaxation("plain_b", type("PlainB", (base,), {"settings_class": RelaxationSettings}))
    try:
        with pytest.raises(ValueError, match=r"several relaxations share it \(\['plain_a', 'plain_b'\]\); pass "
                                             r"relaxation='<name>', relaxation_settings=RelaxationSettings"):
            PruningConfig(relaxation=RelaxationSettings())
        assert PruningConfig(relaxation="plain_b").relaxation_settings == RelaxationSettings()
    finally:
        unregister_relaxation("plain_a")
        unregister_relaxation("plain_b")
