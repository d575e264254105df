"""Is acceptance at depth k above or below alpha^k, or are the steps too few to tell? (notebook 9, section 2)

A step's accepted length L is how many drafts it accepted before the first rejection. Over n
steps that drafted all k tokens, m reached depth k (L >= k): the share m / n estimates P(L >= k).
Independent acceptance at the run's alpha predicts alpha^k. The share is a count, so its 95%
interval is the exact binomial one (Clopper-Pearson); where alpha^k lies inside it, or n is below
MIN_STEPS, these steps cannot tell the two apart. alpha is taken as known (it is estimated from
the same steps, over many more judged drafts than there are steps). No torch.
"""

from __future__ import annotations

MIN_STEPS = 20  # fewer full steps than this say nothing at depth k, whatever the interval


def depth_verdict(steps: int, reached: int, alpha: float, k: int, level: float = 0.95) -> dict:
    """`reached` of `steps` full steps accepted all k drafts: the share, its exact `level`
    interval, alpha^k, and the verdict "above", "below" or "too few to tell"."""
    from scipy import stats  # here: the rest of specviz.analysis loads without scipy

    if steps < 1 or not 0 <= reached <= steps:
        raise ValueError(f"{reached} of {steps} steps: need 0 <= reached <= steps and steps >= 1")
    interval = stats.binomtest(reached, steps).proportion_ci(confidence_level=level, method="exact")
    expected = alpha ** k
    if steps < MIN_STEPS or interval.low <= expected <= interval.high:
        verdict = "too few to tell"
    else:
        verdict = "above" if reached / steps > expected else "below"
    return {"steps": steps, "reached": reached, "share": reached / steps, "low": float(interval.low),
            "high": float(interval.high), "expected": expected, "verdict": verdict}
