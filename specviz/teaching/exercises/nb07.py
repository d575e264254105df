"""Notebook 7's exercises: the heuristic k rule, and the break-even acceptance.
"""

from __future__ import annotations

import random
from typing import Callable, Iterable, Optional

from specviz.analysis import theory
from specviz.engine.adaptive import AdaptiveK
from specviz.teaching.exercises.checking import Case, Wrong, check_answer, replayed, run_cases

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
    cases = [Case(kind, (k, d, a), {"k_max": m}) for kind, k, d, a, m in fixed]
    rng = random.Random(7)
    for _ in range(100):
        k_max = rng.randint(1, 16)
        k = rng.randint(1, k_max)
        drafted = rng.randint(0, k)
        accepted = drafted if rng.random() < 0.4 else rng.randint(0, drafted)
        cases.append(Case("random steps", (k, drafted, accepted), {"k_max": k_max}))
    for step in _auto_steps(events or []):
        cases.append(Case(f"step {step['step'] + 1} of your k = auto run",
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


def _judge_next_k(got, case: Case) -> None:
    k, drafted, accepted = case.args
    k_max = case.kwargs["k_max"]
    want = case.data["next"]
    if isinstance(got, bool) or not isinstance(got, int):
        raise Wrong("return the next k as an int")
    if got == want:
        return
    if got > k_max:
        raise Wrong("k goes above k_max")
    if got < 1:
        raise Wrong("k falls below 1")
    if drafted == 0:
        raise Wrong("k should not change after a step that drafted nothing (it says nothing about the drafts)")
    if accepted == drafted:
        raise Wrong("wrong after a step that accepted everything it drafted (a full accept: + 2, at most k_max)")
    raise Wrong("wrong after a step with a rejection (- 1, at least 1)")


def check_next_k(fn: Callable, events: Optional[Iterable] = None) -> Optional[bool]:
    """fn(k, drafted, accepted, k_max=12) -> next k, against AdaptiveK("heuristic"); with `events` of
    a k="auto", auto_rule="heuristic" run, also the k the engine chose at every step of it."""
    cases = _next_k_cases(events)
    return run_cases("next_k", fn, cases, _judge_next_k, "the engine's AdaptiveK (heuristic)", replayed(cases, "step"))


def break_even(c: float) -> float:
    """Smallest alpha (to 0.005) for which theory.optimal_k(alpha, c) > 0."""
    return next((a / 200 for a in range(200) if theory.optimal_k(a / 200, c) > 0), 1.0)


def check_break_even(answer) -> Optional[bool]:
    """Notebook 7: the α below which no k ≥ 1 pays at c = 0.4."""
    return check_answer(answer, break_even(0.4), tol=0.011, hint="With k = 1, speedup = (1 + α) / (1 + c).")
