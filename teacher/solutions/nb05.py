"""Notebook 5 · Trees: solutions."""

import torch

__all__ = ["my_nodes", "tree_mask", "my_q2"]

# Exercise 1: node 4 ("dog ran") sees its ancestor dog (node 1) and itself.
my_nodes = [1, 4]


def tree_mask(parents: list) -> torch.Tensor:
    """(n, n) bool: [i, j] is True iff node j is node i or one of its ancestors."""
    n = len(parents)
    mask = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        node = i
        while node != -1:  # walk up to the root, marking the path
            mask[i, node] = True
            node = parents[node]
    return mask


# Exercise 3: the candidates were drawn from q without replacement, so the second one came from
# q without a, renormalised: (0, 0.3, 0.2) / 0.5.
my_q2 = [0.0, 0.6, 0.4]
