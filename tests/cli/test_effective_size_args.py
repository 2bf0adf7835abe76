"""Flags of `hf-heuristic-core effective-size` that need no run: seeds, early stopping, and their errors."""

from __future__ import annotations

import pytest
from transformers import HfArgumentParser

from hf_heuristic_core import EffectiveSizeError
from hf_heuristic_core.cli.effective_size import EffectiveSizeArguments, _ints


def parse(*flags: str) -> EffectiveSizeArguments:
    (arguments,) = HfArgumentParser(EffectiveSizeArguments).parse_args_into_dataclasses(
        args=["--output_dir", "run", *flags])
    return arguments


def test_seeds_and_early_stopping_flags():
    defaults = parse()
    assert defaults.seeds == "0" and defaults.early_stopping is True
    arguments = parse("--seeds", "0,1,2", "--no_early_stopping")
    assert _ints(arguments.seeds, "--seeds") == [0, 1, 2] and arguments.early_stopping is False


def test_bad_seeds_name_the_flag():
    with pytest.raises(EffectiveSizeError, match="--seeds must be comma-separated integers, e.g. 0,1,2; got '0,x'"):
        _ints("0,x", "--seeds")
