"""`PrunableModel`: hard-concrete head and MLP masks injected into any Transformers model through hooks.

Nothing in the wrapped model changes: a forward pre-hook on each attention output projection masks the per-head
context vectors, a forward hook on each MLP output projection masks the block's output, and `unwrap()` removes both.
Masks are drawn once per forward pass (by a pre-hook on the top-level model), so gradient-checkpoint recomputation and
modules called twice see the same `z`.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Iterator, Mapping

import torch
from torch import nn

from .architectures.resolve import ResolvedArchitecture, resolve_architecture, transformers_model
from .config import PruningConfig
from .errors import MaskShapeError, MissingMeansError, PruningError
from .relaxations.hard_concrete import LagrangeMultipliers, MaskLogits, check_sparsity, topk_binarize
from .ablation.apply import mask_block, mask_heads, resample_reference
from .batching import batch_size_of, iterate_batches, model_input_names, progress
from .ablation.means import (MeanStatistics, token_mask_for,
                    update_fingerprint, weighted_sum)

UNIT_KINDS = ("heads", "mlps")


class PrunableModel(nn.Module):
    """Wraps a loaded model; forwards every kwarg to it and masks heads / MLP blocks on the way.

    In training mode masks are sampled from the hard-concrete distribution; in eval mode they are deterministic:
    the fixed masks if `set_masks` was called, otherwise the learned ones (binarized, see `PruningConfig.eval_mask`).
    """

    def __init__(self, model: nn.Module, config: PruningConfig | None = None) -> None:
        super().__init__()
        config = PruningConfig.from_dict(config.to_dict()) if config is not None else PruningConfig()
        self.model = model
        self.architecture: ResolvedArchitecture = resolve_architecture(model, config)
        arch = self.architecture
        hf_model = transformers_model(model)
        hf_config = getattr(hf_model, "config", None)
        config.model_type = arch.model_type
        config.num_layers, config.num_heads, config.head_dim = arch.num_layers, arch.num_heads, arch.head_dim
        config.hidden_size = arch.hidden_size
        config.base_model_name_or_path = config.base_model_name_or_path or getattr(hf_config, "_name_or_path", None) or None
        config.base_model_revision = config.base_model_revision or getattr(hf_config, "_commit_hash", None)
        config.base_model_class = type(hf_model).__name__
        self.pruning_config = config
        self.mask_logits = MaskLogits(arch.num_layers, arch.num_heads, config)
        self.lagrangian = LagrangeMultipliers()
        self.register_buffer("head_means", None, persistent=False)
        self.register_buffer("mlp_means", None, persistent=False)
        self.register_buffer("fixed_heads", None, persistent=False)
        self.register_buffer("fixed_mlps", None, persistent=False)
        self.register_buffer("forced_heads", torch.zeros(arch.num_layers, arch.num_heads), persistent=False)
        self.register_buffer("forced_mlps", torch.zeros(arch.num_layers), persistent=False)
        self.means_info: dict[str, Any] = {}
        self.generator: torch.Generator | None = None
        self._masks_enabled = True
        self._current: dict[str, Any] = {"heads": None, "mlps": None, "batch_size": None}
        self._eval_cache: tuple[Any, dict[str, torch.Tensor]] | None = None
        self._saved_requires_grad: dict[str, bool] | None = None
        self._unwrapped = False
        self.train_dropout = True
        if config.freeze_base_model:
            self._saved_requires_grad = {n: p.requires_grad for n, p in model.named_parameters()}
            for parameter in model.parameters():
                parameter.requires_grad_(False)
        self._handles = [hf_model.register_forward_pre_hook(self._draw_masks_hook, with_kwargs=True)]
        for layer, module in enumerate(arch.attention_outputs):
            self._handles.append(module.register_forward_pre_hook(self._make_head_hook(layer)))
        for layer, module in enumerate(arch.mlp_outputs):
            self._handles.append(module.register_forward_hook(self._make_mlp_hook(layer)))
        if any(getattr(m, "gradient_checkpointing", False) is True for m in model.modules()):
            # Already enabled on the wrapped model: re-enable so recomputation replays each pass's masks.
            self.gradient_checkpointing_enable()

    # ------------------------------------------------------------------ basic properties
    @property
    def num_layers(self) -> int:
        return self.architecture.num_layers

    @property
    def num_heads(self) -> int:
        return self.architecture.num_heads

    @property
    def head_dim(self) -> int:
        return self.architecture.head_dim

    @property
    def config(self):
        """The wrapped model's Transformers config (what `Trainer` and `generate` expect to find)."""
        return getattr(transformers_model(self.model), "config", None)

    @property
    def has_means(self) -> bool:
        return self.head_means is not None and self.mlp_means is not None

    def enabled_kinds(self) -> list[str]:
        return [k for k, on in (("heads", self.pruning_config.prune_heads),
                                ("mlps", self.pruning_config.prune_mlps)) if on]

    def train(self, mode: bool = True) -> "PrunableModel":
        """Training mode samples masks. With `train_dropout = False` (what PruningTrainer sets unless keep_dropout)
        the wrapped model runs without dropout, while gradient-checkpointed layers stay in training mode so that
        they still recompute in backward."""
        super().train(mode)
        if mode and not self.train_dropout:
            self.model.eval()
            for module in self.model.modules():
                if getattr(module, "gradient_checkpointing", False) is True:
                    module.training = True
        return self

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        self._check_usable()
        return self.model(*args, **kwargs)

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        self._check_usable()
        return self.model.generate(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            model = self._modules.get("model")
            if model is None or name.startswith("_"):
                raise
            return getattr(model, name)

    # ------------------------------------------------------------------ mask state
    def _check_usable(self) -> None:
        if self._unwrapped:
            raise PruningError("This PrunableModel was unwrapped; its hooks are gone. Wrap the model again.")

    def _draw_masks_hook(self, module: nn.Module, args: Any, kwargs: dict[str, Any]) -> None:
        """Top-level pre-hook: fix this forward pass's masks (and note its batch size) before any layer runs."""
        if not self._masks_enabled:
            return None
        if self.pruning_config.ablation == "mean" and not self.has_means:
            raise MissingMeansError(
                "Mean ablation needs mean activations, and none were computed. Call "
                "prunable_model.compute_means(train_data) first (or load an artifact that has them), or choose "
                "PruningConfig(ablation='zero' | 'resample'), or run the full model under .masks_disabled().")
        self._current = {**self.current_masks(), "batch_size": batch_size_of(args, kwargs)}
        return None

    def current_masks(self) -> dict[str, torch.Tensor | None]:
        """The masks a forward pass uses now: fixed, sampled (training) or deterministic (eval)."""
        masks: dict[str, torch.Tensor | None] = {}
        logits = self.mask_logits.logits()
        distribution = self.mask_logits.distribution
        eval_masks = None
        for kind in UNIT_KINDS:
            fixed = self.fixed_heads if kind == "heads" else self.fixed_mlps
            if fixed is not None:
                masks[kind] = fixed
            elif logits[kind] is None:
                masks[kind] = None
            elif self.training:
                masks[kind] = self._with_forced(kind, distribution.sample(logits[kind], generator=self.generator))
            else:
                if eval_masks is None:
                    eval_masks = self._eval_masks()
                masks[kind] = eval_masks[kind]
        return masks

    def _with_forced(self, kind: str, z: torch.Tensor) -> torch.Tensor:
        """Forced units are exactly 1 or 0 whatever their logits say (no host sync)."""
        forced = (self.forced_heads if kind == "heads" else self.forced_mlps).to(z.device)
        return torch.where(forced != 0, (forced > 0).to(z.dtype), z)

    @property
    def mask_logits_device(self) -> torch.device:
        return self.lagrangian.lambda_1.device

    def sampled_sparsity(self) -> torch.Tensor | None:
        """1 - sum(z) / N for the masks of the last forward pass (differentiable when they were sampled)."""
        kept = [self._current[k].sum() for k in self.enabled_kinds() if self._current.get(k) is not None]
        if len(kept) != len(self.enabled_kinds()):
            return None
        return 1 - torch.stack(kept).sum() / self.num_units()

    def _eval_masks(self) -> dict[str, torch.Tensor]:
        """Deterministic masks, cached until a logit changes (avoids a sort and a sync per eval forward)."""
        settings = (self.pruning_config.eval_mask, self.pruning_config.binarization,
                    self.pruning_config.binarization_scope, self.pruning_config.threshold)
        state = [t.detach() for t in (*self.mask_logits.logits().values(), self.forced_heads, self.forced_mlps)
                 if t is not None]
        cached = self._eval_cache
        # Compare values, not versions: edits through `.data` do not bump a tensor's version counter.
        if (cached is None or cached[0][0] != settings or len(cached[0][1]) != len(state)
                or not all(torch.equal(a, b) for a, b in zip(cached[0][1], state))):
            masks = self.get_masks(binary=self.pruning_config.eval_mask == "binary", ignore_fixed=True)
            self._eval_cache = ((settings, [t.clone() for t in state]), masks)
        return self._eval_cache[1]

    def _reference(self, kind: str, layer: int, x: torch.Tensor) -> torch.Tensor | None:
        mode = self.pruning_config.ablation
        if mode == "zero":
            return None
        if mode == "resample":
            return resample_reference(x, self._current.get("batch_size"))
        means = self.head_means if kind == "heads" else self.mlp_means
        return means[layer]

    def _make_head_hook(self, layer: int):
        def hook(module: nn.Module, args: tuple) -> tuple | None:
            z = self._current["heads"]
            if not self._masks_enabled or z is None or not args:
                return None
            x = args[0]
            masked = mask_heads(x, z[layer], self._reference("heads", layer, x), self.num_heads)
            return (masked,) + tuple(args[1:])
        return hook

    def _make_mlp_hook(self, layer: int):
        def hook(module: nn.Module, args: tuple, output: Any) -> Any:
            z = self._current["mlps"]
            if not self._masks_enabled or z is None or not isinstance(output, torch.Tensor):
                return None
            return mask_block(output, z[layer], self._reference("mlps", layer, output))
        return hook

    def gradient_checkpointing_enable(self, gradient_checkpointing_kwargs: dict[str, Any] | None = None) -> None:
        """Enable the wrapped model's gradient checkpointing so that recomputation in backward reuses the masks of
        the forward pass being recomputed, even when several forwards run before one backward."""
        kwargs = {"use_reentrant": False, **(gradient_checkpointing_kwargs or {})}
        if kwargs["use_reentrant"]:
            raise PruningError("PrunableModel needs non-reentrant gradient checkpointing (use_reentrant=False) to "
                               "replay each forward pass's masks during recomputation.")
        kwargs["context_fn"] = self._checkpoint_contexts
        self.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)

    def _checkpoint_contexts(self):
        """(forward context, recompute context) for torch.utils.checkpoint: the recompute sees this pass's masks."""
        captured, enabled = dict(self._current), self._masks_enabled

        @contextlib.contextmanager
        def replay() -> Iterator[None]:
            saved = (self._current, self._masks_enabled)
            self._current, self._masks_enabled = captured, enabled
            try:
                yield
            finally:
                self._current, self._masks_enabled = saved

        return contextlib.nullcontext(), replay()

    @contextlib.contextmanager
    def masks_disabled(self) -> Iterator["PrunableModel"]:
        """Run the full, unmasked model (the teacher) inside this block."""
        previous = self._masks_enabled
        self._masks_enabled = False
        try:
            yield self
        finally:
            self._masks_enabled = previous

    def set_ablation(self, mode: str) -> None:
        """Switch between mean, zero and resample ablation (e.g. at evaluation time)."""
        config = PruningConfig.from_dict({**self.pruning_config.to_dict(), "ablation": mode})
        self.pruning_config.ablation = config.ablation

    @contextlib.contextmanager
    def using_ablation(self, mode: str) -> Iterator["PrunableModel"]:
        previous = self.pruning_config.ablation
        self.set_ablation(mode)
        try:
            yield self
        finally:
            self.pruning_config.ablation = previous

    # ------------------------------------------------------------------ fixed and learned masks
    def _validated_mask(self, kind: str, mask: Any) -> torch.Tensor:
        expected = self.mask_logits.expected_shape(kind)
        tensor = torch.as_tensor(mask, dtype=torch.float32).detach().clone()
        if tuple(tensor.shape) != expected:
            shape_text = "[num_layers, num_heads]" if kind == "heads" else "[num_layers]"
            raise MaskShapeError(f"{kind} mask has shape {tuple(tensor.shape)}, but this {self.architecture.model_type} "
                                 f"model needs {shape_text} = {list(expected)}.")
        if not torch.isfinite(tensor).all():
            raise MaskShapeError(f"{kind} mask contains NaN or inf values; masks must be 0/1 (or in [0, 1]).")
        if tensor.min() < 0 or tensor.max() > 1:
            raise MaskShapeError(f"{kind} mask values must lie in [0, 1] (1 keeps a unit, 0 ablates it); got values "
                                 f"from {tensor.min().item()} to {tensor.max().item()}.")
        return tensor.to(self.forced_heads.device)

    def mask_shapes(self) -> dict[str, tuple[int, ...]]:
        """The shape of every mask kind of this model, e.g. `{"heads": (L, H), "mlps": (L,)}`."""
        return {kind: self.mask_logits.expected_shape(kind) for kind in UNIT_KINDS}

    def validate_masks(self, masks: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        """Check masks given by kind (shape, finite, within [0, 1]) and return them as fp32 tensors; kinds given as
        None are left out. The check `set_masks` applies, for callers that only want to know."""
        shapes = self.mask_shapes()
        unknown = sorted(set(masks) - set(shapes))
        if unknown:
            raise MaskShapeError(f"Unknown mask kind(s) {unknown}; this model's kinds are {sorted(shapes)}.")
        return {kind: self._validated_mask(kind, value) for kind, value in masks.items() if value is not None}

    @contextlib.contextmanager
    def masks_applied(self, masks: Any) -> Iterator["PrunableModel"]:
        """Run the block with `masks` fixed (a dict by kind, an artifact folder / Hub id, or None = as they are);
        the previous fixed masks come back afterwards."""
        if masks is None:
            yield self
            return
        if isinstance(masks, (str, os.PathLike)):
            from .artifacts import read_artifact
            artifact = read_artifact(masks)
            masks = {"heads": artifact.heads, "mlps": artifact.mlps}
        validated = self.validate_masks(masks)
        previous = (self.fixed_heads, self.fixed_mlps)
        self.set_masks(**validated)
        try:
            yield self
        finally:
            self.fixed_heads, self.fixed_mlps = previous
            self._eval_cache = None

    def set_masks(self, heads: Any = None, mlps: Any = None) -> None:
        """Fix masks (`heads`: `[num_layers, num_heads]`, `mlps`: `[num_layers]`, 1 keeps a unit).

        A kind left as None keeps whatever it had (learned masks, or an earlier fixed mask)."""
        validated = {k: self._validated_mask(k, v) for k, v in (("heads", heads), ("mlps", mlps)) if v is not None}
        if "heads" in validated:
            self.fixed_heads = validated["heads"]
        if "mlps" in validated:
            self.fixed_mlps = validated["mlps"]

    def clear_masks(self) -> None:
        """Drop fixed masks; the learned ones apply again."""
        self.fixed_heads = None
        self.fixed_mlps = None

    def reset_masks(self, seed: int) -> None:
        """Start a new pruning run on the same wrapped model: fresh logits from the config's init distribution (seeded,
        so a run is reproducible from its seed alone), Lagrange multipliers at 0, no fixed masks; forced units stay
        pinned. Repeated runs (seeds, sparsity levels) then start alike without reloading the model."""
        config = self.pruning_config
        generator = torch.Generator().manual_seed(int(seed))
        with torch.no_grad():
            for logit in self.mask_logits.logits().values():
                if logit is not None:
                    fresh = torch.empty(logit.shape).normal_(config.init_mean, config.init_std, generator=generator)
                    logit.copy_(fresh.to(logit.device))
            for parameter in self.lagrangian.parameters():
                parameter.zero_()
        self.apply_forced()
        self.clear_masks()
        self._eval_cache = None

    def force_units(self, heads: Any = None, mlps: Any = None, keep: bool = True) -> None:
        """Pin units in (`keep=True`) or out, as the paper's `log_alpha = +/-10`; they stay pinned while training.

        `heads` is a list of (layer, head) pairs or a 0/1 `[num_layers, num_heads]` selection; `mlps` a list of layers
        or a 0/1 `[num_layers]` selection.
        """
        value = 1.0 if keep else -1.0
        for kind, selection in (("heads", heads), ("mlps", mlps)):
            if selection is None:
                continue
            forced = self.forced_heads if kind == "heads" else self.forced_mlps
            chosen = self._selection_mask(kind, selection).to(forced.device)
            forced[chosen.bool()] = value
            logit = self.mask_logits.logits()[kind]
            if logit is not None:
                with torch.no_grad():
                    logit[chosen.bool().to(logit.device)] = 10.0 * value
        self._eval_cache = None

    def _selection_mask(self, kind: str, selection: Any) -> torch.Tensor:
        shape = self.mask_logits.expected_shape(kind)
        if isinstance(selection, torch.Tensor) and tuple(selection.shape) == shape:
            return self._validated_mask(kind, selection)
        chosen = torch.zeros(shape)
        for item in selection:
            index = tuple(item) if isinstance(item, (tuple, list)) else (int(item),)
            if len(index) != len(shape) or any(not 0 <= i < n for i, n in zip(index, shape)):
                raise MaskShapeError(f"{kind} unit {item!r} is out of range for shape {list(shape)}.")
            chosen[index] = 1.0
        return chosen

    def apply_forced(self) -> None:
        """Re-pin forced units after an optimizer step moved their logits."""
        for kind in self.enabled_kinds():
            forced = self.forced_heads if kind == "heads" else self.forced_mlps
            if bool((forced != 0).any()):
                logit = self.mask_logits.logits()[kind]
                with torch.no_grad():
                    logit.copy_(torch.where(forced != 0, 10.0 * forced.to(logit.device), logit))

    def _unit_scores(self) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
        """log_alpha of every enabled unit (forced units pushed to the ends), with each unit's layer."""
        scores, groups, kinds = [], [], []
        for kind in self.enabled_kinds():
            logit = self.mask_logits.logits()[kind].detach().float().cpu()
            forced = (self.forced_heads if kind == "heads" else self.forced_mlps).cpu()
            logit = torch.where(forced != 0, forced * 1e9, logit)
            layer_index = torch.arange(self.num_layers).view(-1, *([1] * (logit.dim() - 1))).expand_as(logit)
            scores.append(logit.flatten())
            groups.append(layer_index.flatten())
            kinds.extend([kind] * logit.numel())
        return torch.cat(scores), torch.cat(groups), kinds

    def _split_units(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        masks, offset = {}, 0
        for kind in UNIT_KINDS:
            shape = self.mask_logits.expected_shape(kind)
            if kind in self.enabled_kinds():
                count = int(torch.tensor(shape).prod())
                masks[kind] = flat[offset:offset + count].view(shape)
                offset += count
            else:
                masks[kind] = torch.ones(shape)
        return masks

    def expected_sparsity(self) -> torch.Tensor:
        """1 - E[L0] / N over enabled units; differentiable (CoFi's penalty)."""
        distribution = self.mask_logits.distribution
        kept = [self._with_forced(k, distribution.prob_nonzero(self.mask_logits.logits()[k])).sum()
                for k in self.enabled_kinds()]
        return 1 - torch.stack(kept).sum() / self.num_units()

    def num_units(self) -> int:
        return sum(int(torch.tensor(self.mask_logits.expected_shape(k)).prod()) for k in self.enabled_kinds())

    def get_masks(self, binary: bool = True, sparsity: float | None = None,
                  ignore_fixed: bool = False) -> dict[str, torch.Tensor]:
        """`{"heads": [num_layers, num_heads], "mlps": [num_layers]}` on the CPU, detached.

        Fixed masks win unless `sparsity` is given. Otherwise, from the learned logits: `binary=False` gives the
        noise-free hard-concrete value; `binary=True` applies `PruningConfig.binarization`: exact top-k on log_alpha
        at `sparsity` (default: the expected sparsity, rounded to whole units), globally or per layer, or the
        paper's deterministic-then-threshold rule.
        """
        if sparsity is not None:
            check_sparsity(sparsity)
        fixed = {"heads": self.fixed_heads, "mlps": self.fixed_mlps}
        if not ignore_fixed and sparsity is None and any(v is not None for v in fixed.values()):
            learned = self.get_masks(binary, ignore_fixed=True) if any(v is None for v in fixed.values()) else {}
            return {k: (fixed[k].detach().cpu().clone() if fixed[k] is not None else learned[k]) for k in UNIT_KINDS}
        distribution = self.mask_logits.distribution
        if not binary:
            soft = {}
            for kind in UNIT_KINDS:
                logit = self.mask_logits.logits()[kind]
                shape = self.mask_logits.expected_shape(kind)
                soft[kind] = (distribution.deterministic(logit.detach().float()).cpu() if logit is not None
                              else torch.ones(shape))
                forced = (self.forced_heads if kind == "heads" else self.forced_mlps).cpu()
                soft[kind] = torch.where(forced != 0, (forced > 0).float(), soft[kind])
            return soft
        if self.pruning_config.binarization == "threshold" and sparsity is None:
            masks = {}
            for kind in UNIT_KINDS:
                logit = self.mask_logits.logits()[kind]
                shape = self.mask_logits.expected_shape(kind)
                if logit is None:
                    masks[kind] = torch.ones(shape)
                    continue
                soft = distribution.cofi_soft_mask(logit.detach().float().cpu())
                mask = (soft > self.pruning_config.threshold).float()
                forced = (self.forced_heads if kind == "heads" else self.forced_mlps).cpu()
                masks[kind] = torch.where(forced != 0, (forced > 0).float(), mask)
            return masks
        if sparsity is None:
            sparsity = min(max(float(self.expected_sparsity().detach()), 0.0), 1.0 - 1e-9)
        scores, groups, _ = self._unit_scores()
        per_layer = self.pruning_config.binarization_scope == "per_layer"
        flat = topk_binarize(scores, sparsity, groups if per_layer else None)
        return self._split_units(flat)

    def sparsity(self, weighted: bool = False, masks: dict[str, torch.Tensor] | None = None) -> float:
        """Realized sparsity of the eval-time mask: the fraction of enabled units pruned (every unit counted once),
        or with `weighted=True` the fraction of their parameters."""
        report = self.sparsity_report(masks)
        return report["sparsity_params"] if weighted else report["sparsity"]

    def sparsity_report(self, masks: dict[str, torch.Tensor] | None = None) -> dict[str, Any]:
        masks = masks if masks is not None else self.get_masks(binary=True)
        arch = self.architecture
        total_units = pruned_units = 0
        total_params = pruned_params = 0
        counts: dict[str, Any] = {}
        for kind in self.enabled_kinds():
            mask = masks[kind].float()
            per_unit = arch.head_param_count if kind == "heads" else arch.mlp_param_count
            pruned = float((1 - mask).sum())
            total_units += mask.numel()
            pruned_units += pruned
            total_params += per_unit * mask.numel()
            pruned_params += per_unit * pruned
            counts[f"{kind}_kept"] = int(round(float(mask.sum())))
            counts[f"{kind}_total"] = mask.numel()
        return {"sparsity": pruned_units / total_units, "sparsity_params": pruned_params / total_params,
                "units_kept": int(round(total_units - pruned_units)), "units_total": total_units, **counts}

    # ------------------------------------------------------------------ means
    @torch.no_grad()
    def compute_means(self, data: Any, batch_size: int = 32, max_batches: int | None = None,
                      show_progress: bool = True, collate_fn=None, device: torch.device | str | None = None
                      ) -> dict[str, Any]:
        """Mean activation of every head (`[num_layers, num_heads, head_dim]`) and MLP block output
        (`[num_layers, hidden]`) over the real tokens of `data`, with the full model, accumulated in fp32.

        `data`: a `datasets.Dataset` with `input_ids` (padded here), a `DataLoader`, a dict batch, or any iterable of
        dicts of tensors. Keys the model's forward does not take (labels, text) are dropped.
        """
        self._check_usable()
        arch = self.architecture
        hf_model = transformers_model(self.model)
        device = torch.device(device) if device is not None else next(self.model.parameters()).device
        pad_token_id = getattr(self.config, "pad_token_id", None) or 0
        batches, total = iterate_batches(data, batch_size, pad_token_id, collate_fn)
        accepted = model_input_names(hf_model)
        stats = MeanStatistics(torch.zeros(arch.num_layers, arch.num_heads * arch.head_dim, device=device),
                               torch.zeros(arch.num_layers, arch.hidden_size, device=device))
        current_mask: dict[str, torch.Tensor | None] = {"mask": None}

        def head_collector(layer: int):
            def hook(module, args):
                x = args[0]
                stats.head_sums[layer] += weighted_sum(x, token_mask_for(x, current_mask["mask"])).to(device)
            return hook

        def mlp_collector(layer: int):
            def hook(module, args, output):
                stats.mlp_sums[layer] += weighted_sum(output, token_mask_for(output, current_mask["mask"])).to(device)
            return hook

        handles = [m.register_forward_pre_hook(head_collector(i)) for i, m in enumerate(arch.attention_outputs)]
        handles += [m.register_forward_hook(mlp_collector(i)) for i, m in enumerate(arch.mlp_outputs)]
        was_training = self.training
        self.eval()
        try:
            with self.masks_disabled():
                for index, batch in enumerate(progress(batches, total, show_progress, "computing means")):
                    if max_batches is not None and index >= max_batches:
                        break
                    inputs = {k: v.to(device) for k, v in batch.items()
                              if isinstance(v, torch.Tensor) and (not accepted or k in accepted)}
                    if "input_ids" not in inputs and "inputs_embeds" not in inputs:
                        raise ValueError(f"compute_means: a batch has no 'input_ids' (keys: {sorted(batch)}); "
                                         "pass tokenized batches.")
                    attention_mask = inputs.get("attention_mask")
                    current_mask["mask"] = attention_mask
                    reference = inputs.get("input_ids", inputs.get("inputs_embeds"))
                    stats.token_count += int(attention_mask.sum()) if attention_mask is not None \
                        else int(reference.shape[0] * reference.shape[1])
                    update_fingerprint(stats.hasher, inputs)
                    self.model(**inputs)
        finally:
            for handle in handles:
                handle.remove()
            self.train(was_training)
        head_means, mlp_means = stats.means()
        self.set_means(head_means.view(arch.num_layers, arch.num_heads, arch.head_dim), mlp_means, {
            "token_count": stats.token_count, "data_fingerprint": stats.hasher.hexdigest(),
            "base_model": self.pruning_config.base_model_name_or_path,
            "base_model_revision": self.pruning_config.base_model_revision,
        })
        return dict(self.means_info)

    def set_means(self, head_means: torch.Tensor, mlp_means: torch.Tensor, info: dict[str, Any] | None = None) -> None:
        """Install mean activations (`[num_layers, num_heads, head_dim]` and `[num_layers, hidden]`, kept in fp32)."""
        arch = self.architecture
        expected = {"head": (arch.num_layers, arch.num_heads, arch.head_dim), "mlp": (arch.num_layers, arch.hidden_size)}
        for name, tensor in (("head", head_means), ("mlp", mlp_means)):
            if tuple(tensor.shape) != expected[name]:
                raise MaskShapeError(f"{name} means have shape {tuple(tensor.shape)}; this model needs "
                                     f"{list(expected[name])}.")
            if not torch.isfinite(tensor).all():
                raise ValueError(f"{name} means contain NaN or inf; recompute them with compute_means().")
        device = self.forced_heads.device
        self.head_means = head_means.detach().float().to(device)
        self.mlp_means = mlp_means.detach().float().to(device)
        self.means_info = dict(info or {})

    # ------------------------------------------------------------------ lifecycle
    def unwrap(self) -> nn.Module:
        """Remove every hook, restore `requires_grad`, and return the original model (bit-identical behavior)."""
        for handle in self._handles:
            handle.remove()
        self._handles = []
        if self._saved_requires_grad is not None:
            for name, parameter in self.model.named_parameters():
                parameter.requires_grad_(self._saved_requires_grad.get(name, parameter.requires_grad))
        self._unwrapped = True
        return self.model

    def mask_state_dict(self) -> dict[str, torch.Tensor]:
        """Only what pruning learns or needs: logits, forced units, fixed masks and means (never model weights)."""
        state: dict[str, torch.Tensor] = {}
        for kind, logit in self.mask_logits.logits().items():
            if logit is not None:
                state[f"log_alpha.{kind}"] = logit.detach().float().cpu().contiguous()
        state["forced.heads"] = self.forced_heads.cpu().contiguous()
        state["forced.mlps"] = self.forced_mlps.cpu().contiguous()
        for kind, fixed in (("heads", self.fixed_heads), ("mlps", self.fixed_mlps)):
            if fixed is not None:
                state[f"fixed.{kind}"] = fixed.cpu().contiguous()
        if self.has_means:
            state["means.heads"] = self.head_means.cpu().contiguous()
            state["means.mlps"] = self.mlp_means.cpu().contiguous()
        return state

    def load_mask_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Inverse of `mask_state_dict`, with shape and NaN checks; everything is checked before anything changes."""
        self._check_mask_state(state)
        for kind in UNIT_KINDS:
            logit = self.mask_logits.logits()[kind]
            key = f"log_alpha.{kind}"
            if logit is not None and key in state:
                value = state[key]
                if tuple(value.shape) != tuple(logit.shape):
                    raise MaskShapeError(f"{key} has shape {tuple(value.shape)}; this model needs {list(logit.shape)}.")
                if not torch.isfinite(value).all():
                    raise MaskShapeError(f"{key} contains NaN or inf mask logits; the artifact is unusable "
                                         "(the pruning run diverged). Re-run pruning or load another artifact.")
                with torch.no_grad():
                    logit.copy_(value.to(logit.device))
        for kind in UNIT_KINDS:
            if f"forced.{kind}" in state:
                forced = self.forced_heads if kind == "heads" else self.forced_mlps
                forced.copy_(self._validated_forced(kind, state[f"forced.{kind}"]))
        self.clear_masks()
        self.set_masks(heads=state.get("fixed.heads"), mlps=state.get("fixed.mlps"))
        if "means.heads" in state and "means.mlps" in state:
            self.set_means(state["means.heads"], state["means.mlps"], self.means_info)
        self._eval_cache = None

    def _check_mask_state(self, state: dict[str, torch.Tensor]) -> None:
        arch = self.architecture
        expected = {f"log_alpha.{k}": tuple(v.shape) for k, v in self.mask_logits.logits().items() if v is not None}
        expected.update({"forced.heads": (arch.num_layers, arch.num_heads), "forced.mlps": (arch.num_layers,),
                         "fixed.heads": (arch.num_layers, arch.num_heads), "fixed.mlps": (arch.num_layers,),
                         "means.heads": (arch.num_layers, arch.num_heads, arch.head_dim),
                         "means.mlps": (arch.num_layers, arch.hidden_size)})
        for key, shape in expected.items():
            if key in state:
                if tuple(state[key].shape) != shape:
                    raise MaskShapeError(f"{key} has shape {tuple(state[key].shape)}; this model needs {list(shape)}.")
                if not torch.isfinite(state[key]).all():
                    raise MaskShapeError(f"{key} contains NaN or inf values; the artifact is unusable (a diverged "
                                         "pruning run?). Re-run pruning or load another artifact.")

    def _validated_forced(self, kind: str, value: torch.Tensor) -> torch.Tensor:
        expected = self.mask_logits.expected_shape(kind)
        if tuple(value.shape) != expected:
            raise MaskShapeError(f"forced.{kind} has shape {tuple(value.shape)}; this model needs {list(expected)}.")
        return value.float()

    # ------------------------------------------------------------------ artifacts (see artifacts.py)
    def save_pretrained(self, save_directory: str | os.PathLike, **kwargs: Any):
        from .artifacts import save_artifact
        return save_artifact(self, save_directory, **kwargs)

    def load_masks(self, dir_or_repo_id: str | os.PathLike, **hub_kwargs: Any) -> "PrunableModel":
        from .artifacts import load_artifact_into
        load_artifact_into(self, dir_or_repo_id, **hub_kwargs)
        return self

    def push_to_hub(self, repo_id: str, **kwargs: Any):
        from .artifacts import push_artifact_to_hub
        return push_artifact_to_hub(self, repo_id, **kwargs)

    @classmethod
    def from_pretrained(cls, name_or_path: str | os.PathLike, pruning_config: PruningConfig | None = None,
                        masks: str | os.PathLike | None = None, model_class: Any = None,
                        **hf_kwargs: Any) -> "PrunableModel":
        """Load a Transformers model (Hub id or path) and wrap it; optionally load a mask artifact.

        `name_or_path` may also be a mask artifact: the base model it names is loaded and the masks applied.
        `model_class` defaults to the class in the checkpoint's `config.architectures`, else `AutoModel`.
        """
        from .artifacts import load_base_model, resolve_artifact_dir
        artifact_dir = resolve_artifact_dir(name_or_path, must_exist=False, **_hub_kwargs(hf_kwargs))
        if artifact_dir is not None and masks is None:
            saved = PruningConfig.from_pretrained(artifact_dir)
            if not saved.base_model_name_or_path:
                raise PruningError(f"The mask artifact at {name_or_path} does not name its base model; load the model "
                                   "yourself and call PrunableModel(model).load_masks(...).")
            masks, name_or_path = artifact_dir, saved.base_model_name_or_path
            if model_class is None and saved.base_model_class:
                import transformers
                model_class = getattr(transformers, saved.base_model_class, None)
            pruning_config = pruning_config or PruningConfig.from_dict(
                {**saved.to_dict(), "num_layers": None, "head_dim": None, "hidden_size": None})
        model = load_base_model(name_or_path, model_class, **hf_kwargs)
        wrapped = cls(model, pruning_config)
        if masks is not None:
            wrapped.load_masks(masks, **_hub_kwargs(hf_kwargs))
        return wrapped


def _hub_kwargs(hf_kwargs: dict[str, Any]) -> dict[str, Any]:
    return {k: hf_kwargs[k] for k in ("revision", "token", "cache_dir") if k in hf_kwargs}
