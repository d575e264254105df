"""The decoding loop: autoregressive, chain and tree speculative decoding, streamed as events.

Speculative decoding after Leviathan et al. 2023 (Algorithm 1) and Chen et al. 2023
(Algorithm 2). One step reads as four phases:

    draft    drafter.propose(committed, k)         -> x_1..x_n with draft distributions q_i
    score    one target pass over [last, x_1..x_n] -> p_1..p_{n+1}
    verify   verifier.verify(...)                   -> accepted prefix, residual or bonus token
    commit   append, crop both KV caches to the committed prefix, drafter.observe(...)

Autoregressive decoding is the same loop with k = 0: each step is one target pass and its only
token is the bonus token. Chain drafters (draft model, prompt lookup, cascade) share `_step`;
tree drafters (draft trees, lookahead's window + n-gram trie) share `_tree_step`, whose target
pass uses tree attention and whose commit keeps only the accepted path's cache entries. Both
caches always hold every committed token but the last one. Arguments are checked in
`specviz.config`.
The engine never prints and imports no UI code; every number a view needs is in the events.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Iterator, Optional, Union

import torch

from specviz import events as ev
from specviz import metrics, sampling
from specviz.adaptive import AdaptiveK
from specviz.config import (  # noqa: F401  (METHODS, METHOD_HELP... are part of this module's API)
    ACCEPTANCE, AUTO_METHODS, MAX_K, MAX_NEW_TOKENS, MAX_TOPK, MAX_TREE_NODES, METHOD_HELP, METHODS,
    TREE_METHODS, RunConfig, check_context, check_prompt_text, prompt_to_ids, validate, validate_lookahead,
    validate_tree, vocab_size)
from specviz.drafters import CascadeDrafter, ModelDrafter, PromptLookupDrafter, Proposal
from specviz.drafters.lookahead import LookaheadDrafter
from specviz.drafters.tree import TreeDrafter
from specviz.errors import InputError
from specviz.lm import runner_for, synchronize
from specviz.tree import attention, parse_shape
from specviz.verifiers import TypicalVerifier, default_verifier
from specviz.verifiers.tree import TreeVerifier

def generate(pair, prompt: Union[str, list], *, method: str = "spec", k: Union[int, str] = 4,
             temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0,
             max_new_tokens: int = 64, seed: int = 0, chat: bool = False, record_topk: int = 10,
             acceptance: str = "exact", auto_rule: str = "cost", confidence: float = 0.4,
             ngram: int = 3, tree: str = "3,2,1", tree_budget: int = 16, tree_depth: int = 6,
             tree_width: int = 4, lookahead_window: int = 5, lookahead_pool: int = 5,
             drafter=None, verifier=None) -> Iterator[ev.Event]:
    """Stream the events of one run of `method` on `pair` (see `specviz.events` for the schema).

    method      one of METHODS (see METHOD_HELP)
    k           draft length, or "auto" (spec, cascade) to choose it every step by `auto_rule`:
                "heuristic" (+2/-1), "confidence" (stop when q(x) < `confidence`) or "cost"
                (theory.optimal_k from the running alpha and measured c); see specviz.adaptive
    acceptance  "exact" (lossless: greedy match or the rejection rule) or "typical" (Medusa's
                typical acceptance; LOSSY, marked lossless=false in every event stream)
    ngram       longest n-gram prompt lookup tries (pld, cascade); lookahead's n-gram size N
    lookahead_window, lookahead_pool   lookahead's Jacobi window W and pool candidates G
    tree        children per node at each depth, e.g. "3,2,1" (static), or "dynamic": grown by
                cumulative draft probability with `tree_width` children per expanded node,
                `tree_width` expanded nodes per depth, `tree_depth` depths, `tree_budget` nodes

    Arguments are checked here, before the first event, so bad input fails at the call with a
    `specviz.errors.InputError` that says what to change. `drafter` and `verifier` replace the
    defaults, e.g. in tests.
    """
    cfg = _config(method, k, temperature, top_k, top_p, max_new_tokens, seed, chat, record_topk, acceptance,
                  auto_rule, confidence, ngram, tree, tree_budget, tree_depth, tree_width, lookahead_window,
                  lookahead_pool)
    prompt_ids = prompt_to_ids(pair, prompt, chat)
    check_context(pair, len(prompt_ids), cfg)
    policy = AdaptiveK(cfg.auto_rule, confidence=cfg.confidence) if cfg.k == "auto" else None
    drafter = drafter or make_drafter(pair, cfg, policy)
    if verifier is None and cfg.method in TREE_METHODS:
        verifier = TreeVerifier(cfg.warp.greedy, pair.eos_token_ids)
    verifier = verifier or (TypicalVerifier() if cfg.acceptance == "typical" else default_verifier(cfg.warp))
    return _Run(pair, cfg, prompt, prompt_ids, drafter, verifier, policy).events()


def _config(method, k, temperature, top_k, top_p, max_new_tokens, seed, chat, record_topk, acceptance,
            auto_rule, confidence, ngram, tree, tree_budget, tree_depth, tree_width, lookahead_window,
            lookahead_pool) -> RunConfig:
    cfg = validate(method, k, temperature, top_k, top_p, max_new_tokens, seed, record_topk, chat,
                   acceptance, auto_rule, confidence, ngram)
    return dataclasses.replace(cfg, **validate_tree(cfg, tree, tree_budget, tree_depth, tree_width),
                               **validate_lookahead(cfg, lookahead_window, lookahead_pool))


def check_options(prompt, **options) -> RunConfig:
    """generate()'s checks that need no pair, so a caller can refuse bad input before it loads
    gigabytes of weights (the CLI does): the same InputError generate() would raise."""
    import inspect

    check_prompt_text(prompt)
    try:
        args = inspect.signature(generate).bind(None, prompt, **options)
    except TypeError as exc:
        raise InputError(str(exc)) from None
    args.apply_defaults()
    a = args.arguments
    return _config(*(a[name] for name in inspect.signature(_config).parameters))


def make_drafter(pair, cfg: RunConfig, policy=None):
    if cfg.method == "spec":
        return ModelDrafter(pair.draft, pair.eos_token_ids, policy.stop_below if policy else None)
    if cfg.method == "pld":
        return PromptLookupDrafter(vocab_size(pair), pair.device, cfg.ngram)
    if cfg.method == "cascade":
        return CascadeDrafter(pair.draft, pair.eos_token_ids, cfg.ngram)
    if cfg.method == "lookahead":
        return LookaheadDrafter(cfg.lookahead_window, cfg.ngram, cfg.lookahead_pool)
    if cfg.method == "tree":
        dynamic = cfg.tree == "dynamic"
        return TreeDrafter(pair.draft, pair.eos_token_ids, () if dynamic else parse_shape(cfg.tree),
                           dynamic, cfg.tree_budget, cfg.tree_depth, cfg.tree_width)
    return _NoDrafter()


class _NoDrafter:
    """Autoregressive decoding: nothing is drafted, every token is the target's own sample."""

    name = "none"

    def start(self, prompt_ids):
        pass

    def propose(self, committed, k, warp, generator) -> Proposal:
        return Proposal([], None)

    def observe(self, committed, accepted):
        pass


# ---------------------------------------------------------------------------------------------
# the loop

class _Run:
    def __init__(self, pair, cfg: RunConfig, prompt, prompt_ids: list, drafter, verifier, policy=None):
        self.pair, self.cfg, self.drafter, self.verifier = pair, cfg, drafter, verifier
        self.policy = policy
        self.prompt = prompt if isinstance(prompt, str) else pair.decode(prompt_ids)
        self.prompt_ids = list(prompt_ids)
        self.committed = list(prompt_ids)
        self.eos = set(pair.eos_token_ids)
        self.generator = torch.Generator(device=pair.device).manual_seed(cfg.seed)
        self.target = runner_for(pair.target)
        self.finish: Optional[str] = None
        self.t0: Optional[float] = None  # perf_counter at the start, moved on by the time paused
        self.cpu0 = 0.0  # thread_time of the thread now running the run, moved the same way

    @property
    def new_tokens(self) -> int:
        return len(self.committed) - len(self.prompt_ids)

    def events(self) -> Iterator[ev.Event]:
        """The run's events. Time the consumer spends between two events (rendering, sending,
        another engine's turn in a race) is left out of the run's clocks: wall (`elapsed`) and the
        decoding thread's CPU time (`cpu_elapsed`)."""
        for event in self._events():
            paused, cpu = time.perf_counter(), self._cpu()
            yield event
            if self.t0 is not None:
                self.t0 += time.perf_counter() - paused
                # a server may resume a generator on another thread: carry on from that thread's clock
                self.cpu0 = time.thread_time() - cpu

    def _cpu(self) -> float:
        """Seconds this run's decoding thread has been on a core since the run started."""
        return time.thread_time() - self.cpu0

    def _events(self) -> Iterator[ev.Event]:
        started = self._started()
        yield started
        self.t0, self.cpu0 = time.perf_counter(), time.thread_time()
        self.target.reset()  # no separate prefill: step 0's target pass feeds the prompt with its drafts
        self.drafter.start(self.prompt_ids)
        steps = []
        while self.finish is None:
            step = self._tree_step if self.cfg.method in TREE_METHODS else self._step
            for event in step(len(steps)):
                yield event
            steps.append(event)
        generated = self.committed[len(self.prompt_ids):]
        yield ev.RunFinished(text=self.pair.decode(generated), token_ids=generated,
                             finish_reason=self.finish, metrics=metrics.fold([started, *steps]).to_dict())

    def _started(self) -> ev.RunStarted:
        cfg, pair = self.cfg, self.pair
        return ev.RunStarted(
            pair=pair.name, method=cfg.method, k=cfg.k, temperature=cfg.warp.temperature,
            top_k=cfg.warp.top_k, top_p=cfg.warp.top_p, max_new_tokens=cfg.max_new_tokens,
            seed=cfg.seed, chat=cfg.chat, prompt=self.prompt, prompt_ids=self.prompt_ids,
            prompt_texts=[pair.token_text(t) for t in self.prompt_ids], device=str(pair.device),
            dtype=str(pair.dtype).replace("torch.", ""), rule=self.verifier.name,
            lossless=bool(self.verifier.lossless), eos_token_ids=sorted(self.eos),
            drafter=self.drafter.name, options=cfg.options(),
            draft_quant=getattr(pair, "draft_quant", "none"), cpu_linear=getattr(pair, "cpu_linear", "aten"),
            target_quant=getattr(pair, "target_quant", "none"),
            cuda_graphs=getattr(pair.target, "_specviz_graph_len", None) is not None)

    def _step(self, step: int) -> Iterator[ev.Event]:
        base = len(self.committed)  # position of the first drafted token
        k, info = self._choose_k()
        proposal = self._cut_at_eos(self.drafter.propose(self.committed, k, self.cfg.warp, self.generator))
        yield from self._draft_events(step, base, proposal)
        target_probs, verify_time, fed = self._score(proposal.tokens)
        prefill = fed - len(proposal) - 1
        yield self._scored_event(step, base, proposal, target_probs, fed)
        allow_bonus = not (proposal.tokens and proposal.tokens[-1] in self.eos)
        draft_probs = proposal.probs.to(target_probs.device) if len(proposal) else target_probs[:0]
        verdict = self.verifier.verify(proposal.tokens, draft_probs, target_probs, self.generator, allow_bonus)
        yield from self._decision_events(step, base, verdict)
        emitted = [d.token for d in verdict.decisions if d.accepted]
        if verdict.next_token is not None:
            emitted.append(verdict.next_token)
        self._commit(emitted, verdict.accepted)
        if self.policy is not None:
            self.policy.update(len(proposal), verdict.accepted, len(verdict.decisions),
                               proposal.seconds, proposal.forwards, None if prefill else verify_time)
        if hasattr(self.drafter, "step_info"):
            info.update(self.drafter.step_info())
        yield ev.StepFinished(
            step=step, k=k, drafted=len(proposal), accepted=verdict.accepted,
            evaluated=len(verdict.decisions), emitted_ids=emitted,
            emitted_texts=[self.pair.token_text(t) for t in emitted], beta=verdict.beta,
            draft_time=proposal.seconds, verify_time=verify_time, draft_forwards=proposal.forwards,
            target_forwards=1, elapsed=time.perf_counter() - self.t0, finish_reason=self.finish,
            info=info or None, prefill=prefill, cpu_elapsed=self._cpu())

    def _tree_step(self, step: int) -> Iterator[ev.Event]:
        """Draft a tree, score every node in one target pass, walk it, keep the accepted path."""
        base = len(self.committed)
        room = self.cfg.max_new_tokens - self.new_tokens - 1
        proposal = self.drafter.propose_tree(self.committed, room, self.cfg.warp, self.generator)
        tree = proposal.tree
        target_probs, verify_time, attend = self._score_tree(tree)
        yield self._tree_event(step, base, proposal, attend)
        yield self._tree_scored_event(step, base, tree, target_probs, attend.shape[0])
        verdict = self.verifier.verify(tree, proposal.dists, target_probs, self.generator)
        yield from self._tree_decision_events(step, base, tree, verdict)
        emitted = [tree.tokens[n] for n in verdict.path]
        if verdict.next_token is not None:
            emitted.append(verdict.next_token)
        self.committed.extend(emitted)
        self._finish_check(emitted)
        self.target.keep(base, [base + n for n in verdict.path])
        self.drafter.observe_tree(verdict.path, target_probs, tree, proposal.sources)
        info = {"tree": proposal.kind, "path": verdict.path, "depth": tree.max_depth()}
        if hasattr(self.drafter, "step_info"):
            info.update(self.drafter.step_info())
        yield ev.StepFinished(
            step=step, k=room, drafted=len(tree), accepted=len(verdict.path),
            evaluated=len(verdict.decisions), emitted_ids=emitted,
            emitted_texts=[self.pair.token_text(t) for t in emitted],
            beta=[d.beta for d in verdict.decisions], draft_time=proposal.seconds,
            verify_time=verify_time, draft_forwards=proposal.forwards, target_forwards=1,
            elapsed=time.perf_counter() - self.t0, finish_reason=self.finish, info=info,
            prefill=attend.shape[0] - len(tree) - 1, cpu_elapsed=self._cpu())

    def _score_tree(self, tree):
        """One target pass over the uncached tail and every node, with tree attention."""
        start = time.perf_counter()
        pending = self.committed[self.target.length:]
        attend, _ = attention(tree, self.target.length, len(pending), {}, list(range(len(tree))))
        positions = (list(range(self.target.length, len(self.committed)))
                     + tree.position_ids(len(self.committed) - 1))
        logits = self.target.forward(pending + tree.tokens, attend=attend, positions=positions,
                                     keep=len(tree) + 1)
        probs = sampling.warp(logits[-(len(tree) + 1):], self.cfg.warp)  # row 0: root, 1 + i: node i
        synchronize(self.pair.device)
        return probs, time.perf_counter() - start, attend

    def _tree_event(self, step, base, proposal, attend) -> ev.TreeBuilt:
        tree = proposal.tree
        nodes = [{"id": i, "parent": tree.parents[i], "depth": tree.depth(i),
                  "position": base - 1 + tree.depth(i), "token_id": tree.tokens[i],
                  "token_text": self.pair.token_text(tree.tokens[i]), "q": tree.q[i],
                  "cum_q": tree.cum_q[i]} for i in range(len(tree))]
        for node, source in zip(nodes, proposal.sources or []):
            node["source"] = source
        q_topk = [{"node": node, **self._topk(q)} for node, q in proposal.dists.items()
                  if self.cfg.record_topk] if proposal.dists else []
        return ev.TreeBuilt(step=step, shape=proposal.kind, nodes=nodes, mask_shape=list(attend.shape),
                            draft_forwards=proposal.forwards, q_topk=q_topk)

    def _tree_scored_event(self, step, base, tree, target_probs, fed) -> ev.TargetScored:
        rows = range(len(tree) + 1)
        return ev.TargetScored(
            step=step, positions=[base] + [base + tree.depth(i) for i in range(len(tree))],
            p_draft=[float(target_probs[tree.parents[i] + 1, t]) for i, t in enumerate(tree.tokens)],
            topk=[self._topk(target_probs[r]) for r in rows] if self.cfg.record_topk else [],
            tokens_in=fed)

    def _tree_decision_events(self, step, base, tree, verdict):
        rule = self.verifier.name
        for d in verdict.decisions:
            cls = ev.TokenAccepted if d.accepted else ev.TokenRejected
            depth = tree.depth(d.node)
            yield cls(step=step, index=depth - 1, position=base - 1 + depth, token_id=d.token,
                      token_text=self.pair.token_text(d.token), p=d.p, q=d.q, ratio=d.ratio,
                      accept_prob=d.accept_prob, u=d.u, rule=rule, node=d.node)
        if verdict.next_token is None:
            return
        index = len(verdict.path)
        common = dict(step=step, index=index, position=base + index, token_id=verdict.next_token,
                      token_text=self.pair.token_text(verdict.next_token), node=verdict.next_parent)
        if verdict.next_kind == "residual":
            yield ev.ResidualSampled(**common, p=verdict.next_p, q=verdict.next_q,
                                     residual_prob=float(verdict.next_probs[verdict.next_token]),
                                     residual_mass=verdict.residual_mass,
                                     topk=self._topk(verdict.next_probs))
        else:
            yield ev.BonusSampled(**common, p=verdict.next_p)

    def _finish_check(self, emitted: list) -> None:
        if any(t in self.eos for t in emitted):
            self.finish = "eos"
        elif self.new_tokens >= self.cfg.max_new_tokens:
            self.finish = "length"

    def _choose_k(self) -> tuple:
        """This step's draft length (never past max_new_tokens) and, for k="auto", why."""
        room = self.cfg.max_new_tokens - self.new_tokens - 1
        if self.policy is None:
            return min(self.cfg.k, room), {}
        k, why = self.policy.choose()
        return min(k, room), {"k_rule": self.policy.rule, "k_chosen": k, "why": why}

    def _cut_at_eos(self, proposal: Proposal) -> Proposal:
        for i, token in enumerate(proposal.tokens):
            if token in self.eos:
                proposal.tokens = proposal.tokens[:i + 1]
                proposal.probs = proposal.probs[:i + 1]
                break
        return proposal

    def _score(self, tokens: list):
        """One target pass over the uncached tail and the draft: p at n + 1 positions."""
        start = time.perf_counter()
        feed = self.committed[self.target.length:] + tokens
        logits = self.target.forward(feed, keep=len(tokens) + 1)[-(len(tokens) + 1):]  # (n + 1, V)
        probs = sampling.warp(logits, self.cfg.warp)
        synchronize(self.pair.device)
        return probs, time.perf_counter() - start, len(feed)

    def _commit(self, emitted: list, accepted: int) -> None:
        self.committed.extend(emitted)
        self._finish_check(emitted)
        self.target.crop(len(self.committed) - 1)
        self.drafter.observe(self.committed, accepted)

    # -- events ---------------------------------------------------------------------------

    def _topk(self, probs: torch.Tensor) -> Optional[dict]:
        top = sampling.topk_slice(probs, self.cfg.record_topk)
        if top is None:
            return None
        ids, values = top
        return {"ids": ids, "texts": [self.pair.token_text(t) for t in ids], "probs": values}

    def _draft_events(self, step, base, proposal: Proposal):
        for i, token in enumerate(proposal.tokens):
            q = proposal.probs[i]
            yield ev.DraftProposed(step=step, index=i, position=base + i, token_id=token,
                                   token_text=self.pair.token_text(token), q=float(q[token]),
                                   topk=self._topk(q),
                                   source=proposal.sources[i] if proposal.sources else None)

    def _scored_event(self, step, base, proposal, target_probs, fed: int) -> ev.TargetScored:
        n = len(proposal)
        return ev.TargetScored(
            step=step, positions=list(range(base, base + n + 1)),
            p_draft=[float(target_probs[i, t]) for i, t in enumerate(proposal.tokens)],
            topk=[self._topk(target_probs[i]) for i in range(n + 1)] if self.cfg.record_topk else [],
            tokens_in=fed)

    def _decision_events(self, step, base, verdict):
        rule = self.verifier.name
        for d in verdict.decisions:
            cls = ev.TokenAccepted if d.accepted else ev.TokenRejected
            yield cls(step=step, index=d.index, position=base + d.index, token_id=d.token,
                      token_text=self.pair.token_text(d.token), p=d.p, q=d.q, ratio=d.ratio,
                      accept_prob=d.accept_prob, u=d.u, rule=rule, threshold=d.threshold)
        if verdict.next_token is None:
            return
        index = len(verdict.decisions) - (verdict.next_kind == "residual")
        token = verdict.next_token
        common = dict(step=step, index=index, position=base + index, token_id=token,
                      token_text=self.pair.token_text(token))
        if verdict.next_kind == "residual":
            yield ev.ResidualSampled(**common, p=verdict.next_p, q=verdict.next_q,
                                     residual_prob=float(verdict.next_probs[token]),
                                     residual_mass=verdict.residual_mass,
                                     topk=self._topk(verdict.next_probs), drawn_from=verdict.drawn_from)
        else:
            yield ev.BonusSampled(**common, p=verdict.next_p)
