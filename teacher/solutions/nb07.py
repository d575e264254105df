"""Notebook 7 · Adaptive k and cascades: solutions."""

__all__ = ["next_k", "my_alpha"]


def next_k(k: int, drafted: int, accepted: int, k_max: int = 12) -> int:
    """transformers' heuristic schedule: + 2 after a step that accepted everything it drafted (at
    most k_max), - 1 after a rejection (at least 1); unchanged after a step that drafted nothing."""
    if drafted == 0:
        return k
    if accepted == drafted:  # drafted, not k: a draft may stop early at end-of-text
        return min(k + 2, k_max)
    return max(1, k - 1)


# Exercise: with k = 1 the speedup is (1 + alpha) / (1 + c) > 1 iff alpha > c = 0.4; longer drafts
# need more, so the break-even is alpha = 0.4 (to the notebook's 0.005 grid: the first alpha at
# which theory.optimal_k(alpha, 0.4) > 0).
my_alpha = 0.405
