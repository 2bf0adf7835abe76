"""Neuron-granularity settings (torch-free): none of its own yet; the class is the place for them."""

from __future__ import annotations

from dataclasses import dataclass

from ..settings import GranularitySettings

__all__ = ["NeuronSettings"]


@dataclass(kw_only=True)
class NeuronSettings(GranularitySettings):
    """One mask per MLP intermediate neuron; it reads no `PruningConfig` field of its own."""
