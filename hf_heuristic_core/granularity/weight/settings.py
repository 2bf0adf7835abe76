"""Weight-granularity settings (torch-free): which Linear / Conv1D entries get masks (PEFT-style selection), and
how their logits are stored."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from ..settings import GranularitySettings

__all__ = ["LOGITS_DTYPES", "WeightSettings", "parse_layers", "parse_module_names"]

LOGITS_DTYPES = ("float32", "bfloat16")


def parse_module_names(text: str) -> list[str] | None:
    """'query, value' -> ['query', 'value'] (the command line's comma-separated form); None when empty."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    return names or None


def parse_layers(text: str) -> list[int] | None:
    """'0,2-4' -> [0, 2, 3, 4]; None when empty. A part that is neither an index nor a range is a ValueError."""
    layers: list[int] = []
    for part in text.split(","):
        part = part.strip()
        try:
            if "-" in part:
                start, end = (int(x) for x in part.split("-", 1))
                layers.extend(range(start, end + 1))
            elif part:
                layers.append(int(part))
        except ValueError as err:
            raise ValueError(f"--layers_to_transform: {part!r} is not a layer index or a range like 2-5.") from err
    return layers or None


@dataclass(kw_only=True)
class WeightSettings(GranularitySettings):
    """PEFT-style selection of the weights to mask, and the storage dtype of their logits.

    `cli_type` / `cli_parse` in a field's metadata: the command line takes the value as text (comma-separated) and
    `cli_parse` turns it into the field's value.
    """

    # Masking a weight is zero ablation of it (Lepori, Csordás); weights have no per-layer unit count.
    default_ablation: ClassVar[str] = "zero"
    supports_uniform_layers: ClassVar[bool] = False
    slim_refusal: ClassVar[str | None] = "single weights zeroed inside their matrices"

    target_modules: list[str] | str | None = field(default=None, metadata={
        "help": "Weight granularity: comma-separated module names (PEFT-style, e.g. query,value,output.dense) "
                "(default: every Linear / Conv1D).",
        "cli_type": str | None, "cli_parse": parse_module_names})
    layers_to_transform: list[int] | None = field(default=None, metadata={
        "help": "Weight granularity: layer indices, comma-separated or ranges, e.g. 2-3 or 0,5.",
        "cli_type": str | None, "cli_parse": parse_layers})
    mask_bias: bool = field(default=False, metadata={"help": "Weight granularity: mask biases too."})
    # "bfloat16" halves logits + gradients + Adam state (16 -> 8 bytes per masked weight) at the price of bf16
    # spacing (|s| * 2^-8): Adam steps below half of it are rounded away.
    logits_dtype: str = field(default="float32", metadata={
        "help": "Weight granularity: float32 or bfloat16 mask logits (bf16: 8 instead of 16 bytes per masked weight "
                "while training; lossless with continuous_sparsification, lossy with gumbel_sigmoid)."})

    def __post_init__(self) -> None:
        if isinstance(self.layers_to_transform, int):
            self.layers_to_transform = [self.layers_to_transform]

    @property
    def logits_storage_dtype(self) -> str:
        return self.logits_dtype

    def validate(self) -> None:
        if self.logits_dtype not in LOGITS_DTYPES:
            raise ValueError(f"PruningConfig: logits_dtype={self.logits_dtype!r} is not one of "
                             f"{list(LOGITS_DTYPES)}.")
