"""Hook-based masks against independent references, for every mapped architecture (eager and SDPA attention).

References never go through the package's mask code: heads are ablated by editing the output projection's weights
of a deep copy of the original model, means are captured by this file's own hooks.
"""

from __future__ import annotations

import copy
import hashlib

import pytest
import torch

from tiny_models import one_torch_thread, shared_model_builds  # noqa: F401  (fixtures)
from tiny_models import (EAGER_ONLY, HEADS, HEAD_DIM, LAYERS, MODEL_TYPES, ManualMeans, attention_output,
                         constant_output, hooked_modules, logits_of, make_batch, mean_ablate_head_by_weights,
                         mlp_output, tiny_model, wrap, zero_head_inputs)

pytestmark = pytest.mark.usefixtures("one_torch_thread", "shared_model_builds")

CASES = [pytest.param(t, impl, id=f"{t}-{impl}") for t in MODEL_TYPES for impl in ("eager", "sdpa")
         if not (impl == "sdpa" and t in EAGER_ONLY)]


def _seed(model_type: str, salt: str = "") -> int:
    return int(hashlib.sha256((model_type + salt).encode()).hexdigest()[:8], 16)


def _random_heads(model_type: str, count: int = 3) -> list[tuple[int, int]]:
    """`count` distinct (layer, head) pairs, at least one per layer, deterministic per model type."""
    generator = torch.Generator().manual_seed(_seed(model_type, "heads"))
    chosen = {(layer, int(torch.randint(HEADS, (1,), generator=generator))) for layer in range(LAYERS)}
    while len(chosen) < count:
        chosen.add((int(torch.randint(LAYERS, (1,), generator=generator)),
                    int(torch.randint(HEADS, (1,), generator=generator))))
    return sorted(chosen)


def _head_mask(pairs) -> torch.Tensor:
    mask = torch.ones(LAYERS, HEADS)
    for layer, head in pairs:
        mask[layer, head] = 0
    return mask


@pytest.mark.parametrize("model_type, impl", CASES)
def test_architecture_resolved_with_projection_head_dim(model_type, impl):
    model = tiny_model(model_type, attn_implementation=impl)
    assert model.config._attn_implementation == impl
    pm = wrap(model, ablation="zero")
    assert (pm.num_layers, pm.num_heads, pm.head_dim) == (LAYERS, HEADS, HEAD_DIM[model_type])
    assert pm.model is model
    arch = pm.architecture
    for layer in range(LAYERS):
        assert arch.attention_outputs[layer] is attention_output(model, model_type, layer)
        assert arch.mlp_outputs[layer] is mlp_output(model, model_type, layer)


@pytest.mark.parametrize("model_type, impl", CASES)
@pytest.mark.parametrize("ablation", ["mean", "zero"])
def test_all_ones_masks_reproduce_unwrapped_logits_exactly(model_type, impl, ablation):
    model = tiny_model(model_type, attn_implementation=impl)
    batch = make_batch(model_type)
    expected = logits_of(model, batch)
    pm = wrap(model, ablation=ablation)
    if ablation == "mean":
        pm.compute_means([make_batch(model_type, seed=5)], show_progress=False)
    pm.eval()
    # The initial learned masks (log_alpha ~ N(10, 0.01)) keep every unit in eval mode.
    assert torch.equal(logits_of(pm, batch), expected)
    soft = pm.get_masks(binary=False)
    assert torch.equal(soft["heads"], torch.ones(LAYERS, HEADS)) and torch.equal(soft["mlps"], torch.ones(LAYERS))
    pm.pruning_config.eval_mask = "soft"
    assert torch.equal(logits_of(pm, batch), expected)
    pm.pruning_config.eval_mask = "binary"
    # Fixed all-ones masks.
    pm.set_masks(heads=torch.ones(LAYERS, HEADS), mlps=torch.ones(LAYERS))
    assert torch.equal(logits_of(pm, batch), expected)
    pm.train()  # fixed masks apply in training mode too
    with torch.no_grad():
        assert torch.equal(pm(**batch).logits, expected)


@pytest.mark.parametrize("model_type, impl", CASES)
def test_zero_ablating_random_heads_equals_zeroed_projection_columns(model_type, impl):
    model = tiny_model(model_type, attn_implementation=impl)
    reference = copy.deepcopy(model)
    pairs = _random_heads(model_type)
    for layer, head in pairs:
        zero_head_inputs(attention_output(reference, model_type, layer), [head], HEAD_DIM[model_type])
    batch = make_batch(model_type)
    expected = logits_of(reference, batch)
    assert not torch.allclose(expected, logits_of(model, batch), atol=1e-4), "reference must differ from the full model"

    pm = wrap(model, ablation="zero").eval()
    pm.set_masks(heads=_head_mask(pairs))
    torch.testing.assert_close(logits_of(pm, batch), expected, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("model_type, impl", CASES)
def test_zero_ablating_an_mlp_equals_zeroed_mlp_output(model_type, impl):
    model = tiny_model(model_type, attn_implementation=impl)
    reference = copy.deepcopy(model)
    layer = _seed(model_type, "mlp") % LAYERS
    constant_output(mlp_output(reference, model_type, layer), torch.zeros(1))
    batch = make_batch(model_type)
    expected = logits_of(reference, batch)

    pm = wrap(model, ablation="zero").eval()
    mlps = torch.ones(LAYERS)
    mlps[layer] = 0
    pm.set_masks(mlps=mlps)
    torch.testing.assert_close(logits_of(pm, batch), expected, atol=1e-6, rtol=1e-5)


def _means_data(model_type):
    return [make_batch(model_type, seed=11, padding="right"), make_batch(model_type, seed=12, batch_size=2)]


@pytest.mark.parametrize("model_type, impl", CASES)
def test_mean_ablating_a_head_equals_bias_folded_reference(model_type, impl):
    model = tiny_model(model_type, attn_implementation=impl)
    reference = copy.deepcopy(model)
    data = _means_data(model_type)
    mu = ManualMeans(copy.deepcopy(model), model_type).run(data).heads()  # [L, H, head_dim], fp64
    pairs = _random_heads(model_type, count=2)
    for layer, head in pairs:
        mean_ablate_head_by_weights(attention_output(reference, model_type, layer), head, HEAD_DIM[model_type],
                                    mu[layer, head])
    batch = make_batch(model_type, seed=3)
    expected = logits_of(reference, batch)

    pm = wrap(model, ablation="mean").eval()
    pm.compute_means(data, show_progress=False)
    pm.set_masks(heads=_head_mask(pairs))
    got = logits_of(pm, batch)
    torch.testing.assert_close(got, expected, atol=2e-5, rtol=1e-4)
    # Mean ablation is not zero ablation (the means are not all zero).
    with pm.using_ablation("zero"):
        assert not torch.allclose(logits_of(pm, batch), expected, atol=1e-4)


@pytest.mark.parametrize("model_type, impl", CASES)
def test_mean_ablating_an_mlp_equals_constant_output_reference(model_type, impl):
    model = tiny_model(model_type, attn_implementation=impl)
    reference = copy.deepcopy(model)
    data = _means_data(model_type)
    mu = ManualMeans(copy.deepcopy(model), model_type).run(data).mlps()  # [L, hidden]
    layer = _seed(model_type, "mlp-mean") % LAYERS
    constant_output(mlp_output(reference, model_type, layer), mu[layer])
    batch = make_batch(model_type, seed=4)
    expected = logits_of(reference, batch)

    pm = wrap(model, ablation="mean").eval()
    pm.compute_means(data, show_progress=False)
    mlps = torch.ones(LAYERS)
    mlps[layer] = 0
    pm.set_masks(mlps=mlps)
    torch.testing.assert_close(logits_of(pm, batch), expected, atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("model_type, impl", CASES)
@pytest.mark.parametrize("padding", ["right", "left"])
def test_compute_means_counts_only_real_tokens(model_type, impl, padding):
    model = tiny_model(model_type, attn_implementation=impl)
    data = [make_batch(model_type, seed=21, padding=padding, lengths=[7, 3, 5]),
            make_batch(model_type, seed=22, padding=padding, batch_size=2, lengths=[2, 6])]
    manual = ManualMeans(copy.deepcopy(model), model_type).run(data)
    assert manual.count == 7 + 3 + 5 + 2 + 6

    pm = wrap(model, ablation="mean")
    info = pm.compute_means(data, show_progress=False)
    assert info["token_count"] == manual.count
    assert pm.get_means()["heads"].dtype == torch.float32 and pm.get_means()["mlps"].dtype == torch.float32
    assert pm.get_means()["heads"].shape == (LAYERS, HEADS, HEAD_DIM[model_type])
    torch.testing.assert_close(pm.get_means()["heads"].double(), manual.heads(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(pm.get_means()["mlps"].double(), manual.mlps(), atol=1e-5, rtol=1e-5)

    # A mean over every position (padding included) differs, so the check above is not vacuous.
    sums = []
    handle = attention_output(pm.model, model_type, 0).register_forward_pre_hook(
        lambda module, args: sums.append(args[0].double().sum(dim=(0, 1))))
    try:
        with torch.no_grad(), pm.masks_disabled():
            for batch in data:
                pm(**batch)
    finally:
        handle.remove()
    all_positions = sum(sums) / sum(b["input_ids"].numel() for b in data)
    assert not torch.allclose(all_positions.view(HEADS, -1), manual.heads()[0], atol=1e-4)


@pytest.mark.parametrize("model_type, impl", CASES)
def test_unwrap_restores_bit_identical_model(model_type, impl):
    model = tiny_model(model_type, attn_implementation=impl)
    batch = make_batch(model_type)
    expected = logits_of(model, batch)
    # A parameter that was already frozen must stay frozen; the others trainable.
    frozen_name = next(name for name, _ in model.named_parameters())
    model.get_parameter(frozen_name).requires_grad_(False)
    requires_grad = {n: p.requires_grad for n, p in model.named_parameters()}
    hooks_before = {name: (dict(m._forward_pre_hooks), dict(m._forward_hooks)) for name, m in model.named_modules()}

    pm = wrap(model, ablation="zero")
    assert not any(p.requires_grad for p in model.parameters())  # base frozen while wrapped
    assert all(len(m._forward_pre_hooks) + len(m._forward_hooks) > 0 for m in hooked_modules(model, model_type))
    pm.set_masks(heads=_head_mask(_random_heads(model_type)), mlps=torch.zeros(LAYERS))
    pm.eval()
    assert not torch.allclose(logits_of(pm, batch), expected, atol=1e-4)

    unwrapped = pm.unwrap()
    assert unwrapped is model
    assert torch.equal(logits_of(unwrapped, batch), expected)
    for module in hooked_modules(model, model_type):
        assert len(module._forward_pre_hooks) == 0 and len(module._forward_hooks) == 0
    hooks_after = {name: (dict(m._forward_pre_hooks), dict(m._forward_hooks)) for name, m in model.named_modules()}
    assert hooks_after == hooks_before
    assert {n: p.requires_grad for n, p in model.named_parameters()} == requires_grad


def _random_fixed_masks(model_type):
    generator = torch.Generator().manual_seed(_seed(model_type, "fixed"))
    heads = (torch.rand(LAYERS, HEADS, generator=generator) > 0.5).float()
    heads[0, 0], heads[1, 1] = 0.0, 1.0
    return heads, torch.tensor([1.0, 0.0])


@pytest.mark.parametrize("model_type, impl", CASES)
@pytest.mark.parametrize("kind", ["fixed", "learned"])
def test_save_load_round_trip_gives_identical_outputs(model_type, impl, kind, tmp_path):
    model = tiny_model(model_type, attn_implementation=impl)
    batch = make_batch(model_type, seed=7)
    pm = wrap(model, ablation="mean")
    pm.compute_means(_means_data(model_type), show_progress=False)
    if kind == "fixed":
        heads, mlps = _random_fixed_masks(model_type)
        pm.set_masks(heads=heads, mlps=mlps)
    else:
        generator = torch.Generator().manual_seed(_seed(model_type, "logits"))
        with torch.no_grad():
            pm.mask_logits.heads.copy_(torch.randn(LAYERS, HEADS, generator=generator) * 3)
            pm.mask_logits.mlps.copy_(torch.tensor([4.0, -4.0]))
    pm.eval()
    expected = logits_of(pm, batch)
    expected_masks = pm.get_masks()
    assert (expected_masks["heads"] == 0).any() and (expected_masks["mlps"] == 0).any()
    pm.save_pretrained(tmp_path / "artifact")

    fresh = wrap(tiny_model(model_type, attn_implementation=impl))
    fresh.load_masks(tmp_path / "artifact")
    fresh.eval()
    assert torch.equal(fresh.get_means()["heads"], pm.get_means()["heads"]) and torch.equal(fresh.get_means()["mlps"], pm.get_means()["mlps"])
    for key in ("heads", "mlps"):
        assert torch.equal(fresh.get_masks()[key], expected_masks[key])
    assert torch.equal(logits_of(fresh, batch), expected)
    if kind == "learned":
        assert torch.equal(fresh.mask_logits.heads, pm.mask_logits.heads)
        assert torch.equal(fresh.mask_logits.mlps, pm.mask_logits.mlps)
