"""Closed forms against hand values and against simulation of iid acceptance."""

import random

import pytest

from specviz.analysis import theory


def test_expected_tokens_and_speedup_hand_values():
    assert theory.expected_tokens(0.5, 3) == pytest.approx(1.875)
    assert theory.expected_tokens(1.0, 4) == 5.0
    assert theory.expected_tokens(0.0, 4) == 1.0
    assert theory.speedup(0.8, 4, 0.1) == pytest.approx((1 - 0.8 ** 5) / 0.2 / 1.4)
    flat = theory.speedup_with_cost(0.8, 4, 0.1, lambda n: 1.0)
    assert flat == pytest.approx(theory.speedup(0.8, 4, 0.1))


def test_accepted_per_drafted_and_alpha_from_tau():
    assert theory.accepted_per_drafted(0.5, 2) == pytest.approx(0.5 * 0.75 / 1.0)
    for a in (0.1, 0.5, 0.9):
        for k in (1, 4, 8):
            assert theory.alpha_from_tau(theory.expected_tokens(a, k), k) == pytest.approx(a, abs=1e-8)
    with pytest.raises(ValueError):
        theory.alpha_from_tau(7.0, 4)


def test_alpha_needed_is_the_speedup_formula_inverted():
    curve = theory.interpolate_cost([(1, 1.0), (2, 1.5), (4, 2.5), (8, 6.0)])
    for a in (0.3, 0.6, 0.9):
        for k, c, fw in ((1, 0.1, None), (3, 0.2, None), (3, 0.6, 1), (7, 0.05, None)):
            s = theory.expected_tokens(a, k) / (c * (k if fw is None else fw) + curve(k + 1))
            assert theory.alpha_needed(s, k, c, curve, forwards=fw) == pytest.approx(a, abs=1e-8)
    # hand value: V(4) = 2.5, c = 0.25, k = 3: a perfect drafter makes 4 / (0.75 + 2.5) = 1.23x
    assert theory.alpha_needed(4 / 3.25, 3, 0.25, curve) == pytest.approx(1.0, abs=1e-8)
    assert theory.alpha_needed(1.24, 3, 0.25, curve) is None  # out of reach at any acceptance
    assert theory.alpha_needed(0.1, 3, 0.25, curve) == pytest.approx(0.0, abs=1e-8)  # even a drafter never accepted is fast enough


def test_closed_forms_match_simulation():
    rng, a, k, steps = random.Random(1), 0.7, 4, 200_000
    tokens = accepted = 0
    for _ in range(steps):
        n = 0
        while n < k and rng.random() < a:
            n += 1
        accepted += n
        tokens += n + 1
    assert tokens / steps == pytest.approx(theory.expected_tokens(a, k), rel=0.01)
    assert accepted / (steps * k) == pytest.approx(theory.accepted_per_drafted(a, k), rel=0.01)


def test_optimal_k():
    assert theory.optimal_k(0.0, 0.1) == 0  # nothing is ever accepted: do not speculate
    assert theory.optimal_k(0.9, 0.05) > theory.optimal_k(0.6, 0.05) > 0
    cost = theory.interpolate_cost([(1, 0.18), (5, 0.19), (16, 0.23)])
    assert cost(1) == 1.0 and cost(3) == pytest.approx((0.18 + 0.005) / 0.18)
    assert theory.optimal_k(0.8, 0.4, verify_cost=cost) >= 1
