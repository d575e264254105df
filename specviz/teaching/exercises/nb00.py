"""Notebook 0's exercise: the two KV caches after a step.
"""

from __future__ import annotations

import random
from typing import Callable, Iterable, Optional

from specviz.render import lessons
from specviz.teaching.exercises.checking import Case, Wrong, replayed, run_cases

# notebook 0: the two KV caches after a step

def engine_caches_after(committed_before: int, drafted: int, accepted: int) -> tuple:
    """(target cache, draft cache) lengths after a step's crop, as specviz.engine.sequence and
    specviz.drafters.model crop them: each keeps every committed token but the last, and the
    draft never read its own last guess."""

    return lessons.caches_after(committed_before, drafted, accepted)


def _cache_cases(rows) -> list:
    fixed = [("a step where every guess is accepted", (20, 4, 4)), ("a step whose first guess is rejected", (20, 4, 0)),
             ("a step with a rejection in the middle", (20, 4, 2)), ("a step with one guess, accepted", (9, 1, 1)),
             ("a step with one guess, rejected", (9, 1, 0)), ("the first step (the prompt read with the guesses)", (6, 4, 3))]
    cases = [Case(kind, args) for kind, args in fixed]
    rng = random.Random(31)
    for _ in range(30):
        drafted = rng.randint(1, 8)
        cases.append(Case("random steps", (rng.randint(1, 200), drafted, rng.randint(0, drafted))))
    # the notebook's own run, as the engine cropped it: the steps the question is about (at least
    # one guess, and a closing token of the target's; not a last step that had no room to guess)
    for row in (r for r in rows or () if r["guessed"] and r.get("closed", True)):
        cases.append(Case("a step of your own run", (row["committed before"], row["guessed"], row["accepted"]),
                           data={"want": (row["target cache after crop"], row["draft cache after crop"])}))
    for case in cases:
        case.data.setdefault("want", engine_caches_after(*case.args))
    return cases


def _judge_caches(got, case: Case) -> None:
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        raise Wrong("return two lengths, (target cache, draft cache)")
    target, draft = got
    want_target, want_draft = case.data["want"]
    committed_before, drafted, accepted = case.args
    if target != want_target:
        if target == want_target + 1:
            raise Wrong("the target's cache holds the last committed token too; it is read next step, not yet")
        if target == committed_before + drafted:
            raise Wrong("the target's cache keeps the rejected guesses; the crop drops them")
        raise Wrong("the target's cache length is wrong")
    if draft != want_draft:
        if accepted == drafted and draft == want_draft + 1:
            raise Wrong("after every guess is accepted the draft model has not read its own last guess")
        raise Wrong("the draft's cache length is wrong")


def check_caches_after(fn: Callable, rows: Optional[Iterable] = None) -> Optional[bool]:
    """fn(committed_before, drafted, accepted) -> (target cache, draft cache) after the crop, against
    the engine's rule and, given the notebook's table of cache lengths, every step of its run."""
    cases = _cache_cases(list(rows or ()))
    return run_cases("caches_after", fn, cases, _judge_caches, "the engine's crop", run=replayed(cases, "step"))
