"""What every drafter is: the protocol with its defaults, and the proposal it hands the verifier;
and what the batched engine asks of one (`BatchDrafter`: B rows at once, or `RowDrafters`, one
single-sequence drafter per row)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import torch

from specviz.verifiers.draft_tree import DraftTree


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
        ahead(committed, proposal, warp) / behind()
                                                 the target's pass on `proposal` starts / has
                                                 ended: a drafter that works while the target
                                                 verifies (SSD, specviz.drafters.ssd) starts and
                                                 stops there

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

    def ahead(self, committed: list, proposal: Proposal, warp) -> None:
        """The target's pass over `proposal` is about to run."""

    def behind(self) -> None:
        """The target's pass is over (before the verdict)."""

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


def one_hot_rows(tokens: list, vocab_size: int, device) -> torch.Tensor:
    """The q rows of a drafter that proposes without sampling (n-gram lookups, scripts): each
    drafted token with probability 1, so the rejection rule accepts it with probability p."""
    probs = torch.zeros(len(tokens), vocab_size, device=device)  # (n, V)
    if tokens:
        probs[torch.arange(len(tokens), device=device), torch.tensor(tokens, device=device)] = 1.0
    return probs


# ---------------------------------------------------------------------------------------------
# batched drafters

class BatchDrafter:
    """What the batched engine asks of a drafter; `i` is a row's index in the live batch.

        start(prompts)                                   the rows' prompt ids
        propose(committed_rows, ks, warp, generators)    -> a Proposal (chain) per row
        see_features(i, rows) / observe(i, committed, proposal, path, probs)
        step_info(i)                                     facts for row i's step_finished.info
        keep_rows(indices)                               finished rows leave
    """

    name = "drafter"
    uses_features = False
    feature_layers = None  # EAGLE-3: the target layers whose states it reads (specviz.drafters.base)
    forwards = 0  # batched draft forwards of the last propose

    def start(self, prompts: list) -> None:
        pass

    def see_features(self, i: int, rows) -> None:
        pass

    def observe(self, i: int, committed: list, proposal, path, target_probs) -> None:
        pass

    def step_info(self, i: int) -> dict:
        return {}

    def keep_rows(self, rows: list) -> None:
        pass


class RowDrafters(BatchDrafter):
    """One single-sequence drafter per row (prompt lookup; Medusa and EAGLE heads, whose small
    forwards run row after row), behind the batched interface."""

    def __init__(self, make_one):
        self.make_one = make_one
        probe = make_one()
        self.name, self.uses_features, self.feature_layers = probe.name, probe.uses_features, probe.feature_layers

    def start(self, prompts: list) -> None:
        self.rows = [self.make_one() for _ in prompts]
        for drafter, prompt in zip(self.rows, prompts):
            drafter.start(prompt)

    def propose(self, committed_rows: list, ks: list, warp, generators: list) -> list:
        out = [d.propose(c, k, warp, g) if k > 0 else Proposal()
               for d, c, k, g in zip(self.rows, committed_rows, ks, generators)]
        self.forwards = max((p.forwards for p in out), default=0)
        return out

    def see_features(self, i: int, rows) -> None:
        self.rows[i].see_features(rows)

    def observe(self, i: int, committed: list, proposal, path, target_probs) -> None:
        self.rows[i].observe(committed, proposal, path, target_probs)

    def step_info(self, i: int) -> dict:
        return self.rows[i].step_info()

    def keep_rows(self, rows: list) -> None:
        self.rows = [self.rows[i] for i in rows]


class NoBatchDrafter(BatchDrafter):
    name = "none"

    def propose(self, committed_rows, ks, warp, generators) -> list:
        self.forwards = 0
        return [Proposal() for _ in committed_rows]


def no_batch_drafter(pair, cfg, stop, policy=None) -> BatchDrafter:
    """`ar` in a batch (specviz.methods)."""
    return NoBatchDrafter()
