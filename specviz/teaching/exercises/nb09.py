"""Notebook 9's exercises: latency, the survival curve, serving cost.
"""

from __future__ import annotations

import random
from typing import Callable, Iterable, Optional

from specviz.analysis import theory
from specviz.analysis.metrics import stream_stats
from specviz.render import charts, lessons, race
from specviz.teaching.exercises.checking import (Case, Wrong, check_answer, close, none_expected, number_list, replayed,
    run_cases, same_list, tiny_runs)

# notebook 9: latency, the survival curve, serving cost

def _as_dicts(events) -> list:
    return [e if isinstance(e, dict) else e.to_dict() for e in events]


def engine_stream_waits(events) -> tuple:
    """(ttft, amortised, arrivals) of a run, with the engine's stream accounting
    (specviz.render.race.stream_updates, arrival_gaps and stream_latency, the definitions of
    specviz.analysis.metrics.stream_stats): the run clock at the first visible update; per token after it, the
    update's wait divided by the tokens it brought; per token after it, the wait a reader saw (the
    whole wait for an update's first token, 0 for the others)."""

    events = _as_dicts(events)
    updates = race.stream_updates(events)
    amortised = [(t1 - t0) / n for (t0, _, _), (t1, n, _) in zip(updates, updates[1:]) for _ in range(n)]
    return race.stream_latency(events)["ttft"], amortised, race.arrival_gaps(events)


def _stream(kind: str, times: list, counts: list) -> Case:
    """A hand-built run of k = 5: run_started, then one step_finished per update (elapsed,
    tokens: its accepted drafts and one more, so 1 to 6)."""
    events = [{"kind": "run_started", "method": "spec", "k": 5}]
    for step, (t, n) in enumerate(zip(times, counts)):
        events.append({"kind": "step_finished", "step": step, "k": 5, "drafted": 5, "accepted": n - 1,
                       "evaluated": min(5, n), "emitted_ids": list(range(10 + step, 10 + step + n)),
                       "emitted_texts": ["t"] * n, "elapsed": t, "finish_reason": None})
    events[-1]["finish_reason"] = "length"
    return Case(kind, (events,))


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
    for kind, events in tiny_runs().items():
        cases.append(Case(kind, (events,)))
    for i, events in enumerate(runs or []):
        cases.append(Case(f"your run {i + 1}", (_as_dicts(events),)))
    for case in cases:
        case.data["want"] = engine_stream_waits(*case.args)
    return cases


def _judge_list(name: str, got, want: list, updates: list, arrivals: bool) -> None:
    """One of the two per-token lists of stream_waits, against the engine's."""
    values = number_list(got)
    if values is None:
        raise Wrong(f"return {name} as a list of seconds (numbers)")
    if same_list(values, want):
        return
    waits = [(t1 - t0, n) for (t0, _, _), (t1, n, _) in zip(updates, updates[1:])]
    if len(values) != len(want):
        if updates and len(values) == len(want) + updates[0][1]:
            raise Wrong(f"{name} has entries for the first update's tokens; they arrived at TTFT, the list "
                         "starts with the second update")
        if len(values) == len(waits):
            raise Wrong(f"{name} has one entry per update; it needs one per token (an update of n tokens "
                         "gives n entries)")
        raise Wrong(f"{name} has the wrong length (one entry per token after the first update)")
    whole = [gap for gap, n in waits for _ in range(n)]
    shared = [gap / n for gap, n in waits for _ in range(n)]
    zeros_first = [g for gap, n in waits for g in [0.0] * (n - 1) + [gap]]
    since_first = [(t - updates[0][0], n) for t, n, _ in updates[1:]]  # from the first update, not the one before
    if (same_list(values, [wait for wait, n in since_first for _ in range(n)])
            or same_list(values, [wait / n for wait, n in since_first for _ in range(n)])):
        raise Wrong(f"{name} measures each wait from the first update; a wait is the time since the update "
                     "before it")
    if arrivals:
        if same_list(values, shared):
            raise Wrong("arrivals shares each wait among the update's tokens; a reader waits the whole gap for "
                         "an update's first token and nothing for the others")
        if same_list(values, whole):
            raise Wrong("arrivals gives every token of an update the whole wait; the others arrive with the "
                         "first one (a wait of 0)")
        if same_list(values, zeros_first):
            raise Wrong("arrivals puts the update's wait on its last token; it belongs to the first one")
    else:
        if same_list(values, whole):
            raise Wrong("amortised gives every token of an update the whole wait; each gets the wait divided "
                         "by the tokens the update brought")
        if same_list(values, zeros_first) or same_list(values, [g for gap, n in waits
                                                                  for g in [gap] + [0.0] * (n - 1)]):
            raise Wrong("amortised is the arrival gaps; it shares an update's wait equally among its tokens")
    if same_list(sorted(values), sorted(want)):
        raise Wrong(f"{name} is not in the order the tokens arrived")
    decode = updates[-1][0] - updates[0][0] if updates else 0.0
    if not close(sum(values), decode, rel=1e-6, abs_=1e-9):
        raise Wrong(f"the entries of {name} do not add up to the decode time (the last update's time minus "
                     "TTFT)")
    raise Wrong(f"{name} is wrong")


def _judge_stream_waits(got, case: Case) -> None:
    ttft_want, amortised, arrivals = case.data["want"]
    if not isinstance(got, (tuple, list)) or len(got) != 3:
        raise Wrong("return a triple (ttft, amortised, arrivals)")
    ttft, got_amortised, got_arrivals = got
    updates = race.stream_updates(case.args[0])
    if ttft_want is None:
        if ttft is not None:
            raise Wrong("TTFT must be None when no step emitted a token")
    elif isinstance(ttft, bool) or not isinstance(ttft, (int, float)):
        raise Wrong("TTFT should be a number of seconds")
    elif not close(ttft, ttft_want):
        if ttft == 0:
            raise Wrong("TTFT is the run clock at the first update (the prefill plus the first step), not zero")
        if len(updates) > 1 and close(ttft, updates[1][0] - updates[0][0]):
            raise Wrong("TTFT is the time of the first update since the run started, not the wait after it")
        raise Wrong("TTFT is wrong (the `elapsed` of the first step that emitted tokens)")
    _judge_list("amortised", got_amortised, amortised, updates, arrivals=False)
    _judge_list("arrivals", got_arrivals, arrivals, updates, arrivals=True)


def check_stream_waits(fn: Callable, runs: Optional[Iterable] = None) -> Optional[bool]:
    """fn(events) -> (ttft, amortised, arrivals) of a run's stream, against the engine's
    (engine_stream_waits: specviz.render.race, the definitions of specviz.analysis.metrics.stream_stats); `runs`:
    event lists of the notebook's own runs, checked too."""
    cases = _stream_cases(runs)
    return run_cases("stream_waits", fn, cases, _judge_stream_waits, "the engine's stream accounting",
                replayed(cases, "run"), "hand-built streams, random streams and runs of the tiny pair")


def check_amortised_itl(answer) -> Optional[bool]:
    """Notebook 9: the amortised latency of each of 4 tokens shown 520 ms after the update before."""

    return check_answer(answer, stream_stats([0.0, 0.52], [1, 4])["itl_p50"] * 1000, tol=0.5,
                   hint="The update's wait, shared by the tokens it brought.")


def engine_survival(events, k: int) -> Optional[list]:
    """The engine's survival curve (specviz.render.charts.acceptance_survival) of a run's
    step_finished events with draft length k: P(accepted length >= i), i = 0..k, over the steps
    that drafted all k tokens; None when none did."""

    steps = [e for e in _as_dicts(events) if e["kind"] == "step_finished"]
    # the curve needs only k and the steps; an empty run_finished spares folding the run's metrics
    # (hand-built steps carry no clocks), which only the curve's alpha would use
    surv = charts.acceptance_survival([{"kind": "run_started", "method": "spec", "k": k}] + steps
                                      + [{"kind": "run_finished", "metrics": {}}])
    return None if surv is None else surv["survival"]


def _steps_case(kind: str, k: int, steps: list) -> Case:
    """A hand-built chain run with draft length k: (drafted, accepted) per step."""
    events = [{"kind": "run_started", "method": "spec", "k": k}]
    for i, (drafted, accepted) in enumerate(steps):
        n = accepted + 1  # its accepted drafts and the residual or bonus token
        events.append({"kind": "step_finished", "step": i, "k": k, "drafted": drafted, "accepted": accepted,
                       "evaluated": min(drafted, accepted + 1), "emitted_ids": list(range(n)),
                       "emitted_texts": ["t"] * n, "elapsed": 0.1 * (i + 1), "finish_reason": None})
    if len(events) > 1:
        events[-1]["finish_reason"] = "length"
    return Case(kind, (events, k))


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
    for kind, events in tiny_runs().items():
        started = events[0]
        if started["method"] in ("spec", "pld") and isinstance(started["k"], int):
            cases.append(Case(kind, (events, started["k"])))
    for i, events in enumerate(runs or []):
        events = _as_dicts(events)
        started = next((e for e in events if e["kind"] == "run_started"), {})
        if isinstance(started.get("k"), int) and started.get("method") in ("spec", "pld", "cascade"):
            cases.append(Case(f"your run {i + 1}", (events, started["k"])))
    for case in cases:
        case.data["want"] = engine_survival(*case.args)
    return cases


def _judge_survival(got, case: Case) -> None:
    events, k = case.args
    want = case.data["want"]
    if none_expected(got, want, "return None when no step drafted all k tokens (there is nothing to count)",
                     "it returns None although some steps drafted all k tokens"):
        return
    values = number_list(got)
    if values is None:
        raise Wrong("return a list of k + 1 shares, P(L ≥ 0) to P(L ≥ k)")
    if same_list(values, want):
        return
    if len(values) == k:
        raise Wrong("the list starts at depth 0: P(L ≥ 0) = 1 (every step gets that far), so it has k + 1 "
                     "entries")
    if len(values) != k + 1:
        raise Wrong("the list should have k + 1 entries, one per depth from 0 to k")
    steps = [e for e in events if e["kind"] == "step_finished"]
    full = [e["accepted"] for e in steps if e["drafted"] == k]
    if same_list(values, [float(sum(1 for a in full if a >= i)) for i in range(k + 1)]):
        raise Wrong("it counts steps; return shares of the steps that drafted all k (between 0 and 1)")
    if same_list(values, [sum(1 for a in full if a == i) / len(full) for i in range(k + 1)]):
        raise Wrong("that is P(L = i); the curve counts the steps that got at least i drafts deep")
    if same_list(values, [sum(1 for e in steps if e["accepted"] >= i) / len(steps) for i in range(k + 1)]):
        raise Wrong("it counts steps that drafted fewer than k tokens; only steps that drafted all k say how "
                     "deep a step can get")
    judged = sum(e["evaluated"] for e in steps)
    if judged and same_list(values, [(sum(e["accepted"] for e in steps) / judged) ** i for i in range(k + 1)]):
        raise Wrong("α^i is what independent acceptance predicts; the curve counts what the steps did")
    if any(b > a + 1e-12 for a, b in zip(values, values[1:])):
        raise Wrong("the curve rises somewhere; a step that got i drafts deep also got i − 1 deep")
    raise Wrong("the shares are wrong (the share of full steps with accepted ≥ i at each depth i)")


def check_survival(fn: Callable, runs: Optional[Iterable] = None) -> Optional[bool]:
    """fn(events, k) -> [P(L >= 0), ..., P(L >= k)] over the steps that drafted all k tokens (None
    when none did), against specviz.render.charts.acceptance_survival; `runs`: event lists of the
    notebook's own fixed-k runs, checked too."""
    cases = _survival_cases(runs)
    return run_cases("survival_curve", fn, cases, _judge_survival, "the engine's acceptance_survival",
                replayed(cases, "run"), "hand-built runs, random runs and runs of the tiny pair")


def check_share_at_depth(answer) -> Optional[bool]:
    """Notebook 9: P(L >= 3) under independent acceptance at α = 0.8."""
    # τ(k) = 1 + α + ... + α^k (theory.expected_tokens), so α^3 = τ(3) − τ(2)
    return check_answer(answer, theory.expected_tokens(0.8, 3) - theory.expected_tokens(0.8, 2), tol=0.005,
                   hint="P(L ≥ i) = α^i.")


def t_half_width(values: list, level: float = 0.95) -> float:
    """Half the width of Student's t interval of the mean of `values`: t(n − 1) · s / √n."""
    import statistics

    from scipy import stats

    n = len(values)
    return float(stats.t.ppf((1 + level) / 2, n - 1) * statistics.stdev(values) / n ** 0.5)


def check_half_width(answer, grid: list) -> Optional[bool]:
    """Notebook 9: the half-width of the 95% t-interval of the mean τ over the runs of `grid`."""
    return check_answer(answer, t_half_width([r["tau"] for r in grid]), tol=1e-3,
                   hint="taus = [r['tau'] for r in grid]; then t · s / √n with s = statistics.stdev(taus).")


def _cost_cases() -> list:
    fixed = [
        ("a machine at 2 per hour making 20 tokens/s", 20, 2.0),
        ("a slow machine (half a token per second)", 0.5, 3.0),
        ("a fast machine (a thousand tokens/s)", 1000, 2.5),
        ("one token per second at 1 per hour", 1, 1.0),
        ("a free machine (price 0)", 12, 0.0),
        ("a run that made no tokens (tokens_per_s = 0)", 0, 1.0),
        ("no speed measured (tokens_per_s = None)", None, 1.0),
    ]
    cases = [Case(kind, (speed, price)) for kind, speed, price in fixed]
    rng = random.Random(29)
    for _ in range(40):
        cases.append(Case("random speeds and prices", (10 ** rng.uniform(-1, 3), round(rng.uniform(0.1, 40), 2))))
    for case in cases:
        case.data["want"] = lessons.cost_per_million(*case.args)
    return cases


def _judge_cost(got, case: Case) -> None:
    want = case.data["want"]
    if none_expected(got, want, "return None when there is no speed: nothing was made, so there is no cost per token",
                     "it returns None for a real speed"):
        return
    if isinstance(got, bool) or not isinstance(got, (int, float)):
        raise Wrong("return the cost as a number")
    if close(got, want, rel=1e-6):
        return
    if want and close(got, want / 1e6, rel=1e-6):
        raise Wrong("that is the cost of one token; the question is per million tokens")
    if want and close(got, want * 3600, rel=1e-6):
        raise Wrong("it divides a price per hour by a speed per second (an hour has 3600 seconds)")
    if want and close(got, 1 / want, rel=1e-6):
        raise Wrong("it is upside down: that is millions of tokens per unit of price, not the price of a "
                     "million tokens")
    raise Wrong("the cost is wrong (the price of the time a million tokens take)")


def check_cost(fn: Callable) -> Optional[bool]:
    """fn(tokens_per_s, price_per_hour) -> cost per million tokens (None without a speed), against
    specviz.render.lessons.cost_per_million."""
    return run_cases("cost_per_million", fn, _cost_cases(), _judge_cost, "the engine's lessons.cost_per_million")


def check_cost_by_hand(answer) -> Optional[bool]:
    """Notebook 9: a million tokens at 20 tokens/s on a machine rented at 2.0 per hour."""

    return check_answer(answer, lessons.cost_per_million(20, 2.0), tol=0.05, hint="price / (tokens/s × 3600) × 10⁶")
