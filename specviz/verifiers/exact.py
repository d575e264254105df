"""The two lossless rules: greedy (exact argmax match) and speculative sampling.

Rejection rule, chains (Leviathan et al. 2023, Algorithm 1; Chen et al. 2023, Algorithm 2): for
drafted x_1..x_k with draft distributions q_i and target distributions p_i from one target pass,
accept x_i while u_i < min(1, p_i(x_i)/q_i(x_i)); at the first rejection emit
y ~ norm(max(p_i - q_i, 0)) and stop; if every draft is accepted, emit a bonus y ~ p_{k+1}.

Trees: multi-candidate recursive rejection sampling (SpecInfer, Miao et al. 2024; candidates
drawn without replacement as in Jeon et al. 2024, "Recursive Speculative Decoding"). At a node
with children x_1..x_m drawn in that order from q without replacement:
    p_1 = p, q_1 = q
    accept x_i with probability min(1, p_i(x_i) / q_i(x_i))
    on rejection: p_{i+1} = norm(max(p_i - q_i, 0)),  q_{i+1} = q_i without x_i, renormalised
    if every child is rejected, emit y ~ p_{m+1}
Each stage is single-draft speculative sampling of p_i with proposal q_i, so what it emits
follows p_i exactly, and p_i's residual is what the next stage must produce: the emitted token
follows p. With one child per node this is the chain rule above, draw for draw.

Candidates not drawn from any q (q is None: lookups and tries that propose without sampling) are
each a proposal that is certain of itself, q_i = one-hot(x_i): x_i is accepted with probability
p_i(x_i), and on rejection p_{i+1} is p_i without x_i, renormalised. Asking "is it x_1? else is it
x_2? ..." this way draws exactly from p.
"""

from __future__ import annotations

from typing import Optional

import torch

from specviz.config import Warp
from specviz.verifiers import sampling
from specviz.verifiers.base import Decision, Verdict, Verifier


class GreedyVerifier(Verifier):
    """Accept the child that equals the target's argmax; where none does, emit the argmax.

    The temperature -> 0 limit of the rejection rule: with one-hot p and q, min(1, p/q) is 1 or
    0 and the residual is the one-hot of argmax p. In a tree: the longest path the target agrees
    with. q is None for deterministic drafters (lookahead): each candidate then has q = 1.
    """

    name = "greedy"

    def judge(self, tree, node, children, p, q, generator, out: Verdict) -> Optional[int]:
        target = int(torch.argmax(p))
        for child in children:
            x = tree.tokens[child]
            ok = x == target
            out.decisions.append(Decision(
                node=child, parent=node, index=tree.depth(child) - 1, token=x, p=float(p[x]),
                q=float(q[x]) if q is not None else 1.0, accept_prob=float(ok), u=None, accepted=ok,
                beta=self._beta(out, child, lambda: ok)))
            if ok:
                return child
        if not children:  # a leaf: the bonus is p's argmax
            out.emit(node, target, "bonus", p, 0.0, float(p[target]), 0.0)
            return None
        out.emit(node, target, "residual", sampling.one_hot(target, p), 1.0, float(p[target]),
                 float(q[target]) if q is not None else 0.0)
        return None

    def overlap(self, p, q):
        return (torch.argmax(p, dim=-1) == torch.argmax(q, dim=-1)).float()


class RejectionVerifier(Verifier):
    """Speculative sampling: lossless for any q the drafter really sampled from."""

    name = "rejection"

    def judge(self, tree, node, children, p, q, generator, out: Verdict) -> Optional[int]:
        p_i, q_i, mass = p, q, 0.0
        for j, child in enumerate(children):
            x = tree.tokens[child]
            q_x = sampling.one_hot(x, p_i) if q is None else q_i  # no q: a proposal certain of itself
            a = self.accept_probability(p_i, q_x, x)
            u = sampling.uniform(generator)
            ok = u < a
            out.decisions.append(Decision(
                node=child, parent=node, index=tree.depth(child) - 1, token=x, p=float(p_i[x]), q=float(q_x[x]),
                accept_prob=a, u=u, accepted=ok, beta=self._beta(out, child, lambda: sampling.overlap(p_i, q_x))))
            if ok:
                return child
            p_i, mass = self.residual(p_i, q_x)
            if q is not None and j + 1 < len(children):  # the next sibling was drawn from q without x
                q_i = q_i.clone()
                q_i[x] = 0.0
                if float(q_i.sum()) > 0:
                    q_i = q_i / q_i.sum()
        token = sampling.sample(p_i, Warp(1.0), generator)
        out.emit(node, token, "residual" if children else "bonus", p_i, mass, float(p[token]),
                 float(q[token]) if children and q is not None else 0.0)
        return None

    def accept_probability(self, p: torch.Tensor, q: torch.Tensor, x: int) -> float:
        """min(1, p(x)/q(x))."""
        return sampling.accept_probability(float(p[x]), float(q[x]))

    def residual(self, p: torch.Tensor, q: torch.Tensor) -> tuple:
        """What to draw from once a draft from q is rejected: norm(max(p - q, 0)), and its mass."""
        return sampling.residual(p, q)


def default_verifier(warp: Warp, name: Optional[str] = None) -> Verifier:
    return GreedyVerifier(name) if warp.greedy else RejectionVerifier(name)
