"""What every drafter is: the protocol with its defaults, and the proposal it hands the verifier."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import torch

from specviz.tree import DraftTree


@dataclass
class Proposal:
    """A draft: a token tree (a chain is a one-path tree) and the q each node's children came from."""

    tree: DraftTree = field(default_factory=DraftTree)
    dists: dict = field(default_factory=dict)  # node (ROOT: the root) -> q there; absent: no q (lookahead)
    forwards: int = 0  # draft-model forward passes spent
    seconds: float = 0.0
    sources: list = field(default_factory=list)  # per node, where it came from (optional)
    shape: Optional[str] = None  # a tree drafter's label ("static 3,2,1", ...); None: a chain drafter
    notes: dict = field(default_factory=dict)  # the drafter's own, handed back to its observe()

    @classmethod
    def chain(cls, tokens: list, probs, forwards: int = 0, seconds: float = 0.0, sources=None) -> "Proposal":
        """x_1..x_n with q_1..q_n ((n, V) rows, or a list of rows): node i follows node i - 1."""
        tokens = [int(t) for t in tokens]
        if isinstance(probs, torch.Tensor) and tokens:  # one gather instead of a lookup per token
            q = probs[torch.arange(len(tokens), device=probs.device), torch.tensor(tokens, device=probs.device)]
            q = q.tolist()
        else:
            q = [float(probs[i][t]) for i, t in enumerate(tokens)]
        return cls(DraftTree.chain(tokens, q), {i - 1: probs[i] for i in range(len(tokens))}, forwards, seconds,
                   list(sources or []))

    @property
    def tokens(self) -> list:
        return self.tree.tokens

    def end_at(self, eos) -> "Proposal":
        """A chain drafter's proposal ends at its first end-of-text token: nothing after it is
        worth checking (a new Proposal; this one is left as it was). In a tree drafter's the
        verifier's walk stops at an accepted end of text."""
        tree = self.tree
        n = next((i + 1 for i, t in enumerate(tree.tokens) if t in eos), len(tree))
        if n == len(tree) or self.shape is not None:
            return self
        cut = DraftTree(tree.tokens[:n], tree.parents[:n], tree.q[:n], tree.cum_q[:n])
        return Proposal(cut, {i - 1: self.dists[i - 1] for i in range(n)}, self.forwards, self.seconds,
                        self.sources[:n], self.shape, self.notes)

    def __len__(self) -> int:
        return len(self.tree)


class Drafter:
    """The drafter protocol. `propose` is the one method a drafter must write; the rest have
    defaults. A drafter that samples must draw each token from the q it reports: that is what
    makes the rejection rule lossless.

        start(prompt_ids)                        a new run begins
        propose(committed, k, warp, generator)   -> Proposal of at most k tokens deep
        observe(committed, proposal, path, target_probs)
                                                 what the target kept: `path` (accepted nodes);
                                                 committed includes them and the next token
        step_info()                              extra facts for this step's event (JSON-safe)

    A drafter that reads the target's hidden states (Medusa heads, EAGLE) sets `uses_features`:
    the engine then asks the verification pass for them (no extra target forward) and hands it
    `see_features(rows)` after each step: the last hidden state of every token the target's cache
    gained, in order (every committed token but the last one has its feature). With
    `feature_layers` (EAGLE-3: a tuple of the target's layer indices) each row is (len + 1, d): the
    inputs of those layers, then the last hidden state.
    """

    name = "drafter"
    uses_features = False
    feature_layers = None

    def start(self, prompt_ids: list) -> None:
        pass

    def propose(self, committed: list, k: int, warp, generator) -> Proposal:
        raise NotImplementedError

    def observe(self, committed: list, proposal: Proposal, path: list, target_probs) -> None:
        pass

    def see_features(self, rows) -> None:
        pass

    def pass_timed(self, fed: int, drafted: int, seconds: float) -> None:
        """The target's verify pass of this step: `fed` tokens, `drafted` of them drafts, in `seconds`."""

    def step_info(self) -> dict:
        return {}


class NoDrafter(Drafter):
    """Autoregressive decoding: nothing is drafted, every token is the target's own sample."""

    name = "none"

    def propose(self, committed, k, warp, generator) -> Proposal:
        return Proposal()


def no_drafter(pair, cfg, stop, policy=None) -> NoDrafter:
    """`ar`'s drafter (specviz.methods): it drafts nothing."""
    return NoDrafter()
