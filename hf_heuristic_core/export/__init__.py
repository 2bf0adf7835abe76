"""Slim export: a found subnetwork as a smaller plain Transformers model (`PrunableModel.export_slim()`), saved,
reloaded (`load_slim`) and pushed like the masks."""

from .io import load_slim, push_slim_to_hub, save_slim
from .latency import round_robin_latency
from .slim import export_slim, parameter_count, slim_info

__all__ = ["export_slim", "load_slim", "parameter_count", "push_slim_to_hub", "round_robin_latency", "save_slim",
           "slim_info"]
