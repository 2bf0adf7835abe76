"""Subtask Induction (Zhang, Lepori & Pavlick): transplant a subtask's subnetwork into a fresh model, frozen.

`transfer_subnetwork(source, masks, seed)` builds the model; `build_arm(source, masks, arm, seed)` builds it or one of
its controls (random subnetwork of equal per-tensor / per-layer size, drawn from all entries or from the
complement; inverse; full transfer; scratch). Saved models are normal checkpoints with the provenance in their card;
`load_transplanted` reloads one frozen again, `merge_transplant` turns a transplanted model into a plain one.
"""

from .controls import ARMS, build_arm, inverse_masks, random_like_counts
from .freezing import Transplant, frozen_gates, is_transplanted, merge_transplant
from .gates import parameter_gates
from .provenance import load_transplanted
from .transfer import fresh_model, transfer_subnetwork

__all__ = ["ARMS", "Transplant", "build_arm", "fresh_model", "frozen_gates", "inverse_masks", "is_transplanted",
           "load_transplanted", "merge_transplant", "parameter_gates", "random_like_counts", "transfer_subnetwork"]
