"""Notebook 11's exercises: where batching kills speculation.
"""

from __future__ import annotations

import copy
import random
from typing import Callable, Optional

from specviz.analysis import theory
from specviz.teaching.exercises.checking import Case, Wrong, check_answer, run_cases

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
        cases.append(Case(kind, (alpha, k, costs, draft, batches)))
    for _ in range(40):
        k = rng.randint(1, 7)
        costs, draft = _crossover_table(rng, batches, rng.uniform(0.05, 1.0), 10 ** rng.uniform(-3.5, -1.5),
                                        rng.uniform(0.02, 0.5), range(1, k + 2))
        cases.append(Case("random cost tables", (round(rng.uniform(0.2, 0.98), 3), k, costs, draft,
                                                  rng.sample(batches, len(batches)))))  # in any order
    if table is not None:
        cases.append(Case("your own measured table", table))
    for case in cases:
        case.data["want"] = engine_crossover(*case.args)
    return cases


def _judge_crossover(got, case: Case) -> None:
    want = case.data["want"]
    if got == want and (got is None or (isinstance(got, int) and not isinstance(got, bool))):
        return
    if got is not None and (isinstance(got, bool) or not isinstance(got, int)):
        raise Wrong("return a batch size (an int from `batches`) or None")
    if got is not None and got not in case.args[4]:
        raise Wrong("return one of the batch sizes in `batches`")
    for why, variant in _crossover_variants().items():
        if variant(*copy.deepcopy(case.args)) == got:
            raise Wrong(why)
    if want is None:
        raise Wrong("speculation pays at every batch size here: return None")
    raise Wrong("the batch size is wrong (the first B, in increasing order, where E · plain step < speculative "
                 "step)")


def check_crossover(fn: Callable, table: Optional[tuple] = None) -> Optional[bool]:
    """fn(alpha, k, costs, draft, batches) -> the first batch size where speculation stops paying
    (None: it always pays), against engine_crossover (specviz.analysis.theory.batch_speedup); `table`: the
    notebook's own (alpha, k, costs, draft, batches), measured on its pair, checked too."""
    cases = _crossover_cases(table)
    run = ", and your own measured cost table" if table is not None else ""
    return run_cases("crossover", fn, cases, _judge_crossover, "theory.batch_speedup's crossover", run,
                "hand-built and fixed-seed random cost tables")


def check_compute_bound_ratio(answer, k: int = 4) -> Optional[bool]:
    """Notebook 11: what a (k + 1)-token pass costs over a 1-token pass, for many rows, once the
    pass is compute-bound (its cost in proportion to the tokens it feeds)."""
    return check_answer(answer, k + 1, tol=0.01, hint="A compute-bound pass costs in proportion to the tokens it feeds.")
