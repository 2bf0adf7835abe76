"""How a `PruningTrainer` judges the subnetwork it is learning: faithfulness, `evaluate()`, and the end of `train()`.

`evaluate()` scores the subnetwork the run would return *now* (the logits binarized at the target sparsity, by the
run's own rule), so `eval_loss` (its KL to the full model) tracks what `train()` will save, and
`metric_for_best_model`, `load_best_model_at_end` and early stopping select among such subnetworks rather than among
the less sparse masks of the warm-up. At the end of `train()` the masks are binarized, fixed, checked against random
subnetworks of the same size (`training.convergence`), and saved with the verdict. At the start, the run's settings
fingerprint (`training.fingerprint`) goes into the config every checkpoint saves, and a resume refuses a checkpoint
of another run.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from ..batching import LABEL_KEYS
from .convergence import (
    CONVERGED,
    INCONCLUSIVE,
    check_convergence,
    init_rank_correlation,
    random_masks_like,
    subnetwork_kls,
    verdict_line,
)
from ..relaxations.uniform import uniform_sparsity_note
from .fingerprint import FINGERPRINT_KEY, checkpoint_of_this_run, run_fingerprint
from .losses import kl_to_teacher

logger = logging.getLogger(__name__)

EXAMPLE_INDEX_COLUMN = "hhc_example_index"
# Where the artifact's config (`extra`) and the run summary record a sparsity that a layout constraint moved.
SPARSITY_CONSTRAINT_KEY = "sparsity_constraint"

__all__ = ["EXAMPLE_INDEX_COLUMN", "SPARSITY_CONSTRAINT_KEY", "SubnetworkJudging"]


class SubnetworkJudging:
    """Mixed into `PruningTrainer` (before `transformers.Trainer`)."""

    # ------------------------------------------------------------------ the start and the end of a run
    def train(self, *args: Any, **kwargs: Any):
        resume = kwargs.pop("resume_from_checkpoint", args[0] if args else None)
        args = args[1:]
        fingerprint = run_fingerprint(self.args, self.prunable, self.train_dataset)
        self.prunable.pruning_config.extra[FINGERPRINT_KEY] = fingerprint   # every checkpoint records it
        if resume is None or resume is False:
            self.initial_logits = {kind: logit.detach().cpu().clone() for kind, logit in
                                   self.prunable.mask_logits.items()}
        else:
            resume = checkpoint_of_this_run(self.args.output_dir, resume, fingerprint)
        output = super().train(resume, *args, **kwargs)
        report = self.finalize_masks()
        if "convergence" in report:
            output.metrics["converged"] = report["convergence"]["converged"]
            output.metrics["convergence_status"] = report["convergence"]["status"]
        return output

    def final_masks(self, uniform: bool | None = None) -> dict[str, torch.Tensor]:
        """The subnetwork of the current logits: top-k at the target sparsity, or the paper's threshold rule.
        `uniform=False` gives the masks without `PruningConfig.uniform_layers` (what the constraint moved)."""
        prunable = self.prunable
        if uniform is not None and uniform != prunable.pruning_config.uniform_layers:
            previous_uniform = prunable.pruning_config.uniform_layers
            prunable.pruning_config.uniform_layers = uniform
            try:
                return self.final_masks()
            finally:
                prunable.pruning_config.uniform_layers = previous_uniform
        if self.args.final_binarization == "threshold":
            previous = (prunable.pruning_config.binarization, prunable.pruning_config.threshold)
            prunable.pruning_config.binarization = "threshold"
            prunable.pruning_config.threshold = self.args.final_threshold
            try:
                return prunable.get_masks(binary=True, ignore_fixed=True)
            finally:
                prunable.pruning_config.binarization, prunable.pruning_config.threshold = previous
        return prunable.get_masks(binary=True, sparsity=self.args.target_sparsity, ignore_fixed=True)

    def finalize_masks(self) -> dict[str, Any]:
        """Fix the binarized masks on the model, judge them (`convergence_check`), and save the artifact (masks only)
        to `output_dir`. Returns the sparsity report, with the convergence verdict under "convergence"."""
        prunable = self.prunable
        masks = self.final_masks()
        prunable.set_masks(masks)
        report = prunable.sparsity_report(masks)
        prunable.pruning_config.extra["recipe"] = {"name": self.recipe.name, "requested": self.args.recipe,
                                                   "filled_in": dict(self.recipe_settings)}
        constraint = self.sparsity_constraint(masks, report)
        if constraint is not None:
            prunable.pruning_config.extra[SPARSITY_CONSTRAINT_KEY] = constraint
            report[SPARSITY_CONSTRAINT_KEY] = constraint
            logger.warning("%s.", constraint["reason"])
        else:
            prunable.pruning_config.extra.pop(SPARSITY_CONSTRAINT_KEY, None)
        if self.args.convergence_check:
            self.convergence = self.judge(masks)
            report["convergence"] = self.convergence.to_dict()
            prunable.pruning_config.extra["convergence"] = report["convergence"]
            if self.convergence.status == INCONCLUSIVE:
                logger.warning("The pruning run's convergence check is inconclusive: %s. %s",
                               verdict_line(report["convergence"]), self.convergence.advice)
            elif self.convergence.status != CONVERGED:
                logger.warning("The pruning run did not converge: %s. %s", verdict_line(report["convergence"]),
                               self.convergence.advice)
        if self.args.should_save:
            prunable.save_pretrained(self.args.output_dir)
        if self.objective.control == "penalty":   # no target applies: say what the penalty left
            logger.info("Final masks: %d of %d units kept, sparsity %.4f (sparsity_control='penalty' has no target).",
                        report["units_kept"], report["units_total"], report["sparsity"])
        else:
            logger.info("Final masks: %d of %d units kept, sparsity %.4f (target %.4f).", report["units_kept"],
                        report["units_total"], report["sparsity"], self.args.target_sparsity)
        return report

    def sparsity_constraint(self, masks: dict[str, torch.Tensor], report: dict[str, Any]) -> dict[str, Any] | None:
        """When `uniform_layers` moved the sparsity away from what the run asked for (the target; under a fixed
        penalty or the threshold rule, what the free masks pruned): the two sparsities and the cause in words
        (`relaxations.uniform.uniform_sparsity_note`). None when there is no constraint or it moved nothing."""
        prunable = self.prunable
        if not prunable.pruning_config.uniform_layers:
            return None
        by_target = self.objective.control != "penalty" and self.args.final_binarization == "topk"
        free = prunable.sparsity_report(self.final_masks(uniform=False))["sparsity"]
        asked = float(self.args.target_sparsity) if by_target else free
        enabled = {kind: masks[kind] for kind in prunable.enabled_kinds()}
        reason = uniform_sparsity_note(prunable.kinds, enabled, asked, report["sparsity"],
                                       "target" if by_target else "free masks' sparsity")
        if reason is None:
            return None
        return {"constraint": "uniform_layers", "asked": asked, "asked_what": "target" if by_target else "free masks",
                "free_sparsity": free, "sparsity": report["sparsity"], "reason": reason}

    def _nothing_pruned(self, masks: dict[str, torch.Tensor]) -> str | None:
        """Why the final masks keep every unit, when they do and the run asked for pruning (None otherwise)."""
        report = self.prunable.sparsity_report(masks)
        if report["units_kept"] < report["units_total"]:
            return None
        if self.objective.control == "penalty":
            return (f"the fixed penalty (sparsity_control='penalty', penalty_weight {self.objective.penalty_weight:g})"
                    " left every unit")
        if self.args.final_binarization == "threshold" and self.args.target_sparsity > 0:
            return (f"final_binarization='threshold' (final_threshold {self.args.final_threshold:g}) kept every "
                    f"unit, where target_sparsity was {self.args.target_sparsity:g}")
        return None

    @torch.no_grad()
    def judge(self, masks: dict[str, torch.Tensor]):
        """KL of `masks` and of random subnetworks of the same per-layer sizes on the check's batches, and how far
        the logits moved from where the run started."""
        prunable = self.prunable
        batches = self._judging_batches(self.args.convergence_batches)
        generator = torch.Generator().manual_seed(int(self.args.seed))
        randoms = [random_masks_like(masks, prunable.kinds, prunable.enabled_kinds(), generator)
                   for _ in range(self.args.convergence_subnetworks)]
        was_training = prunable.training
        prunable.eval()
        try:
            with prunable.masks_disabled():
                teacher = [prunable(**batch).logits for batch in batches]
            kls = subnetwork_kls(lambda batch: prunable(**batch).logits, teacher, batches, prunable.masks_applied,
                                 [masks, *randoms])
        finally:
            prunable.train(was_training)
        # A warm start begins from a chosen ranking: keeping it is a result there, not a sign of a stalled run.
        correlation = init_rank_correlation(self.initial_logits, dict(prunable.mask_logits.items())) \
            if self.initial_logits and not getattr(self.args, "warm_start_scores", None) else None
        return check_convergence(kls[0], kls[1:], correlation, len(batches), recipe=self.recipe.name,
                                 control=self.objective.control, nothing_pruned=self._nothing_pruned(masks),
                                 sparsity=prunable.sparsity_report(masks)["sparsity"])

    def _judging_batches(self, count: int) -> list[dict[str, torch.Tensor]]:
        dataset = self.eval_dataset if self.eval_dataset is not None else self.train_dataset
        if isinstance(dataset, dict):
            dataset = next(iter(dataset.values()))
        batches = []
        for batch in self.get_eval_dataloader(dataset):
            if len(batches) >= count:
                break
            batches.append({k: v for k, v in self._prepare_inputs(batch).items()
                            if k not in LABEL_KEYS and k != EXAMPLE_INDEX_COLUMN})
        return batches

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, eval_dataset: Any = None, ignore_keys: Any = None, metric_key_prefix: str = "eval"
                 ) -> dict[str, float]:
        """`eval_loss` = KL(full model || the subnetwork the run would return now), with agreement and sparsity."""
        dataset = eval_dataset if eval_dataset is not None else self.eval_dataset
        if dataset is None:
            raise ValueError("PruningTrainer.evaluate needs an eval_dataset (pass one to the trainer or to "
                             "evaluate()).")
        if isinstance(dataset, dict):
            metrics: dict[str, float] = {}
            for name, part in dataset.items():
                metrics.update(self.evaluate(part, ignore_keys, f"{metric_key_prefix}_{name}"))
            return metrics
        masks = self.final_masks()
        with self.prunable.masks_applied(masks):
            faithful = self.faithfulness(dataset)
        report = self.prunable.sparsity_report(masks)
        metrics = {f"{metric_key_prefix}_loss": faithful["kl"], f"{metric_key_prefix}_kl": faithful["kl"],
                   f"{metric_key_prefix}_agreement": faithful["agreement"],
                   f"{metric_key_prefix}_sparsity": report["sparsity"]}
        self.log(metrics)
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics)
        return metrics

    def _load_best_model(self) -> None:
        """Checkpoints hold masks, not weights: the best one is loaded like a resume."""
        logger.info("Loading the best masks from %s (score %s).", self.state.best_model_checkpoint,
                    self.state.best_metric)
        self._load_from_checkpoint(self.state.best_model_checkpoint)

    @torch.no_grad()
    def faithfulness(self, dataset: Any = None, max_batches: int | None = None) -> dict[str, float]:
        """KL to the full model and agreement of argmax predictions, for the current (eval-mode) masks."""
        dataset = dataset if dataset is not None else (self.eval_dataset or self.train_dataset)
        loader = self.get_eval_dataloader(dataset)
        prunable = self.prunable
        was_training = prunable.training
        prunable.eval()
        total_kl = agree = count = 0.0
        try:
            for index, batch in enumerate(loader):
                if max_batches is not None and index >= max_batches:
                    break
                batch = {k: v for k, v in self._prepare_inputs(batch).items()
                         if k not in LABEL_KEYS and k != EXAMPLE_INDEX_COLUMN}
                with prunable.masks_disabled():
                    teacher = prunable(**batch).logits
                student = prunable(**batch).logits
                mask = batch.get("attention_mask")
                items = student.shape[0] if student.dim() == 2 else float(mask.sum()) if mask is not None \
                    else student.shape[0] * student.shape[1]
                total_kl += float(kl_to_teacher(student, teacher, mask)) * items
                same = (student.argmax(-1) == teacher.argmax(-1)).float()
                if same.dim() == 2 and mask is not None:
                    same = same * mask
                agree += float(same.sum())
                count += items
        finally:
            prunable.train(was_training)
        return {"kl": total_kl / max(count, 1), "agreement": agree / max(count, 1)}
