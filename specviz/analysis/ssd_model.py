"""SSD's outcome model, and a prediction of SSD's speed made apart from any SSD run.

Speculative speculative decoding (specviz.drafters.ssd) prepares the next draft for the likely
outcomes (a, b) of the verification under way. `OutcomeModel` is what its drafter believes of
the next outcome; the drafter plans with it and learns as it runs.

The prediction (`predict`) is made from quantities measured apart from the SSD run it predicts:

  outcomes    plain speculation's verdicts on the same text (greedy: the same drafts, so the same
              verdicts), from where each of the text's tokens ranks among the draft's candidates;
              the hit rate is the share of them that the same OutcomeModel, replayed on them,
              would have prepared (`modelled_hits`)
  split       the cost of sharing the cores, timed on its own (specviz.bench.ssd.split_cost): the
              target's pass with every core, and with its share while the draft model works
              beside it; a draft forward beside the pass
  spec        plain speculation's own c (a draft forward over its pass) and rest of a step

(SSD's own rest of a step, its planning and keeping of outcomes, is taken as spec's: it has no
measurement apart from an SSD run), and the preparation modelled from the split (`preparation`): the drafter's forwards beside the
pass (x_K's, then one per depth over every outcome) run until the pass ends, and the verdict
waits for the forward under way. No timing of the SSD run enters it, so setting it beside the
measured ratio tests the formula (specviz.analysis.theory.ssd_speedup).

Pure Python: no torch.
"""

from __future__ import annotations

import math
from typing import Optional

RANKS = 16  # candidate ranks the outcome model tracks; a token ranked lower counts as "beyond"


class OutcomeModel:
    """What the drafter believes of the next verification's outcome (a, b), learnt as it runs.

    P(a) = alpha^a (1 - alpha) for a < K and alpha^K for a = K, with alpha the share of decided
    drafts accepted so far (a Beta(1, 1) prior). P(b at rank r) by kind ("residual" after a
    rejection, "bonus" after K acceptances): counts of the ranks seen, from a prior falling as
    1 / (r + 1)."""

    def __init__(self):
        self.accepted, self.decided = 1.0, 2.0
        prior = [1.0 / (r + 1) for r in range(RANKS)]
        self.ranks = {"residual": list(prior), "bonus": list(prior)}
        self.beyond = {"residual": 1.0, "bonus": 1.0}

    @property
    def alpha(self) -> float:
        return self.accepted / self.decided

    def length_probs(self, k: int) -> list:
        """P(a accepted) for a = 0..k."""
        a = self.alpha
        return [a ** n * (1 - a) for n in range(k)] + [a ** k]

    def rank_probs(self, kind: str) -> list:
        total = sum(self.ranks[kind]) + self.beyond[kind]
        return [c / total for c in self.ranks[kind]]

    def plan(self, k: int, fanout: int) -> list:
        """The `fanout` most likely (a, rank) slots, each with its estimated probability, best first."""
        lengths = self.length_probs(k)
        slots = [(lengths[a] * p, a, r) for a in range(k + 1)
                 for r, p in enumerate(self.rank_probs("bonus" if a == k else "residual"))]
        slots.sort(key=lambda s: (-s[0], s[1], s[2]))
        return [(a, r, prob) for prob, a, r in slots[:fanout]]

    def observe(self, accepted: int, drafted: int, kind: Optional[str], rank: Optional[int]) -> None:
        """A verification ended: `accepted` of `drafted`; b ranked `rank` among its kind's candidates
        (None: beyond those tracked; kind None: its candidates were not computed)."""
        self.accepted += accepted
        self.decided += min(accepted + 1, drafted)
        if kind is not None:
            if rank is not None and rank < RANKS:
                self.ranks[kind][rank] += 1.0
            else:
                self.beyond[kind] += 1.0


def spec_outcomes(ranks: list, k: int) -> list:
    """Greedy plain speculation's verdicts at draft length k on a text, from `ranks`: where each of
    the text's tokens ranks among the draft model's candidates at its position, the draft reading
    the text itself (0: the draft's top token; None: below RANKS). A step drafts up to k tokens
    (fewer where the length limit leaves fewer), accepts while the draft's top token is the text's,
    and ends with the text's next token b. Returns (a, K, kind, rank of b among its kind's
    candidates): after a rejection the rejected draft is not a candidate, so b's rank drops by one."""
    steps, pos, n = [], 0, len(ranks)
    while pos < n:
        drafted = min(k, n - pos - 1)
        a = 0
        while a < drafted and ranks[pos + a] == 0:
            a += 1
        if a < drafted:
            rank = ranks[pos + a]
            steps.append((a, drafted, "residual", None if rank is None else rank - 1))
        else:
            steps.append((a, drafted, "bonus", ranks[pos + drafted]))
        pos += a + 1
    return steps


def modelled_hits(texts: list, k: int, fanout: int) -> tuple:
    """(hits, verdicts): SSD's OutcomeModel replayed on plain speculation's verdicts at k on each
    text (a fresh model per text, as per run), a hit where the outcome was among its plan."""
    hits = verdicts = 0
    for ranks in texts:
        model = OutcomeModel()
        for a, drafted, kind, rank in spec_outcomes(ranks, k):
            if not drafted:
                continue
            verdicts += 1
            hits += any(pa == a and pr == rank for pa, pr, _ in model.plan(drafted, fanout))
            model.observe(a, drafted, kind, rank)
    return hits, verdicts


def preparation(target_beside: float, draft_beside: float, k: int) -> dict:
    """What preparation gets done during one pass (`prepare="overlap"`): forwards of `draft_beside`
    seconds each run while the pass of `target_beside` seconds does; x_K's forward first, then one
    per depth. The verdict waits for the forward under way. Returns the depth ready on a hit and
    the wait, in seconds."""
    fit = target_beside / draft_beside  # forwards that fit in the pass
    if fit >= k + 1:
        return {"forwards_in_pass": fit, "ready": float(k), "wait_s": 0.0}
    done = math.ceil(fit)  # the one under way at the end of the pass is finished, then taken
    return {"forwards_in_pass": fit, "ready": float(min(k, done - 1)), "wait_s": draft_beside * (done - fit)}


def predict(k: int, fanout: int, ranks: list, split: dict, spec_c: float, spec_overhead: float) -> dict:
    """SSD's speed over plain speculation at k, from quantities measured apart from any SSD run
    (module docstring): `ranks` per text, `split` (split_cost's row at k: seconds), spec's own c
    and rest of a step (in its passes). Every input and the ratio, in target passes."""
    from specviz.analysis import theory

    hits, verdicts = modelled_hits(ranks, k, fanout)
    prep = preparation(split["target_beside_draft"], split["draft_beside_target"], k)
    hit = hits / verdicts if verdicts and prep["ready"] > 0 else 0.0
    inputs = {"hit": hit, "verdicts": verdicts, "ready": prep["ready"], "c": spec_c,
              "slowdown": split["target_beside_draft"] / split["target_all"],
              "wait": prep["wait_s"] / split["target_all"], "overhead": spec_overhead,
              "forwards_in_pass": prep["forwards_in_pass"]}
    ratio = theory.ssd_speedup(hit, k, spec_c, inputs["slowdown"], prep["ready"] or float(k), inputs["wait"],
                               spec_overhead)
    return {"inputs": inputs, "vs_spec": ratio}
