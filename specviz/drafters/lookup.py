"""Drafting without a draft model: prompt lookup (n-gram copying), and the cascade that uses it
to speed up the draft model itself.

Prompt lookup decoding (Saxena 2023; transformers' `prompt_lookup_num_tokens`): find the first
earlier occurrence of the last n tokens (n = max_ngram down to min_ngram) and propose the tokens
that followed it. First, as the original implementation and transformers do: in a copying task
the first occurrence is usually in the prompt, the text being copied, while on free completion
the latest occurrence can do better (the suite's pld lanes on the rewrite and code prompts show
both). `prefer="latest"` keeps the other.

The drafter is deterministic, so its q is one-hot on each proposed token: under the rejection
rule a copy x is kept with probability p(x), and a rejected one is replaced from
norm(max(p - onehot(x), 0)), i.e. p without x. Lossless.
"""

from __future__ import annotations

import time
from typing import Optional

from specviz.config import vocab_size
from specviz.drafters.base import Drafter, Proposal, one_hot_rows
from specviz.runtime.lm import runner_for, synchronize
from specviz.verifiers import sampling
from specviz.verifiers.exact import default_verifier


def lookup(tokens: list, k: int, max_ngram: int = 3, min_ngram: int = 1,
           prefer: str = "first") -> Optional[dict]:
    """The continuation of the first (or, prefer="latest", the latest) earlier match of the
    longest suffix n-gram that has a continuation, or None.

    Returns {"tokens": [...], "ngram": n, "match": [start, end), "copied": [start, end)} with
    absolute indices into `tokens`.
    """
    if k <= 0:
        return None
    size = len(tokens)
    for n in range(min(max_ngram, size - 1), min_ngram - 1, -1):
        suffix = tokens[size - n:]
        starts = range(size - n) if prefer == "first" else range(size - n - 1, -1, -1)
        for start in starts:  # never the suffix itself (its continuation would be empty)
            if tokens[start:start + n] == suffix:
                copied = tokens[start + n:start + n + k]
                if copied:
                    return {"tokens": copied, "ngram": n, "match": [start, start + n],
                            "copied": [start + n, start + n + len(copied)]}
    return None


class PromptLookupDrafter(Drafter):
    """Copies the continuation of an earlier n-gram of the prompt or output."""

    name = "prompt lookup"

    def __init__(self, vocab_size: int, device, max_ngram: int = 3, min_ngram: int = 1):
        self.vocab_size, self.device = vocab_size, device
        self.max_ngram, self.min_ngram = max_ngram, min_ngram

    def propose(self, committed, k, warp, generator) -> Proposal:
        start = time.perf_counter()
        found = lookup(committed, k, self.max_ngram, self.min_ngram)
        if found is None:
            return Proposal(seconds=time.perf_counter() - start)
        tokens = found["tokens"]
        source = {"kind": "ngram", "ngram": found["ngram"], "match": found["match"]}
        sources = [{**source, "copied_from": found["copied"][0] + i} for i in range(len(tokens))]
        return Proposal.chain(tokens, one_hot_rows(tokens, self.vocab_size, self.device), 0,
                              time.perf_counter() - start, sources)


class CascadeDrafter(Drafter):
    """n-gram -> draft model -> target: the draft model drafts k tokens for the target, and its
    own decoding is sped up by prompt lookup, whose guesses the draft model verifies with the
    very rule the target uses on the draft (`specviz.verifiers`: greedy match, or the rejection
    rule against q with the guess's one-hot as its proposal). Each drafted token is therefore
    distributed exactly as the q it reports, and the outer rule stays lossless."""

    name = "cascade (n-gram -> draft model)"

    def __init__(self, model, eos_token_ids=(), max_ngram: int = 3, min_ngram: int = 1):
        self.runner = runner_for(model)
        self.eos = set(eos_token_ids)
        self.max_ngram, self.min_ngram = max_ngram, min_ngram
        self.counters = {}

    def start(self, prompt_ids: list) -> None:
        self.runner.reset()  # the prompt is fed by the first proposal, in the same forward as its first draft

    def propose(self, committed, k, warp, generator) -> Proposal:
        self.counters = {"draft_forwards": 0, "ngram_proposed": 0, "ngram_accepted": 0}
        if k <= 0:
            return Proposal()
        start = time.perf_counter()
        rule = default_verifier(warp)
        tokens, probs, sources = [], [], []
        while len(tokens) < k and not (tokens and tokens[-1] in self.eos):
            self._one_round(committed, tokens, probs, sources, k, warp, rule, generator)
        synchronize(self.runner.device)
        return Proposal.chain(tokens, probs, self.counters["draft_forwards"], time.perf_counter() - start,
                              sources)

    def _one_round(self, committed, tokens, probs, sources, k, warp, rule, generator) -> None:
        """One draft forward over the pending tokens plus an n-gram guess; keep what q allows."""
        context = committed + tokens
        found = lookup(context, k - len(tokens) - 1, self.max_ngram, self.min_ngram)
        guess = found["tokens"] if found else []
        pending = context[self.runner.length:]
        rows = len(guess) + 1
        logits = self.runner.forward(pending + guess, keep=rows)[-rows:]  # (len(guess) + 1, V)
        q = sampling.warp(logits, warp)
        draft = Proposal.chain(guess, one_hot_rows(guess, q.shape[-1], q.device))
        verdict = rule.verify(draft.tree, draft.dists, q, generator, self.eos)
        self.counters["draft_forwards"] += 1
        self.counters["ngram_proposed"] += len(guess)
        self.counters["ngram_accepted"] += verdict.accepted
        kept = guess[:verdict.accepted] + ([verdict.next_token] if verdict.next_token is not None else [])
        tokens += kept
        probs += [q[i] for i in range(len(kept))]
        sources += [{"kind": "ngram"}] * verdict.accepted + [{"kind": "draft"}] * (len(kept) - verdict.accepted)
        self.runner.crop(len(committed) + len(tokens) - 1)

    def observe(self, committed, proposal, path, target_probs) -> None:
        self.runner.crop(min(self.runner.length, len(committed) - 1))

    def step_info(self) -> dict:
        return {"counters": dict(self.counters)}


def build_pld(pair, cfg, stop, policy=None) -> PromptLookupDrafter:
    """`pld`'s drafter (specviz.methods)."""
    return PromptLookupDrafter(vocab_size(pair), pair.device, cfg.ngram)


def build_cascade(pair, cfg, stop, policy=None) -> CascadeDrafter:
    """`cascade`'s drafter (specviz.methods)."""
    return CascadeDrafter(pair.draft, stop, cfg.ngram)
