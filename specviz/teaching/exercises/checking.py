"""The machinery every notebook's checks share: run a student's function on cases, describe the first
wrong answer by the property it breaks, and read a by-hand answer's form before its value.
"""

from __future__ import annotations

import copy
import math
import numbers
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch

import specviz

RIGHT, WRONG, NOT_WRITTEN = "✓", "✗", "not written yet"


# ---------------------------------------------------------------------------------------------
# the machinery: run a student's function on cases, describe the first wrong answer

class Wrong(Exception):
    """What is wrong with an answer, in words (never the expected value)."""


@dataclass
class Case:
    kind: str  # the kind of input, read after "wrong on": "a step where every draft agrees"
    args: tuple
    kwargs: dict = field(default_factory=dict)
    data: dict = field(default_factory=dict)  # what the judge needs (the engine's answer, ...)


def run_cases(name: str, fn, cases: list, judge: Callable, what: str, run: str = "",
         inputs: str = "edge cases and fixed-seed random inputs") -> Optional[bool]:
    """Call fn on every case (on copies: a function that changes its inputs changes nothing);
    judge(got, case) raises Wrong on a wrong answer. Prints one line."""
    if not callable(fn):
        print(f"{WRONG} {name} should be a function, not {type(fn).__name__}.")
        return False
    for case in cases:
        try:
            got = fn(*copy.deepcopy(case.args), **copy.deepcopy(case.kwargs))
        except NotImplementedError:
            print(f"{NOT_WRITTEN}: {name} (replace its `raise NotImplementedError` with your code, "
                  f"run its cell, then this one).")
            return None
        except Exception as error:  # the student's own bug: say where, keep going
            message = str(error).splitlines()[0][:160] if str(error) else ""
            print(f"{WRONG} {name} raised {type(error).__name__}{f' ({message})' if message else ''} "
                  f"on {case.kind}.")
            return False
        try:
            judge(got, case)
        except Wrong as wrong:
            print(f"{WRONG} {name} is wrong on {case.kind}: {wrong}.")
            return False
    print(f"{RIGHT} {name} agrees with {what} on all {len(cases)} cases ({inputs}{run}).")
    return True


def replayed(cases: list, unit: str) -> str:
    """', and the 12 steps of your run' when some cases come from the notebook's own events."""
    mine = sum("your" in case.kind for case in cases)
    if not mine:
        return ""
    if unit == "run":
        return f", and {mine} of your own run{'' if mine == 1 else 's'}"
    return f", and {mine} {unit}{'' if mine == 1 else 's'} from your own run"


class _Form(Exception):
    """The answer may hold the right value, but not in the form the check reads."""

    def __init__(self, needs: str, given: str):
        super().__init__(f"Check the answer's form: the value may be right, but it should be {needs}, not {given}.")


_ANY = object()  # "no element found", where None is itself an element to report


def _scalar(x) -> Optional[float]:
    """x as a float when it is one real number (int, float, Fraction, a numpy or torch scalar, a
    0-d array or tensor), else None. True/False is not a number here: as an answer it is a slip."""
    if isinstance(x, bool):
        return None
    if isinstance(x, numbers.Real):
        return float(x)
    if getattr(x, "ndim", None) == 0 and hasattr(x, "item"):  # numpy.bool_ and 0-d bool tensors land on bool
        return _scalar(x.item())
    return None


def _items(x) -> Optional[list]:
    """x's entries when it is a sequence in order (list, tuple, range, 1-d array or tensor), else None."""
    if isinstance(x, (list, tuple, range)):
        return list(x)
    if getattr(x, "ndim", None) == 1 and hasattr(x, "tolist"):
        return x.tolist()
    return None


def _what(x, fits: Callable = lambda v: _scalar(v) is not None, noun: str = "numbers") -> str:
    """The form of x in a few words, never its value: what a form message says was received.
    In a list, the first entry that does not fit the form expected is the one described."""
    if x is None:
        return "None"
    if isinstance(x, str):
        try:
            float(x)
            return "a number in quotes (a string)"
        except ValueError:
            return "a string"
    if isinstance(x, bool) or type(x).__name__ in ("bool_", "bool") or _zero_d_bool(x):
        return "True or False"
    if _scalar(x) is not None:
        return "a number"
    if isinstance(x, dict):
        return "a dict"
    if isinstance(x, (set, frozenset)):
        return "a set (a set has no order)"
    if getattr(x, "shape", None) is not None:
        return f"{'a tensor' if isinstance(x, torch.Tensor) else 'an array'} of shape {tuple(x.shape)}"
    if isinstance(x, (list, tuple)):
        name = type(x).__name__
        odd = next((v for v in x if not fits(v)), _ANY)
        if odd is _ANY:
            return f"a {name} of {len(x)} {noun if len(x) != 1 else noun[:-1]}"
        if _items(odd) is not None or isinstance(odd, (set, frozenset, dict)):
            return f"a nested {name}"
        return f"a {name} holding {_what(odd)}"
    return f"a {type(x).__name__}"


def _zero_d_bool(x) -> bool:
    """A numpy or torch boolean scalar (numpy 2 names its type "bool", like Python's)."""
    item = getattr(x, "item", None)
    return getattr(x, "shape", None) == () and callable(item) and isinstance(item(), bool)


def as_number(answer) -> float:
    """One number, or _Form."""
    value = _scalar(answer)
    if value is None:
        raise _Form("one number", _what(answer))
    return value


def as_numbers(answer, n: Optional[int] = None, ordered: bool = True) -> list:
    """A flat list of numbers (n of them when the question gives the length), or _Form. With
    ordered=False (a set of ids asked for as a sorted list) any order, and a set, will do."""
    needs = f"a flat list of {n} numbers" if n else "a flat list of numbers"
    if not ordered and isinstance(answer, (set, frozenset)):
        answer = list(answer)
    items = _items(answer)
    values = None if items is None else [_scalar(v) for v in items]
    if values is None or None in values or (n is not None and len(values) != n):
        raise _Form(needs + (", in order" if ordered else ""), _what(answer))
    return values if ordered else sorted(values)


def as_tokens(answer) -> list:
    """A list of tokens in order, each a string, or _Form. Tokens are compared exactly: a token's
    case and spaces are part of it."""
    items = answer if isinstance(answer, (list, tuple)) else None
    if items is None or not all(isinstance(t, str) for t in items):
        raise _Form("a list of strings, one per token, in order",
                    _what(answer, fits=lambda v: isinstance(v, str), noun="strings"))
    return list(items)


def as_letter(answer, choices: str) -> str:
    """One of the letters `choices`, in any case, with any whitespace around it, or _Form."""
    letter = answer.strip().lower() if isinstance(answer, str) else None
    if letter is None or len(letter) != 1 or letter not in choices:
        given = (_what(answer) if letter is None else "an empty string" if not letter
                 else "a longer string" if len(letter) > 1 else "another letter")
        raise _Form(f"one letter, {', '.join(choices[:-1])} or {choices[-1]}", given)
    return letter


def _near(got, want, tol: float) -> bool:
    """got (read by one of the _as_ functions) equals want, numbers within tol."""
    if isinstance(want, (list, tuple)):
        return len(got) == len(want) and all(_near(g, w, tol) for g, w in zip(got, want))
    if isinstance(want, str):
        return got == want
    return abs(got - want) <= tol  # NaN compares False: wrong, as it should be


def check_answer(answer, expected, tol: float = 0.0, hint: str = "", read: Callable = as_number) -> Optional[bool]:
    """A by-hand answer: the same lines as `specviz.render.notebook.check`. `read` turns the
    answer's form into a value (or raises _Form), so a right value in another form counts and a
    form that cannot be read is named as such, not answered with the hint to work it out again."""
    if answer is None:
        print("Not answered yet: replace None with your answer and run this cell again.")
        return None
    try:
        got = read(answer)
    except _Form as form:
        print(f"{WRONG} {form}")
        return False
    ok = _near(got, expected, tol)
    print(f"{RIGHT} Correct." if ok else f"{WRONG} Not yet. {hint}".rstrip())
    return ok


_TINY_RUNS: dict = {}  # the tiny pair's runs, made once per process


def tiny_runs() -> dict:
    """Runs of the instant tiny pair (random weights), made once: every kind of step there is."""
    if not _TINY_RUNS:
        pair = specviz.load_pair("tiny")
        prompt = "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n"
        made = {
            "a greedy chain run (k = 4)": dict(method="spec", k=4),
            "a sampled chain run (temperature 1)": dict(method="spec", k=4, temperature=1.0, seed=0),
            "an autoregressive run (nothing drafted)": dict(method="ar"),
            "a prompt-lookup run (some steps draft nothing)": dict(method="pld", k=4),
            "a tree run (several candidates per position)": dict(method="tree", tree="2,2", temperature=1.0, seed=1),
            "a run with k = auto (k changes every step)": dict(method="spec", k="auto", auto_rule="heuristic"),
            "a run whose last steps may draft fewer than k": dict(method="spec", k=6, max_new_tokens=9),
        }
        for kind, options in made.items():
            options.setdefault("max_new_tokens", 24)
            _TINY_RUNS[kind] = [e.to_dict() for e in specviz.generate(pair, prompt, **options)]
    return _TINY_RUNS


def close(a, b, rel: float = 1e-9, abs_: float = 1e-12) -> bool:
    return math.isclose(a, b, rel_tol=rel, abs_tol=abs_)


def number_list(values) -> Optional[list]:
    """values as a list of floats, or None when it is not a sequence of numbers."""
    if isinstance(values, (str, bytes, dict)) or not hasattr(values, "__len__"):
        return None
    try:
        out = [float(v) for v in values]
    except (TypeError, ValueError):
        return None
    if any(isinstance(v, bool) for v in values):
        return None
    return out


def same_list(got: list, want: list) -> bool:
    return len(got) == len(want) and all(close(a, b) for a, b in zip(got, want))


def none_expected(got, want, when_none: str, when_real: str) -> bool:
    """True when the right answer is None and `got` is None too (nothing more to judge); a Wrong
    saying `when_none` when only the right answer is None, `when_real` when only `got` is."""
    if want is None:
        if got is not None:
            raise Wrong(when_none)
        return True
    if got is None:
        raise Wrong(when_real)
    return False
