"""Continuous sparsification's beta after some epochs (Lepori: x beta_max^(1/E) at every epoch end), torch-free.

Its own module because both the relaxation and the `TrainerCallback` schedule use it, and the relaxation imports the
schedule (on first use): with the function in `relaxation.py` the two modules imported each other.
"""

from __future__ import annotations

__all__ = ["beta_after_epochs"]


def beta_after_epochs(epochs_done: int, total_epochs: int, beta_max: float, beta_start: float = 1.0) -> float:
    """beta after `epochs_done` epoch ends of a schedule of `total_epochs`: beta_start * beta_max ** (done / E)."""
    if total_epochs <= 0:
        return beta_start
    return beta_start * beta_max ** (min(epochs_done, total_epochs) / total_epochs)
