"""Notebook 10 · Drafters that learn from the target: solutions."""

__all__ = ["chain_acceptance"]


def chain_acceptance(hits: list) -> tuple:
    """Exercise: (survival, expected) of a greedy chain from held-out hits.

    A greedy chain drafted at position t accepts its first d drafts exactly when depths 1..d were
    all the target's argmax there, so survival[d - 1] is the share of rows whose first d entries
    are all True (a running AND along each row, then the mean over rows), and the expected
    number of accepted drafts is the sum of the survival curve (E[L] = sum over d of P(L >= d)).
    Multiplying the per-depth accuracies instead would assume the depths miss independently; they
    do not: an easy position tends to be right at every depth, a hard one wrong at every depth.
    """
    if not hits:
        return [], 0.0
    depths = len(hits[0])
    survival = []
    for d in range(1, depths + 1):
        survival.append(sum(1 for row in hits if all(row[:d])) / len(hits))
    return survival, sum(survival)
