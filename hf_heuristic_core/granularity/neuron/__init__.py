"""The `neuron` granularity: one mask per MLP intermediate neuron."""

from .granularity import NeuronGranularity

__all__ = ["NeuronGranularity"]
