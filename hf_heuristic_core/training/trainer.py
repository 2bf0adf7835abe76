"""`PruningTrainer`: learn hard-concrete masks against the frozen full model on the stock HF `Trainer`.

loss = KL(teacher || student) + lambda1 (t - c) + lambda2 (t - c)^2

The teacher is the same wrapped model with its masks disabled (no second copy in memory), or logits cached once
before training. Only the mask logits and the two Lagrange multipliers train; the multipliers by gradient ascent.
Checkpoints hold the mask artifact, the multipliers, the mask-noise RNG and the optimizer state, never model weights.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import os
from typing import Any, Iterator

import torch
from torch import nn
from transformers import Trainer

from ..batching import LABEL_KEYS
from ..errors import EmptyDatasetError, PruningError
from ..model import PrunableModel
from .arguments import PruningArguments
from .lagrangian import LagrangeMultipliers
from .losses import kl_to_teacher
from .objectives import MaskObjective
from .judging import EXAMPLE_INDEX_COLUMN, SubnetworkJudging
from .recipes import PAPER_INIT_MEAN, apply_recipe, planned_steps, resolve_recipe
from .teacher import TeacherCache, budget_message, choose_storage, format_bytes, gigabytes

logger = logging.getLogger(__name__)

PRUNING_STATE_NAME = "pruning_state.pt"


class PruningTrainer(SubnetworkJudging, Trainer):
    """`Trainer` that learns masks of a `PrunableModel`; everything else (logging, accumulation, mixed precision,
    DDP, resume) is the stock Trainer's.

    `PruningTrainer(model=prunable_model, args=PruningArguments(output_dir=..., target_sparsity=0.5),
    train_dataset=tokenized_dataset)`.
    """

    def __init__(self, model: PrunableModel, args: PruningArguments, train_dataset: Any = None,
                 teacher_cache: TeacherCache | None = None, **kwargs: Any) -> None:
        if not isinstance(model, PrunableModel):
            raise TypeError(f"PruningTrainer needs a PrunableModel, got {type(model).__name__}; wrap it first: "
                            "PrunableModel(model, PruningConfig()).")
        if not isinstance(args, PruningArguments):
            raise TypeError("PruningTrainer needs PruningArguments (a TrainingArguments subclass with the pruning "
                            f"fields), got {type(args).__name__}.")
        trainable = [n for n, p in model.model.named_parameters() if p.requires_grad]
        if trainable:
            raise PruningError(f"The base model is not frozen ({len(trainable)} trainable tensors, e.g. "
                               f"{trainable[:3]}). Pruning learns masks against the fixed model: wrap it with "
                               "PrunableModel(model, PruningConfig(freeze_base_model=True)) (the default) or call "
                               "model.requires_grad_(False) before wrapping.")
        _check_columns(train_dataset)
        _check_reachable(model, args.target_sparsity)
        args = copy.copy(args)   # the recipe fills in unset settings: on this trainer's copy, never the caller's
        self.recipe = resolve_recipe(args, planned_steps(args, train_dataset))
        self.recipe_settings = apply_recipe(args, self.recipe)
        if args.teacher == "cached" and train_dataset is not None and hasattr(train_dataset, "add_column"):
            if EXAMPLE_INDEX_COLUMN not in train_dataset.column_names:
                train_dataset = train_dataset.add_column(EXAMPLE_INDEX_COLUMN, list(range(len(train_dataset))))
        super().__init__(model=model, args=args, train_dataset=train_dataset, **kwargs)
        self.loss_is_scaled_for_ga = False
        self.model_accepts_loss_kwargs = False
        self.teacher_cache = teacher_cache
        model.train_dropout = args.keep_dropout
        self._noise_step: int | None = None
        self._noise_state: torch.Tensor | None = None
        self._sparsity_warmup: int | None = None
        self._running: dict[str, torch.Tensor | float] = {}
        self._running_count = 0
        self.lagrangian = LagrangeMultipliers().to(model.mask_logits_device)
        self._start_masks(model, args)
        if model.generator is None or model.generator.device != model.mask_logits_device:
            model.generator = torch.Generator(device=model.mask_logits_device)
        model.generator.manual_seed(args.seed)
        self.initial_logits: dict[str, torch.Tensor] | None = None
        self.convergence = None
        self.objective = MaskObjective(self)   # task loss, fixed penalties, chunked samples (training.objectives)

    def _start_masks(self, model: PrunableModel, args: PruningArguments) -> None:
        """Logits nobody has set, loaded or trained start from this run's seed (so the seed alone decides the run),
        with the recipe's initialization when the config kept the paper's."""
        if not model.mask_state.is_fresh():
            _warm_start(model, args, self.recipe_settings)
            return
        init_mean = self.recipe.config.get("init_mean")
        if (model.pruning_config.relaxation == "hard_concrete" and init_mean is not None
                and model.pruning_config.init_mean == PAPER_INIT_MEAN and init_mean != PAPER_INIT_MEAN):
            model.update_relaxation(init_mean=init_mean)
            self.recipe_settings["init_mean"] = init_mean
        model.reset_masks(args.seed)
        _warm_start(model, args, self.recipe_settings)
        logger.info("Recipe %r (%s): %s; mask logits initialized from seed %d.", self.recipe.name, args.recipe,
                    self.recipe_settings or "nothing to fill in", args.seed)

    # ------------------------------------------------------------------ setup
    @property
    def prunable(self) -> PrunableModel:
        return self.model

    def _set_signature_columns_if_needed(self) -> None:
        if self._signature_columns is None:
            import inspect
            from ..architectures.resolve import transformers_model
            signature = inspect.signature(transformers_model(self.prunable.model).forward)
            self._signature_columns = list(signature.parameters) + [EXAMPLE_INDEX_COLUMN, "label", "label_ids",
                                                                    *self.label_names]

    def create_optimizer(self, model: nn.Module | None = None) -> torch.optim.Optimizer:
        """AdamW over two groups, both without weight decay: mask logits (descent) and multipliers (ascent)."""
        if self.optimizer is None:
            prunable = self.prunable
            logits = [p for _, p in prunable.mask_logits.items()]
            multipliers = list(self.lagrangian.parameters())
            groups = [
                {"params": logits, "lr": self.args.mask_learning_rate, "weight_decay": 0.0, "maximize": False},
                {"params": multipliers, "lr": self.args.reg_learning_rate, "weight_decay": 0.0, "maximize": True},
            ]
            self.optimizer = torch.optim.AdamW(groups, lr=self.args.mask_learning_rate,
                                               betas=(self.args.adam_beta1, self.args.adam_beta2),
                                               eps=self.args.adam_epsilon, weight_decay=0.0)
            # The Trainer zeroes only the model's gradients after a step; the multipliers are the trainer's.
            self.optimizer.register_step_post_hook(lambda *_: self.lagrangian.zero_grad(set_to_none=True))
        return self.optimizer

    def _with_multipliers(self, model: nn.Module) -> list[nn.Parameter]:
        return [*model.parameters(), *self.lagrangian.parameters()]

    def _clip_grad_norm(self, model: nn.Module):
        """Clip the mask logits and the multipliers together, as one set of trainable parameters."""
        return self.accelerator.clip_grad_norm_(self._with_multipliers(model), self.args.max_grad_norm)

    def _get_grad_norm(self, model: nn.Module, grad_norm: Any = None):
        if grad_norm is None:
            grad_norm = self.accelerator.clip_grad_norm_(self._with_multipliers(model), float("inf"))
        return grad_norm

    def sparsity_warmup(self) -> int:
        if self._sparsity_warmup is None:
            warmup = self.args.sparsity_warmup_steps
            if warmup is None:
                warmup = self.args.paper_sparsity_warmup()
                max_steps = self.state.max_steps or 0
                if max_steps and warmup > 0.9 * max_steps:
                    capped = max(1, int(0.9 * max_steps))
                    logger.warning("The paper's sparsity warm-up (%d steps) is longer than this run (%d steps); "
                                   "using %d. Set sparsity_warmup_steps to choose.", warmup, max_steps, capped)
                    warmup = capped
            self._sparsity_warmup = int(warmup)
        return self._sparsity_warmup

    def current_target(self) -> float:
        return self.args.target_at(self.state.global_step, self.sparsity_warmup())

    # ------------------------------------------------------------------ loss
    @contextlib.contextmanager
    def _inner_mode(self, training: bool) -> Iterator[None]:
        """Set dropout of the wrapped model without touching the wrapper (whose mode decides mask sampling);
        every module's own flag is restored afterwards (checkpointed layers keep theirs)."""
        modules = list(self.prunable.model.modules())
        previous = [module.training for module in modules]
        self.prunable.model.train(training)
        try:
            yield
        finally:
            for module, flag in zip(modules, previous):
                module.training = flag

    def teacher_logits(self, inputs: dict[str, Any], example_index: torch.Tensor | None,
                       student_like: torch.Tensor | None = None) -> torch.Tensor:
        if self.args.teacher == "cached":
            if self.teacher_cache is None:
                self.teacher_cache = self.build_teacher_cache()
                if self.teacher_cache is None:   # too large: the same-model teacher, from now on
                    self.args.teacher = "same_model"
                    return self.teacher_logits(inputs, example_index)
            if example_index is None:
                raise PruningError(f"teacher='cached' needs the '{EXAMPLE_INDEX_COLUMN}' column in every batch; it "
                                   "was dropped (a custom collator?). Keep it, or use teacher='same_model'.")
            assert student_like is not None
            return self.teacher_cache.lookup(example_index, student_like, inputs.get("attention_mask"))
        with torch.no_grad(), self.prunable.masks_disabled(), self._inner_mode(False):
            return self.prunable(**inputs).logits.detach()

    @torch.no_grad()
    def build_teacher_cache(self) -> TeacherCache | None:
        """Run the full model once over the training data, in order, and keep its logits per example, compactly
        (see `training.teacher`). None when the cache would not fit `teacher_cache_max_gb`: it is never built then,
        and the caller falls back to the same-model teacher."""
        args = self.args
        dataset = self._remove_unused_columns(self.train_dataset, description="teacher cache")
        loader = torch.utils.data.DataLoader(dataset, batch_size=args.per_device_eval_batch_size,
                                             shuffle=False, collate_fn=self.data_collator)
        entries: dict[int, Any] = {}
        cache: TeacherCache | None = None
        prunable = self.prunable
        with prunable.masks_disabled(), self._inner_mode(False):
            for batch in loader:
                batch = self._prepare_inputs(batch)
                indices = batch.pop(EXAMPLE_INDEX_COLUMN)
                for key in LABEL_KEYS:
                    batch.pop(key, None)
                logits = prunable(**batch).logits.float().cpu()
                mask = batch.get("attention_mask")
                per_position = logits.dim() == 3
                rows = [logits[row][mask[row].bool().cpu()] if per_position and mask is not None else logits[row]
                        for row in range(logits.shape[0])]
                if cache is None:   # the first batch: decide from the size the whole cache would take
                    cache = self._new_teacher_cache(dataset, per_position, logits.shape[-1], rows)
                    if cache is None:
                        return None
                for row, index in enumerate(indices.tolist()):
                    entries[index] = TeacherCache.compress(rows[row], cache.storage, args.teacher_cache_topk)
        if cache is None:
            raise PruningError("teacher='cached' found no training examples to cache; pass a non-empty train_dataset.")
        cache.logits = [entries[i] for i in range(len(entries))]
        logger.info("Cached teacher logits for %d examples: %s as %s%s.", len(entries), format_bytes(cache.nbytes()),
                    cache.storage, "" if cache.approximation_kl is None else
                    f", KL(teacher || cached teacher) {cache.approximation_kl:.2e} nats per token")
        return cache

    def _new_teacher_cache(self, dataset: Any, per_position: bool, width: int,
                           sample: list[torch.Tensor]) -> TeacherCache | None:
        args = self.args
        positions = _cache_rows(dataset, per_position)
        budget = gigabytes(args.teacher_cache_max_gb)
        storage, estimates = choose_storage(args.teacher_cache_dtype, per_position, positions, width, budget,
                                            args.teacher_cache_topk)
        if storage is None:
            logger.warning(budget_message(estimates, budget, positions, width, per_position))
            return None
        error = None
        if per_position:
            rows = torch.cat(sample)
            error = TeacherCache.approximation_error(rows, TeacherCache.compress(rows, storage, args.teacher_cache_topk),
                                                     width, storage, args.teacher_cache_topk)
        logger.info("Teacher cache: %d %s x %d logits, estimated %s as %s (budget %s).", positions,
                    "real tokens" if per_position else "examples", width, format_bytes(estimates[storage]), storage,
                    format_bytes(budget))
        return TeacherCache([], per_position, storage, width, error, {"estimates": estimates, "rows": positions})

    def compute_loss(self, model: nn.Module, inputs: dict[str, Any], return_outputs: bool = False,
                     num_items_in_batch: Any = None):
        if not self.objective.is_default:
            return self.objective.compute_loss(model, inputs, return_outputs)
        prunable = self.prunable
        inputs = dict(inputs)
        example_index = inputs.pop(EXAMPLE_INDEX_COLUMN, None)
        for key in LABEL_KEYS:
            inputs.pop(key, None)
        teacher = None if self.args.teacher == "cached" else self.teacher_logits(inputs, example_index)
        if model.training:
            self._one_noise_draw_per_step()
        outputs = model(**inputs)  # PrunableModel.train() already switched dropout off unless keep_dropout
        student = outputs.logits
        if teacher is None:
            teacher = self.teacher_logits(inputs, example_index, student_like=student)
        mask = inputs.get("attention_mask")
        kl = kl_to_teacher(student, teacher, mask, self.args.kl_temperature)
        kl_for_loss = kl
        if student.dim() == 3 and model.training and torch.is_tensor(num_items_in_batch):
            # Mean over the real tokens of the whole accumulated, distributed batch: the Trainer divides by the
            # accumulation steps and DDP averages over ranks, so scale this micro-batch's sum back up.
            scale = getattr(self, "current_gradient_accumulation_steps", self.args.gradient_accumulation_steps)
            scale *= max(self.args.world_size, 1)
            total = kl_to_teacher(student, teacher, mask, self.args.kl_temperature, reduction="sum")
            kl_for_loss = total * scale / num_items_in_batch.to(total.device).clamp_min(1)
        target = self.current_target()
        expected = prunable.expected_sparsity()
        sampled = prunable.sampled_sparsity()
        current = sampled if (self.args.sparsity_penalty == "sampled" and sampled is not None) else expected
        gap = target - current
        loss = kl_for_loss + self.lagrangian.penalty(gap)
        if model.training:
            if not bool(torch.isfinite(loss)):
                self._stop_on_nonfinite(kl)
            self._record(kl=kl, sampled=sampled if sampled is not None else expected, expected=expected)
        return (loss, outputs) if return_outputs else loss

    def _one_noise_draw_per_step(self) -> None:
        """Every micro-batch of one optimizer step sees the same mask sample, as one full batch (or DDP) would."""
        generator = self.prunable.generator
        if generator is None:
            return
        step = self.state.global_step
        if self._noise_step != step:
            self._noise_step, self._noise_state = step, generator.get_state()
        else:
            generator.set_state(self._noise_state)

    def _get_num_items_in_batch(self, batch_samples: list, device: torch.device) -> torch.Tensor | None:
        """Real tokens in the accumulated batch, summed over ranks: the per-position KL is averaged over them."""
        counts = []
        for batch in batch_samples:
            mask = batch.get("attention_mask") if hasattr(batch, "get") else None
            ids = batch.get("input_ids") if hasattr(batch, "get") else None
            if mask is not None:
                counts.append(mask.sum())
            elif ids is not None:
                counts.append(torch.tensor(ids.numel()))
        if not counts:
            return None
        total = torch.stack([c.to(device) for c in counts]).sum()
        if self.args.world_size > 1:
            total = self.accelerator.gather(total).sum()
        return total

    def _stop_on_nonfinite(self, kl: torch.Tensor) -> None:
        folder = os.path.join(self.args.output_dir, "last-good-masks")
        if self.args.should_save:
            self.prunable.save_pretrained(folder)
        raise PruningError(f"Non-finite pruning loss at step {self.state.global_step} (KL = {float(kl)}). The masks "
                           f"before this step were saved to {folder}. Lower mask_learning_rate / reg_learning_rate, "
                           "check the data for empty sequences, or use fp32.")

    def _record(self, **values: torch.Tensor) -> None:
        for key, value in values.items():
            value = value.detach().float()
            self._running[key] = self._running.get(key, 0.0) + value
        self._running_count += 1

    def log(self, logs: dict[str, float], *args: Any, **kwargs: Any) -> None:
        """Add target, sampled and expected sparsity, lambda1, lambda2 and KL to every training log."""
        if "loss" in logs and self._running_count:
            count = self._running_count
            logs["kl"] = float(self._running["kl"]) / count
            logs["sparsity_sampled"] = float(self._running["sampled"]) / count
            logs["sparsity_expected"] = float(self._running["expected"]) / count
            logs["sparsity_target"] = self.current_target()
            logs["lambda_1"] = float(self.lagrangian.lambda_1.detach())
            logs["lambda_2"] = float(self.lagrangian.lambda_2.detach())
            logs.update({key: float(self._running[key]) / count for key in ("task_loss", "penalty")
                         if key in self._running})
            self._running, self._running_count = {}, 0
        super().log(logs, *args, **kwargs)

    # ------------------------------------------------------------------ checkpoints: masks only
    def _save(self, output_dir: str | None = None, state_dict: dict | None = None) -> None:
        output_dir = output_dir or self.args.output_dir
        if not self.args.should_save:
            return
        os.makedirs(output_dir, exist_ok=True)
        prunable = self.prunable
        prunable.save_pretrained(output_dir, include_logits=True)  # resumable: logits too
        from ..io_utils import atomic_write
        state = {"lagrangian": {k: v.detach().cpu() for k, v in self.lagrangian.state_dict().items()},
                 "generator": prunable.generator.get_state() if prunable.generator is not None else None,
                 "sparsity_warmup": self._sparsity_warmup, "initial_logits": self.initial_logits}
        atomic_write(os.path.join(output_dir, PRUNING_STATE_NAME), lambda tmp: torch.save(state, tmp))
        torch.save(self.args, os.path.join(output_dir, "training_args.bin"))

    def _load_from_checkpoint(self, resume_from_checkpoint: str, model: nn.Module | None = None) -> None:
        prunable = self.prunable
        prunable.load_masks(resume_from_checkpoint)
        prunable.clear_masks()
        path = os.path.join(resume_from_checkpoint, PRUNING_STATE_NAME)
        if not os.path.isfile(path):
            raise PruningError(f"{resume_from_checkpoint} has no {PRUNING_STATE_NAME}; it is not a PruningTrainer "
                               "checkpoint.")
        state = torch.load(path, map_location="cpu", weights_only=True)
        self.lagrangian.load_state_dict(state["lagrangian"])
        if state.get("generator") is not None and prunable.generator is not None:
            prunable.generator.set_state(state["generator"])
        self._sparsity_warmup = state.get("sparsity_warmup")
        self.initial_logits = state.get("initial_logits")

def _warm_start(model: PrunableModel, args: PruningArguments, settings: dict[str, Any]) -> None:
    """`warm_start_scores` given: the logits start from that ranking (`circuits.warm_start`), recorded with the
    recipe's settings."""
    if getattr(args, "warm_start_scores", None):
        from ..circuits.warm_start import warm_start_from_file
        settings["warm_start"] = warm_start_from_file(model, args.warm_start_scores, args.warm_start_spread)


def _check_columns(dataset: Any) -> None:
    if dataset is not None and hasattr(dataset, "__len__") and len(dataset) == 0:
        raise EmptyDatasetError("The training dataset has no rows; pass a train_dataset with at least one example "
                                "(check the split, and any filter or select applied before).")
    columns = getattr(dataset, "column_names", None)
    if columns is None or isinstance(columns, dict):
        return
    if "input_ids" not in columns and "inputs_embeds" not in columns:
        raise PruningError(f"The training dataset has columns {columns} but no 'input_ids': the model needs "
                           "tokenized inputs. Tokenize it first, e.g. dataset.map(lambda b: tokenizer(b['text'], "
                           "truncation=True), batched=True).")


def _check_reachable(model: PrunableModel, target: float) -> None:
    total = model.num_units()
    forced = [model.mask_state.forced.get(kind) for kind in model.enabled_kinds()]
    forced_in = sum(int((f > 0).sum()) for f in forced)
    forced_out = sum(int((f < 0).sum()) for f in forced)
    to_prune = round(target * total)
    if to_prune > total - forced_in or to_prune < forced_out or (target > 0 and to_prune == 0):
        raise PruningError(f"target_sparsity={target} cannot be reached: it prunes {to_prune} of the {total} enabled "
                           f"units ({', '.join(model.enabled_kinds())}), but {forced_in} are forced in and "
                           f"{forced_out} forced out. Lower the target, enable more unit kinds "
                           "(PruningConfig(prune_heads=True, prune_mlps=True)), or force fewer units.")


def _cache_rows(dataset: Any, per_position: bool) -> int:
    """Rows a teacher cache of `dataset` holds: one per example, or one per real token."""
    if not per_position:
        return len(dataset)
    columns = getattr(dataset, "column_names", None) or []
    if "attention_mask" in columns:
        return int(sum(sum(row) for row in dataset["attention_mask"]))
    return int(sum(len(row) for row in dataset["input_ids"]))
