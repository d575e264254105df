"""Notebook 3's exercises: the residual, and the rule that breaks without it.
"""

from __future__ import annotations

from typing import Callable, Optional

import torch

from specviz.teaching.exercises.checking import Case, Wrong, as_letter, check_answer, run_cases
from specviz.verifiers import sampling

# notebook 3: the residual

SECTION_1_P = (0.50, 0.30, 0.15, 0.05)
SECTION_1_Q = (0.20, 0.50, 0.10, 0.20)


def _residual_cases() -> list:
    gen = torch.Generator().manual_seed(3)

    def dist(v: int, scale: float = 2.0) -> torch.Tensor:
        return torch.softmax(torch.randn(v, generator=gen) * scale, dim=-1)

    p5 = dist(5)
    one_hot = torch.zeros(6)
    one_hot[2] = 1.0
    sparse_p, sparse_q = dist(8), dist(8)
    sparse_p[[1, 5]] = 0.0
    sparse_q[[0, 5, 6]] = 0.0
    sparse_p, sparse_q = sparse_p / sparse_p.sum(), sparse_q / sparse_q.sum()
    fixed = [
        ("the example of section 1", torch.tensor(SECTION_1_P), torch.tensor(SECTION_1_Q)),
        ("two tokens", torch.tensor([0.6, 0.4]), torch.tensor([0.9, 0.1])),
        ("p == q (a draft identical to the target)", p5, p5.clone()),
        ("a one-hot q (a deterministic drafter, as prompt lookup)", dist(6), one_hot),
        ("p and q with disjoint supports", torch.tensor([0.7, 0.3, 0.0, 0.0]), torch.tensor([0.0, 0.0, 0.4, 0.6])),
        ("a uniform q", dist(7, 3.0), torch.full((7,), 1 / 7)),
        ("distributions with zeros (as after top-k)", sparse_p, sparse_q),
    ]
    cases = [Case(kind, (p, q)) for kind, p, q in fixed]
    for v in (3, 10, 100):
        for _ in range(10):
            cases.append(Case("random distributions over 3 to 100 tokens", (dist(v), dist(v))))
    return cases


def _as_distribution(got, like: torch.Tensor) -> torch.Tensor:
    if isinstance(got, tuple) and len(got) == 2 and not isinstance(got[0], (int, float)):
        got = got[0]  # the engine's sampling.residual also returns the mass: take the distribution
    try:
        out = torch.as_tensor(got, dtype=torch.float64).detach().clone()
    except Exception:
        raise Wrong("return a tensor (or list) of probabilities") from None
    if out.shape != like.shape:
        raise Wrong(f"the result has shape {tuple(out.shape)}, not the shape of p ({tuple(like.shape)})")
    return out


def _judge_residual(got, case: Case) -> None:
    p, q = (t.double() for t in case.args)
    want = sampling.residual(*case.args)[0].double()
    got = _as_distribution(got, p)
    same = bool(torch.equal(p, q))
    if not torch.isfinite(got).all():
        raise Wrong("the result has NaN or infinite entries" + (" (when p == q there is nothing left over: "
                                                                 "see the docstring)" if same else ""))
    if (got < -1e-7).any():
        raise Wrong("the result has negative entries")
    if abs(float(got.sum()) - 1.0) > 1e-4:
        raise Wrong("the result does not sum to 1")
    if torch.allclose(got, want, atol=2e-5):
        return
    if same:
        raise Wrong("when p == q nothing is left over; the docstring says what to return then")
    if (got[p <= q] > 1e-6).any():
        raise Wrong("it puts probability on a token the draft already proposes often enough (q ≥ p)")
    if ((got < 1e-9) & (want > 1e-6)).any():
        raise Wrong("it gives no probability to a token the draft under-proposes (p > q)")
    raise Wrong("the probabilities are not proportional to how much p exceeds q")


def check_residual(fn: Callable) -> Optional[bool]:
    """fn(p, q) -> norm(max(p - q, 0)) (p itself when p == q), against sampling.residual."""
    return run_cases("my_residual", fn, _residual_cases(), _judge_residual, "the engine's sampling.residual")


def check_beta_by_hand(beta, accept_first) -> Optional[bool]:
    """Notebook 3, exercise 1: β and the first token's acceptance probability for p = (0.6, 0.4),
    q = (0.9, 0.1). Two lines, one per answer."""
    p, q = torch.tensor([0.6, 0.4], dtype=torch.float64), torch.tensor([0.9, 0.1], dtype=torch.float64)
    first = check_answer(beta, float(sampling.overlap(p, q)), tol=1e-6, hint="β = min(0.6, 0.9) + min(0.4, 0.1).")
    second = check_answer(accept_first, sampling.accept_probability(0.6, 0.9), tol=0.01,
                     hint="min(1, p/q) for the first token.")
    if first is None or second is None:
        return None if first is not False and second is not False else False
    return first and second


def check_broken_rule(letter) -> Optional[bool]:
    """Notebook 3: the token of section 1 that gains most under the resample-from-p rule."""
    p, q = torch.tensor(SECTION_1_P), torch.tensor(SECTION_1_Q)
    accept = torch.tensor([sampling.accept_probability(float(a), float(b)) for a, b in zip(p, q)])
    broken = q * accept + (1 - sampling.overlap(p, q)) * p
    return check_answer(letter, "abcd"[int(torch.argmax(broken - p))], read=lambda a: as_letter(a, "abcd"),
                   hint="Compute q·min(1, p/q) + (1 − β)·p and subtract p.")
