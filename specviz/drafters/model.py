"""A small draft model of the target's family proposes tokens one forward at a time.

Its KV cache keeps every committed token but the last; tokens committed since the last step
(the last accepted draft, when all were accepted, and the residual or bonus token) are fed at
the start of the next proposal, so the prefix is never re-run. The first proposal feeds the
whole prompt: the draft's prefill and its first draft are one forward.
"""

from __future__ import annotations

import time

import torch

from specviz.config import Warp
from specviz.drafters.base import BatchDrafter, Drafter, Proposal
from specviz.runtime.batch_lm import batch_runner_for
from specviz.runtime.lm import runner_for, synchronize
from specviz.verifiers import sampling


def stops(drafted: int, k: int, token: int, q, eos, stop_below) -> bool:
    """The draft model's stop rule, in one sequence and in a batch's rows alike: at k drafts, at
    a drafted end of text, or (k="auto"'s confidence rule) when q(x) of the drafted token falls
    below `stop_below`."""
    return drafted == k or token in eos or (stop_below is not None and float(q[token]) < stop_below)


class ModelDrafter(Drafter):
    name = "draft model"

    def __init__(self, model, eos_token_ids=(), stop_below=None):
        self.runner = runner_for(model)
        self.eos = set(eos_token_ids)
        self.stop_below = stop_below  # stop drafting once q(x) of the drafted token falls below

    def start(self, prompt_ids: list) -> None:
        self.runner.reset()  # the prompt is fed by the first proposal, in the same forward as its first draft

    def propose(self, committed: list, k: int, warp: Warp, generator: torch.Generator) -> Proposal:
        if k <= 0:
            return Proposal()
        start = time.perf_counter()
        logits = self.runner.forward(committed[self.runner.length:], last_only=True)[-1]
        tokens, probs = [], []
        forwards = 1 + self.draft_on(tokens, probs, logits, k, warp, generator)
        synchronize(self.runner.device)
        return Proposal.chain(tokens, probs, forwards, time.perf_counter() - start)

    def draft_on(self, tokens: list, probs: list, logits, k: int, warp: Warp, generator: torch.Generator) -> int:
        """Draw from `logits` (after the last token fed), feed each draw and draw again until the
        stop rule: `tokens` and `probs` grow in place. Returns the forwards it ran (one fewer than
        the draws: the last draw is not fed)."""
        forwards = 0
        while True:
            q = sampling.warp(logits, warp)
            token = sampling.sample(q, warp, generator)
            tokens.append(token)
            probs.append(q)
            if stops(len(tokens), k, token, q, self.eos, self.stop_below):
                return forwards
            logits = self.runner.forward([token], last_only=True)[-1]
            forwards += 1

    def observe(self, committed: list, proposal, path, target_probs) -> None:
        self.runner.crop(min(self.runner.length, len(committed) - 1))


def build(pair, cfg, stop, policy=None) -> ModelDrafter:
    """`spec`'s drafter (specviz.methods); k="auto"'s confidence rule stops it below a q."""
    return ModelDrafter(pair.draft, stop, policy.stop_below if policy else None)


class BatchModelDrafter(BatchDrafter):
    """The draft model, batched: each of its forwards feeds every row still drafting at once
    (the first one each row's uncached tail, then one drafted token per row). A row stops at
    its k, at a drafted end of text or, with a confidence rule, when q(x) falls below it;
    rows that stopped ride along empty. Each row samples from its own generator, in the order
    specviz.drafters.model.ModelDrafter draws."""

    name = "draft model"

    def __init__(self, model, eos_token_ids=(), stop_below=None):
        self.model, self.eos, self.stop_below = model, set(eos_token_ids), stop_below

    def start(self, prompts: list) -> None:
        self.runner = batch_runner_for(self.model, len(prompts))

    def propose(self, committed_rows: list, ks: list, warp, generators: list) -> list:
        start = time.perf_counter()
        rows = len(committed_rows)
        tokens, probs = [[] for _ in range(rows)], [[] for _ in range(rows)]
        live = [k > 0 for k in ks]
        lengths = self.runner.lengths
        feeds = [c[lengths[i]:] if live[i] else [] for i, c in enumerate(committed_rows)]
        self.forwards = 0
        while any(live):
            logits = self.runner.forward(feeds, [1 if on else 0 for on in live])
            self.forwards += 1
            drafting = [i for i in range(rows) if live[i]]
            q_rows = sampling.warp(torch.cat([logits[i][-1:] for i in drafting]), warp)
            feeds = [[] for _ in range(rows)]
            for q, i in zip(q_rows, drafting):
                token = sampling.sample(q, warp, generators[i])
                tokens[i].append(token)
                probs[i].append(q)
                if stops(len(tokens[i]), ks[i], token, q, self.eos, self.stop_below):
                    live[i] = False
                else:
                    feeds[i] = [token]
        synchronize(getattr(self.runner, "device", "cpu"))
        seconds = time.perf_counter() - start
        return [Proposal.chain(tokens[i], torch.stack(probs[i]) if probs[i] else probs[i], self.forwards, seconds)
                for i in range(rows)]

    def observe(self, i: int, committed: list, proposal, path, target_probs) -> None:
        self.runner.crop(i, min(self.runner.lengths[i], len(committed) - 1))

    def backlog(self, committed_rows: list) -> float:
        """Tokens per row (mean) the draft model has not seen: after plain steps (or a plain
        prompt pass) its next forward catches up on them before it drafts."""
        lengths = self.runner.lengths
        return sum(max(0, len(c) - 1 - lengths[i]) for i, c in enumerate(committed_rows)) / max(1, len(committed_rows))

    def keep_rows(self, rows: list) -> None:
        self.runner.keep_rows(rows)


def batch_build(pair, cfg, stop, policy=None) -> BatchModelDrafter:
    """`spec`'s drafter in a batch (specviz.methods): the draft model's rows in one padded
    forward, stopped by the same rule as `build`'s."""
    return BatchModelDrafter(pair.draft, stop, policy.stop_below if policy else None)
