"""The `evaluate` modules shipped in hf_heuristic_core/metrics load offline by path and agree with
`evaluate_subnetwork` on a real (tiny) subnetwork."""

from __future__ import annotations

import math

import evaluate
import pytest
import torch
import transformers

from hf_heuristic_core import PrunableModel, PruningConfig
from hf_heuristic_core.evaluation import evaluate_subnetwork
from hf_heuristic_core.metrics import METRICS, metric_path


@pytest.fixture
def faithfulness():
    """A fresh module per test: after a rejected batch, an `evaluate` module keeps its half-open writer."""
    return evaluate.load(metric_path("subnetwork_faithfulness"))


def test_metric_path_points_at_the_module_and_rejects_unknown_names():
    for name in METRICS:
        assert metric_path(name).endswith(name)
    with pytest.raises(ValueError, match="unknown metric 'bleu'"):
        metric_path("bleu")


def test_accuracy_module_loads_offline_and_computes():
    accuracy = evaluate.load(metric_path("accuracy"))
    assert accuracy.compute(predictions=[0, 1, 1, 2], references=[0, 1, 0, 2]) == {"accuracy": 0.75}
    assert accuracy.compute(predictions=[0, 1], references=[0, 0], normalize=False) == {"accuracy": 1.0}
    weighted = accuracy.compute(predictions=[0, 1], references=[0, 0], sample_weight=[3.0, 1.0])
    assert weighted["accuracy"] == pytest.approx(0.75)


def test_hand_computed_logits(faithfulness):
    result = faithfulness.compute(predictions=[[2.0, 0.0], [0.0, 1.0]], references=[0, 0],
                                  full_model_predictions=[[2.0, 0.0], [1.0, 0.0]])
    assert result["accuracy"] == 0.5 and result["full_model_accuracy"] == 1.0 and result["agreement"] == 0.5
    # KL(p || q) with p = softmax([1, 0]), q = softmax([0, 1]) on the second example, 0 on the first.
    p = torch.softmax(torch.tensor([1.0, 0.0]), -1)
    expected = float((p * (p.log() - torch.log_softmax(torch.tensor([0.0, 1.0]), -1))).sum()) / 2
    assert result["kl"] == pytest.approx(expected, rel=1e-6)


def test_class_ids_give_no_kl_and_mixed_forms_work(faithfulness):
    ids = faithfulness.compute(predictions=[0, 1, 2], references=[0, 1, 1], full_model_predictions=[0, 1, 1])
    assert ids == {"accuracy": pytest.approx(2 / 3), "full_model_accuracy": 1.0, "agreement": pytest.approx(2 / 3)}
    mixed = faithfulness.compute(predictions=[0, 1, 2], references=[0, 1, 1],
                                 full_model_predictions=[[3.0, 0.0, 0.0], [0.0, 2.0, 0.0], [0.0, 2.0, 0.0]])
    assert mixed == ids


def test_collapse_to_entailment_scores_three_way_predictions_on_two_way_labels(faithfulness):
    # entailment_id=0: predictions 1 (neutral) and 2 (contradiction) both mean non-entailment (1).
    result = faithfulness.compute(predictions=[0, 1, 2, 2], references=[0, 1, 1, 0],
                                  full_model_predictions=[0, 2, 1, 0], collapse_to_entailment=True)
    assert result["accuracy"] == 0.75 and result["full_model_accuracy"] == 1.0
    assert result["agreement"] == 0.25  # class ids before the collapse
    with_other_id = faithfulness.compute(predictions=[2, 0], references=[0, 1], full_model_predictions=[2, 1],
                                         collapse_to_entailment=True, entailment_id=2)
    assert with_other_id["accuracy"] == 1.0
    with pytest.raises(ValueError, match="2-way labels"):
        faithfulness.compute(predictions=[0, 1], references=[0, 2], full_model_predictions=[0, 1],
                             collapse_to_entailment=True)


def test_bad_inputs_are_clear_errors():
    def fresh():
        return evaluate.load(metric_path("subnetwork_faithfulness"))
    with pytest.raises(ValueError, match="missing"):
        fresh().compute(predictions=[0, 1], references=[0, 1])
    with pytest.raises(ValueError, match="Mismatch in the number"):
        fresh().compute(predictions=[0, 1], references=[0, 1, 1], full_model_predictions=[0, 1])
    with pytest.raises(ValueError, match="same classifier head"):
        fresh().compute(predictions=[[0.0, 1.0]], references=[0], full_model_predictions=[[0.0, 1.0, 2.0]])


def test_agrees_with_evaluate_subnetwork_on_a_tiny_model(faithfulness):
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=99, hidden_size=32, num_attention_heads=4, num_hidden_layers=2,
                                     intermediate_size=37, max_position_embeddings=64, num_labels=3,
                                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, initializer_range=0.2)
    prunable = PrunableModel(transformers.BertForSequenceClassification(config).eval(), PruningConfig(ablation="zero"))
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(1, 99, (24, 9), generator=generator)
    labels = torch.randint(0, 3, (24,), generator=generator)
    masks = {"heads": torch.tensor([[1.0, 0, 1, 0], [0, 1, 1, 1]]), "mlps": torch.tensor([1.0, 0.0])}
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}
    expected = evaluate_subnetwork(prunable, {"set": [batch]}, masks)["set"]
    with torch.no_grad():
        with prunable.masks_disabled():
            full_logits = prunable(input_ids=ids).logits
        prunable.set_masks(**masks)
        sub_logits = prunable(input_ids=ids).logits
    result = faithfulness.compute(predictions=sub_logits.tolist(), references=labels.tolist(),
                                  full_model_predictions=full_logits.tolist())
    assert result["accuracy"] == pytest.approx(expected["accuracy"])
    assert result["agreement"] == pytest.approx(expected["agreement"])
    assert result["kl"] == pytest.approx(expected["kl"], rel=1e-4, abs=1e-7)
    assert expected["kl"] > 0 and not math.isnan(result["kl"])
