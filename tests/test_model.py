"""PrunableModel beyond per-architecture equivalence: hard-concrete math, sampling, ablation modes, gradient
checkpointing, dtypes, GQA, PEFT, binarization, sparsity, config, architecture detection, and every bad input.

Every reference is computed by hand or by editing weights / own hooks, never through the package's mask code.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import PretrainedConfig

import hf_heuristic_core
from hf_heuristic_core import (ArtifactError, HardConcrete, MaskShapeError, MissingMeansError, PrunableModel,
                               PruningConfig, PruningError, UnsupportedArchitectureError, architectures,
                               topk_binarize)

from tiny_models import one_torch_thread  # noqa: F401  (fixture)
from tiny_models import (HEAD_DIM, HEADS, HIDDEN, INTERMEDIATE, LAYERS, MODEL_TYPES, VOCAB, ManualMeans,
                         attention_output, constant_output, hooked_modules, layers_of, logits_of, make_batch,
                         mlp_output, tiny_model, zero_head_inputs)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

L_LEFT, R_RIGHT, BETA, EPS = -0.1, 1.1, 2.0 / 3.0, 1e-6
ARTIFACT_FILES = {"pruning_config.json", "masks.safetensors", "README.md"}


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def _wrap(model, **config) -> PrunableModel:
    return PrunableModel(model, PruningConfig(**config))


def _set_logits(pm: PrunableModel, heads=None, mlps=None) -> None:
    with torch.no_grad():
        if heads is not None:
            pm.mask_logits.heads.copy_(torch.as_tensor(heads, dtype=torch.float32))
        if mlps is not None:
            pm.mask_logits.mlps.copy_(torch.as_tensor(mlps, dtype=torch.float32))


# ============================================================================ hard-concrete constants and formulas
def test_config_defaults_are_the_recipe():
    config = PruningConfig()
    assert (config.limit_left, config.limit_right, config.temperature, config.eps) == (L_LEFT, R_RIGHT, BETA, EPS)
    assert (config.init_mean, config.init_std) == (10.0, 0.01)
    assert config.ablation == "mean"
    assert config.prune_heads and config.prune_mlps


def test_log_alpha_initialized_from_normal_10_001_in_fp32():
    torch.manual_seed(0)
    pm = _wrap(tiny_model("llama"), ablation="zero")
    for logit, shape in ((pm.mask_logits.heads, (LAYERS, HEADS)), (pm.mask_logits.mlps, (LAYERS,))):
        assert logit.dtype == torch.float32 and tuple(logit.shape) == shape and logit.requires_grad
        assert torch.all((logit - 10).abs() < 0.06)  # 6 sigma
    big = HardConcrete.from_config(PruningConfig()).init_logits((200, 100))
    assert big.dtype == torch.float32
    assert abs(float(big.mean()) - 10.0) < 1e-3
    assert abs(float(big.std()) - 0.01) < 5e-4
    # The wrapped model's own parameters are frozen; the mask logits train.
    assert not any(p.requires_grad for p in pm.model.parameters())
    trainable = {n for n, p in pm.named_parameters() if p.requires_grad}
    assert {"mask_state.logits.heads", "mask_state.logits.mlps"} <= trainable
    assert not any(n.startswith("model.") for n in trainable)


def test_reset_masks_starts_a_new_run_reproducibly_and_keeps_forced_units():
    pm = _wrap(tiny_model("bert"), init_mean=3.0, init_std=0.5)
    _set_logits(pm, heads=torch.full((LAYERS, HEADS), -7.0), mlps=torch.full((LAYERS,), 7.0))
    pm.force_units(heads=[(0, 1)], keep=False)
    pm.set_masks(heads=torch.ones(LAYERS, HEADS))

    pm.reset_masks(seed=5)
    generator = torch.Generator().manual_seed(5)    # heads first, then MLPs, from N(init_mean, init_std)
    expected_heads = torch.empty(LAYERS, HEADS).normal_(3.0, 0.5, generator=generator)
    expected_mlps = torch.empty(LAYERS).normal_(3.0, 0.5, generator=generator)
    expected_heads[0, 1] = -10.0                     # still pinned out
    assert torch.equal(pm.mask_logits.heads.detach(), expected_heads)
    assert torch.equal(pm.mask_logits.mlps.detach(), expected_mlps)
    assert pm.mask_state.fixed.get("heads") is None and pm.mask_state.fixed.get("mlps") is None
    first = pm.mask_state_dict()
    pm.reset_masks(seed=6)
    assert not torch.equal(pm.mask_logits.mlps.detach(), expected_mlps)
    pm.reset_masks(seed=5)
    assert all(torch.equal(first[k], v) for k, v in pm.mask_state_dict().items())


def test_expected_l0_by_hand():
    hc = HardConcrete()
    # P(z != 0) = sigmoid(log_alpha - beta * log(-l / r)); at log_alpha = 0: sigmoid((2/3) * log 11) = 0.83183...
    expected0 = _sigmoid(BETA * math.log(11.0))
    assert abs(expected0 - 0.8318) < 1e-4
    values = torch.tensor([0.0, -3.0, 2.5, 10.0], dtype=torch.float64)
    got = hc.prob_nonzero(values)
    for v, g in zip(values.tolist(), got.tolist()):
        assert g == pytest.approx(_sigmoid(v - BETA * math.log(0.1 / 1.1)), abs=1e-12)
    assert float(got[0]) == pytest.approx(expected0, abs=1e-12)


def test_expected_sparsity_by_hand_and_differentiable():
    pm = _wrap(tiny_model("llama"), ablation="zero")
    heads = torch.tensor([[0.0, -3.0, 2.5, 10.0], [1.0, -1.0, 0.5, -10.0]])
    mlps = torch.tensor([3.0, -2.0])
    _set_logits(pm, heads, mlps)
    kept = sum(_sigmoid(v + BETA * math.log(11.0)) for v in heads.flatten().tolist() + mlps.tolist())
    expected = 1 - kept / 10
    value = pm.expected_sparsity()
    assert float(value) == pytest.approx(expected, abs=1e-6)
    value.backward()
    assert pm.mask_logits.heads.grad is not None and (pm.mask_logits.heads.grad < 0).all()


def test_deterministic_value_by_hand():
    hc = HardConcrete()
    log_alpha = torch.tensor([0.0, 10.0, -10.0, 1.0])
    expected = [min(max(_sigmoid(v) * 1.2 - 0.1, 0.0), 1.0) for v in log_alpha.tolist()]
    assert hc.deterministic(log_alpha).tolist() == pytest.approx(expected, abs=1e-6)
    assert float(hc.deterministic(torch.tensor(0.0))) == pytest.approx(0.5, abs=1e-7)


def test_sample_formula_by_hand_with_generator():
    hc = HardConcrete()
    log_alpha = torch.linspace(-3, 3, 50, dtype=torch.float64)
    sample = hc.sample(log_alpha, generator=torch.Generator().manual_seed(123))
    u = torch.rand(50, generator=torch.Generator().manual_seed(123), dtype=torch.float64)
    u = u * (1 - 2 * EPS) + EPS
    s = torch.sigmoid((torch.log(u) - torch.log(1 - u) + log_alpha) / BETA)
    expected = (s * (R_RIGHT - L_LEFT) + L_LEFT).clamp(0, 1)
    torch.testing.assert_close(sample, expected, atol=1e-10, rtol=0)


def test_samples_always_in_unit_interval_and_hit_both_ends():
    hc = HardConcrete()
    generator = torch.Generator().manual_seed(0)
    samples = hc.sample(torch.zeros(20000), generator=generator)
    assert samples.min() >= 0 and samples.max() <= 1
    assert (samples == 0).any() and (samples == 1).any() and ((samples > 0) & (samples < 1)).any()
    # Empirical P(z != 0) at log_alpha = 0 matches the expected L0.
    assert float((samples != 0).float().mean()) == pytest.approx(_sigmoid(BETA * math.log(11.0)), abs=0.015)
    extreme = hc.sample(torch.tensor([-1e4, 1e4, 0.0]).repeat(1000), generator=generator)
    assert torch.isfinite(extreme).all() and extreme.min() >= 0 and extreme.max() <= 1


# ============================================================================ sampling in the wrapped model
class HeadRecorder:
    """Own pre-hooks around the package's: the raw input of each attention output projection (registered before
    wrapping) and the masked input (registered after), per call."""

    def __init__(self, model, model_type):
        self.model, self.model_type = model, model_type
        self.raw: dict[int, list[torch.Tensor]] = {i: [] for i in range(LAYERS)}
        self.masked: dict[int, list[torch.Tensor]] = {i: [] for i in range(LAYERS)}
        self.handles = [attention_output(model, model_type, i).register_forward_pre_hook(
            lambda m, a, i=i: self.raw[i].append(a[0].detach().clone())) for i in range(LAYERS)]

    def after_wrapping(self):
        self.handles += [attention_output(self.model, self.model_type, i).register_forward_pre_hook(
            lambda m, a, i=i: self.masked[i].append(a[0].detach().clone())) for i in range(LAYERS)]
        return self

    def z(self, layer: int, call: int = -1) -> torch.Tensor:
        """Observed per-head z under zero ablation: masked / raw (both [..., H, head_dim])."""
        raw = self.raw[layer][call].unflatten(-1, (HEADS, -1))
        masked = self.masked[layer][call].unflatten(-1, (HEADS, -1))
        ratio = masked / raw
        return ratio.reshape(-1, HEADS, ratio.shape[-1]).permute(1, 0, 2).reshape(HEADS, -1).median(dim=1).values

    def clear(self):
        for d in (self.raw, self.masked):
            for v in d.values():
                v.clear()


def test_training_samples_differ_between_forwards_and_eval_is_deterministic():
    model = tiny_model("gpt2")
    recorder = HeadRecorder(model, "gpt2")
    pm = _wrap(model, ablation="zero")
    recorder.after_wrapping()
    _set_logits(pm, torch.zeros(LAYERS, HEADS), torch.zeros(LAYERS))
    batch = make_batch("gpt2")
    pm.train()
    with torch.no_grad():
        first, second = pm(**batch).logits, pm(**batch).logits
    assert not torch.equal(first, second)
    z_first, z_second = recorder.z(0, 0), recorder.z(0, 1)
    assert not torch.allclose(z_first, z_second)
    for z in (z_first, z_second):
        assert (z >= -1e-6).all() and (z <= 1 + 1e-6).all()
    # The generator makes training draws reproducible.
    pm.generator = torch.Generator().manual_seed(7)
    with torch.no_grad():
        a = pm(**batch).logits
    pm.generator = torch.Generator().manual_seed(7)
    with torch.no_grad():
        b = pm(**batch).logits
    assert torch.equal(a, b)
    pm.eval()
    assert torch.equal(logits_of(pm, batch), logits_of(pm, batch))


def test_masks_drawn_once_per_forward_not_per_layer():
    """Logits changed while a forward runs (after layer 0) must not affect later layers of that forward."""
    model = tiny_model("llama")
    batch = make_batch("llama")
    expected = logits_of(model, batch)
    pm = _wrap(model, ablation="zero")
    _set_logits(pm, torch.full((LAYERS, HEADS), 10.0), torch.full((LAYERS,), 10.0))

    def sabotage(module, args, output):
        with torch.no_grad():
            pm.mask_logits.heads.fill_(-10.0)
            pm.mask_logits.mlps.fill_(-10.0)
    handle = mlp_output(model, "llama", 0).register_forward_hook(sabotage)
    try:
        pm.eval()
        assert torch.equal(logits_of(pm, batch), expected)  # every unit kept, in both layers
        _set_logits(pm, torch.full((LAYERS, HEADS), 10.0), torch.full((LAYERS,), 10.0))
        pm.train()
        pm.generator = torch.Generator().manual_seed(0)  # at log_alpha = 10 this seed keeps every unit
        with torch.no_grad():
            assert torch.equal(pm(**batch).logits, expected)
    finally:
        handle.remove()
    # Sanity: the sabotaged logits do prune everything in the next forward.
    pm.eval()
    assert not torch.allclose(logits_of(pm, batch), expected, atol=1e-3)


@pytest.mark.parametrize("model_type", ["llama", "bert"])
def test_gradient_checkpointing_recomputation_sees_the_same_masks(model_type):
    batch = make_batch(model_type)
    labels = torch.tensor([0, 1, 2])

    def run(checkpointing: bool):
        model = tiny_model(model_type)
        if checkpointing:
            model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        recorder = HeadRecorder(model, model_type)
        pm = _wrap(model, ablation="zero")
        recorder.after_wrapping()
        _set_logits(pm, torch.linspace(-1, 2, LAYERS * HEADS).view(LAYERS, HEADS), torch.tensor([0.5, 1.5]))
        pm.train()
        pm.generator = torch.Generator().manual_seed(1234)
        loss = pm(**batch, labels=labels).loss
        loss.backward()
        return pm, recorder, loss

    pm, recorder, loss = run(checkpointing=True)
    assert pm.model.is_activation_checkpointing
    for layer in range(LAYERS):
        # forward + recomputation in backward
        assert len(recorder.masked[layer]) == 2, "expected the checkpointed layer to be recomputed"
        assert torch.equal(recorder.raw[layer][0], recorder.raw[layer][1])
        assert torch.equal(recorder.masked[layer][0], recorder.masked[layer][1])
        assert not torch.equal(recorder.masked[layer][0], recorder.raw[layer][0])  # masks are not all ones
    assert pm.mask_logits.heads.grad is not None and pm.mask_logits.mlps.grad is not None
    assert pm.mask_logits.heads.grad.abs().sum() > 0 and pm.mask_logits.mlps.grad.abs().sum() > 0

    reference, _, reference_loss = run(checkpointing=False)
    assert torch.equal(loss.detach(), reference_loss.detach())
    torch.testing.assert_close(pm.mask_logits.heads.grad, reference.mask_logits.heads.grad, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(pm.mask_logits.mlps.grad, reference.mask_logits.mlps.grad, atol=1e-6, rtol=1e-5)


def test_gradient_checkpointing_two_forwards_before_one_backward():
    """Recomputation of the first forward must see the first forward's masks, even after a second forward."""
    batches = [make_batch("llama", seed=1), make_batch("llama", seed=2)]
    labels = torch.tensor([0, 1, 2])

    def run(checkpointing: bool):
        model = tiny_model("llama")
        if checkpointing:
            model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        pm = _wrap(model, ablation="zero")
        _set_logits(pm, torch.linspace(-1, 2, LAYERS * HEADS).view(LAYERS, HEADS), torch.tensor([0.5, 1.5]))
        pm.train()
        pm.generator = torch.Generator().manual_seed(99)
        loss = sum(pm(**b, labels=labels).loss for b in batches)
        loss.backward()
        return pm

    checkpointed, plain = run(True), run(False)
    torch.testing.assert_close(checkpointed.mask_logits.heads.grad, plain.mask_logits.heads.grad, atol=1e-6,
                               rtol=1e-5)
    torch.testing.assert_close(checkpointed.mask_logits.mlps.grad, plain.mask_logits.mlps.grad, atol=1e-6, rtol=1e-5)


# ============================================================================ ablation modes
def _roll_batch(x: torch.Tensor, batch_size: int) -> torch.Tensor:
    """Example i takes example i-1's activation (x may be [B, T, d] or OPT's flattened [B*T, d])."""
    shaped = x.reshape(batch_size, -1, x.shape[-1])
    return shaped.roll(1, dims=0).reshape(x.shape)


@pytest.mark.parametrize("model_type", ["bert", "gpt2", "llama", "opt", "distilbert"])
def test_resample_ablation_of_a_head_matches_hand_reference(model_type):
    model = tiny_model(model_type)
    batch = make_batch(model_type, batch_size=3)
    layer, head, d = 1, 2, HEAD_DIM[model_type]
    reference = copy.deepcopy(model)

    def replace_head(module, args):
        x = args[0]
        rolled = _roll_batch(x, 3)
        x = x.clone()
        x[..., head * d:(head + 1) * d] = rolled[..., head * d:(head + 1) * d]
        return (x,) + tuple(args[1:])
    attention_output(reference, model_type, layer).register_forward_pre_hook(replace_head)
    expected = logits_of(reference, batch)

    pm = _wrap(model, ablation="resample").eval()
    heads = torch.ones(LAYERS, HEADS)
    heads[layer, head] = 0
    pm.set_masks(heads=heads)
    torch.testing.assert_close(logits_of(pm, batch), expected, atol=1e-5, rtol=1e-4)
    assert not torch.allclose(expected, logits_of(tiny_model(model_type), batch), atol=1e-4)


@pytest.mark.parametrize("model_type", ["bert", "gpt2", "llama", "opt", "distilbert"])
def test_resample_ablation_of_an_mlp_matches_hand_reference(model_type):
    model = tiny_model(model_type)
    batch = make_batch(model_type, batch_size=3)
    reference = copy.deepcopy(model)
    mlp_output(reference, model_type, 0).register_forward_hook(lambda m, a, out: _roll_batch(out, 3))
    expected = logits_of(reference, batch)

    pm = _wrap(model, ablation="resample").eval()
    pm.set_masks(mlps=torch.tensor([0.0, 1.0]))
    torch.testing.assert_close(logits_of(pm, batch), expected, atol=1e-5, rtol=1e-4)


def test_resample_needs_two_examples():
    pm = _wrap(tiny_model("bert"), ablation="resample").eval()
    pm.set_masks(heads=torch.zeros(LAYERS, HEADS))
    with pytest.raises(PruningError, match="at least 2"):
        logits_of(pm, make_batch("bert", batch_size=1))


def test_ablation_modes_switch_and_soft_eval_masks_scale_heads():
    model = tiny_model("gpt2")
    batch = make_batch("gpt2")
    reference = copy.deepcopy(model)
    # A soft mask of 0.5 under zero ablation halves the head's input: scale its weight rows (Conv1D: [in, out]).
    with torch.no_grad():
        attention_output(reference, "gpt2", 0).weight[HEAD_DIM["gpt2"]:2 * HEAD_DIM["gpt2"], :] *= 0.5
    expected = logits_of(reference, batch)
    pm = _wrap(model, ablation="zero", eval_mask="soft").eval()
    heads = torch.full((LAYERS, HEADS), 10.0)
    heads[0, 1] = 0.0  # deterministic z = sigmoid(0) * 1.2 - 0.1 = 0.5
    _set_logits(pm, heads, torch.full((LAYERS,), 10.0))
    assert float(pm.get_masks(binary=False)["heads"][0, 1]) == pytest.approx(0.5)
    torch.testing.assert_close(logits_of(pm, batch), expected, atol=1e-6, rtol=1e-5)
    with pytest.raises(ValueError, match="ablation"):
        pm.set_ablation("noise")


# ============================================================================ dtypes, GQA, PEFT
def test_bf16_model_with_fp32_mask_parameters():
    model = tiny_model("llama", dtype=torch.bfloat16)
    assert next(model.parameters()).dtype == torch.bfloat16
    batch = make_batch("llama")
    pm = _wrap(model)  # mean ablation
    pm.compute_means([batch], show_progress=False)
    assert pm.mask_logits.heads.dtype == torch.float32 and pm.mask_logits.mlps.dtype == torch.float32
    assert pm.get_means()["heads"].dtype == torch.float32 and pm.get_means()["mlps"].dtype == torch.float32
    _set_logits(pm, torch.zeros(LAYERS, HEADS), torch.zeros(LAYERS))
    pm.train()
    out = pm(**batch, labels=torch.tensor([0, 1, 2]))
    assert out.logits.dtype == torch.bfloat16 and torch.isfinite(out.logits.float()).all()
    out.loss.backward()
    assert pm.mask_logits.heads.grad.dtype == torch.float32 and torch.isfinite(pm.mask_logits.heads.grad).all()
    assert pm.mask_logits.heads.grad.abs().sum() > 0
    pm.eval()
    assert logits_of(pm, batch).dtype == torch.bfloat16


def test_bf16_zero_ablation_equals_zeroed_columns():
    model = tiny_model("llama", dtype=torch.bfloat16)
    reference = copy.deepcopy(model)
    zero_head_inputs(attention_output(reference, "llama", 1), [3], HEAD_DIM["llama"])
    batch = make_batch("llama")
    pm = _wrap(model, ablation="zero").eval()
    heads = torch.ones(LAYERS, HEADS)
    heads[1, 3] = 0
    pm.set_masks(heads=heads)
    torch.testing.assert_close(logits_of(pm, batch), logits_of(reference, batch))


@pytest.mark.parametrize("model_type", ["llama", "gemma"])
def test_gqa_heads_sharing_a_kv_head_are_masked_independently(model_type):
    model = tiny_model(model_type)
    assert model.config.num_key_value_heads < model.config.num_attention_heads
    batch = make_batch(model_type)
    for head in range(HEADS):
        reference = copy.deepcopy(model)
        zero_head_inputs(attention_output(reference, model_type, 0), [head], HEAD_DIM[model_type])
        pm = _wrap(copy.deepcopy(model), ablation="zero").eval()
        heads = torch.ones(LAYERS, HEADS)
        heads[0, head] = 0
        pm.set_masks(heads=heads)
        torch.testing.assert_close(logits_of(pm, batch), logits_of(reference, batch), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("model_type, targets", [("bert", ["query", "value", "dense"]),
                                                 ("llama", ["q_proj", "o_proj", "down_proj"])])
def test_peft_lora_model_masks_base_and_adapter(model_type, targets):
    peft = pytest.importorskip("peft")
    base = tiny_model(model_type)
    torch.manual_seed(3)
    lora = peft.get_peft_model(base, peft.LoraConfig(r=4, lora_alpha=8, target_modules=targets,
                                                      init_lora_weights=False))
    batch = make_batch(model_type)
    merged = copy.deepcopy(lora).merge_and_unload()  # plain model with W + BA
    assert type(merged).__name__ != "PeftModel"
    with torch.no_grad():
        assert not torch.allclose(lora(**batch).logits, logits_of(tiny_model(model_type), batch), atol=1e-4)
    zero_head_inputs(attention_output(merged, model_type, 0), [1], HEAD_DIM[model_type])
    constant_output(mlp_output(merged, model_type, 1), torch.zeros(1))
    expected = logits_of(merged, batch)

    pm = _wrap(lora, ablation="zero").eval()
    assert (pm.num_layers, pm.num_heads, pm.head_dim) == (LAYERS, HEADS, HEAD_DIM[model_type])
    heads = torch.ones(LAYERS, HEADS)
    heads[0, 1] = 0
    pm.set_masks(heads=heads, mlps=torch.tensor([1.0, 0.0]))
    torch.testing.assert_close(logits_of(pm, batch), expected, atol=1e-5, rtol=1e-4)
    with pm.masks_disabled():
        with torch.no_grad():
            torch.testing.assert_close(pm(**batch).logits, lora(**batch).logits)


# ============================================================================ binarization and sparsity
def test_topk_binarize_exact_counts_and_lowest_units():
    generator = torch.Generator().manual_seed(0)
    scores = torch.randperm(40, generator=generator).float() - 20
    for sparsity in (0.0, 0.1, 0.25, 0.3, 0.55, 0.9, 0.99):
        mask = topk_binarize(scores, sparsity)
        k = round(sparsity * 40)
        assert int((mask == 0).sum()) == k
        assert set(torch.nonzero(mask == 0).flatten().tolist()) == set(torch.argsort(scores)[:k].tolist())
    groups = torch.arange(40) % 4
    mask = topk_binarize(scores, 0.3, groups)
    for g in range(4):
        members = torch.nonzero(groups == g).flatten()
        k = round(0.3 * 10)
        pruned = set(members[mask[members] == 0].tolist())
        assert len(pruned) == k
        assert pruned == set(members[torch.argsort(scores[members])[:k]].tolist())


HAND_HEADS = torch.tensor([[3.0, -2.0, 5.0, 0.5], [-1.0, 4.0, 2.0, 6.0]])
HAND_MLPS = torch.tensor([1.0, -3.0])


def _lowest_units(heads, mlps, k):
    units = [(float(heads[l, h]), ("heads", l, h)) for l in range(LAYERS) for h in range(HEADS)]
    units += [(float(mlps[l]), ("mlps", l)) for l in range(LAYERS)]
    return {name for _, name in sorted(units)[:k]}


def _pruned(masks):
    names = {("heads", l, h) for l in range(LAYERS) for h in range(HEADS) if masks["heads"][l, h] == 0}
    return names | {("mlps", l) for l in range(LAYERS) if masks["mlps"][l] == 0}


@pytest.mark.parametrize("sparsity", [0.0, 0.1, 0.3, 0.5, 0.8, 0.9])
def test_get_masks_sparsity_prunes_the_lowest_log_alpha_globally(sparsity):
    pm = _wrap(tiny_model("llama"), ablation="zero")
    _set_logits(pm, HAND_HEADS, HAND_MLPS)
    masks = pm.get_masks(sparsity=sparsity)
    assert masks["heads"].shape == (LAYERS, HEADS) and masks["mlps"].shape == (LAYERS,)
    assert set(torch.cat([masks["heads"].flatten(), masks["mlps"]]).unique().tolist()) <= {0.0, 1.0}
    k = round(sparsity * 10)
    assert _pruned(masks) == _lowest_units(HAND_HEADS, HAND_MLPS, k)
    assert pm.sparsity(masks=masks) == pytest.approx(k / 10)


@pytest.mark.parametrize("sparsity", [0.2, 0.4, 0.6])
def test_get_masks_sparsity_per_layer(sparsity):
    pm = _wrap(tiny_model("llama"), ablation="zero", binarization_scope="per_layer")
    _set_logits(pm, HAND_HEADS, HAND_MLPS)
    masks = pm.get_masks(sparsity=sparsity)
    k = round(sparsity * (HEADS + 1))
    for layer in range(LAYERS):
        units = [(float(HAND_HEADS[layer, h]), ("heads", layer, h)) for h in range(HEADS)]
        units.append((float(HAND_MLPS[layer]), ("mlps", layer)))
        expected = {name for _, name in sorted(units)[:k]}
        got = {n for n in _pruned(masks) if n[1] == layer}
        assert got == expected


def test_default_binary_masks_use_expected_sparsity_rounded():
    pm = _wrap(tiny_model("llama"), ablation="zero")
    _set_logits(pm, HAND_HEADS, HAND_MLPS)
    kept = sum(_sigmoid(v + BETA * math.log(11.0)) for v in HAND_HEADS.flatten().tolist() + HAND_MLPS.tolist())
    k = round(10 - kept)
    assert k >= 1
    assert _pruned(pm.get_masks()) == _lowest_units(HAND_HEADS, HAND_MLPS, k)


def test_threshold_rule_by_hand():
    pm = _wrap(tiny_model("llama"), ablation="zero", binarization="threshold")
    heads = torch.tensor([[10.0, 10.0, 10.0, 10.0], [-10.0, -10.0, 1.0, -0.5]])
    mlps = torch.tensor([-0.2, 2.0])
    _set_logits(pm, heads, mlps)

    def rule(values: list[float]) -> list[float]:
        # k = round(sum P(z = 0)) smallest get 0, the rest keep sigmoid(0.8 * log_alpha / beta), then > 0.5.
        k = round(sum(1 - _sigmoid(v + BETA * math.log(11.0)) for v in values))
        smallest = set(sorted(range(len(values)), key=lambda i: values[i])[:k])
        soft = [0.0 if i in smallest else _sigmoid(0.8 * v / BETA) for i, v in enumerate(values)]
        return [1.0 if s > 0.5 else 0.0 for s in soft]

    expected_heads = torch.tensor(rule(heads.flatten().tolist())).view(LAYERS, HEADS)
    expected_mlps = torch.tensor(rule(mlps.tolist()))
    # By hand: two -10 heads are the expected zeros; -0.5 gives sigmoid(-0.6) < 0.5; 1.0 gives sigmoid(1.2) > 0.5.
    assert expected_heads.tolist() == [[1, 1, 1, 1], [0, 0, 1, 0]]
    assert expected_mlps.tolist() == [0, 1]  # sum P(z=0) = 0.22 + 0.003 -> k = 0; sigmoid(-0.24) < 0.5
    masks = pm.get_masks()
    assert torch.equal(masks["heads"], expected_heads)
    assert torch.equal(masks["mlps"], expected_mlps)
    # get_masks(sparsity=...) still means exact top-k.
    assert int((pm.get_masks(sparsity=0.5)["heads"] == 0).sum() + (pm.get_masks(sparsity=0.5)["mlps"] == 0).sum()) \
        == 5


def _param_count(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize("model_type, attention, mlp_parts", [
    ("llama", "self_attn", ["mlp"]),
    ("gpt2", "attn", ["mlp"]),
])
def test_sparsity_per_unit_and_parameter_weighted_by_hand(model_type, attention, mlp_parts):
    model = tiny_model(model_type)
    layer0 = layers_of(model, model_type)[0]
    per_head = _param_count(layer0.get_submodule(attention)) / HEADS
    per_mlp = sum(_param_count(layer0.get_submodule(p)) for p in mlp_parts)
    if model_type == "llama":  # q 32x32, k and v 32x16 (2 KV heads), o 32x32; gate, up, down 32x48
        assert (per_head, per_mlp) == ((1024 + 512 + 512 + 1024) / 4, 3 * 32 * 48)
    pm = _wrap(model, ablation="zero")
    heads = torch.ones(LAYERS, HEADS)
    heads[0, 1] = heads[1, 2] = heads[1, 3] = 0
    pm.set_masks(heads=heads, mlps=torch.tensor([1.0, 0.0]))
    assert pm.sparsity() == pytest.approx(4 / 10)
    weighted = (3 * per_head + per_mlp) / (LAYERS * HEADS * per_head + LAYERS * per_mlp)
    assert pm.sparsity(weighted=True) == pytest.approx(weighted)
    pm.clear_masks()
    assert pm.sparsity() == 0.0 and pm.sparsity(weighted=True) == 0.0
    heads_only = _wrap(tiny_model(model_type), ablation="zero", prune_mlps=False)
    heads_only.set_masks(heads=heads)
    assert heads_only.sparsity() == pytest.approx(3 / 8)
    assert heads_only.sparsity(weighted=True) == pytest.approx(3 / 8)


# ============================================================================ API
def test_wrapper_forwards_kwargs_and_exposes_model():
    model = tiny_model("bert")
    batch = make_batch("bert")
    labels = torch.tensor([0, 2, 1])
    with torch.no_grad():
        expected = model(**batch, labels=labels)
    pm = _wrap(model, ablation="zero").eval()
    assert pm.model is model and pm.num_layers == LAYERS and pm.num_heads == HEADS
    assert pm.config is model.config
    with torch.no_grad():
        out = pm(**batch, labels=labels)
    assert torch.equal(out.loss, expected.loss) and torch.equal(out.logits, expected.logits)
    # positional input_ids too
    with torch.no_grad():
        assert torch.equal(pm(batch["input_ids"], attention_mask=batch["attention_mask"]).logits, expected.logits)


def test_set_clear_get_masks_and_masks_disabled():
    model = tiny_model("gpt2")
    batch = make_batch("gpt2")
    full = logits_of(model, batch)
    pm = _wrap(model, ablation="zero").eval()
    heads = torch.ones(LAYERS, HEADS)
    heads[0, 0] = 0
    pm.set_masks(heads=heads)
    masks = pm.get_masks()
    assert torch.equal(masks["heads"], heads) and torch.equal(masks["mlps"], torch.ones(LAYERS))
    masked = logits_of(pm, batch)
    assert not torch.allclose(masked, full, atol=1e-4)
    with pm.masks_disabled():
        assert torch.equal(logits_of(pm, batch), full)
    assert torch.equal(logits_of(pm, batch), masked)
    pm.set_masks(mlps=torch.tensor([0.0, 1.0]))  # heads stay fixed
    assert torch.equal(pm.get_masks()["heads"], heads)
    pm.clear_masks()
    assert torch.equal(logits_of(pm, batch), full)  # initial learned masks keep everything
    assert torch.equal(pm.get_masks()["heads"], torch.ones(LAYERS, HEADS))


def test_eval_forward_follows_logits_edited_in_place():
    """The eval forward must apply the masks get_masks() reports, however the logits were changed
    (optimizer step, copy_ under no_grad, or CoFi-style `.data` edits) once the model is put in eval mode."""
    model = tiny_model("bert")
    batch = make_batch("bert")
    full = logits_of(model, batch)
    reference = copy.deepcopy(model)
    for layer in range(LAYERS):
        zero_head_inputs(attention_output(reference, "bert", layer), range(HEADS), HEAD_DIM["bert"])
        constant_output(mlp_output(reference, "bert", layer), torch.zeros(1))
    everything_pruned = logits_of(reference, batch)

    pm = _wrap(model, ablation="zero").eval()
    assert torch.equal(logits_of(pm, batch), full)
    _set_logits(pm, torch.full((LAYERS, HEADS), -10.0), torch.full((LAYERS,), -10.0))  # copy_ under no_grad
    assert pm.get_masks()["heads"].sum() == 0
    torch.testing.assert_close(logits_of(pm, batch), everything_pruned, atol=1e-6, rtol=1e-5)

    pm.train()
    pm.mask_logits.heads.data.fill_(10.0)
    pm.mask_logits.mlps.data.fill_(10.0)
    pm.eval()
    assert torch.equal(pm.get_masks()["heads"], torch.ones(LAYERS, HEADS))
    assert torch.equal(logits_of(pm, batch), full)


def test_mean_ablation_without_means_raises_and_disabled_masks_run():
    pm = _wrap(tiny_model("bert"))
    batch = make_batch("bert")
    for mode in ("eval", "train"):
        getattr(pm, mode)()
        with pytest.raises(MissingMeansError, match="compute_means"):
            pm(**batch)
    with pm.masks_disabled():
        pm(**batch)
    with pm.using_ablation("zero"):
        pm(**batch)
    assert pm.pruning_config.ablation == "mean"


def test_compute_means_accepts_dataloader_and_datasets(tmp_path):
    datasets = pytest.importorskip("datasets")
    model = tiny_model("bert")
    generator = torch.Generator().manual_seed(0)
    lengths = [5, 3, 7, 2, 6]
    rows = [{"input_ids": torch.randint(3, VOCAB, (n,), generator=generator).tolist(), "label": i % 3}
            for i, n in enumerate(lengths)]
    # Reference batches: right-padded with the model's pad id, batch size 2.
    padded = []
    for start in range(0, len(rows), 2):
        chunk = rows[start:start + 2]
        width = max(len(r["input_ids"]) for r in chunk)
        ids = torch.tensor([r["input_ids"] + [0] * (width - len(r["input_ids"])) for r in chunk])
        mask = torch.tensor([[1] * len(r["input_ids"]) + [0] * (width - len(r["input_ids"])) for r in chunk])
        padded.append({"input_ids": ids, "attention_mask": mask})
    manual = ManualMeans(copy.deepcopy(model), "bert").run(padded)
    assert manual.count == sum(lengths)

    pm = _wrap(copy.deepcopy(model))
    info = pm.compute_means(datasets.Dataset.from_list(rows), batch_size=2, show_progress=False)
    assert info["token_count"] == sum(lengths)
    torch.testing.assert_close(pm.get_means()["heads"].double(), manual.heads(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(pm.get_means()["mlps"].double(), manual.mlps(), atol=1e-5, rtol=1e-5)

    loader = torch.utils.data.DataLoader([{**b, "labels": torch.zeros(len(b["input_ids"]), dtype=torch.long)}
                                          for b in padded], batch_size=None)
    pm2 = _wrap(copy.deepcopy(model))
    info2 = pm2.compute_means(loader, show_progress=False)
    assert info2["token_count"] == sum(lengths)
    torch.testing.assert_close(pm2.get_means()["heads"].double(), manual.heads(), atol=1e-5, rtol=1e-5)
    assert info2["data_fingerprint"] == info["data_fingerprint"]  # same tokens, same fingerprint

    pm3 = _wrap(copy.deepcopy(model))
    other = pm3.compute_means([make_batch("bert", seed=9)], show_progress=False)
    assert other["data_fingerprint"] != info["data_fingerprint"]


@pytest.mark.parametrize("granularity", ["unit", "neuron"])
def test_get_means_mirrors_set_means_by_kind(granularity):
    pm = PrunableModel(tiny_model("bert"), PruningConfig(granularity=granularity, ablation="mean"))
    assert pm.get_means() == {}
    generator = torch.Generator().manual_seed(0)
    shapes = {kind: pm.kinds[kind].means_shape for kind in pm.kinds}
    means = {kind: torch.randn(shape, generator=generator, dtype=torch.float64) for kind, shape in shapes.items()}
    first = next(iter(means))
    pm.set_means({first: means[first]})
    assert list(pm.get_means()) == [first]   # kinds without means are left out
    pm.set_means(means)
    got = pm.get_means()
    assert set(got) == set(shapes)
    for kind, value in means.items():
        assert got[kind].dtype == torch.float32 and tuple(got[kind].shape) == shapes[kind]
        assert torch.equal(got[kind], value.float())
    got[first].add_(1.0)   # a copy: editing it leaves the model's means alone
    assert torch.equal(pm.get_means()[first], means[first].float())
    pm.set_means(pm.get_means())
    assert all(torch.equal(pm.get_means()[k], means[k].float()) for k in means)
    if granularity == "unit":   # the two-tensor form of set_means reads back by kind
        pm.set_means(means["heads"] * 2, means["mlps"] * 3)
        assert torch.equal(pm.get_means()["heads"], (means["heads"] * 2).float())
        assert torch.equal(pm.get_means()["mlps"], (means["mlps"] * 3).float())


def test_means_saved_with_token_count_fingerprint_and_base_model(tmp_path):
    model = tiny_model("bert")
    model.save_pretrained(tmp_path / "base")
    reloaded = type(model).from_pretrained(tmp_path / "base")
    pm = _wrap(reloaded)
    batch = make_batch("bert")
    info = pm.compute_means([batch], show_progress=False)
    assert info["token_count"] == int(batch["attention_mask"].sum())
    assert isinstance(info["data_fingerprint"], str) and len(info["data_fingerprint"]) >= 16
    assert info["base_model"] == str(tmp_path / "base")
    pm.save_pretrained(tmp_path / "artifact")
    with safe_open(str(tmp_path / "artifact" / "masks.safetensors"), framework="pt") as handle:
        metadata = handle.metadata()
        assert set(handle.keys()) >= {"means.heads", "means.mlps", "logits.heads", "logits.mlps"}
    saved = json.loads(metadata["means"])
    assert saved["token_count"] == info["token_count"]
    assert saved["data_fingerprint"] == info["data_fingerprint"]
    assert saved["base_model"] == str(tmp_path / "base")
    assert "base_model_revision" in saved
    config = json.loads((tmp_path / "artifact" / "pruning_config.json").read_text())
    assert config["base_model_name_or_path"] == str(tmp_path / "base")
    assert (config["model_type"], config["num_layers"], config["num_heads"], config["head_dim"]) == \
        ("bert", LAYERS, HEADS, HEAD_DIM["bert"])


def test_artifact_is_three_small_files_and_loads_back(tmp_path):
    pm = _wrap(tiny_model("llama"))
    pm.compute_means([make_batch("llama")], show_progress=False)
    heads = torch.ones(LAYERS, HEADS)
    heads[1, 0] = 0
    pm.set_masks(heads=heads)
    pm.save_pretrained(tmp_path)
    assert {p.name for p in tmp_path.iterdir()} == ARTIFACT_FILES
    assert sum(p.stat().st_size for p in tmp_path.iterdir()) < 32 * 1024
    card = (tmp_path / "README.md").read_text()
    assert "hf_heuristic_core" in card and "llama" in card
    artifact = hf_heuristic_core.read_artifact(tmp_path)
    assert torch.equal(artifact.heads, heads) and torch.equal(artifact.mlps, torch.ones(LAYERS))
    assert artifact.config.model_type == "llama"


def test_from_pretrained_loads_base_model_and_masks(tmp_path):
    model = tiny_model("gpt2")
    model.save_pretrained(tmp_path / "base")
    base = type(model).from_pretrained(tmp_path / "base").eval()
    pm = _wrap(base, ablation="zero")
    pm.set_masks(heads=torch.tensor([[1.0, 0, 1, 1], [1, 1, 0, 1]]), mlps=torch.tensor([1.0, 0.0]))
    pm.eval()
    batch = make_batch("gpt2")
    expected = logits_of(pm, batch)
    pm.save_pretrained(tmp_path / "masks")
    for loaded in (PrunableModel.from_pretrained(tmp_path / "base", masks=tmp_path / "masks"),
                   PrunableModel.from_pretrained(tmp_path / "masks")):
        loaded.eval()
        assert type(loaded.model).__name__ == "GPT2ForSequenceClassification"
        assert torch.equal(logits_of(loaded, batch), expected)


# ============================================================================ PruningConfig
@pytest.mark.parametrize("kwargs, match", [
    ({"ablation": "noise"}, "ablation"),
    ({"binarization": "random"}, "binarization"),
    ({"binarization_scope": "per_head"}, "binarization_scope"),
    ({"eval_mask": "sampled"}, "eval_mask"),
    ({"prune_heads": False, "prune_mlps": False}, "prune_heads"),
    ({"limit_left": 0.1}, "limit_left"),
    ({"limit_right": 0.9}, "limit_right"),
    ({"temperature": 0.0}, "temperature"),
    ({"temperature": -1.0}, "temperature"),
    ({"eps": 0.0}, "eps"),
    ({"eps": 0.7}, "eps"),
    ({"init_std": -0.1}, "init_std"),
    ({"init_mean": float("nan")}, "init_mean"),
    ({"threshold": 0.0}, "threshold"),
    ({"threshold": 1.0}, "threshold"),
    ({"num_heads": 0}, "num_heads"),
])
def test_config_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        PruningConfig(**kwargs)


def test_config_dict_and_json_round_trip(tmp_path):
    config = PruningConfig(ablation="resample", binarization="threshold", binarization_scope="per_layer",
                           threshold=0.3, eval_mask="soft", init_mean=3.0, init_std=0.5, prune_mlps=False,
                           layers_path="encoder.layer", attention_output="attention.output.dense",
                           mlp_output="output.dense", num_heads=4, extra={"seed": 3, "note": "x"})
    assert PruningConfig.from_dict(config.to_dict()) == config
    assert json.loads(json.dumps(config.to_dict())) == config.to_dict()
    path = config.save_pretrained(tmp_path)
    assert path == tmp_path / "pruning_config.json"
    assert {p.name for p in tmp_path.iterdir()} == {"pruning_config.json"}
    assert PruningConfig.from_pretrained(tmp_path) == config
    assert PruningConfig.from_pretrained(path) == config
    with pytest.raises(ValueError, match="unknown"):
        PruningConfig.from_dict({**config.to_dict(), "bogus": 1})
    with pytest.raises(ValueError, match="ablation"):
        PruningConfig.from_dict({**config.to_dict(), "ablation": "bogus"})
    path.write_text('{"ablation": "me')
    with pytest.raises(ValueError, match="JSON"):
        PruningConfig.from_pretrained(tmp_path)
    with pytest.raises(FileNotFoundError):
        PruningConfig.from_pretrained(tmp_path / "nowhere")


def test_wrapper_records_what_the_masks_are_for_without_touching_callers_config():
    config = PruningConfig(ablation="zero")
    pm = PrunableModel(tiny_model("qwen3"), config)
    assert config.model_type is None  # the caller's config is not mutated
    saved = pm.pruning_config
    assert (saved.model_type, saved.num_layers, saved.num_heads, saved.head_dim, saved.hidden_size) == \
        ("qwen3", LAYERS, HEADS, 16, HIDDEN)


# ============================================================================ architecture detection and overrides
@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_suffix_detection_finds_the_same_modules_as_the_map(model_type, monkeypatch):
    model = tiny_model(model_type)
    monkeypatch.delitem(architectures.ARCHITECTURES, model_type)
    pm = _wrap(model, ablation="zero")
    assert pm.architecture.detected
    for layer in range(LAYERS):
        assert pm.architecture.attention_outputs[layer] is attention_output(model, model_type, layer)
        assert pm.architecture.mlp_outputs[layer] is mlp_output(model, model_type, layer)
    assert pm.head_dim == HEAD_DIM[model_type]


def test_detected_llama_zero_ablation_equivalence(monkeypatch):
    monkeypatch.delitem(architectures.ARCHITECTURES, "llama")
    model = tiny_model("llama")
    reference = copy.deepcopy(model)
    zero_head_inputs(attention_output(reference, "llama", 1), [0, 2], HEAD_DIM["llama"])
    pm = _wrap(model, ablation="zero").eval()
    pm.set_masks(heads=torch.tensor([[1.0, 1, 1, 1], [0, 1, 0, 1]]))
    batch = make_batch("llama")
    torch.testing.assert_close(logits_of(pm, batch), logits_of(reference, batch), atol=1e-6, rtol=1e-5)


class ToyConfig(PretrainedConfig):
    model_type = "toy_arch"

    def __init__(self, hidden=HIDDEN, heads=HEADS, layers=LAYERS, with_heads=True, **kwargs):
        super().__init__(**kwargs)
        self.hidden = hidden
        if with_heads:
            self.num_attention_heads = heads
        self.num_hidden_layers = layers


class ToyBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.mix_in = nn.Linear(HIDDEN, HIDDEN)
        self.mix = nn.Linear(HIDDEN, HIDDEN)
        self.ffn_in = nn.Linear(HIDDEN, INTERMEDIATE)
        self.ffn_out = nn.Linear(INTERMEDIATE, HIDDEN)

    def forward(self, x):
        x = x + self.mix(torch.tanh(self.mix_in(x)))
        return x + self.ffn_out(torch.relu(self.ffn_in(x)))


class ToyModel(nn.Module):
    def __init__(self, config, as_list=True):
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(VOCAB, HIDDEN)
        blocks = [ToyBlock() for _ in range(config.num_hidden_layers)]
        if as_list:
            self.blocks = nn.ModuleList(blocks)
        else:
            self.first, self.second = blocks
        self.head = nn.Linear(HIDDEN, 3)

    def forward(self, input_ids, attention_mask=None):
        x = self.embed(input_ids)
        for block in (self.blocks if hasattr(self, "blocks") else (self.first, self.second)):
            x = block(x)
        return self.head(x)


def _toy(**kwargs):
    torch.manual_seed(0)
    return ToyModel(ToyConfig(**kwargs)).eval()


def test_unknown_architecture_error_names_type_candidates_and_override():
    with pytest.raises(UnsupportedArchitectureError, match="toy_arch") as info:
        _wrap(_toy(), ablation="zero")
    message = str(info.value)
    for candidate in ("mix", "ffn_in", "ffn_out"):
        assert f"'{candidate}'" in message
    assert "PruningConfig(" in message
    # No layer list at all.
    torch.manual_seed(0)
    with pytest.raises(UnsupportedArchitectureError, match="toy_arch") as info:
        _wrap(ToyModel(ToyConfig(), as_list=False), ablation="zero")
    assert "PruningConfig(layers_path=" in str(info.value)


def test_overrides_make_an_unknown_architecture_work():
    model = _toy()
    reference = copy.deepcopy(model)
    zero_head_inputs(reference.blocks[1].mix, [2], HIDDEN // HEADS)
    with torch.no_grad():
        reference.blocks[0].ffn_out.weight.zero_()
        reference.blocks[0].ffn_out.bias.zero_()
    pm = _wrap(model, ablation="zero", layers_path="blocks", attention_output="mix", mlp_output="ffn_out").eval()
    assert (pm.num_layers, pm.num_heads, pm.head_dim) == (LAYERS, HEADS, HIDDEN // HEADS)
    pm.set_masks(heads=torch.tensor([[1.0, 1, 1, 1], [1, 1, 0, 1]]), mlps=torch.tensor([0.0, 1.0]))
    ids = make_batch("bert")["input_ids"]
    with torch.no_grad():
        torch.testing.assert_close(pm(ids), reference(ids), atol=1e-6, rtol=1e-5)


def test_num_heads_missing_from_config_needs_override():
    with pytest.raises(UnsupportedArchitectureError, match=r"num_heads"):
        _wrap(_toy(with_heads=False), ablation="zero", attention_output="mix", mlp_output="ffn_out")
    pm = _wrap(_toy(with_heads=False), ablation="zero", attention_output="mix", mlp_output="ffn_out", num_heads=2)
    assert (pm.num_heads, pm.head_dim) == (2, HIDDEN // 2)


def test_num_heads_override_on_a_mapped_model():
    model = tiny_model("llama")
    reference = copy.deepcopy(model)
    zero_head_inputs(attention_output(reference, "llama", 0), [1], 16)  # "head" 1 of 2 = columns 16:32
    pm = _wrap(model, ablation="zero", num_heads=2).eval()
    assert (pm.num_heads, pm.head_dim) == (2, 16)
    pm.set_masks(heads=torch.tensor([[1.0, 0.0], [1.0, 1.0]]))
    batch = make_batch("llama")
    torch.testing.assert_close(logits_of(pm, batch), logits_of(reference, batch), atol=1e-6, rtol=1e-5)
    with pytest.raises(UnsupportedArchitectureError, match="multiple of num_heads"):
        _wrap(tiny_model("llama"), ablation="zero", num_heads=3)


def test_bad_path_override_lists_candidates():
    with pytest.raises(UnsupportedArchitectureError, match="bert") as info:
        _wrap(tiny_model("bert"), ablation="zero", attention_output="attention.nope")
    assert "attention.output.dense" in str(info.value)
    with pytest.raises(UnsupportedArchitectureError, match="layers_path"):
        _wrap(tiny_model("bert"), ablation="zero", layers_path="encoder.nope")


# ============================================================================ bad inputs
@pytest.mark.parametrize("heads, mlps, match", [
    (torch.ones(LAYERS, HEADS + 1), None, "shape"),
    (torch.ones(LAYERS * HEADS), None, "shape"),
    (torch.ones(HEADS, LAYERS + 1), None, "shape"),
    (None, torch.ones(LAYERS + 1), "shape"),
    (None, torch.ones(LAYERS, 1), "shape"),
    (torch.full((LAYERS, HEADS), float("nan")), None, "NaN"),
    (torch.full((LAYERS, HEADS), 2.0), None, r"\[0, 1\]"),
    (None, torch.tensor([-1.0, 1.0]), r"\[0, 1\]"),
])
def test_wrong_masks_raise(heads, mlps, match):
    pm = _wrap(tiny_model("bert"), ablation="zero")
    with pytest.raises(MaskShapeError, match=match):
        pm.set_masks(heads=heads, mlps=mlps)
    assert pm.mask_state.fixed.get("heads") is None and pm.mask_state.fixed.get("mlps") is None


@pytest.mark.parametrize("sparsity", [1.0, -0.1, 50, float("nan"), 1.5])
def test_sparsity_outside_unit_interval_raises(sparsity, tmp_path):
    pm = _wrap(tiny_model("bert"), ablation="zero")
    with pytest.raises(ValueError, match="sparsity"):
        pm.get_masks(sparsity=sparsity)
    with pytest.raises(ValueError, match="sparsity"):
        topk_binarize(torch.arange(4.0), sparsity)
    with pytest.raises(ValueError, match="sparsity"):
        pm.save_pretrained(tmp_path / "a", sparsity=sparsity)
    assert not (tmp_path / "a" / "masks.safetensors").exists()


def test_sparsity_given_in_percent_gets_a_hint():
    pm = _wrap(tiny_model("bert"), ablation="zero")
    with pytest.raises(ValueError, match="fraction"):
        pm.get_masks(sparsity=50)


def _saved(tmp_path, model_type="bert", **model_kwargs) -> tuple[PrunableModel, Path]:
    pm = _wrap(tiny_model(model_type, **model_kwargs))
    pm.compute_means([make_batch(model_type)], show_progress=False)
    pm.set_masks(heads=torch.tensor([[1.0, 0, 1, 1], [1, 1, 1, 0]]))
    directory = tmp_path / f"artifact-{model_type}"
    pm.save_pretrained(directory)
    return pm, directory


@pytest.mark.parametrize("target, kwargs, match", [
    ("bert", {"num_layers": 3}, "num_layers"),
    ("gpt2", {}, "model_type"),
    ("llama", {}, "model_type"),
])
def test_artifact_for_another_model_raises(target, kwargs, match, tmp_path):
    _, directory = _saved(tmp_path)
    other = _wrap(tiny_model(target, **kwargs), ablation="zero")
    logits_before = {k: v.detach().clone() for k, v in dict(other.mask_logits.items()).items()}
    with pytest.raises(ArtifactError, match=match):
        other.load_masks(directory)
    assert other.mask_state.fixed.get("heads") is None and not other.has_means
    for key, value in dict(other.mask_logits.items()).items():
        assert torch.equal(value, logits_before[key])


def test_artifact_with_another_head_dim_raises(tmp_path):
    _, directory = _saved(tmp_path, "qwen3")
    other = _wrap(tiny_model("qwen3", head_dim=8), ablation="zero")
    with pytest.raises(ArtifactError, match="head_dim"):
        other.load_masks(directory)


def _rewrite_tensor(path: Path, name: str, value: torch.Tensor) -> None:
    tensors = load_file(str(path))
    with safe_open(str(path), framework="pt") as handle:
        metadata = handle.metadata()
    tensors[name] = value
    save_file(tensors, str(path), metadata=metadata)


@pytest.mark.parametrize("name", ["logits.heads", "logits.mlps"])
def test_nan_logits_in_artifact_raise(name, tmp_path):
    pm, directory = _saved(tmp_path)
    bad = pm.mask_state_dict()[name].clone()
    bad.view(-1)[0] = float("nan")
    _rewrite_tensor(directory / "masks.safetensors", name, bad)
    fresh = _wrap(tiny_model("bert"))
    with pytest.raises(ArtifactError, match="NaN"):
        fresh.load_masks(directory)
    assert torch.isfinite(fresh.mask_logits.heads).all() and torch.isfinite(fresh.mask_logits.mlps).all()
    with pytest.raises(MaskShapeError, match="NaN"):
        fresh.load_mask_state_dict({**pm.mask_state_dict(), name: bad})


def test_wrong_shape_tensor_in_artifact_raises(tmp_path):
    _, directory = _saved(tmp_path)
    _rewrite_tensor(directory / "masks.safetensors", "logits.heads", torch.zeros(LAYERS, HEADS + 1))
    with pytest.raises(ArtifactError, match="shape"):
        _wrap(tiny_model("bert")).load_masks(directory)


def test_corrupt_and_partial_artifacts_raise(tmp_path):
    _, directory = _saved(tmp_path)
    masks_path = directory / "masks.safetensors"
    original = masks_path.read_bytes()
    masks_path.write_bytes(original[: len(original) // 2])
    with pytest.raises(ArtifactError, match="corrupt"):
        _wrap(tiny_model("bert")).load_masks(directory)
    masks_path.write_bytes(b"")
    with pytest.raises(ArtifactError, match="corrupt"):
        _wrap(tiny_model("bert")).load_masks(directory)
    masks_path.unlink()
    with pytest.raises(ArtifactError, match="missing|partial"):
        _wrap(tiny_model("bert")).load_masks(directory)
    masks_path.write_bytes(original)
    _wrap(tiny_model("bert")).load_masks(directory)  # restored: loads again

    config_path = directory / "pruning_config.json"
    text = config_path.read_text()
    config_path.write_text(text[: len(text) // 2])
    with pytest.raises(ArtifactError, match="corrupt"):
        _wrap(tiny_model("bert")).load_masks(directory)
    config_path.unlink()
    with pytest.raises(ArtifactError, match="pruning_config.json"):
        _wrap(tiny_model("bert")).load_masks(directory)
    with pytest.raises(ArtifactError, match="does not exist"):
        _wrap(tiny_model("bert")).load_masks(tmp_path / "no" / "such" / "dir")


def test_foreign_safetensors_file_raises(tmp_path):
    _, directory = _saved(tmp_path)
    save_file({"weight": torch.zeros(2)}, str(directory / "masks.safetensors"))
    with pytest.raises(ArtifactError, match="not a hf_heuristic_core mask file"):
        _wrap(tiny_model("bert")).load_masks(directory)


def _snapshot(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in directory.iterdir()}


def _changed_model():
    pm = _wrap(tiny_model("bert"), ablation="zero")
    pm.set_masks(heads=torch.zeros(LAYERS, HEADS), mlps=torch.zeros(LAYERS))
    return pm


def test_failed_masks_write_leaves_previous_artifact_intact(tmp_path, monkeypatch):
    _, directory = _saved(tmp_path)
    before = _snapshot(directory)
    assert set(before) == ARTIFACT_FILES

    def failing_save_file(tensors, filename, metadata=None):
        Path(filename).write_bytes(b"half a safetensors file")
        raise OSError("No space left on device")
    monkeypatch.setattr(hf_heuristic_core.artifacts, "save_file", failing_save_file)
    with pytest.raises(OSError, match="No space"):
        _changed_model().save_pretrained(directory)
    assert _snapshot(directory) == before  # same names (no temp files left) and same bytes
    monkeypatch.undo()
    _wrap(tiny_model("bert")).load_masks(directory)


@pytest.mark.parametrize("failing_step", ["config", "model card"])
def test_failed_later_step_leaves_previous_artifact_intact(failing_step, tmp_path, monkeypatch):
    """A save that fails after the masks were serialized must not leave new masks beside the old config/card."""
    _, directory = _saved(tmp_path)
    before = _snapshot(directory)
    changed = _changed_model()

    def fail(*args, **kwargs):
        raise OSError("No space left on device")
    if failing_step == "config":
        monkeypatch.setattr(PruningConfig, "to_dict", fail)
    else:
        monkeypatch.setattr(hf_heuristic_core.artifacts, "model_card_text", fail)
    with pytest.raises(OSError, match="No space"):
        changed.save_pretrained(directory)
    monkeypatch.undo()
    assert set(_snapshot(directory)) == set(before)  # no temp files left
    assert _snapshot(directory) == before


def test_save_into_new_nested_directory(tmp_path):
    pm = _wrap(tiny_model("bert"), ablation="zero")
    pm.save_pretrained(tmp_path / "a" / "b")
    assert {p.name for p in (tmp_path / "a" / "b").iterdir()} == ARTIFACT_FILES


def test_repo_id_without_pruning_config_raises(monkeypatch):
    import huggingface_hub
    from huggingface_hub.errors import EntryNotFoundError
    calls = []

    def fake_download(repo_id, filename, **kwargs):
        calls.append((repo_id, filename))
        raise EntryNotFoundError(f"404: {filename} not found in {repo_id}")
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake_download)
    pm = _wrap(tiny_model("bert"), ablation="zero")
    with pytest.raises(ArtifactError, match="has no pruning_config.json"):
        pm.load_masks("someone/plain-model")
    assert calls == [("someone/plain-model", "pruning_config.json")]
    assert pm.mask_state.fixed.get("heads") is None


def test_repo_id_unreachable_raises_artifact_error(monkeypatch):
    import huggingface_hub

    def offline(repo_id, filename, **kwargs):
        raise OSError("offline")
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", offline)
    with pytest.raises(ArtifactError, match="someone/masks"):
        _wrap(tiny_model("bert"), ablation="zero").load_masks("someone/masks")


def test_unwrapped_model_refuses_to_run():
    pm = _wrap(tiny_model("bert"), ablation="zero")
    pm.unwrap()
    with pytest.raises(PruningError, match="unwrapped"):
        pm(**make_batch("bert"))


def test_hooked_modules_are_the_expected_ones_for_every_type():
    """Guard for the helpers above: every mapped type gets exactly one pre-hook per attention output projection
    and one forward hook per MLP output projection."""
    for model_type in MODEL_TYPES:
        model = tiny_model(model_type)
        _wrap(model, ablation="zero")
        attn = hooked_modules(model, model_type)[:LAYERS]
        mlps = hooked_modules(model, model_type)[LAYERS:]
        assert all(len(m._forward_pre_hooks) == 1 and len(m._forward_hooks) == 0 for m in attn), model_type
        assert all(len(m._forward_hooks) == 1 and len(m._forward_pre_hooks) == 0 for m in mlps), model_type
