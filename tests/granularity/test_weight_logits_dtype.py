"""`PruningConfig(logits_dtype="bfloat16")`: weight-mask logits stored in bf16 train, save and load."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from hf_heuristic_core import PrunableModel, PruningConfig
from hf_heuristic_core.training.objectives import sparsity_penalty


def _data(seed: int = 1):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(256, 8, generator=generator)
    return x, (x[:, 0] > 0).long() + 2 * (x[:, 1] > 0).long()     # 4 classes from two input signs


def _net(seed: int = 0) -> nn.Sequential:
    """A small net trained on the task, then frozen: the masks start by damaging it and learn to stop."""
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-2)
    x, y = _data()
    for _ in range(100):
        optimizer.zero_grad()
        nn.functional.cross_entropy(net(x), y).backward()
        optimizer.step()
    return net.requires_grad_(False)


def _train(relaxation: str, dtype: str, steps: int = 150) -> tuple[PrunableModel, list[float]]:
    settings = {"gumbel_init_prob": 0.5} if relaxation == "gumbel_sigmoid" else {}   # p 0.5: masks start harmful
    pm = PrunableModel(_net(), PruningConfig(granularity="weight", relaxation=relaxation, logits_dtype=dtype,
                                             mask_samples=1, relaxation_settings=settings))
    pm.generator = torch.Generator().manual_seed(0)
    pm.reset_masks(0)
    optimizer = torch.optim.Adam([p for _, p in pm.mask_logits.items()], lr=5e-2)
    x, y = _data()
    losses = []
    pm.train()
    for _ in range(steps):
        loss = nn.functional.cross_entropy(pm(x), y)
        total = loss + sparsity_penalty(pm, 1e-4, len(y))
        optimizer.zero_grad()
        total.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    for state in optimizer.state.values():     # Adam's moments live in the parameter's dtype
        assert state["exp_avg"].dtype == state["exp_avg_sq"].dtype == getattr(torch, dtype)
    return pm, losses


def test_bf16_logits_halve_the_bytes_of_logits_and_gradients():
    fp32 = PrunableModel(_net(), PruningConfig(granularity="weight"))
    bf16 = PrunableModel(_net(), PruningConfig(granularity="weight", logits_dtype="bfloat16"))
    n = 8 * 32 + 32 * 4
    assert sum(p.numel() * p.element_size() for _, p in fp32.mask_logits.items()) == 4 * n
    assert sum(p.numel() * p.element_size() for _, p in bf16.mask_logits.items()) == 2 * n
    assert all(p.dtype == torch.bfloat16 and p.requires_grad for _, p in bf16.mask_logits.items())
    x, _ = _data()
    bf16.train()
    bf16(x).sum().backward()
    assert all(p.grad.dtype == torch.bfloat16 for _, p in bf16.mask_logits.items())
    for _, p in bf16.model.named_parameters():   # the base weights keep their dtype
        assert p.dtype == torch.float32


@pytest.mark.parametrize("relaxation", ["continuous_sparsification", "gumbel_sigmoid"])
def test_bf16_logits_train_like_fp32(relaxation):
    _, fp32 = _train(relaxation, "float32")
    _, bf16 = _train(relaxation, "bfloat16")
    first, last = sum(bf16[:5]) / 5, sum(bf16[-5:]) / 5
    assert last < 0.8 * first                                   # the task loss goes down
    assert last == pytest.approx(sum(fp32[-5:]) / 5, rel=0.15)  # about as far as with fp32 logits


def test_bf16_logit_masks_save_and_load_exactly(tmp_path):
    pm, _ = _train("continuous_sparsification", "bfloat16", steps=10)
    pm.save_pretrained(tmp_path / "masks")
    again = PrunableModel(_net(), PruningConfig(granularity="weight", relaxation="continuous_sparsification",
                                                logits_dtype="bfloat16")).load_masks(tmp_path / "masks")
    as_fp32 = PrunableModel(_net(), PruningConfig(granularity="weight", relaxation="continuous_sparsification")
                            ).load_masks(tmp_path / "masks")
    pm.eval(), again.eval(), as_fp32.eval()
    masks = pm.get_masks()                                  # 1[s > 0] of the bf16 logits
    assert 0.05 < sum(float(m.mean()) for m in masks.values()) / len(masks) < 0.95
    for loaded in (again, as_fp32):                         # weight artifacts hold the bit-packed binary masks
        assert all(torch.equal(masks[k], loaded.get_masks()[k]) for k in masks)
    x, _ = _data()
    assert torch.equal(pm(x), again(x))


def test_logits_dtype_is_checked():
    with pytest.raises(ValueError, match="logits_dtype='float16' is not one of"):
        PruningConfig(granularity="weight", logits_dtype="float16")
    with pytest.raises(ValueError, match="is a setting of the 'weight' granularity"):
        PruningConfig(granularity="unit", logits_dtype="bfloat16")


def test_bf16_logits_kept_in_an_artifact_load_back_exactly(tmp_path):
    pm, _ = _train("continuous_sparsification", "bfloat16", steps=10)
    pm.save_pretrained(tmp_path / "masks", include_logits=True)     # stored as fp32: bf16 -> fp32 -> bf16 is exact
    again = PrunableModel(_net(), PruningConfig(granularity="weight", relaxation="continuous_sparsification",
                                                logits_dtype="bfloat16")).load_masks(tmp_path / "masks")
    for kind, logit in pm.mask_logits.items():
        assert again.mask_logits[kind].dtype == torch.bfloat16
        assert torch.equal(again.mask_logits[kind], logit) and bool((logit != 0).any())


def test_the_cost_adam_steps_below_half_a_bf16_spacing_are_lost():
    """The documented price: bf16 spacing at |s| = 0.5 is 2^-8 = 0.0039, so an Adam step of lr 1e-4 (about lr per
    step) is rounded away there, while lr 1e-2 still moves the logit; fp32 keeps both."""
    def after_one_step(dtype, lr):
        logit = nn.Parameter(torch.full((4,), 0.5, dtype=dtype))
        optimizer = torch.optim.Adam([logit], lr=lr)
        logit.grad = torch.ones(4, dtype=dtype)
        optimizer.step()
        return logit.detach().float()
    assert torch.equal(after_one_step(torch.bfloat16, 1e-4), torch.full((4,), 0.5))
    assert torch.allclose(after_one_step(torch.float32, 1e-4), torch.full((4,), 0.5 - 1e-4))
    assert torch.allclose(after_one_step(torch.bfloat16, 1e-2), torch.full((4,), 0.490234375))   # 0.49 rounded
