"""Weight and neuron mask artifacts: bit-packed weight masks, round trips, and the granularity check on load."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open
from torch import nn

from hf_heuristic_core import PrunableModel, PruningConfig
from hf_heuristic_core.artifact_packing import pack_bits, unpack_bits
from hf_heuristic_core.artifacts import MASKS_NAME, read_artifact
from hf_heuristic_core.errors import ArtifactError
from tiny_models import make_batch, tiny_model


def test_pack_bits_round_trips_and_uses_one_bit_per_entry():
    mask = (torch.rand(5, 13, generator=torch.Generator().manual_seed(0)) > 0.5).float()
    packed = pack_bits(mask)
    assert packed.dtype == torch.uint8 and packed.numel() == (65 + 7) // 8
    assert torch.equal(unpack_bits(packed, (5, 13)), mask)
    # numpy's big-endian bit order, by hand: entries 1,0,1,1,0,0,0,1 -> 0b10110001
    assert pack_bits(torch.tensor([1., 0, 1, 1, 0, 0, 0, 1])).tolist() == [0b10110001]
    with pytest.raises(ArtifactError, match="needs 8 uint8 bytes"):
        unpack_bits(packed, (8, 8))


def _weight_model(relaxation="gumbel_sigmoid"):
    return PrunableModel(tiny_model("gpt2"), PruningConfig(granularity="weight", relaxation=relaxation))


def test_weight_artifact_is_bit_packed_and_reloads_the_same_masks(tmp_path):
    pm = _weight_model()
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for _, logit in pm.mask_logits.items():
            logit.copy_(torch.randn(logit.shape, generator=generator))
    masks = pm.get_masks(binary=True)
    for kind, logit in pm.mask_logits.items():
        assert torch.equal(masks[kind], (logit.detach() > 0).float())   # Csordás' 1[l > 0]
    pm.save_pretrained(tmp_path)
    n_entries = sum(s.numel() for _, s in pm.mask_logits.items())
    size = (tmp_path / MASKS_NAME).stat().st_size
    assert size < n_entries / 8 + 20_000   # one bit per weight plus the safetensors header
    with safe_open(str(tmp_path / MASKS_NAME), framework="pt") as handle:
        keys, metadata = list(handle.keys()), handle.metadata()
    assert not any(k.startswith("logits.") for k in keys) and all(k.startswith("packed.mask.") for k in keys)
    assert (metadata["granularity"], metadata["relaxation"], metadata["ablation"]) == \
        ("weight", "gumbel_sigmoid", "zero")
    config = json.loads((tmp_path / "pruning_config.json").read_text())
    assert config["relaxation_settings"] == {"gumbel_init_prob": 0.9, "gumbel_tau": 1.0}
    assert config["mask_samples"] == 4
    artifact = read_artifact(tmp_path)
    assert all(torch.equal(artifact.masks[k], masks[k]) for k in masks)

    fresh = _weight_model()
    fresh.load_masks(tmp_path)
    fresh.eval()
    pm.eval()
    batch = make_batch("gpt2")
    with torch.no_grad():
        assert torch.equal(fresh(**batch).logits, pm(**batch).logits)
    assert all(torch.equal(fresh.get_masks()[k], masks[k]) for k in masks)


def test_weight_artifact_with_logits_resumes_training_state(tmp_path):
    pm = _weight_model("continuous_sparsification")
    with torch.no_grad():
        for _, logit in pm.mask_logits.items():
            logit.normal_(0, 0.1)
    pm.save_pretrained(tmp_path, include_logits=True)
    fresh = _weight_model("continuous_sparsification")
    fresh.load_masks(tmp_path)
    assert all(torch.equal(fresh.mask_logits[k].detach(), v.detach()) for k, v in pm.mask_logits.items())


def test_from_pretrained_wraps_the_base_model_with_the_weight_granularity(tmp_path):
    model = tiny_model("bert")
    model.save_pretrained(tmp_path / "base")
    pm = PrunableModel(model, PruningConfig(granularity="weight", target_modules=["query"]))
    pm.pruning_config.base_model_name_or_path = str(tmp_path / "base")
    masks = {k: torch.zeros(s) for k, s in pm.mask_shapes().items()}
    pm.set_masks(masks)
    pm.save_pretrained(tmp_path / "masks")
    loaded = PrunableModel.from_pretrained(tmp_path / "masks")
    assert loaded.pruning_config.granularity == "weight"
    assert set(loaded.mask_shapes()) == set(masks)
    assert all(float(m.sum()) == 0 for m in loaded.get_masks().values())


def test_loading_masks_of_another_granularity_is_a_clear_error(tmp_path):
    units = PrunableModel(tiny_model("gpt2"), PruningConfig(ablation="zero"))
    units.save_pretrained(tmp_path / "units")
    with pytest.raises(ArtifactError, match="are 'unit' masks, but this model was wrapped with "
                                            r"PruningConfig\(granularity='weight'\)"):
        _weight_model().load_masks(tmp_path / "units")
    neurons = PrunableModel(tiny_model("gpt2"), PruningConfig(granularity="neuron", ablation="zero"))
    neurons.set_masks(neurons=torch.ones(2, 48))
    neurons.save_pretrained(tmp_path / "neurons")
    again = PrunableModel(tiny_model("gpt2"), PruningConfig(granularity="neuron", ablation="zero"))
    again.load_masks(tmp_path / "neurons")
    assert torch.equal(again.get_masks()["neurons"], torch.ones(2, 48))
    with pytest.raises(ArtifactError, match="are 'neuron' masks"):
        _weight_model().load_masks(tmp_path / "neurons")


def test_weight_masks_on_a_plain_module_save_and_load(tmp_path):
    net = nn.Sequential(nn.Linear(4, 9), nn.ReLU(), nn.Linear(9, 2))
    pm = PrunableModel(net, PruningConfig(granularity="weight"))
    pm.set_masks({"0.weight": (torch.arange(36).view(9, 4) % 3 == 0).float()})
    pm.save_pretrained(tmp_path)
    other = PrunableModel(nn.Sequential(nn.Linear(4, 9), nn.ReLU(), nn.Linear(9, 2)),
                          PruningConfig(granularity="weight"))
    other.load_masks(tmp_path)
    assert torch.equal(other.get_masks()["0.weight"], (torch.arange(36).view(9, 4) % 3 == 0).float())
