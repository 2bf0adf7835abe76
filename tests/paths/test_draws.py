"""When masks are drawn: once per forward (whatever module it enters through), once per `generate()` call, never on
gradient-checkpoint recomputation (the pass's masks are replayed), once per `shared_masks()` block; a masked module
outside every pass gets deterministic masks or an error, never an unmasked activation.

Draws are counted by spying on `MaskState.draw` (every pass's masks come from it); what the hooks applied is read
by hooks registered after wrapping, on the modules `tiny_models` names independently of the package.
"""

from __future__ import annotations

import copy

import pytest
import torch

from hf_heuristic_core import MaskPassError, PrunableModel, PruningConfig
from tiny_models import one_torch_thread  # noqa: F401  (fixture)
from tiny_models import (HEAD_DIM, HEADS, LAYERS, attention_output, layers_of, logits_of, make_batch, mlp_output,
                         tiny_model, zero_head_inputs)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


class DrawCounter:
    """Counts the calls of `prunable.mask_state.draw` and keeps the masks each returned."""

    def __init__(self, prunable: PrunableModel) -> None:
        self.draws: list[dict] = []
        original = prunable.mask_state.draw

        def draw(*args, **kwargs):
            masks = original(*args, **kwargs)
            self.draws.append(masks)
            return masks
        prunable.mask_state.draw = draw

    def __len__(self) -> int:
        return len(self.draws)


class InputRecorder:
    """The input of the layer-0 attention output projection at every call (after the package's pre-hook)."""

    def __init__(self, module: torch.nn.Module) -> None:
        self.values: list[torch.Tensor] = []
        self.handle = module.register_forward_pre_hook(lambda m, args: self.values.append(args[0].detach().clone()))


def _sampling(model_type: str = "llama", task: str = "causal_lm", **config) -> PrunableModel:
    """A wrapped model in training mode whose masks are sampled strictly inside (0, 1) often enough to tell draws
    apart (init near 0, wide spread)."""
    prunable = PrunableModel(tiny_model(model_type, task=task),
                             PruningConfig(ablation="zero", init_mean=0.0, init_std=1.0, **config))
    prunable.generator = torch.Generator().manual_seed(0)
    return prunable.train()


# ---------------------------------------------------------------------------------------------------- per forward
@pytest.mark.parametrize("entry", ["wrapper", "model", "body"])
def test_one_draw_per_forward_whatever_the_entry(entry):
    prunable = _sampling()
    counter = DrawCounter(prunable)
    batch = make_batch("llama")
    calls = {"wrapper": prunable, "model": prunable.model, "body": prunable.model.base_model}
    for _ in range(3):
        calls[entry](**batch)
    assert len(counter) == 3


def test_a_module_called_twice_in_one_forward_sees_the_same_mask():
    prunable = _sampling()
    layer = layers_of(prunable.model, "llama")[0]
    recorder = InputRecorder(attention_output(prunable.model, "llama", 0))
    inputs = []
    handle = attention_output(prunable.model, "llama", 0).register_forward_pre_hook(
        lambda m, args: inputs.append(args[0].detach().clone()), prepend=True)   # before the mask hook
    original_forward = layer.self_attn.forward

    def twice(*args, **kwargs):   # the attention block runs twice in this forward, on the same input
        original_forward(*args, **kwargs)
        return original_forward(*args, **kwargs)
    layer.self_attn.forward = twice
    counter = DrawCounter(prunable)
    prunable(**make_batch("llama"), use_cache=False)   # (a cache would store the keys twice)
    handle.remove()
    assert len(counter) == 1 and len(recorder.values) == 2
    assert torch.equal(inputs[0], inputs[1]) and torch.equal(recorder.values[0], recorder.values[1])
    assert not torch.equal(recorder.values[0], inputs[0])   # a sampled mask strictly below 1 applied


def test_opt_causal_lm_is_masked_like_its_column_zeroed_reference():
    """OPTForCausalLM calls its decoder directly, skipping the body (the masks were never drawn there before):
    a zero-ablated head equals the same model with that head's input columns of out_proj zeroed."""
    model = tiny_model("opt", task="causal_lm")
    reference = copy.deepcopy(model)
    zero_head_inputs(attention_output(reference, "opt", 1), [2], HEAD_DIM["opt"])
    batch = make_batch("opt")
    prunable = PrunableModel(model, PruningConfig(ablation="zero")).eval()
    heads = torch.ones(LAYERS, HEADS)
    heads[1, 2] = 0
    prunable.set_masks(heads=heads)
    with prunable.masks_disabled():
        full = logits_of(prunable, batch)
    masked = logits_of(prunable, batch)
    assert float((masked - full).abs().max()) > 1e-3
    torch.testing.assert_close(masked, logits_of(reference, batch), atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(logits_of(prunable.model, batch), logits_of(reference, batch), atol=1e-6, rtol=1e-5)


# ---------------------------------------------------------------------------------------------------- generate
@pytest.mark.parametrize("model_type", ["llama", "gpt2", "opt"])
def test_generate_draws_once_per_call_and_every_step_uses_that_draw(model_type):
    prunable = _sampling(model_type)
    batch = make_batch(model_type, padding="left")
    recorder = InputRecorder(attention_output(prunable.model, model_type, 0))
    reference = []
    handle = attention_output(prunable.model, model_type, 0).register_forward_pre_hook(
        lambda m, args: reference.append(args[0].detach().clone()), prepend=True)
    counter = DrawCounter(prunable)
    with torch.no_grad():
        prunable.generate(**batch, max_new_tokens=4, do_sample=False, pad_token_id=0)
    handle.remove()
    assert len(counter) == 1 and len(recorder.values) == 4
    z = counter.draws[0]["heads"][0]
    for unmasked, masked in zip(reference, recorder.values):   # every step: the one draw's mask, per head
        expected = (unmasked.unflatten(-1, (HEADS, -1)) * z.view(HEADS, 1)).flatten(-2)
        torch.testing.assert_close(masked, expected)


def test_the_wrapped_models_own_generate_draws_per_step_with_the_same_eval_masks():
    prunable = PrunableModel(tiny_model("llama", task="causal_lm"), PruningConfig(ablation="zero")).eval()
    heads = torch.ones(LAYERS, HEADS)
    heads[0, 1] = 0
    prunable.set_masks(heads=heads)
    counter = DrawCounter(prunable)
    batch = make_batch("llama", padding="left")
    own = prunable.model.generate(**batch, max_new_tokens=3, do_sample=False, pad_token_id=0)
    assert len(counter) == 3 and all(torch.equal(d["heads"], heads) for d in counter.draws)
    assert torch.equal(own, prunable.generate(**batch, max_new_tokens=3, do_sample=False, pad_token_id=0))


def test_shared_masks_block_draws_once_for_several_forwards():
    prunable = _sampling()
    counter = DrawCounter(prunable)
    batch = make_batch("llama")
    with prunable.shared_masks():
        first = prunable(**batch).logits
        second = prunable.model(**batch).logits
        with prunable.shared_masks():
            third = prunable(**batch).logits
    assert len(counter) == 1
    assert torch.equal(first, second) and torch.equal(first, third)
    assert not torch.equal(first, prunable(**batch).logits)   # outside the block: a fresh sample
    assert len(counter) == 2


# ---------------------------------------------------------------------------------------------------- recomputation
def _mask_gradients(prunable: PrunableModel, batch: dict, seed: int) -> dict[str, torch.Tensor]:
    prunable.generator = torch.Generator().manual_seed(seed)
    prunable.zero_grad(set_to_none=True)
    first = prunable(**batch).logits.float().square().mean()
    second = prunable(**batch).logits.float().square().mean()   # two forwards before one backward
    (first + 2 * second).backward()
    return {kind: p.grad.clone() for kind, p in prunable.mask_logits.items()}


@pytest.mark.parametrize("model_type", ["llama", "bert", "opt"])
def test_recomputation_never_draws_and_replays_each_passs_masks(model_type):
    task = "causal_lm" if model_type != "bert" else "seq_cls"
    batch = make_batch(model_type)
    plain = _sampling(model_type, task)
    expected = _mask_gradients(plain, batch, seed=7)
    prunable = _sampling(model_type, task)
    prunable.gradient_checkpointing_enable()
    counter = DrawCounter(prunable)
    got = _mask_gradients(prunable, batch, seed=7)
    assert len(counter) == 2   # two forwards; the recomputations drew nothing
    for kind in expected:
        torch.testing.assert_close(got[kind], expected[kind])


def test_checkpointing_enabled_on_the_wrapped_model_after_wrapping_gets_the_replay():
    batch = make_batch("llama")
    expected = _mask_gradients(_sampling(), batch, seed=3)
    prunable = _sampling()
    prunable.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    got = _mask_gradients(prunable, batch, seed=3)
    for kind in expected:
        torch.testing.assert_close(got[kind], expected[kind])


def test_reentrant_checkpointing_on_the_wrapped_model_is_refused_at_the_next_training_pass():
    prunable = _sampling()
    prunable.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
    with pytest.raises(Exception, match=r"cannot replay each forward pass's masks \(reentrant"):
        prunable(**make_batch("llama"))


# ---------------------------------------------------------------------------------------------------- outside a pass
def test_a_layer_called_outside_any_pass_gets_the_eval_masks():
    model = tiny_model("llama", task="causal_lm")
    prunable = PrunableModel(model, PruningConfig(ablation="zero")).eval()
    heads = torch.zeros(LAYERS, HEADS)
    prunable.set_masks(heads=heads)
    seen = []
    attention_output(model, "llama", 0).register_forward_pre_hook(lambda m, args: seen.append(args[0]))
    x = torch.randn(2, 5, 32)
    with torch.no_grad():
        attention_output(model, "llama", 0)(x)
    assert len(seen) == 1 and torch.equal(seen[0], torch.zeros_like(x))


def test_a_layer_called_outside_any_pass_with_sampled_masks_is_an_error():
    prunable = _sampling()
    with pytest.raises(MaskPassError, match=r"outside any forward pass of the model while its masks are sampled"):
        mlp_output(prunable.model, "llama", 0)(torch.randn(2, 5, 48))
    with prunable.shared_masks():   # the way to run single modules in training mode
        out = mlp_output(prunable.model, "llama", 0)(torch.randn(2, 5, 48))
    assert out.shape == (2, 5, 32)
    prunable.set_masks(heads=torch.ones(LAYERS, HEADS), mlps=torch.zeros(LAYERS))   # fixed: nothing to sample
    assert torch.equal(mlp_output(prunable.model, "llama", 0)(torch.randn(2, 5, 48)), torch.zeros(2, 5, 32))


def test_resample_outside_a_pass_refuses_flattened_activations_it_cannot_split():
    prunable = PrunableModel(tiny_model("opt"), PruningConfig(ablation="resample")).eval()
    prunable.set_masks(mlps=torch.zeros(LAYERS))
    with pytest.raises(Exception, match=r"the forward's batch size is unknown"):
        mlp_output(prunable.model, "opt", 0)(torch.randn(10, 48))


class _Interrupt(BaseException):
    """Stands for KeyboardInterrupt: not an Exception, so torch runs no always-call hook for it."""


def test_a_forward_interrupted_mid_pass_leaves_no_stale_masks():
    prunable = _sampling()
    counter = DrawCounter(prunable)
    batch = make_batch("llama")

    def interrupt(module, args):
        raise _Interrupt
    handle = mlp_output(prunable.model, "llama", 1).register_forward_pre_hook(interrupt)
    with pytest.raises(_Interrupt):
        prunable.model(**batch)   # a direct call: its pass is left open by the interrupt
    handle.remove()
    prunable.model(**batch)
    prunable.model.base_model(**batch)
    assert len(counter) == 3   # each later call drew its own masks
    assert prunable._pass is None and prunable._entered == []


def test_masks_disabled_passes_through_and_enabling_inside_a_pass_draws():
    prunable = PrunableModel(tiny_model("llama", task="causal_lm"), PruningConfig(ablation="zero")).eval()
    prunable.set_masks(heads=torch.zeros(LAYERS, HEADS))
    batch = make_batch("llama")
    reference = tiny_model("llama", task="causal_lm")
    with prunable.masks_disabled():
        torch.testing.assert_close(logits_of(prunable, batch), logits_of(reference, batch), rtol=0, atol=0)
        with torch.no_grad(), prunable.shared_masks():
            prunable._masks_enabled = True   # enabled inside a pass opened while disabled
            masked = prunable(**batch).logits
    assert not torch.allclose(masked, logits_of(reference, batch))
    torch.testing.assert_close(masked, logits_of(prunable, batch), rtol=0, atol=0)


def test_a_masked_weight_read_outside_any_pass_follows_the_same_rule():
    model = tiny_model("llama", task="causal_lm")
    module = mlp_output(model, "llama", 0)
    original = module.weight.detach().clone()
    prunable = PrunableModel(model, PruningConfig(granularity="weight", target_modules=["mlp.down_proj"],
                                                  init_mean=0.0, init_std=1.0))
    kind = next(iter(prunable.mask_shapes()))
    mask = (torch.arange(original.numel()).view(original.shape) % 2).float()
    prunable.eval()
    prunable.set_masks({kind: mask})
    assert torch.equal(module.weight, original * mask)   # eval: the deterministic (here fixed) mask
    prunable.clear_masks()
    prunable.train()
    with pytest.raises(MaskPassError, match="masks are sampled"):
        module.weight
    with prunable.shared_masks():
        sampled = module.weight
        assert torch.equal(module.weight, sampled)   # one draw for the block
    assert not torch.equal(sampled, original)


@pytest.mark.parametrize("enable_first", [True, False])
def test_checkpointed_layers_recompute_whether_enabled_before_or_after_train(enable_first):
    """A dropout-free training wrapper (`train_dropout = False`) keeps the model in eval mode; checkpointed layers
    must still be in training mode or transformers skips the checkpoint. Enabling after `.train()` used to be a
    silent no-op (found by the GPU memory benchmark: checkpointing saved nothing)."""
    prunable = PrunableModel(tiny_model("bert"), PruningConfig(ablation="zero", init_mean=3.0))
    prunable.train_dropout = False
    if enable_first:
        prunable.activation_checkpointing_enable()
        prunable.train()
    else:
        prunable.train()
        prunable.activation_checkpointing_enable()
    attention = layers_of(prunable.model, "bert")[0].attention   # inside the checkpointed layer
    calls = []
    attention.register_forward_hook(lambda module, args, output: calls.append(1))
    prunable(**make_batch("bert")).logits.sum().backward()
    assert len(calls) == 2   # the forward and its recomputation in backward
    assert not any(m.training for m in prunable.model.modules() if isinstance(m, torch.nn.Dropout))
