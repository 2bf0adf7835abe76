"""`uniform_layers` moves the sparsity away from the target (whole key/value groups, MLP blocks in every layer or
none): the run says so with the cause, in its log, its artifact's config and card, and `prune`'s summary."""

from __future__ import annotations

import datasets
import pytest
import torch

from hf_heuristic_core import PrunableModel, PruningArguments, PruningConfig, PruningTrainer
from hf_heuristic_core.cli.prune import format_summary
from hf_heuristic_core.granularity.base import MaskKind
from hf_heuristic_core.relaxations.uniform import uniform_sparsity_note
from tiny_models import one_torch_thread  # noqa: F401  (fixture)
from tiny_models import tiny_model

pytestmark = pytest.mark.usefixtures("one_torch_thread")

KINDS = {"heads": MaskKind("heads", (3, 6), "heads", unit_group=3, title="heads"),
         "mlps": MaskKind("mlps", (3,), "mlps", title="MLP blocks")}


def test_the_note_names_the_groups_and_the_all_or_none_mlps():
    masks = {"heads": torch.tensor([[1., 1, 1, 0, 0, 0]] * 3), "mlps": torch.zeros(3)}
    # 21 units; 9 heads kept, no MLP: sparsity 12/21, where the target was 0.5
    note = uniform_sparsity_note(KINDS, masks, 0.5, 12 / 21)
    assert note == ("uniform_layers moved the sparsity from the target 0.5000 to 0.5714: every layer keeps the same "
                    "units: heads 3 of 6 per layer, in whole key/value groups of 3 query heads; MLP blocks in every "
                    "layer or in none (none kept); no such layout lies closer to the target")
    assert uniform_sparsity_note(KINDS, masks, 12 / 21 + 0.01, 12 / 21) is None   # within one unit of 21: rounding


def _llama_run(tmp_path):
    """4 layers x 4 heads (2 key/value groups) + 4 MLP blocks: a uniform layout keeps a multiple of 4 units, so the
    target of 10 kept units (0.5) is never reachable."""
    pm = PrunableModel(tiny_model("llama", task="causal_lm", num_layers=4),
                       PruningConfig(ablation="zero", uniform_layers=True))
    ids = torch.randint(3, 99, (16, 8), generator=torch.Generator().manual_seed(0))
    args = PruningArguments(output_dir=str(tmp_path), target_sparsity=0.5, max_steps=2, per_device_train_batch_size=8,
                            use_cpu=True, report_to="none", disable_tqdm=True, save_strategy="no",
                            logging_strategy="no", convergence_check=False, seed=0)
    trainer = PruningTrainer(model=pm, args=args, train_dataset=datasets.Dataset.from_dict({"input_ids": ids.tolist()}))
    trainer.train()
    return pm


def test_a_uniform_run_records_and_prints_what_moved_its_sparsity(tmp_path, caplog):
    with caplog.at_level("WARNING", logger="hf_heuristic_core.training.judging"):
        pm = _llama_run(tmp_path)
    reached = pm.sparsity()
    assert reached in (0.4, 0.6)
    constraint = pm.pruning_config.extra["sparsity_constraint"]
    assert constraint["asked"] == 0.5 and constraint["free_sparsity"] == 0.5 and constraint["sparsity"] == reached
    reason = constraint["reason"]
    assert reason.startswith(f"uniform_layers moved the sparsity from the target 0.5000 to {reached:.4f}: ")
    assert "in whole key/value groups of 2 query heads" in reason and "MLP blocks in every layer or in none" in reason
    assert reason in caplog.text
    assert f"| sparsity moved by a constraint | {reason} |" in (tmp_path / "README.md").read_text()
    summary = {"units_kept": 1, "units_total": 2, "sparsity": reached, "sparsity_params": 0.1, "target_sparsity": 0.5,
               "kl_to_full_model": 0.0, "agreement_with_full_model": 1.0, "output_dir": "o", "convergence": None,
               "sparsity_constraint": constraint}
    assert f"moved by constraint {reason}" in format_summary(summary)
    # Masks set afterwards have another sparsity: the card drops the row rather than keep a stale reason.
    pm.set_masks(heads=torch.ones(4, 4), mlps=torch.ones(4))
    pm.save_pretrained(tmp_path / "later")
    assert "moved by a constraint" not in (tmp_path / "later" / "README.md").read_text()
