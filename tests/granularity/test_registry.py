"""A granularity defined outside the package plugs in with one registration line and no edit to PrunableModel.

The toy granularity scales each layer's contribution to the residual stream by its mask (one mask per layer): its
reference is written here by hand, as plain forward hooks that scale the same tensors.
"""

from __future__ import annotations

import pytest
import torch

from hf_heuristic_core import PrunableModel, PruningArguments, PruningConfig, PruningTrainer, read_artifact
from hf_heuristic_core.batching import PadCollator
from hf_heuristic_core.errors import MaskShapeError, PruningError
from hf_heuristic_core.granularity import GRANULARITIES, GRANULARITY_SETTINGS, register_granularity
from hf_heuristic_core.granularity.base import Granularity, MaskKind
from tiny_models import LAYERS, logits_of, make_batch, second_token_labels, tiny_bert_classifier, tiny_model


class LayerScale(Granularity):
    """One mask per layer: the layer's output hidden states are multiplied by it (zero ablation only)."""

    name = "layer_scale"

    def __init__(self, model, config):
        super().__init__(model, config)
        self.layers = list(model.base_model.encoder.layer)

    def kinds(self):
        return {"layers": MaskKind("layers", (len(self.layers),), "layers", params_per_entry=2.0,
                                   dims=("num_layers",))}

    def attach(self, source):
        def hook_for(index):
            def hook(module, args, output):
                z = source.active_mask("layers")
                if z is None:
                    return None
                hidden = output[0] if isinstance(output, tuple) else output
                scaled = hidden * z[index].to(hidden.dtype)
                return (scaled, *output[1:]) if isinstance(output, tuple) else scaled
            return hook
        return [layer.register_forward_hook(hook_for(i)) for i, layer in enumerate(self.layers)]

    def describe(self):
        return {"model_type": self.model.config.model_type, "num_layers": len(self.layers)}


@pytest.fixture
def layer_scale():
    register_granularity("layer_scale", LayerScale)
    try:
        yield
    finally:
        GRANULARITIES._entries.pop("layer_scale", None)
        GRANULARITY_SETTINGS._entries.pop("layer_scale", None)


def _reference(model, scales, batch):
    """The same model with each layer's output scaled by plain hooks written here."""
    handles = [layer.register_forward_hook(
        lambda module, args, output, s=float(s): (output[0] * s, *output[1:]) if isinstance(output, tuple)
        else output * s) for layer, s in zip(model.base_model.encoder.layer, scales)]
    try:
        return logits_of(model, batch)
    finally:
        for handle in handles:
            handle.remove()


def test_unknown_granularity_is_a_clear_error():
    with pytest.raises(ValueError, match=r"granularity='layer_scale' is not one of \[.*'unit'"):
        PruningConfig(granularity="layer_scale")


def test_registered_granularity_masks_equal_its_reference(layer_scale):
    model = tiny_model("bert")
    batch = make_batch("bert")
    full = logits_of(model, batch)
    pm = PrunableModel(model, PruningConfig(granularity="layer_scale", ablation="zero")).eval()
    assert pm.mask_shapes() == {"layers": (LAYERS,)}
    assert pm.pruning_config.mask_shapes == {"layers": [LAYERS]}
    pm.set_masks(layers=torch.ones(LAYERS))
    assert torch.equal(logits_of(pm, batch), full)            # all-ones masks: the unwrapped model exactly
    pm.set_masks(layers=torch.tensor([0.0, 1.0]))
    torch.testing.assert_close(logits_of(pm, batch), _reference(pm.model, [0.0, 1.0], batch), atol=0, rtol=0)
    assert pm.sparsity() == 0.5
    with pytest.raises(MaskShapeError, match=r"layers mask has shape \(3,\), but this bert model needs "
                                             r"\[num_layers\] = \[2\]"):
        pm.set_masks(layers=torch.ones(3))
    with pytest.raises(MaskShapeError, match=r"Unknown mask kind\(s\) \['heads'\]"):
        pm.set_masks(heads=torch.ones(2, 4))
    assert torch.equal(pm.unwrap()(**batch).logits, full)


def test_registered_granularity_refuses_ablations_it_cannot_apply(layer_scale):
    with pytest.raises(PruningError, match=r"'layer_scale' granularity cannot apply 'mean' ablation; it supports "
                                           r"\['zero'\]"):
        PrunableModel(tiny_model("bert"), PruningConfig(granularity="layer_scale"))


def test_registered_granularity_trains_saves_and_reloads(layer_scale, tmp_path):
    data = second_token_labels(64, seed=0, num_labels=3)
    pm = PrunableModel(tiny_bert_classifier(), PruningConfig(granularity="layer_scale", ablation="zero",
                                                             init_mean=3.0))
    args = PruningArguments(output_dir=str(tmp_path / "run"), target_sparsity=0.5, max_steps=6,
                            sparsity_warmup_steps=3, per_device_train_batch_size=8, report_to="none",
                            use_cpu=True, save_strategy="no", logging_strategy="no", disable_tqdm=True,
                            sparsity_penalty="expected", reg_learning_rate=0.1, warmup_steps=0)
    before = pm.mask_logits["layers"].detach().clone()
    PruningTrainer(model=pm, args=args, train_dataset=data, data_collator=PadCollator(0)).train()
    assert not torch.equal(pm.mask_logits["layers"].detach(), before)
    masks = pm.get_masks()
    assert set(masks) == {"layers"} and int(masks["layers"].sum()) == 1   # exact top-k: 1 of 2 layers pruned
    artifact = read_artifact(tmp_path / "run")
    assert artifact.config.granularity == "layer_scale" and torch.equal(artifact.masks["layers"], masks["layers"])
    fresh = PrunableModel(tiny_bert_classifier(), PruningConfig(granularity="layer_scale", ablation="zero"))
    fresh.load_masks(tmp_path / "run").eval()
    batch = {"input_ids": torch.tensor([row[:4] for row in data[:4]["input_ids"]])}
    assert torch.equal(fresh.get_masks()["layers"], masks["layers"])
    assert torch.equal(logits_of(fresh, batch), logits_of(pm.eval(), batch))
