"""The search's mask helpers name no unit kind: effective size with neuron and weight masks, re-scoring stored masks
of any kind, and the errors for masks that do not fit the model."""

from __future__ import annotations

import pytest
import torch

from hf_heuristic_core import EffectiveSizeError, PrunableModel, PruningConfig
from hf_heuristic_core.search import search_effective_size
from hf_heuristic_core.search.masks import all_kept, check_known_masks, validated_known_masks
from tiny_models import one_torch_thread  # noqa: F401  (fixture)
from tiny_models import second_token_labels as token_data, tiny_bert_classifier as tiny_bert

pytestmark = pytest.mark.usefixtures("one_torch_thread")

FAST = {"per_device_train_batch_size": 8}
CONFIGS = {
    "neuron": PruningConfig(granularity="neuron", ablation="zero"),
    "weight": PruningConfig(granularity="weight", ablation="zero", target_modules=["output.dense"]),
}


@pytest.fixture(scope="module")
def data():
    return {"train": token_data(48, 0), "a": token_data(24, 1)}


@pytest.mark.parametrize("granularity", sorted(CONFIGS))
def test_all_kept_covers_every_kind_of_the_granularity(granularity):
    prunable = PrunableModel(tiny_bert(), CONFIGS[granularity])
    kept = all_kept(prunable)
    assert {k: tuple(v.shape) for k, v in kept.items()} == prunable.mask_shapes()
    assert all(bool((v == 1).all()) for v in kept.values())


@pytest.mark.parametrize("granularity", sorted(CONFIGS))
def test_effective_size_search_runs_with_neuron_and_weight_masks(granularity, data):
    """Today's crash: `MaskShapeError: Unknown mask kind(s) ['heads', 'mlps']` for the all-kept level 0.0."""
    config = CONFIGS[granularity]
    kinds = PrunableModel(tiny_bert(), config).mask_shapes()
    result = search_effective_size(tiny_bert(), data["train"], {"a": data["a"]}, strategy="grid",
                                   sparsities=[0.0, 0.5], steps_per_run=2, pruning_config=config,
                                   pruning_overrides=FAST, early_stopping=False)
    total = sum(torch.Size(shape).numel() for shape in kinds.values())
    for level in (0.0, 0.5):
        masks = result.masks[0][level]
        assert {k: tuple(torch.tensor(v).shape) for k, v in masks.items()} == kinds
        pruned = sum(float((1 - torch.tensor(v)).sum()) for v in masks.values())
        assert pruned == round(level * total)
    assert set(result.pruned_accuracy[0]) == {0.0, 0.5}
    # The all-kept level is the full model: its accuracy is the full model's.
    assert result.pruned_accuracy[0][0.0]["a"] == pytest.approx(result.full_accuracy["a"])


def test_stored_neuron_masks_are_rescored_without_pruning(data):
    config = CONFIGS["neuron"]
    shapes = PrunableModel(tiny_bert(), config).mask_shapes()
    neurons = torch.ones(shapes["neurons"])
    neurons[:, ::2] = 0
    result = search_effective_size(tiny_bert(), data["train"], {"a": data["a"]}, pruning_config=config,
                                   masks={"0": {"0.5": {"neurons": neurons.tolist()}}})
    assert result.cost_steps == 0 and result.sparsities == [0.5]
    assert torch.equal(torch.tensor(result.masks[0][0.5]["neurons"]), neurons)


def test_known_masks_of_any_kind_pass_the_format_check_and_the_model_checks_kinds():
    known = check_known_masks({"0": {"0.5": {"neurons": [[1.0, 0.0]]}}})
    assert list(known[0][0.5]) == ["neurons"]
    prunable = PrunableModel(tiny_bert(), PruningConfig(ablation="zero"))
    with pytest.raises(EffectiveSizeError, match=r"masks\[0\]\[0.5\] cannot be used on this model: Unknown mask "
                                                 r"kind\(s\) \['neurons'\]"):
        validated_known_masks(prunable, known)
    heads_only = check_known_masks({0: {0.5: {"heads": torch.ones(2, 4).tolist()}}})
    with pytest.raises(EffectiveSizeError, match=r"No mask for the pruned kind\(s\) \['mlps'\]"):
        validated_known_masks(prunable, heads_only)


@pytest.mark.parametrize("bad, message", [
    ({0: {0.5: {}}}, r"must map each mask kind to its mask"),
    ({0: {0.5: [1, 0]}}, r"must map each mask kind to its mask"),
    ({}, r"masks must map seed -> sparsity -> \{kind: mask\}"),
])
def test_malformed_known_masks_are_refused_with_the_expected_shape(bad, message):
    with pytest.raises(EffectiveSizeError, match=message):
        check_known_masks(bad)


def test_effective_size_callback_runs_with_neuron_masks(tmp_path, data):
    """The callback hands its pruning config to the search: neuron masks work there too (they crashed)."""
    import json

    import transformers

    from hf_heuristic_core.batching import PadCollator
    from hf_heuristic_core.search.callback import EffectiveSizeCallback

    callback = EffectiveSizeCallback({"a": data["a"]}, data["train"], strategy="grid", sparsities=[0.0, 0.5],
                                     steps_per_run=2, pruning_config=CONFIGS["neuron"], pruning_overrides=FAST,
                                     means_examples=16, figure=False)
    args = transformers.TrainingArguments(output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=8,
                                          save_strategy="steps", save_steps=2, report_to="none", use_cpu=True,
                                          disable_tqdm=True, save_only_model=True)
    transformers.Trainer(model=tiny_bert(), args=args, train_dataset=data["train"], data_collator=PadCollator(0),
                         callbacks=[callback]).train()
    (entry,) = json.loads((tmp_path / "effective_size.json").read_text())["checkpoints"]
    assert entry["status"] == "done" and set(entry["effective_size"]) == {"all"}
