"""Every pruning run judges its own result, and a short run does not need to know the recipe.

The planted model: a random 4-layer BERT in which 8 of its 16 heads and 2 of its 4 MLP blocks are made weak (their
outputs scaled by 0.01), so the right 50% subnetwork is known. With the defaults (`recipe="auto"`), a run of 100
steps finds all 10 weak units and says it converged; with the paper's recipe, the same run keeps its initial ranking
and says it did not, with a warning that names the fix.
"""

from __future__ import annotations

import json

import datasets
import pytest
import torch
from scipy.stats import spearmanr

from hf_heuristic_core import PrunableModel, PruningArguments, PruningConfig, PruningTrainer, read_artifact
from hf_heuristic_core.granularity.base import MaskKind
from hf_heuristic_core.training.convergence import check_convergence, init_rank_correlation, random_masks_like
from hf_heuristic_core.training.recipes import planned_steps, resolve_recipe
from tiny_models import one_torch_thread  # noqa: F401  (fixture)
from tiny_models import WEAK_HEADS, WEAK_MLPS, planted_bert

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _data(n: int = 512) -> datasets.Dataset:
    ids = torch.randint(3, 99, (n, 12), generator=torch.Generator().manual_seed(0))
    return datasets.Dataset.from_dict({"input_ids": ids.tolist()})


def _run(tmp_path, recipe: str):
    pm = PrunableModel(planted_bert(), PruningConfig(ablation="zero"))
    args = PruningArguments(output_dir=str(tmp_path / recipe), recipe=recipe, max_steps=100,
                            per_device_train_batch_size=16, use_cpu=True, report_to="none", disable_tqdm=True,
                            save_strategy="no", logging_strategy="no", seed=3)
    trainer = PruningTrainer(model=pm, args=args, train_dataset=_data())
    trainer.train()
    masks = pm.get_masks()
    found = {(l, h) for l, h in (masks["heads"] == 0).nonzero().tolist()} & set(WEAK_HEADS)
    found_mlps = {l for (l,) in (masks["mlps"] == 0).nonzero().tolist()} & set(WEAK_MLPS)
    return trainer, len(found) + len(found_mlps)


def test_default_short_run_finds_the_planted_units_and_says_it_converged(tmp_path):
    trainer, found = _run(tmp_path, "auto")
    assert trainer.recipe.name == "short" and found == 10
    assert trainer.recipe_settings == {"sparsity_penalty": "expected", "reg_learning_rate": 0.1, "warmup_steps": 10,
                                       "init_mean": 3.0}
    report = trainer.convergence
    assert report.converged and report.verdict == "converged"
    assert report.kl_ratio < 0.05 and report.init_rank_correlation < 0.9 and report.subnetworks == 8
    saved = json.loads((tmp_path / "auto" / "pruning_config.json").read_text())
    assert saved["extra"]["convergence"]["converged"] is True
    assert saved["extra"]["recipe"] == {"name": "short", "requested": "auto",
                                        "filled_in": trainer.recipe_settings}
    assert saved["relaxation_settings"]["init_mean"] == 3.0
    card = (tmp_path / "auto" / "README.md").read_text()
    assert "| convergence check | converged (KL" in card
    assert read_artifact(tmp_path / "auto").config.extra["convergence"]["kl"] == pytest.approx(report.kl)


def test_the_paper_recipe_on_a_short_run_is_flagged_with_the_fix(tmp_path, caplog):
    with caplog.at_level("WARNING", logger="hf_heuristic_core.training.judging"):
        trainer, found = _run(tmp_path, "paper")
    report = trainer.convergence
    assert found < 10 and not report.converged
    assert report.verdict == "the mask logits kept their initial ranking" and report.init_rank_correlation > 0.9
    assert report.kl_ratio > 0.5
    assert "did not converge" in caplog.text and "recipe='short'" in caplog.text
    saved = json.loads((tmp_path / "paper" / "pruning_config.json").read_text())
    assert saved["extra"]["convergence"]["converged"] is False
    assert "| convergence check | NOT converged: the mask logits kept" in (tmp_path / "paper" / "README.md").read_text()


def test_auto_recipe_by_run_length_and_explicit_settings_win(tmp_path):
    def args(**kwargs):
        return PruningArguments(output_dir=str(tmp_path), use_cpu=True, report_to="none", **kwargs)
    assert planned_steps(args(max_steps=300), None) == 300
    assert planned_steps(args(num_train_epochs=2, per_device_train_batch_size=8), list(range(20))) == 6
    assert resolve_recipe(args(max_steps=300), 300).name == "short"
    assert resolve_recipe(args(max_steps=9000), 9000).name == "paper"     # 6500 + 50 * 50
    assert resolve_recipe(args(max_steps=9000, target_sparsity=0.7), 9000).name == "short"   # needs 10000
    assert resolve_recipe(args(recipe="paper"), 10).name == "paper"
    pm = PrunableModel(planted_bert(), PruningConfig(ablation="zero", init_mean=5.0))
    trainer = PruningTrainer(model=pm, args=args(max_steps=10, reg_learning_rate=0.5, warmup_steps=50),
                             train_dataset=_data(32))
    assert trainer.recipe.name == "short"
    assert (trainer.args.reg_learning_rate, trainer.args.warmup_steps, trainer.args.sparsity_penalty) == \
        (0.5, 50, "expected")
    assert pm.pruning_config.init_mean == 5.0   # the user's init is kept too


def test_random_control_keeps_the_per_layer_counts():
    kinds = {"heads": MaskKind("heads", (3, 4), "heads"), "mlps": MaskKind("mlps", (3,), "mlps")}
    masks = {"heads": torch.tensor([[1., 0, 0, 1], [0, 0, 0, 1], [1, 1, 1, 1]]), "mlps": torch.tensor([1., 0, 1])}
    generator = torch.Generator().manual_seed(0)
    draws = [random_masks_like(masks, kinds, ["heads", "mlps"], generator) for _ in range(20)]
    for draw in draws:
        assert draw["heads"].sum(1).tolist() == [2.0, 1.0, 4.0] and draw["mlps"].sum() == 2
    assert any(not torch.equal(d["heads"], masks["heads"]) for d in draws)
    assert torch.equal(random_masks_like(masks, kinds, ["heads"], generator)["mlps"], masks["mlps"])


def test_rank_correlation_and_verdicts_by_hand():
    generator = torch.Generator().manual_seed(1)
    initial = {"heads": torch.randn(3, 4, generator=generator), "mlps": torch.randn(3, generator=generator)}
    final = {"heads": torch.randn(3, 4, generator=generator), "mlps": torch.randn(3, generator=generator)}
    flat = lambda d: torch.cat([d["heads"].flatten(), d["mlps"]]).numpy()  # noqa: E731
    assert init_rank_correlation(initial, final) == pytest.approx(spearmanr(flat(initial), flat(final))[0])
    assert init_rank_correlation(initial, initial) == pytest.approx(1.0)
    good = check_convergence(0.01, [0.2, 0.4, 0.3], 0.1, 4)
    assert good.converged and good.kl_ratio == pytest.approx(1 / 30) and good.random_kl_median == 0.3
    assert not check_convergence(0.2, [0.2, 0.4, 0.3], 0.1, 4).converged
    flat_random = check_convergence(1e-5, [1e-4, 2e-4], 0.2, 4)   # random subnetworks are faithful too
    assert flat_random.converged is None and flat_random.status == "inconclusive"   # was stored as converged
    assert flat_random.verdict.startswith("inconclusive") and "untrained" in flat_random.advice
    assert good.status == "converged" and check_convergence(0.2, [0.2, 0.4, 0.3], 0.1, 4).status == "not_converged"
    stuck = check_convergence(0.01, [0.2, 0.4, 0.3], 0.99, 4)
    assert not stuck.converged and "initial ranking" in stuck.verdict and "recipe='short'" in stuck.advice
