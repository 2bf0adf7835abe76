"""Neuron-granularity settings (torch-free): none of its own yet; the class is the place for them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..settings import GranularitySettings

__all__ = ["NeuronSettings"]


@dataclass(kw_only=True)
class NeuronSettings(GranularitySettings):
    """One mask per MLP intermediate neuron; it has no settings of its own."""

    slim_refusal: ClassVar[str | None] = None   # whole MLP neurons: a slim export drops them
