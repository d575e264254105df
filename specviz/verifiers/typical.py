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

import torch

from specviz import sampling
from specviz.sampling import Warp
from specviz.verifiers.chain import Decision, Verdict


class TypicalVerifier:
    name = "typical (lossy)"
    lossless = False

    def __init__(self, epsilon: float = 0.3, delta: float = 0.09):
        self.epsilon, self.delta = epsilon, delta

    def threshold(self, p: torch.Tensor) -> float:
        entropy = float(-(p * torch.log(p.clamp_min(1e-30))).sum())
        return min(self.epsilon, self.delta * math.exp(-entropy))

    def verify(self, draft_tokens, draft_probs, target_probs, generator, allow_bonus=True) -> Verdict:
        n = len(draft_tokens)
        beta = sampling.overlap(target_probs[:n], draft_probs).tolist() if n else []
        decisions = []
        for i, token in enumerate(draft_tokens):
            p_x, q_x = float(target_probs[i, token]), float(draft_probs[i, token])
            threshold = self.threshold(target_probs[i])
            ok = p_x > threshold
            decisions.append(Decision(i, token, p_x, q_x, float(ok), None, ok, threshold))
            if not ok:
                return self._draw(decisions, target_probs[i], "residual", generator, beta, q_x_of=draft_probs[i])
        if not allow_bonus:
            return Verdict(decisions, None, None, None, 0.0, beta)
        return self._draw(decisions, target_probs[n], "bonus", generator, beta)

    @staticmethod
    def _draw(decisions, p, kind, generator, beta, q_x_of=None) -> Verdict:
        token = sampling.sample(p, Warp(1.0), generator)
        q = float(q_x_of[token]) if q_x_of is not None else 0.0
        return Verdict(decisions, token, kind, p, 0.0, beta, float(p[token]), q, drawn_from="target")
