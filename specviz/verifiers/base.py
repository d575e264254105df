"""One verifier for chains and trees: walk the drafted tree from the root, judge each node's
children in the order they were drawn, keep the first one the rule accepts, and stop at the
first node where none is; there the rule emits the next token (a residual after a rejection, a
bonus at a leaf). A chain is the tree whose every node has one child, and the walk is then
exactly the chain rule of Leviathan et al. 2023 (Algorithm 1) and Chen et al. 2023.

A rule is a subclass that judges one node's children (`judge`); `GreedyVerifier`,
`RejectionVerifier` (single- and multi-draft) and `TypicalVerifier` are the three here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import torch

from specviz.verifiers import sampling
from specviz.verifiers.draft_tree import ROOT, DraftTree


@dataclass(frozen=True)
class Decision:
    """The rule's verdict on one drafted node."""

    node: int
    parent: int  # ROOT (-1) for a child of the root
    index: int  # draft position: the node's depth - 1
    token: int
    p: float  # the target's probability of the token (after earlier siblings' residuals, in a tree)
    q: float  # the draft's (without earlier siblings, in a tree)
    accept_prob: float  # min(1, p/q), or 1/0 under the greedy and typical rules
    u: Optional[float]  # the uniform draw compared with accept_prob (None: no draw)
    accepted: bool
    beta: float  # exact probability that this decision accepts, given the decisions before it
    threshold: Optional[float] = None  # typical acceptance: the p it had to exceed

    @property
    def ratio(self) -> Optional[float]:
        return self.p / self.q if self.q > 0 else None


@dataclass
class Verdict:
    decisions: list = field(default_factory=list)  # every Decision, in the order they were made
    path: list = field(default_factory=list)  # accepted node ids, root to leaf
    next_token: Optional[int] = None  # residual or bonus token (None after an accepted EOS)
    next_kind: Optional[str] = None  # "residual" | "bonus" | None
    next_parent: int = ROOT  # node after which the next token was drawn
    next_probs: Optional[torch.Tensor] = None  # the distribution it was drawn from
    residual_mass: float = 0.0  # sum_x max(p(x) - q(x), 0) where it was drawn
    next_p: float = 0.0  # p of the next token at its position (the target's own)
    next_q: float = 0.0  # q of the next token there (0 for a bonus: nothing was drafted)
    drawn_from: str = "residual"  # typical acceptance draws its replacement from p: "target"
    # exact acceptance probability per drafted position of a chain, wasted drafts included; for
    # a branching tree (or drafts without q), per decision
    beta: list = field(default_factory=list)

    @property
    def accepted(self) -> int:
        return len(self.path)

    def emit(self, parent: int, token: int, kind: str, probs, mass: float, p_x: float, q_x: float,
             drawn_from: str = "residual") -> None:
        self.next_token, self.next_kind, self.next_parent = token, kind, parent
        self.next_probs, self.residual_mass, self.next_p, self.next_q = probs, mass, p_x, q_x
        self.drawn_from = drawn_from


class Verifier:
    """Walks the tree; subclasses judge one node's children (`judge`) and may give the exact
    acceptance probability of a first draft (`overlap`). `lossless = False` marks a lossy rule:
    the engine copies it into every run it makes."""

    name = "verifier"
    lossless = True

    def __init__(self, name: Optional[str] = None):
        if name is not None:
            self.name = name

    def verify(self, tree: DraftTree, dists: dict, target_probs: torch.Tensor, generator,
               eos=()) -> Verdict:
        """target_probs row 0 is p after the root (the last committed token), row 1 + i is p
        after node i; dists[node] is the q the node's children were drawn from (ROOT: the
        root's), absent for drafters without one. An accepted token in `eos` ends the walk."""
        out = Verdict(beta=self._chain_beta(tree, dists, target_probs))
        node = ROOT
        while node == ROOT or tree.tokens[node] not in eos:
            chosen = self.judge(tree, node, tree.children(node), target_probs[node + 1], dists.get(node),
                                generator, out)
            if chosen is None:
                break
            out.path.append(chosen)
            node = chosen
        if out.beta is None:
            out.beta = [d.beta for d in out.decisions]
        return out

    def verify_chain(self, tokens: list, draft_probs: torch.Tensor, target_probs: torch.Tensor, generator,
                     allow_bonus: bool = True) -> Verdict:
        """A chain given as tokens x_1..x_n, their q rows (n, V) and p rows (n + 1, V).
        allow_bonus=False: x_n is an end of text, after which nothing follows (nor after an
        accepted copy of it earlier: a chain drafter's proposal ends at its first one)."""
        dists = {i - 1: draft_probs[i] for i in range(len(tokens))}
        eos = () if allow_bonus or not tokens else (tokens[-1],)
        return self.verify(DraftTree.chain(tokens), dists, target_probs, generator, eos)

    def judge(self, tree, node, children, p, q, generator, out: Verdict) -> Optional[int]:
        """Append a Decision for each child judged; return the accepted child, or None after
        `out.emit(...)` of the token that follows `node`."""
        raise NotImplementedError

    def overlap(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        """Exact acceptance probability of a draft from q against p, along the last axis."""
        return sampling.overlap(p, q)

    def _chain_beta(self, tree, dists, target_probs) -> Optional[list]:
        n = len(tree)
        if not n or not tree.is_chain() or any(i - 1 not in dists for i in range(n)):
            return None
        return self.overlap(target_probs[:n], torch.stack([dists[i - 1] for i in range(n)])).tolist()

    @staticmethod
    def _beta(out: Verdict, child: int, compute) -> float:
        """A decision's beta: in a chain, computed for every position in one call (node id =
        position); in a tree, its own (`compute()`: conditional on the siblings before it)."""
        if out.beta is not None:
            return out.beta[child]
        return float(compute())
