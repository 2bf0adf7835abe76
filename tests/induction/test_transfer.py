"""transfer_subnetwork against independent references: the source's tensors and a fresh seeded model built by hand.

Every check compares effective weights (what the forward pass uses) entry by entry with `torch.equal`: transplanted
entries must be the source's bit for bit, the others the bits of `torch.manual_seed(seed); type(source)(config)`.
"""

from __future__ import annotations

import pytest
import torch
from tiny_models import make_batch, one_torch_thread, tiny_model  # noqa: F401  (fixture)
from torch import nn

from hf_heuristic_core import (
    PrunableModel,
    PruningConfig,
    merge_transplant,
    transfer_subnetwork,
)
from hf_heuristic_core.induction.provenance import effective_state_dict

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SEED = 5


def _reference(source, seed=SEED):
    torch.manual_seed(seed)
    return dict(type(source)(source.config).named_parameters())


def _effective(model):
    """Effective values by plain parameter name (tied names included), computed by reading every module."""
    out = {}
    for module_name, module in model.named_modules():
        for attribute in ("weight", "bias"):
            try:
                value = getattr(module, attribute)
            except AttributeError:
                continue
            if isinstance(value, torch.Tensor):
                out[f"{module_name}.{attribute}" if module_name else attribute] = value.detach()
    return out


def _check_bits(model, source, gates):
    """gates: plain name -> bool tensor (True: from the source). Every other parameter must be fresh."""
    reference, src, effective = _reference(source), dict(source.named_parameters()), _effective(model)
    assert set(reference) <= set(effective)
    for name, fresh in reference.items():
        gate = gates.get(name, torch.zeros(fresh.shape, dtype=torch.bool))
        assert torch.equal(effective[name][gate], src[name].detach()[gate]), name
        assert torch.equal(effective[name][~gate], fresh.detach()[~gate]), name


def _random_masks(source, names, keep=0.3, seed=1):
    generator = torch.Generator().manual_seed(seed)
    params = dict(source.named_parameters())
    return {n: (torch.rand(params[n].shape, generator=generator) < keep).float() for n in names}


def test_weight_masks_any_parameter_gpt2_tied_embedding_rng_untouched():
    source = tiny_model("gpt2", task="causal_lm")
    names = ["transformer.wte.weight", "transformer.wpe.weight", "transformer.h.0.attn.c_attn.weight",
             "transformer.h.0.attn.c_attn.bias", "transformer.h.1.ln_2.weight", "transformer.h.1.mlp.c_proj.weight"]
    masks = _random_masks(source, names)
    masks["transformer.h.0.mlp.c_fc.weight"] = torch.ones_like(source.transformer.h[0].mlp.c_fc.weight)
    torch.manual_seed(123)
    state = torch.get_rng_state()
    model = transfer_subnetwork(source, masks, seed=SEED)
    assert torch.equal(torch.get_rng_state(), state)   # the caller's RNG is not consumed
    assert type(model) is type(source) and model.config.to_dict() == source.config.to_dict()
    _check_bits(model, source, {n: m.bool() for n, m in masks.items()})
    fresh = model.transformer.h[1].attn.c_attn.weight.detach()   # a real draw of the model's init (std 0.15), not a copy
    assert 0.13 < float(fresh.std()) < 0.17 and not torch.equal(fresh, source.transformer.h[1].attn.c_attn.weight)
    # tied lm_head: one tensor, so its gate is the embedding's; both uses read the same effective weights
    assert torch.equal(model.lm_head.weight, model.transformer.wte.weight)
    assert model.lm_head.parametrizations.weight.original is model.transformer.wte.parametrizations.weight.original
    # fully transplanted tensor: plain, frozen; untouched tensor: plain, trainable
    assert not model.transformer.h[0].mlp.c_fc.weight.requires_grad
    assert model.transformer.h[0].mlp.c_fc.bias.requires_grad
    assert model.subtask_induction["tensors"]["transformer.h.0.mlp.c_fc.weight"]["fraction"] == 1.0
    kept = sum(int(m.sum()) for m in masks.values())
    assert model.subtask_induction["kept_entries"] == kept


@pytest.mark.parametrize("relaxation", ["continuous_sparsification", "gumbel_sigmoid", "hard_concrete"])
@pytest.mark.parametrize("model_type", ["bert", "llama"])
def test_weight_masks_from_each_relaxation(model_type, relaxation):
    source = tiny_model(model_type)
    prunable = PrunableModel(source, PruningConfig(granularity="weight", relaxation=relaxation,
                                                   binarization="threshold"))
    generator = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for _, logits in prunable.mask_logits.items():  # noqa: PERF102  (MaskLogits has no values())
            logits.copy_(torch.randn(logits.shape, generator=generator) * 3)
    masks = prunable.get_masks(binary=True)
    fractions = [float(m.mean()) for m in masks.values()]
    assert 0.05 < min(fractions) and max(fractions) < 0.95   # a real partial mask in every tensor
    model = transfer_subnetwork(prunable, masks, seed=SEED, config=prunable.pruning_config)
    plain = prunable.unwrap()
    _check_bits(model, plain, {n: m.bool() for n, m in masks.items()})
    assert model.subtask_induction["relaxation"] == relaxation
    assert model.subtask_induction["granularity"] == "weight"


def _rows(tensor, rows):
    return tensor[rows]


def test_unit_masks_bert_heads_rows_columns_and_mlp_blocks():
    source = tiny_model("bert")
    heads = torch.tensor([[0, 1, 0, 1], [0, 0, 0, 0]], dtype=torch.float)
    mlps = torch.tensor([0, 1], dtype=torch.float)
    model = transfer_subnetwork(source, {"heads": heads, "mlps": mlps}, seed=SEED)
    gates = {}
    rows = torch.zeros(32, dtype=torch.bool)
    rows[8:16] = True
    rows[24:32] = True                       # heads 1 and 3, head_dim 8
    prefix = "bert.encoder.layer.0.attention."
    for proj in ("query", "key", "value"):
        gates[f"{prefix}self.{proj}.weight"] = rows[:, None].expand(32, 32).clone()
        gates[f"{prefix}self.{proj}.bias"] = rows.clone()
    gates[f"{prefix}output.dense.weight"] = rows[None, :].expand(32, 32).clone()   # columns; its bias stays fresh
    for name, p in source.named_parameters():
        if name.startswith(("bert.encoder.layer.1.intermediate.", "bert.encoder.layer.1.output.dense")):
            gates[name] = torch.ones(p.shape, dtype=torch.bool)
    _check_bits(model, source, gates)
    assert not model.bert.encoder.layer[1].output.dense.weight.requires_grad
    assert model.bert.encoder.layer[1].output.LayerNorm.weight.requires_grad   # LayerNorm is not the MLP's
    assert model.subtask_induction["granularity"] == "unit"
    assert model.subtask_induction["masks"]["heads"] == {"kept": 2, "total": 8}


def test_unit_masks_gpt2_fused_conv1d_qkv():
    source = tiny_model("gpt2", task="causal_lm")
    heads = torch.tensor([[0, 0, 1, 0], [1, 1, 1, 1]], dtype=torch.float)
    model = transfer_subnetwork(source, {"heads": heads, "mlps": torch.zeros(2)}, seed=SEED)
    gates = {}
    for layer, kept in ((0, [2]), (1, [0, 1, 2, 3])):
        feats = torch.zeros(32, dtype=torch.bool)
        for h in kept:
            feats[h * 8:(h + 1) * 8] = True
        qkv = torch.cat([feats, feats, feats])          # c_attn output is q | k | v, weight stored [in, out]
        prefix = f"transformer.h.{layer}.attn."
        gates[prefix + "c_attn.weight"] = qkv[None, :].expand(32, 96).clone()
        gates[prefix + "c_attn.bias"] = qkv.clone()
        gates[prefix + "c_proj.weight"] = feats[:, None].expand(32, 32).clone()   # Conv1D rows = input features
    _check_bits(model, source, gates)


def test_unit_masks_llama_gqa_kv_head_follows_any_kept_query_head():
    source = tiny_model("llama", task="causal_lm")   # 4 query heads, 2 kv heads, head_dim 8
    heads = torch.tensor([[0, 1, 0, 0], [0, 0, 1, 1]], dtype=torch.float)
    model = transfer_subnetwork(source, {"heads": heads}, seed=SEED, config="unit")
    gates = {}
    for layer, q_heads, kv_heads in ((0, [1], [0]), (1, [2, 3], [1])):
        q = torch.zeros(32, dtype=torch.bool)
        kv = torch.zeros(16, dtype=torch.bool)
        for h in q_heads:
            q[h * 8:(h + 1) * 8] = True
        for h in kv_heads:
            kv[h * 8:(h + 1) * 8] = True
        prefix = f"model.layers.{layer}.self_attn."
        gates[prefix + "q_proj.weight"] = q[:, None].expand(32, 32).clone()
        gates[prefix + "k_proj.weight"] = kv[:, None].expand(16, 32).clone()
        gates[prefix + "v_proj.weight"] = kv[:, None].expand(16, 32).clone()
        gates[prefix + "o_proj.weight"] = q[None, :].expand(32, 32).clone()
    _check_bits(model, source, gates)


def test_neuron_masks_llama_gate_up_rows_and_down_columns():
    source = tiny_model("llama", task="causal_lm")
    neurons = torch.zeros(2, 48)
    neurons[0, [0, 5, 47]] = 1
    neurons[1, 10:20] = 1
    model = transfer_subnetwork(source, {"neurons": neurons}, seed=SEED)
    gates = {}
    for layer in range(2):
        kept = neurons[layer].bool()
        prefix = f"model.layers.{layer}.mlp."
        gates[prefix + "gate_proj.weight"] = kept[:, None].expand(48, 32).clone()
        gates[prefix + "up_proj.weight"] = kept[:, None].expand(48, 32).clone()
        gates[prefix + "down_proj.weight"] = kept[None, :].expand(32, 48).clone()
    _check_bits(model, source, gates)
    assert model.subtask_induction["kept_fraction_of_masked"] == pytest.approx(13 * 3 * 32 / (2 * 3 * 48 * 32))


def test_plain_module_is_reinitialized_with_reset_parameters():
    torch.manual_seed(0)
    source = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.LayerNorm(6), nn.Linear(6, 3))
    masks = {"0.weight": (torch.arange(24).view(6, 4) % 3 == 0).float(), "3.bias": torch.tensor([1.0, 0.0, 1.0])}
    model = transfer_subnetwork(source, masks, seed=SEED)
    torch.manual_seed(SEED)
    reference = dict(nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.LayerNorm(6), nn.Linear(6, 3)).named_parameters())
    src, effective = dict(source.named_parameters()), _effective(model)
    for name, fresh in reference.items():
        gate = masks[name].bool() if name in masks else torch.zeros(fresh.shape, dtype=torch.bool)
        assert torch.equal(effective[name][gate], src[name].detach()[gate])
        assert torch.equal(effective[name][~gate], fresh.detach()[~gate])


def _transplanted_gpt2(masked: list[str]):
    """A GPT-2 LM transplanted under random masks on `masked`: the source, the masks, the transplant, a batch and
    the transplant's logits on it."""
    source = tiny_model("gpt2", task="causal_lm")
    masks = _random_masks(source, masked)
    model = transfer_subnetwork(source, masks, seed=SEED).eval()
    batch = make_batch("gpt2")
    with torch.no_grad():
        before = model(**batch).logits
    return source, masks, model, batch, before


def test_merge_transplant_leaves_plain_tied_trainable_parameters_with_the_same_outputs():
    source, _, model, batch, before = _transplanted_gpt2(["transformer.wte.weight", "transformer.h.1.attn.c_proj.weight"])
    expected = {k: v.clone() for k, v in effective_state_dict(model).items()}
    merge_transplant(model)
    assert not any(".parametrizations." in n for n, _ in model.named_parameters())
    assert all(p.requires_grad for p in model.parameters())
    assert model.lm_head.weight is model.transformer.wte.weight
    assert list(model.state_dict()) == list(source.state_dict())
    for name, value in model.state_dict().items():
        assert torch.equal(value, expected[name]), name
    with torch.no_grad():
        assert torch.equal(model(**batch).logits, before)


@pytest.mark.parametrize(("model_type", "inputs", "output", "conv1d"), [
    ("gpt2", ["transformer.h.{}.mlp.c_fc"], "transformer.h.{}.mlp.c_proj", True),
    ("bert", ["bert.encoder.layer.{}.intermediate.dense"], "bert.encoder.layer.{}.output.dense", False),
])
def test_neuron_masks_conv1d_and_linear_layouts(model_type, inputs, output, conv1d):
    source = tiny_model(model_type)
    neurons = torch.zeros(2, 48)
    neurons[0, [3, 4]] = 1
    neurons[1, 40] = 1
    model = transfer_subnetwork(source, {"neurons": neurons}, seed=SEED)
    gates = {}
    for layer in range(2):
        kept = neurons[layer].bool()
        for path in inputs:            # neuron j: output feature j (Conv1D weight is [in, out]: column j)
            weight = kept[None, :].expand(32, 48) if conv1d else kept[:, None].expand(48, 32)
            gates[path.format(layer) + ".weight"] = weight.clone()
            gates[path.format(layer) + ".bias"] = kept.clone()
        weight = kept[:, None].expand(48, 32) if conv1d else kept[None, :].expand(32, 48)
        gates[output.format(layer) + ".weight"] = weight.clone()   # its input feature j; the bias stays fresh
    _check_bits(model, source, gates)


def test_transplant_parametrization_by_hand_nan_proof_and_no_gradient_at_frozen_entries():
    from hf_heuristic_core.induction import Transplant

    gate = torch.tensor([[True, False, False], [False, True, True]])
    source = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    fresh = torch.tensor([[float("nan"), -2.0, -3.0], [-4.0, float("inf"), -6.0]], requires_grad=True)
    transplant = Transplant(gate, source)
    assert transplant.values.tolist() == [1.0, 5.0, 6.0]          # only the frozen values are stored
    out = transplant(fresh)
    assert out.tolist() == [[1.0, -2.0, -3.0], [-4.0, 5.0, 6.0]]   # g * w_src + (1 - g) * w_new, nan/inf ignored
    (out * torch.arange(1.0, 7.0).view(2, 3)).sum().backward()
    assert fresh.grad.tolist() == [[0.0, 2.0, 3.0], [4.0, 0.0, 0.0]]


def test_merging_a_deep_copy_leaves_the_original_transplanted_model_intact():
    import copy

    _, masks, model, batch, before = _transplanted_gpt2(["transformer.wte.weight", "transformer.h.0.mlp.c_fc.weight"])
    merged = merge_transplant(copy.deepcopy(model))
    assert type(merged.transformer.h[0].mlp.c_fc).__name__ == "Conv1D"
    assert type(model.transformer.h[0].mlp.c_fc).__name__ == "ParametrizedConv1D"
    with torch.no_grad():
        assert torch.equal(model(**batch).logits, before)             # the original still has its weights
        assert torch.equal(merged(**batch).logits, before)
    assert model.transformer.wte.parametrizations.weight[0].gate.sum() == masks["transformer.wte.weight"].sum()


def test_a_transplanted_model_as_source_gives_its_effective_weights():
    source = tiny_model("gpt2", task="causal_lm")
    first = transfer_subnetwork(source, _random_masks(source, ["transformer.h.0.attn.c_attn.weight"]), seed=1)
    with torch.no_grad():   # what training does to the trainable part (frozen entries must not follow)
        first.transformer.h[0].attn.c_attn.parametrizations.weight.original.add_(1.0)
    effective = first.transformer.h[0].attn.c_attn.weight.detach().clone()
    masks = {"transformer.h.0.attn.c_attn.weight": (torch.rand(32, 96, generator=torch.Generator().manual_seed(4))
                                                    < 0.5).float()}
    second = transfer_subnetwork(first, masks, seed=2)
    gate = masks["transformer.h.0.attn.c_attn.weight"].bool()
    assert torch.equal(second.transformer.h[0].attn.c_attn.weight[gate], effective[gate])


def test_bfloat16_source_gives_a_bfloat16_model_with_exact_transplanted_entries():
    source = tiny_model("llama", task="causal_lm", dtype=torch.bfloat16)
    masks = _random_masks(source, ["model.layers.0.self_attn.q_proj.weight", "model.embed_tokens.weight"])
    model = transfer_subnetwork(source, masks, seed=SEED)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    torch.manual_seed(SEED)
    reference = dict(type(source)(source.config).to(torch.bfloat16).named_parameters())
    effective, src = _effective(model), dict(source.named_parameters())
    for name, fresh in reference.items():
        gate = masks[name].bool() if name in masks else torch.zeros(fresh.shape, dtype=torch.bool)
        assert torch.equal(effective[name][gate], src[name].detach()[gate])
        assert torch.equal(effective[name][~gate], fresh.detach()[~gate]), name
