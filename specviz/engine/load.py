"""k="load": one draft length a step for the whole batch, from the running acceptance rate and the
measured cost of a pass (what serving engines do when batching makes speculation dear).

`CostTable` holds the seconds of one forward over B rows of k + 1 tokens, measured once per
machine, pair and dtype and kept in the cache; `LoadK` chooses each step's k from it.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
import time
from statistics import NormalDist
from typing import Callable, Optional

import torch

from specviz import files
from specviz.config import model_vocab_size
from specviz.runtime.batch_lm import batch_runner_for
from specviz.runtime.lm import synchronize
from specviz.runtime.machine import cpu_name

# ---------------------------------------------------------------------------------------------
# the cost of a pass, and the load policy

LOAD_K_MAX = 6  # the deepest k the load policy considers (deeper rarely pays, and each k costs a calibration)

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
        if k and alpha is None:  # at most k + 1 tokens, however many more drafts steps kept than predicted
            scale = self.token_scale.value
            mean, var = min(k + 1.0, 1 + (mean - 1) * scale), var * scale
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
            # no row finishes sooner than every draft accepted allows: n / (k + 1) steps
            out[i] = min(float(n), max(1.0, n / (k + 1), n / mean + z * math.sqrt(n * var / mean ** 3)))
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
        rooms = self.rooms if k and self.rooms is not None and len(self.rooms) == rows else [k] * rows
        depths = [min(k, max(0, room)) for room in rooms]
        raw = sum((1 - a ** (d + 1)) / (1 - a) for d in depths)
        # every row gets its one token from the target whatever happens to the drafts, and no more than its chain
        tokens = min(rows + sum(depths), rows + (raw - rows) * self.token_scale.value) if k and alpha is None else raw
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
