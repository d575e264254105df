"""A deterministic drafter for tests: right for exactly `correct` tokens per step, then wrong.

It replays a known continuation (e.g. the target's own greedy output), so a test can force any
partial-acceptance pattern. Its q is one-hot on each proposed token, which is the true
distribution of a deterministic drafter, so the rejection rule stays lossless with it too.
"""

from __future__ import annotations

import torch

from specviz.drafters.base import Drafter, Proposal


class ScriptedDrafter(Drafter):
    name = "scripted"

    def __init__(self, script: list, correct: int, vocab_size: int, eos_token_ids=()):
        self.script = list(script)
        self.correct = correct
        self.vocab_size = vocab_size
        self.eos = set(eos_token_ids)
        self.prompt_len = 0

    def start(self, prompt_ids: list) -> None:
        self.prompt_len = len(prompt_ids)

    def propose(self, committed, k, warp, generator) -> Proposal:
        at = len(committed) - self.prompt_len
        truth = self.script[at:at + k]
        tokens = []
        for i, token in enumerate(truth):
            tokens.append(token if i < self.correct else (token + 1) % self.vocab_size)
            if tokens[-1] in self.eos:
                break
        probs = torch.zeros(len(tokens), self.vocab_size)
        if tokens:
            probs[torch.arange(len(tokens)), torch.tensor(tokens)] = 1.0
        return Proposal.chain(tokens, probs)
