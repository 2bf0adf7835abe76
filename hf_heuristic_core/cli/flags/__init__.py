"""The flags of the `hf-heuristic-core` subcommands, one torch-free module per command (`flags/<command>.py`).

Each holds what `--help` needs: the flag dataclasses with their help and choices, and the command's DESCRIPTION.
`cli/__init__.py`'s `SUBCOMMANDS` reads help from here; the run lives in `cli/<command>.py`, which imports what it
needs at module top. Nothing here may import torch, transformers or datasets (tests/cli/test_cli_layout.py), so
`--help` answers in well under a second.
"""
