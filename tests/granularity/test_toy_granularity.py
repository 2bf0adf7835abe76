"""A granularity added from outside the package (here: one mask per key/value group, which removes the group's query
heads and its key/value head together) exports slim and transplants with no edit outside this file: it only says
its mask kinds, their shapes and how its masks read as heads (`owned_units`); export and induction ask it, and the
architecture (`architectures.ownership`) says which rows and columns those heads own."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
import torch
from tiny_models import make_batch, one_torch_thread, tiny_model  # noqa: F401

from hf_heuristic_core import PrunableModel, PruningConfig, load_slim, save_slim
from hf_heuristic_core.ablation.apply import mask_heads
from hf_heuristic_core.architectures.resolve import resolve_architecture
from hf_heuristic_core.granularity import GRANULARITIES, GRANULARITY_SETTINGS, register_granularity
from hf_heuristic_core.granularity.base import Granularity, MaskKind, OwnedUnits, UnitSizes
from hf_heuristic_core.induction import parameter_gates, transfer_subnetwork

pytestmark = pytest.mark.usefixtures("one_torch_thread")

GROUPS = torch.tensor([[0, 1], [1, 1], [1, 0], [0, 0]], dtype=torch.float)   # [layers, key/value groups]


class KeyValueGroupGranularity(Granularity):
    """One mask per key/value group of a grouped-query attention model (zero ablation)."""

    name = "kv_group"
    ablations = ("zero",)
    mask_kinds = ("kv_groups",)
    per_layer_kinds = ("kv_groups",)

    def __init__(self, model: torch.nn.Module, config: Any) -> None:
        super().__init__(model, config)
        self.architecture = resolve_architecture(model, config)
        self.num_kv = int(model.config.num_key_value_heads)
        self.group = self.architecture.num_heads // self.num_kv
        self._kind = MaskKind("kv_groups", (self.architecture.num_layers, self.num_kv), "kv_groups",
                              self.architecture.head_param_count * self.group, dims=("num_layers", "kv_heads"))

    def kinds(self) -> dict[str, MaskKind]:
        return {"kv_groups": self._kind}

    def attach(self, source):
        def hook_for(layer: int):
            def hook(module, args):
                z = source.active_mask("kv_groups")
                if z is None:
                    return None
                heads = z[layer].repeat_interleave(self.group)
                return (mask_heads(args[0], heads, None, self.architecture.num_heads),) + tuple(args[1:])
            return hook
        return [module.register_forward_pre_hook(hook_for(layer))
                for layer, module in enumerate(self.architecture.attention_outputs)]

    def describe(self) -> dict[str, Any]:
        return {"model_type": self.architecture.model_type, "num_layers": self.architecture.num_layers}

    @classmethod
    def kind_shapes(cls, sizes: UnitSizes) -> dict[str, tuple[int, ...]]:
        return {"kv_groups": (sizes.num_layers, sizes.num_kv_heads)}

    @classmethod
    def owned_units(cls, masks: Mapping[str, torch.Tensor], sizes: UnitSizes, means=None) -> OwnedUnits:
        groups = masks.get("kv_groups")
        heads = None if groups is None else groups.repeat_interleave(sizes.num_heads // sizes.num_kv_heads, dim=1)
        return OwnedUnits(heads=heads)


@pytest.fixture
def kv_group_registered():
    register_granularity("kv_group", KeyValueGroupGranularity)
    try:
        yield
    finally:
        GRANULARITIES._entries.pop("kv_group", None)
        GRANULARITY_SETTINGS._entries.pop("kv_group", None)


@pytest.mark.usefixtures("kv_group_registered")
@pytest.mark.parametrize("model_type", ["llama", "phi3"])
def test_toy_granularity_exports_slim_exactly(model_type, tmp_path):
    model = tiny_model(model_type, task="causal_lm", num_layers=4)
    prunable = PrunableModel(model, PruningConfig(granularity="kv_group", ablation="zero")).eval()
    prunable.set_masks(kv_groups=GROUPS)
    batch = make_batch(model_type, batch_size=4, seq_len=9, padding="left")
    with torch.no_grad():
        hooked = prunable(**batch).logits
        with prunable.masks_disabled():
            assert float((hooked - prunable(**batch).logits).abs().max()) > 1e-3
        # the toy's hooks agree with unit masks of the same heads (an independent path through the package)
        reference = PrunableModel(tiny_model(model_type, task="causal_lm", num_layers=4),
                                  PruningConfig(ablation="zero")).eval()
        reference.set_masks(heads=GROUPS.repeat_interleave(2, dim=1))
        assert torch.equal(reference(**batch).logits, hooked)
        slim = prunable.export_slim()
        mask = batch["attention_mask"].bool()
        assert float((slim(**batch).logits - hooked).abs()[mask].max()) <= 1e-4
    info = slim.config.hf_heuristic_core_slim
    # layer 3 keeps no group: Llama runs it with zero-width attention (it is not the layer the KV cache reads its
    # length from); Phi-3 keeps a zero placeholder head there
    assert [len(layer["kv_slots"]) for layer in info["layers"]] == [1, 2, 1, 0 if model_type == "llama" else 1]
    assert info["masks"] == {"kv_groups": GROUPS.tolist()}
    save_slim(slim, tmp_path / "slim")
    with torch.no_grad():
        reloaded = load_slim(tmp_path / "slim")(**batch).logits
    assert float((reloaded - hooked).abs()[mask].max()) <= 1e-4


@pytest.mark.usefixtures("kv_group_registered")
@pytest.mark.parametrize("model_type", ["llama", "phi3"])
def test_toy_granularity_transplants_what_its_heads_own(model_type):
    source = tiny_model(model_type, task="causal_lm", num_layers=4)
    gates = parameter_gates(source, {"kv_groups": GROUPS})   # the granularity is found from the mask kind
    assert gates, "the toy's masks keep heads, so some entries are transplanted"
    heads = parameter_gates(source, {"heads": GROUPS.repeat_interleave(2, dim=1)})
    assert sorted(gates) == sorted(heads) and all(torch.equal(gates[n], heads[n]) for n in heads)
    model = transfer_subnetwork(source, {"kv_groups": GROUPS}, seed=2,
                                config=PruningConfig(granularity="kv_group"))
    assert model.subtask_induction["granularity"] == "kv_group"
    assert model.subtask_induction["kept_entries"] == sum(int(g.sum()) for g in gates.values())


def test_a_unit_kind_mixed_with_an_unknown_key_is_refused_with_a_clear_message():
    from hf_heuristic_core.errors import UsageError

    with pytest.raises(UsageError, match="mix unit/neuron kinds and parameter names"):
        parameter_gates(tiny_model("llama", task="causal_lm"), {"heads": torch.ones(2, 4), "kv_groups": GROUPS})
