"""Speculative sampling is lossless: with exact toy models, the joint law of the first three
emitted tokens equals the target's exact joint (chi-square, fixed seeds). Broken rules must fail
the very same test, which shows the test has the power to catch them."""

import pytest
import torch
from scipy.stats import chisquare

from specviz import generate
from specviz.analysis import metrics
from specviz.config import Warp
from specviz.teaching.toy import TableLM, exact_joint, random_table, toy_pair
from specviz.verifiers import sampling
from specviz.verifiers.exact import RejectionVerifier

V, N_TOKENS, RUNS = 4, 3, 12_000


class ResampleFromTarget(RejectionVerifier):
    """Broken: after a rejection, draws from p instead of the residual norm(max(p - q, 0))."""

    def residual(self, p, q):
        return p, 0.0


class AcceptIfArgmax(RejectionVerifier):
    """Broken: accepts a sampled draft iff it is the target's argmax, else resamples from p."""

    def accept_probability(self, p, q, x):
        return float(x == int(torch.argmax(p)))

    def residual(self, p, q):
        return p, 0.0


@pytest.fixture(scope="module")
def toy():
    target = TableLM(random_table(V, 2, seed=11, sharpness=1.5), order=2)
    draft = TableLM(random_table(V, 2, seed=12, sharpness=1.5), order=2)
    return toy_pair(target, draft)


def _first_tokens(pair, warp: Warp, verifier=None, runs=RUNS, k=2, method="spec", prompt=(0,), make_drafter=None,
                  **kw):
    """`make_drafter(seed)`: a drafter of each run's own in place of the method's (a broken one)."""
    counts, runs_events = {}, []
    for seed in range(runs):
        events = list(generate(pair, list(prompt), method=method, k=k, temperature=warp.temperature,
                               top_k=warp.top_k, top_p=warp.top_p, max_new_tokens=N_TOKENS, seed=seed,
                               record_topk=0, verifier=verifier,
                               **({"drafter": make_drafter(seed)} if make_drafter else {}), **kw))
        key = tuple(events[-1].token_ids[:N_TOKENS])
        counts[key] = counts.get(key, 0) + 1
        runs_events.append(events)
    return counts, runs_events


def _p_value(counts, joint, runs):
    """Pearson chi-square of observed counts against the exact joint (cells below 5 merged)."""
    cells = sorted(joint, key=joint.get)
    observed, expected, small_obs, small_exp = [], [], 0, 0.0
    for cell in cells:
        e = joint[cell] * runs
        if e < 5:
            small_obs += counts.get(cell, 0)
            small_exp += e
        else:
            observed.append(counts.get(cell, 0))
            expected.append(e)
    if small_exp:
        observed.append(small_obs)
        expected.append(small_exp)
    total = sum(expected)  # the float32 tables sum to 1 within rounding only
    expected = [e * sum(observed) / total for e in expected]
    return chisquare(observed, expected).pvalue


def _target_joint(pair, warp: Warp, prompt=(0,)):
    model = pair.target
    return exact_joint(model, list(prompt), N_TOKENS,
                       probs_fn=lambda ctx: sampling.warp(model.logits_after(ctx), warp))


@pytest.mark.parametrize("warp", [Warp(1.0), Warp(1.0, top_p=0.8), Warp(0.7, top_k=3)],
                         ids=["T1", "T1-top_p0.8", "T0.7-top_k3"])
def test_joint_of_first_tokens_matches_target(toy, warp):
    counts, runs = _first_tokens(toy, warp)
    assert _p_value(counts, _target_joint(toy, warp), RUNS) > 1e-4
    # the draft is really different from the target: some drafts were rejected
    stats = [metrics.fold(events) for events in runs]
    assert 0.1 < sum(s.accepted for s in stats) / sum(s.evaluated for s in stats) < 0.95


@pytest.mark.parametrize("broken", [ResampleFromTarget(), AcceptIfArgmax()], ids=["resample-from-p", "accept-if-argmax"])
def test_broken_rules_fail_the_same_test(toy, broken):
    warp = Warp(1.0)
    counts, _ = _first_tokens(toy, warp, verifier=broken)
    assert _p_value(counts, _target_joint(toy, warp), RUNS) < 1e-4


def test_empirical_alpha_matches_analytic(toy):
    """accepted / evaluated estimates the mean of beta = sum min(p, q) at the judged positions."""
    _, runs = _first_tokens(toy, Warp(1.0), runs=4000, k=3)
    stats = [metrics.fold(events) for events in runs]
    evaluated = sum(s.evaluated for s in stats)
    empirical = sum(s.accepted for s in stats) / evaluated
    analytic = sum(s.alpha_analytic * s.evaluated for s in stats) / evaluated
    stderr = (analytic * (1 - analytic) / evaluated) ** 0.5
    assert abs(empirical - analytic) < 4 * stderr
    # and accepted/drafted is lower than alpha: drafts after a rejection are never judged
    drafted = sum(s.drafted for s in stats)
    assert sum(s.accepted for s in stats) / drafted < empirical - 0.02
