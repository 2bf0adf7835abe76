"""Phi-3 (fused `qkv_proj` with grouped-query offsets, fused `gate_up_proj`) exports slim and transplants through the
one ownership answer (`architectures.ownership`), with no code of its own outside its `ArchitectureMap` entry.

The mask-level references for Phi-3 (a zero-ablated head equals the model with that head's `o_proj` input columns
zeroed; all-ones masks reproduce the unwrapped logits exactly) run in `test_equivalence.py`, whose model types
include `phi3`. Here: the slim model's logits equal the hooked model's (unit and neuron masks, mean and zero
ablation, in memory and after `load_slim`), a uniform layout loads with plain `from_pretrained`, and the transplant
gates equal rows and columns worked out by hand from Phi-3's layout.
"""

from __future__ import annotations

import pytest
import torch
import transformers
from tiny_models import HIDDEN, INTERMEDIATE, make_batch, one_torch_thread, tiny_model  # noqa: F401

from hf_heuristic_core import PrunableModel, PruningConfig, load_slim, save_slim
from hf_heuristic_core.architectures.ownership import LayerOwnership, head_features, is_transposed
from hf_heuristic_core.induction import parameter_gates, transfer_subnetwork

pytestmark = pytest.mark.usefixtures("one_torch_thread")

HEADS, KV, HEAD_DIM = 4, 2, HIDDEN // 4   # tiny Phi-3: 4 query heads share 2 key/value heads
# layer 0: no head; layer 1: one head of kv group 0, both of group 1; layer 2: one head per group; layer 3: group 0
HEAD_MASK = torch.tensor([[0, 0, 0, 0], [1, 0, 1, 1], [0, 1, 1, 0], [1, 1, 0, 0]], dtype=torch.float)
MLP_MASK = torch.tensor([1, 0, 1, 0], dtype=torch.float)


def _phi3(num_layers: int = 4):
    return tiny_model("phi3", task="causal_lm", num_layers=num_layers)


def _logits(model, batch) -> torch.Tensor:
    with torch.no_grad():
        return model(**batch).logits


def _max_diff(a: torch.Tensor, b: torch.Tensor, attention_mask: torch.Tensor) -> float:
    return float((a - b).abs()[attention_mask.bool()].max())


def _wrapped(ablation: str, granularity: str = "unit"):
    prunable = PrunableModel(_phi3(), PruningConfig(ablation=ablation, granularity=granularity))
    if ablation == "mean":
        prunable.compute_means([make_batch("phi3", batch_size=5, seq_len=9, seed=7)], show_progress=False)
    return prunable.eval(), make_batch("phi3", batch_size=4, seq_len=9, padding="left")


def test_phi3_has_a_slim_map_with_its_fused_projections():
    model = _phi3()
    paths = PrunableModel(model, PruningConfig()).architecture.paths
    assert paths.slim.qkv == "self_attn.qkv_proj" and paths.slim.mlp_inputs == ("mlp.gate_up_proj",)
    layer = model.model.layers[0]
    assert layer.self_attn.qkv_proj.weight.shape == ((HEADS + 2 * KV) * HEAD_DIM, HIDDEN)
    assert layer.mlp.gate_up_proj.weight.shape == (2 * INTERMEDIATE, HIDDEN)


@pytest.mark.parametrize("ablation", ["mean", "zero"])
def test_phi3_unit_slim_equals_hooked_and_survives_reload(ablation, tmp_path):
    prunable, batch = _wrapped(ablation)
    prunable.set_masks(heads=HEAD_MASK, mlps=MLP_MASK)
    hooked = _logits(prunable, batch)
    with prunable.masks_disabled():   # the masks matter, or equality proves nothing
        assert _max_diff(hooked, _logits(prunable, batch), batch["attention_mask"]) > 1e-3
    slim = prunable.export_slim()
    assert _max_diff(hooked, _logits(slim, batch), batch["attention_mask"]) <= 1e-4
    # rows by hand: per layer, query slots x head_dim query rows + 2 x kv slots x head_dim key/value rows
    info = slim.config.hf_heuristic_core_slim
    for layer, data in zip(slim.model.layers, info["layers"]):
        q, kv = len(data["query_slots"]), len(data["kv_slots"])
        assert layer.self_attn.qkv_proj.weight.shape == ((q + 2 * kv) * HEAD_DIM, HIDDEN)
        assert layer.self_attn.o_proj.weight.shape == (HIDDEN, q * HEAD_DIM)
        assert layer.mlp.gate_up_proj.weight.shape[0] == 2 * data["intermediate"]
    assert [len(d["query_slots"]) for d in info["layers"]] == [1, 4, 2, 2]
    assert [d["intermediate"] for d in info["layers"]] == [INTERMEDIATE, 0, INTERMEDIATE, 0]
    # the model's config keeps the original head count; each rebuilt attention reads its own
    assert slim.config.num_attention_heads == HEADS
    assert slim.model.layers[1].self_attn.config.num_attention_heads == 4
    assert slim.model.layers[2].self_attn.config.num_attention_heads == 2
    save_slim(slim, tmp_path / "slim")
    reloaded = load_slim(tmp_path / "slim")
    assert _max_diff(hooked, _logits(reloaded, batch), batch["attention_mask"]) <= 1e-4


@pytest.mark.parametrize("ablation", ["mean", "zero"])
def test_phi3_neuron_slim_slices_both_halves_of_gate_up(ablation):
    prunable, batch = _wrapped(ablation, granularity="neuron")
    generator = torch.Generator().manual_seed(3)
    neurons = (torch.rand(4, INTERMEDIATE, generator=generator) < 0.4).float()
    neurons[1] = 0   # a layer with no neuron left
    prunable.set_masks(neurons=neurons)
    hooked = _logits(prunable, batch)
    with prunable.masks_disabled():
        assert _max_diff(hooked, _logits(prunable, batch), batch["attention_mask"]) > 1e-3
    slim = prunable.export_slim()
    assert _max_diff(hooked, _logits(slim, batch), batch["attention_mask"]) <= 1e-4
    for index, layer in enumerate(slim.model.layers):
        kept = int(neurons[index].sum())
        assert layer.mlp.gate_up_proj.weight.shape == (2 * kept, HIDDEN)
        assert layer.mlp.down_proj.weight.shape == (HIDDEN, kept)


def test_phi3_uniform_layout_loads_with_plain_from_pretrained(tmp_path):
    """Every layer keeps kv group 1 (heads 2 and 3) and its MLP: a stock Phi-3 config with `head_dim` states it."""
    prunable, batch = _wrapped("zero")
    prunable.set_masks(heads=torch.tensor([[0, 0, 1, 1]] * 4, dtype=torch.float), mlps=torch.ones(4))
    hooked = _logits(prunable, batch)
    slim = prunable.export_slim(uniform=True)
    assert slim.config.hf_heuristic_core_slim["stock"] is True
    assert (slim.config.num_attention_heads, slim.config.num_key_value_heads) == (2, 1)
    save_slim(slim, tmp_path / "slim")
    stock = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "slim").eval()
    assert type(stock) is type(slim)
    assert _max_diff(hooked, _logits(stock, batch), batch["attention_mask"]) <= 1e-4


def _expected_unit_gates(model, heads: torch.Tensor) -> dict[str, torch.Tensor]:
    """Phi-3's layout written out independently: qkv_proj rows are [q heads | k heads | v heads]; head h reads kv
    head h // (HEADS // KV); o_proj columns are the query heads' context vectors."""
    gates = {}
    for index, layer in enumerate(model.model.layers):
        kept = [h for h in range(HEADS) if heads[index, h]]
        if not kept:
            continue
        kv = sorted({h // (HEADS // KV) for h in kept})
        rows = [r for h in kept for r in range(h * HEAD_DIM, (h + 1) * HEAD_DIM)]
        rows += [HEADS * HEAD_DIM + r for k in kv for r in range(k * HEAD_DIM, (k + 1) * HEAD_DIM)]
        rows += [(HEADS + KV) * HEAD_DIM + r for k in kv for r in range(k * HEAD_DIM, (k + 1) * HEAD_DIM)]
        qkv = torch.zeros_like(layer.self_attn.qkv_proj.weight, dtype=torch.bool)
        qkv[rows] = True
        out = torch.zeros_like(layer.self_attn.o_proj.weight, dtype=torch.bool)
        out[:, [c for h in kept for c in range(h * HEAD_DIM, (h + 1) * HEAD_DIM)]] = True
        gates[f"model.layers.{index}.self_attn.qkv_proj.weight"] = qkv
        gates[f"model.layers.{index}.self_attn.o_proj.weight"] = out
    return gates


def test_phi3_unit_transplant_gates_match_the_layout_by_hand():
    source = _phi3()
    gates = parameter_gates(source, {"heads": HEAD_MASK})
    expected = _expected_unit_gates(source, HEAD_MASK)
    assert sorted(gates) == sorted(expected)
    for name in expected:
        assert torch.equal(gates[name], expected[name]), name


def test_phi3_neuron_transplant_gates_take_both_halves_of_gate_up():
    source = _phi3()
    neurons = torch.zeros(4, INTERMEDIATE)
    neurons[0, [1, 5, 47]] = 1
    neurons[2, [0]] = 1
    gates = parameter_gates(source, {"neurons": neurons})
    assert sorted(gates) == sorted(f"model.layers.{i}.mlp.{p}.weight" for i in (0, 2) for p in ("gate_up_proj",
                                                                                              "down_proj"))
    rows = gates["model.layers.0.mlp.gate_up_proj.weight"].all(dim=1).nonzero().flatten().tolist()
    assert rows == [1, 5, 47, INTERMEDIATE + 1, INTERMEDIATE + 5, INTERMEDIATE + 47]
    assert not gates["model.layers.0.mlp.gate_up_proj.weight"][[0, 2, INTERMEDIATE]].any()
    columns = gates["model.layers.0.mlp.down_proj.weight"].all(dim=0).nonzero().flatten().tolist()
    assert columns == [1, 5, 47]


def test_phi3_transplant_copies_exactly_what_the_heads_own():
    source = _phi3()
    model = transfer_subnetwork(source, {"heads": HEAD_MASK, "mlps": MLP_MASK}, seed=1)
    expected = _expected_unit_gates(source, HEAD_MASK)
    named = dict(source.named_parameters())

    def effective(name: str) -> torch.Tensor:   # transplanted tensors are parametrized (frozen part + fresh part)
        prefix, _, attribute = name.rpartition(".")
        return getattr(model.get_submodule(prefix), attribute)

    with torch.no_grad():
        for name, gate in expected.items():
            mine = effective(name)
            assert torch.equal(mine[gate], named[name][gate])
            assert not torch.equal(mine[~gate], named[name][~gate])   # the rest is fresh
        kept_mlp = "model.layers.0.mlp.gate_up_proj.weight"
        assert torch.equal(effective(kept_mlp), named[kept_mlp])


def test_ownership_reads_conv1d_transposed():
    """GPT-2's Conv1D stores [in, out]: the one check says so, and its fused c_attn offsets match q|k|v."""
    model = tiny_model("gpt2", task="causal_lm")
    prunable = PrunableModel(model, PruningConfig())
    layer = model.transformer.h[0]
    assert is_transposed(layer.attn.c_attn) and not is_transposed(tiny_model("llama").model.layers[0].mlp.down_proj)
    owner = LayerOwnership(layer, prunable.architecture.paths, HEADS, HEADS, HEAD_DIM)
    (module, rows), = owner.attention_input_rows([1], [1])
    assert module is layer.attn.c_attn
    assert rows == head_features([1], HEAD_DIM) + head_features([1], HEAD_DIM, HIDDEN) \
        + head_features([1], HEAD_DIM, 2 * HIDDEN)
    gate = torch.zeros_like(layer.attn.c_attn.weight, dtype=torch.bool)   # [in, out]
    for piece in owner.head_slices([1], [1]):
        if piece.module is layer.attn.c_attn and piece.attribute == "weight":
            piece.fill(gate)
    assert gate[:, rows].all() and int(gate.sum()) == len(rows) * HIDDEN
