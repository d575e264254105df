"""Notebook 4 · Speedup vs acceptance: solutions."""

__all__ = ["my_best_k", "my_ratio", "alpha_tau"]

# Homework exercise 1: theory.speedup(0.6, k, 0.4) for k = 1, 2, 3 ... is 1.14, 1.09, 0.98, ... :
# the best is k = 1. A weak or slow draft wants short drafts: every extra draft costs c.
my_best_k = 1

# Lab exercise: expected accepted per step = 0.8 + 0.64 + 0.512 + 0.4096 = 2.3616, over k = 4
# drafted: 0.5904, well below alpha = 0.8 (theory.accepted_per_drafted(0.8, 4)).
my_ratio = (0.8 + 0.8 ** 2 + 0.8 ** 3 + 0.8 ** 4) / 4


# Homework exercise 2
def alpha_tau(events: list) -> tuple:
    """(alpha, tau) of a run from its events (dicts): alpha = accepted / judged (None when the
    rule judged nothing), tau = new tokens / target forwards."""
    steps = [e for e in events if e["kind"] == "step_finished"]
    accepted = sum(s["accepted"] for s in steps)
    judged = sum(s["evaluated"] for s in steps)
    new_tokens = sum(len(s["emitted_ids"]) for s in steps)
    forwards = sum(s["target_forwards"] for s in steps)
    alpha = accepted / judged if judged else None
    tau = new_tokens / forwards if forwards else 0.0
    return alpha, tau
