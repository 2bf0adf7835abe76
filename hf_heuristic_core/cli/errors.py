"""How the CLI reports a failed command: one line naming the problem (the exception's message says the fix), and
the traceback only with `--debug`."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

from ..errors import PruningError

DEBUG_FLAG = "--debug"
# Errors whose message is written for the user: shown as they are. Anything else is a bug or an environment problem
# and gets its type name and a pointer to --debug.
USER_ERRORS: tuple[type[BaseException], ...] = (PruningError, ValueError, OSError, KeyError)


def one_line(error: BaseException) -> str:
    text = " ".join(str(error).split()) if str(error) else ""
    if isinstance(error, KeyError) and text.startswith("'") and text.endswith("'"):
        text = text[1:-1]
    if not text or not isinstance(error, USER_ERRORS):
        text = f"{type(error).__name__}: {text}" if text else type(error).__name__
    return text


def run_reporting_errors(name: str, command: Callable[[list[str]], int], argv: Sequence[str]) -> int:
    """Run `command(argv)`; on an exception print `hf-heuristic-core NAME: error: ...` and return 2 (re-raise with
    `--debug`, which is removed from argv either way)."""
    argv = list(argv)
    debug = DEBUG_FLAG in argv
    argv = [a for a in argv if a != DEBUG_FLAG]
    try:
        return command(argv)
    except KeyboardInterrupt:
        if debug:
            raise
        print(f"hf-heuristic-core {name}: interrupted.", file=sys.stderr)
        return 130
    except Exception as error:
        if debug:
            raise
        hint = "" if isinstance(error, USER_ERRORS) else " (rerun with --debug for the traceback)"
        print(f"hf-heuristic-core {name}: error: {one_line(error)}{hint}", file=sys.stderr)
        return 2
