"""When masks are drawn: once per *pass*, whatever module a forward enters through.

The hooks that apply masks (attention output projections, MLP output projections, weight parametrizations) sit deep
inside the model, but a forward can start at many modules: the wrapped model, a PEFT wrapper, the transformer body,
an encoder or decoder stack (`generate()` runs the encoder of an encoder-decoder model on its own; `OPTForCausalLM`
calls `model.decoder` directly, skipping the body). So masks are not drawn by a hook on one chosen module; every
*entry module* opens a pass when it is called outside one, and the pass ends when that call returns (or raises).
Entry modules are every module above the layer lists that hold masked units (see `entry_modules`).

When masks are drawn (sampled in training mode, deterministic in eval mode):

* `PrunableModel(...)` / `PrunableModel.forward`: once per call.
* a direct call of an entry module (the wrapped model, its body, a stack, a PEFT wrapper) that is not part of a
  pass already: once per call. Nested calls (the body inside the model) use the pass they are part of, so a module
  called twice in one forward sees the same masks.
* `PrunableModel.generate(...)` and `with prunable.shared_masks():` once for the whole call / block: the encoder run
  and every cached decoding step use one draw. (The wrapped model's own `generate()` called directly draws once per
  step; in eval mode, where generation normally runs, every step gets the same deterministic masks anyway.)
* gradient-checkpoint recomputation: never; it replays the masks of the pass it recomputes (`checkpointing`).

A masked module that runs outside every pass (a single layer called by hand) gets the deterministic masks when
those are what a pass would use (eval mode, or every pruned kind fixed by `set_masks`), and otherwise raises
`MaskPassError`: in training mode no pass says which sample it belongs to, and drawing a fresh one there could
silently disagree with the forward it belongs to (e.g. a recomputation that bypassed the replay).
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

import torch
from torch import nn

from .batching import batch_size_of

logger = logging.getLogger(__name__)

__all__ = ["MaskPass", "MaskPasses", "entry_modules", "modules_holding"]

# Containers that hold layers but cannot be called: never an entry.
_NOT_CALLABLE = (nn.ModuleList, nn.ModuleDict, nn.ParameterList, nn.ParameterDict)


@dataclass
class MaskPass:
    """The masks of one pass (None until drawn: a pass opened with masks disabled), what replaces a masked value,
    and the batch size resample ablation splits flattened activations by (read at each outermost entry call)."""

    masks: dict[str, torch.Tensor | None] | None
    ablation: Any
    batch_size: int | None
    # "call" (forward, generate, shared_masks), "entry" (a direct call of an entry module), "replay" (recomputation),
    # "unscoped" (a masked module outside every pass)
    owner: str


def modules_holding(root: nn.Module, handles: Iterable[Any]) -> list[nn.Module]:
    """The modules of `root` that hold the given hook handles (forward hooks, pre-hooks) or parametrizations
    (handles with a `module` attribute): where a granularity applies masks."""
    by_dict: dict[int, nn.Module] = {}
    for module in root.modules():
        for attribute in ("_forward_pre_hooks", "_forward_hooks"):
            by_dict[id(getattr(module, attribute))] = module
    found: dict[int, nn.Module] = {}
    for handle in handles:
        module = getattr(handle, "module", None)
        if not isinstance(module, nn.Module):
            reference = getattr(handle, "hooks_dict_ref", None)
            hooks = reference() if callable(reference) else None
            module = by_dict.get(id(hooks)) if hooks is not None else None
        if isinstance(module, nn.Module):
            found[id(module)] = module
    return list(found.values())


def entry_modules(root: nn.Module, sites: Iterable[nn.Module]) -> list[nn.Module]:
    """Every module through which a forward can reach `sites` from outside a layer: for each site, the modules on
    the path from `root` down to the layer list that holds it (the first numbered path component, `layers.3`),
    or to the site itself when no layer list holds it (an LM head, an embedding). Root first; lists that cannot be
    called are left out."""
    names: dict[int, str] = {}
    for name, module in root.named_modules():
        names.setdefault(id(module), name)
    prefixes: dict[str, None] = {"": None}
    for site in sites:
        name = names.get(id(site))
        if name is None or name == "":
            continue
        parts = name.split(".")
        numbered = next((i for i, part in enumerate(parts) if part.isdigit()), None)
        stop = numbered if numbered is not None else len(parts) - 1
        for end in range(1, stop + 1):
            prefixes.setdefault(".".join(parts[:end]), None)
    entries: dict[int, nn.Module] = {}
    for prefix in prefixes:
        module = root.get_submodule(prefix) if prefix else root
        if not isinstance(module, _NOT_CALLABLE):
            entries.setdefault(id(module), module)
    return list(entries.values())


class MaskPasses:
    """The pass bookkeeping of `PrunableModel` (a mixin; see the module docstring).

    The host provides `_draw_pass_masks()` (the masks of a new pass, after its own checks), `_pass_ablation()`,
    `_unscoped_masks()` (the masks outside any pass, or an error) and the `_masks_enabled` switch.
    """

    def _init_passes(self, root: nn.Module, sites: list[nn.Module]) -> list[Any]:
        """Register the entry hooks; returns their handles (removed by `unwrap()`)."""
        self._pass: MaskPass | None = None
        self._entered: list[int] = []          # ids of the entry modules running now, outermost first
        self._last_masks: dict[str, torch.Tensor | None] = {}
        entries = entry_modules(root, sites)
        self._entries = entries
        ids = {id(module) for module in entries}
        # Which entries run inside which: a nested call must be a descendant of the innermost running entry.
        self._inside = {id(module): {id(m) for m in module.modules() if id(m) in ids and m is not module}
                        for module in entries}
        handles = []
        for module in entries:
            handles.append(module.register_forward_pre_hook(self._on_entry, with_kwargs=True, prepend=True))
            handles.append(module.register_forward_hook(self._on_exit, always_call=True))
        return handles

    def entry_modules(self) -> list[nn.Module]:
        """The modules whose call opens a pass when no pass is open (root first)."""
        return list(self._entries)

    # ------------------------------------------------------------------ entry hooks
    def _on_entry(self, module: nn.Module, args: tuple, kwargs: dict[str, Any]) -> None:
        key = id(module)
        entered = self._entered
        if entered and key not in self._inside[entered[-1]]:
            # Not nested in the running entry: an earlier call was interrupted before its exit hooks ran
            # (KeyboardInterrupt). Its pass is over.
            logger.debug("Discarding a stale mask pass (an interrupted forward).")
            entered.clear()
            if self._pass is not None and self._pass.owner == "entry":
                self._pass = None
        entered.append(key)
        if len(entered) == 1:
            batch_size = batch_size_of(args, kwargs)
            if self._pass is None:
                self._pass = self._new_pass("entry", batch_size)
            elif batch_size is not None:
                self._pass.batch_size = batch_size   # e.g. a decoding step after the encoder, beams expanded
        return None

    def _on_exit(self, module: nn.Module, args: tuple, output: Any) -> None:
        entered = self._entered
        key = id(module)
        if entered and entered[-1] == key:
            entered.pop()
        elif key in entered:
            del entered[entered.index(key):]
        if not entered and self._pass is not None and self._pass.owner == "entry":
            self._pass = None
        return None

    # ------------------------------------------------------------------ passes
    def _new_pass(self, owner: str, batch_size: int | None) -> MaskPass:
        if not self._masks_enabled:
            return MaskPass(None, None, batch_size, owner)
        masks = self._draw_pass_masks()
        self._last_masks = masks
        return MaskPass(masks, self._pass_ablation(), batch_size, owner)

    def _run_in_pass(self, function: Callable[..., Any], args: tuple, kwargs: dict[str, Any]) -> Any:
        """Call `function` inside one pass (the open one, or a new one closed afterwards, whatever happens)."""
        if self._pass is not None and self._pass.owner != "entry":
            return function(*args, **kwargs)
        # A call of the wrapper is outermost by construction: anything still recorded is left from an interrupt.
        self._entered.clear()
        self._pass = None
        self._pass = self._new_pass("call", batch_size_of(args, kwargs))
        try:
            return function(*args, **kwargs)
        finally:
            self._pass = None
            self._entered.clear()

    @contextlib.contextmanager
    def shared_masks(self) -> Iterator[Any]:
        """Every forward inside this block uses one draw of the masks (what `generate()` does): several forwards of
        a training-mode model then see the same sample. Nested blocks share the outer block's draw."""
        if self._pass is not None and self._pass.owner != "entry":
            yield self
            return
        self._entered.clear()
        self._pass = None
        self._pass = self._new_pass("call", None)
        try:
            yield self
        finally:
            self._pass = None
            self._entered.clear()

    def _active_pass(self) -> MaskPass:
        current = self._pass
        if current is None:
            return MaskPass(self._unscoped_masks(), self._pass_ablation(), None, "unscoped")
        if current.masks is None:   # opened with masks disabled, enabled since
            current.masks, current.ablation = self._draw_pass_masks(), self._pass_ablation()
        return current

    def active_mask(self, kind: str) -> torch.Tensor | None:
        """This pass's mask of `kind` (None: masks disabled, or the kind is not pruned)."""
        if not self._masks_enabled:
            return None
        current = self._pass
        if current is None or current.masks is None:
            current = self._active_pass()
        return current.masks.get(kind)

    def ablation_reference(self, kind: str, layer: int, x: torch.Tensor) -> torch.Tensor | None:
        """What replaces a masked value of `kind` in `layer` in this pass (None: zero)."""
        current = self._pass
        if current is None or current.masks is None:
            current = self._active_pass()
        return current.ablation.reference(kind, layer, x, self.mask_state.means, current.batch_size)
