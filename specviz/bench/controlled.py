"""A controlled-acceptance drafter: the draft model's real cost, an acceptance rate you choose.

It proposes the target's own greedy continuation (a script recorded by an autoregressive run of
the same prompt), each token replaced with probability 1 - a_set by a different token. It still
runs the draft model over every token it proposes, one forward per drafted token exactly as the
model drafter does, so a step costs what a real draft costs (c is real) and the draft model's KV
cache holds what was proposed (the engine crops it to the committed prefix after each step).

Under greedy verification each correct token is accepted unless the target's argmax in the
verification pass differs from the script (bf16 near-ties), and each corrupted one is rejected:
alpha ~ a_set. This traces measured speedup against alpha on real timings, and works with
random-weight models of any size (their greedy continuation is as good a script as any).
Under sampling a one-hot proposal is accepted with probability p(x), so a_set no longer sets alpha.

Off script (the committed text left the script, or ran past it) it proposes the draft model's
own greedy token, counted in step_finished.info["counters"]["off_script"].
Its q is one-hot on each proposed token: the true law of a deterministic proposal, so the
rejection rule stays lossless. Its corruption draws come from its own seeded torch.Generator.
"""

from __future__ import annotations

import time

import torch

from specviz.drafters.base import Drafter, Proposal, one_hot_rows
from specviz.runtime.lm import runner_for, synchronize


class ControlledDrafter(Drafter):
    name = "controlled acceptance"

    def __init__(self, model, script: list, a_set: float, vocab_size: int, eos_token_ids=(), seed: int = 0):
        if not 0.0 <= a_set <= 1.0:
            raise ValueError(f"a_set must be in [0, 1], got {a_set}")
        self.runner = runner_for(model)
        self.script, self.a_set, self.vocab_size = list(script), float(a_set), vocab_size
        self.eos = set(eos_token_ids)
        self.seed = seed
        self.counters = {}

    def start(self, prompt_ids: list) -> None:
        self.prompt_ids = list(prompt_ids)
        self.coin = torch.Generator().manual_seed(self.seed)  # once per run, never inside the loop
        self.runner.reset()  # the prompt is fed by the first proposal, in the same forward as its first draft

    def propose(self, committed, k, warp, generator) -> Proposal:
        self.counters = {"off_script": 0, "corrupted": 0}
        if k <= 0:
            return Proposal()
        start = time.perf_counter()
        logits = self.runner.forward(committed[self.runner.length:], last_only=True)[-1]
        tokens, forwards = [], 1
        at = len(committed) - len(self.prompt_ids)
        on_script = committed[len(self.prompt_ids):] == self.script[:at]
        while True:
            truth = self.script[at + len(tokens)] if on_script and at + len(tokens) < len(self.script) else None
            tokens.append(self._choose(truth, logits))
            if len(tokens) == k or tokens[-1] in self.eos:
                break
            logits = self.runner.forward([tokens[-1]], last_only=True)[-1]
            forwards += 1
        synchronize(self.runner.device)
        probs = one_hot_rows(tokens, self.vocab_size, logits.device)  # (n, V)
        return Proposal.chain(tokens, probs, forwards, time.perf_counter() - start)

    def _choose(self, truth, logits) -> int:
        if truth is None:
            self.counters["off_script"] += 1
            return int(torch.argmax(logits))
        if float(torch.rand((), generator=self.coin)) < self.a_set:
            return truth
        self.counters["corrupted"] += 1
        return self._other(truth)

    def _other(self, truth: int) -> int:
        """A token other than `truth` and not EOS, drawn uniformly."""
        while True:
            token = int(torch.randint(self.vocab_size, (), generator=self.coin))
            if token != truth and token not in self.eos:
                return token

    def observe(self, committed, proposal, path, target_probs) -> None:
        self.runner.crop(min(self.runner.length, len(committed) - 1))

    def step_info(self) -> dict:
        return {"counters": dict(self.counters)}
