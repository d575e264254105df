"""Why acceptance falls when sampling hot: the temperature at the same text, or another text.

Under speculative sampling (Leviathan et al. 2023, section 2.3; Chen et al. 2023, Algorithm 2) a
drafted token is kept with probability beta = sum_x min(p(x), q(x)), the overlap of the target's
next-token distribution p and the draft's q at that position, and alpha is beta averaged over the
positions the rule judged. A run sampled at T = 1.5 accepts less than one at T = 0.7, but two
things changed between them at once:

* the temperature: at the *same* position, warming both distributions moves probability from
  the head, where a draft and its target mostly agree, into the tails, where they disagree
  ("the tails");
* the text: a hot sample wanders off to other text, whose positions the draft may imitate less
  well at any temperature ("drift").

`overlap_grid` separates the two by teacher forcing: the logits of both models at every
position of each text (one forward of each model over each text, done by the caller), warped to
each temperature, beta averaged over the positions. No token is sampled, so there is no sampling
noise in it. `split` reads the 2 x 2 of a cool and a hot text at a cool and a hot temperature.

Temperature only (no top-k or top-p), as the notebooks' sweeps use it. The warp and the overlap
are those of specviz.verifiers.sampling (`warp`, `overlap`), written out here because the
analysis layer imports no layer above it.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import torch


def mean_overlap(target_logits: torch.Tensor, draft_logits: torch.Tensor, temperature: float) -> float:
    """Mean over positions of beta = sum_x min(p(x), q(x)), with p = softmax(target_logits / T)
    and q = softmax(draft_logits / T); both logits (positions, V)."""
    if temperature <= 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    if target_logits.shape != draft_logits.shape or target_logits.dim() != 2 or not len(target_logits):
        raise ValueError(f"need two (positions, vocab) logits of one shape, got {tuple(target_logits.shape)} "
                         f"and {tuple(draft_logits.shape)}")
    p = torch.softmax(target_logits.float() / temperature, dim=-1)  # (positions, V)
    q = torch.softmax(draft_logits.float() / temperature, dim=-1)  # (positions, V)
    return float(torch.minimum(p, q).sum(dim=-1).mean())


def overlap_grid(logits: Mapping[str, tuple], temperatures: Sequence[float]) -> dict:
    """{(text, temperature): mean beta} for every text of `logits` ({text: (target_logits,
    draft_logits)}, each (positions, V), from one forward of each model over that text) at every
    temperature."""
    return {(text, t): mean_overlap(target, draft, t)
            for text, (target, draft) in logits.items() for t in temperatures}


def split(grid: Mapping[tuple, float], cool_text: str, hot_text: str, cool: float, hot: float) -> dict:
    """How much of the fall of beta from (cool text, cool T) to (hot text, hot T) is temperature
    at the same text and how much is the other text at the same temperature.

    Each is measured two ways (the 2 x 2 has two paths from corner to corner), and each path's
    two parts add up to the total:
        total      = beta(cool text, cool) - beta(hot text, hot)
        tails      = (beta(cool text, cool) - beta(cool text, hot), beta(hot text, cool) - beta(hot text, hot))
        drift      = (beta(cool text, hot) - beta(hot text, hot), beta(cool text, cool) - beta(hot text, cool))
        tails_share = mean of the two tails / total (None when the total is 0); drift's share is 1 - it.
    """
    b = {(text, t): grid[(text, t)] for text in (cool_text, hot_text) for t in (cool, hot)}
    total = b[cool_text, cool] - b[hot_text, hot]
    tails = (b[cool_text, cool] - b[cool_text, hot], b[hot_text, cool] - b[hot_text, hot])
    drift = (b[cool_text, hot] - b[hot_text, hot], b[cool_text, cool] - b[hot_text, cool])
    share = (sum(tails) / 2) / total if total else None
    return {"total": total, "tails": tails, "drift": drift, "tails_share": share}
