"""`PrunableModel`: learned masks injected into any Transformers model (or `nn.Module`) through hooks.

It is an orchestrator. The granularity (`PruningConfig.granularity`, default `unit`: heads and MLP blocks) says which
kinds of masks the model has and hooks them in; the relaxation (default `hard_concrete`) turns logits into mask values;
the ablation mode says what replaces a masked value. `PrunableModel` holds the per-kind state (logits, fixed and forced
masks, means), draws the masks once per pass (`mask_passes`: a forward, a `generate()` call, whatever module the
forward enters through; gradient-checkpoint recomputation replays the pass's masks), and saves and loads it. Nothing in
the wrapped model changes, and `unwrap()` removes every hook.
"""

from __future__ import annotations

import contextlib
import logging
import os
from typing import Any, Iterator, Mapping

import torch
from torch import nn

from .ablation.compute import compute_model_means
from .ablation.modes import ABLATIONS
from .architectures.resolve import transformers_model
from .checkpointing import MaskReplayCheckpointing
from .config import PruningConfig
from .errors import MaskPassError, MissingMeansError, PruningError
from .granularity.base import Granularity, MaskKind
from .mask_passes import MaskPasses, modules_holding
from .mask_state import MaskState
from .model_setup import build_granularity, check_ablation, load_to_wrap, model_device
from .relaxations import get_relaxation
from .relaxations.binarize import check_sparsity
from .artifacts import load_artifact_into, push_artifact_to_hub, read_artifact, save_artifact, upgrade_mask_state
from .export.slim import export_slim

logger = logging.getLogger(__name__)


class PrunableModel(MaskReplayCheckpointing, MaskPasses, nn.Module):
    """Wraps a loaded model; forwards every kwarg to it and masks its units on the way.

    In training mode masks are sampled from the relaxation; in eval mode they are deterministic: the fixed masks if
    `set_masks` was called, otherwise the learned ones (binarized, see `PruningConfig.eval_mask`).

    Masks are drawn once per pass: once per `forward` call, once per `generate()` call (the encoder run and every
    cached step share the draw), once per direct call of the wrapped model, its body or one of its stacks, and once
    per `with shared_masks():` block; gradient-checkpoint recomputation replays the masks of the pass it recomputes.
    See `hf_heuristic_core.mask_passes`.
    """

    def __init__(self, model: nn.Module, config: PruningConfig | None = None) -> None:
        super().__init__()
        config = PruningConfig.from_dict(config.to_dict()) if config is not None else PruningConfig()
        self.model = model
        self.granularity: Granularity = build_granularity(model, config)
        self.relaxation = get_relaxation(config.relaxation).from_config(config)
        self.kinds: dict[str, MaskKind] = self.granularity.kinds()
        hf_model = transformers_model(model)
        hf_config = getattr(hf_model, "config", None)
        for key, value in self.granularity.describe().items():
            setattr(config, key, value)
        config.mask_shapes = {name: list(kind.shape) for name, kind in self.kinds.items()}
        config.base_model_name_or_path = config.base_model_name_or_path or getattr(hf_config, "_name_or_path", None) \
            or None
        config.base_model_revision = config.base_model_revision or getattr(hf_config, "_commit_hash", None)
        config.base_model_class = type(hf_model).__name__
        self.pruning_config = config
        enabled = [name for name, kind in self.kinds.items() if self.granularity.enabled(kind)]
        owner = config.model_type or type(hf_model).__name__
        self.mask_state = MaskState(self.kinds, enabled, self.relaxation, owner, config.granularity)
        if config.granularity_settings.logits_storage_dtype == "bfloat16":   # storage only: the relaxations compute
            self.mask_state.logits.to(torch.bfloat16)                        # in fp32 (MaskState upcasts)
        device = model_device(model)
        if device is not None:   # a model already on a GPU gets its mask state there (no host copy per draw)
            self.mask_state.to(device)
        self.means_info: dict[str, Any] = {}
        self.generator: torch.Generator | None = None
        self._masks_enabled = True
        self._eval_cache: tuple[Any, dict[str, torch.Tensor]] | None = None
        self._saved_requires_grad: dict[str, bool] | None = None
        self._unwrapped = False
        self.train_dropout = True
        if config.freeze_base_model:
            self._saved_requires_grad = {n: p.requires_grad for n, p in model.named_parameters()}
            for parameter in model.parameters():
                parameter.requires_grad_(False)
        self._handles = self.granularity.attach(self)
        # Masks are drawn on entry to whatever module a forward starts at (see mask_passes), not on one chosen
        # module: OPT's causal LM skips its body, generate() runs an encoder alone, PEFT prefix tuning calls the body.
        self._handles += self._init_passes(model, modules_holding(model, self._handles))
        self._checkpointable = [m for m in model.modules() if hasattr(m, "gradient_checkpointing")]
        if any(getattr(m, "gradient_checkpointing", False) is True for m in model.modules()):
            # Already enabled on the wrapped model: re-enable so recomputation replays each pass's masks.
            self.activation_checkpointing_enable()
        # Start in the wrapped model's mode (from_pretrained gives eval): a training-mode wrapper around an eval model
        # would sample masks with dropout off, and the first mode switch back (compute_means restores the mode it
        # found) would silently turn dropout on.
        self.train(model.training)

    # ------------------------------------------------------------------ basic properties
    @property
    def architecture(self):
        if self.granularity.architecture is None:
            raise PruningError(f"The {self.pruning_config.granularity!r} granularity hooks no per-layer architecture; "
                               "use mask_shapes() for the shapes of its masks.")
        return self.granularity.architecture

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
    def mask_logits(self):
        """The learned logits by kind (`mask_logits["heads"]`), only for pruned kinds: fp32 `Parameter`s (bf16 with
        `WeightSettings(logits_dtype="bfloat16")`)."""
        return self.mask_state.logits

    @property
    def has_means(self) -> bool:
        needed = self.mask_state.needs_means()
        return bool(needed) and all(self.mask_state.means.get(name) is not None for name in needed)

    def enabled_kinds(self) -> list[str]:
        return self.mask_state.enabled_kinds()

    def mask_shapes(self) -> dict[str, tuple[int, ...]]:
        """The shape of every mask kind of this model, e.g. `{"heads": (L, H), "mlps": (L,)}`."""
        return {name: kind.shape for name, kind in self.kinds.items()}

    def train(self, mode: bool = True) -> "PrunableModel":
        """Training mode samples masks. With `train_dropout = False` (what PruningTrainer sets unless keep_dropout)
        the wrapped model runs without dropout, while gradient-checkpointed layers stay in training mode so that
        they still recompute in backward."""
        super().train(mode)
        if mode and not self.train_dropout:
            self.model.eval()
            self._checkpointed_layers_train()
        return self

    def _checkpointed_layers_train(self) -> None:
        """Put the gradient-checkpointed layers (alone, not their dropout) in training mode: transformers only
        checkpoints a layer that is training."""
        for module in self.model.modules():
            if getattr(module, "gradient_checkpointing", False) is True:
                module.training = True

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """The wrapped model's forward, in one pass: one draw of the masks for the whole call."""
        self._check_usable()
        return self._run_in_pass(self.model, args, kwargs)

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        """The wrapped model's `generate()` with one draw of the masks for the whole call: the encoder of an
        encoder-decoder model and every cached decoding step run under the same masks."""
        self._check_usable()
        with self.shared_masks():
            return self.model.generate(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            model = self._modules.get("model")
            if model is None or name.startswith("_"):
                raise
            return getattr(model, name)

    # ------------------------------------------------------------------ drawing masks (the MaskSource protocol)
    def _check_usable(self) -> None:
        if self._unwrapped:
            raise PruningError("This PrunableModel was unwrapped; its hooks are gone. Wrap the model again.")

    def _pass_ablation(self):
        return ABLATIONS[self.pruning_config.ablation]

    def _draw_pass_masks(self) -> dict[str, torch.Tensor | None]:
        """The masks of a new pass (see `mask_passes`), after the checks that must hold before any layer runs."""
        if self._pass_ablation().needs_means and not self.has_means:
            raise MissingMeansError(
                "Mean ablation needs mean activations, and none were computed. Call "
                "prunable_model.compute_means(train_data) first (or load an artifact that has them), or choose "
                "PruningConfig(ablation='zero' | 'resample'), or run the full model under .masks_disabled().")
        if self.training and torch.is_grad_enabled():
            self._ensure_mask_replay(self._checkpointable)
        return self.current_masks()

    def _unscoped_masks(self) -> dict[str, torch.Tensor | None]:
        """Masks for a masked module that runs outside every pass: the deterministic ones, or an error where they
        would be sampled (no pass says which sample the call belongs to)."""
        sampled = [kind for kind in self.enabled_kinds() if self.mask_state.fixed.get(kind) is None]
        if self.training and sampled:
            raise MaskPassError(
                f"A masked module ran outside any forward pass of the model while its masks are sampled (training "
                f"mode; kinds {sampled[:3]}), so no pass says which mask sample it belongs to. Call the model (or its "
                "body or a stack) rather than a single layer, or put the calls inside `with prunable.shared_masks():`"
                ", or use eval mode / fixed masks (set_masks). In backward, this means gradient checkpointing that "
                "bypasses the masks' replay: enable it with prunable.gradient_checkpointing_enable().")
        if self._pass_ablation().needs_means and not self.has_means:
            raise MissingMeansError("Mean ablation needs mean activations; call compute_means(train_data) first.")
        return self.current_masks()

    def current_masks(self) -> dict[str, torch.Tensor | None]:
        """The masks a forward pass uses now: fixed, sampled (training) or deterministic (eval)."""
        return self.mask_state.draw(self.training, self.generator, self._eval_masks)

    @property
    def mask_logits_device(self) -> torch.device:
        return next(self.mask_logits.parameters()).device

    def _eval_masks(self) -> dict[str, torch.Tensor]:
        """Deterministic masks, cached until a logit changes (avoids a sort and a sync per eval forward)."""
        config = self.pruning_config
        settings = (config.eval_mask, config.binarization, config.binarization_scope, config.threshold,
                    config.uniform_layers)
        state = [t.detach() for _, t in self.mask_logits.items()] + [t for _, t in self.mask_state.forced.items()]
        cached = self._eval_cache
        # Compare values, not versions: edits through `.data` do not bump a tensor's version counter.
        if (cached is None or cached[0][0] != settings or len(cached[0][1]) != len(state)
                or not all(torch.equal(a, b) for a, b in zip(cached[0][1], state))):
            masks = self.get_masks(binary=config.eval_mask == "binary", ignore_fixed=True)
            # get_masks answers on the CPU; cache them where the logits live, or every eval forward on a GPU would
            # copy each mask to it again.
            masks = {kind: mask.to(self.mask_logits_device) for kind, mask in masks.items()}
            self._eval_cache = ((settings, [t.clone() for t in state]), masks)
        return self._eval_cache[1]

    def sampled_sparsity(self) -> torch.Tensor | None:
        """1 - sum(z) / N for the masks of the latest pass (differentiable when they were sampled)."""
        current = self._last_masks
        kept = [current[k].sum() for k in self.enabled_kinds() if current.get(k) is not None]
        if len(kept) != len(self.enabled_kinds()):
            return None
        return 1 - torch.stack(kept).sum() / self.num_units()

    def expected_sparsity(self) -> torch.Tensor:
        """1 - E[L0] / N over enabled kinds; differentiable (CoFi's penalty)."""
        return self.mask_state.expected_sparsity()

    def num_units(self) -> int:
        return self.mask_state.num_units()

    def forget_eval_masks(self) -> None:
        """Drop the cached deterministic masks, for code that changed logits or fixed masks behind the model's back
        (attribution, warm starts); the next eval forward computes them again."""
        self._eval_cache = None

    # ------------------------------------------------------------------ switches
    @property
    def masks_enabled(self) -> bool:
        """False inside `masks_disabled()`: a forward now runs the full model."""
        return self._masks_enabled

    @property
    def requires_grad_before_wrapping(self) -> dict[str, bool]:
        """Each base parameter's `requires_grad` before `freeze_base_model` froze it (empty when nothing was frozen):
        what `unwrap` restores and a slim export gives its copy."""
        return dict(self._saved_requires_grad or {})

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
        check_ablation(self.granularity, config.ablation)
        self.pruning_config.ablation = config.ablation

    @contextlib.contextmanager
    def using_ablation(self, mode: str) -> Iterator["PrunableModel"]:
        previous = self.pruning_config.ablation
        self.set_ablation(mode)
        try:
            yield self
        finally:
            self.pruning_config.ablation = previous

    # ------------------------------------------------------------------ fixed and forced masks
    def validate_masks(self, masks: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        """Check masks given by kind (shape, finite, within [0, 1]) and return them as fp32 tensors; kinds given as
        None are left out. The check `set_masks` applies, for callers that only want to know."""
        return self.mask_state.validate(masks)

    def set_masks(self, masks: Mapping[str, Any] | None = None, **kinds: Any) -> None:
        """Fix masks by kind (`set_masks(heads=[L, H], mlps=[L])` or `set_masks({"heads": ...})`; 1 keeps a unit).
        A kind left out (or None) keeps whatever it had (learned masks, or an earlier fixed mask)."""
        self.mask_state.set_fixed(self.validate_masks({**(masks or {}), **kinds}))

    def clear_masks(self) -> None:
        """Drop fixed masks; the learned ones apply again."""
        self.mask_state.clear_fixed()

    @contextlib.contextmanager
    def masks_applied(self, masks: Any) -> Iterator["PrunableModel"]:
        """Run the block with `masks` fixed (a dict by kind, an artifact folder / Hub id, or None = as they are);
        the previous fixed masks come back afterwards."""
        if masks is None:
            yield self
            return
        if isinstance(masks, (str, os.PathLike)):
            masks = read_artifact(masks).masks
        validated = self.validate_masks(masks)
        previous = self.mask_state.fixed.as_dict()
        self.mask_state.set_fixed(validated)
        try:
            yield self
        finally:
            self.mask_state.set_fixed(previous)
            self._eval_cache = None

    def update_relaxation(self, **settings: Any) -> None:
        """Change relaxation constants (e.g. `init_mean`) of this model's config; the next `reset_masks` uses them."""
        config = self.pruning_config.with_settings(**settings)
        self.pruning_config.relaxation_settings = config.relaxation_settings
        self.relaxation = get_relaxation(config.relaxation).from_config(self.pruning_config)
        self.mask_state.relaxation = self.relaxation
        self._eval_cache = None

    def reset_masks(self, seed: int) -> None:
        """Start a new pruning run on the same wrapped model: fresh logits from the relaxation's initialization
        (seeded, so a run is reproducible from its seed alone) and no fixed masks; forced units stay pinned.
        Repeated runs (seeds, sparsity levels) then start alike without reloading the model."""
        self.mask_state.reset(seed)
        self._eval_cache = None

    def force_units(self, heads: Any = None, mlps: Any = None, keep: bool = True, **kinds: Any) -> None:
        """Pin units in (`keep=True`) or out, as the paper's `log_alpha = +/-10`; they stay pinned while training.

        Per kind, a list of index tuples (`heads=[(2, 5)]`, `mlps=[3]`) or a 0/1 selection of the kind's shape.
        """
        for kind, selection in {"heads": heads, "mlps": mlps, **kinds}.items():
            if selection is not None:
                self.mask_state.force(kind, selection, keep)
        self._eval_cache = None

    def apply_forced(self) -> None:
        """Re-pin forced units after an optimizer step moved their logits."""
        self.mask_state.apply_forced()

    # ------------------------------------------------------------------ binarization
    def get_masks(self, binary: bool = True, sparsity: float | None = None,
                  ignore_fixed: bool = False) -> dict[str, torch.Tensor]:
        """One mask per kind (`{"heads": [num_layers, num_heads], "mlps": [num_layers]}`), on the CPU, detached.

        Fixed masks win unless `sparsity` is given. Otherwise, from the learned logits: `binary=False` gives the
        relaxation's noise-free value; `binary=True` applies `PruningConfig.binarization`: exact top-k on the logits
        at `sparsity` (default: the expected sparsity, rounded to whole units), globally or per layer, or the
        relaxation's own threshold rule (the paper's deterministic-then-threshold rule for hard concrete). With
        `PruningConfig.uniform_layers` the binary masks then keep the same count in every layer
        (`relaxations.uniform`). Kinds that are not pruned are all ones.
        """
        if sparsity is not None:
            check_sparsity(sparsity)
        config = self.pruning_config
        return self.mask_state.masks(binary, sparsity, ignore_fixed, config.binarization, config.binarization_scope,
                                     config.threshold, config.uniform_layers)

    def sparsity(self, weighted: bool = False, masks: dict[str, torch.Tensor] | None = None) -> float:
        """Realized sparsity of the eval-time mask: the fraction of enabled units pruned (every unit counted once),
        or with `weighted=True` the fraction of their parameters."""
        report = self.sparsity_report(masks)
        return report["sparsity_params"] if weighted else report["sparsity"]

    def sparsity_report(self, masks: dict[str, torch.Tensor] | None = None) -> dict[str, Any]:
        """Units kept and pruned per kind and in all (each unit counted once), and the share of their parameters."""
        return self.mask_state.sparsity_report(masks if masks is not None else self.get_masks(binary=True))

    # ------------------------------------------------------------------ means
    @torch.no_grad()
    def compute_means(self, data: Any, batch_size: int = 32, max_batches: int | None = None,
                      show_progress: bool = True, collate_fn=None, device: torch.device | str | None = None,
                      virtual_tokens: str = "exclude", keep_dropout: bool = False) -> dict[str, Any]:
        """Mean activation of every unit (heads `[num_layers, num_heads, head_dim]`, MLP blocks
        `[num_layers, hidden]`) over the real tokens of `data`, with the full model, accumulated in fp32.

        `data`: a `datasets.Dataset` with `input_ids` (padded here), a `DataLoader`, a dict batch, or any iterable of
        dicts of tensors. Keys the model's forward does not take (labels, text) are dropped.
        `virtual_tokens`: under PEFT prompt tuning, whether the learned virtual tokens' positions count
        (`"include"`) or not (`"exclude"`, the default: means over the data's tokens only). Prefix tuning's virtual
        tokens are keys and values only, so both give the same means. A model whose activations cannot be matched
        to the batch's tokens raises `TokenAlignmentError` (see `ablation.alignment`).
        `keep_dropout`: pass `PruningArguments.keep_dropout`. True runs the model with its dropout active and takes
        the MLP means after the MLP's output dropout, as the paper's code does (in eval mode the numbers are the
        same as without it). Architectures without a dropout module of the MLP's own (Llama family: none; OPT,
        BART: functional; Phi: shared with attention) keep the mean at the MLP output projection.
        """
        self._check_usable()
        shaped, info = compute_model_means(self, data, batch_size=batch_size, max_batches=max_batches,
                                           show_progress=show_progress, collate_fn=collate_fn, device=device,
                                           virtual_tokens=virtual_tokens, keep_dropout=keep_dropout)
        self.set_means(shaped, info={**info, "base_model": self.pruning_config.base_model_name_or_path,
                                     "base_model_revision": self.pruning_config.base_model_revision})
        return dict(self.means_info)

    def set_means(self, means: Mapping[str, torch.Tensor] | torch.Tensor, mlp_means: torch.Tensor | None = None,
                  info: dict[str, Any] | None = None) -> None:
        """Install mean activations by kind (kept in fp32), e.g. `{"heads": [L, H, head_dim], "mlps": [L, hidden]}`;
        `set_means(head_means, mlp_means)` also works."""
        if isinstance(means, torch.Tensor):
            means = {"heads": means, "mlps": mlp_means}
        self.mask_state.set_means(means)
        self.means_info = dict(info or {})

    def get_means(self) -> dict[str, torch.Tensor]:
        """The installed mean activations by kind, the mirror of `set_means`: `{"heads": [L, H, head_dim],
        "mlps": [L, hidden]}` for unit masks (`{"neurons": [L, intermediate]}`, the per-stack kinds of an
        encoder-decoder model, ...), fp32 copies on the masks' device; kinds without means are left out, so
        `set_means(get_means())` changes nothing."""
        return {kind: tensor.detach().clone() for kind, tensor in self.mask_state.means.items() if tensor is not None}

    # ------------------------------------------------------------------ lifecycle and state
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
        return self.mask_state.to_tensors()

    def load_mask_state_dict(self, state: Mapping[str, torch.Tensor]) -> None:
        """Inverse of `mask_state_dict` (format-1 keys too); everything is checked before anything changes."""
        self.mask_state.load_tensors(upgrade_mask_state(state))
        self._eval_cache = None

    def save_pretrained(self, save_directory: str | os.PathLike, **kwargs: Any):
        return save_artifact(self, save_directory, **kwargs)

    def load_masks(self, dir_or_repo_id: str | os.PathLike, **hub_kwargs: Any) -> "PrunableModel":
        load_artifact_into(self, dir_or_repo_id, **hub_kwargs)
        return self

    def push_to_hub(self, repo_id: str, **kwargs: Any):
        return push_artifact_to_hub(self, repo_id, **kwargs)

    def export_slim(self, masks: Mapping[str, Any] | None = None, ablation: str | None = None,
                    source: str | None = None, uniform: bool | None = None) -> nn.Module:
        """A plain Transformers model of the wrapped class with the pruned heads and MLP blocks (unit masks) or MLP
        neurons (neuron masks) physically removed and their means folded into biases (see
        `hf_heuristic_core.export`); this model is left untouched. `uniform` (default
        `PruningConfig.uniform_layers`) insists on a folder that plain `from_pretrained` loads."""
        return export_slim(self, masks=masks, ablation=ablation, source=source, uniform=uniform)

    @classmethod
    def from_pretrained(cls, name_or_path: str | os.PathLike, pruning_config: PruningConfig | None = None,
                        masks: str | os.PathLike | None = None, model_class: Any = None,
                        **hf_kwargs: Any) -> "PrunableModel":
        """Load a Transformers model (Hub id or path) and wrap it; optionally load a mask artifact.

        `name_or_path` may also be a mask artifact: the base model it names is loaded (from the GGUF file it records,
        if any) and the masks applied. `model_class` defaults to the class in the checkpoint's
        `config.architectures`, else `AutoModel`. A model read with `gguf_file=` records the file in its
        `pruning_config` (`base_model_gguf_file`), so its artifact loads again without it, also from a moved or
        copied GGUF folder passed with `masks=` (the recorded file is read when the folder holds it).
        """
        model, pruning_config, masks, load_kwargs = load_to_wrap(name_or_path, pruning_config, masks, model_class,
                                                                 hf_kwargs)
        wrapped = cls(model, pruning_config)
        if masks is not None:
            wrapped.load_masks(masks, **load_kwargs)
        return wrapped
