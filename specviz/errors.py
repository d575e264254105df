"""User-facing errors: one clear sentence each, no traceback needed to act on them.

Every error a user can cause (bad input, missing weights, a corrupt download) is a
`SpecvizError`; the CLI prints its message on one line of stderr, the app turns it into
`gr.Error`, notebooks show it as the exception message.
"""

import sys
from typing import Callable


class SpecvizError(ValueError):
    """A problem the user can fix; the message says how."""


class PairError(SpecvizError):
    """A model pair cannot be loaded (unknown preset, tokenizer mismatch, memory)."""


class WeightsMissingError(PairError):
    """The weights are neither installed locally nor reachable on the hub."""


class ChecksumError(PairError):
    """An assembled or packaged weight file does not match its published sha256."""


class InputError(SpecvizError):
    """A generation argument is outside what the engine accepts."""


class NewerSchemaError(SpecvizError):
    """A trace was written with a newer event schema than this specviz reads (specviz.events)."""


def run_command(body: Callable[[], int], interrupted: str = "interrupted") -> int:
    """A command's body (`python -m specviz ...`, the benchmarks, the recorders): a SpecvizError is
    one line on stderr and status 2; Ctrl-C is one line (`interrupted`: what is kept and how to
    go on) and status 130; no traceback for either. Returns the body's own status otherwise."""
    try:
        return body()
    except SpecvizError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"error: {interrupted}", file=sys.stderr)
        return 130
