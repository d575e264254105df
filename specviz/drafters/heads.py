"""Drafters that read the target's own hidden states: Medusa heads, EAGLE and DFlash (specviz.runtime.head_nets).

Both take the target's last hidden state of every committed token from the verification pass the
engine already runs (`uses_features`), so drafting costs no extra target forward, only the
heads' own small ones. Both are tree drafters (specviz.drafters.model_tree) over a different network:

  medusa  one forward of the K heads on f_t, the feature of the last token the target has
          cached, gives q for depths 1..K at once (head d drafts depth d). A static tree gives
          every node at depth d - 1 the same candidates, the top of head d (Medusa's trees).
  eagle   the root's forward feeds the (f_j, x_{j+1}) pairs the target produced since the last
          step and predicts the next feature; each further depth is one forward over the level's
          nodes with tree attention, each fed (its parent's predicted feature, its token). The
          dynamic tree keeps the nodes of highest cumulative draft probability (EAGLE-2).

As chains (methods `medusa` and `eagle`) they are the same drafters with one child per node and
report a chain. q is what the drafter samples from, warped like p, and is 0 outside the heads'
draft vocabulary: the rejection rule stays exact under greedy and under sampling.
"""

from __future__ import annotations

import torch

from specviz.config import option, parse_shape
from specviz.drafters.base import Proposal
from specviz.drafters.model_tree import TreeDrafter
from specviz.drafters.tree_budget import sizer_for
from specviz.errors import InputError
from specviz.methods import get
from specviz.runtime.head_nets import heads_for
from specviz.verifiers import sampling
from specviz.verifiers.draft_tree import ROOT, DraftTree, attention


class _FeatureDrafter(TreeDrafter):
    uses_features = True
    label = "depth"

    def __init__(self, heads, eos_token_ids=(), shape=None, dynamic=False, budget=16, depth=6, width=4, chain_k=None,
                 sizer=None):
        """A chain of up to `chain_k` tokens when `chain_k` is given, else a tree (static `shape`,
        or dynamic: `budget` nodes, or sized to the machine each step by `sizer`)."""
        self.heads = heads  # a specviz.runtime.head_nets.BoundHeads
        self.eos = set(eos_token_ids)
        self.chain = chain_k is not None
        self.shape = [1] * chain_k if self.chain else list(shape or ())
        self.dynamic, self.budget, self.depth, self.width, self.sizer = dynamic, budget, depth, width, sizer

    @property
    def device(self):
        return self.heads.device

    def propose(self, committed, k, warp, generator) -> Proposal:
        proposal = super().propose(committed, k, warp, generator)
        if self.chain:  # a one-path tree, reported as the chain it is
            proposal.shape = None
        return proposal

    def _q(self, feats: torch.Tensor, warp) -> torch.Tensor:
        return sampling.warp(self.heads.logits(feats), warp)

    def _sources(self, tree: DraftTree) -> list:
        """Per node: which head (Medusa) or which depth's forward (EAGLE) drafted it."""
        return [{"kind": self.heads.kind, self.label: tree.depth(n)} for n in range(len(tree))]

    def step_info(self) -> dict:
        return {"heads": self.heads.kind, "draft_vocab": self.heads.draft_vocab, **super().step_info()}


class MedusaDrafter(_FeatureDrafter):
    name = "Medusa heads"
    label = "head"

    def start(self, prompt_ids: list) -> None:
        self.feature = None  # the first step is the target's prefill: nothing to draft from yet

    def see_features(self, rows) -> None:
        self.feature = rows[-1]

    def _ready(self) -> bool:
        return self.feature is not None

    def _cached(self) -> int:
        return 0

    def _root(self, committed, warp) -> torch.Tensor:
        self.forwards += 1
        with torch.inference_mode():
            self.per_depth = self._q(self.heads.net(self.feature.to(self.heads.dtype)), warp)  # (K, V)
        return self.per_depth[0]

    def _expand(self, tree, nodes, warp, linear, slots) -> dict:
        """No forward: a node at depth d gets head d + 1's q, whatever its own token."""
        return {n: self.per_depth[tree.depth(n)] for n in nodes}

    def observe(self, committed, proposal, path, target_probs) -> None:
        pass

    @property
    def kind(self) -> str:
        return ("medusa static " + ",".join(map(str, self.shape))) if not self.chain else "medusa chain"


class EagleDrafter(_FeatureDrafter):
    @property
    def feature_layers(self):
        """EAGLE-3 reads the target's states at several layers (the engine asks its pass for them)."""
        return self.heads.feature_layers

    @property
    def name(self) -> str:
        return "EAGLE-3" if self.heads.kind == "eagle3" else "EAGLE"

    def start(self, prompt_ids: list) -> None:
        self.cache = None  # the layer's (keys, values): `fed` committed pairs, then this step's nodes
        self.fed = 0
        self.pending = []  # target features not yet fed to the layer
        self._start_sizer()

    def see_features(self, rows) -> None:
        self.pending.append(rows)

    def _ready(self) -> bool:
        return bool(self.pending)  # every step hands over at least one feature; the first step none

    def _linear(self, committed) -> int:
        return len(committed) - 1  # pairs (f_j, x_{j+1}) for every cached target token j

    def _cached(self) -> int:
        return self.fed

    def _new_features(self, committed) -> torch.Tensor:
        """The target's states handed over since the last step, in the heads' dtype (one per
        committed token but the last, after the `fed` ones), taken out of `pending`."""
        feats = torch.cat(self.pending).to(self.heads.dtype)
        self.pending = []
        assert self.fed + feats.shape[0] == len(committed) - 1, "one target feature per committed token but the last"
        return feats

    @torch.inference_mode()
    def _root(self, committed, warp) -> torch.Tensor:
        """Feed the pairs the target produced since the last step; q after the last committed token."""
        self.forwards += 1
        net, device = self.heads.net, self.heads.device
        feats = self._new_features(committed)
        m = feats.shape[0]
        tokens = torch.tensor(committed[self.fed + 1:self.fed + 1 + m], device=device)
        positions = torch.arange(self.fed + 1, self.fed + 1 + m, device=device)
        out, self.cache = net(feats, self.heads.embed(tokens), positions, self.cache)
        self.fed += m
        self.predicted = {ROOT: out[-1]}
        return self._q(out[-1], warp)

    @torch.inference_mode()
    def _expand(self, tree, nodes, warp, linear, slots) -> dict:
        """One forward over `nodes`, each fed (its parent's predicted feature, its token)."""
        self.forwards += 1
        attend, new_slots = attention(tree, linear, 0, slots, nodes)
        slots.update(new_slots)
        device = self.heads.device
        feats = torch.stack([self.predicted[tree.parents[n]] for n in nodes])
        tokens = torch.tensor([tree.tokens[n] for n in nodes], device=device)
        positions = torch.tensor([linear + tree.depth(n) for n in nodes], device=device)
        out, self.cache = self.heads.net(feats, self.heads.embed(tokens), positions, self.cache, attend.to(device))
        self.predicted.update(zip(nodes, out))
        q = self._q(out, warp)
        return {n: q[i] for i, n in enumerate(nodes)}

    def observe(self, committed, proposal, path, target_probs) -> None:
        """Drop the drafted nodes: accepted ones come back next step with the target's true features."""
        self._sized(proposal, path)
        if self.cache is not None:
            self.cache = (self.cache[0][:, :self.fed], self.cache[1][:, :self.fed])

    @property
    def kind(self) -> str:
        if self.chain:
            return f"{self.heads.kind} chain"
        if self.dynamic:
            return f"eagle dynamic (budget {self.budget}, depth {self.depth}, width {self.width})"
        return "eagle static " + ",".join(map(str, self.shape))


class ParallelEagleDrafter(EagleDrafter):
    """P-EAGLE-style parallel drafting: the root's one forward feeds the new target pairs and
    K - 1 learnt placeholders after them (specviz.runtime.head_nets.Eagle3Net, parallel=True) and reads q for
    depths 1..K at once, so drafting K tokens costs one small forward whatever K is. The
    placeholders' keys are dropped at once: the next step feeds the accepted tokens' real pairs.
    As a chain (method `peagle`) or, since a depth's q does not depend on the tokens above it, a
    static tree whose level d gets depth d's candidates (as Medusa's)."""

    label = "depth"

    @property
    def name(self) -> str:
        return "P-EAGLE"

    def propose(self, committed, k, warp, generator) -> Proposal:
        self.want = max(1, min(k, self.depth if self.dynamic else len(self.shape)))  # the depths whose q is read
        return super().propose(committed, k, warp, generator)

    @torch.inference_mode()
    def _root(self, committed, warp) -> torch.Tensor:
        self.forwards += 1
        net, device = self.heads.net, self.heads.device
        feats = net.features(self._new_features(committed))
        m, extra = feats.shape[0], self.want - 1
        tokens = torch.tensor(committed[self.fed + 1:self.fed + 1 + m], device=device)
        embeds = self.heads.embed(tokens)
        if extra:
            mask_f, mask_e = net.placeholders(range(2, 2 + extra), feats[m - 1])  # anchored at the last pair
            feats, embeds = torch.cat([feats, mask_f]), torch.cat([embeds, mask_e.to(embeds.dtype)])
        positions = torch.arange(self.fed + 1, self.fed + 1 + m + extra, device=device)
        out, cache = net(feats, embeds, positions, self.cache)
        self.fed += m
        self.cache = (cache[0][:, :self.fed], cache[1][:, :self.fed])  # the placeholders' keys go
        self.per_depth = self._q(out[m - 1:], warp)  # (want, V): depth 1 from the last pair, then each placeholder
        return self.per_depth[0]

    def _expand(self, tree, nodes, warp, linear, slots) -> dict:
        """No forward: a node at depth d gets depth d + 1's q, whatever its own token."""
        return {n: self.per_depth[tree.depth(n)] for n in nodes}

    def observe(self, committed, proposal, path, target_probs) -> None:
        pass  # nothing of the draft stays in the cache

    @property
    def kind(self) -> str:
        return "peagle chain" if self.chain else "peagle static " + ",".join(map(str, self.shape))


class DFlashDrafter(ParallelEagleDrafter):
    """DFlash's block drafting (specviz.runtime.head_nets.DFlashNet): the target's states of the
    tokens committed since the last step join the drafter's context (each layer's keys and values
    of them, kept: the context is committed text only), then one forward of the block, the last
    committed token and block - 1 masks at the positions after it, gives q for depths 1..k at
    once, k at most block - 1. The whole trained block runs whatever k is (its masks see each
    other: fewer would be another input than the one it learnt); only the k rows wanted are read
    through the output head. As a chain (method `dflash`) or as a dynamic tree (`dflash-tree`): a
    row's q does not depend on the tokens above it, so the children of every node at depth d are
    row d + 1's candidates, and EAGLE-2's best-first growth by cumulative q keeps the likeliest paths through
    the block's top candidates (no further forward: the block gave every depth at once)."""

    @property
    def name(self) -> str:
        return "DFlash"

    def start(self, prompt_ids: list) -> None:
        super().start(prompt_ids)
        self.kv = None  # per layer (keys, values) of the `fed` committed positions' context

    @torch.inference_mode()
    def _root(self, committed, warp) -> torch.Tensor:
        self.forwards += 1
        net, device = self.heads.net, self.heads.device
        ctx = net.context(self._new_features(committed))
        m = ctx.shape[0]
        new = net.context_kv(ctx, torch.arange(self.fed, self.fed + m, device=device))
        self.last_state = ctx[-1:]  # the fused state of the last position the target has read
        self.kv = new if self.kv is None else [(torch.cat([k0, k1], 1), torch.cat([v0, v1], 1))
                                               for (k0, v0), (k1, v1) in zip(self.kv, new)]
        self.fed += m
        size = net.block_size  # the anchor (the last committed token, at position fed) and its masks
        x = net.block(self.heads.embed(torch.tensor(committed[-1:], device=device)), size, self.last_state)
        out = net(x, torch.arange(self.fed, self.fed + size, device=device), self.kv)
        self.per_depth = self._q(out[1:1 + self.want], warp)  # (want, V): block rows 1..want
        return self.per_depth[0]

    def step_info(self) -> dict:
        return {**super().step_info(), "block": self.heads.net.block_size}

    @property
    def kind(self) -> str:
        return f"dflash {'chain' if self.chain else 'dynamic tree'} (block {self.heads.net.block_size})"


def _dynamic_tree(pair, cfg) -> dict:
    """A dynamic tree's settings (EAGLE-2's growth): cfg's budget, depth and width, or sized to the
    machine each step with tree_budget="auto"."""
    return dict(dynamic=True, budget=cfg.tree_budget, depth=cfg.tree_depth, width=cfg.tree_width,
                sizer=sizer_for(pair, cfg))


def build(pair, cfg, stop, policy=None) -> _FeatureDrafter:
    """The drafter of every method on trained heads (specviz.methods: medusa, medusa-tree, eagle,
    eagle-tree, eagle3, eagle3-tree, peagle, dflash, dflash-tree), bound to the pair's target."""
    method = get(cfg.method)
    heads = heads_for(pair, method.heads, cfg.heads or None)
    bound = heads.bind(pair.target)
    if method.heads in ("eagle", "eagle3"):
        if not method.tree:
            return EagleDrafter(bound, stop, chain_k=cfg.k)
        return EagleDrafter(bound, stop, **_dynamic_tree(pair, cfg))
    if method.heads == "peagle":
        return ParallelEagleDrafter(bound, stop, chain_k=cfg.k)
    if method.heads == "dflash":
        block = f"This DFlash drafter's blocks hold {heads.depth + 1} positions, so"
        if method.tree:
            if cfg.tree_depth > heads.depth:
                raise InputError(f"{block} its tree is at most {heads.depth} deep: use "
                                 f"{option('tree_depth', heads.depth)} or less.")
            return DFlashDrafter(bound, stop, **_dynamic_tree(pair, cfg))
        if isinstance(cfg.k, int) and cfg.k > heads.depth:
            raise InputError(f"{block} it drafts at most {heads.depth} tokens a step: use {option('k', heads.depth)} "
                             "or less.")
        return DFlashDrafter(bound, stop, chain_k=min(cfg.k, heads.depth) if isinstance(cfg.k, int) else heads.depth)
    shape = parse_shape(cfg.tree) if method.tree else [1] * cfg.k
    if len(shape) > heads.depth:
        what = f"a tree {len(shape)} deep ({option('tree')})" if method.tree else option("k", cfg.k)
        raise InputError(f"These Medusa heads draft at most {heads.depth} tokens deep (one per head), "
                         f"so {what} is too deep: use at most {heads.depth}.")
    return MedusaDrafter(bound, stop, shape=shape) if method.tree else MedusaDrafter(bound, stop, chain_k=cfg.k)
