"""Weight and neuron masks against hand edits of the weights, on BERT, GPT-2 (Conv1D) and Llama."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from hf_heuristic_core import PrunableModel, PruningConfig, PruningError
from hf_heuristic_core.errors import MaskShapeError
from tiny_models import HOOK_SITES, INTERMEDIATE, LAYERS, make_batch, tiny_model

TYPES = ("bert", "gpt2", "llama")


def _logits(model, batch):
    with torch.no_grad():
        return model(**batch).logits


@pytest.mark.parametrize("model_type", TYPES)
def test_all_ones_weight_mask_is_bit_identical_and_unwrap_restores_parameters(model_type):
    model, batch = tiny_model(model_type), make_batch(model_type)
    before = {name: (id(p), p.detach().clone()) for name, p in model.named_parameters()}
    keys = list(model.state_dict())
    reference = _logits(model, batch)
    wrapped = PrunableModel(model, PruningConfig(granularity="weight", relaxation="gumbel_sigmoid"))
    assert set(wrapped.mask_shapes()) <= set(before)
    wrapped.set_masks({k: torch.ones(s) for k, s in wrapped.mask_shapes().items()})
    wrapped.eval()
    assert torch.equal(_logits(wrapped, batch), reference)
    unwrapped = wrapped.unwrap()
    assert list(unwrapped.state_dict()) == keys
    for name, p in unwrapped.named_parameters():
        assert id(p) == before[name][0] and torch.equal(p, before[name][1])
        assert p.requires_grad
    assert torch.equal(_logits(unwrapped, batch), reference)


@pytest.mark.parametrize("model_type", TYPES)
def test_binary_weight_mask_equals_weights_zeroed_by_hand(model_type):
    model, batch = tiny_model(model_type), make_batch(model_type)
    edited = copy.deepcopy(model)
    wrapped = PrunableModel(model, PruningConfig(granularity="weight", relaxation="continuous_sparsification"))
    generator = torch.Generator().manual_seed(1)
    masks = {k: (torch.rand(s, generator=generator) > 0.3).float() for k, s in wrapped.mask_shapes().items()}
    params = dict(edited.named_parameters())
    with torch.no_grad():
        for name, mask in masks.items():
            params[name].mul_(mask)
    wrapped.set_masks(masks)
    wrapped.eval()
    torch.testing.assert_close(_logits(wrapped, batch), _logits(edited, batch), rtol=0, atol=1e-6)


def test_gpt2_conv1d_weights_are_masked_in_their_own_in_out_layout():
    model = tiny_model("gpt2")
    wrapped = PrunableModel(model, PruningConfig(granularity="weight", target_modules=["mlp.c_fc"]))
    assert wrapped.mask_shapes() == {f"transformer.h.{i}.mlp.c_fc.weight": (32, INTERMEDIATE) for i in range(LAYERS)}


def _down_projections(model, model_type):
    layers_path, _, mlp_out = HOOK_SITES[model_type]
    return [layer.get_submodule(mlp_out) for layer in model.base_model.get_submodule(layers_path)]


def _zero_columns(module, keep):
    """Zero the output projection's input columns of pruned neurons (Linear [out, in], Conv1D [in, out])."""
    with torch.no_grad():
        if isinstance(module, nn.Linear):
            module.weight.mul_(keep.view(1, -1))
        else:
            module.weight.mul_(keep.view(-1, 1))


@pytest.mark.parametrize("model_type", TYPES)
def test_neuron_zero_ablation_equals_input_columns_zeroed(model_type):
    model, batch = tiny_model(model_type), make_batch(model_type)
    edited = copy.deepcopy(model)
    wrapped = PrunableModel(model, PruningConfig(granularity="neuron", ablation="zero"))
    assert wrapped.mask_shapes() == {"neurons": (LAYERS, INTERMEDIATE)}
    masks = (torch.rand(LAYERS, INTERMEDIATE, generator=torch.Generator().manual_seed(2)) > 0.5).float()
    for layer, module in enumerate(_down_projections(edited, model_type)):
        _zero_columns(module, masks[layer])
    wrapped.set_masks(neurons=masks)
    wrapped.eval()
    torch.testing.assert_close(_logits(wrapped, batch), _logits(edited, batch), rtol=0, atol=1e-6)


@pytest.mark.parametrize("model_type", TYPES)
def test_neuron_mean_ablation_equals_columns_replaced_by_their_means(model_type):
    """Mean ablation of neuron j == zeroing its column and adding mean_j * column_j to the projection's bias."""
    model, batch = tiny_model(model_type), make_batch(model_type)
    edited = copy.deepcopy(model)
    wrapped = PrunableModel(model, PruningConfig(granularity="neuron", ablation="mean"))
    wrapped.compute_means([batch], show_progress=False)
    means = wrapped.get_means()["neurons"]
    # independent reference: the mean over real tokens of the projection's input, from a plain forward hook
    seen = []
    handles = [m.register_forward_pre_hook(lambda mod, args: seen.append(args[0].detach()))
               for m in _down_projections(edited, model_type)]
    _logits(edited, batch)
    for handle in handles:
        handle.remove()
    real = batch["attention_mask"].bool()
    for layer, x in enumerate(seen):
        torch.testing.assert_close(means[layer], x.reshape(real.shape + (-1,))[real].mean(0), rtol=1e-5, atol=1e-6)
    masks = (torch.rand(LAYERS, INTERMEDIATE, generator=torch.Generator().manual_seed(3)) > 0.5).float()
    for layer, module in enumerate(_down_projections(edited, model_type)):
        dropped = (1 - masks[layer]) * means[layer]
        weight = module.weight.detach()
        shift = weight @ dropped if isinstance(module, nn.Linear) else dropped @ weight
        with torch.no_grad():
            if module.bias is None:
                module.bias = nn.Parameter(torch.zeros(shift.shape))
            module.bias.add_(shift)
        _zero_columns(module, masks[layer])
    wrapped.set_masks(neurons=masks)
    wrapped.eval()
    torch.testing.assert_close(_logits(wrapped, batch), _logits(edited, batch), rtol=1e-4, atol=1e-5)


def test_weight_masks_work_on_a_plain_torch_module():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(5, 7), nn.ReLU(), nn.Linear(7, 3))
    x = torch.randn(4, 5)
    wrapped = PrunableModel(net, PruningConfig(granularity="weight", relaxation="gumbel_sigmoid", mask_bias=True))
    assert wrapped.mask_shapes() == {"0.weight": (7, 5), "0.bias": (7,), "2.weight": (3, 7), "2.bias": (3,)}
    wrapped.set_masks({"0.weight": torch.zeros(7, 5), "0.bias": torch.zeros(7)})
    wrapped.eval()
    with torch.no_grad():
        expected = net[2](torch.zeros(4, 7))   # the first layer's output is gone, ReLU(0) = 0
        torch.testing.assert_close(wrapped(x), expected)
    wrapped.train()
    out = wrapped(x).sum()
    out.backward()
    assert wrapped.mask_logits["2.weight"].grad is not None


def test_target_modules_and_layer_ranges_select_parameters():
    model = tiny_model("bert")
    config = PruningConfig(granularity="weight", target_modules=["query", "output.dense"], layers_to_transform=[1])
    names = set(PrunableModel(model, config).mask_shapes())
    assert names == {"bert.encoder.layer.1.attention.self.query.weight",
                     "bert.encoder.layer.1.attention.output.dense.weight", "bert.encoder.layer.1.output.dense.weight"}
    regex = PruningConfig(granularity="weight", target_modules=r".*layer\.0\.intermediate\.dense")
    assert set(PrunableModel(tiny_model("bert"), regex).mask_shapes()) == {
        "bert.encoder.layer.0.intermediate.dense.weight"}


def test_bad_weight_selections_are_refused_with_the_fix():
    with pytest.raises(PruningError, match="'nonexistent' matches no Linear/Conv1D module"):
        PrunableModel(tiny_model("bert"), PruningConfig(granularity="weight", target_modules=["nonexistent"]))
    with pytest.raises(PruningError, match=r"layers_to_transform=\[7\] keeps none"):
        PrunableModel(tiny_model("bert"), PruningConfig(granularity="weight", layers_to_transform=[7]))
    with pytest.raises(ValueError, match="choose granularity='weight'"):
        PruningConfig(target_modules=["query"])


def test_weight_masks_refuse_quantized_models():
    model = tiny_model("llama")
    model.config.quantization_config = {"load_in_4bit": True}
    with pytest.raises(PruningError, match="is quantized.*without quantization"):
        PrunableModel(model, PruningConfig(granularity="weight"))
    net = nn.Sequential(nn.Linear(4, 4))
    net[0].weight = nn.Parameter(torch.zeros(4, 4, dtype=torch.int8), requires_grad=False)
    with pytest.raises(PruningError, match=r"module '0' \(weight dtype torch.int8\) is quantized"):
        PrunableModel(net, PruningConfig(granularity="weight"))


def test_wrong_mask_shapes_and_kinds_are_refused():
    wrapped = PrunableModel(tiny_model("gpt2"), PruningConfig(granularity="weight", target_modules=["mlp.c_fc"]))
    name = "transformer.h.0.mlp.c_fc.weight"
    with pytest.raises(MaskShapeError, match=r"has shape \(48, 32\), but .* needs .*\[32, 48\]"):
        wrapped.set_masks({name: torch.ones(48, 32)})
    with pytest.raises(MaskShapeError, match=r"Unknown mask kind\(s\) \['heads'\]"):
        wrapped.set_masks(heads=torch.ones(2, 4))
    neurons = PrunableModel(tiny_model("gpt2"), PruningConfig(granularity="neuron", ablation="zero"))
    with pytest.raises(MaskShapeError, match="neurons mask has shape"):
        neurons.set_masks(neurons=torch.ones(LAYERS, 3))


def test_neuron_resample_ablation_takes_another_examples_activation():
    model, batch = tiny_model("llama"), make_batch("llama")
    edited = copy.deepcopy(model)
    wrapped = PrunableModel(model, PruningConfig(granularity="neuron", ablation="resample"))
    masks = (torch.rand(LAYERS, INTERMEDIATE, generator=torch.Generator().manual_seed(5)) > 0.5).float()

    def replace(layer):
        def hook(module, args):
            x = args[0]
            return (torch.where(masks[layer].bool(), x, x.roll(1, dims=0)),)
        return hook

    for layer, module in enumerate(_down_projections(edited, "llama")):
        module.register_forward_pre_hook(replace(layer))
    wrapped.set_masks(neurons=masks)
    wrapped.eval()
    torch.testing.assert_close(_logits(wrapped, batch), _logits(edited, batch), rtol=0, atol=1e-6)
