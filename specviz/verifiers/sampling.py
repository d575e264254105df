"""Pure sampling kernels of speculative decoding.

Follows Leviathan, Kalman & Matias, "Fast Inference from Transformers via Speculative Decoding"
(ICML 2023, Algorithm 1) and Chen et al., "Accelerating Large Language Model Decoding with
Speculative Sampling" (2023, Algorithm 2). Notation as in `specviz.events`: p is the target
distribution, q the draft distribution, both warped identically.

A draft x ~ q is accepted with probability min(1, p(x)/q(x)); on rejection the replacement is
drawn from the residual norm(max(p - q, 0)). The emitted token then follows p exactly:
    P(emit y) = q(y) min(1, p(y)/q(y)) + (1 - beta) * max(p(y) - q(y), 0) / (1 - beta)
              = min(q(y), p(y)) + max(p(y) - q(y), 0) = p(y),   beta = sum_x min(p(x), q(x)).

All randomness comes from an explicit `torch.Generator`; nothing here re-seeds.
"""

from __future__ import annotations

from typing import Optional

import torch

from specviz.config import Warp


def warp(logits: torch.Tensor, spec: Warp) -> torch.Tensor:
    """Logits (..., V) -> probabilities (..., V) in float32.

    Order as in transformers: temperature, then top-k, then top-p. Under greedy decoding the
    plain softmax is returned (it is what views show; decisions use its argmax).
    """
    logits = logits.float()
    if not spec.greedy:
        logits = logits / spec.temperature
    if spec.top_k and spec.top_k < logits.shape[-1]:
        kth = torch.topk(logits, spec.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if spec.top_p < 1.0:
        probs = _top_p(probs, spec.top_p)
    return probs


NUCLEUS_HEAD = 1024  # top-p looks for its nucleus among this many most likely tokens first


def _top_p(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Keep the smallest set of most likely tokens whose mass reaches top_p (at least one), in
    every row of (..., V) probabilities."""
    rows = probs.reshape(-1, probs.shape[-1])
    kept = torch.empty_like(rows)
    full = torch.ones(rows.shape[0], dtype=torch.bool, device=rows.device)  # rows the full sort decides
    if rows.shape[-1] > 4 * NUCLEUS_HEAD and rows.shape[0]:
        head_kept, found = _top_p_from_head(rows, top_p)
        kept[found], full = head_kept[found], ~found
    if bool(full.any()):
        some = rows[full]
        sorted_probs, order = torch.sort(some, dim=-1, descending=True)
        mass_before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs
        drop_sorted = mass_before >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        kept[full] = some.masked_fill(drop, 0.0)
    return (kept / kept.sum(dim=-1, keepdim=True)).reshape(probs.shape)


def _top_p_from_head(rows: torch.Tensor, top_p: float) -> tuple:
    """The full sort's kept probabilities (bit for bit) of (R, V) rows, found among each row's
    NUCLEUS_HEAD most likely tokens: (kept (R, V), found (R,) bool); a row whose nucleus cannot be
    told from its head is not found (its kept row is then meaningless). Sorting a whole vocabulary
    (150k tokens for Qwen) at every sampled position cost a batched CPU run (selfgen's sampled
    batches) about as much per row as the target's pass, and a speculative step as many sorts as it
    verifies positions; a nucleus is usually a few dozen tokens. The same cumulative sums are
    taken over the same leading values, so the kept positions are the same; they are read as
    "every token at least as likely as the last kept one", which is exact unless that value is
    tied across the cut (which tied token a sort puts first is its own affair: then, and when the
    nucleus may reach past the head, the full sort decides)."""
    head = torch.topk(rows, NUCLEUS_HEAD, dim=-1).values  # descending, each row
    mass_before = torch.cumsum(head, dim=-1) - head
    drop = mass_before >= top_p
    cut = torch.argmax(drop.to(torch.uint8), dim=-1)  # each row's first dropped position (0: none in the head)
    position = torch.arange(NUCLEUS_HEAD, device=rows.device)
    last = head.gather(-1, (cut - 1).clamp(min=0)[:, None])  # the last kept value
    found = ((cut > 0)
             & (drop | (position < cut[:, None])).all(dim=-1)  # dropped from the cut on (rounding is not monotone)
             & (mass_before[:, -1] >= top_p + 1e-4)  # not too close to top_p at the head's end to be sure
             & (last[:, 0] > head.gather(-1, cut[:, None])[:, 0]))  # no tie across the cut
    return rows.masked_fill(rows < last, 0.0), found


def sample(probs: torch.Tensor, spec: Warp, generator: torch.Generator) -> int:
    """One token from a 1-D distribution: its argmax under greedy, else a draw from it."""
    if spec.greedy:
        return int(torch.argmax(probs))
    return int(torch.multinomial(probs, 1, generator=generator))


def uniform(generator: torch.Generator) -> float:
    """The u of the rejection rule, drawn in [0, 1) from the run's generator."""
    return float(torch.rand((), generator=generator, device=generator.device, dtype=torch.float64))


def accept_probability(p_x: float, q_x: float) -> float:
    """min(1, p(x)/q(x)); a draft the drafter could not have produced (q = 0) is never accepted."""
    if q_x <= 0.0:
        return 0.0
    return min(1.0, p_x / q_x)


def residual(target_probs: torch.Tensor, draft_probs: torch.Tensor) -> tuple[torch.Tensor, float]:
    """norm(max(p - q, 0)) and its unnormalised mass sum_x max(p(x) - q(x), 0) = 1 - beta.

    When p == q there is nothing to resample (rejection has probability 0); p itself is
    returned so a caller that still asks gets a valid distribution.
    """
    diff = torch.clamp(target_probs - draft_probs, min=0.0)
    mass = float(diff.sum())
    if mass <= 1e-12:
        return target_probs, 0.0
    return diff / mass, mass


def overlap(target_probs: torch.Tensor, draft_probs: torch.Tensor) -> torch.Tensor:
    """beta = sum_x min(p(x), q(x)) along the last axis: the exact acceptance probability."""
    return torch.minimum(target_probs, draft_probs).sum(dim=-1)


def one_hot(token: int, like: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(like)
    out[token] = 1.0
    return out


def topk_slice(probs: torch.Tensor, n: int) -> Optional[tuple[list, list]]:
    """(ids, probs) of the n most likely tokens of a 1-D distribution, or None when n == 0."""
    if n <= 0:
        return None
    values, ids = torch.topk(probs, min(n, probs.shape[-1]))
    return ids.tolist(), values.tolist()
