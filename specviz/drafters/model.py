"""A small draft model of the target's family proposes tokens one forward at a time.

Its KV cache keeps every committed token but the last; tokens committed since the last step
(the last accepted draft, when all were accepted, and the residual or bonus token) are fed at
the start of the next proposal, so the prefix is never re-run. The first proposal feeds the
whole prompt: the draft's prefill and its first draft are one forward.
"""

from __future__ import annotations

import time

import torch

from specviz import sampling
from specviz.drafters.base import Drafter, Proposal
from specviz.lm import runner_for, synchronize


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

    def propose(self, committed: list, k: int, warp: sampling.Warp, generator: torch.Generator) -> Proposal:
        if k <= 0:
            return Proposal()
        start = time.perf_counter()
        logits = self.runner.forward(committed[self.runner.length:], last_only=True)[-1]
        tokens, probs, forwards = [], [], 1
        while True:
            q = sampling.warp(logits, warp)
            token = sampling.sample(q, warp, generator)
            tokens.append(token)
            probs.append(q)
            if stops(len(tokens), k, token, q, self.eos, self.stop_below):
                break
            logits = self.runner.forward([token], last_only=True)[-1]
            forwards += 1
        synchronize(self.runner.device)
        return Proposal.chain(tokens, probs, forwards, time.perf_counter() - start)

    def observe(self, committed: list, proposal, path, target_probs) -> None:
        self.runner.crop(min(self.runner.length, len(committed) - 1))


def build(pair, cfg, stop, policy=None) -> ModelDrafter:
    """`spec`'s drafter (specviz.methods); k="auto"'s confidence rule stops it below a q."""
    return ModelDrafter(pair.draft, stop, policy.stop_below if policy else None)
