"""Notebook 12 · Capstone, write one speculative step: solution."""

import torch

from specviz.teaching.exercises.nb12 import draw, top, uniform

__all__ = ["my_step"]


def my_step(models, prefix: list, k: int, greedy: bool, generator: torch.Generator) -> list:
    """One speculative step: the tokens it emits (1 to k + 1 of them)."""
    drafts, q = [], []  # draft: k tokens, each from q after the prefix and the drafts before it
    for _ in range(k):
        q.append(models.draft_probs(prefix + drafts))
        drafts.append(top(q[-1]) if greedy else draw(q[-1], generator))
    p = models.target_probs(prefix, drafts)  # score: one target pass, p at k + 1 positions
    out = []
    for i, x in enumerate(drafts):  # verify: draft i + 1 is judged by p's row i
        if greedy:
            ok = x == top(p[i])
        else:
            ok = uniform(generator) < min(1.0, float(p[i][x] / q[i][x]))
        if not ok:  # the first rejection: its replacement, and the step ends
            if greedy:
                return out + [top(p[i])]
            left = torch.clamp(p[i] - q[i], min=0.0)  # the residual, norm(max(p - q, 0))
            return out + [draw(left / left.sum(), generator)]
        out.append(x)
    return out + [top(p[k]) if greedy else draw(p[k], generator)]  # all accepted: the bonus
