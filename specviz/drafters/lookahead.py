"""Lookahead decoding (Fu, Bailis, Stoica & Zhang 2024, "Break the Sequential Dependency of LLM
Inference Using Lookahead Decoding"): no draft model. Greedy decoding only.

Two branches share each target pass, as one token tree under tree attention:
  window   a Jacobi iteration: W guessed tokens for the next W positions. The target's argmax
           after each guess is the next iteration's guess for the following position, so the
           guesses converge to the greedy continuation, several positions at a time.
  pool     an n-gram pool gathered from the window's trajectories: for every position, the
           guesses of the last N - 1 iterations taken diagonally (iteration t at position s,
           t + 1 at s + 1, ...) form an n-gram keyed by its first token. Up to G n-grams keyed by
           the last committed token are offered as candidates.
Both branches are merged into one trie rooted at the last committed token and verified by the
greedy tree rule (the longest path the target agrees with), so the output is exactly the
target's greedy output. Events expose the window and its outputs (the trajectories) and which
candidates came from the pool.
"""

from __future__ import annotations

import time

import torch

from specviz.drafters.base import Drafter, Proposal
from specviz.verifiers.draft_tree import ROOT, DraftTree


class LookaheadDrafter(Drafter):
    name = "lookahead (Jacobi window + n-gram pool)"

    def __init__(self, window: int = 5, ngram: int = 3, pool_candidates: int = 5, pool_per_key: int = 8):
        self.W, self.N, self.G, self.per_key = window, ngram, pool_candidates, pool_per_key

    @property
    def kind(self) -> str:
        return f"lookahead W={self.W} N={self.N} G={self.G}"

    def start(self, prompt_ids: list) -> None:
        tail = (prompt_ids * self.W)[-self.W:]  # first guesses: the prompt's tail (no randomness)
        self.window = {len(prompt_ids) + i: t for i, t in enumerate(tail)}
        self.levels = []  # past windows (position -> token), oldest first, at most N - 2
        self.pool = {}  # first token -> list of continuations (N - 1 tokens), newest first
        self.info = {}

    def propose(self, committed: list, k: int, warp, generator) -> Proposal:
        """The window's guesses and the pool's n-grams as one trie at most k deep; no q (the
        candidates are not drawn from a distribution: greedy verification only)."""
        assert warp.greedy, "lookahead decoding is greedy-only"
        start = time.perf_counter()
        base = len(committed)
        guesses = [self.window.get(base + i, committed[-1]) for i in range(min(self.W, k))]
        tree, sources = DraftTree(), []
        window_nodes = self._insert(tree, sources, guesses, "window")
        offered = self.pool.get(committed[-1], [])[:self.G]
        for gram in offered:
            self._insert(tree, sources, gram[:k], "pool")
        self.info = {"window": guesses, "pool_offered": [list(g) for g in offered],
                     "pool_keys": len(self.pool)}
        return Proposal(tree, {}, 0, time.perf_counter() - start, sources, self.kind,
                        notes={"base": base, "window_nodes": window_nodes})

    @staticmethod
    def _insert(tree: DraftTree, sources: list, tokens: list, source: str) -> list:
        """Add a chain to the trie (sharing existing prefixes); returns its node ids."""
        node, ids = ROOT, []
        for token in tokens:
            child = next((c for c in tree.children(node) if tree.tokens[c] == token), None)
            if child is None:
                child = tree.add(token, node, 1.0)
                sources.append({"kind": source})  # events.Source: where the branch came from
            node = child
            ids.append(node)
        return ids

    def observe(self, committed, proposal, path, target_probs) -> None:
        """Jacobi update from the target's argmax at the root and after each window guess, and
        n-gram collection from the trajectory."""
        base, sources = proposal.notes["base"], proposal.sources
        rows = [0] + [1 + n for n in proposal.notes["window_nodes"]]
        outputs = torch.argmax(target_probs[rows], dim=-1).tolist()  # predictions for base + i
        new = {base + i: t for i, t in enumerate(outputs)}
        self._collect(new)
        self.levels = (self.levels + [dict(self.window)])[-(self.N - 2):] if self.N > 2 else []
        self.window = new
        committed_end = base + len(path) + 1
        hit = "none"
        if path:
            hit = sources[path[-1]]["kind"] if sources else "window"  # the branch that reached furthest
        self.info.update(window_outputs=outputs, accepted=len(path), accepted_from=hit,
                         next_window_start=committed_end)

    def _collect(self, new: dict) -> None:
        trajectory = self.levels + [self.window, new]  # oldest ... newest, position -> token
        span = len(trajectory)
        if span < self.N:
            return
        trajectory = trajectory[-self.N:]
        for s in sorted(trajectory[0]):
            gram = [trajectory[j].get(s + j) for j in range(self.N)]
            if None in gram:
                continue
            key, rest = gram[0], gram[1:]
            grams = self.pool.setdefault(key, [])
            if rest in grams:
                grams.remove(rest)
            grams.insert(0, rest)
            del grams[self.per_key:]

    def step_info(self) -> dict:
        return {"lookahead": self.info}


def build(pair, cfg, stop, policy=None) -> LookaheadDrafter:
    """`lookahead`'s drafter (specviz.methods)."""
    return LookaheadDrafter(cfg.lookahead_window, cfg.ngram, cfg.lookahead_pool)
