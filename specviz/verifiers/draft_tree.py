"""DraftTree: the one tree type. Tokens plus parent indices compile to the tree attention mask,
the position ids and the root-to-leaf paths (after Medusa's and SpecInfer's tree attention).

The root is the last committed token; node ids are assigned in creation order, so a parent's
id is always smaller than its children's. A chain of k tokens is the tree whose node i has
parent i - 1, and it verifies exactly like the chain.
"""

from __future__ import annotations

import itertools
import operator
from dataclasses import dataclass, field

import torch

ROOT = -1


@dataclass
class DraftTree:
    tokens: list = field(default_factory=list)
    parents: list = field(default_factory=list)  # ROOT (-1) for children of the root
    q: list = field(default_factory=list)  # draft probability of each token at its parent
    cum_q: list = field(default_factory=list)  # product of q along the path from the root

    def __len__(self) -> int:
        return len(self.tokens)

    def add(self, token: int, parent: int, q: float) -> int:
        assert parent < len(self.tokens), "parents are created before their children"
        self.tokens.append(int(token))
        self.parents.append(int(parent))
        self.q.append(float(q))
        self.cum_q.append(float(q) * (self.cum_q[parent] if parent != ROOT else 1.0))
        return len(self.tokens) - 1

    @classmethod
    def chain(cls, tokens: list, q: list = None) -> "DraftTree":
        q = [float(x) for x in q] if q else [1.0] * len(tokens)
        return cls([int(t) for t in tokens], list(range(-1, len(tokens) - 1)), q, list(itertools.accumulate(q, operator.mul)))

    def is_chain(self) -> bool:
        """Every node the only child of the one before: a plain draft of len(self) tokens."""
        return all(parent == i - 1 for i, parent in enumerate(self.parents))

    def depth(self, node: int) -> int:
        """1 for a child of the root."""
        d = 0
        while node != ROOT:
            node, d = self.parents[node], d + 1
        return d

    def children(self, node: int) -> list:
        """Children of `node` (ROOT for the root) in creation order: the order they were drawn."""
        return [i for i, parent in enumerate(self.parents) if parent == node]

    def ancestors(self, node: int) -> list:
        """Node ids from the root's child down to `node`, inclusive."""
        path = []
        while node != ROOT:
            path.append(node)
            node = self.parents[node]
        return path[::-1]

    def mask(self) -> torch.Tensor:
        """(n, n) bool: [i, j] is True iff node j is an ancestor of node i or i itself."""
        n = len(self)
        out = torch.zeros(n, n, dtype=torch.bool)
        for i in range(n):
            out[i, self.ancestors(i)] = True
        return out

    def position_ids(self, root_position: int) -> list:
        return [root_position + self.depth(i) for i in range(len(self))]

    def paths(self) -> list:
        """Root-to-leaf node-id paths, one per leaf."""
        parents = set(self.parents)
        return [self.ancestors(i) for i in range(len(self)) if i not in parents]

    def max_depth(self) -> int:
        return max((self.depth(i) for i in range(len(self))), default=0)


def attention(tree: DraftTree, linear_before: int, pending: int, slots: dict, nodes: list):
    """The attention rows of one forward that feeds `pending` linear tokens then tree `nodes`.

    The cache holds `linear_before` committed tokens, then the tree nodes in `slots`
    (node -> cache column). Linear tokens attend causally; a node attends to every linear token
    and to its ancestors and itself. Returns ((T, total) bool mask, slots of the new nodes).
    """
    assert not (pending and slots), "linear tokens always precede tree nodes in the cache"
    rows = pending + len(nodes)
    start = linear_before + len(slots) + pending
    new_slots = {node: start + i for i, node in enumerate(nodes)}
    every = {**slots, **new_slots}
    out = torch.zeros(rows, start + len(nodes), dtype=torch.bool)
    for r in range(pending):
        out[r, :linear_before + r + 1] = True
    linear = linear_before + pending
    for r, node in enumerate(nodes):
        out[pending + r, :linear] = True
        out[pending + r, [every[a] for a in tree.ancestors(node)]] = True
    return out, new_slots
