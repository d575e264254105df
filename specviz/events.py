"""The event schema: the one seam between the engine and everything that shows it.

Notation (declared once, used in every docstring of the package):
    p      target probability of a token, after the run's warping (temperature, top-k, top-p)
    q      draft probability of the same token, warped identically
    u      the uniform draw in [0, 1) that the rejection rule compared with min(1, p/q)
    beta   sum_x min(p(x), q(x)): the exact probability that a draft sampled from q is accepted
    k      number of tokens drafted in a step; step = one verification round (one target pass)
    position   absolute index of a token in the full sequence (prompt included)
    index      0-based index of a drafted token inside its step

Under greedy decoding (temperature 0) the rule is "accept iff the draft is the target's argmax";
p and q are then the plain softmax probabilities (shown for teaching), `u` is None and
`accept_prob` is 1 or 0.

Each event is an immutable dataclass of JSON-safe plain data. `to_dict()` adds the `kind`;
`from_dict()` restores the event. No torch here: renderers import this module freely.
A top-k slice is a dict {"ids": [...], "texts": [...], "probs": [...]}, highest first.

The annotations are the schema: each field's type, and its range where it has one (`Range`).
`check(data)` holds an event's dict to them (a trace is read from files anyone can make), and
`check_trace(events)` adds the ranges that need the whole trace: steps, draft indices and
positions bounded by the trace's own size, node numbers by their step's draft tree.
"""

from __future__ import annotations

import math
from dataclasses import MISSING, asdict, dataclass, field, fields
from functools import lru_cache
from typing import (Annotated, Any, ClassVar, Literal, Optional, TypedDict, Union, get_args,
                    get_origin, get_type_hints, is_typeddict)

try:
    from typing import NotRequired
except ImportError:  # Python 3.10: typing_extensions (which torch and pydantic install) has it
    from typing_extensions import NotRequired

from specviz.config import MAX_K, MAX_TREE_NODES
from specviz.errors import NewerSchemaError

# The version of the fields below; run_started and batch_started carry it. It moves whenever a
# field is added, removed or changes meaning, and `from_dict` reads every earlier version:
#   1  0.1.0 and before. Fields were added while it stood, each with a default that says what a
#      run without it did (node, threshold, drawn_from, q_topk, draft_quant, target_quant,
#      cpu_linear, cuda_graphs, backend, prefill, cpu_elapsed, row), so any schema-1 event reads
#      as schema 2 with the missing fields at their defaults; its batch_started has no version.
#   2  0.2.0: the fields as they are here; batch_started carries schema_version too.
SCHEMA_VERSION = 2
VERSIONED_KINDS = ("run_started", "batch_started")  # the events a trace starts with


@dataclass(frozen=True)
class Range:
    """A number's allowed values. `of` names a bound that needs the whole trace (check_trace):
    "step", "index", "position" (by the trace's size) or "node" (by the step's draft tree)."""

    low: float = -math.inf
    high: float = math.inf
    of: str = ""
    words: str = ""  # the range in a refusal, when its numbers would mislead


# float32 probabilities summed or subtracted land a rounding error outside [0, 1]: a residual's mass,
# a sum of max(p - q, 0) over the real pair's 151,936-token vocabulary, was recorded at 1 + 1.07e-6
PROB_SLACK = 1e-4
Count = Annotated[int, Range(0)]
Prob = Annotated[float, Range(-PROB_SLACK, 1 + PROB_SLACK, words="from 0 to 1")]
NonNegative = Annotated[float, Range(0)]
DraftLength = Annotated[int, Range(0, MAX_K)]
Step = Annotated[int, Range(0, of="step")]
# a chain drafts at most MAX_K tokens, a tree is at most MAX_TREE_NODES deep
Index = Annotated[int, Range(0, max(MAX_K, MAX_TREE_NODES), of="index")]
Position = Annotated[int, Range(0, of="position")]
NodeRef = Annotated[int, Range(-1, of="node")]  # a node of the step's tree; -1: the root


class TopK(TypedDict):
    ids: list[Count]
    texts: list[str]
    probs: list[Prob]


class NodeTopK(TopK):
    node: NodeRef


class Source(TypedDict, total=False):
    """Where a drafter got a token (drafter-specific); the keys the views read are typed."""

    kind: str
    copied_from: Position
    match: list[Position]
    count: Count
    prob: Optional[float]
    score: Optional[float]


class _TreeNode(TypedDict):
    id: Count
    parent: Annotated[int, Range(-1)]
    depth: Annotated[int, Range(1)]
    position: Position
    token_id: Count
    token_text: str
    q: Prob
    cum_q: Prob


class TreeNode(_TreeNode, total=False):  # a subclass: `from __future__` annotations hide NotRequired
    source: Optional[Source]


class Span(TypedDict):
    start: float
    end: float


SsdDraft = TypedDict("SsdDraft", {"from": str, "start": float, "end": float, "prepared": NotRequired[Count],
                                  "forwards": NotRequired[Count]})


class SsdBranch(TypedDict):
    accepted: Count
    rank: Count


class SsdInfo(TypedDict, total=False):
    draft: SsdDraft
    prepared: list[SsdBranch]
    outcome: dict[str, Any]
    hit: bool
    verify: Span
    ahead: Span
    wait: Span
    alpha: Optional[float]


class TreeSize(TypedDict, total=False):
    next_budget: Count
    nodes: Count
    budget: Count
    drafted: Count
    rule: str
    run_rate: Optional[float]
    expected: Optional[float]
    calibration: Optional[float]
    verify_s: Optional[float]
    pass_scale: Optional[float]
    draft_s: Optional[float]


class SuffixInfo(TypedDict, total=False):
    tree: Optional[str]
    match_len: Count
    match: list[Position]
    outputs: Count
    drafted: Count
    limit: Count
    expected: Optional[float]


class StepInfo(TypedDict, total=False):
    """A step's method-specific notes; the keys the views read are typed, others pass as they are."""

    k_chosen: DraftLength
    k_rule: str
    why: str
    predicted: list[float]
    path: list[NodeRef]
    depth: Count
    counters: dict[str, Count]
    tree_size: TreeSize
    suffix: SuffixInfo
    block: Count
    ssd: SsdInfo


K = Union[DraftLength, Literal["auto", "load"], None]  # None: methods without a draft length (trees)


class RunMetrics(TypedDict, total=False):
    """specviz.analysis.metrics.RunStats as a dict (older traces may lack the newer keys)."""

    method: str
    k: K
    new_tokens: Count
    steps: Count
    target_forwards: Count
    draft_forwards: Count
    drafted: Count
    evaluated: Count
    accepted: Count
    tau: NonNegative
    alpha_empirical: Optional[Prob]
    alpha_analytic: Optional[Prob]
    accepted_per_drafted: Optional[Prob]
    position_acceptance: list[Optional[Prob]]
    accepted_histogram: list[Count]
    wall_time: NonNegative
    tokens_per_s: NonNegative
    ttft: Optional[NonNegative]
    draft_time: NonNegative
    verify_time: NonNegative
    decode_verify_time: NonNegative
    decode_target_forwards: Count
    decode_draft_time: NonNegative
    decode_draft_forwards: Count
    verify_s_per_forward: Optional[NonNegative]
    draft_s_per_forward: Optional[NonNegative]
    c: Optional[NonNegative]
    cpu_share: Optional[NonNegative]
    verify_spread: Optional[NonNegative]
    finish_reason: Optional[str]
    lossless: bool
    counters: dict[str, Count]
    k_chosen: list[DraftLength]


class Options(TypedDict, total=False):
    auto_rule: str


@dataclass(frozen=True)
class Event:
    kind: ClassVar[str] = "event"
    # a batched run (specviz.engine.batch): which row (sequence) of the batch the event belongs to.
    # None in a single-sequence run, and then left out of to_dict(), so those traces are unchanged
    row: Optional[Count] = field(default=None, kw_only=True)

    def to_dict(self) -> dict:
        data = asdict(self)
        if data["row"] is None:
            del data["row"]
        return {"kind": self.kind, **data}


@dataclass(frozen=True)
class _AtToken(Event):
    """The fields every event about one token of a step starts with: the step, the token's index
    in it (its depth - 1 in a tree), its absolute position, its id and its text."""

    step: Step
    index: Index
    position: Position
    token_id: Count
    token_text: str


@dataclass(frozen=True)
class RunStarted(Event):
    """Configuration of a run and the prompt as the models saw it."""

    kind: ClassVar[str] = "run_started"
    pair: str
    method: str
    k: K  # int, or "auto" for adaptive methods
    temperature: NonNegative
    top_k: Count
    top_p: Prob
    max_new_tokens: Count
    seed: int
    chat: bool
    prompt: str
    prompt_ids: list[Count]
    prompt_texts: list[str]
    device: str
    dtype: str
    rule: str  # "greedy" | "rejection" | method-specific
    lossless: bool
    eos_token_ids: list[Count]
    drafter: str
    options: Options
    draft_quant: str = "none"  # "int8": int8 weight-only draft (still lossless: only q changes)
    target_quant: str = "none"  # "int8" (memory="low"): the int8 target is the model being decoded
    cpu_linear: str = "aten"  # "gemv": linear layers run as W @ x.T on the CPU (specviz.runtime.kernels)
    cuda_graphs: bool = False  # the target's forwards replay CUDA graphs over a static cache (specviz.runtime.lm.GraphLM)
    backend: str = "torch"  # "llama.cpp": the GGUF files run by llama.cpp's kernels; `dtype` is then the GGUF's type
    schema_version: Any = SCHEMA_VERSION  # held to SCHEMA_VERSION by the readers, which say "update specviz"


@dataclass(frozen=True)
class DraftProposed(_AtToken):
    """One drafted token x with its draft probability q(x) and the top of q."""

    kind: ClassVar[str] = "draft_proposed"
    q: Prob
    topk: Optional[TopK]
    source: Optional[Source] = None  # drafter-specific provenance (e.g. copied span)


@dataclass(frozen=True)
class TargetScored(Event):
    """The single target pass of a step: p at every drafted position plus the bonus position."""

    kind: ClassVar[str] = "target_scored"
    step: Step
    positions: list[Position]  # k + 1 absolute positions scored
    p_draft: list[Prob]  # p(x_i) of each drafted token (k floats)
    topk: list[Optional[TopK]]  # k + 1 top-k slices of p (or empty lists when recording is off)
    tokens_in: Count  # tokens fed to the target in this pass


@dataclass(frozen=True)
class _Decision(_AtToken):
    p: Prob
    q: Prob
    ratio: Optional[NonNegative]  # p / q (None when q == 0)
    accept_prob: Prob  # min(1, p/q), or 1/0 under the greedy rule
    u: Optional[Prob]  # the uniform draw actually compared (None under greedy)
    rule: str
    node: Optional[NodeRef] = None  # tree methods: the node decided on (index is then its depth - 1)
    threshold: Optional[NonNegative] = None  # typical acceptance: kept iff p > threshold


@dataclass(frozen=True)
class TokenAccepted(_Decision):
    kind: ClassVar[str] = "token_accepted"


@dataclass(frozen=True)
class TokenRejected(_Decision):
    kind: ClassVar[str] = "token_rejected"


@dataclass(frozen=True)
class ResidualSampled(_AtToken):
    """After a rejection: the token drawn from norm(max(p - q, 0)) at the rejected position."""

    kind: ClassVar[str] = "residual_sampled"
    p: Prob
    q: Prob
    residual_prob: Prob  # probability of the token under the residual distribution
    residual_mass: Prob  # sum_x max(p(x) - q(x), 0) = 1 - beta
    topk: Optional[TopK]  # top of the residual distribution
    node: Optional[NodeRef] = None  # tree methods: the node after which it was drawn (-1: root)
    drawn_from: str = "residual"  # "residual" = norm(max(p - q, 0)); "target" = p itself (typical)


@dataclass(frozen=True)
class BonusSampled(_AtToken):
    """Every draft accepted: one more token from p at the next position, for free.

    Autoregressive decoding is the k = 0 case: each step's only token is its bonus token.
    """

    kind: ClassVar[str] = "bonus_sampled"
    p: Prob
    node: Optional[NodeRef] = None  # tree methods: the accepted leaf it follows (-1: root)


@dataclass(frozen=True)
class TreeBuilt(Event):
    """The draft tree of a step, before the target's single pass over it.

    nodes: [{"id", "parent" (-1 = root, the last committed token), "depth", "position",
    "token_id", "token_text", "q" (at its parent), "cum_q" (product along its path)}], in
    creation order; siblings in the order they were drawn. mask_shape is the shape of the
    target pass's attention mask (rows fed, columns visible).
    """

    kind: ClassVar[str] = "tree_built"
    step: Step
    shape: str
    nodes: list[TreeNode]
    mask_shape: list[Count]
    draft_forwards: Count
    q_topk: list[NodeTopK] = field(default_factory=list)  # [{"node" (-1 = root), "ids", "texts", "probs"}]


@dataclass(frozen=True)
class StepFinished(Event):
    """Summary of one verification round."""

    kind: ClassVar[str] = "step_finished"
    step: Step
    k: Count  # draft length asked for this step (a tree's: how deep it may draft)
    drafted: Count  # tokens actually drafted (fewer at EOS or near max_new_tokens)
    accepted: Count
    evaluated: Count  # drafted tokens the rule decided on (accepted + 1 rejected, at most drafted)
    emitted_ids: list[Count]
    emitted_texts: list[str]
    beta: list[Prob]  # exact acceptance probability at each drafted position
    draft_time: NonNegative  # seconds, CUDA-synchronised on GPU
    verify_time: NonNegative
    draft_forwards: Count
    target_forwards: Count
    elapsed: NonNegative  # seconds since the run started, at the end of this step
    finish_reason: Optional[str]  # "eos" | "length" | None
    info: Optional[StepInfo] = None  # method-specific: k chosen and why, accepted path, ...
    # prompt tokens that rode along in this step's target pass: step 0 feeds the prompt's prefill
    # together with its first drafts (one forward instead of two, as transformers does); 0 after
    prefill: Count = 0
    # seconds the decoding thread was on a core over the same span as `elapsed` (time.thread_time);
    # well below `elapsed` means other programs held the cores (specviz.analysis.metrics.judge_timing).
    # None in traces recorded before it was kept
    cpu_elapsed: Optional[NonNegative] = None


@dataclass(frozen=True)
class RunFinished(Event):
    kind: ClassVar[str] = "run_finished"
    text: str
    token_ids: list[Count]
    finish_reason: str
    metrics: RunMetrics


@dataclass(frozen=True)
class BatchStarted(Event):
    """A batched run begins: `rows` sequences decode together, one target pass per step for
    all of them (specviz.engine.batch). Each row then has its own run_started (with its prompt and
    seed), step events and run_finished, all carrying `row`."""

    kind: ClassVar[str] = "batch_started"
    rows: Count
    pair: str
    method: str
    k: K  # int, "auto" (each row its own AdaptiveK) or "load" (one k for the batch, specviz.engine.load.LoadK)
    seeds: list[int]  # each row's seed: generate(pair, prompt_of_row, seed=seed) reproduces the row alone
    device: str
    dtype: str
    spec_off_batch: Count = 0  # at or above this many live rows every step is autoregressive (0: never)
    options: Options = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION


@dataclass(frozen=True)
class BatchStep(Event):
    """One shared step of a batched run: every live row drafted, then one target pass verified
    all of them. Per-row lists follow `rows` (the live rows of this step, in order).

    The pass fed `tokens_fed` real tokens; rows are padded to `width` columns each, so the pass
    cost rows * width token slots (padding rides along unused, as in any padded batch)."""

    kind: ClassVar[str] = "batch_step"
    step: Step
    rows: list[Count]
    k: list[DraftLength]  # draft length asked of each row
    drafted: list[Count]
    accepted: list[Count]
    emitted: list[Count]  # tokens each row committed in this step
    tokens_fed: Count
    width: Count
    draft_time: NonNegative  # seconds for the whole batch's drafting
    verify_time: NonNegative  # seconds of the one target pass
    draft_forwards: Count
    elapsed: NonNegative  # seconds since the batch started, at the end of this step
    finished: list[Count] = field(default_factory=list)  # rows that finished in this step
    info: Optional[StepInfo] = None  # k="load": the k chosen for the batch and why


@dataclass(frozen=True)
class BatchFinished(Event):
    """Every row has finished. metrics: specviz.engine.batch.batch_metrics of the run (total tokens/s,
    each user's tokens/s and inter-token latency, passes and rows per pass)."""

    kind: ClassVar[str] = "batch_finished"
    rows: Count
    metrics: dict[str, Union[float, list[float], None]]


EVENT_TYPES = {
    cls.kind: cls
    for cls in (RunStarted, DraftProposed, TargetScored, TokenAccepted, TokenRejected,
                ResidualSampled, BonusSampled, TreeBuilt, StepFinished, RunFinished,
                BatchStarted, BatchStep, BatchFinished)
}

# Fields that hold wall-clock measurements: they differ between otherwise identical runs.
TIMING_FIELDS = frozenset({"draft_time", "verify_time", "elapsed", "cpu_elapsed"})
BATCH_TIMING_METRICS = frozenset({"wall_time", "tokens_per_s", "user_tokens_per_s", "itl", "itl_p50", "itl_p95",
                                  "verify_time", "draft_time", "ttft"})


BATCH_KINDS = ("batch_started", "batch_step", "batch_finished")


def split_rows(events) -> dict:
    """{row: that row's events} of a batched run, each list a single run's stream (run_started,
    its steps, run_finished) that every consumer of single runs (metrics.fold, the renderers)
    reads as is; batch-level events (batch_started, batch_step, batch_finished) are left out."""
    out: dict = {}
    for event in events:
        row = event.get("row") if isinstance(event, dict) else getattr(event, "row", None)
        if row is not None:
            out.setdefault(row, []).append(event)
    return out


def batch_events(events) -> list:
    """The batch-level events of a run: batch_started, batch_step..., batch_finished."""
    return [e for e in events if (e.get("kind") if isinstance(e, dict) else e.kind) in BATCH_KINDS]


def register(cls):
    """Add an event type defined elsewhere (e.g. by a method module) to the schema."""
    EVENT_TYPES[cls.kind] = cls
    return cls


def from_dict(data: dict) -> Event:
    """Restore an event from `to_dict()` output (unknown keys are an error, not ignored), its
    values held to the schema's types and ranges (`check`); an event of an earlier schema comes
    back as this schema has it (see SCHEMA_VERSION)."""
    try:
        cls = EVENT_TYPES[data["kind"]]
    except KeyError as exc:
        raise ValueError(f"unknown event kind: {data.get('kind')!r}") from exc
    data = _current_schema(data)
    names = {f.name for f in fields(cls)}
    extra = set(data) - names - {"kind"}
    if extra:
        raise ValueError(f"{data['kind']} has unknown fields {sorted(extra)}")
    check(data)
    return cls(**{key: value for key, value in data.items() if key != "kind"})


def _current_schema(data: dict) -> dict:
    """A trace's first event as this schema has it. A newer schema is refused in one sentence
    before its unknown fields could be blamed; schema 1 needs only its version moved, since every
    field it lacks takes its default (a version that is not a number is left for the field checks)."""
    if data["kind"] not in VERSIONED_KINDS:
        return data
    version = data.get("schema_version", 1)  # a schema-1 batch_started has none
    if isinstance(version, int) and not isinstance(version, bool) and version > SCHEMA_VERSION:
        raise NewerSchemaError(f"This trace was made by a newer specviz (schema {version}); this reader knows "
                               f"up to schema {SCHEMA_VERSION}: upgrade specviz.")
    return {**data, "schema_version": SCHEMA_VERSION} if version == 1 else data


# ---------------------------------------------------------------------------------------------
# the schema's checks: types and ranges from the annotations above


class TraceError(ValueError):
    """A trace that breaks the schema, in one sentence; `at`: the 0-based index of the event
    (check_trace), None for an event checked alone."""

    def __init__(self, message: str, at: Optional[int] = None):
        super().__init__(message)
        self.at = at


def check(data: dict) -> list:
    """Hold one event's dict (a known kind) to its fields' types and ranges; TraceError names the
    field. Returns the values whose bounds need the whole trace: [(bound, value, field)]."""
    cls, found = EVENT_TYPES[data["kind"]], []
    hints = _field_checks(cls)
    missing = [f.name for f in fields(cls) if f.name not in data and f.default is MISSING
               and f.default_factory is MISSING]
    if missing or set(data) - set(hints) - {"kind"}:
        raise TraceError(f"{data['kind']} lacks fields {missing}" if missing else
                         f"{data['kind']} has unknown fields {sorted(set(data) - set(hints) - {'kind'})}")
    for name, value in data.items():
        if name in hints:
            hints[name](value, f"{data['kind']}.{name}", found)
    if data["kind"] == "tree_built":
        _check_tree(data["nodes"])
    return found


@lru_cache(maxsize=None)
def _field_checks(cls) -> dict:
    hints = get_type_hints(cls, include_extras=True)
    return {f.name: _compile(hints[f.name]) for f in fields(cls)}


@lru_cache(maxsize=None)
def _compile(hint):
    """A checker for `hint`: a function (value, where, found) that raises TraceError or returns."""
    origin, args = get_origin(hint), get_args(hint)
    if origin is NotRequired:
        return _compile(args[0])
    if origin is Annotated:
        return _ranged(_compile(args[0]), args[1])
    if origin is Union:
        return _union([_compile(a) for a in args], type(None) in args, _describe(hint))
    if origin is Literal:
        return _literal(args)
    if origin is list or hint is list:
        return _list(_compile(args[0]) if args else None)
    if origin is dict or hint is dict:
        return _dict(_compile(args[1]) if args else None)
    if is_typeddict(hint):
        return _typed_dict(hint)
    if hint is Any:
        return lambda value, where, found: None
    return _plain(hint)


def _plain(kind):
    def run(value, where, found):
        if kind is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            if not math.isfinite(value):
                raise TraceError(f"{where} is {value}: a number here must be finite")
        elif kind is type(None) and value is None:
            pass
        elif not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise TraceError(f"{where} must be {_describe(kind)}, not {_shown(value)}")
    return run


def _ranged(inner, bounds: Range):
    def run(value, where, found):
        inner(value, where, found)
        if not bounds.low <= value <= bounds.high:
            span = bounds.words or (f"at least {bounds.low:g}" if bounds.high == math.inf
                                    else f"from {bounds.low:g} to {bounds.high:g}")
            raise TraceError(f"{where} is {value}, but it must be {span}")
        if bounds.of:
            found.append((bounds.of, value, where))
    return run


def _union(options: list, optional: bool, described: str):
    def run(value, where, found):
        if value is None and optional:
            return
        errors = []
        for option in options:
            tried: list = []
            try:
                option(value, where, tried)
            except TraceError as exc:
                errors.append(exc)
                continue
            found += tried
            return
        # one real alternative (Optional[X]): its own, more precise, sentence
        raise errors[0] if len(options) - optional == 1 else TraceError(f"{where} must be {described}")
    return run


def _literal(allowed: tuple):
    def run(value, where, found):
        if not isinstance(value, str) or value not in allowed:
            raise TraceError(f"{where} must be one of {', '.join(map(repr, allowed))}")
    return run


def _list(item):
    def run(value, where, found):
        if not isinstance(value, list):
            raise TraceError(f"{where} must be a list, not {_shown(value)}")
        if item is not None:
            for i, x in enumerate(value):
                item(x, f"{where}[{i}]", found)
    return run


def _dict(item):
    def run(value, where, found):
        if not isinstance(value, dict):
            raise TraceError(f"{where} must be an object, not {_shown(value)}")
        if item is not None:
            for key, x in value.items():
                item(x, f"{where}.{key}", found)
    return run


def _typed_dict(shape):
    """An object with the shape's keys (keys it does not name pass as they are: drafter notes)."""
    hints = get_type_hints(shape, include_extras=True)
    checks = {name: _compile(hint) for name, hint in hints.items()}

    def run(value, where, found):
        if not isinstance(value, dict):
            raise TraceError(f"{where} must be an object, not {_shown(value)}")
        missing = [name for name in shape.__required_keys__ if name not in value]
        if missing:
            raise TraceError(f"{where} lacks {', '.join(sorted(missing))}")
        for key, x in value.items():
            if key in checks:
                checks[key](x, f"{where}.{key}", found)
    return run


def _shown(value) -> str:
    """A wrong value in a refusal: a number as itself, anything else by its kind (not its text)."""
    if isinstance(value, bool) or value is None:
        return _json_word(value)
    return repr(value) if isinstance(value, (int, float)) else _describe(type(value))


def _json_word(value) -> str:
    return {True: "true", False: "false", None: "null"}[value]


def _describe(hint) -> str:
    names = {int: "a whole number", float: "a number", str: "text", bool: "true or false", list: "a list",
             dict: "an object", type(None): "null"}
    if hint in names:
        return names[hint]
    origin, args = get_origin(hint), get_args(hint)
    if origin is Annotated:
        return _describe(args[0])
    if origin is Union:
        return " or ".join(_describe(a) for a in args)
    if origin is Literal:
        return " or ".join(map(repr, args))
    if origin is list:
        return "a list"
    return "an object" if origin is dict or is_typeddict(hint) else getattr(hint, "__name__", str(hint))


def _check_tree(nodes: list) -> None:
    """A draft tree in creation order: node i has id i, a parent made before it (-1: the root)
    and the depth one below its parent's; at most MAX_TREE_NODES nodes (the engine's limit)."""
    if len(nodes) > MAX_TREE_NODES:
        raise TraceError(f"tree_built has {len(nodes)} nodes; a draft tree has at most {MAX_TREE_NODES}")
    for i, node in enumerate(nodes):
        parent = node["parent"]
        if node["id"] != i or parent >= i:
            raise TraceError(f"tree_built.nodes[{i}] has id {node['id']} and parent {parent}: node i has id i and "
                             "a parent made before it")
        if node["depth"] != (1 if parent == -1 else nodes[parent]["depth"] + 1):
            raise TraceError(f"tree_built.nodes[{i}] is at depth {node['depth']}, not one below its parent")


# each drafted token or tree node proposed and judged once, and the token that closes the step
MAX_STEP_TOKENS = 2 * max(MAX_K, MAX_TREE_NODES) + 1


def check_trace(events: list) -> None:
    """Hold a trace (event dicts) to the schema: each event of a known kind by `check`, then the
    bounds that need the whole trace: a step number or draft index below the number of events
    (each step and each draft has an event of its own), a position at most the longest prompt
    plus that number, and a node within its step's draft tree. TraceError.at names the event."""
    size = len(events)
    prompt = max((len(e["prompt_ids"]) for e in events if e.get("kind") == "run_started"
                  and isinstance(e.get("prompt_ids"), list)), default=0)
    limits = {"step": size - 1, "index": size - 1, "position": prompt + size}
    trees: dict = {}  # (row, step) -> nodes in its tree
    tokens: dict = {}  # (row, step) -> its events about one token
    for at, data in enumerate(events):
        try:
            found = check(data) if data.get("kind") in EVENT_TYPES else _unknown_kind(data)
            key = (data.get("row"), data.get("step"))
            if data.get("kind") == "tree_built":
                trees[key] = len(data["nodes"])
            for bound, value, where in found:
                _within(bound, value, where, limits, trees.get(key))
            if issubclass(EVENT_TYPES.get(data.get("kind"), Event), _AtToken):
                tokens[key] = tokens.get(key, 0) + 1
                if tokens[key] > MAX_STEP_TOKENS:
                    raise TraceError(f"step {key[1]} has more than {MAX_STEP_TOKENS} events about its tokens; a step "
                                     "drafts and judges each token at most once")
        except TraceError as exc:
            raise TraceError(str(exc), at) from None


def _unknown_kind(data: dict) -> list:
    """An event of a kind this version does not know (a newer engine's) is kept; the views file it
    under its step, so that step is held to the same bound."""
    if "step" not in data:
        return []
    _compile(Step)(data["step"], f"{data.get('kind')}.step", found := [])
    return found


def _within(bound: str, value: int, where: str, limits: dict, tree: Optional[int]) -> None:
    if bound == "node":
        if tree is None:
            raise TraceError(f"{where} names node {value}, but its step built no draft tree before it")
        if value >= tree:
            raise TraceError(f"{where} names node {value}, but its step's tree has {tree} nodes")
    elif value > limits[bound]:
        holds = "its longest prompt and " if bound == "position" else ""
        raise TraceError(f"{where} is {value}, more than a trace of {holds}{limits['step'] + 1} events can hold "
                         f"(at most {limits[bound]})")


def without_timings(event_dict: dict) -> dict:
    """An event dict with wall-clock fields removed, for determinism comparisons."""
    out = {key: value for key, value in event_dict.items() if key not in TIMING_FIELDS}
    if out.get("kind") == "run_finished":
        out["metrics"] = {key: value for key, value in out["metrics"].items()
                          if key not in TIMING_METRICS}
    if out.get("kind") == "batch_finished":
        out["metrics"] = {key: value for key, value in out["metrics"].items()
                          if key not in BATCH_TIMING_METRICS}
    return out


TIMING_METRICS = frozenset({"wall_time", "tokens_per_s", "ttft", "draft_time", "verify_time",
                            "decode_verify_time", "decode_draft_time", "verify_s_per_forward",
                            "draft_s_per_forward", "c", "prefill_time", "decode_tokens_per_s",
                            "cpu_share", "verify_spread"})
