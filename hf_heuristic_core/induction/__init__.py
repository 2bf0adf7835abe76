"""Subtask Induction (Zhang, Lepori & Pavlick): transplant a subtask's subnetwork into a fresh model, frozen.

`transfer_subnetwork(source, masks, seed)` builds the model; `build_arm(source, masks, arm, seed)` builds it or one of
its controls (random subnetwork of equal per-tensor / per-layer size, drawn from all entries or from the
complement; inverse; full transfer; scratch). `carry=` picks the transplant: `"subnetwork"` (default: only the
subnetwork from the source, everything else fresh) or `"source"` (the authors': every tensor the masks do not cover
copied from the source, trainable; only the masked tensors re-initialised outside the subnetwork). Saved models are
normal checkpoints with the provenance in their card; `load_transplanted` reloads one frozen again,
`merge_transplant` turns a transplanted model into a plain one.

The names below are imported on first use (PEP 562), so that `induction.arguments` (the experiment's flags, read by
`induce --help`) imports without torch.
"""

from __future__ import annotations

from .._lazy import lazy_exports

_EXPORTS = {
    "ARMS": "controls", "build_arm": "controls", "inverse_masks": "controls", "random_like_counts": "controls",
    "Transplant": "freezing", "frozen_gates": "freezing", "is_transplanted": "freezing",
    "merge_transplant": "freezing", "parameter_gates": "gates", "load_transplanted": "provenance",
    "fresh_model": "transfer", "transfer_subnetwork": "transfer",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
