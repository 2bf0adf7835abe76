"""Attribution patching and integrated gradients through the mask hooks, against independent references:

* the attribution formula by hand: on the plain model (no package hooks), the gradient of the metric with respect to
  each head's slice of the attention output projection's input, and to each MLP block's output, times (activation -
  ablated value), summed over positions, averaged over examples;
* the linear approximation against the true effect of ablating each unit, computed by brute force;
* integrated gradients' completeness: the scores add up to m(full) - m(empty).
"""

from __future__ import annotations

import copy

import pytest
import torch

from hf_heuristic_core import PrunableModel, PruningConfig
from hf_heuristic_core.circuits.attribution import attribution_scores
from hf_heuristic_core.circuits.faithfulness import faithfulness_curve
from hf_heuristic_core.circuits.metrics import logit_difference
from tiny_models import make_batch, one_torch_thread, tiny_model  # noqa: F401  (one_torch_thread: fixture)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _batch(batch_size: int = 6, seed: int = 0):
    batch = make_batch("gpt2", batch_size=batch_size, seq_len=7, seed=seed)
    batch["answer_id"] = torch.arange(batch_size) + 3
    batch["foil_id"] = torch.arange(batch_size) + 20
    return batch


def _hand_attribution(model, batch, reference: str):
    """Gradient x (activation - reference) on the plain GPT-2, with the reference means taken by hand."""
    model = copy.deepcopy(model)
    heads, head_dim = model.config.n_head, model.config.n_embd // model.config.n_head
    inputs = {k: batch[k] for k in ("input_ids", "attention_mask")}
    real = batch["attention_mask"].bool()
    captured: dict[tuple[str, int], torch.Tensor] = {}
    handles = []
    for layer, block in enumerate(model.transformer.h):
        def head_hook(module, args, layer=layer):
            x = args[0]
            x.retain_grad()
            captured[("heads", layer)] = x
        def mlp_hook(module, args, output, layer=layer):
            output.retain_grad()
            captured[("mlps", layer)] = output
        handles.append(block.attn.c_proj.register_forward_pre_hook(head_hook))
        handles.append(block.mlp.c_proj.register_forward_hook(mlp_hook))
    metric = logit_difference(model(**inputs).logits, batch)
    metric.sum().backward()
    for handle in handles:
        handle.remove()
    examples = batch["input_ids"].shape[0]
    scores = {"heads": torch.zeros(len(model.transformer.h), heads), "mlps": torch.zeros(len(model.transformer.h))}
    for (kind, layer), x in captured.items():
        value, grad = x.detach(), x.grad
        if reference == "zero":
            ref = torch.zeros_like(value)
        else:   # the mean over real tokens, per feature (per head slice and per MLP output)
            ref = value[real].mean(0).expand_as(value)
        product = (grad * (value - ref))
        if kind == "heads":
            per_head = product.view(*product.shape[:-1], heads, head_dim).sum(dim=(0, 1, 3))
            scores["heads"][layer] = per_head / examples
        else:
            scores["mlps"][layer] = product.sum() / examples
    return scores


@pytest.mark.parametrize("ablation", ["zero", "mean"])
def test_attribution_patching_is_gradient_times_activation_difference(ablation):
    model = tiny_model("gpt2", task="causal_lm")
    batch = _batch()
    prunable = PrunableModel(copy.deepcopy(model), PruningConfig(ablation=ablation)).eval()
    if ablation == "mean":
        prunable.compute_means({k: batch[k] for k in ("input_ids", "attention_mask")}, show_progress=False)
    result = attribution_scores(prunable, [batch], method="patching")
    expected = _hand_attribution(model, batch, ablation)
    assert torch.allclose(result.scores["heads"].float(), expected["heads"], atol=1e-5, rtol=1e-4)
    assert torch.allclose(result.scores["mlps"].float(), expected["mlps"], atol=1e-5, rtol=1e-4)
    assert result.forward_backward_passes == 1 and result.examples == 6 and result.ablation == ablation
    # Nothing is left behind: no gradient on the model, no fixed masks.
    assert all(p.grad is None for p in prunable.model.parameters())
    assert all(v is None for v in prunable.mask_state.fixed.as_dict().values())


def test_batches_are_averaged_per_example():
    model = tiny_model("gpt2", task="causal_lm")
    prunable = PrunableModel(model, PruningConfig(ablation="zero")).eval()
    a, b = _batch(4, seed=1), _batch(2, seed=2)
    together = attribution_scores(prunable, [a, b], method="patching").scores
    first = attribution_scores(prunable, [a], method="patching").scores
    second = attribution_scores(prunable, [b], method="patching").scores
    for kind in together:
        assert torch.allclose(together[kind], (4 * first[kind] + 2 * second[kind]) / 6, atol=1e-9)


def test_linear_estimate_tracks_the_true_effect_of_ablating_each_unit():
    model = tiny_model("gpt2", task="causal_lm")
    batch = _batch(8)
    prunable = PrunableModel(model, PruningConfig(ablation="mean")).eval()
    prunable.compute_means({k: batch[k] for k in ("input_ids", "attention_mask")}, show_progress=False)
    estimate = attribution_scores(prunable, [batch], method="patching").scores
    inputs = {k: batch[k] for k in ("input_ids", "attention_mask")}

    def metric(masks=None):
        with torch.no_grad(), prunable.masks_applied(masks) if masks else prunable.masks_disabled():
            return float(logit_difference(prunable(**inputs).logits, batch).mean())

    full = metric()
    epsilon = 1e-3
    true, approx, slope = [], [], []
    for layer in range(2):
        for unit in [("heads", (layer, h)) for h in range(4)] + [("mlps", (layer,))]:
            masks = {"heads": torch.ones(2, 4), "mlps": torch.ones(2)}
            masks[unit[0]][unit[1]] = 0.0
            true.append(full - metric(masks))           # brute force: ablate this unit alone
            masks[unit[0]][unit[1]] = 1.0 - epsilon
            slope.append((full - metric(masks)) / epsilon)   # brute force: a small step toward ablation
            approx.append(float(estimate[unit[0]][unit[1]]))
    true, approx, slope = torch.tensor(true), torch.tensor(approx), torch.tensor(slope)
    # The score is the derivative: a finite difference agrees to first order.
    assert torch.allclose(slope, approx, atol=1.5e-3), (slope, approx)
    # Whole-unit ablation is not linear in a random 2-layer model, but the estimate still ranks the effects.
    correlation = torch.corrcoef(torch.stack([true, approx]))[0, 1]
    assert correlation > 0.75, (true, approx)
    large = true.abs() > 0.08
    assert torch.sign(true[large]).tolist() == torch.sign(approx[large]).tolist()


def test_integrated_gradients_add_up_to_full_minus_empty():
    model = tiny_model("gpt2", task="causal_lm")
    batch = _batch()
    prunable = PrunableModel(model, PruningConfig(ablation="zero")).eval()
    curve = faithfulness_curve(prunable, [batch], {"heads": torch.rand(2, 4), "mlps": torch.rand(2)})
    gap = curve.m_full - curve.m_empty
    totals = {}
    for steps in (8, 300):
        result = attribution_scores(prunable, [batch], method="integrated_gradients", steps=steps)
        totals[steps] = float(sum(v.sum() for v in result.scores.values()))
        assert result.forward_backward_passes == steps and result.steps == steps
    # The right Riemann sum converges to the path integral: much closer with more steps, within 2% at 300.
    assert abs(totals[300] - gap) < 0.02 * abs(gap)
    assert abs(totals[300] - gap) < abs(totals[8] - gap)
    # One step at alpha = 1 is attribution patching.
    one = attribution_scores(prunable, [batch], method="integrated_gradients", steps=1).scores
    patching = attribution_scores(prunable, [batch], method="patching").scores
    assert all(torch.equal(one[k], patching[k]) for k in one)


def test_attribution_errors():
    prunable = PrunableModel(tiny_model("gpt2", task="causal_lm"), PruningConfig(ablation="zero")).eval()
    with pytest.raises(Exception, match="Unknown attribution method 'eap'"):
        attribution_scores(prunable, [_batch()], method="eap")
    with pytest.raises(Exception, match="steps >= 1"):
        attribution_scores(prunable, [_batch()], method="integrated_gradients", steps=0)
    mean = PrunableModel(tiny_model("gpt2", task="causal_lm"), PruningConfig(ablation="mean")).eval()
    with pytest.raises(Exception, match="compute_means"):
        attribution_scores(mean, [_batch()])
