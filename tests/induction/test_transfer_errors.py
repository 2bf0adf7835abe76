"""Bad masks get a specific error that names the problem and the way out."""

from __future__ import annotations

import pytest
import torch

from hf_heuristic_core import MaskShapeError, PruningConfig, UnsupportedArchitectureError, transfer_subnetwork
from hf_heuristic_core.errors import UsageError
from tiny_models import one_torch_thread, tiny_model  # noqa: F401  (fixture)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _bert_masks(source):
    params = dict(source.named_parameters())
    name = "bert.encoder.layer.0.attention.self.query.weight"
    mask = torch.zeros(params[name].shape)
    mask[0, :5] = 1
    return {name: mask}


def test_masks_of_another_architecture_name_a_key_and_valid_names():
    gpt2 = tiny_model("gpt2", task="causal_lm")
    with pytest.raises(MaskShapeError, match=r"'bert\.encoder\.layer\.0\.attention\.self\.query\.weight' names no "
                                             r"parameter.*valid names look like \['transformer\."):
        transfer_subnetwork(gpt2, _bert_masks(tiny_model("bert")))


def test_masks_of_another_size_name_the_key_and_both_shapes():
    small, large = tiny_model("bert"), tiny_model("bert", intermediate_size=64)
    name = "bert.encoder.layer.0.intermediate.dense.weight"
    mask = torch.zeros(64, 32)
    mask[0] = 1
    with pytest.raises(MaskShapeError, match=rf"'{name}' has shape \(64, 32\) but the parameter has shape \(48, 32\)"):
        transfer_subnetwork(small, {name: mask})
    with pytest.raises(MaskShapeError, match=r"'heads' mask has shape \(3, 4\) but this 'bert' model needs \(2, 4\)"):
        transfer_subnetwork(large, {"heads": torch.tensor([[1.0, 0, 0, 0]] * 3)})


def test_keeping_nothing_or_everything_points_to_scratch_or_full():
    source = tiny_model("bert")
    name = "bert.encoder.layer.0.attention.self.query.weight"
    with pytest.raises(UsageError, match="keep no entry.*'scratch'"):
        transfer_subnetwork(source, {name: torch.zeros(32, 32)})
    with pytest.raises(UsageError, match="keep every one of their 1024 entries.*'full'"):
        transfer_subnetwork(source, {name: torch.ones(32, 32)})
    with pytest.raises(UsageError, match="keep every one.*'full'"):
        transfer_subnetwork(source, {"heads": torch.ones(2, 4), "mlps": torch.ones(2)})
    with pytest.raises(UsageError, match="empty"):
        transfer_subnetwork(source, {})


def test_soft_masks_are_refused_with_the_binarize_hint():
    source = tiny_model("bert")
    masks = _bert_masks(source)
    name = next(iter(masks))
    masks[name][1, 1] = 0.7
    with pytest.raises(MaskShapeError, match=r"not binary \(1 entries.*0\.7.*get_masks\(binary=True\)"):
        transfer_subnetwork(source, masks)


def test_granularity_conflicts_and_unmapped_architectures():
    source = tiny_model("bert")
    with pytest.raises(UsageError, match="granularity 'weight' but the mask keys \\['heads'\\] are 'unit'"):
        transfer_subnetwork(source, {"heads": torch.tensor([[1.0, 0, 0, 0]] * 2)},
                            config=PruningConfig(granularity="weight"))
    with pytest.raises(UsageError, match="mix unit/neuron kinds and parameter names"):
        transfer_subnetwork(source, {"heads": torch.eye(2, 4), **_bert_masks(source)})
    with pytest.raises(UnsupportedArchitectureError, match="SlimMap.*'opt'.*granularity='weight'"):
        transfer_subnetwork(tiny_model("opt", task="causal_lm"), {"heads": torch.eye(2, 4)})


def test_tied_aliases_with_different_masks_are_refused():
    source = tiny_model("gpt2", task="causal_lm")
    a = torch.zeros(99, 32)
    a[0] = 1
    b = torch.zeros(99, 32)
    b[1] = 1
    with pytest.raises(MaskShapeError, match="same tied tensor 'transformer.wte.weight' differ"):
        transfer_subnetwork(source, {"transformer.wte.weight": a, "lm_head.weight": b})
    model = transfer_subnetwork(source, {"lm_head.weight": a}, seed=0)   # the alias alone is the embedding's mask
    assert torch.equal(model.transformer.wte.weight[0], source.transformer.wte.weight[0])
