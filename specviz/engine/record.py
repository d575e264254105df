"""One engine step as a plain record, and the events built from it in one place.

The engine fills a `StepRecord` (what was drafted, what the target said, what the rule decided,
what was committed) and `EventWriter.step_events` turns it into the step's events, in the order
of the schema (`specviz.events`): the draft (one draft_proposed per token of a chain, or one
tree_built), one target_scored, a decision per judged node, the residual or bonus token, and
step_finished. Token texts and top-k slices are made here and nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import torch

from specviz import events as ev
from specviz.drafters.base import Proposal
from specviz.verifiers import sampling
from specviz.verifiers.base import Verdict


@dataclass
class StepRecord:
    step: int
    base: int  # position of the first drafted token (= committed tokens before the step)
    k: int  # how deep the drafter was allowed to draft
    proposal: Proposal
    cached: int  # tokens in the target's cache before its pass
    fed: int  # tokens its pass read: the uncached committed tail, then every drafted node
    target_probs: torch.Tensor  # row 0: p after the root (last committed token); 1 + i: after node i
    verify_time: float
    verdict: Verdict
    emitted: list  # accepted tokens, then the residual or bonus token
    finish: Optional[str]  # "eos" | "length" | None (the run goes on)
    elapsed: float  # the run's clocks at the end of the step (consumer pauses left out)
    cpu_elapsed: float
    why: dict = field(default_factory=dict)  # k="auto": the rule's reasons for k
    drafter_info: dict = field(default_factory=dict)  # Drafter.step_info() after observe()

    @property
    def prefill(self) -> int:
        """Committed tokens the target pass fed beyond the last one: the prompt, on step 0."""
        return self.fed - len(self.proposal) - 1


class EventWriter:
    """Builds events from records: token texts via `token_text`, top-k slices of `topk` tokens."""

    def __init__(self, token_text, topk: int, rule: str):
        self.text, self.n, self.rule = token_text, topk, rule

    def step_events(self, r: StepRecord) -> list:
        is_tree = r.proposal.shape is not None  # a tree drafter's step (a chain drafter's has no shape)
        out = self._tree(r) if is_tree else self._draft(r)
        out.append(self._scored(r))
        out += self._decisions(r, is_tree)
        out += self._next(r, is_tree)
        out.append(self._finished(r, is_tree))
        return out

    def topk(self, probs: torch.Tensor) -> Optional[dict]:
        top = sampling.topk_slice(probs, self.n)
        if top is None:
            return None
        ids, values = top
        return {"ids": ids, "texts": [self.text(t) for t in ids], "probs": values}

    def _draft(self, r: StepRecord) -> list:
        p, tree = r.proposal, r.proposal.tree
        return [ev.DraftProposed(step=r.step, index=i, position=r.base + i, token_id=token,
                                 token_text=self.text(token), q=tree.q[i], topk=self.topk(p.dists[i - 1]),
                                 source=p.sources[i] if p.sources else None)
                for i, token in enumerate(tree.tokens)]

    def _tree(self, r: StepRecord) -> list:
        p, tree = r.proposal, r.proposal.tree
        nodes = [{"id": i, "parent": tree.parents[i], "depth": tree.depth(i),
                  "position": r.base - 1 + tree.depth(i), "token_id": tree.tokens[i],
                  "token_text": self.text(tree.tokens[i]), "q": tree.q[i], "cum_q": tree.cum_q[i]}
                 for i in range(len(tree))]
        for node, source in zip(nodes, p.sources):
            node["source"] = source
        q_topk = [{"node": node, **self.topk(q)} for node, q in p.dists.items()] if self.n else []
        return [ev.TreeBuilt(step=r.step, shape=p.shape, nodes=nodes, mask_shape=[r.fed, r.cached + r.fed],
                             draft_forwards=p.forwards, q_topk=q_topk)]

    def _scored(self, r: StepRecord) -> ev.TargetScored:
        tree, probs = r.proposal.tree, r.target_probs
        return ev.TargetScored(
            step=r.step, positions=[r.base] + [r.base + tree.depth(i) for i in range(len(tree))],
            p_draft=[float(probs[tree.parents[i] + 1, t]) for i, t in enumerate(tree.tokens)],
            topk=[self.topk(row) for row in probs] if self.n else [], tokens_in=r.fed)

    def _decisions(self, r: StepRecord, is_tree: bool) -> list:
        return [(ev.TokenAccepted if d.accepted else ev.TokenRejected)(
                    step=r.step, index=d.index, position=r.base + d.index, token_id=d.token,
                    token_text=self.text(d.token), p=d.p, q=d.q, ratio=d.ratio, accept_prob=d.accept_prob,
                    u=d.u, rule=self.rule, node=d.node if is_tree else None, threshold=d.threshold)
                for d in r.verdict.decisions]

    def _next(self, r: StepRecord, is_tree: bool) -> list:
        v = r.verdict
        if v.next_token is None:
            return []
        index = len(v.path)
        common = dict(step=r.step, index=index, position=r.base + index, token_id=v.next_token,
                      token_text=self.text(v.next_token), node=v.next_parent if is_tree else None)
        if v.next_kind == "bonus":
            return [ev.BonusSampled(**common, p=v.next_p)]
        return [ev.ResidualSampled(**common, p=v.next_p, q=v.next_q,
                                   residual_prob=float(v.next_probs[v.next_token]),
                                   residual_mass=v.residual_mass, topk=self.topk(v.next_probs),
                                   drawn_from=v.drawn_from)]

    def _finished(self, r: StepRecord, is_tree: bool) -> ev.StepFinished:
        p, v = r.proposal, r.verdict
        shape = {"tree": p.shape, "path": v.path, "depth": p.tree.max_depth()} if is_tree else {}
        info = {**shape, **r.why, **r.drafter_info}
        return ev.StepFinished(
            step=r.step, k=r.k, drafted=len(p), accepted=v.accepted, evaluated=len(v.decisions),
            emitted_ids=r.emitted, emitted_texts=[self.text(t) for t in r.emitted],
            beta=[d.beta for d in v.decisions] if is_tree else v.beta,  # per decision | per drafted token
            draft_time=p.seconds, verify_time=r.verify_time, draft_forwards=p.forwards, target_forwards=1,
            elapsed=r.elapsed, finish_reason=r.finish, info=info or None, prefill=r.prefill,
            cpu_elapsed=r.cpu_elapsed)
