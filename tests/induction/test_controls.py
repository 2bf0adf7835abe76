"""The control arms: random subnetworks with the real mask's per-tensor and per-layer counts, inverse, full, scratch."""

from __future__ import annotations

import pytest
import torch
from tiny_models import make_batch, one_torch_thread, tiny_model  # noqa: F401  (fixture)

from hf_heuristic_core import (
    build_arm,
    frozen_gates,
    random_like_counts,
    transfer_subnetwork,
)
from hf_heuristic_core.errors import UsageError
from hf_heuristic_core.granularity.weight.selection import layer_of
from hf_heuristic_core.induction.provenance import effective_state_dict

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SEED = 4


def _weight_masks(source, keep=0.25):
    generator = torch.Generator().manual_seed(7)
    return {n: (torch.rand(p.shape, generator=generator) < keep).float() for n, p in source.named_parameters()
            if ".h." in n and n.endswith("weight") and p.dim() == 2}


def _per_layer(masks):
    counts = {}
    for name, mask in masks.items():
        counts[layer_of(name)] = counts.get(layer_of(name), 0) + int(mask.sum())
    return counts


def test_random_like_counts_keeps_per_tensor_and_per_layer_counts_and_is_seeded():
    source = tiny_model("gpt2", task="causal_lm")
    masks = _weight_masks(source)
    random = random_like_counts(masks, seed=0)
    assert list(random) == list(masks)
    for name, mask in masks.items():
        assert random[name].shape == mask.shape and random[name].dtype == mask.dtype
        assert int(random[name].sum()) == int(mask.sum())
        assert set(random[name].unique().tolist()) <= {0.0, 1.0}
        overlap = float((random[name] * mask).sum() / mask.sum())
        assert overlap < 0.5          # chance overlap is ~0.25, not the mask itself
    assert _per_layer(random) == _per_layer(masks)
    again, other = random_like_counts(masks, seed=0), random_like_counts(masks, seed=1)
    assert all(torch.equal(again[n], random[n]) for n in masks)
    assert not all(torch.equal(other[n], random[n]) for n in masks)


def test_random_like_counts_units_shuffles_heads_within_layers_and_mlps_across_layers():
    heads = torch.tensor([[1, 1, 0, 0, 0, 0], [0, 0, 0, 0, 0, 1], [1, 1, 1, 1, 1, 0]], dtype=torch.float)
    mlps = torch.tensor([1.0, 0.0, 0.0])
    draws = [random_like_counts({"heads": heads, "mlps": mlps}, seed=s) for s in range(20)]
    for draw in draws:
        assert draw["heads"].sum(1).tolist() == [2.0, 1.0, 5.0]
        assert draw["mlps"].sum() == 1
    assert len({tuple(d["heads"].flatten().tolist()) for d in draws}) > 10
    assert {int(d["mlps"].argmax()) for d in draws} == {0, 1, 2}


def test_random_arm_transplants_same_counts_per_tensor_as_the_subnetwork():
    source = tiny_model("gpt2", task="causal_lm")
    masks = _weight_masks(source)
    real = frozen_gates(build_arm(source, masks, "subnetwork", seed=SEED))
    random = frozen_gates(build_arm(source, masks, "random", seed=SEED))
    assert set(real) == set(random) == set(masks)
    for name in masks:
        assert int(real[name].sum()) == int(random[name].sum()) == int(masks[name].sum())
        assert torch.equal(real[name], masks[name].bool()) and not torch.equal(random[name], real[name])
    assert torch.equal(random[name], random_like_counts(masks, SEED)[name].bool())


def test_inverse_arm_is_the_complement_inside_the_masked_tensors():
    source = tiny_model("gpt2", task="causal_lm")
    masks = _weight_masks(source)
    model = build_arm(source, masks, "inverse", seed=SEED)
    gates = frozen_gates(model)
    for name, mask in masks.items():
        assert torch.equal(gates[name], ~mask.bool())
    scratch = effective_state_dict(build_arm(source, None, "scratch", seed=SEED))
    effective, src = effective_state_dict(model), source.state_dict()
    for name, value in effective.items():
        if name in masks:
            gate = ~masks[name].bool()
            assert torch.equal(value[gate], src[name][gate]) and torch.equal(value[~gate], scratch[name][~gate])
        else:
            assert torch.equal(value, scratch[name]), name   # outside the masks: fresh, as in the subnetwork arm
    assert model.subtask_induction["arm"] == "inverse"


def test_full_arm_copies_everything_trainable_and_scratch_is_the_seeded_fresh_model():
    source = tiny_model("llama", task="causal_lm")
    batch = make_batch("llama")
    full = build_arm(source, None, "full", seed=SEED).eval()
    assert all(p.requires_grad for p in full.parameters())
    assert not frozen_gates(full)
    for name, value in full.state_dict().items():
        assert torch.equal(value, source.state_dict()[name]), name
    with torch.no_grad():
        assert torch.equal(full(**batch).logits, source(**batch).logits)
    scratch = build_arm(source, {"heads": torch.eye(2, 4)}, "scratch", seed=SEED)
    torch.manual_seed(SEED)
    reference = type(source)(source.config)
    for name, value in scratch.state_dict().items():
        assert torch.equal(value, reference.state_dict()[name]), name
    assert scratch.subtask_induction["arm"] == "scratch" and scratch.subtask_induction["kept_entries"] == 0


def test_arms_share_the_fresh_initialization_of_a_seed():
    source = tiny_model("bert")
    heads = torch.tensor([[1.0, 0, 0, 0], [0, 0, 1, 0]])
    masks = {"heads": heads, "mlps": torch.tensor([0.0, 1.0])}
    subnetwork = transfer_subnetwork(source, masks, seed=SEED)
    scratch = effective_state_dict(build_arm(source, masks, "scratch", seed=SEED))
    gates = frozen_gates(subnetwork)
    for name, value in effective_state_dict(subnetwork).items():
        gate = gates.get(name, torch.zeros(value.shape, dtype=torch.bool))
        assert torch.equal(value[~gate], scratch[name][~gate]), name
    random_heads = frozen_gates(build_arm(source, masks, "random", seed=SEED))
    q = "bert.encoder.layer.{}.attention.self.query.weight"
    for layer in range(2):   # one head per layer, as in the real mask: 8 query rows
        assert int(random_heads[q.format(layer)].any(1).sum()) == 8


def test_arm_errors():
    source = tiny_model("bert")
    with pytest.raises(UsageError, match="Unknown arm .shuffled.; choose one of subnetwork, random, random_complement, inverse, full, scratch"):
        build_arm(source, None, "shuffled")
    with pytest.raises(UsageError, match="arm='random' needs the subnetwork's masks"):
        build_arm(source, None, "random")


def test_random_from_the_complement_is_disjoint_with_equal_counts_and_refused_when_impossible():
    source = tiny_model("gpt2", task="causal_lm")
    masks = _weight_masks(source)
    drawn = random_like_counts(masks, seed=3, complement=True)
    for name, mask in masks.items():
        assert int(drawn[name].sum()) == int(mask.sum()) and not bool((drawn[name] * mask).any())
    heads = torch.tensor([[1.0, 0, 0, 0], [1, 1, 0, 0]])
    units = random_like_counts({"heads": heads, "mlps": torch.tensor([1.0, 0])}, seed=0, complement=True)
    assert units["heads"].sum(1).tolist() == [1.0, 2.0] and not bool((units["heads"] * heads).any())
    assert units["mlps"].tolist() == [0.0, 1.0]
    gates = frozen_gates(build_arm(source, masks, "random_complement", seed=SEED))
    assert all(int(gates[n].sum()) == int(m.sum()) and not bool((gates[n] & m.bool()).any())
               for n, m in masks.items())
    with pytest.raises(UsageError, match=r"'heads' mask keeps 3 of 4 entries .* complement holds \(1\).*arm='random'"):
        random_like_counts({"heads": torch.tensor([[1.0, 1, 1, 0]])}, seed=0, complement=True)
