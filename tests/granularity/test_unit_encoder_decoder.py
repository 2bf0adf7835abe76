"""Encoder-decoder models (BART, T5): encoder, decoder and cross-attention heads and both MLP stacks are masked, each
as its own kind, against references made by editing weights of a copy of the model (never the package's mask code).
A model whose layers the map reaches only in part is refused."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import AutoConfig, AutoModelForSeq2SeqLM, AutoModelForSequenceClassification

from hf_heuristic_core import PrunableModel, PruningConfig, UnsupportedArchitectureError
from tiny_models import one_torch_thread  # noqa: F401  (fixture)
from tiny_models import constant_output, logits_of, make_batch, mean_ablate_head_by_weights, zero_head_inputs

pytestmark = pytest.mark.usefixtures("one_torch_thread")

ENC_LAYERS, DEC_LAYERS = 2, 3
# kind -> (layer list path under base_model, projection whose input (heads) or output (MLP) the kind masks)
SITES = {
    "bart": {"encoder_heads": ("encoder.layers", "self_attn.out_proj"), "encoder_mlps": ("encoder.layers", "fc2"),
             "decoder_heads": ("decoder.layers", "self_attn.out_proj"),
             "cross_heads": ("decoder.layers", "encoder_attn.out_proj"), "decoder_mlps": ("decoder.layers", "fc2")},
    "t5": {"encoder_heads": ("encoder.block", "layer.0.SelfAttention.o"),
           "encoder_mlps": ("encoder.block", "layer.1.DenseReluDense.wo"),
           "decoder_heads": ("decoder.block", "layer.0.SelfAttention.o"),
           "cross_heads": ("decoder.block", "layer.1.EncDecAttention.o"),
           "decoder_mlps": ("decoder.block", "layer.2.DenseReluDense.wo")},
}
HEADS = {"bart": {"encoder": 4, "decoder": 2}, "t5": {"encoder": 4, "decoder": 4}}


def _model(model_type: str):
    torch.manual_seed(0)
    if model_type == "bart":
        config = AutoConfig.for_model("bart", vocab_size=99, d_model=32, encoder_layers=ENC_LAYERS,
                                      decoder_layers=DEC_LAYERS, encoder_attention_heads=4, decoder_attention_heads=2,
                                      encoder_ffn_dim=48, decoder_ffn_dim=40, max_position_embeddings=64, dropout=0.0,
                                      attention_dropout=0.0, num_labels=3, pad_token_id=1)
        model = AutoModelForSequenceClassification.from_config(config, attn_implementation="eager")
    else:
        config = AutoConfig.for_model("t5", vocab_size=99, d_model=32, d_kv=8, d_ff=48, num_layers=ENC_LAYERS,
                                      num_decoder_layers=DEC_LAYERS, num_heads=4, dropout_rate=0.0, pad_token_id=0)
        model = AutoModelForSeq2SeqLM.from_config(config, attn_implementation="eager")
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():   # non-trivial biases and norms, so a dropped bias or mean term cannot hide behind a zero
        for name, parameter in model.named_parameters():
            if name.endswith("bias") or "norm" in name.lower():
                parameter.add_(0.1 * torch.randn(parameter.shape, generator=generator))
    return model.eval()


def _batch(model_type: str) -> dict:
    batch = make_batch("bert")
    if model_type == "t5":
        batch["decoder_input_ids"] = torch.randint(3, 99, (3, 5), generator=torch.Generator().manual_seed(3))
    else:
        batch["input_ids"][:, -1] = 2   # BART classifies from the last </s>; every example ends with one
        batch["attention_mask"][:] = 1
    return batch


def _module(model, model_type: str, kind: str, layer: int):
    layers_path, path = SITES[model_type][kind]
    return model.base_model.get_submodule(layers_path)[layer].get_submodule(path)


def _shape(model_type: str, kind: str) -> tuple[int, ...]:
    layers = ENC_LAYERS if kind.startswith("encoder") else DEC_LAYERS
    heads = HEADS[model_type]["encoder" if kind.startswith("encoder") else "decoder"]
    return (layers, heads) if kind.endswith("heads") else (layers,)


def _masks(model_type: str) -> dict[str, torch.Tensor]:
    """One pruned entry per kind, at varied layers."""
    masks = {kind: torch.ones(_shape(model_type, kind)) for kind in SITES[model_type]}
    masks["encoder_heads"][1, 2] = 0
    masks["decoder_heads"][0, 1] = 0
    masks["cross_heads"][2, 0] = 0
    masks["encoder_mlps"][0] = 0
    masks["decoder_mlps"][1] = 0
    return masks


@pytest.mark.parametrize("model_type", ["bart", "t5"])
def test_every_stack_is_a_kind_of_its_own(model_type):
    pm = PrunableModel(_model(model_type), PruningConfig(ablation="zero"))
    assert pm.mask_shapes() == {kind: _shape(model_type, kind) for kind in SITES[model_type]}
    assert list(pm.mask_shapes()) == ["encoder_heads", "encoder_mlps", "decoder_heads", "cross_heads",
                                      "decoder_mlps"]
    assert pm.num_units() == sum(torch.Size(_shape(model_type, k)).numel() for k in SITES[model_type])
    assert pm.kinds["cross_heads"].label((2, 0)) == "cross.L2.H0"
    assert pm.kinds["decoder_mlps"].label((1,)) == "dec.L1.MLP"


@pytest.mark.parametrize("model_type", ["bart", "t5"])
def test_all_ones_reproduce_the_model_and_zero_ablation_equals_zeroed_weights(model_type):
    model, batch = _model(model_type), _batch(model_type)
    full = logits_of(model, batch)
    pm = PrunableModel(copy.deepcopy(model), PruningConfig(ablation="zero")).eval()
    pm.set_masks({kind: torch.ones(shape) for kind, shape in pm.mask_shapes().items()})
    assert torch.equal(logits_of(pm, batch), full)
    masks = _masks(model_type)
    pm.set_masks(masks)
    reference = copy.deepcopy(model)
    for kind, mask in masks.items():
        for index in (mask == 0).nonzero().tolist():
            module = _module(reference, model_type, kind, index[0])
            if kind.endswith("heads"):
                zero_head_inputs(module, [index[1]], module.in_features // mask.shape[1])
            else:
                constant_output(module, torch.zeros(module.out_features))
    expected = logits_of(reference, batch)
    assert not torch.allclose(expected, full, atol=1e-4)
    torch.testing.assert_close(logits_of(pm, batch), expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("model_type", ["bart", "t5"])
def test_mean_ablation_equals_means_folded_into_the_weights(model_type):
    model, batch = _model(model_type), _batch(model_type)
    pm = PrunableModel(copy.deepcopy(model), PruningConfig(ablation="mean")).eval()
    generator = torch.Generator().manual_seed(5)
    means = {kind: torch.randn(pm.kinds[kind].means_shape, generator=generator) for kind in pm.kinds}
    pm.set_means(means)
    masks = _masks(model_type)
    pm.set_masks(masks)
    reference = copy.deepcopy(model)
    for kind, mask in masks.items():
        for index in (mask == 0).nonzero().tolist():
            module = _module(reference, model_type, kind, index[0])
            if kind.endswith("heads"):
                head_dim = module.in_features // mask.shape[1]
                mean_ablate_head_by_weights(module, index[1], head_dim, means[kind][index[0], index[1]])
            else:
                constant_output(module, means[kind][index[0]])
    torch.testing.assert_close(logits_of(pm, batch), logits_of(reference, batch), atol=1e-5, rtol=1e-5)


def test_a_model_whose_layers_are_partly_covered_is_refused():
    model = _model("bart")
    model.config.model_type = "bart-like-unknown"   # not in the map: detection finds one layer list only
    with pytest.raises(UnsupportedArchitectureError, match=r"model also has layers with attention at "
                                                           r"\['decoder.layers'\].*allow_partial_model=True"):
        PrunableModel(model, PruningConfig(ablation="zero"))
    pm = PrunableModel(model, PruningConfig(ablation="zero", allow_partial_model=True))
    assert pm.mask_shapes() == {"heads": (ENC_LAYERS, 4), "mlps": (ENC_LAYERS,)}
    assert pm.architecture.notes == ["partial model: layers at ['decoder.layers'] are not masked"]
