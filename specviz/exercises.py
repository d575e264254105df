"""Checks for the teaching notebooks' exercises.

Two kinds of exercise:

* **coded**: the student writes a piece of the engine (the greedy cascade rule, the residual, α
  and τ from the events, a tree's attention mask, a prompt-lookup match, the +2/-1 k rule, the
  waits a reader sees, the acceptance survival curve, the cost per million tokens, the batch size
  where speculation stops paying) and
  `check_<piece>(fn)` runs it on fixed-seed random and edge inputs against the engine's own
  implementation (`specviz.verifiers`, `specviz.sampling.residual`, `specviz.metrics.fold`,
  `DraftTree.mask`, `specviz.drafters.lookup.lookup`, `specviz.adaptive.AdaptiveK`). Several
  also take the events of a run the notebook made, and replay every step of it with the
  student's function.
* **by hand**: a number or a short list; `check_<question>(answer)` compares it with what the
  engine's own code computes, so no notebook cell shows the answer. The form is read before the
  value, and every equivalent form counts: a number may be an int, a float, a numpy or torch
  scalar or a 0-d array or tensor, and is right within the tolerance its check states; a list
  of numbers may be a list, a tuple, a range or a 1-d array or tensor (a sorted list of node ids
  may come in any order, or as a set); a letter may have any case and surrounding whitespace.
  Tokens are compared exactly (case and spaces are part of a token). Nothing is converted
  between numbers and strings: "0.5" for a number, 2 for the token "2", a set or a dict where a
  list in order is needed, a nested list, a list of the wrong length where the question gives
  the length, a list where one number is needed: each gets a line saying only the answer's form
  is off ("✗ Check the answer's form: the value may be right, but it should be a flat list of 3
  numbers, in order, not a list holding a number in quotes (a string)."), which names the form
  expected and the form received, never the value, and does not ask to work the value out again;
  the check returns False (an answer in the wrong form is an answer, not a blank: None stays
  "not answered yet").

Every check prints one line (two for a two-part answer) and returns True (right), False (wrong)
or None (not written or not answered yet). A wrong answer is described by the kind of input it
fails on and the property it breaks ("the result does not sum to 1", "the mask lets a node see
its sibling"), never by the expected values. A student function that still raises
NotImplementedError is reported as "not written yet", so a notebook runs top to bottom before
any exercise is done. Solutions: notebooks/solutions/nbXX.py.
"""

from __future__ import annotations

import copy
import math
import numbers
import random
from dataclasses import dataclass, field
from typing import Callable, Iterable, Optional

import torch

from specviz import metrics, sampling, theory
from specviz.adaptive import AdaptiveK
from specviz.drafters.lookup import lookup as engine_lookup
from specviz.tree import ROOT, DraftTree
from specviz.verifiers import GreedyVerifier

RIGHT, WRONG, NOT_WRITTEN = "✓", "✗", "not written yet"


# ---------------------------------------------------------------------------------------------
# the machinery: run a student's function on cases, describe the first wrong answer

class _Wrong(Exception):
    """What is wrong with an answer, in words (never the expected value)."""


@dataclass
class _Case:
    kind: str  # the kind of input, read after "wrong on": "a step where every draft agrees"
    args: tuple
    kwargs: dict = field(default_factory=dict)
    data: dict = field(default_factory=dict)  # what the judge needs (the engine's answer, ...)


def _run(name: str, fn, cases: list, judge: Callable, what: str, run: str = "",
         inputs: str = "edge cases and fixed-seed random inputs") -> Optional[bool]:
    """Call fn on every case (on copies: a function that changes its inputs changes nothing);
    judge(got, case) raises _Wrong on a wrong answer. Prints one line."""
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
        except _Wrong as wrong:
            print(f"{WRONG} {name} is wrong on {case.kind}: {wrong}.")
            return False
    print(f"{RIGHT} {name} agrees with {what} on all {len(cases)} cases ({inputs}{run}).")
    return True


def _replayed(cases: list, unit: str) -> str:
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


def _as_number(answer) -> float:
    """One number, or _Form."""
    value = _scalar(answer)
    if value is None:
        raise _Form("one number", _what(answer))
    return value


def _as_numbers(answer, n: Optional[int] = None, ordered: bool = True) -> list:
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


def _as_tokens(answer) -> list:
    """A list of tokens in order, each a string, or _Form. Tokens are compared exactly: a token's
    case and spaces are part of it."""
    items = answer if isinstance(answer, (list, tuple)) else None
    if items is None or not all(isinstance(t, str) for t in items):
        raise _Form("a list of strings, one per token, in order",
                    _what(answer, fits=lambda v: isinstance(v, str), noun="strings"))
    return list(items)


def _as_letter(answer, choices: str) -> str:
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


def _answer(answer, expected, tol: float = 0.0, hint: str = "", read: Callable = _as_number) -> Optional[bool]:
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


# ---------------------------------------------------------------------------------------------
# notebook 2: the greedy cascade rule

def engine_cascade(drafts: list, target_top: list, eos=()) -> list:
    """The engine's greedy rule on one chain step: the tokens GreedyVerifier emits when the
    target's argmax at position i is target_top[i] (len(drafts) + 1 positions)."""
    vocab = max(list(drafts) + list(target_top)) + 2
    p = torch.full((len(drafts) + 1, vocab), 0.5 / vocab)
    p[torch.arange(len(drafts) + 1), torch.tensor(target_top[:len(drafts) + 1])] = 1.0
    p = p / p.sum(dim=-1, keepdim=True)
    q = {i - 1: torch.full((vocab,), 1.0 / vocab) for i in range(len(drafts))}
    verdict = GreedyVerifier().verify(DraftTree.chain(list(drafts)), q, p, torch.Generator(), set(eos))
    return [drafts[n] for n in verdict.path] + ([verdict.next_token] if verdict.next_token is not None else [])


def _cascade_cases(events=None) -> list:
    eos = (0,)
    fixed = [
        ("a step where every draft agrees", [5, 3, 7, 2], [5, 3, 7, 2, 9], ()),
        ("a step whose first draft disagrees", [5, 3, 7, 2], [4, 3, 7, 2, 9], ()),
        ("a step that disagrees in the middle, with an agreeing draft after the disagreement",
         [5, 3, 7, 2], [5, 3, 1, 2, 9], ()),
        ("a step with nothing drafted (k = 0)", [], [7], ()),
        ("a step with one draft, accepted", [3], [3, 4], ()),
        ("a step with one draft, rejected", [3], [5, 4], ()),
        ("a step where the target accepts an end-of-text draft before the last draft", [5, 0, 7], [5, 0, 7, 9], eos),
        ("a step whose last draft is an accepted end-of-text token", [5, 0], [5, 0, 3], eos),
        ("a step where an end-of-text draft is rejected", [5, 0], [5, 6, 2], eos),
    ]
    cases = [_Case(kind, (d, t), {"eos": e}) for kind, d, t, e in fixed]
    rng = random.Random(2)
    for i in range(150):
        k = rng.randint(0, 6)
        drafts = [rng.randrange(3) for _ in range(k)]
        top = [d if rng.random() < 0.6 else rng.randrange(3) for d in drafts] + [rng.randrange(3)]
        e = eos if i % 2 else ()
        cases.append(_Case("random steps (k from 0 to 6, three token ids"
                           + (", 0 is end-of-text)" if e else ")"), (drafts, top), {"eos": e}))
    for step in _greedy_steps(events or []):
        cases.append(_Case(f"step {step['step'] + 1} of your run", (step["drafts"], step["target_top"]),
                           {"eos": step["eos"]}, {"emitted": step["emitted"]}))
    for case in cases:
        case.data.setdefault("emitted", engine_cascade(*case.args, **case.kwargs))
    return cases


def _greedy_steps(events) -> list:
    """(drafts, the target's argmax at each position, what the step emitted) for each chain step of
    a greedy run, from its events: draft_proposed, target_scored (top-k of p) and step_finished."""
    events = [e if isinstance(e, dict) else e.to_dict() for e in events]
    started = next((e for e in events if e["kind"] == "run_started"), None)
    if started is None or started["temperature"] != 0.0:
        return []
    eos = tuple(started["eos_token_ids"])
    steps = []
    for done in (e for e in events if e["kind"] == "step_finished"):
        drafts = [e["token_id"] for e in events if e["kind"] == "draft_proposed" and e["step"] == done["step"]]
        scored = next((e for e in events if e["kind"] == "target_scored" and e["step"] == done["step"]), None)
        if scored is None or not all(scored["topk"]):
            continue
        top = [_argmax(t) for t in scored["topk"]]
        steps.append({"step": done["step"], "drafts": drafts, "target_top": top, "eos": eos,
                      "emitted": list(done["emitted_ids"])})
    return steps


def _argmax(top: dict) -> int:
    """The target's top token from a recorded top-k slice; on an exact tie (bfloat16 has them),
    the lowest id, as torch.argmax picks it."""
    return min(i for i, p in zip(top["ids"], top["probs"]) if p == top["probs"][0])


def _judge_cascade(got, case: _Case) -> None:
    drafts, top = case.args
    eos = set(case.kwargs.get("eos", ()))
    want = case.data["emitted"]
    if not isinstance(got, (list, tuple)) or not all(isinstance(t, int) and not isinstance(t, bool) for t in got):
        raise _Wrong("return a list of token ids (ints)")
    got = list(got)
    if got == want:
        return
    agreed = 0
    while agreed < len(drafts) and drafts[agreed] == top[agreed] and (agreed == 0 or drafts[agreed - 1] not in eos):
        agreed += 1
    if agreed and drafts[agreed - 1] in eos:  # the walk stopped at an accepted end-of-text token
        ended = True
    else:
        ended = False
    n = min(len(got), agreed)
    if got[:n] != drafts[:n]:
        raise _Wrong("the output must begin with the drafts the target agrees with, in their order")
    if len(got) > len(want):
        if ended:
            raise _Wrong("it goes on after an accepted end-of-text draft (nothing follows it, not even a bonus)")
        if agreed < len(drafts):
            raise _Wrong("it goes on after the first disagreement (the drafts after it are never judged)")
        raise _Wrong("it emits more tokens than a step can (at most one after the last draft)")
    if len(got) < agreed:
        raise _Wrong("it stops before the first disagreement")
    if len(got) < len(want):
        if agreed == len(drafts):
            raise _Wrong("the bonus token is missing (when every draft agrees, the same target pass "
                         "also scored the next position)")
        raise _Wrong("the target's own token is missing at the first disagreement")
    if agreed == len(drafts):
        raise _Wrong("the bonus token must be the target's top token after the last draft")
    raise _Wrong("at the first disagreement the step emits the target's top token, not the draft's")


def check_cascade(fn: Callable, events: Optional[Iterable] = None) -> Optional[bool]:
    """fn(drafts, target_top, eos=()) -> emitted tokens, against the engine's GreedyVerifier;
    with `events` of a greedy chain run, also every step of that run."""
    cases = _cascade_cases(events)
    return _run("cascade", fn, cases, _judge_cascade, "the engine's greedy verifier", _replayed(cases, "step"))


def check_max_tokens(answer, k: int) -> Optional[bool]:
    """Notebook 2: the most tokens one target forward can produce with k drafts."""
    return _answer(answer, len(engine_cascade(list(range(1, k + 1)), list(range(1, k + 2)))),
                   hint="k accepted drafts, plus one more token from the same forward.")


def check_cascade_by_hand(answer) -> Optional[bool]:
    """Notebook 2: what one greedy step emits for the drafts x = 1 ; against x = 2 ; newline."""
    words = ["x", "=", "1", ";", "2", "\n"]
    ids = {w: i + 1 for i, w in enumerate(words)}
    emitted = engine_cascade([ids[w] for w in ["x", "=", "1", ";"]], [ids[w] for w in ["x", "=", "2", ";", "\n"]])
    return _answer(answer, [words[i - 1] for i in emitted], read=_as_tokens,
                   hint="Accept while they agree; at the first disagreement emit the target's token and stop.")


# ---------------------------------------------------------------------------------------------
# notebook 3: the residual

SECTION_1_P = (0.50, 0.30, 0.15, 0.05)
SECTION_1_Q = (0.20, 0.50, 0.10, 0.20)


def _residual_cases() -> list:
    gen = torch.Generator().manual_seed(3)

    def dist(v: int, scale: float = 2.0) -> torch.Tensor:
        return torch.softmax(torch.randn(v, generator=gen) * scale, dim=-1)

    p5 = dist(5)
    one_hot = torch.zeros(6)
    one_hot[2] = 1.0
    sparse_p, sparse_q = dist(8), dist(8)
    sparse_p[[1, 5]] = 0.0
    sparse_q[[0, 5, 6]] = 0.0
    sparse_p, sparse_q = sparse_p / sparse_p.sum(), sparse_q / sparse_q.sum()
    fixed = [
        ("the example of section 1", torch.tensor(SECTION_1_P), torch.tensor(SECTION_1_Q)),
        ("two tokens", torch.tensor([0.6, 0.4]), torch.tensor([0.9, 0.1])),
        ("p == q (a draft identical to the target)", p5, p5.clone()),
        ("a one-hot q (a deterministic drafter, as prompt lookup)", dist(6), one_hot),
        ("p and q with disjoint supports", torch.tensor([0.7, 0.3, 0.0, 0.0]), torch.tensor([0.0, 0.0, 0.4, 0.6])),
        ("a uniform q", dist(7, 3.0), torch.full((7,), 1 / 7)),
        ("distributions with zeros (as after top-k)", sparse_p, sparse_q),
    ]
    cases = [_Case(kind, (p, q)) for kind, p, q in fixed]
    for v in (3, 10, 100):
        for _ in range(10):
            cases.append(_Case("random distributions over 3 to 100 tokens", (dist(v), dist(v))))
    return cases


def _as_distribution(got, like: torch.Tensor) -> torch.Tensor:
    if isinstance(got, tuple) and len(got) == 2 and not isinstance(got[0], (int, float)):
        got = got[0]  # the engine's sampling.residual also returns the mass: take the distribution
    try:
        out = torch.as_tensor(got, dtype=torch.float64).detach().clone()
    except Exception:
        raise _Wrong("return a tensor (or list) of probabilities") from None
    if out.shape != like.shape:
        raise _Wrong(f"the result has shape {tuple(out.shape)}, not the shape of p ({tuple(like.shape)})")
    return out


def _judge_residual(got, case: _Case) -> None:
    p, q = (t.double() for t in case.args)
    want = sampling.residual(*case.args)[0].double()
    got = _as_distribution(got, p)
    same = bool(torch.equal(p, q))
    if not torch.isfinite(got).all():
        raise _Wrong("the result has NaN or infinite entries" + (" (when p == q there is nothing left over: "
                                                                 "see the docstring)" if same else ""))
    if (got < -1e-7).any():
        raise _Wrong("the result has negative entries")
    if abs(float(got.sum()) - 1.0) > 1e-4:
        raise _Wrong("the result does not sum to 1")
    if torch.allclose(got, want, atol=2e-5):
        return
    if same:
        raise _Wrong("when p == q nothing is left over; the docstring says what to return then")
    if (got[p <= q] > 1e-6).any():
        raise _Wrong("it puts probability on a token the draft already proposes often enough (q ≥ p)")
    if ((got < 1e-9) & (want > 1e-6)).any():
        raise _Wrong("it gives no probability to a token the draft under-proposes (p > q)")
    raise _Wrong("the probabilities are not proportional to how much p exceeds q")


def check_residual(fn: Callable) -> Optional[bool]:
    """fn(p, q) -> norm(max(p - q, 0)) (p itself when p == q), against sampling.residual."""
    return _run("my_residual", fn, _residual_cases(), _judge_residual, "the engine's sampling.residual")


def check_beta_by_hand(beta, accept_first) -> Optional[bool]:
    """Notebook 3, exercise 1: β and the first token's acceptance probability for p = (0.6, 0.4),
    q = (0.9, 0.1). Two lines, one per answer."""
    p, q = torch.tensor([0.6, 0.4], dtype=torch.float64), torch.tensor([0.9, 0.1], dtype=torch.float64)
    first = _answer(beta, float(sampling.overlap(p, q)), tol=1e-6, hint="β = min(0.6, 0.9) + min(0.4, 0.1).")
    second = _answer(accept_first, sampling.accept_probability(0.6, 0.9), tol=0.01,
                     hint="min(1, p/q) for the first token.")
    if first is None or second is None:
        return None if first is not False and second is not False else False
    return first and second


def check_broken_rule(letter) -> Optional[bool]:
    """Notebook 3: the token of section 1 that gains most under the resample-from-p rule."""
    p, q = torch.tensor(SECTION_1_P), torch.tensor(SECTION_1_Q)
    accept = torch.tensor([sampling.accept_probability(float(a), float(b)) for a, b in zip(p, q)])
    broken = q * accept + (1 - sampling.overlap(p, q)) * p
    return _answer(letter, "abcd"[int(torch.argmax(broken - p))], read=lambda a: _as_letter(a, "abcd"),
                   hint="Compute q·min(1, p/q) + (1 − β)·p and subtract p.")


# ---------------------------------------------------------------------------------------------
# notebook 4: alpha and tau from the events

_TINY_RUNS: dict = {}


def _tiny_runs() -> dict:
    """Runs of the instant tiny pair (random weights), made once: every kind of step there is."""
    if not _TINY_RUNS:
        import specviz

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


def _alpha_tau_cases(runs=None) -> list:
    cases = []
    tiny = _tiny_runs()
    for kind, events in tiny.items():
        cases.append(_Case(kind, (events,)))
    greedy = tiny["a greedy chain run (k = 4)"]
    cases.append(_Case("only a run's step_finished events", ([e for e in greedy if e["kind"] == "step_finished"],)))
    cases.append(_Case("a run that ends on an accepted end-of-text draft (no token after it)",
                       (_ended_on_eos(greedy),)))
    for i, events in enumerate(runs or []):
        events = [e if isinstance(e, dict) else e.to_dict() for e in events]
        cases.append(_Case(f"your run {i + 1}", (events,)))
    for case in cases:
        case.data["stats"] = metrics.fold(case.args[0])
    return cases


def _ended_on_eos(events: list) -> list:
    """The run cut after its first step that accepted a draft, as if that draft had been the
    end-of-text token: the step emits its accepted drafts and nothing after them."""
    steps = [e for e in events if e["kind"] == "step_finished"]
    last = next(e for e in steps if e["accepted"])
    out = []
    for e in events:
        if e["kind"] == "step_finished" and e["step"] == last["step"]:
            out.append({**e, "emitted_ids": e["emitted_ids"][:e["accepted"]],
                        "emitted_texts": e["emitted_texts"][:e["accepted"]], "finish_reason": "eos"})
            break
        out.append(e)
    return out


def _judge_alpha_tau(got, case: _Case) -> None:
    stats = case.data["stats"]
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        raise _Wrong("return a pair (alpha, tau)")
    alpha, tau = got
    def close(a, b) -> bool:
        return a is not None and b is not None and math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)

    if stats.alpha_empirical is None:
        if alpha is not None:
            raise _Wrong("α must be None when the rule judged no draft at all")
    elif alpha is None:
        raise _Wrong("α is None although the rule judged drafts")
    elif not isinstance(alpha, (int, float)) or not close(alpha, stats.alpha_empirical):
        if isinstance(alpha, (int, float)) and stats.drafted and close(alpha, stats.accepted / stats.drafted):
            raise _Wrong("α divides by every drafted token, but drafts after a rejection are never judged")
        if isinstance(alpha, (int, float)) and close(alpha, stats.alpha_analytic):
            raise _Wrong("α should count the rule's decisions (accepted / judged), not average β")
        raise _Wrong("α is wrong")
    if not isinstance(tau, (int, float)) or not close(tau, stats.tau):
        forwards = stats.target_forwards
        if isinstance(tau, (int, float)) and forwards and close(tau, (stats.new_tokens - stats.steps) / forwards):
            raise _Wrong("τ leaves out the token every step ends with (the residual or the bonus)")
        if isinstance(tau, (int, float)) and forwards and close(tau, stats.accepted / forwards):
            raise _Wrong("τ counts only accepted drafts, not every new token")
        if isinstance(tau, (int, float)) and forwards and close(tau, (stats.accepted + stats.steps) / forwards):
            raise _Wrong("τ assumes every step emits one token after its accepted drafts; count the tokens "
                         "each step emitted (none follows an accepted end-of-text)")
        raise _Wrong("τ is wrong (new tokens per target forward)")


def check_alpha_tau(fn: Callable, runs: Optional[Iterable] = None) -> Optional[bool]:
    """fn(events) -> (alpha, tau) from a run's events (dicts), against metrics.fold; `runs`: event
    lists of the notebook's own runs, checked too."""
    cases = _alpha_tau_cases(runs)
    return _run("alpha_tau", fn, cases, _judge_alpha_tau, "the engine's metrics.fold", _replayed(cases, "run"),
                "runs of the tiny pair: greedy, sampled, autoregressive, prompt lookup, tree, k = auto")


def check_best_k(answer) -> Optional[bool]:
    """Notebook 4: the best draft length at α = 0.6, c = 0.4."""
    return _answer(answer, theory.optimal_k(0.6, 0.4),
                   hint="Evaluate theory.speedup(0.6, k, 0.4) for several k and keep the best.")


def check_accepted_per_drafted(answer) -> Optional[bool]:
    """Notebook 4: expected accepted / drafted at α = 0.8, k = 4."""
    return _answer(answer, theory.accepted_per_drafted(0.8, 4), tol=0.005,
                   hint="(expected accepted per step) / k, with expected accepted = α + α² + α³ + α⁴.")


# ---------------------------------------------------------------------------------------------
# notebook 5: the tree attention mask

CAT_DOG_PARENTS = [-1, -1, 0, 0, 1]


def _tree(parents: list) -> DraftTree:
    tree = DraftTree()
    for i, parent in enumerate(parents):
        tree.add(i, parent, 1.0)
    return tree


def _static_parents(shape: list) -> list:
    parents, level = [], [ROOT]
    for width in shape:
        nxt = []
        for node in level:
            for _ in range(width):
                parents.append(node)
                nxt.append(len(parents) - 1)
        level = nxt
    return parents


def _mask_cases(events=None) -> list:
    fixed = [
        ("the cat/dog tree of section 1", CAT_DOG_PARENTS),
        ("a chain (every node the child of the one before)", [-1, 0, 1, 2, 3]),
        ("a root with four children", [-1, -1, -1, -1]),
        ("a single node", [-1]),
        ("an empty tree", []),
        ("the static tree 3,2,1", _static_parents([3, 2, 1])),
        ("a tree with a long branch beside a short one", [-1, -1, 0, 2, 3, 1]),
    ]
    cases = [_Case(kind, (parents,)) for kind, parents in fixed]
    rng = random.Random(5)
    for _ in range(30):
        n = rng.randint(2, 16)
        cases.append(_Case("random trees of 2 to 16 nodes", ([rng.randint(-1, i - 1) for i in range(n)],)))
    for e in events or []:
        e = e if isinstance(e, dict) else e.to_dict()
        if e["kind"] == "tree_built" and e["nodes"]:
            cases.append(_Case(f"step {e['step'] + 1}'s tree in your run", ([n["parent"] for n in e["nodes"]],)))
    return cases


def _judge_mask(got, case: _Case) -> None:
    parents = case.args[0]
    tree = _tree(parents)
    n = len(parents)
    want = tree.mask()
    try:
        got = torch.as_tensor(got)
    except Exception:
        raise _Wrong("return an (n, n) tensor (or nested list) of booleans") from None
    if n == 0 and got.numel() == 0:
        return
    if tuple(got.shape) != (n, n):
        raise _Wrong(f"the mask has shape {tuple(got.shape)} for a tree of {n} nodes; it should be ({n}, {n})")
    got = got.bool()
    if torch.equal(got, want):
        return
    missing, extra = want & ~got, got & ~want
    if missing.diagonal().any():
        raise _Wrong("a node cannot see itself")
    for i, j in missing.nonzero().tolist():
        if parents[i] == j:
            raise _Wrong("a node cannot see its parent")
    if missing.any():
        raise _Wrong("a node cannot see its grandparent or an earlier ancestor (it must see its whole path "
                     "from the root)")
    kinds = set()
    for i, j in extra.nonzero().tolist():
        if i in tree.ancestors(j):
            kinds.add("descendant")
        elif parents[i] == parents[j]:
            kinds.add("sibling")
        else:
            kinds.add("other")
    if "descendant" in kinds:
        raise _Wrong("a node sees its own child or a later descendant (row i is the node that looks, "
                     "column j the node it may see)")
    if "sibling" in kinds:
        raise _Wrong("the mask lets a node see its sibling")
    raise _Wrong("the mask lets a node see a node of another branch (an ordinary causal mask is not a "
                 "tree mask)")


def check_tree_mask(fn: Callable, events: Optional[Iterable] = None) -> Optional[bool]:
    """fn(parents) -> the (n, n) tree attention mask, against DraftTree.mask; with `events`, also
    every tree the engine built in that run."""
    cases = _mask_cases(events)
    return _run("tree_mask", fn, cases, _judge_mask, "the engine's DraftTree.mask", _replayed(cases, "tree"))


def check_node_sees(answer) -> Optional[bool]:
    """Notebook 5: the nodes that node 4 ("dog ran") of the cat/dog tree attends to."""
    row = _tree(CAT_DOG_PARENTS).mask()[4]
    # asked for as a sorted list only so that it reads one way: any order, or a set, is the same answer
    return _answer(answer, [i for i, seen in enumerate(row.tolist()) if seen], hint="Its ancestors and itself.",
                   read=lambda a: _as_numbers(a, ordered=False))


def check_q2(answer) -> Optional[bool]:
    """Notebook 5: q after its first candidate (token a of q = (0.5, 0.3, 0.2)) was drawn."""
    q = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    q[0] = 0.0  # as RejectionVerifier.judge does for the next sibling
    return _answer(answer, (q / q.sum()).tolist(), tol=0.001, hint="Remove a and renormalise what is left.",
                   read=lambda a: _as_numbers(a, n=3))  # the question asks for three numbers: a, b, c


# ---------------------------------------------------------------------------------------------
# notebook 6: prompt lookup

def _lookup_tokens(found) -> list:
    return [] if found is None else list(found["tokens"])


def _lookup_cases(events=None) -> list:
    words = str.split
    fixed = [
        ("a suffix that occurs once earlier", words("a b c d a b"), 3, 2, 1),
        ("the example of section 1", words("for item in items : total += item . price \n for item in"), 4, 3, 1),
        ("a suffix n-gram that occurs twice earlier", words("x a b c y a b d z a b"), 2, 2, 1),
        ("a text where only a shorter suffix occurs earlier", words("a b c d e c"), 2, 3, 1),
        ("a text where a longer and a shorter suffix both occur earlier, at different places",
         words("q r z p q r y p q r"), 3, 3, 1),
        ("a text with nothing to copy", words("a b c d"), 3, 3, 1),
        ("k = 0", words("a b a b"), 0, 2, 1),
        ("a single token", ["a"], 3, 3, 1),
        ("an empty text", [], 3, 3, 1),
        ("a match whose continuation is shorter than k", words("a b c a b"), 5, 2, 1),
        ("an earlier occurrence that overlaps the suffix itself", words("a a a a"), 3, 3, 1),
        ("min_ngram = 2 (a one-token match does not count)", words("a b c d e c"), 2, 3, 2),
        ("max_ngram longer than the text", words("a b a"), 2, 5, 1),
    ]
    cases = [_Case(kind, (tokens, k), {"max_ngram": n, "min_ngram": m}) for kind, tokens, k, n, m in fixed]
    rng = random.Random(6)
    for _ in range(150):
        size, top = rng.randint(0, 18), rng.randint(1, 4)
        cases.append(_Case("random texts over three token ids",
                           ([rng.randrange(3) for _ in range(size)], rng.randint(0, 5)),
                           {"max_ngram": top, "min_ngram": rng.randint(1, top)}))
    for step in _lookup_steps(events or []):
        cases.append(_Case(f"step {step['step'] + 1} of your prompt-lookup run", (step["committed"], step["k"]),
                           {"max_ngram": step["ngram"], "min_ngram": 1}, {"tokens": step["drafts"]}))
    for case in cases:
        case.data.setdefault("tokens", _lookup_tokens(engine_lookup(*case.args, **case.kwargs)))
    return cases


def _lookup_steps(events) -> list:
    """The committed tokens before each step of a pld run, the k it was allowed and what it drafted."""
    events = [e if isinstance(e, dict) else e.to_dict() for e in events]
    started = next((e for e in events if e["kind"] == "run_started"), None)
    if started is None or started["method"] != "pld":
        return []
    committed, steps = list(started["prompt_ids"]), []
    ngram = (started.get("options") or {}).get("ngram", 3)
    for done in (e for e in events if e["kind"] == "step_finished"):
        drafts = [e["token_id"] for e in events if e["kind"] == "draft_proposed" and e["step"] == done["step"]]
        steps.append({"step": done["step"], "committed": list(committed), "k": done["k"], "ngram": ngram,
                      "drafts": drafts})
        committed += done["emitted_ids"]
    return steps


def _judge_lookup(got, case: _Case) -> None:
    tokens, k = case.args
    want = case.data["tokens"]
    if isinstance(got, dict) and "tokens" in got:
        got = got["tokens"]
    if got is None:
        got = []
    if not isinstance(got, (list, tuple)):
        raise _Wrong("return a list of tokens (empty when there is nothing to copy)")
    got = list(got)
    if got == want:
        return
    if len(got) > k:
        raise _Wrong("it proposes more than k tokens")
    if not want:
        raise _Wrong("it proposes tokens where there is nothing to copy (no earlier occurrence of a suffix "
                     "n-gram with n between min_ngram and max_ngram)")
    if not got:
        raise _Wrong("it proposes nothing although a suffix n-gram occurs earlier")
    options = {**case.kwargs}
    if got == _lookup_tokens(engine_lookup(tokens, k, prefer="latest", **options)):
        raise _Wrong("it copies after the latest earlier occurrence; the rule takes the earliest")
    for n in range(options["min_ngram"], options["max_ngram"]):
        if got == _lookup_tokens(engine_lookup(tokens, k, max_ngram=n, min_ngram=options["min_ngram"])):
            raise _Wrong("it settles for a shorter suffix n-gram although a longer one occurs earlier")
    if len(got) < len(want):
        raise _Wrong("it copies fewer tokens than k allows")
    raise _Wrong("it copies the wrong tokens (the continuation right after the matched n-gram)")


def check_lookup(fn: Callable, events: Optional[Iterable] = None) -> Optional[bool]:
    """fn(tokens, k, max_ngram=3, min_ngram=1) -> proposed tokens, against the engine's lookup;
    with `events` of a pld run, also every step of that run."""
    cases = _lookup_cases(events)
    return _run("my_lookup", fn, cases, _judge_lookup, "the engine's lookup", _replayed(cases, "step"))


def check_lookup_by_hand(answer) -> Optional[bool]:
    """Notebook 6: what lookup proposes for a b c d a b, k = 3, max_ngram = 2."""
    return _answer(answer, _lookup_tokens(engine_lookup("a b c d a b".split(), k=3, max_ngram=2)), read=_as_tokens,
                   hint="Find the earlier 'a b' and copy what followed it.")


# ---------------------------------------------------------------------------------------------
# notebook 7: the heuristic k rule

K_MAX = AdaptiveK().k_max  # what k="auto" runs use


def engine_next_k(k: int, drafted: int, accepted: int, k_max: int = K_MAX) -> int:
    """The engine's heuristic rule (transformers' schedule): AdaptiveK("heuristic").update."""
    policy = AdaptiveK("heuristic", k_start=k, k_max=k_max)
    policy.update(drafted, accepted, min(drafted, accepted + 1), 0.0, drafted, None)
    return policy.k


def _next_k_cases(events=None) -> list:
    fixed = [
        ("a step that accepted every draft", 4, 4, 4, 12),
        ("a step with a rejection", 4, 4, 2, 12),
        ("a step whose first draft was rejected", 4, 4, 0, 12),
        ("a full accept one below k_max", 11, 11, 11, 12),
        ("a full accept at k_max", 12, 12, 12, 12),
        ("a rejection at k = 1", 1, 1, 0, 12),
        ("a step that drafted fewer than k tokens (the draft stopped at end-of-text), all accepted", 6, 2, 2, 12),
        ("a step that drafted fewer than k tokens, with a rejection", 6, 3, 1, 12),
        ("a step that drafted nothing (no room left before max_new_tokens)", 4, 0, 0, 12),
        ("a small k_max", 3, 3, 3, 4),
    ]
    cases = [_Case(kind, (k, d, a), {"k_max": m}) for kind, k, d, a, m in fixed]
    rng = random.Random(7)
    for _ in range(100):
        k_max = rng.randint(1, 16)
        k = rng.randint(1, k_max)
        drafted = rng.randint(0, k)
        accepted = drafted if rng.random() < 0.4 else rng.randint(0, drafted)
        cases.append(_Case("random steps", (k, drafted, accepted), {"k_max": k_max}))
    for step in _auto_steps(events or []):
        cases.append(_Case(f"step {step['step'] + 1} of your k = auto run",
                           (step["k"], step["drafted"], step["accepted"]),
                           {"k_max": K_MAX}, {"next": step["next"]}))
    for case in cases:
        case.data.setdefault("next", engine_next_k(*case.args, **case.kwargs))
    return cases


def _auto_steps(events) -> list:
    """(k chosen, drafted, accepted) of each step of a heuristic k = auto run and the k chosen next."""
    events = [e if isinstance(e, dict) else e.to_dict() for e in events]
    done = [e for e in events if e["kind"] == "step_finished" and "k_chosen" in (e.get("info") or {})
            and e["info"].get("k_rule") == "heuristic"]
    return [{"step": a["step"], "k": a["info"]["k_chosen"], "drafted": a["drafted"], "accepted": a["accepted"],
             "next": b["info"]["k_chosen"]} for a, b in zip(done, done[1:])]


def _judge_next_k(got, case: _Case) -> None:
    k, drafted, accepted = case.args
    k_max = case.kwargs["k_max"]
    want = case.data["next"]
    if isinstance(got, bool) or not isinstance(got, int):
        raise _Wrong("return the next k as an int")
    if got == want:
        return
    if got > k_max:
        raise _Wrong("k goes above k_max")
    if got < 1:
        raise _Wrong("k falls below 1")
    if drafted == 0:
        raise _Wrong("k should not change after a step that drafted nothing (it says nothing about the drafts)")
    if accepted == drafted:
        raise _Wrong("wrong after a step that accepted everything it drafted (a full accept: + 2, at most k_max)")
    raise _Wrong("wrong after a step with a rejection (- 1, at least 1)")


def check_next_k(fn: Callable, events: Optional[Iterable] = None) -> Optional[bool]:
    """fn(k, drafted, accepted, k_max=12) -> next k, against AdaptiveK("heuristic"); with `events` of
    a k="auto", auto_rule="heuristic" run, also the k the engine chose at every step of it."""
    cases = _next_k_cases(events)
    return _run("next_k", fn, cases, _judge_next_k, "the engine's AdaptiveK (heuristic)", _replayed(cases, "step"))


def break_even(c: float) -> float:
    """Smallest alpha (to 0.005) for which theory.optimal_k(alpha, c) > 0."""
    return next((a / 200 for a in range(200) if theory.optimal_k(a / 200, c) > 0), 1.0)


def check_break_even(answer) -> Optional[bool]:
    """Notebook 7: the α below which no k ≥ 1 pays at c = 0.4."""
    return _answer(answer, break_even(0.4), tol=0.011, hint="With k = 1, speedup = (1 + α) / (1 + c).")


# ---------------------------------------------------------------------------------------------
# notebooks 1 and 8: speedup arithmetic

def check_cost_ratio(answer, costs: dict) -> Optional[bool]:
    """Notebook 1: t(4) / t(1) of the target, from this session's measured `costs`."""
    return _answer(answer, costs["target"][4] / costs["target"][1], tol=0.05,
                   hint="Divide the 4-token time by the 1-token time in the table.")


def check_speedup_by_hand(answer) -> Optional[bool]:
    """Notebook 1: τ = 3, c = 0.4, k = 4, verify = one forward."""
    tau, c, k = 3.0, 0.4, 4
    return _answer(answer, tau / (c * k + 1), tol=0.02,
                   hint="Per step: k draft forwards at c each, plus one target forward, for τ tokens.")


def check_paper_speedup(answer) -> Optional[bool]:
    """Notebook 8: τ = 3.5, k = 5, c = 0.05, verify = one forward."""
    return _answer(answer, 3.5 / (0.05 * 5 + 1), tol=0.02, hint="τ / (c·k + 1)")


# ---------------------------------------------------------------------------------------------
# notebook 9: latency, the survival curve, serving cost

def _as_dicts(events) -> list:
    return [e if isinstance(e, dict) else e.to_dict() for e in events]


def _close(a, b, rel: float = 1e-9, abs_: float = 1e-12) -> bool:
    return math.isclose(a, b, rel_tol=rel, abs_tol=abs_)


def _numbers(values) -> Optional[list]:
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


def _same_list(got: list, want: list) -> bool:
    return len(got) == len(want) and all(_close(a, b) for a, b in zip(got, want))


def engine_stream_waits(events) -> tuple:
    """(ttft, amortised, arrivals) of a run, with the engine's stream accounting
    (specviz.render.race.stream_updates, arrival_gaps and stream_latency, the definitions of
    specviz.metrics.stream_stats): the run clock at the first visible update; per token after it, the
    update's wait divided by the tokens it brought; per token after it, the wait a reader saw (the
    whole wait for an update's first token, 0 for the others)."""
    from specviz.render import race

    events = _as_dicts(events)
    updates = race.stream_updates(events)
    amortised = [(t1 - t0) / n for (t0, _, _), (t1, n, _) in zip(updates, updates[1:]) for _ in range(n)]
    return race.stream_latency(events)["ttft"], amortised, race.arrival_gaps(events)


def _stream(kind: str, times: list, counts: list) -> _Case:
    """A hand-built run of k = 5: run_started, then one step_finished per update (elapsed,
    tokens: its accepted drafts and one more, so 1 to 6)."""
    events = [{"kind": "run_started", "method": "spec", "k": 5}]
    for step, (t, n) in enumerate(zip(times, counts)):
        events.append({"kind": "step_finished", "step": step, "k": 5, "drafted": 5, "accepted": n - 1,
                       "evaluated": min(5, n), "emitted_ids": list(range(10 + step, 10 + step + n)),
                       "emitted_texts": ["t"] * n, "elapsed": t, "finish_reason": None})
    events[-1]["finish_reason"] = "length"
    return _Case(kind, (events,))


def _stream_cases(runs=None) -> list:
    cases = [
        _stream("a speculative stream (updates of several tokens)", [0.5, 0.9, 1.4, 1.8], [3, 1, 5, 2]),
        _stream("an autoregressive stream (one token per update)", [0.2, 0.3, 0.41, 0.5, 0.62], [1] * 5),
        _stream("a stream whose first update brings one token and the next ones several", [0.3, 0.8, 1.1], [1, 4, 2]),
        _stream("a run with a single update (nothing after the first token)", [0.4], [3]),
        _stream("a run with two updates", [0.25, 0.75], [2, 5]),
    ]
    rng = random.Random(9)
    for _ in range(40):
        n = rng.randint(1, 12)
        times, t = [], rng.uniform(0.05, 0.8)
        for _ in range(n):
            times.append(t)
            t += rng.uniform(0.01, 0.6)
        cases.append(_stream("random streams of 1 to 12 updates", times, [rng.randint(1, 6) for _ in range(n)]))
    for kind, events in _tiny_runs().items():
        cases.append(_Case(kind, (events,)))
    for i, events in enumerate(runs or []):
        cases.append(_Case(f"your run {i + 1}", (_as_dicts(events),)))
    for case in cases:
        case.data["want"] = engine_stream_waits(*case.args)
    return cases


def _judge_list(name: str, got, want: list, updates: list, arrivals: bool) -> None:
    """One of the two per-token lists of stream_waits, against the engine's."""
    values = _numbers(got)
    if values is None:
        raise _Wrong(f"return {name} as a list of seconds (numbers)")
    if _same_list(values, want):
        return
    waits = [(t1 - t0, n) for (t0, _, _), (t1, n, _) in zip(updates, updates[1:])]
    if len(values) != len(want):
        if updates and len(values) == len(want) + updates[0][1]:
            raise _Wrong(f"{name} has entries for the first update's tokens; they arrived at TTFT, the list "
                         "starts with the second update")
        if len(values) == len(waits):
            raise _Wrong(f"{name} has one entry per update; it needs one per token (an update of n tokens "
                         "gives n entries)")
        raise _Wrong(f"{name} has the wrong length (one entry per token after the first update)")
    whole = [gap for gap, n in waits for _ in range(n)]
    shared = [gap / n for gap, n in waits for _ in range(n)]
    zeros_first = [g for gap, n in waits for g in [0.0] * (n - 1) + [gap]]
    since_first = [(t - updates[0][0], n) for t, n, _ in updates[1:]]  # from the first update, not the one before
    if (_same_list(values, [wait for wait, n in since_first for _ in range(n)])
            or _same_list(values, [wait / n for wait, n in since_first for _ in range(n)])):
        raise _Wrong(f"{name} measures each wait from the first update; a wait is the time since the update "
                     "before it")
    if arrivals:
        if _same_list(values, shared):
            raise _Wrong("arrivals shares each wait among the update's tokens; a reader waits the whole gap for "
                         "an update's first token and nothing for the others")
        if _same_list(values, whole):
            raise _Wrong("arrivals gives every token of an update the whole wait; the others arrive with the "
                         "first one (a wait of 0)")
        if _same_list(values, zeros_first):
            raise _Wrong("arrivals puts the update's wait on its last token; it belongs to the first one")
    else:
        if _same_list(values, whole):
            raise _Wrong("amortised gives every token of an update the whole wait; each gets the wait divided "
                         "by the tokens the update brought")
        if _same_list(values, zeros_first) or _same_list(values, [g for gap, n in waits
                                                                  for g in [gap] + [0.0] * (n - 1)]):
            raise _Wrong("amortised is the arrival gaps; it shares an update's wait equally among its tokens")
    if _same_list(sorted(values), sorted(want)):
        raise _Wrong(f"{name} is not in the order the tokens arrived")
    decode = updates[-1][0] - updates[0][0] if updates else 0.0
    if not _close(sum(values), decode, rel=1e-6, abs_=1e-9):
        raise _Wrong(f"the entries of {name} do not add up to the decode time (the last update's time minus "
                     "TTFT)")
    raise _Wrong(f"{name} is wrong")


def _judge_stream_waits(got, case: _Case) -> None:
    from specviz.render import race

    ttft_want, amortised, arrivals = case.data["want"]
    if not isinstance(got, (tuple, list)) or len(got) != 3:
        raise _Wrong("return a triple (ttft, amortised, arrivals)")
    ttft, got_amortised, got_arrivals = got
    updates = race.stream_updates(case.args[0])
    if ttft_want is None:
        if ttft is not None:
            raise _Wrong("TTFT must be None when no step emitted a token")
    elif isinstance(ttft, bool) or not isinstance(ttft, (int, float)):
        raise _Wrong("TTFT should be a number of seconds")
    elif not _close(ttft, ttft_want):
        if ttft == 0:
            raise _Wrong("TTFT is the run clock at the first update (the prefill plus the first step), not zero")
        if len(updates) > 1 and _close(ttft, updates[1][0] - updates[0][0]):
            raise _Wrong("TTFT is the time of the first update since the run started, not the wait after it")
        raise _Wrong("TTFT is wrong (the `elapsed` of the first step that emitted tokens)")
    _judge_list("amortised", got_amortised, amortised, updates, arrivals=False)
    _judge_list("arrivals", got_arrivals, arrivals, updates, arrivals=True)


def check_stream_waits(fn: Callable, runs: Optional[Iterable] = None) -> Optional[bool]:
    """fn(events) -> (ttft, amortised, arrivals) of a run's stream, against the engine's
    (engine_stream_waits: specviz.render.race, the definitions of specviz.metrics.stream_stats); `runs`:
    event lists of the notebook's own runs, checked too."""
    cases = _stream_cases(runs)
    return _run("stream_waits", fn, cases, _judge_stream_waits, "the engine's stream accounting",
                _replayed(cases, "run"), "hand-built streams, random streams and runs of the tiny pair")


def check_amortised_itl(answer) -> Optional[bool]:
    """Notebook 9: the amortised latency of each of 4 tokens shown 520 ms after the update before."""
    from specviz.metrics import stream_stats

    return _answer(answer, stream_stats([0.0, 0.52], [1, 4])["itl_p50"] * 1000, tol=0.5,
                   hint="The update's wait, shared by the tokens it brought.")


def engine_survival(events, k: int) -> Optional[list]:
    """The engine's survival curve (specviz.render.charts.acceptance_survival) of a run's
    step_finished events with draft length k: P(accepted length >= i), i = 0..k, over the steps
    that drafted all k tokens; None when none did."""
    from specviz.render import charts

    steps = [e for e in _as_dicts(events) if e["kind"] == "step_finished"]
    # the curve needs only k and the steps; an empty run_finished spares folding the run's metrics
    # (hand-built steps carry no clocks), which only the curve's alpha would use
    surv = charts.acceptance_survival([{"kind": "run_started", "method": "spec", "k": k}] + steps
                                      + [{"kind": "run_finished", "metrics": {}}])
    return None if surv is None else surv["survival"]


def _steps_case(kind: str, k: int, steps: list) -> _Case:
    """A hand-built chain run with draft length k: (drafted, accepted) per step."""
    events = [{"kind": "run_started", "method": "spec", "k": k}]
    for i, (drafted, accepted) in enumerate(steps):
        n = accepted + 1  # its accepted drafts and the residual or bonus token
        events.append({"kind": "step_finished", "step": i, "k": k, "drafted": drafted, "accepted": accepted,
                       "evaluated": min(drafted, accepted + 1), "emitted_ids": list(range(n)),
                       "emitted_texts": ["t"] * n, "elapsed": 0.1 * (i + 1), "finish_reason": None})
    if len(events) > 1:
        events[-1]["finish_reason"] = "length"
    return _Case(kind, (events, k))


def _survival_cases(runs=None) -> list:
    cases = [
        _steps_case("steps of k = 4 that all drafted 4 tokens", 4, [(4, 4), (4, 2), (4, 0), (4, 4), (4, 1)]),
        _steps_case("a run whose last step drafted fewer than k (it is left out)", 4,
                    [(4, 1), (4, 3), (4, 0), (2, 2)]),
        _steps_case("a run with steps that drafted nothing (prompt lookup found no match)", 4,
                    [(0, 0), (4, 2), (0, 0), (4, 3), (1, 0)]),
        _steps_case("a run where every step accepted every draft", 3, [(3, 3)] * 4),
        _steps_case("a run where every first draft was rejected", 5, [(5, 0)] * 3),
        _steps_case("k = 1", 1, [(1, 1), (1, 0), (1, 1)]),
        _steps_case("a single step", 6, [(6, 2)]),
        _steps_case("a run where no step drafted all k tokens", 4, [(2, 1), (3, 0), (1, 1)]),
    ]
    rng = random.Random(19)
    for _ in range(60):
        k = rng.randint(1, 8)
        steps = []
        for _ in range(rng.randint(1, 20)):
            drafted = k if rng.random() < 0.75 else rng.randint(0, k)
            accepted = drafted if rng.random() < 0.3 else rng.randint(0, drafted)
            steps.append((drafted, accepted))
        cases.append(_steps_case("random runs (k from 1 to 8, some steps drafting fewer than k)", k, steps))
    for kind, events in _tiny_runs().items():
        started = events[0]
        if started["method"] in ("spec", "pld") and isinstance(started["k"], int):
            cases.append(_Case(kind, (events, started["k"])))
    for i, events in enumerate(runs or []):
        events = _as_dicts(events)
        started = next((e for e in events if e["kind"] == "run_started"), {})
        if isinstance(started.get("k"), int) and started.get("method") in ("spec", "pld", "cascade"):
            cases.append(_Case(f"your run {i + 1}", (events, started["k"])))
    for case in cases:
        case.data["want"] = engine_survival(*case.args)
    return cases


def _judge_survival(got, case: _Case) -> None:
    events, k = case.args
    want = case.data["want"]
    if want is None:
        if got is not None:
            raise _Wrong("return None when no step drafted all k tokens (there is nothing to count)")
        return
    if got is None:
        raise _Wrong("it returns None although some steps drafted all k tokens")
    values = _numbers(got)
    if values is None:
        raise _Wrong("return a list of k + 1 shares, P(L ≥ 0) to P(L ≥ k)")
    if _same_list(values, want):
        return
    if len(values) == k:
        raise _Wrong("the list starts at depth 0: P(L ≥ 0) = 1 (every step gets that far), so it has k + 1 "
                     "entries")
    if len(values) != k + 1:
        raise _Wrong("the list should have k + 1 entries, one per depth from 0 to k")
    steps = [e for e in events if e["kind"] == "step_finished"]
    full = [e["accepted"] for e in steps if e["drafted"] == k]
    if _same_list(values, [float(sum(1 for a in full if a >= i)) for i in range(k + 1)]):
        raise _Wrong("it counts steps; return shares of the steps that drafted all k (between 0 and 1)")
    if _same_list(values, [sum(1 for a in full if a == i) / len(full) for i in range(k + 1)]):
        raise _Wrong("that is P(L = i); the curve counts the steps that got at least i drafts deep")
    if _same_list(values, [sum(1 for e in steps if e["accepted"] >= i) / len(steps) for i in range(k + 1)]):
        raise _Wrong("it counts steps that drafted fewer than k tokens; only steps that drafted all k say how "
                     "deep a step can get")
    judged = sum(e["evaluated"] for e in steps)
    if judged and _same_list(values, [(sum(e["accepted"] for e in steps) / judged) ** i for i in range(k + 1)]):
        raise _Wrong("α^i is what independent acceptance predicts; the curve counts what the steps did")
    if any(b > a + 1e-12 for a, b in zip(values, values[1:])):
        raise _Wrong("the curve rises somewhere; a step that got i drafts deep also got i − 1 deep")
    raise _Wrong("the shares are wrong (the share of full steps with accepted ≥ i at each depth i)")


def check_survival(fn: Callable, runs: Optional[Iterable] = None) -> Optional[bool]:
    """fn(events, k) -> [P(L >= 0), ..., P(L >= k)] over the steps that drafted all k tokens (None
    when none did), against specviz.render.charts.acceptance_survival; `runs`: event lists of the
    notebook's own fixed-k runs, checked too."""
    cases = _survival_cases(runs)
    return _run("survival_curve", fn, cases, _judge_survival, "the engine's acceptance_survival",
                _replayed(cases, "run"), "hand-built runs, random runs and runs of the tiny pair")


def check_share_at_depth(answer) -> Optional[bool]:
    """Notebook 9: P(L >= 3) under independent acceptance at α = 0.8."""
    # τ(k) = 1 + α + ... + α^k (theory.expected_tokens), so α^3 = τ(3) − τ(2)
    return _answer(answer, theory.expected_tokens(0.8, 3) - theory.expected_tokens(0.8, 2), tol=0.005,
                   hint="P(L ≥ i) = α^i.")


def t_half_width(values: list, level: float = 0.95) -> float:
    """Half the width of Student's t interval of the mean of `values`: t(n − 1) · s / √n."""
    import statistics

    from scipy import stats

    n = len(values)
    return float(stats.t.ppf((1 + level) / 2, n - 1) * statistics.stdev(values) / n ** 0.5)


def check_half_width(answer, grid: list) -> Optional[bool]:
    """Notebook 9: the half-width of the 95% t-interval of the mean τ over the runs of `grid`."""
    return _answer(answer, t_half_width([r["tau"] for r in grid]), tol=1e-3,
                   hint="taus = [r['tau'] for r in grid]; then t · s / √n with s = statistics.stdev(taus).")


def _cost_cases() -> list:
    from specviz.render import lessons

    fixed = [
        ("a machine at 2 per hour making 20 tokens/s", 20, 2.0),
        ("a slow machine (half a token per second)", 0.5, 3.0),
        ("a fast machine (a thousand tokens/s)", 1000, 2.5),
        ("one token per second at 1 per hour", 1, 1.0),
        ("a free machine (price 0)", 12, 0.0),
        ("a run that made no tokens (tokens_per_s = 0)", 0, 1.0),
        ("no speed measured (tokens_per_s = None)", None, 1.0),
    ]
    cases = [_Case(kind, (speed, price)) for kind, speed, price in fixed]
    rng = random.Random(29)
    for _ in range(40):
        cases.append(_Case("random speeds and prices", (10 ** rng.uniform(-1, 3), round(rng.uniform(0.1, 40), 2))))
    for case in cases:
        case.data["want"] = lessons.cost_per_million(*case.args)
    return cases


def _judge_cost(got, case: _Case) -> None:
    want = case.data["want"]
    if want is None:
        if got is not None:
            raise _Wrong("return None when there is no speed: nothing was made, so there is no cost per token")
        return
    if got is None:
        raise _Wrong("it returns None for a real speed")
    if isinstance(got, bool) or not isinstance(got, (int, float)):
        raise _Wrong("return the cost as a number")
    if _close(got, want, rel=1e-6):
        return
    if want and _close(got, want / 1e6, rel=1e-6):
        raise _Wrong("that is the cost of one token; the question is per million tokens")
    if want and _close(got, want * 3600, rel=1e-6):
        raise _Wrong("it divides a price per hour by a speed per second (an hour has 3600 seconds)")
    if want and _close(got, 1 / want, rel=1e-6):
        raise _Wrong("it is upside down: that is millions of tokens per unit of price, not the price of a "
                     "million tokens")
    raise _Wrong("the cost is wrong (the price of the time a million tokens take)")


def check_cost(fn: Callable) -> Optional[bool]:
    """fn(tokens_per_s, price_per_hour) -> cost per million tokens (None without a speed), against
    specviz.render.lessons.cost_per_million."""
    return _run("cost_per_million", fn, _cost_cases(), _judge_cost, "the engine's lessons.cost_per_million")


def check_cost_by_hand(answer) -> Optional[bool]:
    """Notebook 9: a million tokens at 20 tokens/s on a machine rented at 2.0 per hour."""
    from specviz.render import lessons

    return _answer(answer, lessons.cost_per_million(20, 2.0), tol=0.05, hint="price / (tokens/s × 3600) × 10⁶")


# ---------------------------------------------------------------------------------------------
# notebook 10: what held-out hits say about a greedy chain

def engine_chain_acceptance(hits) -> tuple:
    """(survival, expected) of a greedy chain from held-out hits, as specviz.train.summarise_hits
    computes them (unrounded): hits has one row per held-out position and one column per depth
    (True: the drafter's top-1 there is the target's argmax); survival[d - 1] is the share of
    rows whose depths 1..d were all right (a greedy chain accepts at least d drafts exactly
    then), expected their sum (the drafts a full chain accepts, on average). ([], 0.0) for no rows."""
    rows = [[bool(x) for x in row] for row in hits]
    if not rows:
        return [], 0.0
    survival = torch.cumprod(torch.tensor(rows, dtype=torch.float64), dim=1).mean(0).tolist()
    return survival, float(sum(survival))


def _chain_cases(hits=None) -> list:
    fixed = [
        ("rows where every depth is right", [[True] * 4] * 3),
        ("rows where every depth is wrong", [[False] * 3] * 4),
        ("rows where depth 1 misses and the later depths are right (Medusa's far heads can be)",
         [[False, True, True], [True, True, True], [False, True, True], [True, False, True]]),
        ("rows whose depths miss together (one hard position, one easy)",
         [[True, True, True, True], [False, False, False, False]]),
        ("rows with a single depth", [[True], [False], [True]]),
        ("a single row", [[True, True, False, True, True]]),
        ("no held-out rows", []),
    ]
    cases = [_Case(kind, (rows,)) for kind, rows in fixed]
    rng = random.Random(31)
    for _ in range(50):
        depths, n = rng.randint(1, 6), rng.randint(1, 40)
        rows = []
        for _ in range(n):  # an easy or a hard position: depths tend to be right or wrong together
            easy = rng.random() < 0.5
            rows.append([rng.random() < (0.85 if easy else 0.25) for _ in range(depths)])
        cases.append(_Case("random held-out hits (depths that succeed together more often than by chance)",
                           (rows,)))
    if hits is not None:
        rows = [[bool(x) for x in row] for row in (hits.tolist() if hasattr(hits, "tolist") else hits)]
        cases.append(_Case("your live heads' held-out hits", (rows,)))
    for case in cases:
        case.data["want"] = engine_chain_acceptance(*case.args)
    return cases


def _judge_chain_acceptance(got, case: _Case) -> None:
    rows = case.args[0]
    want, want_expected = case.data["want"]
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        raise _Wrong("return two things, (survival, expected)")
    survival, expected = got
    values = _numbers(survival)
    if values is None:
        raise _Wrong("survival should be a list of shares, one per depth")
    try:
        if isinstance(expected, (bool, str)):
            raise TypeError
        expected = float(expected)
    except (TypeError, ValueError):
        raise _Wrong("expected should be one number") from None
    if not rows:
        if values or expected != 0:
            raise _Wrong("with no held-out rows there is nothing to count: return an empty list and 0")
        return
    n, depths = len(rows), len(rows[0])
    if len(values) == depths + 1 and _close(values[0], 1.0):
        raise _Wrong("one share per depth, from depth 1 to the last (leave out depth 0, which every chain reaches)")
    if len(values) != depths:
        raise _Wrong("survival should have one entry per depth (as many as a row has)")
    if _same_list(values, want):
        if _close(expected, want_expected):
            return
        if _close(expected, want_expected + 1):
            raise _Wrong("that is τ, the tokens per target forward (it adds the target's own token); the "
                         "question is the drafts accepted")
        raise _Wrong("the survival curve is right but the expected accepted drafts is not (it is the sum of "
                     "the survival curve)")
    if _same_list(values, [w * n for w in want]):
        raise _Wrong("it counts rows; return shares of the rows (between 0 and 1)")
    accuracy = [sum(1 for row in rows if row[d]) / n for d in range(depths)]
    if _same_list(values, accuracy):
        raise _Wrong("that is each depth's own accuracy; a chain stops at its first miss, so depth d counts "
                     "only at positions where every depth up to d was right")
    if _same_list(values, [math.prod(accuracy[:d + 1]) for d in range(depths)]):
        raise _Wrong("multiplying the depths' accuracies assumes they miss independently; count the rows "
                     "where depths 1 to d were all right, at the same position")
    if any(b > a + 1e-12 for a, b in zip(values, values[1:])):
        raise _Wrong("the curve rises somewhere; a chain that accepted d drafts also accepted d − 1")
    raise _Wrong("the shares are wrong (at each depth d, the share of rows whose depths 1 to d were all right)")


def check_chain_acceptance(fn: Callable, hits=None) -> Optional[bool]:
    """fn(hits) -> (survival, expected) of a greedy chain from held-out hits (rows: positions,
    columns: depths), against specviz.train's held-out accounting (summarise_hits); `hits`: the
    notebook's own held-out hits of the heads it trained, checked too."""
    cases = _chain_cases(hits)
    run = ", and your live heads' held-out hits" if hits is not None else ""
    return _run("chain_acceptance", fn, cases, _judge_chain_acceptance, "the training report's held-out accounting",
                run, "hand-built and fixed-seed random hits")


# ---------------------------------------------------------------------------------------------
# notebook 11: where batching kills speculation

def engine_crossover(alpha: float, k: int, costs: dict, draft: dict, batches: list) -> Optional[int]:
    """The first batch size B of `batches` (in increasing order) at which speculation with k
    drafts per row stops paying, or None when it pays at every B. costs[(B, w)]: seconds of one
    target pass over B rows of w tokens; draft[B]: seconds of one draft forward over B rows. A
    speculative step costs costs[(B, k + 1)] + k · draft[B] and brings E = (1 − α^(k+1)) / (1 − α)
    tokens per row; a plain step costs costs[(B, 1)] and brings one (theory.batch_speedup)."""
    for b in sorted(batches):
        if theory.batch_speedup(alpha, k, costs[(b, 1)], costs[(b, k + 1)] + k * draft[b]) < 1:
            return b
    return None


def _crossover_variants() -> dict:
    """Plausible wrong answers, each with what it gets wrong (never the expected value)."""
    def first(alpha, k, costs, draft, batches, speedup, last_paying=False):
        paying = [b for b in sorted(batches) if speedup(alpha, k, costs, draft, b) >= 1]
        losing = [b for b in sorted(batches) if speedup(alpha, k, costs, draft, b) < 1]
        if last_paying:
            return paying[-1] if paying else None
        return losing[0] if losing else None

    def right(a, k, c, d, b):
        return theory.batch_speedup(a, k, c[(b, 1)], c[(b, k + 1)] + k * d[b])

    variants = {
        "the verify pass scores k + 1 tokens per row: the k drafts and the position after them":
            lambda a, k, c, d, b: theory.batch_speedup(a, k, c[(b, 1)], c[(b, max(1, k))] + k * d[b]),
        "drafting is not free: a step also runs the draft k times over the batch":
            lambda a, k, c, d, b: theory.batch_speedup(a, k, c[(b, 1)], c[(b, k + 1)]),
        "not every draft is accepted: a step brings (1 − α^(k+1)) / (1 − α) tokens per row, not k + 1":
            lambda a, k, c, d, b: (k + 1) * c[(b, 1)] / (c[(b, k + 1)] + k * d[b]),
        "a speculative step brings more than one token per row: compare tokens per second, not step times":
            lambda a, k, c, d, b: c[(b, 1)] / (c[(b, k + 1)] + k * d[b]),
    }
    out = {why: (lambda why=why, fn=fn: lambda *args: first(*args, speedup=fn))() for why, fn in variants.items()}
    out["return the first batch size where speculation stops paying, not the last one where it pays"] = \
        lambda *args: first(*args, speedup=right, last_paying=True)
    return out


def _crossover_table(rng, batches, memory_s, per_token_s, draft_share, widths) -> tuple:
    """A cost table of a pass that reads its weights (memory_s) or computes (per_token_s per token),
    whichever is slower, with a little noise, and a draft `draft_share` of the plain pass."""
    costs = {(b, w): max(memory_s, per_token_s * b * w) * rng.uniform(0.97, 1.03) for b in batches for w in widths}
    draft = {b: draft_share * costs[(b, 1)] for b in batches}
    return costs, draft


def _crossover_cases(table=None) -> list:
    batches = [1, 2, 4, 8, 16, 32, 64]
    rng = random.Random(41)
    cases = []
    fixed = [  # (kind, alpha, k, memory-bound seconds, seconds per token, draft share)
        ("a GPU-like pass, flat up to hundreds of tokens", 0.8, 4, 1.0, 0.001, 0.05),
        ("a pass that is compute-bound from the start", 0.7, 4, 0.01, 0.01, 0.1),
        ("every draft accepted (α = 1)", 1.0, 3, 0.5, 0.004, 0.1),
        ("no draft ever accepted (α = 0)", 0.0, 2, 0.5, 0.004, 0.1),
        ("a CPU-like pass, bound by its weights up to a few dozen tokens", 0.8, 4, 0.3, 0.01, 0.3),
        ("one draft per step (k = 1)", 0.9, 1, 0.3, 0.01, 0.2),
    ]
    for kind, alpha, k, memory_s, per_token_s, share in fixed:
        costs, draft = _crossover_table(rng, batches, memory_s, per_token_s, share, range(1, k + 2))
        cases.append(_Case(kind, (alpha, k, costs, draft, batches)))
    for _ in range(40):
        k = rng.randint(1, 7)
        costs, draft = _crossover_table(rng, batches, rng.uniform(0.05, 1.0), 10 ** rng.uniform(-3.5, -1.5),
                                        rng.uniform(0.02, 0.5), range(1, k + 2))
        cases.append(_Case("random cost tables", (round(rng.uniform(0.2, 0.98), 3), k, costs, draft,
                                                  rng.sample(batches, len(batches)))))  # in any order
    if table is not None:
        cases.append(_Case("your own measured table", table))
    for case in cases:
        case.data["want"] = engine_crossover(*case.args)
    return cases


def _judge_crossover(got, case: _Case) -> None:
    want = case.data["want"]
    if got == want and (got is None or (isinstance(got, int) and not isinstance(got, bool))):
        return
    if got is not None and (isinstance(got, bool) or not isinstance(got, int)):
        raise _Wrong("return a batch size (an int from `batches`) or None")
    if got is not None and got not in case.args[4]:
        raise _Wrong("return one of the batch sizes in `batches`")
    for why, variant in _crossover_variants().items():
        if variant(*copy.deepcopy(case.args)) == got:
            raise _Wrong(why)
    if want is None:
        raise _Wrong("speculation pays at every batch size here: return None")
    raise _Wrong("the batch size is wrong (the first B, in increasing order, where E · plain step < speculative "
                 "step)")


def check_crossover(fn: Callable, table: Optional[tuple] = None) -> Optional[bool]:
    """fn(alpha, k, costs, draft, batches) -> the first batch size where speculation stops paying
    (None: it always pays), against engine_crossover (specviz.theory.batch_speedup); `table`: the
    notebook's own (alpha, k, costs, draft, batches), measured on its pair, checked too."""
    cases = _crossover_cases(table)
    run = ", and your own measured cost table" if table is not None else ""
    return _run("crossover", fn, cases, _judge_crossover, "theory.batch_speedup's crossover", run,
                "hand-built and fixed-seed random cost tables")


def check_compute_bound_ratio(answer, k: int = 4) -> Optional[bool]:
    """Notebook 11: what a (k + 1)-token pass costs over a 1-token pass, for many rows, once the
    pass is compute-bound (its cost in proportion to the tokens it feeds)."""
    return _answer(answer, k + 1, tol=0.01, hint="A compute-bound pass costs in proportion to the tokens it feeds.")


# ---------------------------------------------------------------------------------------------
# notebook 0: the two KV caches after a step

def engine_caches_after(committed_before: int, drafted: int, accepted: int) -> tuple:
    """(target cache, draft cache) lengths after a step's crop, as specviz.engine and
    specviz.drafters.model crop them: each keeps every committed token but the last, and the
    draft never read its own last guess."""
    from specviz.render import lessons

    return lessons.caches_after(committed_before, drafted, accepted)


def _cache_cases(rows) -> list:
    fixed = [("a step where every guess is accepted", (20, 4, 4)), ("a step whose first guess is rejected", (20, 4, 0)),
             ("a step with a rejection in the middle", (20, 4, 2)), ("a step with one guess, accepted", (9, 1, 1)),
             ("a step with one guess, rejected", (9, 1, 0)), ("the first step (the prompt read with the guesses)", (6, 4, 3))]
    cases = [_Case(kind, args) for kind, args in fixed]
    rng = random.Random(31)
    for _ in range(30):
        drafted = rng.randint(1, 8)
        cases.append(_Case("random steps", (rng.randint(1, 200), drafted, rng.randint(0, drafted))))
    # the notebook's own run, as the engine cropped it: the steps the question is about (at least
    # one guess, and a closing token of the target's; not a last step that had no room to guess)
    for row in (r for r in rows or () if r["guessed"] and r.get("closed", True)):
        cases.append(_Case("a step of your own run", (row["committed before"], row["guessed"], row["accepted"]),
                           data={"want": (row["target cache after crop"], row["draft cache after crop"])}))
    for case in cases:
        case.data.setdefault("want", engine_caches_after(*case.args))
    return cases


def _judge_caches(got, case: _Case) -> None:
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        raise _Wrong("return two lengths, (target cache, draft cache)")
    target, draft = got
    want_target, want_draft = case.data["want"]
    committed_before, drafted, accepted = case.args
    if target != want_target:
        if target == want_target + 1:
            raise _Wrong("the target's cache holds the last committed token too; it is read next step, not yet")
        if target == committed_before + drafted:
            raise _Wrong("the target's cache keeps the rejected guesses; the crop drops them")
        raise _Wrong("the target's cache length is wrong")
    if draft != want_draft:
        if accepted == drafted and draft == want_draft + 1:
            raise _Wrong("after every guess is accepted the draft model has not read its own last guess")
        raise _Wrong("the draft's cache length is wrong")


def check_caches_after(fn: Callable, rows: Optional[Iterable] = None) -> Optional[bool]:
    """fn(committed_before, drafted, accepted) -> (target cache, draft cache) after the crop, against
    the engine's rule and, given the notebook's table of cache lengths, every step of its run."""
    cases = _cache_cases(list(rows or ()))
    return _run("caches_after", fn, cases, _judge_caches, "the engine's crop", run=_replayed(cases, "step"))
