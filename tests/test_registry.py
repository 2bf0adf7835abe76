"""One registry style: relaxations, granularities, their settings, architecture maps, search strategies and edge-site
families are each a `Registry` (a mapping with `register` / `unregister`, checked entries, lazy built-ins)."""

from __future__ import annotations

import pytest

from hf_heuristic_core._registry import Registry
from hf_heuristic_core.architectures.registry import ARCHITECTURES, ArchitectureMap
from hf_heuristic_core.granularity import GRANULARITIES, GRANULARITY_SETTINGS
from hf_heuristic_core.granularity.edge.sites import EDGE_FAMILIES, EdgeSites
from hf_heuristic_core.relaxations import RELAXATION_SETTINGS, RELAXATIONS
from hf_heuristic_core.search.strategies import STRATEGIES, register_strategy


def test_every_registry_of_the_package_is_a_registry():
    for registry in (RELAXATIONS, RELAXATION_SETTINGS, GRANULARITIES, GRANULARITY_SETTINGS, ARCHITECTURES,
                     STRATEGIES, EDGE_FAMILIES):
        assert isinstance(registry, Registry), registry
        assert registry.names() == sorted(registry) and len(registry) == len(registry.names()) > 0


def test_lookup_mapping_and_lazy_builtins():
    registry = Registry("toy", "hf_heuristic_core.relaxations", {"hc": "hard_concrete.relaxation:HardConcrete"})
    assert registry._entries["hc"] == "hard_concrete.relaxation:HardConcrete"   # not imported yet
    from hf_heuristic_core.relaxations.hard_concrete.relaxation import HardConcrete
    assert registry["hc"] is HardConcrete and registry.lookup("hc") is HardConcrete
    assert registry._entries["hc"] is HardConcrete                                 # resolved once
    assert registry.get("missing") is None and "missing" not in registry
    with pytest.raises(KeyError):
        registry["missing"]
    with pytest.raises(ValueError, match=r"Unknown toy 'missing'; choose one of \['hc'\] \(or register your own\)"):
        registry.lookup("missing")


def test_register_checks_and_unregister_keeps_builtins():
    assert ARCHITECTURES.register("toy-type", ARCHITECTURES["gpt2"]) is ARCHITECTURES["gpt2"]
    try:
        assert "toy-type" in ARCHITECTURES
    finally:
        ARCHITECTURES.unregister("toy-type")
    assert "toy-type" not in ARCHITECTURES
    with pytest.raises(TypeError, match=r"ARCHITECTURES\['toy-type'\] must be an ArchitectureMap, got dict"):
        ARCHITECTURES["toy-type"] = {"layers": "h"}
    assert "toy-type" not in ARCHITECTURES
    with pytest.raises(TypeError, match=r"EDGE_FAMILIES\['toy'\] must be an EdgeSites"):
        EDGE_FAMILIES.register("toy", "gpt2")
    with pytest.raises(ValueError, match=r"'gpt2' is a built-in architecture; only entries added with register"):
        ARCHITECTURES.unregister("gpt2")
    with pytest.raises(ValueError, match="must be a non-empty string"):
        ARCHITECTURES.register("", ARCHITECTURES["gpt2"])
    with pytest.raises(TypeError, match="register_strategy takes a SearchStrategy instance"):
        register_strategy(object())
    assert isinstance(ARCHITECTURES["gpt2"], ArchitectureMap) and isinstance(EDGE_FAMILIES["gpt2"], EdgeSites)


def test_monkeypatch_replaces_and_removes_builtins_and_puts_them_back(monkeypatch):
    bert = ARCHITECTURES["bert"]
    with monkeypatch.context() as patch:
        patch.delitem(ARCHITECTURES, "bert")
        assert "bert" not in ARCHITECTURES
        patch.setitem(ARCHITECTURES, "gpt2", bert)
        assert ARCHITECTURES["gpt2"] is bert
    assert ARCHITECTURES["bert"] is bert and ARCHITECTURES["gpt2"] is not bert
