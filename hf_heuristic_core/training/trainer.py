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
from .losses import kl_items, kl_to_teacher
from .objectives import MaskObjective
from .judging import EXAMPLE_INDEX_COLUMN, SubnetworkJudging
from .recipes import PAPER_INIT_MEAN, apply_recipe, planned_steps, resolve_recipe
from .sharding import average_replicated_gradients, configure_sharding, is_sharded
from .teacher import TeacherCache, budget_message, choose_storage, format_bytes, gigabytes
from ..architectures.resolve import transformers_model
from ..circuits.warm_start import warm_start_from_file
from ..io_utils import atomic_write

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
        self._running_weight: torch.Tensor | float = 0.0
        self.lagrangian = LagrangeMultipliers().to(model.mask_logits_device)
        self._start_masks(model, args)
        if model.generator is None or model.generator.device != model.mask_logits_device:
            model.generator = torch.Generator(device=model.mask_logits_device)
        model.generator.manual_seed(args.seed)
        self.initial_logits: dict[str, torch.Tensor] | None = None
        self.convergence = None
        self.objective = MaskObjective(self)   # task loss, fixed penalties, chunked samples (training.objectives)
        configure_sharding(self)   # FSDP2: base model sharded, mask state whole (training.sharding)

    def _start_masks(self, model: PrunableModel, args: PruningArguments) -> None:
        """Logits nobody has set, loaded or trained start from this run's seed (so the seed alone decides the run),
        with the recipe's initialization when the config kept the paper's."""
        if not model.mask_state.is_fresh():
            _warm_start(model, args, self.recipe_settings)
            return
        init_mean = self.recipe.config.get("init_mean")
        # The recipe's initial logit mean is for relaxations whose settings have one (hard concrete's init_mean).
        has_init_mean = "init_mean" in model.pruning_config.relaxation_settings.field_names()
        if (has_init_mean and init_mean is not None
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
            signature = inspect.signature(transformers_model(self.prunable.model).forward)
            self._signature_columns = list(signature.parameters) + [EXAMPLE_INDEX_COLUMN, "label", "label_ids",
                                                                    *self.label_names]

    def create_optimizer(self, model: nn.Module | None = None) -> torch.optim.Optimizer:
        """AdamW over two groups, both without weight decay: mask logits (descent) and multipliers (ascent)."""
        if self.optimizer is None:
            prunable = self.prunable
            logits = [p for _, p in prunable.mask_logits.items()]
            groups = [
                {"params": logits, "lr": self.args.mask_learning_rate, "weight_decay": 0.0, "maximize": False},
                self._multiplier_group(),
            ]
            if is_sharded(self):
                # accelerate's FSDP2 preparation re-maps every optimizer tensor to a model parameter by name and
                # fails on the multipliers (the trainer's, not the model's): they join after it (create_scheduler).
                groups.pop()
            self.optimizer = torch.optim.AdamW(groups, lr=self.args.mask_learning_rate,
                                               betas=(self.args.adam_beta1, self.args.adam_beta2),
                                               eps=self.args.adam_epsilon, weight_decay=0.0)
            # The Trainer zeroes only the model's gradients after a step; the multipliers are the trainer's.
            self.optimizer.register_step_post_hook(lambda *_: self.lagrangian.zero_grad(set_to_none=True))
        return self.optimizer

    def _multiplier_group(self) -> dict[str, Any]:
        return {"params": list(self.lagrangian.parameters()), "lr": self.args.reg_learning_rate, "weight_decay": 0.0,
                "maximize": True}

    def create_scheduler(self, num_training_steps: int, optimizer: torch.optim.Optimizer | None = None):
        """The multipliers' group joins a sharded run's optimizer here, after the model was prepared and before
        the scheduler reads the groups' learning rates."""
        optimizer = optimizer if optimizer is not None else self.optimizer
        multipliers = set(self.lagrangian.parameters())
        if optimizer is not None and not any(p in multipliers for group in optimizer.param_groups
                                             for p in group["params"]):
            optimizer.add_param_group(self._multiplier_group())
        return super().create_scheduler(num_training_steps, optimizer)

    def _with_multipliers(self, model: nn.Module) -> list[nn.Parameter]:
        return [*model.parameters(), *self.lagrangian.parameters()]

    def _clip_grad_norm(self, model: nn.Module):
        """Clip the mask logits and the multipliers together, as one set of trainable parameters."""
        self._average_mask_gradients()
        return self.accelerator.clip_grad_norm_(self._with_multipliers(model), self.args.max_grad_norm)

    def _get_grad_norm(self, model: nn.Module, grad_norm: Any = None):
        if grad_norm is None:   # no clipping this run: the one call before every optimizer step
            self._average_mask_gradients()
            grad_norm = self.accelerator.clip_grad_norm_(self._with_multipliers(model), float("inf"))
        return grad_norm

    def _average_mask_gradients(self) -> None:
        """Under FSDP the mask logits are kept whole on every rank (`training.sharding`) and FSDP does not reduce
        their gradients: average them here, once per optimizer step, before any norm is taken."""
        if is_sharded(self):
            average_replicated_gradients([p for _, p in self.prunable.mask_logits.items()], self.args.world_size)

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
            logits = self.prunable(**inputs).logits.detach()
        # bf16 halves what is held from here to the KL (the student's forward and backward run in between).
        return logits.to(torch.bfloat16) if self.args.teacher_logits_dtype == "bfloat16" else logits

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
        # One KL graph (the sum over this micro-batch's items), its mean derived: per-token KL intermediates are
        # as large as the logits, and a second graph for the mean would hold them twice.
        total = kl_to_teacher(student, teacher, mask, self.args.kl_temperature, reduction="sum",
                              chunk_size=self.args.kl_chunk_size)
        items = kl_items(student, mask)
        kl = total / items.to(total.device)
        kl_for_loss = kl
        if student.dim() == 3 and model.training and torch.is_tensor(num_items_in_batch):
            # Mean over the real tokens of the whole accumulated, distributed batch: the Trainer divides by the
            # accumulation steps and DDP averages over ranks, so scale this micro-batch's sum back up.
            scale = getattr(self, "current_gradient_accumulation_steps", self.args.gradient_accumulation_steps)
            scale *= max(self.args.world_size, 1)
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
            self._record(items, kl=kl, sampled=sampled if sampled is not None else expected,
                         expected=expected)
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

    def _record(self, weight: float | torch.Tensor = 1.0, **values: torch.Tensor) -> None:
        """Add one micro-batch's values to the running log, weighted by what the value averages over (examples, or
        real tokens for per-position KL), so that the logged mean is the mean over the whole logged batch."""
        weight = torch.as_tensor(weight, dtype=torch.float32).detach()
        for key, value in values.items():
            value = value.detach().float()
            weight = weight.to(value.device)   # stays on the device: no host sync per micro-batch
            self._running[key] = self._running.get(key, 0.0) + value * weight
        self._running_weight = self._running_weight + weight
        self._running_count += 1

    def _running_means(self) -> dict[str, float]:
        """The weighted means of the recorded values since the last log, over every micro-batch of every process
        (one all-reduce when distributed: the log then shows the global batch's KL, not rank 0's share)."""
        keys = sorted(self._running)
        device = next((v.device for v in self._running.values() if isinstance(v, torch.Tensor)), torch.device("cpu"))
        totals = torch.stack([torch.as_tensor(self._running[key], dtype=torch.float32).to(device) for key in keys]
                             + [torch.as_tensor(self._running_weight, dtype=torch.float32).to(device)])
        if self.args.world_size > 1 and torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.all_reduce(totals, op=torch.distributed.ReduceOp.SUM)
        weight = float(totals[-1]) or 1.0
        return {key: float(value) / weight for key, value in zip(keys, totals[:-1])}

    def log(self, logs: dict[str, float], *args: Any, **kwargs: Any) -> None:
        """Add target, sampled and expected sparsity, lambda1, lambda2 and KL to every training log (under a fixed
        penalty no target or multiplier: none applies)."""
        if "loss" in logs and self._running_count:
            means = self._running_means()
            logs["kl"] = means["kl"]
            logs["sparsity_sampled"] = means["sampled"]
            logs["sparsity_expected"] = means["expected"]
            if self.objective.control != "penalty":   # a fixed penalty has no target and no multipliers
                logs["sparsity_target"] = self.current_target()
                logs["lambda_1"] = float(self.lagrangian.lambda_1.detach())
                logs["lambda_2"] = float(self.lagrangian.lambda_2.detach())
            logs.update({key: means[key] for key in ("task_loss", "penalty") if key in means})
            self._running, self._running_count = {}, 0
            self._running_weight = 0.0
        super().log(logs, *args, **kwargs)

    # ------------------------------------------------------------------ checkpoints: masks only
    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        """Masks only. Under FSDP the stock Trainer first gathers the whole model's weights onto one rank; the
        masks are already whole on every rank (`training.sharding`), so that gather is skipped."""
        if not is_sharded(self):
            return super().save_model(output_dir, _internal_call)
        self._save(output_dir or self.args.output_dir)
        if self.args.push_to_hub and not _internal_call:
            self.push_to_hub(commit_message="Model save", revision=self.args.hub_revision)

    def _save_optimizer_and_scheduler(self, output_dir: str) -> None:
        """Under FSDP the optimizer holds only whole tensors (mask logits, multipliers), identical on every rank:
        rank 0 saves them as in a one-process run (the stock FSDP path would also write the model's weights)."""
        if not is_sharded(self):
            return super()._save_optimizer_and_scheduler(output_dir)
        if self.args.should_save:
            from transformers.trainer import OPTIMIZER_NAME, SCHEDULER_NAME
            torch.save(self.optimizer.state_dict(), os.path.join(output_dir, OPTIMIZER_NAME))
            torch.save(self.lr_scheduler.state_dict(), os.path.join(output_dir, SCHEDULER_NAME))

    def _load_optimizer_and_scheduler(self, checkpoint: str | None) -> None:
        if checkpoint is None or not is_sharded(self):
            return super()._load_optimizer_and_scheduler(checkpoint)
        from transformers.trainer import OPTIMIZER_NAME, SCHEDULER_NAME
        for name in (OPTIMIZER_NAME, SCHEDULER_NAME):
            if not os.path.isfile(os.path.join(checkpoint, name)):
                raise PruningError(f"{checkpoint} has no {name}; it was not written by a PruningTrainer run (a "
                                   "sharded run resumes only from its own checkpoints).")
        self.optimizer.load_state_dict(torch.load(os.path.join(checkpoint, OPTIMIZER_NAME), map_location="cpu",
                                                  weights_only=True))
        self.lr_scheduler.load_state_dict(torch.load(os.path.join(checkpoint, SCHEDULER_NAME), weights_only=True))

    def _save(self, output_dir: str | None = None, state_dict: dict | None = None) -> None:
        output_dir = output_dir or self.args.output_dir
        if not self.args.should_save:
            return
        os.makedirs(output_dir, exist_ok=True)
        prunable = self.prunable
        prunable.save_pretrained(output_dir, include_logits=True)  # resumable: logits too
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
                           "(PruningConfig(granularity=UnitSettings(prune_heads=True, prune_mlps=True))), or force "
                           "fewer units.")


def _cache_rows(dataset: Any, per_position: bool) -> int:
    """Rows a teacher cache of `dataset` holds: one per example, or one per real token."""
    if not per_position:
        return len(dataset)
    columns = getattr(dataset, "column_names", None) or []
    if "attention_mask" in columns:
        return int(sum(sum(row) for row in dataset["attention_mask"]))
    return int(sum(len(row) for row in dataset["input_ids"]))
