"""Each granularity owns a torch-free settings dataclass of the settings only it reads, held by `PruningConfig` as its
own object as the relaxations' are: old flat keywords and saved configs keep working."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from fresh_process import python_output
from name_switches import name_switches

from hf_heuristic_core import PruningConfig
from hf_heuristic_core.granularity import (
    GRANULARITIES,
    GRANULARITY_SETTINGS,
    GranularitySettings,
    get_granularity,
    granularity_settings_class,
    register_granularity,
)
from hf_heuristic_core.granularity.neuron import NeuronSettings
from hf_heuristic_core.granularity.unit import UnitSettings
from hf_heuristic_core.relaxations.hard_concrete import HardConcreteSettings
from hf_heuristic_core.granularity.weight import (
    WeightSettings,
    parse_layers,
    parse_module_names,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
BUILT_IN = {"unit": UnitSettings, "neuron": NeuronSettings, "weight": WeightSettings}


def test_every_registered_granularity_has_its_settings_class():
    assert set(GRANULARITY_SETTINGS.names()) >= {"unit", "neuron", "weight"}
    for name in GRANULARITIES.names():
        assert get_granularity(name).settings_class is granularity_settings_class(name)
    assert {cls.__name__: cls.field_names() for cls in BUILT_IN.values()} == {
        "UnitSettings": ["prune_heads", "prune_mlps"], "NeuronSettings": [],
        "WeightSettings": ["target_modules", "layers_to_transform", "mask_bias", "logits_dtype"]}


def test_granularity_settings_import_no_torch():
    code = ("import sys; from hf_heuristic_core.granularity.weight import WeightSettings; "
            "from hf_heuristic_core.granularity.unit import UnitSettings; "
            "from hf_heuristic_core.config import PruningConfig; "
            "print(PruningConfig(granularity=WeightSettings(mask_bias=True)).granularity_settings); "
            "print('torch' in sys.modules)")
    out = python_output(code)
    assert out[0] == ("WeightSettings(target_modules=None, layers_to_transform=None, mask_bias=True, "
                      "logits_dtype='float32')")
    assert out[1] == "False"


def test_the_torch_side_names_stay_importable_from_the_granularity_folders():
    from hf_heuristic_core.granularity.unit import UnitGranularity
    from hf_heuristic_core.granularity.weight import (
        WeightGranularity,
        select_parameters,
    )
    assert UnitGranularity.name == "unit" and WeightGranularity.name == "weight" and callable(select_parameters)
    with pytest.raises(AttributeError, match="has no attribute 'nothing'"):
        from hf_heuristic_core.granularity import unit
        unit.nothing


def test_a_config_holds_the_chosen_granularity_settings_and_reads_them_flat():
    config_fields = {f.name for f in dataclasses.fields(PruningConfig)}
    for name, settings_class in BUILT_IN.items():
        config = PruningConfig(granularity=name)
        assert config.granularity_settings == settings_class()
        for f in dataclasses.fields(settings_class):
            assert f.name not in config_fields
            assert getattr(config, f.name) == f.default


@pytest.mark.parametrize(("granularity", "expected"), [
    ("unit", UnitSettings(prune_heads=False)),
    ("neuron", NeuronSettings()),
    ("weight", WeightSettings(target_modules=["query", "value"], layers_to_transform=[0, 2], mask_bias=True,
                              logits_dtype="bfloat16")),
])
def test_flat_keywords_reach_the_granularity_settings_and_round_trip(tmp_path, granularity, expected):
    config = PruningConfig(granularity=expected)
    assert config.granularity == granularity and config.granularity_settings == expected
    assert PruningConfig.from_dict(config.to_dict()) == config
    config.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "pruning_config.json").read_text())
    assert saved["granularity"] == granularity and saved["granularity_settings"] == expected.to_dict()
    assert not set(expected.to_dict()) & set(saved)   # nested on disk, under the granularity's name
    loaded = PruningConfig.from_pretrained(tmp_path)
    assert loaded == config and loaded.granularity_settings == expected


@pytest.mark.parametrize("fixture", ["artifact_v1_bert", "artifact_v1_gpt2"])
def test_a_config_saved_before_the_settings_split_loads(fixture):
    saved = json.loads((FIXTURES / fixture / "pruning_config.json").read_text())
    config = PruningConfig.from_pretrained(FIXTURES / fixture)
    assert config.granularity_settings == UnitSettings(prune_heads=saved["prune_heads"],
                                                       prune_mlps=saved["prune_mlps"])
    assert config.to_dict() == PruningConfig.from_dict(saved).to_dict()
    settings_keys = set(UnitSettings.field_names()) | set(HardConcreteSettings.field_names())
    assert set(config.to_dict()) >= set(saved) - settings_keys


def test_granularity_settings_validation_names_the_field():
    with pytest.raises(ValueError, match=r"PruningConfig: logits_dtype='float16' is not one of"):
        WeightSettings(logits_dtype="float16").validate()
    with pytest.raises(ValueError, match=r"prune_heads and prune_mlps both False leave nothing to prune"):
        PruningConfig(granularity=UnitSettings(prune_heads=False, prune_mlps=False))


def test_the_command_line_text_forms_parse():
    assert parse_module_names(" query, value ,") == ["query", "value"]
    assert parse_module_names(" , ") is None
    assert parse_layers("0,2-4") == [0, 2, 3, 4]
    with pytest.raises(ValueError, match=r"--layers_to_transform: 'x' is not a layer index"):
        parse_layers("1,x")


@dataclass(kw_only=True)
class _ToyGranularitySettings(GranularitySettings):
    toy_width: int = field(default=3, metadata={"help": "Toy."})

    def validate(self) -> None:
        if self.toy_width < 1:
            raise ValueError(f"PruningConfig: toy_width must be >= 1, got {self.toy_width}.")


def test_a_registered_granularity_brings_its_settings_class():
    class Toy(get_granularity("neuron")):
        name = "toy_settings"
        settings_class = _ToyGranularitySettings

    register_granularity("toy_settings", Toy)
    try:
        assert granularity_settings_class("toy_settings") is _ToyGranularitySettings
        # A config holds its settings, by name or by object, and checks them with the class's own rules.
        config = PruningConfig(granularity="toy_settings", granularity_settings={"toy_width": 5})
        assert config.granularity_settings == _ToyGranularitySettings(toy_width=5) and config.toy_width == 5
        assert PruningConfig(granularity=_ToyGranularitySettings(toy_width=5)) == config
        assert PruningConfig.from_dict(config.to_dict()) == config
        assert _ToyGranularitySettings.from_config(config) == _ToyGranularitySettings(toy_width=5)
        with pytest.raises(ValueError, match="toy_width must be >= 1"):
            PruningConfig(granularity="toy_settings", granularity_settings={"toy_width": 0})
    finally:
        GRANULARITIES._entries.pop("toy_settings", None)
        GRANULARITY_SETTINGS._entries.pop("toy_settings", None)


# MIB's two circuit levels are, by definition, the unit granularity (nodes) and the edge granularity (edges): the
# circuit code chooses between exactly those two, so it names them. Everything else asks the granularity.
CIRCUIT_LEVEL_FILES = {"cli/circuit.py", "circuits/sources.py"}
# {"weight": ..., "bias": ...} is a parameter's attributes, not the weight granularity.
PARAMETER_ATTRIBUTES = (frozenset({"weight", "bias"}),)


def test_no_name_switch_on_a_granularity_outside_its_folder():
    import ast

    import hf_heuristic_core
    package = Path(hf_heuristic_core.__file__).parent
    names = set(GRANULARITIES.names())
    found = {}
    for path in package.rglob("*.py"):
        relative = path.relative_to(package)
        if relative.parts[0] == "granularity" or relative.as_posix() in CIRCUIT_LEVEL_FILES:
            continue
        lines = name_switches(ast.parse(path.read_text()), names, PARAMETER_ATTRIBUTES)
        if lines:
            found[relative.as_posix()] = lines
    assert found == {}
    # The detector finds the switches config.py and cli/export_checks.py used to have.
    assert name_switches(ast.parse('x = "zero" if granularity == "weight" else "mean"'), names) == [1]
    assert name_switches(ast.parse('OK = granularity not in ("unit", "neuron")'), names) == [1]
    assert name_switches(ast.parse('E = {"edge": "edges between heads"}'), names) == [1]
    assert name_switches(ast.parse('S = {"weight": [2, 2], "bias": None}'), names, PARAMETER_ATTRIBUTES) == []
    for relative in CIRCUIT_LEVEL_FILES:   # the exemption is still needed (else drop it)
        assert name_switches(ast.parse((package / relative).read_text()), names, PARAMETER_ATTRIBUTES)
