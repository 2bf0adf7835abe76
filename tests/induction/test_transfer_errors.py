"""Bad masks get a specific error that names the problem and the way out."""

from __future__ import annotations

import pytest
import torch
from tiny_models import one_torch_thread, tiny_model  # noqa: F401  (fixture)

from hf_heuristic_core import (
    MaskShapeError,
    PruningConfig,
    UnsupportedArchitectureError,
    transfer_subnetwork,
)
from hf_heuristic_core.errors import UsageError

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


def test_a_target_of_another_config_or_class_is_refused_and_a_matching_one_is_used_in_place():
    source = tiny_model("bert")
    masks = _bert_masks(source)
    other = tiny_model("bert", intermediate_size=64)
    with pytest.raises(UsageError, match=r"configs differ \(intermediate_size: source 48, target 64\)"):
        transfer_subnetwork(source, masks, target=other)
    with pytest.raises(UsageError, match="target is a GPT2ForSequenceClassification but the source a "
                                         "BertForSequenceClassification"):
        transfer_subnetwork(source, masks, target=tiny_model("gpt2"))
    target = tiny_model("bert", seed=11)
    before = {k: v.clone() for k, v in target.state_dict().items()}
    model = transfer_subnetwork(source, masks, target=target)
    assert model is target and model.subtask_induction["seed"] is None
    name = next(iter(masks))
    gate = masks[name].bool()
    weight = model.bert.encoder.layer[0].attention.self.query.weight
    assert torch.equal(weight[gate], source.state_dict()[name][gate])
    assert torch.equal(weight[~gate], before[name][~gate])


def test_unit_kinds_that_were_not_pruned_are_not_transplanted():
    from hf_heuristic_core import PrunableModel

    source = tiny_model("bert")
    config = PruningConfig(prune_mlps=False)
    prunable = PrunableModel(source, config)
    prunable.set_masks({"heads": torch.tensor([[1.0, 0, 0, 0], [0, 0, 0, 0]])})
    masks = prunable.get_masks(binary=True)
    assert masks["mlps"].tolist() == [1.0, 1.0]          # get_masks reports unpruned kinds as all ones
    model = transfer_subnetwork(prunable, masks, seed=0, config=prunable.pruning_config)
    assert set(model.subtask_induction["masks"]) == {"heads"}
    torch.manual_seed(0)
    fresh = type(source)(source.config)
    name = "bert.encoder.layer.0.intermediate.dense.weight"
    assert torch.equal(dict(model.named_parameters())[name], dict(fresh.named_parameters())[name])
    assert not any("intermediate" in n or "output.dense" in n and "attention" not in n
                   for n in model.subtask_induction["tensors"])


def test_a_saved_mask_artifact_is_accepted_and_one_of_another_model_type_is_refused(tmp_path):
    from hf_heuristic_core import PrunableModel, read_artifact

    source = tiny_model("bert")
    prunable = PrunableModel(source, PruningConfig(granularity="weight", relaxation="continuous_sparsification",
                                                   target_modules=["query"]))
    masks = {k: (torch.arange(v.numel()).view(v.shape) % 4 == 0).float() for k, v in prunable.get_masks().items()}
    prunable.set_masks(masks)
    prunable.save_pretrained(tmp_path / "artifact")
    artifact = read_artifact(tmp_path / "artifact")
    model = transfer_subnetwork(prunable.unwrap(), artifact, seed=0)
    record = model.subtask_induction
    assert record["relaxation"] == "continuous_sparsification" and record["granularity"] == "weight"
    assert {n: t["kept"] for n, t in record["tensors"].items()} == {n: int(m.sum()) for n, m in masks.items()}
    with pytest.raises(MaskShapeError, match="learned on a 'bert' model .* the source is a 'gpt2' model"):
        transfer_subnetwork(tiny_model("gpt2"), artifact)
