"""Warm start of mask logits from a ranking: the logits by rank, the trainer option, the CLI flag, the errors.

The planted model of tests/training/test_convergence.py (8 of 16 heads and 2 of 4 MLP blocks made weak) gives a
ranking whose right answer is known.
"""

from __future__ import annotations

import json

import datasets
import pytest
import torch

from hf_heuristic_core import PrunableModel, PruningArguments, PruningConfig, PruningTrainer
from hf_heuristic_core.circuits.mib import MibConfig, write_mib_circuit
from hf_heuristic_core.circuits.warm_start import warm_start_from_file, warm_start_logits
from hf_heuristic_core.errors import PruningError
from tiny_models import one_torch_thread  # noqa: F401  (fixture)
from tiny_models import WEAK_HEADS, WEAK_MLPS, planted_bert

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _known_scores() -> dict[str, torch.Tensor]:
    """Strong units score 1 + a small per-unit amount, weak units 0 - a small amount (a known ranking)."""
    heads = 1.0 + torch.arange(16.0).view(4, 4) / 100
    mlps = 1.5 + torch.arange(4.0) / 100        # no ties with the heads
    for layer, head in WEAK_HEADS:
        heads[layer, head] = -heads[layer, head]
    for layer in WEAK_MLPS:
        mlps[layer] = -mlps[layer]
    return {"heads": heads, "mlps": mlps}


def _data(n: int = 256) -> datasets.Dataset:
    ids = torch.randint(3, 99, (n, 12), generator=torch.Generator().manual_seed(0))
    return datasets.Dataset.from_dict({"input_ids": ids.tolist()})


def test_logits_follow_the_ranking_from_center_minus_to_center_plus_spread():
    pm = PrunableModel(planted_bert(), PruningConfig(ablation="zero", init_mean=3.0))
    scores = _known_scores()
    scores["heads"][0, 1] = float("nan")
    pm.force_units(heads=[(3, 0)], keep=False)
    summary = warm_start_logits(pm, scores, spread=2.0)
    assert summary == {"center": 3.0, "spread": 2.0, "units_ranked": 19, "units": 20}
    heads, mlps = pm.mask_logits["heads"].detach(), pm.mask_logits["mlps"].detach()
    assert heads[0, 1] == 3.0                                   # unscored: the center
    assert heads[3, 0] == -pm.relaxation.pinned_logit           # forced out stays pinned
    flat_scores = torch.cat([scores["heads"].flatten(), scores["mlps"]])
    flat_logits = torch.cat([heads.flatten(), mlps])
    keep = torch.isfinite(flat_scores) & (torch.arange(20) != 12)
    assert torch.equal(torch.argsort(flat_scores[keep]), torch.argsort(flat_logits[keep]))   # same ranking
    assert float(flat_logits[keep].max()) == pytest.approx(5.0) and float(flat_logits[keep].min()) >= 1.0
    # Binarizing at 50% prunes the forced head and the 9 lowest scores: every weak unit but the best, (0, 0).
    masks = pm.get_masks(binary=True, sparsity=0.5)
    assert {tuple(i) for i in (masks["heads"] == 0).nonzero().tolist()} == set(WEAK_HEADS) - {(0, 0)} | {(3, 0)}
    assert {i for (i,) in (masks["mlps"] == 0).nonzero().tolist()} == set(WEAK_MLPS)


def test_trainer_starts_from_the_ranking_and_keeps_the_recipe_center(tmp_path):
    cfg = MibConfig(4, 4, 32)
    scores_file = write_mib_circuit(tmp_path / "importances.json", cfg, scores=_known_scores())
    pm = PrunableModel(planted_bert(), PruningConfig(ablation="zero"))
    args = PruningArguments(output_dir=str(tmp_path / "warm"), recipe="short", max_steps=12,
                            per_device_train_batch_size=16, use_cpu=True, report_to="none", disable_tqdm=True,
                            save_strategy="no", logging_strategy="no", seed=3, warm_start_scores=str(scores_file),
                            warm_start_spread=2.5, sparsity_warmup_steps=6)
    trainer = PruningTrainer(model=pm, args=args, train_dataset=_data())
    logits = torch.cat([pm.mask_logits["heads"].detach().flatten(), pm.mask_logits["mlps"].detach()])
    assert float(logits.max()) == pytest.approx(3.0 + 2.5) and float(logits.min()) == pytest.approx(3.0 - 2.5)
    assert trainer.recipe_settings["warm_start"]["source"] == str(scores_file)
    # At step 0 the top-half subnetwork is already the planted one.
    start = pm.get_masks(binary=True, sparsity=0.5)
    assert {tuple(i) for i in (start["heads"] == 0).nonzero().tolist()} == set(WEAK_HEADS)
    trainer.train()
    masks = pm.get_masks()
    assert {tuple(i) for i in (masks["heads"] == 0).nonzero().tolist()} == set(WEAK_HEADS)
    assert {i for (i,) in (masks["mlps"] == 0).nonzero().tolist()} == set(WEAK_MLPS)
    # Keeping the initial ranking is the point of a warm start: the convergence check does not hold it against it.
    assert trainer.convergence.init_rank_correlation is None and trainer.convergence.converged
    saved = json.loads((tmp_path / "warm" / "pruning_config.json").read_text())
    assert saved["extra"]["recipe"]["filled_in"]["warm_start"]["spread"] == 2.5


def test_warm_start_from_a_mask_artifact_and_a_fresh_trainer_without_it(tmp_path):
    source = PrunableModel(planted_bert(), PruningConfig(ablation="zero"))
    warm_start_logits(source, _known_scores(), spread=1.0)
    source.save_pretrained(tmp_path / "artifact")
    target = PrunableModel(planted_bert(), PruningConfig(ablation="zero", init_mean=3.0))
    summary = warm_start_from_file(target, tmp_path / "artifact", spread=4.0)
    assert summary["units_ranked"] == 20
    assert torch.equal(torch.argsort(target.mask_logits["heads"].detach().flatten()),
                       torch.argsort(_known_scores()["heads"].flatten()))
    cold = PrunableModel(planted_bert(), PruningConfig(ablation="zero"))
    args = PruningArguments(output_dir=str(tmp_path / "cold"), recipe="short", max_steps=2, use_cpu=True,
                            report_to="none", save_strategy="no", seed=0)
    PruningTrainer(model=cold, args=args, train_dataset=_data(32))
    assert float(cold.mask_logits["heads"].detach().std()) < 0.05     # the recipe's N(3, 0.01), no ranking


def test_warm_start_errors(tmp_path):
    pm = PrunableModel(planted_bert(), PruningConfig(ablation="zero"))
    with pytest.raises(PruningError, match="finite number >= 0"):
        warm_start_logits(pm, _known_scores(), spread=-1)
    with pytest.raises(PruningError, match=r"heads scores have shape \(2, 2\)"):
        warm_start_logits(pm, {"heads": torch.zeros(2, 2), "mlps": torch.zeros(4)})
    with pytest.raises(PruningError, match="every score is NaN"):
        warm_start_logits(pm, {"heads": torch.full((4, 4), float("nan")), "mlps": torch.full((4,), float("nan"))})
    with pytest.raises(PruningError, match="not a mask artifact folder or a MIB circuit"):
        warm_start_from_file(pm, tmp_path / "scores.txt")
    write_mib_circuit(tmp_path / "other.json", MibConfig(2, 4, 32), scores={"heads": torch.ones(2, 4),
                                                                         "mlps": torch.ones(2)})
    with pytest.raises(PruningError, match="made for another model"):
        warm_start_from_file(pm, tmp_path / "other.json")
    write_mib_circuit(tmp_path / "binary.json", MibConfig(4, 4, 32), masks={"heads": torch.ones(4, 4),
                                                                          "mlps": torch.ones(4)})
    with pytest.raises(PruningError, match="binary MIB circuit"):
        warm_start_from_file(pm, tmp_path / "binary.json")
    gumbel = PrunableModel(planted_bert(), PruningConfig(ablation="zero", relaxation="gumbel_sigmoid"))
    with pytest.raises(PruningError, match="hard_concrete"):
        warm_start_logits(gumbel, _known_scores())


def test_prune_cli_takes_the_warm_start_flags():
    from hf_heuristic_core.cli.prune import parse_prune_arguments, prune_help
    text = prune_help()
    assert "--warm_start_scores" in text and "--warm_start_spread" in text
    _, args = parse_prune_arguments(["--model", "m", "--dataset", "d", "--output_dir", "o", "--warm_start_scores",
                                     "runs/x/importances.json", "--warm_start_spread", "1.5"])
    assert args.warm_start_scores == "runs/x/importances.json" and args.warm_start_spread == 1.5
