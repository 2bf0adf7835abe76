"""`repro_csordas_double_addition.py`'s gradient clipping against the authors' (issue #38).

Their `Task.clip_gradients` clips `MaskedModel.parameters()`: the trained mask logits, the frozen weights and biases
(whose `.grad` their mask optimizer never zeroes, so it accumulates every mask step from the base model's last
clipped gradient on) and the earlier stages' last mask gradients, all rescaled in place. The reference here is
computed by hand from snapshots of every gradient taken just before each clip, and the fresh weight gradient of each
step from a plain copy of the net on a hand-encoded example. A tiny net (80 -> 6 -> 40), one training tuple and
masks that start at logit 15 (every hard sample keeps every weight), so each step's weight gradient is known; about
2 s.
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import math
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
import torch
from benchmark_scripts import load_script

TUPLE = [[12, 34], [56, 78]]       # pair 1: 12 + 34 = 46, pair 2: 56 + 78 = 134 -> 34


@pytest.fixture(scope="module")
def csordas() -> ModuleType:
    return load_script("reproductions/repro_csordas_double_addition")


def _args(tmp_path: Path, **changes) -> argparse.Namespace:
    values = {"hidden": "6", "base_steps": 3, "mask_steps": 3, "eval_every": 3, "alpha": 4e-4, "mask_lr": 1e-2,
              "mask_init": 15.0, "mask_samples": 4, "grad_clip": 0.05, "batch": 8, "clip_scope": "all",
              "device": "cpu", "run_dir": str(tmp_path), "reference_mask": False}
    values.update(changes)
    return argparse.Namespace(**values)


def _pair1_input() -> torch.Tensor:
    """Pair 1's pass by hand: 12 -> ones 2 (index 2), tens 1 (10 + 1); 34 -> 20 + 4, 30 + 3; pair 2 zeroed."""
    x = torch.zeros(1, 80)
    x[0, [2, 11, 24, 33]] = 1.0
    return x


def _fresh_pair1_grads(net: torch.nn.Module) -> dict[str, torch.Tensor]:
    """d loss / d parameter of the unmasked net: CE over pair 1's digits (46 -> ones 6, tens 4), outputs 0-19."""
    plain = copy.deepcopy(net).requires_grad_(True)
    logits = plain(_pair1_input())[:, :20].reshape(2, 10)
    torch.nn.functional.cross_entropy(logits, torch.tensor([6, 4])).backward()
    return {name: p.grad.clone() for name, p in plain.named_parameters()}


def _record_clips(csordas: ModuleType, monkeypatch: pytest.MonkeyPatch) -> list[dict]:
    """Snapshot every gradient the clip sees before and after it acts, and the factor it returns."""
    calls: list[dict] = []
    original = csordas.GradientClip.__call__

    def recording(self, logits):
        def grads() -> dict[str, list[torch.Tensor]]:
            return {"logits": [p.grad.clone() for p in logits],
                    "frozen": [None if p.grad is None else p.grad.clone() for p in self.frozen],
                    "earlier": [g.clone() for g in self.earlier]}
        before = grads()
        factor = original(self, logits)
        calls.append({"before": before, "after": grads(), "factor": factor})
        return factor
    monkeypatch.setattr(csordas.GradientClip, "__call__", recording)
    return calls


def _by_hand(tensors: list[torch.Tensor], max_norm: float) -> float:
    """clip_grad_norm_'s factor from the total 2-norm, in float64 numpy."""
    total = math.sqrt(sum(float(np.sum(t.double().numpy() ** 2)) for t in tensors))
    return min(1.0, max_norm / (total + 1e-6))


def _train(csordas: ModuleType, args: argparse.Namespace):
    rows = torch.tensor([TUPLE])
    valid = csordas.encode(rows)
    score = functools.partial(csordas.accuracy, data=valid)
    net = csordas.build_net([6], 0)
    base = csordas.Stage("base", rows, lambda m, r: csordas.pairs_loss(m, *csordas.encode(r), (0, 1)), 1)
    seeded = csordas.prepare_seed(0, args, net, base, score)
    weights = {name: p.detach().clone() for name, p in zip(seeded.clip.frozen_names, seeded.clip.frozen)}
    plain = csordas.build_net([6], 0)                                   # masks all ones: the plain net's gradient
    plain.load_state_dict(torch.load(Path(args.run_dir) / "seed0" / "base.pt", weights_only=False)["state_dict"])
    fresh = _fresh_pair1_grads(plain)
    stages = [csordas.Stage(f"pair{p + 1}", rows,
                            functools.partial(lambda m, r, p: csordas.pairs_loss(m, *csordas.encode(r), (p,)), p=p),
                            1 + p) for p in range(2)]
    csordas.train_stages(seeded, stages, score, args, 0)
    return seeded, weights, fresh


def test_all_scope_clips_by_the_norm_of_every_accumulated_gradient(csordas, monkeypatch, tmp_path):
    calls = _record_clips(csordas, monkeypatch)
    seeded, weights, fresh = _train(csordas, _args(tmp_path))
    assert len(calls) == 6                                            # 2 stages x 3 steps
    for call in calls:
        before = call["before"]
        everything = before["logits"] + [g for g in before["frozen"] if g is not None] + before["earlier"]
        assert call["factor"] == pytest.approx(_by_hand(everything, 0.05), rel=1e-5)
        assert call["factor"] < 0.5                                  # the test's clip (0.05) acts every step
        for kind in ("logits", "frozen", "earlier"):                  # every gradient rescaled in place
            for pre, post in zip(before[kind], call["after"][kind]):
                torch.testing.assert_close(post, pre * call["factor"], rtol=1e-5, atol=1e-9)
    # the frozen gradients are never zeroed: before each clip = after the previous clip + this step's fresh gradient
    names = seeded.clip.frozen_names
    for previous, call in zip(calls[:2], calls[1:3]):                 # pair-1 steps (the fresh gradient is pair 1's)
        for name, pre, post in zip(names, call["before"]["frozen"], previous["after"]["frozen"]):
            torch.testing.assert_close(pre - post, fresh[name], rtol=1e-4, atol=1e-6)
    # the first pair-1 step starts from the base model's last clipped gradient (saved in base.pt)
    saved = torch.load(tmp_path / "seed0" / "base.pt", weights_only=False)["last_grads"]
    for name, pre in zip(names, calls[0]["before"]["frozen"]):
        torch.testing.assert_close(pre - saved[name], fresh[name], rtol=1e-4, atol=1e-6)
    # pair 2's clips include pair 1's last logit gradients, rescaled by every later clip
    assert not calls[2]["before"]["earlier"] and len(calls[3]["before"]["earlier"]) == 2
    for pre, last in zip(calls[3]["before"]["earlier"], calls[2]["after"]["logits"]):
        torch.testing.assert_close(pre, last)
    # the frozen weights never change (no optimizer holds them)
    for name, p in zip(names, seeded.clip.frozen):
        assert torch.equal(p.detach(), weights[name]), name


def test_masks_scope_leaves_the_frozen_weights_out(csordas, monkeypatch, tmp_path):
    """The script before issue #38: the norm of the trained logits alone, and no weight gradient accumulates."""
    calls = _record_clips(csordas, monkeypatch)
    seeded, weights, _ = _train(csordas, _args(tmp_path, clip_scope="masks", grad_clip=1e-4))
    saved = torch.load(tmp_path / "seed0" / "base.pt", weights_only=False)["last_grads"]
    for call in calls:
        assert call["factor"] == pytest.approx(_by_hand(call["before"]["logits"], 1e-4), rel=1e-5)
        assert call["factor"] < 1.0
        for name, g in zip(seeded.clip.frozen_names, call["after"]["frozen"]):
            torch.testing.assert_close(g, saved[name])                 # untouched: not accumulated, not clipped
        assert not call["before"]["earlier"]
    for name, p in zip(seeded.clip.frozen_names, seeded.clip.frozen):
        assert torch.equal(p.detach(), weights[name])


def test_resume_restores_the_accumulated_gradients(csordas, tmp_path):
    """A mask resumed from its checkpoint continues with the accumulated and earlier gradients it stopped with."""
    args = _args(tmp_path, mask_steps=2, eval_every=1)
    seeded, _, _ = _train(csordas, args)
    state = seeded.clip.state_dict([p for _, p in seeded.pm.mask_logits.items()])
    again, _, _ = _train(csordas, args)                                # every mask already at step 2: loaded
    for a, b in zip(state["frozen"] + state["earlier"],
                    again.clip.state_dict([p for _, p in again.pm.mask_logits.items()])["frozen"] +
                    again.clip.earlier):
        torch.testing.assert_close(a, b)


def test_clip_scope_is_recorded_and_bad_scope_refused(csordas, tmp_path):
    args = argparse.Namespace(**{key: 1 for key in csordas.RUN_DIR_SETTINGS})
    args.clip_scope = "all"
    csordas.check_run_dir(tmp_path, args)
    assert json.loads((tmp_path / "run_settings.json").read_text())["clip_scope"] == "all"
    args.clip_scope = "masks"
    with pytest.raises(SystemExit, match=r"'clip_scope': \('all', 'masks'\)"):
        csordas.check_run_dir(tmp_path, args)
    with pytest.raises(SystemExit, match=r"--clip_scope 'weights': give one of \('all', 'masks'\)"):
        csordas.GradientClip("weights", 1.0, [])


def test_base_without_last_gradients_is_refused(csordas, tmp_path):
    """A base.pt of an older revision has no last-step gradients, so the accumulated gradient cannot start."""
    net = csordas.build_net([6], 0)
    (tmp_path / "seed0").mkdir()
    torch.save({"state_dict": net.state_dict(), "seconds": 1.0}, tmp_path / "seed0" / "base.pt")
    rows = torch.tensor([TUPLE])
    base = csordas.Stage("base", rows, lambda m, r: csordas.pairs_loss(m, *csordas.encode(r), (0, 1)), 1)
    with pytest.raises(SystemExit, match="no last-step gradients.*new --run_dir"):
        csordas.prepare_seed(0, _args(tmp_path), net, base, functools.partial(csordas.accuracy,
                                                                               data=csordas.encode(rows)))
