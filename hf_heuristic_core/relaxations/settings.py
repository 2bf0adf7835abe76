"""What every relaxation's settings provide: a small torch-free dataclass (the PEFT pattern: one config per method).

`PruningConfig.relaxation_settings` is the chosen relaxation's settings object, saved under the relaxation's name, and
the config asks its class for the defaults that depend on the relaxation (binarization rule, mask samples per batch,
penalty weight). Nothing here imports
torch: building or validating a config, and `--help`, stay fast.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..method_settings import MethodSettings

__all__ = ["RelaxationSettings"]


@dataclass(kw_only=True)
class RelaxationSettings(MethodSettings):
    """Base of a relaxation's settings; a relaxation without constants uses it as is."""

    # The binarization rule its paper uses when PruningConfig(binarization=None): "topk" or "threshold".
    paper_binarization: ClassVar[str] = "topk"
    # Mask samples per batch when PruningConfig(mask_samples=None) (one per batch chunk).
    default_mask_samples: ClassVar[int] = 1
    # The paper's weight of the fixed penalty (sparsity_control="penalty"); None: no paper default.
    default_penalty_weight: ClassVar[float | None] = None
    # Command-line flags generated from these fields (`cli.settings_flags`) default to None: unset, the config's (or
    # the recipe's) value is used; they are listed by `--help-all` unless a field's metadata says `brief`.
    cli_unset_by_default: ClassVar[bool] = True
