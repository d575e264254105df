"""Typical acceptance (Cai et al. 2024, Medusa, section 2.3.1). LOSSY: for teaching only.

A draft x is kept when the target finds it typical enough:
    p(x) > min(epsilon, delta * exp(-H(p)))
with H the entropy of p. The longest such prefix is accepted; then one token is drawn from p at
the first refused position (or as the bonus). The output no longer follows the target's
distribution: runs made with it carry `lossless: false` in their events and metrics, and every
view says so.
"""

from __future__ import annotations

import math
from typing import Optional

import torch

from specviz.config import Warp
from specviz.verifiers import sampling
from specviz.verifiers.base import Decision, Verdict, Verifier


class TypicalVerifier(Verifier):
    name = "typical (lossy)"
    lossless = False

    def __init__(self, epsilon: float = 0.3, delta: float = 0.09, name: Optional[str] = None):
        super().__init__(name)
        self.epsilon, self.delta = epsilon, delta

    def threshold(self, p: torch.Tensor) -> float:
        entropy = float(-(p * torch.log(p.clamp_min(1e-30))).sum())
        return min(self.epsilon, self.delta * math.exp(-entropy))

    def judge(self, tree, node, children, p, q, generator, out: Verdict) -> Optional[int]:
        for child in children:
            x = tree.tokens[child]
            threshold = self.threshold(p)
            ok = float(p[x]) > threshold
            out.decisions.append(Decision(
                node=child, parent=node, index=tree.depth(child) - 1, token=x, p=float(p[x]),
                q=float(q[x]) if q is not None else 1.0, accept_prob=float(ok), u=None, accepted=ok,
                beta=self._beta(out, child, lambda: sampling.overlap(p, q)), threshold=threshold))
            if ok:
                return child
        token = sampling.sample(p, Warp(1.0), generator)
        q_t = float(q[token]) if children and q is not None else 0.0
        out.emit(node, token, "residual" if children else "bonus", p, 0.0, float(p[token]), q_t,
                 drawn_from="target")
        return None
