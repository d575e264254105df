"""Typical acceptance (Cai et al. 2024, Medusa, section 2.3.1). LOSSY: for teaching only.

A draft x is kept when the target finds it typical enough:
    p(x) > min(posterior_threshold, posterior_alpha * exp(-H(p)))
with H(p) the entropy of p (in nats). The two parameters carry Medusa's names and defaults
(`medusa/model/utils.py`, evaluate_posterior; `medusa_generate`'s defaults):
  posterior_threshold = 0.09  the cap: a hard threshold, the bar where p is peaked
  posterior_alpha     = 0.3   the entropy factor: the flatter p is, the lower the bar
The cap binds while posterior_alpha * exp(-H) > posterior_threshold, that is for
H < ln(0.3 / 0.09) ≈ 1.20 nats; above that the entropy term sets the bar.
The longest such prefix is accepted; then one token is drawn from p at the first refused
position (or as the bonus). The output no longer follows the target's distribution: runs made
with it carry `lossless: false` in their events and metrics, and every view says so.
"""

from __future__ import annotations

import math
from typing import Optional

import torch

from specviz.config import Warp
from specviz.verifiers import sampling
from specviz.verifiers.base import Decision, Verdict, Verifier

POSTERIOR_THRESHOLD = 0.09  # Medusa's default cap
POSTERIOR_ALPHA = 0.3  # Medusa's default entropy factor


def entropy(target_probs: torch.Tensor) -> float:
    """H(p) in nats, 0 · log 0 counted as 0. Medusa computes -sum p · log(p + 1e-5), a little
    below this where much of p lies on tokens under 1e-5; the rule and its parameters are Medusa's."""
    return float(-(target_probs * torch.log(target_probs.clamp_min(1e-30))).sum())


class TypicalVerifier(Verifier):
    name = "typical (lossy)"
    lossless = False

    def __init__(self, posterior_threshold: float = POSTERIOR_THRESHOLD, posterior_alpha: float = POSTERIOR_ALPHA,
                 name: Optional[str] = None):
        super().__init__(name)
        self.posterior_threshold, self.posterior_alpha = posterior_threshold, posterior_alpha

    def threshold(self, p: torch.Tensor) -> float:
        """The p a draft must exceed: min(posterior_threshold, posterior_alpha * exp(-H(p)))."""
        return min(self.posterior_threshold, self.posterior_alpha * math.exp(-entropy(p)))

    def judge(self, tree, node, children, p, q, generator, out: Verdict) -> Optional[int]:
        threshold = self.threshold(p)  # one p for every child of this node
        for child in children:
            x = tree.tokens[child]
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
