"""Batched speculation: B sequences decode together, one target pass per step for all rows.

A server never decodes one sequence at a time. Each step here every live row drafts (the draft
model's forwards are batched too), then ONE target pass verifies every row's chain at once, and
each row keeps its own result:

    row 0   [pending | x1 x2 x3 x4]   accepted 4 + bonus       -> 5 tokens
    row 1   [pending | x1 x2 x3 x4]   accepted 1 + residual    -> 2 tokens
    row 2   [pending | x1 x2 . .  ]   (drafted EOS) ...         rows are padded to the widest

Acceptance is ragged: each row has its own accepted length, its own KV positions (`RowCache`:
one buffer per layer and a write position per row, so cropping a row back after a rejection is
setting a number) and its own sampling stream (a torch.Generator per row, seeded per row, drawn in
the order a single-sequence run draws: a row's output does not depend on which prompts share its
batch, and `generate(pair, prompt, seed=row_seed)` reproduces it). Rows that finish leave the
batch and stop costing.

Why batching kills speculation: at batch 1 a forward is bound by reading the weights, so
verifying k + 1 tokens costs about what one costs. A batch of B rows already feeds B tokens per
pass; speculation multiplies that by k + 1, and once B(k + 1) tokens make the pass compute-bound,
every rejected draft is paid for in full. `LoadK` (k="load") is what serving engines do about it:
choose k each step from the running acceptance rate and the measured cost of a pass over
B(k + 1) tokens, down to k = 0 (plain autoregressive steps) when the batch is large, plus a fixed
switch-off batch size like vLLM's `speculative_disable_by_batch_size` (`spec_off_batch`).

Methods: ar, spec (k, "auto" per row, or "load"), pld, medusa and eagle chains. Trees are left to
the single-sequence engine: a batch of trees needs a tree mask per row over one padded pass,
which this module's per-row causal mask does not express.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
import time
from dataclasses import dataclass, field, replace
from functools import partial
from statistics import NormalDist
from typing import Callable, Iterator, Optional

import torch

from specviz import events as ev
from specviz.events import batch_events, split_rows  # noqa: F401  (part of this module's API)
from specviz import files, methods, metrics, sampling
from specviz.adaptive import AdaptiveK
from specviz.bench.machine import cpu_name
from specviz.commit import commit, hand_out, room_left, run_finished
from specviz.config import MAX_BATCH, RunConfig, check_context, model_vocab_size, prompt_to_ids
from specviz.drafters.base import Proposal
from specviz.drafters.model import stops
from specviz.errors import InputError
from specviz.heads import heads_for
from specviz.lm import synchronize
from specviz.record import EventWriter
from specviz.run import Clock, config_of, is_batch, make_drafter, make_verifier, started_event, stop_tokens

LOAD_K_MAX = 6  # the deepest k the load policy considers (deeper rarely pays, and each k costs a calibration)


# ---------------------------------------------------------------------------------------------
# the batched KV cache and runners

class RowCache:
    """A KV cache for B rows of different lengths: one (B, heads, capacity, dim) buffer per layer
    and `lengths[b]`, the tokens row b holds. A forward feeding T columns per row writes row b's
    at columns lengths[b] .. lengths[b] + T - 1 (a padded column writes too, past the row's
    length, where nothing reads it and the next write overwrites it). Cropping a row is setting
    its length: nothing is copied. transformers' attention layers call `update` as they would on
    their own caches; the runner passes the per-row causal mask and positions itself."""

    def __init__(self, n_layers: int, rows: int, device):
        self.keys: list = [None] * n_layers
        self.values: list = [None] * n_layers
        self.device = device
        self.lengths = [0] * rows  # a Python list: cropping a row is one assignment
        self._index = None
        self._width = 0

    def begin(self, width: int) -> None:
        """Before a forward that feeds `width` columns per row."""
        self._index = (torch.tensor(self.lengths)[:, None] + torch.arange(width)).to(self.device)  # (B, T)
        self._width = max(self.lengths) + width

    def _buffers(self, layer_idx: int, width: int, key, value) -> tuple:
        """Layer `layer_idx`'s key and value buffers, holding at least `width` columns for every
        row (grown to at least twice their size, what was in them kept; shaped like `key`/`value`)."""
        buf_k, buf_v = self.keys[layer_idx], self.values[layer_idx]
        if buf_k is None or buf_k.shape[2] < width:
            capacity = max(width, 2 * (0 if buf_k is None else buf_k.shape[2]), 64)
            rows, (_, heads, _, dim) = len(self.lengths), key.shape
            new_k = key.new_zeros((rows, heads, capacity, dim))
            new_v = value.new_zeros((rows, heads, capacity, dim))
            if buf_k is not None:
                new_k[:, :, :buf_k.shape[2]] = buf_k
                new_v[:, :, :buf_v.shape[2]] = buf_v
            buf_k, buf_v = self.keys[layer_idx], self.values[layer_idx] = new_k, new_v
        return buf_k, buf_v

    def update(self, key, value, layer_idx: int, *args, **kwargs):
        buf_k, buf_v = self._buffers(layer_idx, self._width, key, value)
        rows = key.shape[0]
        row = torch.arange(rows, device=key.device)[:, None]
        buf_k[row, :, self._index] = key.transpose(1, 2)  # (B, T, heads, dim) at each row's own columns
        buf_v[row, :, self._index] = value.transpose(1, 2)
        return buf_k[:, :, :self._width], buf_v[:, :, :self._width]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return max(self.lengths, default=0)

    def place(self, row: int, other: "RowCache") -> None:
        """Row `row` (empty) takes the one row `other` holds: its keys and values, its length."""
        if self.lengths[row]:
            raise ValueError(f"row {row} already holds {self.lengths[row]} tokens; place fills empty rows")
        n = other.lengths[0]
        for i, (key, value) in enumerate(zip(other.keys, other.values)):
            if key is not None and n:
                buf_k, buf_v = self._buffers(i, n, key, value)
                buf_k[row, :, :n] = key[0, :, :n]
                buf_v[row, :, :n] = value[0, :, :n]
        self.lengths[row] = n

    def keep_rows(self, rows: list) -> None:
        """Keep only these rows (batch indices, in order): finished rows stop costing."""
        self.lengths = [self.lengths[i] for i in rows]
        dev = torch.tensor(rows, dtype=torch.long, device=self.device)
        for store in (self.keys, self.values):
            for i, buf in enumerate(store):
                if buf is not None:
                    store[i] = buf.index_select(0, dev)

    def nbytes(self) -> int:
        return sum(b.numel() * b.element_size() for store in (self.keys, self.values) for b in store if b is not None)


class BatchLM:
    """A Hugging Face causal LM over a RowCache: `forward(feeds, keep)` runs one pass for every
    row at once, each row feeding its own tokens (ragged: padded to the longest) at its own
    positions, and returns each row's last `keep[b]` logits rows (the output head reads only
    those). The batched counterpart of specviz.lm.CachedLM."""

    def __init__(self, model, rows: int):
        self.model, self.device = model, model.device
        self.n_layers = model.config.num_hidden_layers
        self.reset(rows)

    def reset(self, rows: int) -> None:
        self.cache = RowCache(self.n_layers, rows, self.device)

    @property
    def lengths(self) -> list:
        return list(self.cache.lengths)

    CHUNK_TOKENS = 2048  # a pass feeding more (a batch's prompts) runs in chunks of columns

    def forward(self, feeds: list, keep: list, hidden=False):
        """feeds[b]: the tokens row b feeds (may be empty: that row rides along, unchanged);
        keep[b]: how many of its last rows of logits to return. Returns [logits (keep[b], V)],
        or with hidden=True ([logits], [states (len(feeds[b]), d)]) (hidden=a tuple of layer
        indices: states (len(feeds[b]), len + 1, d), as specviz.lm.forward_with_states).

        Chunked prefill, as serving engines do it: a pass of more than CHUNK_TOKENS tokens (B
        rows x the longest feed) runs as several passes of fewer columns each, every row feeding
        its next slice, so the activations of a batch's prompts stay bounded (32 prompts of 224
        tokens in one pass would hold gigabytes of MLP activations); the cache and the logits
        are those of one pass."""
        rows, width = len(feeds), max(1, max(len(f) for f in feeds))
        step = max(1, self.CHUNK_TOKENS // max(1, rows))
        if width <= step:
            return self._forward(feeds, keep, hidden)
        logits, states = [[] for _ in range(rows)], [[] for _ in range(rows)]
        for start in range(0, width, step):
            part = [f[start:start + step] for f in feeds]
            # the row's kept positions (its last keep[b]) that fall in this slice
            wanted = [max(0, min(len(f), start + step) - max(start, len(f) - n)) if start < len(f) else 0
                      for f, n in zip(feeds, keep)]
            out = self._forward(part, wanted, hidden)
            got, hid = out if hidden else (out, None)
            for b in range(rows):
                logits[b].append(got[b])
                if hid is not None:
                    states[b].append(hid[b])
        logits = [torch.cat(parts) for parts in logits]
        if hidden:
            return logits, [torch.cat(parts) for parts in states]
        return logits

    @torch.inference_mode()
    def _forward(self, feeds: list, keep: list, hidden=False):
        rows, width = len(feeds), max(1, max(len(f) for f in feeds))
        ids = torch.tensor([list(f) + [f[-1] if f else 0] * (width - len(f)) for f in feeds],
                           dtype=torch.long, device=self.device)
        lengths = self.cache.lengths
        positions = torch.tensor(lengths)[:, None] + torch.arange(width)  # (B, T): each row's own positions
        columns = torch.arange(max(lengths) + width)
        mask = columns[None, None, :] <= positions[:, :, None]  # (B, T, W): causal over the row's own cache
        self.cache.begin(width)
        layers = hidden if isinstance(hidden, tuple) else None
        decoded = self.model.get_decoder()(
            input_ids=ids, attention_mask=mask[:, None].to(self.device), position_ids=positions.to(self.device),
            past_key_values=self.cache, use_cache=True, output_hidden_states=layers is not None)
        states = decoded.last_hidden_state  # (B, T, d)
        fed = [len(f) for f in feeds]
        self.cache.lengths = [n + f for n, f in zip(lengths, fed)]
        flat = [b * width + t for b in range(rows) for t in range(fed[b] - keep[b], fed[b])]
        out = self.model.get_output_embeddings()(
            states.reshape(rows * width, -1)[torch.tensor(flat, dtype=torch.long, device=self.device)]).float()
        logits = list(torch.split(out, list(keep)))
        if layers is not None:  # EAGLE-3: (B, T, len(layers) + 1, d), the chosen layers' inputs then the last
            states = torch.stack([decoded.hidden_states[i] for i in layers] + [states], dim=2)
        if hidden:
            return logits, [states[b, :fed[b]] for b in range(rows)]
        return logits

    def prefill(self, feeds: list, hidden=False):
        """forward(feeds, [len(f) for f in feeds], hidden) for a batch whose rows are all empty,
        without the padding: each row runs on its own (a one-row pass, chunked as forward chunks)
        and its keys and values are placed in this batch's cache. A bank of prompts of 13 to 300
        tokens padded to the longest is mostly padding, and a padded column costs a decoder pass
        as a real one does; a one-row pass costs only the row's own tokens. Returns what forward
        returns: every fed position's logits (and states)."""
        logits, states = [], []
        for b, feed in enumerate(feeds):
            one = BatchLM(self.model, 1)
            out = one.forward([list(feed)], [len(feed)], hidden)
            got, hid = out if hidden else (out, None)
            logits.append(got[0])
            if hid is not None:
                states.append(hid[0])
            self.cache.place(b, one.cache)
        return (logits, states) if hidden else logits

    def crop(self, row: int, length: int) -> None:
        """Row `row` keeps its first `length` cached tokens."""
        if length < self.cache.lengths[row]:
            self.cache.lengths[row] = length

    def keep_rows(self, rows: list) -> None:
        self.cache.keep_rows(rows)

    def kv_bytes(self) -> int:
        return self.cache.nbytes()


class LoopBatchLM:
    """BatchLM's interface over models that bring their own single-sequence runner (the exact
    toy tables of specviz.toy): one runner per row, run in turn. Exact, not fast."""

    def __init__(self, model, rows: int):
        self.model, self.device = model, model.device
        self.reset(rows)

    def reset(self, rows: int) -> None:
        self.runners = [self.model.make_runner() for _ in range(rows)]

    @property
    def lengths(self) -> list:
        return [r.length for r in self.runners]

    def forward(self, feeds: list, keep: list, hidden=False):
        logits, states = [], []
        for runner, feed, n in zip(self.runners, feeds, keep):
            if not feed:
                logits.append(torch.zeros((0, 1)))
                states.append(None)
                continue
            out = runner.forward(list(feed), hidden=True)
            rows_logits, rows_states = out
            logits.append(rows_logits[len(rows_logits) - n:])
            states.append(rows_states)
        return (logits, states) if hidden else logits

    def crop(self, row: int, length: int) -> None:
        self.runners[row].crop(length)

    def keep_rows(self, rows: list) -> None:
        self.runners = [self.runners[i] for i in rows]

    def kv_bytes(self) -> int:
        return 0


def batch_runner_for(model, rows: int):
    """The batched runner of a model: toy models run a runner per row, HF models a BatchLM.
    (CUDA graphs are a batch-1 device: batched passes run eagerly.)"""
    if getattr(model, "make_runner", None) is not None:
        return LoopBatchLM(model, rows)
    return BatchLM(model, rows)


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


class BatchModelDrafter(BatchDrafter):
    """The draft model, batched: each of its forwards feeds every row still drafting at once
    (the first one each row's uncached tail, then one drafted token per row). A row stops at
    its k, at a drafted end of text or, with a confidence rule, when q(x) falls below it;
    rows that stopped ride along empty. Each row samples from its own generator, in the order
    specviz.drafters.ModelDrafter draws."""

    name = "draft model"

    def __init__(self, model, eos_token_ids=(), stop_below=None):
        self.model, self.eos, self.stop_below = model, set(eos_token_ids), stop_below

    def start(self, prompts: list) -> None:
        self.runner = batch_runner_for(self.model, len(prompts))

    def propose(self, committed_rows: list, ks: list, warp, generators: list) -> list:
        start = time.perf_counter()
        rows = len(committed_rows)
        tokens, probs = [[] for _ in range(rows)], [[] for _ in range(rows)]
        live = [k > 0 for k in ks]
        lengths = self.runner.lengths
        feeds = [c[lengths[i]:] if live[i] else [] for i, c in enumerate(committed_rows)]
        self.forwards = 0
        while any(live):
            logits = self.runner.forward(feeds, [1 if on else 0 for on in live])
            self.forwards += 1
            drafting = [i for i in range(rows) if live[i]]
            q_rows = sampling.warp(torch.cat([logits[i][-1:] for i in drafting]), warp)
            feeds = [[] for _ in range(rows)]
            for q, i in zip(q_rows, drafting):
                token = sampling.sample(q, warp, generators[i])
                tokens[i].append(token)
                probs[i].append(q)
                if stops(len(tokens[i]), ks[i], token, q, self.eos, self.stop_below):
                    live[i] = False
                else:
                    feeds[i] = [token]
        synchronize(getattr(self.runner, "device", "cpu"))
        seconds = time.perf_counter() - start
        return [Proposal.chain(tokens[i], torch.stack(probs[i]) if probs[i] else probs[i], self.forwards, seconds)
                for i in range(rows)]

    def observe(self, i: int, committed: list, proposal, path, target_probs) -> None:
        self.runner.crop(i, min(self.runner.lengths[i], len(committed) - 1))

    def backlog(self, committed_rows: list) -> float:
        """Tokens per row (mean) the draft model has not seen: after plain steps (or a plain
        prompt pass) its next forward catches up on them before it drafts."""
        lengths = self.runner.lengths
        return sum(max(0, len(c) - 1 - lengths[i]) for i, c in enumerate(committed_rows)) / max(1, len(committed_rows))

    def keep_rows(self, rows: list) -> None:
        self.runner.keep_rows(rows)


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


def make_batch_drafter(pair, cfg: RunConfig) -> BatchDrafter:
    """The method's batched drafter (its record in specviz.methods names one), else its own
    drafter, one per row (LoadK asks for up to LOAD_K_MAX)."""
    method = methods.get(cfg.method)
    batched = method.batch_drafter(pair, cfg, stop_tokens(pair, cfg))
    if batched is not None:
        return batched
    one = cfg.replace(k=min(LOAD_K_MAX, cfg_k_max(pair, cfg))) if cfg.k == "load" else cfg
    return RowDrafters(lambda: make_drafter(pair, one))


def no_batch_drafter(pair, cfg: RunConfig, stop) -> BatchDrafter:
    """`ar` in a batch (specviz.methods)."""
    return NoBatchDrafter()


def model_batch_drafter(pair, cfg: RunConfig, stop) -> BatchDrafter:
    """`spec` in a batch (specviz.methods): the draft model's rows in one padded forward."""
    below = AdaptiveK(cfg.auto_rule, confidence=cfg.confidence).stop_below if cfg.k == "auto" else None
    return BatchModelDrafter(pair.draft, stop, below)


def cfg_k_max(pair, cfg: RunConfig) -> int:
    """The deepest chain the method can draft: Medusa heads draft one token per head."""
    if methods.get(cfg.method).heads == "medusa":
        return heads_for(pair, "medusa", cfg.heads or None).depth
    return LOAD_K_MAX


# ---------------------------------------------------------------------------------------------
# the cost of a pass, and the load policy

ROW_GRID = (1, 2, 4, 8, 16, 32, 64)  # batch sizes the cost table measures; others interpolate between


class CostTable:
    """Seconds of one forward of `model` over `rows` rows of `width` tokens each (a batched
    pass's own shape: B rows of k + 1), measured where asked, after CONTEXT tokens per row (about
    a short prompt and part of its answer: a pass costs more the longer the context its rows attend
    to, so a table timed after a few tokens under-predicts a run's passes), and kept on the model so
    a pair measures each shape once.

    Measured per shape rather than read off a curve of total tokens: on a CPU a matrix product's
    cost is not smooth in its row count (kernels block rows by the vector width, so a pass of 16
    tokens can cost less than one of 12), and interpolating between such points mispredicts the
    very passes speculation runs. Row counts between measured ones interpolate linearly for the
    same width. The load policy scales the table by what its own passes really took.

    `CostTable.of(model)` also keeps the table in the cache (SAVED under $SPECVIZ_CACHE), keyed by
    the machine, the threads, torch, the model's config, dtype and linear kernels: a new process
    on the same machine and pair reads the shapes measured before and measures only new ones, so
    a user's first k="load" run does not wait for them, and says so when it must measure."""

    CONTEXT = 64
    SAVED = "pass-costs"  # the cache's folder of measured tables
    VERSION = 2  # 2: {"settings": {"version", "key"}, "points"}, read by files.read_partial

    def __init__(self, model, context: int = CONTEXT, repeats: int = 3, say: Callable[[str], None] = None):
        self.model, self.context, self.repeats = model, context, repeats
        self.points: dict = {}  # (rows, width) -> seconds
        self.path: Optional = None  # where the table is kept (CostTable.of), or None
        self.key: dict = {}
        self.say = say or _say

    @classmethod
    def of(cls, model) -> "CostTable":
        table = model.__dict__.get("_specviz_cost_table")
        if table is None:
            table = cls(model)
            table.key = table_key(model, table.context, table.repeats)
            digest = hashlib.sha256(json.dumps(table.key, sort_keys=True).encode()).hexdigest()[:20]
            table.path = files.cache_dir() / cls.SAVED / f"{digest}.json"
            table._read_saved()
            model.__dict__["_specviz_cost_table"] = table
        return table

    def need(self, rows: int, widths) -> list:
        """Measure (r, w) for every w in `widths` and every grid row count r up to `rows` (and
        `rows` itself), saying so with an ETA (and keeping the table where `of` keeps it);
        returns the shapes measured now."""
        todo = [(r, w) for r in sorted({g for g in ROW_GRID if g <= rows} | {rows}) for w in widths
                if (r, w) not in self.points]
        if not todo:
            return todo
        row_counts = sorted({r for r, _ in todo})
        weight = {r: r * sum(w for rr, w in todo if rr == r) for r in row_counts}  # tokens a round feeds
        size = sum(p.numel() for p in self.model.parameters()) if hasattr(self.model, "parameters") else 0
        what = f"the {size / 1e9:.1f}B model" if size >= 1e8 else f"a {size / 1e6:.1f}M model" if size else "a model"
        self.say(f"measuring the cost of a batched pass of {what} for k='load': {len(todo)} shapes, "
                 "once per machine and model" + (" (kept in the cache)" if self.path else ""))
        start, done = time.perf_counter(), 0
        for r in row_counts:
            self.points.update(measure_pass(self.model, r, [w for rr, w in todo if rr == r],
                                            self.context, self.repeats))
            done += weight[r]
            left = sum(weight.values()) - done
            if left:
                eta = (time.perf_counter() - start) / done * left
                self.say(f"  {r} rows measured; ETA {eta:.0f} s")
        self._write_saved()
        return todo

    def _settings(self) -> dict:
        return {"version": self.VERSION, "key": self.key}

    def _saved(self, say: Callable[[str], None]) -> dict:
        """The points kept at `path` for this machine and model ({} where there are none), read as
        the cache's other saved work is (files.read_partial): a file that cannot be read, of
        another version or key, or that holds no table is said by `say`."""
        saved = files.read_partial(self.path, self._settings(), say)
        if saved is None:
            return {}
        try:
            return CostTable(None).load(saved["points"]).points
        except (KeyError, TypeError, ValueError, AttributeError):
            say(f"{self.path} holds no pass-cost table: starting over (it will be replaced)")
            return {}

    def _read_saved(self) -> None:
        if self.path is not None:
            self.points.update(self._saved(self.say))

    def _write_saved(self) -> None:
        """Keep the table, with what a twin model of the same key added to the file meanwhile."""
        if self.path is None:
            return
        table = CostTable(None)
        table.points = {**self._saved(lambda why: None), **self.points}  # an unusable file is replaced
        try:
            files.write_json(self.path, {"settings": self._settings(), "points": table.to_dict()})
        except (OSError, files.DiskFullError) as exc:  # a full or read-only cache: the table still serves this run
            self.say(f"the pass-cost table could not be kept in the cache ({exc}); it is measured again next time")

    def __call__(self, rows: int, width: int) -> float:
        if (rows, width) in self.points:
            return self.points[(rows, width)]
        have = sorted(r for r, w in self.points if w == width)
        if not have:
            raise ValueError(f"no pass of width {width} measured: call need() first")
        below = [r for r in have if r <= rows]
        above = [r for r in have if r >= rows]
        if below and above:
            a, b = below[-1], above[0]
            return self.points[(a, width)] + (rows - a) * (self.points[(b, width)] - self.points[(a, width)]) / (b - a)
        near = below[-1] if below else above[0]  # outside the measured rows: proportional to rows
        return self.points[(near, width)] * rows / near

    def to_dict(self) -> dict:
        """{rows: {width: seconds}} (JSON keys are strings)."""
        out: dict = {}
        for (r, w), s in sorted(self.points.items()):
            out.setdefault(str(r), {})[str(w)] = s
        return out

    def load(self, data: dict) -> "CostTable":
        self.points.update({(int(r), int(w)): s for r, widths in data.items() for w, s in widths.items()})
        return self


def _say(message: str) -> None:
    """The cost table's progress lines, on stderr like the pair loader's (the runtime measuring
    this machine, not the engine reporting a run)."""
    print(f"[specviz] {message}", file=sys.stderr, flush=True)


def table_key(model, context: int, repeats: int) -> dict:
    """What a measured pass cost depends on: the machine (CPU or GPU name), torch and its
    threads, the model's architecture (its config), dtype and linear layers' kernels (nn.Linear,
    specviz's gemv or int8), and the measurement's own settings."""
    param = next(iter(model.parameters()), None) if hasattr(model, "parameters") else None
    device = param.device if param is not None else torch.device("cpu")
    config = getattr(model, "config", None)
    arch = type(model).__name__
    if hasattr(config, "to_dict"):  # where the weights were read from is no part of the cost
        arch = json.dumps({k: v for k, v in config.to_dict().items() if k != "_name_or_path"}, sort_keys=True,
                          default=str)
    layers = sorted({type(m).__name__ for m in model.modules() if "Linear" in type(m).__name__}) \
        if hasattr(model, "modules") else []
    return {"machine": torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name(),
            "device": device.type, "threads": torch.get_num_threads(), "torch": torch.__version__,
            "model": hashlib.sha256(arch.encode()).hexdigest()[:16],
            "dtype": str(param.dtype) if param is not None else "", "layers": layers,
            "context": context, "repeats": repeats}


@torch.inference_mode()
def measure_pass(model, rows: int, widths: list, context: int = CostTable.CONTEXT, repeats: int = 3) -> dict:
    """{(rows, w): seconds} of one forward feeding `rows` rows of w tokens after a `context`-token
    cache per row: the fastest of `repeats` rounds after a warm-up round, one prefill for all
    widths. A round times every width once, so each shape's samples are spread over the whole
    measurement: a slow spell of the machine (another program, the clock speed) slows one sample
    of every shape, not every sample of one shape."""
    vocab = min(100, model_vocab_size(model))
    runner = batch_runner_for(model, rows)
    runner.forward([[(7 * i + j) % vocab for j in range(context)] for i in range(rows)], [1] * rows)
    best = {(rows, width): float("inf") for width in widths}
    for r in range(repeats + 1):
        for width in widths:
            feed = [[(3 * i + j) % vocab for j in range(width)] for i in range(rows)]
            synchronize(runner.device)
            start = time.perf_counter()
            runner.forward(feed, [width] * rows)
            synchronize(runner.device)
            if r:  # round 0 warms up
                best[(rows, width)] = min(best[(rows, width)], time.perf_counter() - start)
            for i in range(rows):
                runner.crop(i, context)
    return best


class Running:
    """A running mean that forgets: each value added weighs 1 and every earlier one `memory` times
    less than before. No prior: the first value is the mean (an average that started at a guess
    would take a dozen steps to forget it), and `default` stands in until then."""

    def __init__(self, memory: float, default: Callable[[], float] = lambda: 1.0):
        self.memory, self.default, self.total, self.weight = memory, default, 0.0, 0.0

    def add(self, value: float) -> None:
        self.total, self.weight = self.memory * self.total + value, self.memory * self.weight + 1.0

    @property
    def value(self) -> float:
        return self.total / self.weight if self.weight else self.default()


class LoadK:
    """k="load": one draft length for the whole batch, chosen every step so that the batch
    finishes soonest.

    Each candidate k (0: a plain autoregressive step) is scored by `plan`: the predicted seconds
    until every live row has its budget if every step from here on drafted k; this step takes the
    best k and the next step chooses again (a receding horizon). A step's own tokens per second
    would miss what decides a batch's finishing time. Rows of a speculative batch accept unevenly,
    so they finish at different passes and the last passes run few rows, at almost a full pass's
    cost (a pass of 2 rows costs nearly what one of 8 does where passes are bound by reading the
    weights); a batch that turns plain after speculating keeps that raggedness to its end, a
    speculating one lets its laggards catch up. And speculating after plain steps first costs the
    draft model's catch-up on every token it missed (its prompt, on the first pass): paid once,
    so worth it only over enough steps to pay it back. The plan counts both:

    - a row's step with k drafts yields X tokens, P(X = j) = alpha^(j-1) (1 - alpha) for j <= k and
      alpha^k for j = k + 1 (mean E, variance V), E corrected by a running factor of the drafts
      this run's steps really kept against their prediction (rows accept unevenly, which one pooled
      alpha over-predicts); a row with n tokens left needs about n / E steps, spread by
      sqrt(n V / E^3) steps (renewal theory); the rows, ranked by what they have left, are put at
      the normal order statistics of that spread (the last of 16 rows finishes about two spreads
      after the middle one); at k = 0 a row with n tokens left needs exactly n steps;
    - plan step j costs a pass of the rows still live then: the target's pass over rows x (k + 1)
      (its `CostTable`, scaled by what this run's passes really took, or this run's own running
      time for a shape it has run), plus the drafting (the draft model's forwards from its table,
      likewise scaled; a drafter's measured seconds per drafted token and row), plus, once, the
      draft model's catch-up on the tokens it has not seen (`catch_up`).

    alpha is the running acceptance rate over every row, forgetting older judged drafts (plain
    steps judge none: the evidence waits, it does not fade), from PRIOR_ALPHA worth PRIOR_WEIGHT
    drafts. Speculation is chosen only where its plan beats plain decoding's by SPEC_MARGIN (the
    pass estimates drift with the machine by more than a few percent). Probes keep alpha honest:
    when plain decoding wins and nothing has been judged (the first pass) or `probe_every` plain
    steps have passed, a step speculates PROBE_K drafts deep (the first draft is accepted more
    often than later ones: a probe one draft deep over-states alpha for deeper steps), but only
    where the highest alpha the evidence allows (`alpha_high`: 1 before any draft is judged)
    would finish the batch PROBE_MARGIN sooner than plain decoding: else no alpha the run is
    likely to see could change the choice, while the catch-up a probe pays is certain, and so is
    the ragged tail its uneven acceptance leaves; a probe after which plain
    decoding still wins doubles the wait for the next. The plan's plain passes are the table's,
    scaled by what this run's passes took, until the run has timed one: a batch's passes differ
    from the table's by shape (its rows' contexts differ, and a wide pass pays for that more than
    a narrow one), so where speculation's predicted gain is under PLAIN_PROBE_MARGIN one plain
    step, after the first speculative one, times the plain pass (it costs nothing but the tokens
    speculation might have added in one step). A pass timed far above its estimate counts
    as CLIP times it (a slow spell of the machine), and the draft's catch-up is not taken for its
    drafting cost. At or above `off_batch` live rows (vLLM's speculative_disable_by_batch_size)
    every step is k = 0. Without a budget per row the plan assumes OPEN tokens per row left."""

    rule = "load"
    PRIOR_ALPHA, PRIOR_WEIGHT = 0.8, 2.0
    CLIP = 1.5  # a pass timed slower than this many times its estimate counts as this many
    PROBE_WAIT_MAX = 64  # plain steps between probes, at most
    PROBE_MARGIN = 1.1  # a probe's best case must finish the batch this much sooner than plain decoding
    PROBE_Z = 2.0  # how far above the running alpha a probe's best case looks, in standard errors
    PROBE_K = 3  # a probe's drafts per row: deep enough to judge more than the first draft
    SPEC_MARGIN = 1.05  # and speculation at the running alpha, to be chosen
    PLAIN_PROBE_MARGIN = 1.3  # under this predicted gain, a run that has not timed a plain pass times one
    CATCH_UP_WIDTH = 8  # tokens per row of the draft's widest measured pass (its catch-ups)
    OPEN = 64  # tokens per row the plan assumes left where no budget is known

    def __init__(self, target_cost: CostTable, draft_cost: Optional[CostTable], k_max: int = LOAD_K_MAX,
                 off_batch: int = 0, probe_every: int = 8, memory: float = 0.9):
        self.target_cost, self.draft_cost = target_cost, draft_cost
        self.k_max, self.off_batch, self.probe_every, self.memory = k_max, off_batch, probe_every, memory
        self.accepted = self.evaluated = 0.0
        # measured / table, for the target's passes and the draft's (contexts, padding, the engine's
        # work around a forward, this run's machine state); the draft's follows the target's until
        # the draft has evidence of its own: what slows one model's passes on a machine slows the other's
        self.target_scale = Running(memory)
        self.draft_scale = Running(memory, default=lambda: self.target_scale.value)
        self.draft_per_token = 0.0  # seconds per drafted token per row (drafters without a cost curve)
        self.plain_steps = 0
        self.seen: dict = {}  # (rows, width) -> this run's running seconds for a target pass of that shape
        self.spec_steps = 0  # speculative steps since the last plain one
        self.scale_c = 1.0  # the draft's catch-up forwards: measured / predicted
        self.backlog = 0.0  # tokens per row the draft model has not seen, at the last choice
        self.probe_wait = probe_every  # plain steps before the next probe
        self.probed = False  # the last step was a probe
        self.first = True  # no step chosen yet
        self.rooms: Optional[list] = None  # each row's deepest chain within its budget, at the last choice
        self.last_tokens = 0.0  # tokens the last choice predicted (before token_scale)
        # accepted drafts a speculative step brought / predicted: rows accept unevenly (a pooled
        # alpha over-predicts a batch of code and chat alike), which one running alpha does not see
        self.token_scale = Running(memory)

    def prepare(self, rows: int) -> None:
        """Measure the pass shapes this batch can need (once per model and shape)."""
        self.target_cost.need(rows, range(1, self.k_max + 2))
        if self.draft_cost is not None:
            self.draft_cost.need(rows, (1, 2, self.CATCH_UP_WIDTH))

    @property
    def scale_t(self) -> float:
        return self.target_scale.value

    @property
    def scale_d(self) -> float:
        return self.draft_scale.value

    @property
    def alpha(self) -> float:
        return (self.accepted + self.PRIOR_ALPHA * self.PRIOR_WEIGHT) / (self.evaluated + self.PRIOR_WEIGHT)

    @property
    def alpha_high(self) -> float:
        """The highest alpha the evidence allows: PROBE_Z standard errors above the running alpha
        (1 when nothing has been judged)."""
        a, n = self.alpha, self.evaluated + self.PRIOR_WEIGHT
        return min(1.0, a + self.PROBE_Z * math.sqrt(a * (1 - a) / n))

    def step_seconds(self, rows: int, k: int) -> float:
        """Predicted seconds of one step of `rows` rows drafting k (no catch-up)."""
        seen = self.seen.get((rows, k + 1))
        seconds = seen if seen is not None else self.scale_t * self.target_cost(rows, k + 1)
        if k:
            if self.draft_cost is not None:  # the first forward feeds ~2 tokens per row, then one per row
                seconds += self.scale_d * (self.draft_cost(rows, 2) + (k - 1) * self.draft_cost(rows, 1))
            else:
                seconds += self.draft_per_token * rows * k
        return seconds

    def step_tokens(self, k: int, alpha: Optional[float] = None) -> tuple:
        """(mean, variance) of the tokens one row's step with k drafts yields: at the running
        alpha with the drafts this run's steps really kept (`token_scale`), or at `alpha` as is."""
        a = min(self.alpha if alpha is None else alpha, 1.0)
        probs = [a ** (j - 1) * (1 - a) for j in range(1, k + 1)] + [a ** k]
        mean = sum(j * p for j, p in enumerate(probs, 1))
        var = sum(j * j * p for j, p in enumerate(probs, 1)) - mean ** 2
        if k and alpha is None:
            scale = self.token_scale.value
            mean, var = 1 + (mean - 1) * scale, var * scale
        return mean, max(var, 0.0)

    def finish_steps(self, k: int, lefts: list, alpha: Optional[float] = None) -> list:
        """Predicted steps until each row (with lefts[i] tokens to go) has its budget, drafting k."""
        if k == 0:
            return [float(n) for n in lefts]
        mean, var = self.step_tokens(k, alpha)
        rows, normal = len(lefts), NormalDist()
        out = [0.0] * rows
        for rank, i in enumerate(sorted(range(rows), key=lambda i: lefts[i])):
            n = lefts[i]
            z = normal.inv_cdf((rank + 0.5) / rows) if rows > 1 else 0.0
            out[i] = min(float(n), max(1.0, n / mean + z * math.sqrt(n * var / mean ** 3)))
        return out

    def plan(self, k: int, lefts: list, alpha: Optional[float] = None, backlog: Optional[float] = None) -> float:
        """Predicted seconds until every row has its budget if every step from here on drafts k
        (lefts: tokens each live row has to go), the draft's catch-up on `backlog` unseen tokens
        per row included (default: the last choice's)."""
        done = sorted(self.finish_steps(k, lefts, alpha))
        seconds, gone = 0.0, 0
        for j in range(math.ceil(done[-1]) if done else 0):
            while gone < len(done) and done[gone] <= j:
                gone += 1
            seconds += self.step_seconds(len(done) - gone, k)
        if k:
            seconds += self.catch_up(len(lefts), self.backlog if backlog is None else backlog)
        return seconds

    def predict(self, rows: int, k: int, alpha: Optional[float] = None) -> dict:
        """Predicted seconds and tokens of one step of `rows` rows at k (at the running alpha, or
        `alpha`; rows near their budget draft no deeper than their room)."""
        a = min(self.alpha if alpha is None else alpha, 0.999)
        if k and self.rooms is not None and len(self.rooms) == rows:
            raw = sum((1 - a ** (min(k, max(0, room)) + 1)) / (1 - a) for room in self.rooms)
        else:
            raw = rows * (1 - a ** (k + 1)) / (1 - a)
        # every row gets its one token from the target whatever happens to the drafts
        tokens = rows + (raw - rows) * self.token_scale.value if k and alpha is None else raw
        seconds = self.step_seconds(rows, k)
        return {"k": k, "seconds": seconds, "tokens": tokens, "raw_tokens": raw, "tokens_per_s": tokens / seconds}

    def catch_up(self, rows: int, backlog: float) -> float:
        """Predicted extra seconds of the draft's first forward when it has `backlog` unseen
        tokens per row (beyond the one a drafting step feeds anyway), scaled by what this run's
        catch-ups took. From the draft's own pass of CATCH_UP_WIDTH tokens per row where its table
        has one (between 2 and that width linearly, beyond it in proportion: so wide a pass is
        bound by arithmetic); else from the target's table times the draft's cost against the
        target's at 2 tokens, which over-predicts a wide pass (the small model's overheads weigh
        more in a narrow pass than in a wide one)."""
        if self.draft_cost is None or backlog <= 1:
            return 0.0
        width = backlog + 1
        w = self.CATCH_UP_WIDTH
        if any(shape[1] == w for shape in self.draft_cost.points):
            two, wide = self.draft_cost(rows, 2), self.draft_cost(rows, w)
            cost = two + (width - 2) * (wide - two) / (w - 2) if width <= w else wide * width / w
            return self.scale_c * max(0.0, cost - two)
        widest = max(1, min(int(width), self.k_max + 1))
        target = self.target_cost(rows, widest) * width / widest
        ratio = self.draft_cost(rows, 2) / max(self.target_cost(rows, 2), 1e-9)
        return self.scale_c * max(0.0, ratio * target - self.draft_cost(rows, 2))

    def choose(self, rows: int, backlog: float = 0.0, left: Optional[float] = None,
               rooms: Optional[list] = None) -> tuple:
        """(k for this step, why). `backlog`: tokens per row the draft model has not seen; `rooms`:
        each row's deepest chain within its budget (its tokens to go, less one); `left`: tokens
        per row to go where rooms are not given (None: no end known, OPEN)."""
        self.backlog, self.rooms = backlog, rooms
        if self.off_batch and rows >= self.off_batch:
            return 0, {"k_rule": "load", "k_chosen": 0,
                       "why": f"{rows} live rows >= spec_off_batch {self.off_batch}: speculation off"}
        lefts = ([max(1, room + 1) for room in rooms] if rooms is not None and len(rooms) == rows
                 else [max(1.0, left if left is not None else self.OPEN)] * rows)
        plans = [self.plan(k, lefts) for k in range(self.k_max + 1)]
        k = min(range(self.k_max + 1), key=lambda kk: plans[kk])
        why = (f"load: alpha~{self.alpha:.2f}, {rows} rows: best k={k}, the batch done in "
               f"{plans[k]:.2f} s predicted vs {plans[0]:.2f} s plain")
        if k and plans[k] * self.SPEC_MARGIN > plans[0]:
            k, why = 0, why + f" (a gain under {self.SPEC_MARGIN - 1:.0%}: plain)"
        if backlog > 1 and self.draft_cost is not None:
            why += f"; the draft has {backlog:.0f} tokens per row to catch up on"
        if self.probed and k == 0:  # the last probe did not make speculation pay: wait longer
            self.probe_wait = min(2 * self.probe_wait, self.PROBE_WAIT_MAX)
        elif k:
            self.probe_wait = self.probe_every
        self.probed = False
        first, self.first = self.first, False
        if k == 0 and (self.plain_steps >= self.probe_wait or (first and not self.evaluated)):
            # a probe is worth its cost only if a higher alpha could change the choice, by more
            # than the pass estimates' spread
            high = self.alpha_high
            best_case = min(self.plan(kk, lefts, alpha=high) for kk in range(1, self.k_max + 1))
            if best_case * self.PROBE_MARGIN < plans[0]:
                k = min(self.PROBE_K, self.k_max)
                self.probed = True
                why += (f" (probe at k={k} after {self.plain_steps} plain steps)" if self.evaluated
                        else f" (probe at k={k}: the first pass, no draft judged yet)")
            else:
                why += (f" (no probe: even at alpha {high:.2f}, the most its evidence allows, the batch would "
                        f"finish at most {plans[0] / best_case:.2f}x sooner than plain)")
        elif (k and self.spec_steps >= 1 and not any(width == 1 for _, width in self.seen)
              and plans[k] * self.PLAIN_PROBE_MARGIN > plans[0]):
            k, why = 0, why + " (a plain step, to time the plain pass in this run: the margin is small)"
        self.last_tokens = self.predict(rows, k)["raw_tokens"] if k else 0.0
        return k, {"k_rule": "load", "k_chosen": k, "why": why, "predicted": [round(p, 4) for p in plans]}

    def update(self, k: int, accepted: int, evaluated: int, rows: int, width: int,
               verify_time: float, draft_time: float, drafted: int, prefill: bool,
               emitted: Optional[int] = None) -> None:
        m = self.memory
        if k and emitted is not None and self.last_tokens - rows > 0.5:
            drafts = (emitted - rows) / (self.last_tokens - rows)  # accepted drafts: measured / predicted
            self.token_scale.add(min(max(drafts, 1 / self.CLIP), self.CLIP))
        if evaluated:  # a plain step says nothing of alpha: the evidence waits, it does not fade
            self.accepted, self.evaluated = m * self.accepted + accepted, m * self.evaluated + evaluated
        # after plain steps the draft model first catches up on the tokens it did not see: that
        # forward is dearer than a step's drafting and says nothing of it
        catching_up = k and self.spec_steps == 0
        self.plain_steps = self.plain_steps + 1 if k == 0 else 0
        self.spec_steps = self.spec_steps + 1 if k else 0
        if prefill:  # the prompt's pass measures the prefill, not a decoding step's cost
            return
        shape = (rows, width)
        table = self.target_cost(rows, min(width, self.k_max + 1))
        # other work on the machine only adds time: one slow pass moves an estimate by a bounded
        # step (a lasting slowdown still shows, over a few steps), so a slow spell cannot switch
        # speculation off for the rest of the run
        expected = self.seen.get(shape, self.scale_t * table)
        observed = min(verify_time, self.CLIP * expected) if expected > 0 else verify_time
        self.seen[shape] = observed if shape not in self.seen else m * self.seen[shape] + (1 - m) * observed
        if table > 0:
            self.target_scale.add(min(verify_time / table, self.CLIP * self.scale_t))
        if drafted and k and self.draft_cost is not None and catching_up and self.backlog > 1:
            # what the catch-up took beyond a step's own drafting, against its prediction
            d = self.scale_d * (self.draft_cost(rows, 2) + (k - 1) * self.draft_cost(rows, 1))
            predicted = self.catch_up(rows, self.backlog) / self.scale_c
            if predicted > 0:
                self.scale_c = 0.5 * self.scale_c + 0.5 * max(0.0, draft_time - d) / predicted
        elif drafted and k and not catching_up:
            if self.draft_cost is not None:
                d = self.draft_cost(rows, 2) + (k - 1) * self.draft_cost(rows, 1)
                if d > 0:
                    self.draft_scale.add(min(draft_time / d, self.CLIP * self.scale_d))
            else:
                per = draft_time / max(1, drafted)
                self.draft_per_token = per if not self.draft_per_token else m * self.draft_per_token + (1 - m) * per


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
