"""`MaskState`: everything a `PrunableModel` knows about its masks, per kind, and nothing about hooks or data.

Per kind: the learned logits (fp32 `Parameter`s, only for kinds that are pruned), fixed masks, forced units (+1 in,
-1 out, 0 free) and mean activations. Kinds are arbitrary strings (`heads`, `cross_heads`, or a parameter name such as
`encoder.layer.0.output.dense.weight` for weight masks), but module attribute names may not contain dots, so each kind
is stored under an escaped name. Keeping them as registered parameters and buffers lets `.to(device)` move them like
any module state.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator, Mapping

import torch
from torch import nn

from .errors import MaskShapeError
from .granularity.base import MaskKind
from .relaxations.base import Relaxation
from .relaxations.binarize import binarize_masks
from .relaxations.uniform import uniform_masks

__all__ = ["DEFAULT_INIT_SEED", "KindTensors", "MaskLogits", "MaskState", "escape_kind"]

DEFAULT_INIT_SEED = 0


def escape_kind(kind: str) -> str:
    return kind.replace(".", "-")


class MaskLogits(nn.Module):
    """One fp32 `Parameter` of logits per enabled kind (`logits["heads"]`, or `logits.heads` for plain names)."""

    def __init__(self, shapes: Mapping[str, tuple[int, ...]], init: Callable[[tuple[int, ...]], torch.Tensor]
                 ) -> None:
        super().__init__()
        self._kinds: dict[str, str] = {}
        for kind, shape in shapes.items():
            name = escape_kind(kind)
            if name in self._kinds.values():
                raise ValueError(f"Mask kinds {kind!r} and another one escape to the same name {name!r}.")
            self._kinds[kind] = name
            self.register_parameter(name, nn.Parameter(init(tuple(shape))))

    def __getitem__(self, kind: str) -> nn.Parameter | None:
        name = self._kinds.get(kind)
        return None if name is None else getattr(self, name)

    def __contains__(self, kind: object) -> bool:
        return kind in self._kinds

    def kinds(self) -> list[str]:
        return list(self._kinds)

    def items(self) -> Iterator[tuple[str, nn.Parameter]]:
        for kind, name in self._kinds.items():
            yield kind, getattr(self, name)


class KindTensors(nn.Module):
    """A non-persistent buffer per kind, possibly None (no fixed mask, no means yet)."""

    def __init__(self, kinds: Iterable[str], initial: Mapping[str, torch.Tensor] | None = None) -> None:
        super().__init__()
        self._kinds = {kind: escape_kind(kind) for kind in kinds}
        for kind, name in self._kinds.items():
            self.register_buffer(name, (initial or {}).get(kind), persistent=False)

    def get(self, kind: str) -> torch.Tensor | None:
        return getattr(self, self._kinds[kind])

    def set(self, kind: str, value: torch.Tensor | None) -> None:
        setattr(self, self._kinds[kind], value)

    def items(self) -> Iterator[tuple[str, torch.Tensor | None]]:
        for kind in self._kinds:
            yield kind, self.get(kind)

    def as_dict(self) -> dict[str, torch.Tensor | None]:
        return dict(self.items())


class MaskState(nn.Module):
    """Logits, fixed masks, forced units and means of every mask kind (see the module docstring)."""

    def __init__(self, kinds: Mapping[str, MaskKind], enabled: Iterable[str], relaxation: Relaxation,
                 owner: str, granularity: str | None = None) -> None:
        super().__init__()
        self.kinds = dict(kinds)
        self.relaxation = relaxation
        self.owner = owner  # names the model in error messages
        self.granularity = granularity  # names the fix when masks of another granularity arrive
        enabled = list(enabled)
        # Seeded, so wrapping a model never depends on the global RNG; a trainer re-seeds fresh logits from its seed.
        generator = torch.Generator().manual_seed(DEFAULT_INIT_SEED)
        self.logits = MaskLogits({name: self.kinds[name].shape for name in enabled},
                                 lambda shape: relaxation.init_logits(shape, generator))
        self.fixed = KindTensors(self.kinds)
        self.forced = KindTensors(self.kinds, {name: torch.zeros(kind.shape) for name, kind in self.kinds.items()})
        self.means = KindTensors(self.kinds)
        self._forced_kinds: set[str] = set()   # kinds with a pinned entry: the others skip with_forced's full pass
        self._fresh = self._fingerprint()

    def _fingerprint(self) -> tuple:
        return tuple((kind, float(logit.detach().double().sum()), float(logit.detach().double().square().sum()))
                     for kind, logit in self.logits.items())

    def is_fresh(self) -> bool:
        """Whether the logits are still the construction-time initialization (nobody set, loaded or trained them):
        a trainer then re-initializes them from its own seed, so the seed alone decides a run."""
        return self._fresh is not None and self._fresh == self._fingerprint()

    def mark_initialized(self) -> None:
        """The logits now hold a deliberate start (a warm start written into them): no longer fresh, so a trainer
        keeps them instead of re-initializing them from its seed."""
        self._fresh = None

    @property
    def device(self) -> torch.device:
        return next(iter(self.forced.buffers())).device

    def enabled_kinds(self) -> list[str]:
        return self.logits.kinds()

    def num_units(self) -> int:
        return sum(self.kinds[k].numel for k in self.enabled_kinds())

    # ------------------------------------------------------------------ drawing
    def with_forced(self, kind: str, z: torch.Tensor) -> torch.Tensor:
        """Forced units are exactly 1 or 0 whatever their logits say (no host sync)."""
        if kind not in self._forced_kinds:
            return z
        forced = self.forced.get(kind).to(z.device)
        return torch.where(forced != 0, (forced > 0).to(z.dtype), z)

    def draw(self, training: bool, generator: torch.Generator | None,
             eval_masks: Callable[[], dict[str, torch.Tensor]]) -> dict[str, torch.Tensor | None]:
        """Masks for one forward pass: fixed, sampled (training) or deterministic (eval); None for unpruned kinds."""
        masks: dict[str, torch.Tensor | None] = {}
        deterministic = None
        for name in self.kinds:
            fixed, logits = self.fixed.get(name), self.logits[name]
            if fixed is not None:
                masks[name] = fixed
            elif logits is None:
                masks[name] = None
            elif training:
                masks[name] = self.with_forced(name, self.relaxation.sample(logits.float(), generator=generator))
            else:
                deterministic = deterministic if deterministic is not None else eval_masks()
                masks[name] = deterministic[name]
        return masks

    def expected_sparsity(self) -> torch.Tensor:
        """1 - E[L0] / N over enabled kinds; differentiable (CoFi's penalty)."""
        kept = [self.with_forced(k, self.relaxation.prob_keep(logits.float())).sum()
                for k, logits in self.logits.items()]
        return 1 - torch.stack(kept).sum() / self.num_units()

    def masks(self, binary: bool, sparsity: float | None, ignore_fixed: bool, rule: str, scope: str,
              threshold: float, uniform: bool = False) -> dict[str, torch.Tensor]:
        """Fixed masks (unless `ignore_fixed` or a `sparsity` is asked for), else the binarized or soft learned ones
        (`uniform`: binary masks re-selected to the same count in every layer, `relaxations.uniform`)."""
        fixed = self.fixed.as_dict()
        if not ignore_fixed and sparsity is None and any(v is not None for v in fixed.values()):
            learned = self.masks(binary, None, True, rule, scope, threshold, uniform) \
                if any(v is None for v in fixed.values()) else {}
            return {k: (fixed[k].detach().cpu().clone() if fixed[k] is not None else learned[k]) for k in self.kinds}
        if binary and sparsity is None and rule == "topk":
            sparsity = min(max(float(self.expected_sparsity().detach()), 0.0), 1.0 - 1e-9)
        masks = binarize_masks(self.kinds, dict(self.logits.items()), self.forced.as_dict(), self.relaxation,
                               binary=binary, sparsity=sparsity, rule=rule, per_layer=scope == "per_layer",
                               threshold=threshold)
        if not (binary and uniform):
            return masks
        learned = {kind: logit for kind, logit in self.logits.items()}
        forced = {kind: self.forced.get(kind).cpu() for kind in learned}
        scores = {kind: torch.where(forced[kind] != 0, forced[kind] * 1e9, logit.detach().float().cpu())
                  for kind, logit in learned.items()}
        return {**masks, **uniform_masks(self.kinds, {kind: masks[kind] for kind in learned}, scores, forced)}

    def sparsity_report(self, masks: Mapping[str, torch.Tensor]) -> dict[str, Any]:
        total_units = pruned_units = 0.0
        total_params = pruned_params = 0.0
        counts: dict[str, Any] = {}
        for kind in self.enabled_kinds():
            mask = masks[kind].float()
            per_unit = self.kinds[kind].params_per_entry
            pruned = float((1 - mask).sum())
            total_units += mask.numel()
            pruned_units += pruned
            total_params += per_unit * mask.numel()
            pruned_params += per_unit * pruned
            counts[f"{kind}_kept"] = int(round(float(mask.sum())))
            counts[f"{kind}_total"] = mask.numel()
        return {"sparsity": pruned_units / total_units, "sparsity_params": pruned_params / total_params,
                "units_kept": int(round(total_units - pruned_units)), "units_total": int(total_units), **counts}

    # ------------------------------------------------------------------ fixed and forced masks
    def validate(self, masks: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        """Masks by kind as fp32 tensors on the state's device, after shape, finiteness and [0, 1] checks."""
        unknown = sorted(set(masks) - set(self.kinds))
        if unknown:
            raise MaskShapeError(f"Unknown mask kind(s) {unknown}; {self._kinds_and_fix()}")
        return {kind: self._validated(kind, value) for kind, value in masks.items() if value is not None}

    def _kinds_and_fix(self) -> str:
        """What an unknown kind's error says after naming it: this model's kinds, and where masks of another
        granularity go."""
        if self.granularity is None:
            return f"this model's kinds are {list(self.kinds)}."
        return (f"this model's kinds are {list(self.kinds)} (it is wrapped with granularity={self.granularity!r}). "
                "Masks of another granularity apply to the model wrapped with that granularity, e.g. "
                "PrunableModel(model, PruningConfig(granularity='unit')) for 'heads' and 'mlps'; a saved artifact's "
                "masks load with the granularity they were saved with: PrunableModel.from_pretrained(artifact_folder).")

    def _validated(self, kind: str, mask: Any) -> torch.Tensor:
        spec = self.kinds[kind]
        tensor = torch.as_tensor(mask, dtype=torch.float32).detach().clone()
        if tuple(tensor.shape) != spec.shape:
            shape_text = f"[{', '.join(spec.dims)}] = " if spec.dims else ""
            raise MaskShapeError(f"{kind} mask has shape {tuple(tensor.shape)}, but this {self.owner} model needs "
                                 f"{shape_text}{list(spec.shape)}.")
        if not torch.isfinite(tensor).all():
            raise MaskShapeError(f"{kind} mask contains NaN or inf values; masks must be 0/1 (or in [0, 1]).")
        if tensor.numel() and (tensor.min() < 0 or tensor.max() > 1):
            raise MaskShapeError(f"{kind} mask values must lie in [0, 1] (1 keeps a unit, 0 ablates it); got values "
                                 f"from {tensor.min().item()} to {tensor.max().item()}.")
        return tensor.to(self.device)

    def set_fixed(self, masks: Mapping[str, torch.Tensor | None]) -> None:
        for kind, tensor in masks.items():
            self.fixed.set(kind, tensor)

    def clear_fixed(self) -> None:
        for kind in self.kinds:
            self.fixed.set(kind, None)

    def force(self, kind: str, selection: Any, keep: bool) -> None:
        """Pin the selected entries of `kind` in or out (and their logits to the relaxation's pinned value)."""
        if kind not in self.kinds:
            raise MaskShapeError(f"Unknown mask kind {kind!r}; {self._kinds_and_fix()}")
        value = 1.0 if keep else -1.0
        self._forced_kinds.add(kind)
        forced = self.forced.get(kind)
        chosen = self._selection(kind, selection).to(forced.device).bool()
        forced[chosen] = value
        fresh = self.is_fresh()
        logit = self.logits[kind]
        if logit is not None:
            with torch.no_grad():
                logit[chosen.to(logit.device)] = self.relaxation.pinned_logit * value
        if fresh:   # pinning units is part of setting up a run, not a start from other logits
            self._fresh = self._fingerprint()

    def _selection(self, kind: str, selection: Any) -> torch.Tensor:
        shape = self.kinds[kind].shape
        if isinstance(selection, torch.Tensor) and tuple(selection.shape) == shape:
            return self._validated(kind, selection)
        chosen = torch.zeros(shape)
        for item in selection:
            index = tuple(item) if isinstance(item, (tuple, list)) else (int(item),)
            if len(index) != len(shape) or any(not 0 <= i < n for i, n in zip(index, shape)):
                raise MaskShapeError(f"{kind} unit {item!r} is out of range for shape {list(shape)}.")
            chosen[index] = 1.0
        return chosen

    def apply_forced(self) -> None:
        """Re-pin forced units after an optimizer step moved their logits."""
        for kind, logit in self.logits.items():
            forced = self.forced.get(kind)
            if bool((forced != 0).any()):
                with torch.no_grad():
                    logit.copy_(torch.where(forced != 0, self.relaxation.pinned_logit * forced.to(logit.device),
                                            logit))

    def reset(self, seed: int) -> None:
        """Fresh logits from the relaxation's initialization, seeded; forced units re-pinned, fixed masks dropped."""
        generator = torch.Generator().manual_seed(int(seed))
        with torch.no_grad():
            for _, logit in self.logits.items():
                logit.copy_(self.relaxation.init_logits(tuple(logit.shape), generator).to(logit.device))
        self.apply_forced()
        self.clear_fixed()
        self._fresh = None

    # ------------------------------------------------------------------ means
    def needs_means(self) -> list[str]:
        return [name for name, kind in self.kinds.items() if kind.means_shape is not None]

    def set_means(self, means: Mapping[str, torch.Tensor | None]) -> None:
        unknown = sorted(set(means) - set(self.kinds))
        if unknown:
            raise MaskShapeError(f"Means given for unknown kind(s) {unknown}; this model's kinds are "
                                 f"{list(self.kinds)}.")
        checked = {}
        for kind, tensor in means.items():
            if tensor is None:
                continue
            expected = self.kinds[kind].means_shape
            if expected is None or tuple(tensor.shape) != expected:
                raise MaskShapeError(f"{kind} means have shape {tuple(tensor.shape)}; this model needs "
                                     f"{list(expected) if expected else 'none (no mean ablation)'}.")
            if not torch.isfinite(tensor).all():
                raise ValueError(f"{kind} means contain NaN or inf; recompute them with compute_means().")
            checked[kind] = tensor.detach().float().to(self.device)
        for kind, tensor in checked.items():
            self.means.set(kind, tensor)

    # ------------------------------------------------------------------ serialization
    def to_tensors(self) -> dict[str, torch.Tensor]:
        """`logits.<kind>`, `forced.<kind>`, `fixed.<kind>` and `means.<kind>`, on the CPU (never model weights)."""
        state = {f"logits.{kind}": logit.detach().float().cpu().contiguous() for kind, logit in self.logits.items()}
        for prefix, tensors in (("forced", self.forced), ("fixed", self.fixed), ("means", self.means)):
            for kind, tensor in tensors.items():
                if tensor is not None:
                    state[f"{prefix}.{kind}"] = tensor.cpu().contiguous()
        return state

    def load_tensors(self, state: Mapping[str, torch.Tensor]) -> None:
        """Inverse of `to_tensors`; everything is checked before anything changes."""
        shapes = {f"logits.{k}": tuple(v.shape) for k, v in self.logits.items()}
        for kind, spec in self.kinds.items():
            shapes.update({f"forced.{kind}": spec.shape, f"fixed.{kind}": spec.shape})
            if spec.means_shape is not None:
                shapes[f"means.{kind}"] = spec.means_shape
        for key, tensor in state.items():
            prefix, _, kind = key.partition(".")
            if prefix not in ("logits", "forced", "fixed", "means"):
                continue
            if kind not in self.kinds:
                raise MaskShapeError(f"{key}: the saved masks have a kind {kind!r} this model does not have (its kinds "
                                     f"are {list(self.kinds)}).")
            if key in shapes and tuple(tensor.shape) != shapes[key]:
                raise MaskShapeError(f"{key} has shape {tuple(tensor.shape)}; this model needs {list(shapes[key])}.")
            if not torch.isfinite(tensor).all():
                raise MaskShapeError(f"{key} contains NaN or inf values; the artifact is unusable (a diverged "
                                     "pruning run?). Re-run pruning or load another artifact.")
        fixed = self.validate({k: state.get(f"fixed.{k}") for k in self.kinds})
        with torch.no_grad():
            for kind, logit in self.logits.items():
                if f"logits.{kind}" in state:
                    logit.copy_(state[f"logits.{kind}"].to(logit.device))
        for kind in self.kinds:
            if f"forced.{kind}" in state:
                self.forced.get(kind).copy_(state[f"forced.{kind}"].float())
                if bool((state[f"forced.{kind}"] != 0).any()):
                    self._forced_kinds.add(kind)
        self.clear_fixed()
        self.set_fixed(fixed)
        self.set_means({k: state[f"means.{k}"] for k in self.kinds if f"means.{k}" in state})
        self._fresh = None
