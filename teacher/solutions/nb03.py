"""Notebook 3 · Exact speculative sampling: solutions."""

import torch

__all__ = ["my_beta", "my_accept_first", "my_residual", "my_letter"]

# Exercise 1: p = (0.6, 0.4), q = (0.9, 0.1).
# beta = min(0.6, 0.9) + min(0.4, 0.1) = 0.6 + 0.1 = 0.7; the first token is over-proposed
# (q > p), so it is accepted with probability p/q = 0.6 / 0.9. The residual is (0, 1): after a
# rejection the replacement is always the second token, the one the draft under-proposes.
my_beta = 0.7
my_accept_first = 0.6 / 0.9


def my_residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """norm(max(p - q, 0)); p itself when p == q (nothing left over: a rejection cannot happen)."""
    left = torch.clamp(p - q, min=0.0)
    mass = float(left.sum())  # = 1 - beta, the probability of a rejection
    if mass <= 1e-12:
        return p
    return left / mass


# Exercise 3: the broken rule emits q * min(1, p/q) + (1 - beta) * p. Token b is over-proposed
# (q = 0.5 > p = 0.3): accepted drafts alone already give it min(p, q) = 0.3, and the resample
# from p adds (1 - beta) * 0.3 on top. It gains most.
my_letter = "b"
