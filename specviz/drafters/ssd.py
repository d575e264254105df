"""Speculative speculative decoding (SSD; Kumar, Dao and May 2026, the Saguaro algorithm).

Plain speculation drafts, then waits while the target verifies, then drafts again. SSD's drafter
does not wait: while the target's pass runs, it guesses how that verification will end and
drafts the next step for each guess. A verification ends in an *outcome* (a, b): a of the K
drafts accepted, then the target's own token b (the residual token after a rejection, or the
bonus token after all K). When the real outcome is among those prepared, the next draft is
ready the moment the verdict is in (a *hit*); on a *miss* the drafter drafts as usual.

Which outcomes to prepare (the paper's three questions, answered as it does):

  how many    a fan-out budget F of outcomes a step (`fanout`);
  which       the most likely ones: P(a) from the acceptance rate seen so far, geometric in a as
              the paper's analysis assumes, times P(b is the draft's r-th candidate there),
              learnt from where b ranked in past steps. Candidates are the draft's top tokens:
              after the a-th draft, q_{a+1} without the rejected draft x_{a+1} (the residual
              concentrates where p > q); after all K, q_{K+1}. Choosing the F best (a, rank)
              slots spends the budget as the paper's geometric fan-out does: more candidates
              where acceptance is likely to end;
  how deep    each prepared outcome is drafted k tokens deep, all outcomes at once: one draft
              forward per depth over every branch, with tree attention in the draft's cache;
  on a miss   the draft model drafts as plain speculation does (the paper's "neural backup").

`prepare="overlap"` (the default) stops preparing when the target's pass ends, so the drafter
never delays the target by more than the forward it is in; a hit prepared less than k deep is
drafted on from where it stopped. `prepare="full"` waits until every outcome is k deep (for
tests and for seeing what full preparation costs).

Verification is unchanged, so the output is the target's: greedy, token for token; sampled,
its distribution. The draft after each verdict draws from q with a generator of its own, seeded
by the run's seed, the step and the outcome (a, b): a prepared branch draws from it, a hit goes
on drawing from it, a miss drafts from scratch with it. So the draft a step verifies does not
depend on how far preparation got before the verdict, and a seeded run gives the same tokens
however the threads were timed, up to floating point: a prepared branch's q comes from a batched
tree-attention forward, a miss's from one-token forwards, which may differ in their last bits.

Concurrency: on a CPU the preparation runs on a thread of its own with `threads` cores of
PyTorch's pool (default: a third of the cores, at least one) while the target's pass runs on the
rest; outside the overlap the target and a miss's drafting use every core. PyTorch's OpenMP
builds, the usual ones, keep a thread count per thread, so the drafter's thread sets its count
once, as it starts (before the run's first pass), and the calling thread lowers its own count
for the pass and takes it back right after: between steps the run hands control back to its
consumer, which may run another model on the same thread (the app's race) or resume the run on
another thread, so a count the calling thread kept across steps would leak into that work. On a
build with another thread pool the count is the process's, so the two share the pool instead,
and the step info says so. On CUDA it runs on a second stream, ordered after the work queued
before the pass by an event, its cache tensors marked as used by that stream.

Preparation never grows the draft's cache past what it holds: a static cache (CUDA graphs,
specviz.runtime.lm.GraphLM) stops it at the level that would not fit. Each step's `info["ssd"]`
says what was prepared, what happened, why preparation stopped, and when each side ran (the
timeline view draws it: specviz.render.timeline).
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Optional

import torch

from specviz.analysis.ssd_model import RANKS, OutcomeModel  # the outcome model is pure: the prediction replays it
from specviz.drafters.base import Proposal
from specviz.drafters.model import ModelDrafter, stops
from specviz.runtime.lm import GraphLM, synchronize
from specviz.verifiers import sampling
from specviz.verifiers.draft_tree import DraftTree, attention

def draft_threads(threads="auto") -> int:
    """The cores of PyTorch's pool the preparing drafter takes: "auto" is a third, at least one."""
    return max(1, torch.get_num_threads() // 3) if threads == "auto" else int(threads)


def cache_room(runner) -> Optional[int]:
    """Tokens the runner's KV cache can hold: a GraphLM's static cache has a fixed length; the
    other runners' caches grow as they are fed (None)."""
    return runner.state.max_len if isinstance(runner, GraphLM) else None


def take_share(threads: Optional[int]) -> None:
    """On the drafter's thread, once, as it starts: its share of the cores for good (None: the pool
    is shared). Reading the count first makes PyTorch initialise this thread's count now; done
    lazily at its first parallel op, it would copy the process's default over the share."""
    if threads is not None:
        torch.get_num_threads()
        torch.set_num_threads(threads)


def candidates(q: torch.Tensor, exclude: Optional[int], n: int) -> list:
    """The draft's n best tokens under q, without `exclude` (the rejected draft)."""
    if exclude is None:
        return [int(t) for t in torch.topk(q, min(n, q.numel())).indices]
    ids = torch.topk(q, min(n + 1, q.numel())).indices.tolist()
    return [int(t) for t in ids if t != exclude][:n]


def rank_of(q: torch.Tensor, exclude: Optional[int], token: int) -> Optional[int]:
    """Where `token` ranks among the draft's candidates (None: below RANKS)."""
    top = candidates(q, exclude, RANKS)
    return top.index(token) if token in top else None


@dataclass
class Branch:
    """One prepared outcome: a drafts accepted, then b; its own draft y_1..y_d with their q."""

    accepted: int
    token: int
    prob: float  # the outcome model's estimate
    rank: int
    tokens: list = field(default_factory=list)  # y_1..y_d
    dists: list = field(default_factory=list)  # q of each y
    fed: list = field(default_factory=list)  # the tree nodes fed so far: b, y_1, ..., y_(d-1)
    pending: Optional[int] = None  # the node to feed next (b, then the last y drawn)
    generator: Optional[torch.Generator] = None
    done: bool = False


class SSDDrafter(ModelDrafter):
    """The draft model, drafting the next step for the likely outcomes while the target verifies."""

    name = "ssd (draft model)"

    def __init__(self, model, eos_token_ids=(), k: int = 4, fanout: int = 4, prepare: str = "overlap",
                 threads="auto", seed: int = 0):
        """`k`: how deep each outcome is prepared (the run's draft length)."""
        super().__init__(model, eos_token_ids)
        self.k_next, self.fanout, self.prepare, self.seed = k, fanout, prepare, seed
        self.cuda = self.runner.device.type == "cuda" if hasattr(self.runner.device, "type") else False
        cores = torch.get_num_threads()
        self.threads = draft_threads(threads)
        self.target_threads = max(1, cores - self.threads)
        self.cores = cores
        # OpenMP keeps the thread count per thread; another pool's count is the process's own
        self.split = not self.cuda and "OpenMP" in torch.__config__.parallel_info()
        self.levels_cap: Optional[int] = None  # tests: stop preparing after this many levels, as if the pass ended
        self.room = cache_room(self.runner)
        # the initializer holds no reference to the drafter: the idle thread ends with the pool
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="specviz-ssd", initializer=take_share,
                                       initargs=(self.threads if self.split else None,))
        self.worker_started = False
        self.given_back: Optional[int] = None  # the calling thread's count while the pass runs on its share
        self.stream = torch.cuda.Stream(device=self.runner.device) if self.cuda else None

    def _start_worker(self) -> None:
        """Start the drafter's thread before the run's first pass. Its count also set the process's
        default (what threads not yet started get, and PyTorch's other pool): the calling thread
        puts its own back at once."""
        if self.worker_started:
            return
        own = torch.get_num_threads()
        self.pool.submit(lambda: None).result()
        if self.split:
            torch.set_num_threads(own)
        self.worker_started = True

    def start(self, prompt_ids: list) -> None:
        super().start(prompt_ids)
        self.outcomes = OutcomeModel()
        self.step = 0
        self.branches, self.hit, self.job, self.info, self.prep = [], None, None, {}, None
        self.verdict = (-1, -1, -1)  # (step, a, b) of the last verification: whose draft is next
        self._start_worker()

    # -- the critical path: a hit's draft is ready; a miss drafts as plain speculation ----------

    def propose(self, committed: list, k: int, warp, generator) -> Proposal:
        self.t0 = time.perf_counter()
        self.info = {"step": self.step, "threads": "cuda streams" if self.cuda else (
            {"target": self.target_threads, "draft": self.threads, "cores": self.cores} if self.split
            else "one pool shared")}
        branch, self.hit = self.hit, None
        if branch is None or k <= 0:  # drawn as the prepared branch of this outcome would have been
            proposal = super().propose(committed, k, warp, self._generator(*self.verdict))
            self.info["draft"] = {"from": "drafted", "forwards": proposal.forwards}
        else:
            proposal = self._from_branch(branch, k, warp, len(committed))
            self.info["draft"] = {"from": "prepared", "prepared": min(len(branch.tokens), k),
                                  "forwards": proposal.forwards}
        self.info["draft"].update(start=0.0, end=time.perf_counter() - self.t0)
        return proposal

    def _from_branch(self, branch: Branch, k: int, warp, committed: int) -> Proposal:
        """The prepared draft, drafted on to k from where preparation stopped (exposed time). The
        draft cache holds the committed tokens and y_1..y_(d-1) (observe kept them)."""
        start = time.perf_counter()
        tokens, dists, forwards = branch.tokens[:k], branch.dists[:k], 0
        if len(branch.tokens) > k:  # less room than prepared for (the run's end is near)
            self.runner.crop(committed + k - 1)
        if len(tokens) < k and not branch.done:  # feed the last prepared draw, then draft as spec does
            logits = self.runner.forward([tokens[-1]], last_only=True)[-1]
            forwards = 1 + self.draft_on(tokens, dists, logits, k, warp, branch.generator)
        synchronize(self.runner.device)
        return Proposal.chain(tokens, torch.stack(dists), forwards, time.perf_counter() - start)

    # -- off the critical path: prepare while the target verifies ------------------------------

    def ahead(self, committed: list, proposal: Proposal, warp) -> None:
        """The target's pass is about to run on `proposal`: start preparing the next step."""
        self.verify_start = time.perf_counter() - self.t0
        self.branches, self.prep, self.job = [], None, None
        if not len(proposal) or proposal.tree.tokens[-1] in self.eos:
            return  # nothing after an end of text is worth preparing
        self.stop = threading.Event()
        plan = self.outcomes.plan(len(proposal), self.fanout)
        queued = None
        if self.cuda:  # the side stream starts after what the main stream queued so far (the draft)
            queued = torch.cuda.Event()
            queued.record(torch.cuda.current_stream(self.runner.device))
        elif self.split:  # the pass runs on the target's share; behind() gives this thread its count back
            self.given_back = torch.get_num_threads()
            torch.set_num_threads(self.target_threads)
        self.job = self.pool.submit(self._prepare, list(committed), proposal, warp, plan, queued)

    def behind(self) -> None:
        """The target's pass is over (or ahead() or the pass failed): stop preparing (at the end
        of the forward under way), give the calling thread its cores back and take what was
        prepared."""
        end = time.perf_counter() - self.t0
        self.info["verify"] = {"start": self.verify_start, "end": end}
        job, self.job = self.job, None
        try:
            if job is not None:
                if self.prepare == "overlap":
                    self.stop.set()
                job.result()  # re-raises what went wrong over there
        finally:
            if self.cuda:
                torch.cuda.current_stream(self.runner.device).wait_stream(self.stream)
            if self.given_back is not None:
                torch.set_num_threads(self.given_back)
                self.given_back = None
        if job is not None:
            self.info["wait"] = {"start": end, "end": max(end, time.perf_counter() - self.t0)}
            self.info["ahead"] = dict(self.prep)

    def _prepare(self, committed: list, proposal: Proposal, warp, plan: list, queued) -> None:
        """On the drafter's thread (or stream): the preparation tree, level by level."""
        if self.cuda:
            with torch.cuda.stream(self.stream):
                self.stream.wait_event(queued)
                for layer in getattr(getattr(self.runner, "cache", None), "layers", ()):
                    for t in (getattr(layer, "keys", None), getattr(layer, "values", None)):
                        if isinstance(t, torch.Tensor) and t.is_cuda:
                            t.record_stream(self.stream)  # freed here, not reused under the target's pass
                return self._levels(committed, proposal, warp, plan)
        return self._levels(committed, proposal, warp, plan)  # on the share of the cores the thread took as it started

    def _stopped(self, feed: list) -> Optional[str]:
        """Why preparation stops before the next level (None: it goes on): the pass is over
        ("verdict", overlap only), the test's cap is reached ("cap"), or the level would not fit
        the draft's cache ("cache full")."""
        if self.prepare == "overlap" and self.stop.is_set():
            return "verdict"
        if self.levels_cap is not None and self.prep["levels"] >= self.levels_cap:
            return "cap"
        if self.room is not None and self.runner.length + len(feed) > self.room:
            return "cache full"
        return None

    def _levels(self, committed: list, proposal: Proposal, warp, plan: list) -> None:
        start = time.perf_counter() - self.t0
        self.prep = {"start": start, "end": start, "levels": 0, "stopped": None}
        drafts, K, linear = proposal.tree.tokens, len(proposal), len(committed)
        # the cache holds the committed tokens, then x_1..x_(K-1): the drafts as a chain of nodes
        tree = DraftTree.chain(drafts, [0.0] * K)
        slots = {n: linear + n for n in range(K - 1)}
        self.tree, self.slots, self.linear, self.q_after = tree, slots, linear, None
        for a, rank, prob in plan:
            if a < K:  # b: a candidate for the residual token after x_(a+1) was rejected
                options = candidates(proposal.dists[a - 1], drafts[a], rank + 1)
                if len(options) > rank:
                    self._branch(tree, a, options[rank], prob, rank, a - 1)
        bonus = [(a, rank, prob) for a, rank, prob in plan if a == K]
        feed = ([K - 1] if bonus else []) + [br.pending for br in self.branches]  # x_K, for q_(K+1)
        while feed and not self._stop_before(feed):
            q_of = self._forward(tree, feed, linear, slots, warp)
            if K - 1 in q_of:  # the bonus token's candidates: the draft's best after x_K
                self.q_after = q_of.pop(K - 1)
                for a, rank, prob in bonus:
                    options = candidates(self.q_after, None, rank + 1)
                    if len(options) > rank:
                        self._branch(tree, a, options[rank], prob, rank, K - 1)
            feed = []
            for branch in self.branches:
                if branch.pending in q_of:  # fed this level: draw the branch's next token
                    q = q_of[branch.pending]
                    branch.fed.append(branch.pending)
                    token = sampling.sample(q, warp, branch.generator)
                    branch.tokens.append(token)
                    branch.dists.append(q)
                    branch.pending = None
                    if stops(len(branch.tokens), self.k_next, token, q, self.eos, None):
                        branch.done = True
                    else:
                        branch.pending = tree.add(token, branch.fed[-1], 0.0)
                if branch.pending is not None:
                    feed.append(branch.pending)
            self.prep["end"] = time.perf_counter() - self.t0

    def _stop_before(self, feed: list) -> bool:
        self.prep["stopped"] = self._stopped(feed)
        return self.prep["stopped"] is not None

    def _branch(self, tree: DraftTree, accepted: int, token: int, prob: float, rank: int, parent: int) -> None:
        branch = Branch(accepted, token, prob, rank)
        branch.pending = tree.add(token, parent, 0.0)
        branch.generator = self._generator(self.step, accepted, token)
        self.branches.append(branch)

    def _forward(self, tree: DraftTree, nodes: list, linear: int, slots: dict, warp) -> dict:
        """One draft forward over `nodes` with tree attention: q after each of them."""
        attend, new_slots = attention(tree, linear, 0, slots, nodes)
        slots.update(new_slots)
        positions = [linear - 1 + tree.depth(n) for n in nodes]
        logits = self.runner.forward([tree.tokens[n] for n in nodes], attend=attend, positions=positions)
        synchronize(self.runner.device)  # this thread's stream only: the target's pass runs on another
        self.prep["levels"] += 1
        return {n: sampling.warp(logits[i], warp) for i, n in enumerate(nodes)}

    def _generator(self, step: int, accepted: int, token: int) -> torch.Generator:
        """The draws of the draft that follows verdict (a, b) of `step`, prepared or not: the same
        tokens whether preparation got that far before the verdict, all of the way, or not at all
        (a miss drafts them from scratch)."""
        seed = hash((self.seed, step, accepted, token)) & 0x7FFF_FFFF_FFFF
        return torch.Generator(device=self.runner.device).manual_seed(seed)

    # -- the verdict: hit or miss, and the draft cache made to hold what was committed ---------

    def observe(self, committed: list, proposal, path, target_probs) -> None:
        a, b, K = len(path), committed[-1], len(proposal)
        kind, rank = None, None
        if a < K:
            kind, rank = "residual", rank_of(proposal.dists[a - 1], proposal.tree.tokens[a], b)
        elif K and self.prep is not None and self.q_after is not None:
            kind, rank = "bonus", rank_of(self.q_after, None, b)
        if K and proposal.tree.tokens[-1] not in self.eos:
            self.outcomes.observe(a, K, kind, rank)
        hit = next((br for br in self.branches if br.accepted == a and br.token == b), None)
        self.info["prepared"] = [{"accepted": br.accepted, "token": br.token, "prob": round(br.prob, 4),
                                  "rank": br.rank, "depth": len(br.tokens)} for br in self.branches]
        self.info["outcome"] = {"accepted": a, "token": b, "drafted": K, "rank": rank, "kind": kind}
        self.info["hit"] = hit is not None and bool(hit.tokens)
        self.info["alpha"] = round(self.outcomes.alpha, 4)
        if self.prep is None:  # nothing was prepared: the cache holds committed + x_1..x_(K-1)
            self.runner.crop(min(self.runner.length, len(committed) - 1))
        elif hit is not None and hit.tokens:  # keep x_1..x_a, b, y_1..y_(d-1): committed, then the draft
            path_slots = [self.slots[n] for n in range(a)] + [self.slots[n] for n in hit.fed]
            self.runner.keep(self.linear, path_slots)
            self.hit = hit
        else:  # keep what was committed of the drafts
            self.runner.keep(self.linear, [self.slots[n] for n in range(a) if n in self.slots])
        self.branches, self.prep = [], None
        self.verdict = (self.step, a, b)
        self.step += 1

    def step_info(self) -> dict:
        return {"ssd": self.info}


def build(pair, cfg, stop, policy=None) -> SSDDrafter:
    """`ssd`'s drafter (specviz.methods): the draft model, preparing the next step while the target verifies."""
    return SSDDrafter(pair.draft, stop, cfg.k, cfg.ssd_fanout, cfg.ssd_prepare, cfg.ssd_threads, cfg.seed)
