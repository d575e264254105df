"""Tree verification, in one target pass over every node.

Greedy: walk down from the root taking the child that equals the target's argmax; the first
node with no such child emits the argmax (the longest path that matches the target).

Sampling: multi-candidate recursive rejection sampling (SpecInfer, Miao et al. 2024; with
candidates drawn without replacement as in Jeon et al. 2024, "Recursive Speculative Decoding").
At a node with children x_1..x_m drawn in that order from q without replacement:
    p_1 = p, q_1 = q
    accept x_i with probability min(1, p_i(x_i) / q_i(x_i))
    on rejection: p_{i+1} = norm(max(p_i - q_i, 0)),  q_{i+1} = q_i without x_i, renormalised
    if every child is rejected, emit y ~ p_{m+1}
Each stage is single-draft speculative sampling of p_i with proposal q_i, so what it emits
follows p_i exactly, and p_i's residual is what the next stage must produce. The emitted token
therefore follows p. With one child per node this is exactly the chain rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import torch

from specviz import sampling
from specviz.sampling import Warp
from specviz.tree import ROOT


@dataclass(frozen=True)
class NodeDecision:
    node: int
    parent: int
    token: int
    p: float
    q: float
    accept_prob: float
    u: Optional[float]
    accepted: bool
    beta: float  # exact probability that this decision accepts, given everything before it

    @property
    def ratio(self) -> Optional[float]:
        return self.p / self.q if self.q > 0 else None


@dataclass
class TreeVerdict:
    decisions: list = field(default_factory=list)
    path: list = field(default_factory=list)  # accepted node ids, root to leaf
    next_token: Optional[int] = None
    next_kind: Optional[str] = None  # "residual" | "bonus" | None (an accepted EOS ends the run)
    next_parent: int = ROOT  # node after which the next token was drawn
    next_probs: Optional[torch.Tensor] = None
    residual_mass: float = 0.0
    next_p: float = 0.0
    next_q: float = 0.0


class TreeVerifier:
    lossless = True

    def __init__(self, greedy: bool, eos=()):
        self.greedy, self.eos = greedy, set(eos)
        self.name = "greedy tree" if greedy else "multi-draft rejection"

    def verify(self, tree, dists: dict, target_probs: torch.Tensor, generator) -> TreeVerdict:
        """target_probs row 0 is p at the root, row 1 + i is p after node i."""
        out, node = TreeVerdict(), ROOT
        while True:
            if node != ROOT and tree.tokens[node] in self.eos:
                return out  # an accepted EOS ends the run: no bonus
            p = target_probs[node + 1]
            children = tree.children(node)
            chosen = (self._greedy_stage if self.greedy else self._sampling_stage)(
                tree, node, children, p, dists.get(node), generator, out)
            if chosen is None:
                return out
            out.path.append(chosen)
            node = chosen

    def _greedy_stage(self, tree, node, children, p, q, generator, out):
        """q is None for deterministic drafters (lookahead): each candidate then has q = 1."""
        target = int(torch.argmax(p))
        for child in children:
            x = tree.tokens[child]
            ok = x == target
            q_x = float(q[x]) if q is not None else 1.0
            out.decisions.append(NodeDecision(child, node, x, float(p[x]), q_x, float(ok), None, ok, float(ok)))
            if ok:
                return child
        kind = "residual" if children else "bonus"
        q_t = (float(q[target]) if q is not None else 0.0) if children else 0.0
        self._finish(out, node, target, kind, sampling.one_hot(target, p), float(bool(children)),
                     float(p[target]), q_t)
        return None

    def _sampling_stage(self, tree, node, children, p, q, generator, out):
        p_i, q_i, mass = p, (q.clone() if q is not None else None), 0.0
        for child in children:
            x = tree.tokens[child]
            a = sampling.accept_probability(float(p_i[x]), float(q_i[x]))
            u = sampling.uniform(generator)
            ok = u < a
            out.decisions.append(NodeDecision(child, node, x, float(p_i[x]), float(q_i[x]), a, u, ok,
                                              float(sampling.overlap(p_i, q_i))))
            if ok:
                return child
            p_i, mass = sampling.residual(p_i, q_i)
            q_i[x] = 0.0
            if float(q_i.sum()) > 0:
                q_i = q_i / q_i.sum()
        token = sampling.sample(p_i, Warp(1.0), generator)
        kind = "residual" if children else "bonus"
        self._finish(out, node, token, kind, p_i, mass, float(p[token]), float(q[token]) if children else 0.0)
        return None

    @staticmethod
    def _finish(out, node, token, kind, probs, mass, p_x, q_x):
        out.next_token, out.next_kind, out.next_parent = token, kind, node
        out.next_probs, out.residual_mass, out.next_p, out.next_q = probs, mass, p_x, q_x
