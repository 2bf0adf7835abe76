"""The stored convergence verdict read back, for any release: its status word and the one line that cards, summaries
and reports show. Kept apart from `training/convergence.py` (which computes the verdict with torch) so that
`artifacts.py` can write the card row without importing the training package above it.
"""

from __future__ import annotations

from typing import Any, Mapping

__all__ = ["CONVERGED", "INCONCLUSIVE", "NOT_CONVERGED", "STATUS_WORDS", "verdict_line", "verdict_status"]

CONVERGED, NOT_CONVERGED, INCONCLUSIVE = "converged", "not_converged", "inconclusive"
STATUS_WORDS = {CONVERGED: "converged", NOT_CONVERGED: "NOT converged", INCONCLUSIVE: "inconclusive"}


def verdict_status(convergence: Mapping[str, Any] | None) -> str | None:
    """"converged", "not_converged" or "inconclusive" of a stored verdict (None when there is none), for verdicts of
    any release: before the third value, an inconclusive check was stored as `converged: true` with a verdict text
    starting "inconclusive"."""
    if not convergence:
        return None
    status = convergence.get("status")
    if status in STATUS_WORDS:
        return status
    if str(convergence.get("verdict", "")).startswith("inconclusive"):
        return INCONCLUSIVE
    converged = convergence.get("converged")
    return None if converged is None else CONVERGED if converged else NOT_CONVERGED


def verdict_line(convergence: Mapping[str, Any] | None) -> str:
    """One line for summaries and cards: the status word, the reason and the two KLs."""
    status = verdict_status(convergence)
    if status is None:
        return "not checked (convergence_check was off)"
    assert convergence is not None
    reason = str(convergence.get("verdict", ""))
    reason = reason.split(": ", 1)[1] if reason.startswith("inconclusive: ") else reason
    text = STATUS_WORDS[status] + ("" if reason in ("", "converged") else f": {reason}")
    kl, median = convergence.get("kl"), convergence.get("random_kl_median")
    if kl is not None and median is not None and not reason.startswith("nothing was pruned"):
        ratio = convergence.get("kl_ratio")
        text += (f" (KL {kl:.4g} against a median of {median:.4g} for {convergence.get('subnetworks', '?')} random "
                 f"subnetworks of the same size{f', {ratio:.3g}x' if ratio is not None else ''})")
    return text
