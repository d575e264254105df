"""Notebook 4's exercises: the lab exercise (section 3: the expected accepted / drafted) and the
homework (section 6: the best draft length; alpha and tau from a run's events).
"""

from __future__ import annotations

import math
from typing import Callable, Iterable, Optional

from specviz.analysis import metrics, theory
from specviz.teaching.exercises.checking import Case, Wrong, check_answer, replayed, run_cases, tiny_runs


def _alpha_tau_cases(runs=None) -> list:
    cases = []
    tiny = tiny_runs()
    for kind, events in tiny.items():
        cases.append(Case(kind, (events,)))
    greedy = tiny["a greedy chain run (k = 4)"]
    cases.append(Case("only a run's step_finished events", ([e for e in greedy if e["kind"] == "step_finished"],)))
    cases.append(Case("a run that ends on an accepted end-of-text draft (no token after it)",
                       (_ended_on_eos(greedy),)))
    for i, events in enumerate(runs or []):
        events = [e if isinstance(e, dict) else e.to_dict() for e in events]
        cases.append(Case(f"your run {i + 1}", (events,)))
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


def _judge_alpha_tau(got, case: Case) -> None:
    stats = case.data["stats"]
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        raise Wrong("return a pair (alpha, tau)")
    alpha, tau = got
    def close(a, b) -> bool:
        return a is not None and b is not None and math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)

    if stats.alpha_empirical is None:
        if alpha is not None:
            raise Wrong("α must be None when the rule judged no draft at all")
    elif alpha is None:
        raise Wrong("α is None although the rule judged drafts")
    elif not isinstance(alpha, (int, float)) or not close(alpha, stats.alpha_empirical):
        if isinstance(alpha, (int, float)) and stats.drafted and close(alpha, stats.accepted / stats.drafted):
            raise Wrong("α divides by every drafted token, but drafts after a rejection are never judged")
        if isinstance(alpha, (int, float)) and close(alpha, stats.alpha_analytic):
            raise Wrong("α should count the rule's decisions (accepted / judged), not average β")
        raise Wrong("α is wrong")
    if not isinstance(tau, (int, float)) or not close(tau, stats.tau):
        forwards = stats.target_forwards
        if isinstance(tau, (int, float)) and forwards and close(tau, (stats.new_tokens - stats.steps) / forwards):
            raise Wrong("τ leaves out the token every step ends with (the residual or the bonus)")
        if isinstance(tau, (int, float)) and forwards and close(tau, stats.accepted / forwards):
            raise Wrong("τ counts only accepted drafts, not every new token")
        if isinstance(tau, (int, float)) and forwards and close(tau, (stats.accepted + stats.steps) / forwards):
            raise Wrong("τ assumes every step emits one token after its accepted drafts; count the tokens "
                         "each step emitted (none follows an accepted end-of-text)")
        raise Wrong("τ is wrong (new tokens per target forward)")


def check_alpha_tau(fn: Callable, runs: Optional[Iterable] = None) -> Optional[bool]:
    """Notebook 4, homework exercise 2: fn(events) -> (alpha, tau) from a run's events (dicts),
    against metrics.fold; `runs`: event lists of the notebook's own runs, checked too."""
    cases = _alpha_tau_cases(runs)
    return run_cases("alpha_tau", fn, cases, _judge_alpha_tau, "the engine's metrics.fold", replayed(cases, "run"),
                "runs of the tiny pair: greedy, sampled, autoregressive, prompt lookup, tree, k = auto")


def check_best_k(answer) -> Optional[bool]:
    """Notebook 4, homework exercise 1: the best draft length at α = 0.6, c = 0.4 (V(k + 1) = 1)."""
    return check_answer(answer, theory.optimal_k(0.6, 0.4),
                   hint="Evaluate theory.speedup(0.6, k, 0.4) for several k and keep the best.")


def check_accepted_per_drafted(answer) -> Optional[bool]:
    """Notebook 4, the lab exercise: expected accepted / drafted at α = 0.8, k = 4."""
    return check_answer(answer, theory.accepted_per_drafted(0.8, 4), tol=0.005,
                   hint="(expected accepted per step) / k, with expected accepted = α + α² + α³ + α⁴.")
