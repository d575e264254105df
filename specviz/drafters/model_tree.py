"""Draft trees: several candidate continuations, drafted level by level, verified in one pass.

Static trees (Medusa / SpecInfer): `shape` gives the children per node at each depth, e.g.
[3, 2, 1]. Dynamic trees (EAGLE-2, Li et al. 2024): at each depth the `width` nodes of the last
level with the highest cumulative draft probability are expanded, `width` children each, until
`depth` levels or the `budget` of nodes is reached.

Children are the target's candidates at their parent. Under greedy decoding they are the top of
q, and the finished tree is re-ranked by cumulative probability and cut to the `budget` best
nodes, as EAGLE-2 does. Under sampling they are drawn from q one after another *without
replacement*, and whether a candidate enters the tree may depend only on what was drawn before
it, never on its own value: a re-rank that keeps a node because its own q is high would bias the
candidates towards likely tokens and the output away from the target's distribution (the
distribution test catches exactly that). So under sampling the budget is spent as the tree grows
(frontier nodes in rank order, each given its children before the next) and nothing is pruned.
Each depth costs one draft forward over the nodes it expands, with tree attention.
"""

from __future__ import annotations

import time

import torch

from specviz.config import Warp, parse_shape
from specviz.drafters.base import Drafter, Proposal
from specviz.drafters.tree_budget import sizer_for
from specviz.runtime.lm import runner_for, synchronize
from specviz.verifiers import sampling
from specviz.verifiers.draft_tree import ROOT, DraftTree, attention


class TreeDrafter(Drafter):
    name = "draft tree"
    # Re-rank and cut the finished tree under sampling too. LOSSY (see the module docstring);
    # only tests/test_tree.py sets it, to show that the distribution test catches the bias.
    rerank_sampled = False

    def __init__(self, model, eos_token_ids=(), shape=(3, 2, 1), dynamic=False, budget=16,
                 depth=6, width=4, sizer=None):
        """A dynamic tree with `sizer` (specviz.drafters.tree_budget.TreeSizer; budget "auto") keeps, each
        step, the nodes that maximise expected tokens per second on this machine."""
        self.runner = runner_for(model)
        self.eos = set(eos_token_ids)
        self.shape, self.dynamic = list(shape), dynamic
        self.budget, self.depth, self.width, self.sizer = budget, depth, width, sizer
        if dynamic and (budget == "auto") != (sizer is not None):
            raise ValueError("a tree sized to the machine takes budget='auto' and a TreeSizer, both or neither")

    @property
    def kind(self) -> str:
        if self.dynamic:
            return f"dynamic (budget {self.budget}, depth {self.depth}, width {self.width})"
        return "static " + ",".join(map(str, self.shape))

    def start(self, prompt_ids: list) -> None:
        self.runner.reset()  # the prompt is fed by the first proposal, in the same forward as its first draft
        self._start_sizer()

    def _start_sizer(self) -> None:
        self.fed_prompt = False  # the run's first drafting step feeds the prompt: its time is not a step's
        if self.sizer is not None:
            self.sizer.reset()

    def propose(self, committed: list, k: int, warp, generator) -> Proposal:
        """A tree at most k deep. Its notes say where its nodes sit in the draft cache
        (`linear` committed tokens, then node -> column), for observe() to keep the accepted path."""
        start = time.perf_counter()
        tree, slots, linear = DraftTree(), {}, self._linear(committed)
        if self.sizer is not None:
            self.sizer.info = {}  # this step's choice, once made
        if k <= 0 or not self._ready():  # nothing drafted, nothing fed: the draft cache stays as it is
            return Proposal(tree, shape=self.kind, notes={"linear": self._cached(), "slots": slots})
        self.forwards = 0
        pruned = self.dynamic and (warp.greedy or self.rerank_sampled)
        # the budget a sampled dynamic tree spends as it grows (a pruned one is cut afterwards):
        # sized, one fixed before anything is drawn
        self.step_budget = self.sizer.budget() if self.sizer is not None and not pruned else self.budget
        dists = {ROOT: self._root(committed, warp)}
        sized = pruned and self.sizer is not None  # greedy, sized: a level is drafted only if it may pay
        prefill = 0.0  # the first drafting step's root forward also fed the prompt: left out of its time
        if self.sizer is not None and not self.fed_prompt:
            synchronize(self.device)
            prefill, self.fed_prompt = time.perf_counter() - start, True
        levels = min(self.depth if self.dynamic else len(self.shape), k)
        frontier = [ROOT]
        for depth in range(1, levels + 1):
            width = self.width if self.dynamic else self.shape[depth - 1]
            new = []
            for node in frontier:
                room = self._room(tree, warp, width)
                new += [tree.add(t, node, q) for t, q in self._draw(dists[node], room, warp, generator)]
            ranked = self._rank(tree, new)[:self.width] if self.dynamic else new
            frontier = [n for n in ranked if tree.tokens[n] not in self.eos]
            if depth == levels or not frontier or not self._room(tree, warp, 1):
                break
            if sized and not self.sizer.deeper_pays(list(tree.cum_q), [tree.cum_q[n] for n in frontier],
                                                    time.perf_counter() - start - prefill):
                break
            level_start = time.perf_counter()
            dists.update(self._expand(tree, frontier, warp, linear, slots))
            if sized:
                synchronize(self.device)
                self.sizer.level_timed(time.perf_counter() - level_start)
        if pruned:
            tree, dists, slots = self._prune(tree, dists, slots, start, prefill)
            if sized:
                self.sizer.info["levels"] = depth
        elif self.sizer is not None and len(tree):  # sampled: this step's scores size the next step's tree
            synchronize(self.device)
            self.sizer.plan([tree.cum_q[n] for n in self._ranked(tree)], time.perf_counter() - start - prefill,
                            len(tree), counted=not prefill)
        synchronize(self.device)
        return Proposal(tree, dists, self.forwards, time.perf_counter() - start, self._sources(tree),
                        shape=self.kind, notes={"linear": linear, "slots": slots})

    # What a tree drafter built on another network overrides (specviz.drafters.heads): where the
    # root's q comes from, how a level of nodes is scored, how its cache is counted.

    def _ready(self) -> bool:
        return True

    def _linear(self, committed: list) -> int:
        """Committed entries the draft cache holds once the root's forward ran."""
        return len(committed)

    def _cached(self) -> int:
        return self.runner.length

    @property
    def device(self):
        return self.runner.device

    def _root(self, committed: list, warp) -> torch.Tensor:
        """q after the last committed token: one draft forward over the uncached committed tail."""
        self.forwards += 1
        return sampling.warp(self.runner.forward(committed[self.runner.length:], last_only=True)[-1], warp)

    def _sources(self, tree: DraftTree) -> list:
        return []

    def _room(self, tree: DraftTree, warp, width: int) -> int:
        """Children the next node may get: under sampling the budget is spent as the tree grows."""
        if not self.dynamic or warp.greedy or self.rerank_sampled:
            return width
        return max(0, min(width, self.step_budget - len(tree)))

    def _draw(self, q: torch.Tensor, n: int, warp, generator) -> list:
        """n children: the top n of q under greedy, else n draws from q without replacement."""
        if n <= 0:
            return []
        if warp.greedy:
            values, ids = torch.topk(q, n)
            return [(int(t), float(v)) for t, v in zip(ids, values) if v > 0]
        left, out = q.clone(), []
        for _ in range(n):
            if float(left.sum()) <= 1e-12:
                break
            token = sampling.sample(left / left.sum(), Warp(1.0), generator)
            out.append((token, float(q[token])))
            left[token] = 0.0
        return out

    def _expand(self, tree: DraftTree, nodes: list, warp, linear: int, slots: dict) -> dict:
        """One draft forward over `nodes` with tree attention: q at each of them (`slots` grows)."""
        self.forwards += 1
        attend, new_slots = attention(tree, linear, 0, slots, nodes)
        slots.update(new_slots)
        positions = [linear - 1 + tree.depth(n) for n in nodes]
        logits = self.runner.forward([tree.tokens[n] for n in nodes], attend=attend, positions=positions)
        return {n: sampling.warp(logits[i], warp) for i, n in enumerate(nodes)}

    @staticmethod
    def _rank(tree: DraftTree, nodes: list) -> list:
        """Best cumulative draft probability first; a parent always ranks before its children."""
        return sorted(nodes, key=lambda n: (-tree.cum_q[n], n))

    def _ranked(self, tree: DraftTree) -> list:
        """Every node of `tree`, best-ranked first."""
        return self._rank(tree, list(range(len(tree))))

    def _prune(self, tree: DraftTree, dists: dict, slots: dict, start: float, prefill: float = 0.0):
        """The best-ranked nodes: `budget` of them, or as many as the sizer finds pay this step."""
        ranked = self._ranked(tree)
        n = self.budget
        if self.sizer is not None:
            synchronize(self.device)
            n = self.sizer.choose([tree.cum_q[i] for i in ranked], time.perf_counter() - start - prefill,
                                  counted=not prefill)
        keep = sorted(ranked[:n])
        new_id = {ROOT: ROOT}
        pruned = DraftTree()
        for old in keep:
            new_id[old] = pruned.add(tree.tokens[old], new_id[tree.parents[old]], tree.q[old])
        return (pruned, {new_id[n]: d for n, d in dists.items() if n in new_id},
                {new_id[n]: s for n, s in slots.items() if n in new_id})

    def _sized(self, proposal, path) -> None:
        """Tell the sizer how many drafted nodes were accepted against how many it predicted."""
        if self.sizer is not None and len(proposal.tree):
            tree, accepted = proposal.tree, set(path)
            self.sizer.observe([(tree.cum_q[n], n in accepted) for n in self._ranked(tree)])

    def step_info(self) -> dict:
        return self.sizer.step_info() if self.sizer is not None else {}

    def pass_timed(self, fed: int, drafted: int, seconds: float) -> None:
        """The engine's verify pass: a sized tree learns how its passes compare with the curve."""
        if self.sizer is not None and drafted and fed - drafted <= 1:  # not a pass that fed the prompt
            self.sizer.timed(fed, seconds)

    def observe(self, committed, proposal, path, target_probs) -> None:
        """Keep the committed tokens and the accepted path's cached nodes in the draft cache."""
        self._sized(proposal, path)
        slots = proposal.notes["slots"]
        self.runner.keep(proposal.notes["linear"], [slots[n] for n in path if n in slots])


def build(pair, cfg, stop, policy=None) -> TreeDrafter:
    """`tree`'s drafter (specviz.methods): a static shape ("3,2,1") or a dynamic tree."""
    dynamic = cfg.tree == "dynamic"
    return TreeDrafter(pair.draft, stop, () if dynamic else parse_shape(cfg.tree), dynamic,
                       cfg.tree_budget, cfg.tree_depth, cfg.tree_width, sizer_for(pair, cfg) if dynamic else None)
