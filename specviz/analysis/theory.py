"""Closed forms of speculative decoding (Leviathan et al. 2023, section 3; Chen et al. 2023).

Assumes each drafted token is accepted independently with probability a (alpha), k tokens are
drafted per step, and a draft forward costs c target forwards. Pure floats, no torch.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence


def expected_tokens(a: float, k: int) -> float:
    """E[tokens per step] = (1 - a^(k+1)) / (1 - a): accepted drafts plus the residual/bonus token."""
    if a >= 1.0:
        return k + 1.0
    return (1.0 - a ** (k + 1)) / (1.0 - a)


def speedup(a: float, k: int, c: float) -> float:
    """Walltime speedup over autoregressive decoding when verifying k+1 tokens costs one forward:
    (1 - a^(k+1)) / ((1 - a)(c k + 1))."""
    return expected_tokens(a, k) / (c * k + 1.0)


def speedup_with_cost(a: float, k: int, c: float, verify_cost: Callable[[int], float]) -> float:
    """Speedup with a measured verify-cost curve: verify_cost(n) is the time of one target pass
    over n tokens divided by the time of a 1-token pass (1.0 at n = 1, growing with n)."""
    return expected_tokens(a, k) / (c * k + verify_cost(k + 1))


def interpolate_cost(points: Sequence[tuple]) -> Callable[[int], float]:
    """A verify-cost curve from measured (n_tokens, seconds) points, normalised to n = 1."""
    pts = sorted(points)
    base = pts[0][1]

    def cost(n: int) -> float:
        for (n0, t0), (n1, t1) in zip(pts, pts[1:]):
            if n0 <= n <= n1:
                return (t0 + (t1 - t0) * (n - n0) / (n1 - n0)) / base
        return (pts[-1][1] if n > pts[-1][0] else pts[0][1]) / base

    return cost


def optimal_k(a: float, c: float, k_max: int = 16,
              verify_cost: Optional[Callable[[int], float]] = None) -> int:
    """The draft length with the largest predicted speedup (0 means: do not speculate)."""
    def gain(k: int) -> float:
        if k == 0:
            return 1.0
        return speedup_with_cost(a, k, c, verify_cost) if verify_cost else speedup(a, k, c)

    return max(range(k_max + 1), key=gain)


def accepted_per_drafted(a: float, k: int) -> float:
    """E[accepted] / k = a (1 - a^k) / (k (1 - a)): lower than a, because drafts after the first
    rejection are discarded without being judged."""
    if a >= 1.0:
        return 1.0
    return a * (1.0 - a ** k) / (k * (1.0 - a))


def alpha_from_tau(tau: float, k: int, tol: float = 1e-10) -> float:
    """Invert expected_tokens: the a whose (1 - a^(k+1)) / (1 - a) equals the measured tau."""
    if not 1.0 <= tau <= k + 1:
        raise ValueError(f"tau must lie in [1, k + 1] = [1, {k + 1}], got {tau}")
    lo, hi = 0.0, 1.0
    while hi - lo > tol:
        mid = (lo + hi) / 2
        if expected_tokens(mid, k) < tau:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def alpha_needed(target: float, k: int, c: float, verify_cost: Callable[[int], float],
                 forwards: Optional[int] = None) -> Optional[float]:
    """The acceptance rate a drafter must reach for `target` speedup over plain decoding, drafting
    k a step at c target passes per draft forward (`forwards` a step; k where each draft token
    is one forward) with a verify pass of verify_cost(k + 1): the a whose
    E[tokens | a, k] / (c * forwards + V(k + 1)) equals `target`. None where even a = 1 falls short."""
    tau = target * (c * (k if forwards is None else forwards) + verify_cost(k + 1))
    if tau > k + 1 + 1e-9:  # beyond rounding
        return None
    return alpha_from_tau(min(max(tau, 1.0), k + 1.0), k)


def batch_speedup(a: float, k: float, ar_step: float, spec_step: float) -> float:
    """Speculation's speedup over plain decoding of the same batch: each row gains E[tokens per
    step] per shared step, and a step costs `spec_step` seconds (the batch's drafting plus one
    target pass over B rows of k + 1 tokens) against `ar_step` (one pass over B rows of 1 token).
    As B grows the pass leaves the memory-bound regime, spec_step / ar_step grows towards k + 1,
    and the speedup falls below 1: the crossover."""
    return expected_tokens(a, int(round(k))) * ar_step / spec_step


def expected_run_time(a: float, k: int, n: int, step_cost: Callable[[int], float]) -> float:
    """Expected seconds to produce `n` tokens when every step drafts k' = min(k, tokens left - 1)
    (an engine drafts no further than the budget) and costs step_cost(k') seconds; a step emits
    j <= k' accepted drafts plus one token, P(j) = a^j (1 - a) for j < k' and a^k' for j = k'.
    The tail matters for short runs: the last steps draft less and bring fewer tokens than
    expected_tokens(a, k) says."""
    a = min(max(a, 0.0), 1.0)
    memo = [0.0] * (n + 1)
    for left in range(1, n + 1):
        kk = min(k, left - 1)
        total = step_cost(kk)
        for j in range(kk + 1):  # j accepted drafts, j + 1 tokens
            p = a ** j * ((1 - a) if j < kk else 1.0)
            total += p * memo[left - j - 1]
        memo[left] = total
    return memo[n]


# ---------------------------------------------------------------------------------------------
# speculative speculative decoding (SSD; Kumar, Dao and May 2026): drafting while the target verifies

def ssd_step_cost(hit: float, k: int, c: float, slowdown: float = 1.0, ready: Optional[float] = None,
                  wait: Optional[float] = None, overhead: float = 0.0, fan_cost: float = 1.0,
                  ssd_overhead: Optional[float] = None) -> float:
    """One SSD step, in target passes. Plain speculation's step is c k + 1 + overhead: k draft
    forwards (c each), one pass, the rest of the step. SSD's target pass runs while the drafter
    prepares, so the step is

        slowdown + wait + (1 - hit) c k + hit c (k - ready) + overhead

    slowdown: the pass's cost while the drafter works beside it (1 when the draft has hardware of
    its own; more when the two share cores); wait: after the pass, for the preparing forward
    under way; hit: the share of steps whose draft was prepared (the hits counted over all
    steps; any other step drafts all k as plain speculation does); ready: drafts prepared on
    such a step (default k: the rest is drafted on the critical path). Without a measured wait, preparation's k + 1 forwards (x_K's, then one
    per depth over every outcome, `fan_cost` times a one-row forward) are waited for where
    they outlast the pass. `ssd_overhead`: SSD's own rest of a step, where measured (else
    plain speculation's)."""
    ready = k if ready is None else ready
    overhead = overhead if ssd_overhead is None else ssd_overhead
    if wait is None:
        wait = max(0.0, (k + 1) * c * fan_cost - slowdown)
    return slowdown + wait + (1.0 - hit) * c * k + hit * c * (k - ready) + overhead


def ssd_speedup(hit: float, k: int, c: float, slowdown: float = 1.0, ready: Optional[float] = None,
                wait: Optional[float] = None, overhead: float = 0.0, fan_cost: float = 1.0,
                ssd_overhead: Optional[float] = None) -> float:
    """SSD's speedup over plain speculation at the same k. Both verify the same drafts' law, so a
    step brings the same tokens on average (under greedy, the same tokens): the ratio is the
    ratio of step costs, (c k + 1 + overhead) / ssd_step_cost(...). Its ceiling (every outcome
    prepared, fully and in time, on hardware of its own) is 1 + c k / (1 + overhead): SSD hides
    the drafting, never the pass."""
    return (c * k + 1.0 + overhead) / ssd_step_cost(hit, k, c, slowdown, ready, wait, overhead, fan_cost,
                                                    ssd_overhead)
