"""Batched speculation: B sequences decode together, one target pass per step for all rows.

A server never decodes one sequence at a time. Each step here every live row drafts (the draft
model's forwards are batched too), then ONE target pass verifies every row's chain at once, and
each row keeps its own result:

    row 0   [pending | x1 x2 x3 x4]   accepted 4 + bonus       -> 5 tokens
    row 1   [pending | x1 x2 x3 x4]   accepted 1 + residual    -> 2 tokens
    row 2   [pending | x1 x2 . .  ]   (drafted EOS) ...         rows are padded to the widest

Acceptance is ragged: each row has its own accepted length, its own KV positions
(specviz.runtime.batch_lm's `RowCache`: one buffer per layer and a write position per row, so
cropping a row back after a rejection is setting a number) and its own sampling stream (a
torch.Generator per row, seeded per row, drawn in the order a single-sequence run draws: a row's
output does not depend on which prompts share its batch, and `generate(pair, prompt,
seed=row_seed)` reproduces it). Rows that finish leave the batch and stop costing.

Why batching kills speculation: at batch 1 a forward is bound by reading the weights, so verifying
k + 1 tokens costs about what one costs. A batch of B rows already feeds B tokens per pass;
speculation multiplies that by k + 1, and once B(k + 1) tokens make the pass compute-bound, every
rejected draft is paid for in full. `LoadK` (k="load", specviz.engine.load) is what serving engines
do about it: choose k each step from the running acceptance rate and the measured cost of a pass
over B(k + 1) tokens, down to k = 0 (plain autoregressive steps) when the batch is large, plus a
fixed switch-off batch size like vLLM's `speculative_disable_by_batch_size` (`spec_off_batch`).

Methods: those the registry marks batch=True (specviz.methods): ar, spec (k, "auto" per row, or
"load"), pld, and the heads' chains. Trees are left to the single-sequence engine: a batch of trees
needs a tree mask per row over one padded pass, which the per-row causal mask of its runner does
not express.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Iterator, Optional

import torch

from specviz import events as ev, methods
from specviz.analysis import metrics
from specviz.config import MAX_BATCH, RunConfig, check_context, prompt_to_ids
from specviz.drafters.base import BatchDrafter, RowDrafters
from specviz.engine.adaptive import AdaptiveK
from specviz.engine.commit import commit, hand_out, room_left, run_finished
from specviz.engine.load import LOAD_K_MAX, CostTable, LoadK
from specviz.engine.record import EventWriter
from specviz.engine.setup import Clock, config_of, is_batch, make_drafter, make_verifier, started_event, stop_tokens
from specviz.errors import InputError
from specviz.runtime.batch_lm import batch_runner_for
from specviz.runtime.head_nets import heads_for
from specviz.runtime.lm import synchronize
from specviz.verifiers import sampling


def make_batch_drafter(pair, cfg: RunConfig) -> BatchDrafter:
    """The method's batched drafter (its record in specviz.methods names one), else its own
    drafter, one per row (LoadK asks for up to LOAD_K_MAX). Under k="auto" it is given the
    rows' k rule (each row's policy is one like it), whose stop_below ends a row's draft."""
    method = methods.get(cfg.method)
    policy = AdaptiveK(cfg.auto_rule, confidence=cfg.confidence) if cfg.k == "auto" else None
    batched = method.batch_drafter(pair, cfg, stop_tokens(pair, cfg), policy)
    if batched is not None:
        return batched
    one = cfg.replace(k=min(LOAD_K_MAX, cfg_k_max(pair, cfg))) if cfg.k == "load" else cfg
    return RowDrafters(lambda: make_drafter(pair, one))


def cfg_k_max(pair, cfg: RunConfig) -> int:
    """The deepest chain the method can draft: Medusa heads draft one token per head."""
    if methods.get(cfg.method).heads == "medusa":
        return heads_for(pair, "medusa", cfg.heads or None).depth
    return LOAD_K_MAX


# ---------------------------------------------------------------------------------------------
# the batched run

@dataclass
class _Row:
    prompt: str
    prompt_ids: list
    seed: int
    generator: torch.Generator
    writer: EventWriter
    committed: list = field(default_factory=list)
    finish: Optional[str] = None
    started: Optional[ev.RunStarted] = None
    finished: list = field(default_factory=list)  # its step_finished events
    policy: Optional[AdaptiveK] = None
    emitted_at: list = field(default_factory=list)  # (elapsed, tokens) per step, for latencies


def batch_prompts(prompt, cfg: RunConfig) -> list:
    """The rows' prompts: a list of prompts as given, or one prompt repeated `cfg.batch` times."""
    prompts = list(prompt) if is_batch(prompt) else [prompt] * cfg.batch
    if not 1 <= len(prompts) <= MAX_BATCH:
        raise InputError(f"A batch holds 1 to {MAX_BATCH} prompts, got {len(prompts)}.")
    return prompts


def generate_batch(pair, prompt, config: Optional[RunConfig] = None, *, seeds=None, drafter=None,
                   verifier=None, **overrides) -> Iterator[ev.Event]:
    """Stream the events of a batched run (see the module's docstring). `prompt` is a list of
    prompts (texts or token-id lists), or one prompt decoded `batch` times. Row b's seed is
    seeds[b] (default: seed + b). Checks everything before the first event."""
    if is_batch(prompt):
        overrides = {**overrides, "batch": len(prompt)}
    cfg = config_of(config, overrides)
    prompts = batch_prompts(prompt, cfg)
    ids = [prompt_to_ids(pair, p, cfg.chat) for p in prompts]
    for row_ids in ids:
        check_context(pair, len(row_ids), cfg)
    seeds = [cfg.seed + b for b in range(len(prompts))] if seeds is None else [int(s) for s in seeds]
    if len(seeds) != len(prompts) or any(s < 0 for s in seeds):
        raise InputError(f"seeds must give one non-negative seed per row ({len(prompts)}), got {len(seeds)}.")
    drafter = drafter or make_batch_drafter(pair, cfg)
    verifier = verifier or make_verifier(cfg)
    policy = None
    if cfg.k == "load":
        draft_cost = CostTable.of(pair.draft) if cfg.method == "spec" else None
        policy = LoadK(CostTable.of(pair.target), draft_cost, min(LOAD_K_MAX, cfg_k_max(pair, cfg)),
                       cfg.spec_off_batch)
    return _BatchRun(pair, cfg, prompts, ids, seeds, drafter, verifier, policy).events()


class _BatchRun:
    def __init__(self, pair, cfg: RunConfig, prompts: list, ids: list, seeds: list, drafter, verifier, policy):
        self.pair, self.cfg, self.drafter, self.verifier, self.policy = pair, cfg, drafter, verifier, policy
        self.eos = set(stop_tokens(pair, cfg))
        self.rows = []
        for text, row_ids, seed in zip(prompts, ids, seeds):
            row = _Row(text if isinstance(text, str) else pair.decode(row_ids), list(row_ids), seed,
                       torch.Generator(device=pair.device).manual_seed(seed),
                       EventWriter(pair.token_text, cfg.record_topk, verifier.name), committed=list(row_ids))
            if cfg.k == "auto":
                row.policy = AdaptiveK(cfg.auto_rule, confidence=cfg.confidence)
            self.rows.append(row)
        self.live = list(range(len(self.rows)))  # row numbers, in the runners' batch order
        self.target = batch_runner_for(pair.target, len(self.rows))
        self.clock = Clock()
        self.steps: list = []  # batch_step events

    def events(self) -> Iterator[ev.Event]:
        cfg, pair = self.cfg, self.pair
        yield ev.BatchStarted(rows=len(self.rows), pair=pair.name, method=cfg.method, k=cfg.draft_k,
                              seeds=[r.seed for r in self.rows], device=str(pair.device),
                              dtype=str(pair.dtype).replace("torch.", ""), spec_off_batch=cfg.spec_off_batch,
                              options=cfg.options())
        for b, row in enumerate(self.rows):
            row.started = started_event(pair, cfg, row.prompt, row.prompt_ids, self.verifier, self.drafter.name,
                                        seed=row.seed, row=b)
            yield row.started
        if self.policy is not None:
            self.policy.prepare(len(self.rows))  # before the clock: measuring the curve is not decoding
        self.clock.start()
        self.drafter.start([r.prompt_ids for r in self.rows])
        step = 0
        while self.live:
            yield from hand_out(self._step(step), self.clock)
            step += 1
        yield ev.BatchFinished(rows=len(self.rows), metrics=batch_metrics(self.rows_summary(), self.steps))

    def rows_summary(self) -> list:
        return [{"tokens": len(r.committed) - len(r.prompt_ids), "emitted_at": r.emitted_at} for r in self.rows]

    def _plan(self) -> tuple:
        cfg, rows = self.cfg, [self.rows[b] for b in self.live]
        rooms = [room_left(cfg.max_new_tokens, r.committed, len(r.prompt_ids)) for r in rows]
        info = None
        if cfg.method == "ar":
            ks, whys = [0] * len(rows), [{}] * len(rows)
        elif self.policy is not None:
            backlog = getattr(self.drafter, "backlog", None)
            k, info = self.policy.choose(len(rows), backlog([r.committed for r in rows]) if backlog else 0.0,
                                         rooms=rooms)
            ks, whys = [k] * len(rows), [info] * len(rows)
        elif cfg.k == "auto":
            chosen = [r.policy.choose() for r in rows]
            ks = [k for k, _ in chosen]
            whys = [{"k_rule": r.policy.rule, "k_chosen": k, "why": why} for r, (k, why) in zip(rows, chosen)]
        else:
            ks, whys = [cfg.k] * len(rows), [{}] * len(rows)
        if cfg.spec_off_batch and self.policy is None and len(rows) >= cfg.spec_off_batch and cfg.method != "ar":
            ks = [0] * len(rows)
            info = {"why": f"{len(rows)} live rows >= spec_off_batch {cfg.spec_off_batch}: speculation off"}
        return [max(0, min(k, room)) for k, room in zip(ks, rooms)], whys, info

    def _step(self, step: int) -> list:
        cfg, live = self.cfg, self.live
        rows = [self.rows[b] for b in live]
        ks, whys, info = self._plan()
        start = time.perf_counter()
        proposals = self.drafter.propose([r.committed for r in rows], ks, cfg.warp, [r.generator for r in rows])
        draft_time = time.perf_counter() - start
        draft_forwards = self.drafter.forwards
        proposals = [p.end_at(self.eos) for p in proposals]
        for p in proposals:  # every row waited for the whole batch's drafting
            p.seconds, p.forwards = draft_time, draft_forwards if len(p) else p.forwards

        cached = self.target.lengths
        feeds = [r.committed[c:] + p.tree.tokens for r, c, p in zip(rows, cached, proposals)]
        keep = [len(p) + 1 for p in proposals]
        start = time.perf_counter()
        out = self.target.forward(feeds, keep, hidden=self.drafter.uses_features and (self.drafter.feature_layers or True))
        logits, states = out if self.drafter.uses_features else (out, None)
        probs = [sampling.warp(rows_logits, cfg.warp) for rows_logits in logits]
        synchronize(self.pair.device)
        verify_time = time.perf_counter() - start

        events, finished, accepted, emitted_n, evaluated = [], [], [], [], 0
        for i, (b, row, p) in enumerate(zip(live, rows, proposals)):
            record = commit(step=step, k=ks[i], why=whys[i] if ks[i] or whys[i].get("k_rule") else {}, proposal=p,
                            target_probs=probs[i], verify_time=verify_time, fed=len(feeds[i]), cached=cached[i],
                            states=None if states is None else states[i], verifier=self.verifier,
                            generator=row.generator, eos=self.eos, committed=row.committed,
                            prompt_len=len(row.prompt_ids), max_new_tokens=cfg.max_new_tokens,
                            keep=lambda base, path, i=i: self.target.crop(i, base + len(path)),
                            see_features=partial(self.drafter.see_features, i),
                            observe=partial(self.drafter.observe, i), step_info=partial(self.drafter.step_info, i),
                            clock=self.clock, policy=row.policy)
            row.finish, verdict = record.finish, record.verdict
            step_events = [replace(e, row=b) for e in row.writer.step_events(record)]
            row.finished.append(step_events[-1])
            row.emitted_at.append((record.elapsed, len(record.emitted)))
            events += step_events
            accepted.append(verdict.accepted)
            evaluated += len(verdict.decisions)
            emitted_n.append(len(record.emitted))
            if row.finish is not None:
                finished.append(i)
        if self.policy is not None:
            self.policy.update(max(ks), sum(accepted), evaluated, len(rows), max(len(p) for p in proposals) + 1,
                               verify_time, draft_time, sum(len(p) for p in proposals), prefill=step == 0,
                               emitted=sum(emitted_n))
        batch_step = ev.BatchStep(step=step, rows=list(live), k=ks, drafted=[len(p) for p in proposals],
                                  accepted=accepted, emitted=emitted_n, tokens_fed=sum(len(f) for f in feeds),
                                  width=max(len(f) for f in feeds), draft_time=draft_time, verify_time=verify_time,
                                  draft_forwards=draft_forwards, elapsed=self.clock.elapsed(),
                                  finished=[live[i] for i in finished], info=info)
        self.steps.append(batch_step)
        events.append(batch_step)
        for i in finished:
            row = self.rows[live[i]]
            events.append(run_finished(self.pair, row.committed, len(row.prompt_ids), row.finish, row.started,
                                       row.finished, row=live[i]))
        if finished:
            keep_i = [i for i in range(len(live)) if i not in finished]
            self.live = [live[i] for i in keep_i]
            if self.live:
                self.target.keep_rows(keep_i)
                self.drafter.keep_rows(keep_i)
        return events


# ---------------------------------------------------------------------------------------------
# what a batched run measured (its events split per row: specviz.events.split_rows)

def batch_metrics(rows: list, steps: list) -> dict:
    """Serving numbers of a batched run: the batch's total tokens/s, each user's tokens/s and
    inter-token latency (seconds between a user's tokens: a step that commits n tokens hands
    them out together, so its latency is spread over them), passes and rows per pass."""
    wall = steps[-1].elapsed if steps else 0.0
    total = sum(r["tokens"] for r in rows)
    user_rates, gaps, ttfts = [], [], []
    for r in rows:
        times = r["emitted_at"]
        if not times:
            continue
        end = times[-1][0]
        user_rates.append(r["tokens"] / end if end > 0 else None)
        ttfts.append(times[0][0])
        last = times[0][0]
        for t, n in times[1:]:
            if n:
                gaps += [(t - last) / n] * n
                last = t
    rates = [x for x in user_rates if x is not None]
    return {
        "rows": len(rows), "tokens": total, "steps": len(steps), "wall_time": wall,
        "tokens_per_s": total / wall if wall > 0 else None,
        "user_tokens_per_s": sorted(rates)[len(rates) // 2] if rates else None,  # the median user
        "user_tokens_per_s_each": rates,
        "itl": sum(gaps) / len(gaps) if gaps else None,
        "itl_p50": metrics.percentile(gaps, 50) if gaps else None,
        "itl_p95": metrics.percentile(gaps, 95) if gaps else None,
        "ttft": sorted(ttfts)[len(ttfts) // 2] if ttfts else None,
        "verify_time": sum(s.verify_time for s in steps), "draft_time": sum(s.draft_time for s in steps),
        "rows_per_pass": sum(len(s.rows) for s in steps) / len(steps) if steps else 0,
        "tokens_per_pass": sum(s.tokens_fed for s in steps[1:]) / max(1, len(steps) - 1),
        "accepted": sum(sum(s.accepted) for s in steps), "drafted": sum(sum(s.drafted) for s in steps),
    }
