"""The weight-mask papers' objectives: task loss, fixed penalties, chunked samples, beta schedule, planted weights."""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F
from datasets import Dataset
from torch import nn

from hf_heuristic_core import PrunableModel, PruningConfig
from hf_heuristic_core.training.arguments import PruningArguments
from hf_heuristic_core.training.objectives import sparsity_penalty, split_batch, task_loss
from hf_heuristic_core.training.trainer import PruningTrainer
from tiny_models import tiny_model


def test_task_loss_is_cross_entropy_by_hand():
    logits = torch.tensor([[2.0, 0.0, -1.0], [0.5, 0.5, 3.0]])
    labels = torch.tensor([0, 1])
    by_hand = -(math.log(math.exp(2) / (math.exp(2) + 1 + math.exp(-1)))
                + math.log(math.exp(0.5) / (2 * math.exp(0.5) + math.exp(3)))) / 2
    assert float(task_loss(logits, labels)) == pytest.approx(by_hand, rel=1e-6)
    per_token = torch.randn(2, 4, 5)
    ids = torch.tensor([[1, 2, 3, 0], [4, 1, 0, 0]])
    mask = (ids != 0).long()
    expected = F.cross_entropy(per_token[:, :-1].reshape(-1, 5), torch.tensor([2, 3, -100, 1, -100, -100]),
                               ignore_index=-100)
    torch.testing.assert_close(task_loss(per_token, None, ids, mask), expected)


def test_penalties_match_the_papers_formulas():
    net = nn.Sequential(nn.Linear(3, 2))
    cs = PrunableModel(net, PruningConfig(granularity="weight", relaxation="continuous_sparsification", cs_beta=2.0))
    with torch.no_grad():
        cs.mask_logits["0.weight"].copy_(torch.tensor([[0.1, -0.2, 0.0], [1.0, 0.3, -1.0]]))
    s = cs.mask_logits["0.weight"].detach()
    torch.testing.assert_close(sparsity_penalty(cs, 1e-8, 64), 1e-8 * torch.sigmoid(2.0 * s).sum())
    gs = PrunableModel(nn.Sequential(nn.Linear(3, 2)), PruningConfig(granularity="weight",
                                                                     relaxation="gumbel_sigmoid"))
    logit = math.log(9.0)
    torch.testing.assert_close(sparsity_penalty(gs, 4e-4, 128), torch.tensor(4e-4 * 6 * logit / 128))


def test_split_batch_gives_one_chunk_per_mask_sample():
    inputs = {"input_ids": torch.arange(10).view(10, 1), "flag": True}
    chunks = split_batch(inputs, 4)
    assert [c["input_ids"].flatten().tolist() for c in chunks] == [[0, 1, 2], [3, 4, 5], [6, 7], [8, 9]]
    assert all(c["flag"] is True for c in chunks)


def _planted_precision(relaxation: str, seed: int) -> float:
    """Fraction of the pruned weights that were planted as irrelevant (scaled by 1e-4); random pruning gives 0.5."""
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Linear(10, 24), nn.Tanh(), nn.Linear(24, 4))
    planted = torch.rand(24, 10, generator=generator) < 0.5
    with torch.no_grad():
        net[0].weight[planted] *= 1e-4
    x = torch.randn(512, 10, generator=generator)
    with torch.no_grad():
        y = net(x).argmax(-1)
    config = PruningConfig(granularity="weight", relaxation=relaxation, target_modules=["0"],
                           relaxation_settings={"init_mean": 3.0} if relaxation == "hard_concrete" else {})
    wrapped = PrunableModel(net, config)
    wrapped.generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam([p for _, p in wrapped.mask_logits.items()], lr=0.05)
    weight = {"continuous_sparsification": 2e-3, "gumbel_sigmoid": 5e-3, "hard_concrete": 2e-3}[relaxation]
    wrapped.train()
    for _ in range(300):
        rows = torch.randint(0, 512, (64,), generator=generator)
        loss = task_loss(wrapped(x[rows]), y[rows]) + sparsity_penalty(wrapped, weight, 64)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    pruned = wrapped.get_masks(binary=True, sparsity=0.5)["0.weight"] == 0
    return float((pruned & planted).sum() / pruned.sum())


@pytest.mark.parametrize("relaxation", ["continuous_sparsification", "gumbel_sigmoid", "hard_concrete"])
def test_masks_remove_the_planted_irrelevant_weights(relaxation):
    precisions = [_planted_precision(relaxation, seed) for seed in (0, 1)]
    assert min(precisions) > 0.85, precisions   # random pruning: 0.5 on average


def _dataset(n: int = 16) -> Dataset:
    g = torch.Generator().manual_seed(0)
    return Dataset.from_dict({"input_ids": torch.randint(3, 99, (n, 6), generator=g).tolist(),
                              "attention_mask": [[1] * 6] * n,
                              "labels": torch.randint(0, 3, (n,), generator=g).tolist()})


def _args(tmp_path, **overrides) -> PruningArguments:
    settings = dict(output_dir=str(tmp_path), per_device_train_batch_size=8, use_cpu=True, report_to="none",
                    disable_tqdm=True, save_strategy="no", logging_steps=1, seed=0, convergence_check=False,
                    objective="task", sparsity_control="penalty", mask_learning_rate=0.05, warmup_steps=0)
    settings.update(overrides)
    return PruningArguments(**settings)


def test_trainer_learns_continuous_sparsification_masks_with_the_beta_schedule(tmp_path):
    config = PruningConfig(granularity="weight", relaxation="continuous_sparsification", target_modules=["query"])
    pm = PrunableModel(tiny_model("bert"), config)
    trainer = PruningTrainer(model=pm, args=_args(tmp_path, num_train_epochs=2, penalty_weight=1e-3),
                             train_dataset=_dataset())
    assert trainer.args.final_binarization == "threshold"
    trainer.train()
    assert pm.relaxation.beta == pytest.approx(200.0) and pm.pruning_config.cs_beta == pytest.approx(200.0)
    saved = json.loads((tmp_path / "pruning_config.json").read_text())
    assert saved["relaxation_settings"]["cs_beta"] == pytest.approx(200.0) and saved["granularity"] == "weight"
    masks = pm.get_masks(binary=True)
    for kind, logit in pm.mask_logits.items():
        assert torch.equal(masks[kind], (logit.detach() > 0).float())   # Lepori's 1[s > 0]
    logged = [entry for entry in trainer.state.log_history if "task_loss" in entry]
    assert logged and all("penalty" in entry for entry in logged)


def test_trainer_gumbel_sigmoid_draws_one_mask_per_chunk(tmp_path):
    config = PruningConfig(granularity="neuron", relaxation="gumbel_sigmoid", ablation="zero", mask_samples=4)
    pm = PrunableModel(tiny_model("bert"), config)
    draws = []
    original = pm.relaxation.sample
    pm.relaxation.sample = lambda logits, generator=None: draws.append(1) or original(logits, generator)
    trainer = PruningTrainer(model=pm, args=_args(tmp_path, max_steps=2), train_dataset=_dataset())
    start = pm.mask_logits["neurons"].detach().clone()
    trainer.train()
    assert len(draws) == 2 * 4
    assert not torch.equal(start, pm.mask_logits["neurons"].detach())
