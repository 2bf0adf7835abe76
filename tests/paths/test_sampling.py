"""Masks sampled in the wrapped model: fresh draws per training forward, deterministic eval, one draw per
forward (not per layer), and gradient-checkpoint recomputation that replays the same masks.

Every reference is computed by hand or by editing weights / own hooks, never through the package's mask
code. (Moved from tests/test_model.py.)
"""

from __future__ import annotations

import pytest
import torch

from tiny_models import one_torch_thread  # noqa: F401  (fixture)
from tiny_models import (HEADS, LAYERS, attention_output, logits_of, make_batch, mlp_output, set_logits, tiny_model,
                         wrap)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


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
    pm = wrap(model, ablation="zero")
    recorder.after_wrapping()
    set_logits(pm, torch.zeros(LAYERS, HEADS), torch.zeros(LAYERS))
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
    pm = wrap(model, ablation="zero")
    set_logits(pm, torch.full((LAYERS, HEADS), 10.0), torch.full((LAYERS,), 10.0))

    def sabotage(module, args, output):
        with torch.no_grad():
            pm.mask_logits.heads.fill_(-10.0)
            pm.mask_logits.mlps.fill_(-10.0)
    handle = mlp_output(model, "llama", 0).register_forward_hook(sabotage)
    try:
        pm.eval()
        assert torch.equal(logits_of(pm, batch), expected)  # every unit kept, in both layers
        set_logits(pm, torch.full((LAYERS, HEADS), 10.0), torch.full((LAYERS,), 10.0))
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
        pm = wrap(model, ablation="zero")
        recorder.after_wrapping()
        set_logits(pm, torch.linspace(-1, 2, LAYERS * HEADS).view(LAYERS, HEADS), torch.tensor([0.5, 1.5]))
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
        pm = wrap(model, ablation="zero")
        set_logits(pm, torch.linspace(-1, 2, LAYERS * HEADS).view(LAYERS, HEADS), torch.tensor([0.5, 1.5]))
        pm.train()
        pm.generator = torch.Generator().manual_seed(99)
        loss = sum(pm(**b, labels=labels).loss for b in batches)
        loss.backward()
        return pm

    checkpointed, plain = run(True), run(False)
    torch.testing.assert_close(checkpointed.mask_logits.heads.grad, plain.mask_logits.heads.grad, atol=1e-6,
                               rtol=1e-5)
    torch.testing.assert_close(checkpointed.mask_logits.mlps.grad, plain.mask_logits.mlps.grad, atol=1e-6, rtol=1e-5)
