"""Notebook 10's exercise: what held-out hits say about a greedy chain.
"""

from __future__ import annotations

import math
import random
from typing import Callable, Optional

import torch

from specviz.teaching.exercises.checking import Case, Wrong, close, number_list, run_cases, same_list

# notebook 10: what held-out hits say about a greedy chain

def engine_chain_acceptance(hits) -> tuple:
    """(survival, expected) of a greedy chain from held-out hits, as specviz.training.trainer.summarise_hits
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
    cases = [Case(kind, (rows,)) for kind, rows in fixed]
    rng = random.Random(31)
    for _ in range(50):
        depths, n = rng.randint(1, 6), rng.randint(1, 40)
        rows = []
        for _ in range(n):  # an easy or a hard position: depths tend to be right or wrong together
            easy = rng.random() < 0.5
            rows.append([rng.random() < (0.85 if easy else 0.25) for _ in range(depths)])
        cases.append(Case("random held-out hits (depths that succeed together more often than by chance)",
                           (rows,)))
    if hits is not None:
        rows = [[bool(x) for x in row] for row in (hits.tolist() if hasattr(hits, "tolist") else hits)]
        cases.append(Case("your live heads' held-out hits", (rows,)))
    for case in cases:
        case.data["want"] = engine_chain_acceptance(*case.args)
    return cases


def _judge_chain_acceptance(got, case: Case) -> None:
    rows = case.args[0]
    want, want_expected = case.data["want"]
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        raise Wrong("return two things, (survival, expected)")
    survival, expected = got
    values = number_list(survival)
    if values is None:
        raise Wrong("survival should be a list of shares, one per depth")
    try:
        if isinstance(expected, (bool, str)):
            raise TypeError
        expected = float(expected)
    except (TypeError, ValueError):
        raise Wrong("expected should be one number") from None
    if not rows:
        if values or expected != 0:
            raise Wrong("with no held-out rows there is nothing to count: return an empty list and 0")
        return
    n, depths = len(rows), len(rows[0])
    if len(values) == depths + 1 and close(values[0], 1.0):
        raise Wrong("one share per depth, from depth 1 to the last (leave out depth 0, which every chain reaches)")
    if len(values) != depths:
        raise Wrong("survival should have one entry per depth (as many as a row has)")
    if same_list(values, want):
        if close(expected, want_expected):
            return
        if close(expected, want_expected + 1):
            raise Wrong("that is τ, the tokens per target forward (it adds the target's own token); the "
                         "question is the drafts accepted")
        raise Wrong("the survival curve is right but the expected accepted drafts is not (it is the sum of "
                     "the survival curve)")
    if same_list(values, [w * n for w in want]):
        raise Wrong("it counts rows; return shares of the rows (between 0 and 1)")
    accuracy = [sum(1 for row in rows if row[d]) / n for d in range(depths)]
    if same_list(values, accuracy):
        raise Wrong("that is each depth's own accuracy; a chain stops at its first miss, so depth d counts "
                     "only at positions where every depth up to d was right")
    if same_list(values, [math.prod(accuracy[:d + 1]) for d in range(depths)]):
        raise Wrong("multiplying the depths' accuracies assumes they miss independently; count the rows "
                     "where depths 1 to d were all right, at the same position")
    if any(b > a + 1e-12 for a, b in zip(values, values[1:])):
        raise Wrong("the curve rises somewhere; a chain that accepted d drafts also accepted d − 1")
    raise Wrong("the shares are wrong (at each depth d, the share of rows whose depths 1 to d were all right)")


def check_chain_acceptance(fn: Callable, hits=None) -> Optional[bool]:
    """fn(hits) -> (survival, expected) of a greedy chain from held-out hits (rows: positions,
    columns: depths), against specviz.training.train's held-out accounting (summarise_hits); `hits`: the
    notebook's own held-out hits of the heads it trained, checked too."""
    cases = _chain_cases(hits)
    run = ", and your live heads' held-out hits" if hits is not None else ""
    return run_cases("chain_acceptance", fn, cases, _judge_chain_acceptance, "the training report's held-out accounting",
                run, "hand-built and fixed-seed random hits")
