"""The decoding loop: every method is one step, repeated, streamed as events.

Speculative decoding after Leviathan et al. 2023 (Algorithm 1) and Chen et al. 2023
(Algorithm 2), with trees after SpecInfer and Medusa. One step, for every method (`_Run._step`):

    draft    drafter.propose(committed, k)      -> a token tree (a chain is a one-path tree)
                                                   and the q each node's children came from
             (drafter.ahead / behind bracket the target's pass: SSD drafts the next step meanwhile)
    score    one target pass over the uncached tail and every node -> p after the root and
             after each node (plain causal attention for a chain, tree attention otherwise)
    verify   verifier.verify(tree, q, p)         -> accepted path, then a residual or bonus token
    commit   append; both KV caches keep the accepted path; drafter.observe(...)

Autoregressive decoding is the same step with nothing drafted: one target pass, and its only
token is the bonus. The step returns a `StepRecord`; its events are built from the record in
one place (`specviz.engine.record`). Both caches always hold every committed token but the last one.
Arguments are checked by `RunConfig` (specviz.config) before the first event. The engine never
prints and imports no UI code; every number a view needs is in the events.
"""

from __future__ import annotations

import time
from typing import Iterator, Optional, Union

import torch

from specviz import events as ev
from specviz.config import RunConfig, check_context, check_prompt_text, prompt_to_ids
from specviz.engine.adaptive import AdaptiveK
from specviz.engine.batch import generate_batch
from specviz.engine.commit import commit, hand_out, room_left, run_finished
from specviz.engine.record import EventWriter, StepRecord
from specviz.engine.setup import (Clock, check_backend_method, config_of, is_batch, make_drafter, make_verifier,
    started_event, stop_tokens)
from specviz.runtime.lm import runner_for, synchronize
from specviz.verifiers import sampling
from specviz.verifiers.draft_tree import attention


def generate(pair, prompt: Union[str, list], config: Optional[RunConfig] = None, *, drafter=None,
             verifier=None, **overrides) -> Iterator[ev.Event]:
    """Stream the events of one run on `pair` (see `specviz.events` for the schema).

        generate(pair, "def f(", method="tree", temperature=1.0)
        generate(pair, "def f(", RunConfig(method="spec", k="auto"), max_new_tokens=32)
        generate(pair, ["def f(", "class A:"], method="spec", k="load")   # a batch (specviz.engine.batch)

A list of prompts, batch > 1 or k="load" runs the batched engine (`specviz.engine.batch.generate_batch`):
every row's events carry `row`, and each shared pass is a batch_step event.

    The run is `config` (default: RunConfig()) with `overrides` applied; see RunConfig for every
    option. Bad input fails here, before the first event, with a `specviz.errors.InputError`
    that says what to change. `drafter` and `verifier` replace the method's own, e.g. in tests.
    """
    cfg = config_of(config, overrides)
    check_backend_method(getattr(pair, "backend", "torch"), cfg, is_batch(prompt))
    if is_batch(prompt) or cfg.batch > 1 or cfg.k == "load":
        return generate_batch(pair, prompt, cfg, drafter=drafter, verifier=verifier)
    prompt_ids = prompt_to_ids(pair, prompt, cfg.chat)
    check_context(pair, len(prompt_ids), cfg)
    policy = AdaptiveK(cfg.auto_rule, confidence=cfg.confidence) if cfg.draft_k == "auto" else None
    drafter = drafter or make_drafter(pair, cfg, policy)
    verifier = verifier or make_verifier(cfg)
    return _Run(pair, cfg, prompt, prompt_ids, drafter, verifier, policy).events()


def check_options(prompt, **options) -> RunConfig:
    """generate()'s checks that need no pair, so a caller can refuse bad input before it loads
    gigabytes of weights: the same InputError generate() would raise."""
    check_prompt_text(prompt)
    return RunConfig.of(**options)


class _Run:
    def __init__(self, pair, cfg: RunConfig, prompt, prompt_ids: list, drafter, verifier, policy=None):
        self.pair, self.cfg, self.drafter, self.verifier, self.policy = pair, cfg, drafter, verifier, policy
        self.prompt = prompt if isinstance(prompt, str) else pair.decode(prompt_ids)
        self.prompt_ids = list(prompt_ids)
        self.committed = list(prompt_ids)
        self.eos = set(stop_tokens(pair, cfg))
        self.generator = torch.Generator(device=pair.device).manual_seed(cfg.seed)
        self.target = runner_for(pair.target)
        self.writer = EventWriter(pair.token_text, cfg.record_topk, verifier.name)
        self.clock = Clock()
        self.finish: Optional[str] = None

    def events(self) -> Iterator[ev.Event]:
        started = self._started()
        yield started
        self.clock.start()
        self.target.reset()  # no separate prefill: step 0's target pass feeds the prompt with its drafts
        self.drafter.start(self.prompt_ids)
        finished = []  # each step's step_finished, for the run's metrics
        while self.finish is None:
            step_events = self.writer.step_events(self._step(len(finished)))
            finished.append(step_events[-1])
            yield from hand_out(step_events, self.clock)
        yield run_finished(self.pair, self.committed, len(self.prompt_ids), self.finish, started, finished)

    def _step(self, step: int) -> StepRecord:
        """Draft, one target pass, then verify and commit (specviz.engine.commit, as the batched engine)."""
        cached = self.target.length
        k, why = self._plan()
        proposal = self.drafter.propose(self.committed, k, self.cfg.warp, self.generator).end_at(self.eos)
        try:
            self.drafter.ahead(self.committed, proposal, self.cfg.warp)  # SSD prepares the next step meanwhile
            target_probs, verify_time, fed, states = self._score(proposal.tree)
        finally:  # a start or a pass that fails still stops the drafter's work and gives the target its cores back
            self.drafter.behind()
        self.drafter.pass_timed(fed, len(proposal.tree), verify_time)
        record = commit(step=step, k=k, why=why, proposal=proposal, target_probs=target_probs,
                        verify_time=verify_time, fed=fed, cached=cached, states=states, verifier=self.verifier,
                        generator=self.generator, eos=self.eos, committed=self.committed,
                        prompt_len=len(self.prompt_ids), max_new_tokens=self.cfg.max_new_tokens, keep=self._keep,
                        see_features=self.drafter.see_features, observe=self.drafter.observe,
                        step_info=self.drafter.step_info, clock=self.clock, policy=self.policy)
        self.finish = record.finish
        return record

    def _plan(self) -> tuple:
        """How deep this step may draft (never past max_new_tokens) and, for k="auto", why."""
        room = room_left(self.cfg.max_new_tokens, self.committed, len(self.prompt_ids))
        k = self.cfg.draft_k
        if k is None:  # tree methods: as deep as their own shape, within the room left
            return room, {}
        if self.policy is None:
            return min(k, room), {}
        k, why = self.policy.choose()
        return min(k, room), {"k_rule": self.policy.rule, "k_chosen": k, "why": why}

    def _score(self, tree) -> tuple:
        """One target pass over the uncached tail and every node: p at len(tree) + 1 places, and
        the last hidden state of every fed token when the drafter reads them (else None)."""
        start = time.perf_counter()
        n, pending = len(tree), self.committed[self.target.length:]
        feed = pending + tree.tokens
        extra = {"hidden": self.drafter.feature_layers or True} if self.drafter.uses_features else {}
        if not tree.is_chain():
            attend, _ = attention(tree, self.target.length, len(pending), {}, list(range(n)))
            positions = (list(range(self.target.length, len(self.committed)))
                         + tree.position_ids(len(self.committed) - 1))
            extra.update(attend=attend, positions=positions)
        out = self.target.forward(feed, keep=n + 1, **extra)
        logits, states = out if self.drafter.uses_features else (out, None)
        probs = sampling.warp(logits[-(n + 1):], self.cfg.warp)  # row 0: the root, 1 + i: node i
        synchronize(self.pair.device)
        return probs, time.perf_counter() - start, len(feed), states

    def _keep(self, base: int, path: list) -> None:
        """The target's cache keeps the committed tokens and the accepted path's entries."""
        if path == list(range(len(path))):  # the path is the first nodes fed (always so for a chain)
            self.target.crop(base + len(path))
        else:
            self.target.keep(base, [base + n for n in path])

    def _started(self) -> ev.RunStarted:
        return started_event(self.pair, self.cfg, self.prompt, self.prompt_ids, self.verifier, self.drafter.name)
