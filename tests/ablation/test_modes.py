"""Ablation modes in the wrapped model: resample ablation of a head and of an MLP block against hand references,
switching modes and soft eval masks.

Every reference is computed by hand or by editing weights / own hooks, never through the package's mask
code. (Moved from tests/test_model.py.)
"""

from __future__ import annotations

import copy

import pytest
import torch

from hf_heuristic_core import PruningError

from tiny_models import one_torch_thread  # noqa: F401  (fixture)
from tiny_models import (HEADS, HEAD_DIM, LAYERS, attention_output, logits_of, make_batch, mlp_output, set_logits,
                         tiny_model, wrap)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


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

    pm = wrap(model, ablation="resample").eval()
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

    pm = wrap(model, ablation="resample").eval()
    pm.set_masks(mlps=torch.tensor([0.0, 1.0]))
    torch.testing.assert_close(logits_of(pm, batch), expected, atol=1e-5, rtol=1e-4)


def test_resample_needs_two_examples():
    pm = wrap(tiny_model("bert"), ablation="resample").eval()
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
    pm = wrap(model, ablation="zero", eval_mask="soft").eval()
    heads = torch.full((LAYERS, HEADS), 10.0)
    heads[0, 1] = 0.0  # deterministic z = sigmoid(0) * 1.2 - 0.1 = 0.5
    set_logits(pm, heads, torch.full((LAYERS,), 10.0))
    assert float(pm.get_masks(binary=False)["heads"][0, 1]) == pytest.approx(0.5)
    torch.testing.assert_close(logits_of(pm, batch), expected, atol=1e-6, rtol=1e-5)
    with pytest.raises(ValueError, match="ablation"):
        pm.set_ablation("noise")


def test_the_ablation_names_are_written_once():
    """Configs, flags, reports and granularities accept exactly the modes `ablation.modes` implements."""
    from hf_heuristic_core.ablation.modes import ABLATIONS
    from hf_heuristic_core.ablation.names import ABLATION_MODES
    from hf_heuristic_core.analysis import report_settings
    from hf_heuristic_core.cli import prune
    from hf_heuristic_core.granularity import GRANULARITIES, get_granularity
    assert set(ABLATIONS) == set(ABLATION_MODES)
    assert prune.ABLATIONS == report_settings.ABLATION_MODES == ABLATION_MODES
    for name in GRANULARITIES.names():
        assert set(get_granularity(name).ablations) <= set(ABLATION_MODES), name
