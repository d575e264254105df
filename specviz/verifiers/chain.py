"""Chain verification: greedy (exact argmax match) and the speculative-sampling rejection rule.

Rejection rule: Leviathan et al. 2023, Algorithm 1; Chen et al. 2023, Algorithm 2. For drafted
tokens x_1..x_k with draft distributions q_1..q_k and target distributions p_1..p_{k+1} from a
single target pass: accept x_i while u_i < min(1, p_i(x_i)/q_i(x_i)); at the first rejection
emit y ~ norm(max(p_i - q_i, 0)) and stop; if every draft is accepted, emit a bonus y ~ p_{k+1}.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import torch

from specviz import sampling
from specviz.sampling import Warp


@dataclass(frozen=True)
class Decision:
    index: int
    token: int
    p: float
    q: float
    accept_prob: float
    u: Optional[float]
    accepted: bool
    threshold: Optional[float] = None  # typical acceptance: the p threshold it was held to

    @property
    def ratio(self) -> Optional[float]:
        return self.p / self.q if self.q > 0 else None


@dataclass
class Verdict:
    decisions: list  # Decision for each drafted token the rule looked at, in order
    next_token: Optional[int]  # residual or bonus token (None when a bonus is not allowed)
    next_kind: Optional[str]  # "residual" | "bonus" | None
    next_probs: Optional[torch.Tensor] = None  # distribution the next token was drawn from
    residual_mass: float = 0.0
    beta: list = field(default_factory=list)  # exact acceptance probability per drafted position
    next_p: float = 0.0  # p of the next token at its position (the target's, unwarped by the rule)
    next_q: float = 0.0  # q of the next token at its position (0 for a bonus: nothing was drafted)
    drawn_from: str = "residual"  # typical acceptance draws its replacement from p ("target")

    @property
    def accepted(self) -> int:
        return sum(d.accepted for d in self.decisions)


class GreedyVerifier:
    """Accept while the draft equals the target's argmax; then emit the target's argmax.

    This is the temperature -> 0 limit of the rejection rule: with one-hot p and q,
    min(1, p/q) is 1 or 0 and the residual is the one-hot of argmax p.
    """

    name = "greedy"
    lossless = True

    def verify(self, draft_tokens, draft_probs, target_probs, generator, allow_bonus=True) -> Verdict:
        targets = torch.argmax(target_probs, dim=-1).tolist()
        draft_argmax = torch.argmax(draft_probs, dim=-1).tolist() if len(draft_tokens) else []
        beta = [float(a == b) for a, b in zip(targets, draft_argmax)]
        decisions = []
        for i, token in enumerate(draft_tokens):
            ok = token == targets[i]
            decisions.append(Decision(i, token, float(target_probs[i, token]),
                                      float(draft_probs[i, token]), float(ok), None, ok))
            if not ok:
                t = targets[i]
                probs = sampling.one_hot(t, target_probs[i])
                return Verdict(decisions, t, "residual", probs, 1.0, beta,
                               float(target_probs[i, t]), float(draft_probs[i, t]))
        return _bonus(decisions, target_probs, targets[len(draft_tokens)], allow_bonus, beta)


class RejectionVerifier:
    """The speculative-sampling rule: lossless for any q the drafter really sampled from."""

    name = "rejection"
    lossless = True

    def verify(self, draft_tokens, draft_probs, target_probs, generator, allow_bonus=True) -> Verdict:
        n = len(draft_tokens)
        beta = sampling.overlap(target_probs[:n], draft_probs).tolist() if n else []
        decisions = []
        for i, token in enumerate(draft_tokens):
            p_x, q_x = float(target_probs[i, token]), float(draft_probs[i, token])
            a = sampling.accept_probability(p_x, q_x)
            u = sampling.uniform(generator)
            ok = u < a
            decisions.append(Decision(i, token, p_x, q_x, a, u, ok))
            if not ok:
                return self._resample(decisions, target_probs[i], draft_probs[i], generator, beta)
        bonus = None
        if allow_bonus:
            bonus = sampling.sample(target_probs[n], Warp(temperature=1.0), generator)
        return _bonus(decisions, target_probs, bonus, allow_bonus, beta)

    def _resample(self, decisions, p, q, generator, beta) -> Verdict:
        probs, mass = sampling.residual(p, q)
        token = sampling.sample(probs, Warp(temperature=1.0), generator)
        return Verdict(decisions, token, "residual", probs, mass, beta, float(p[token]), float(q[token]))


def _bonus(decisions, target_probs, token, allow_bonus, beta) -> Verdict:
    if not allow_bonus:
        return Verdict(decisions, None, None, None, 0.0, beta)
    probs = target_probs[len(decisions)]
    return Verdict(decisions, token, "bonus", probs, 0.0, beta, float(probs[token]))


def default_verifier(spec: Warp):
    return GreedyVerifier() if spec.greedy else RejectionVerifier()
