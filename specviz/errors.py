"""User-facing errors: one clear sentence each, no traceback needed to act on them.

Every error a user can cause (bad input, missing weights, a corrupt download) is a
`SpecvizError`; the CLI prints its message on one line of stderr, the app turns it into
`gr.Error`, notebooks show it as the exception message. A number read from an environment
variable is read by `env_number`, so a malformed one is such an error too.
"""

import math
import os
import sys
from typing import Callable, Optional


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


def env_number(name: str, default, kind=int, low=None, high=None):
    """The number in environment variable `name` (`kind`: int or float), `default` when it is unset
    or empty; anything else, or a number outside [low, high], is a SpecvizError naming the variable."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value: Optional[float] = kind(text)
    except ValueError:
        value = None
    fits = (value is not None and math.isfinite(value) and (low is None or value >= low)
            and (high is None or value <= high))
    if not fits:
        raise SpecvizError(f"${name} must be {_number_words(kind, low, high)}, got {text!r}.")
    return value


def _number_words(kind, low, high) -> str:
    words = "a whole number" if kind is int else "a number"
    if low is not None and high is not None:
        return f"{words} from {low} to {high}"
    if low is not None:
        return f"{words} of at least {low}"
    return f"{words} of at most {high}" if high is not None else words


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
