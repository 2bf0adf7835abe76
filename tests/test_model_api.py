"""PrunableModel's API: forwarding kwargs, set/clear/get masks, masks_disabled, eval masks that follow edited
logits, missing means, and the refusal to run once unwrapped; the hooks sit on exactly the expected modules.

Every reference is computed by hand or by editing weights / own hooks, never through the package's mask
code. (Moved from tests/test_model.py.)
"""

from __future__ import annotations

import copy

import pytest
import torch

from hf_heuristic_core import MissingMeansError, PruningError

from tiny_models import one_torch_thread  # noqa: F401  (fixture)
from tiny_models import (HEADS, HEAD_DIM, LAYERS, MODEL_TYPES, attention_output, constant_output, hooked_modules,
                         logits_of, make_batch, mlp_output, set_logits, tiny_model, wrap, zero_head_inputs)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_wrapper_forwards_kwargs_and_exposes_model():
    model = tiny_model("bert")
    batch = make_batch("bert")
    labels = torch.tensor([0, 2, 1])
    with torch.no_grad():
        expected = model(**batch, labels=labels)
    pm = wrap(model, ablation="zero").eval()
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
    pm = wrap(model, ablation="zero").eval()
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

    pm = wrap(model, ablation="zero").eval()
    assert torch.equal(logits_of(pm, batch), full)
    set_logits(pm, torch.full((LAYERS, HEADS), -10.0), torch.full((LAYERS,), -10.0))  # copy_ under no_grad
    assert pm.get_masks()["heads"].sum() == 0
    torch.testing.assert_close(logits_of(pm, batch), everything_pruned, atol=1e-6, rtol=1e-5)

    pm.train()
    pm.mask_logits.heads.data.fill_(10.0)
    pm.mask_logits.mlps.data.fill_(10.0)
    pm.eval()
    assert torch.equal(pm.get_masks()["heads"], torch.ones(LAYERS, HEADS))
    assert torch.equal(logits_of(pm, batch), full)


def test_mean_ablation_without_means_raises_and_disabled_masks_run():
    pm = wrap(tiny_model("bert"))
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


def test_unwrapped_model_refuses_to_run():
    pm = wrap(tiny_model("bert"), ablation="zero")
    pm.unwrap()
    with pytest.raises(PruningError, match="unwrapped"):
        pm(**make_batch("bert"))


def test_hooked_modules_are_the_expected_ones_for_every_type():
    """Guard for the helpers above: every mapped type gets exactly one pre-hook per attention output projection
    and one forward hook per MLP output projection."""
    for model_type in MODEL_TYPES:
        model = tiny_model(model_type)
        wrap(model, ablation="zero")
        attn = hooked_modules(model, model_type)[:LAYERS]
        mlps = hooked_modules(model, model_type)[LAYERS:]
        assert all(len(m._forward_pre_hooks) == 1 and len(m._forward_hooks) == 0 for m in attn), model_type
        assert all(len(m._forward_hooks) == 1 and len(m._forward_pre_hooks) == 0 for m in mlps), model_type
