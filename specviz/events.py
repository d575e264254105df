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
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar, Optional

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

TopK = dict  # {"ids": list[int], "texts": list[str], "probs": list[float]}


@dataclass(frozen=True)
class Event:
    kind: ClassVar[str] = "event"
    # a batched run (specviz.engine.batch): which row (sequence) of the batch the event belongs to.
    # None in a single-sequence run, and then left out of to_dict(), so those traces are unchanged
    row: Optional[int] = field(default=None, kw_only=True)

    def to_dict(self) -> dict:
        data = asdict(self)
        if data["row"] is None:
            del data["row"]
        return {"kind": self.kind, **data}


@dataclass(frozen=True)
class _AtToken(Event):
    """The fields every event about one token of a step starts with: the step, the token's index
    in it (its depth - 1 in a tree), its absolute position, its id and its text."""

    step: int
    index: int
    position: int
    token_id: int
    token_text: str


@dataclass(frozen=True)
class RunStarted(Event):
    """Configuration of a run and the prompt as the models saw it."""

    kind: ClassVar[str] = "run_started"
    pair: str
    method: str
    k: Any  # int, or "auto" for adaptive methods
    temperature: float
    top_k: int
    top_p: float
    max_new_tokens: int
    seed: int
    chat: bool
    prompt: str
    prompt_ids: list
    prompt_texts: list
    device: str
    dtype: str
    rule: str  # "greedy" | "rejection" | method-specific
    lossless: bool
    eos_token_ids: list
    drafter: str
    options: dict
    draft_quant: str = "none"  # "int8": int8 weight-only draft (still lossless: only q changes)
    target_quant: str = "none"  # "int8" (memory="low"): the int8 target is the model being decoded
    cpu_linear: str = "aten"  # "gemv": linear layers run as W @ x.T on the CPU (specviz.runtime.kernels)
    cuda_graphs: bool = False  # the target's forwards replay CUDA graphs over a static cache (specviz.runtime.lm.GraphLM)
    backend: str = "torch"  # "llama.cpp": the GGUF files run by llama.cpp's kernels; `dtype` is then the GGUF's type
    schema_version: int = SCHEMA_VERSION


@dataclass(frozen=True)
class DraftProposed(_AtToken):
    """One drafted token x with its draft probability q(x) and the top of q."""

    kind: ClassVar[str] = "draft_proposed"
    q: float
    topk: Optional[TopK]
    source: Optional[dict] = None  # drafter-specific provenance (e.g. copied span)


@dataclass(frozen=True)
class TargetScored(Event):
    """The single target pass of a step: p at every drafted position plus the bonus position."""

    kind: ClassVar[str] = "target_scored"
    step: int
    positions: list  # k + 1 absolute positions scored
    p_draft: list  # p(x_i) of each drafted token (k floats)
    topk: list  # k + 1 top-k slices of p (or empty lists when recording is off)
    tokens_in: int  # tokens fed to the target in this pass


@dataclass(frozen=True)
class _Decision(_AtToken):
    p: float
    q: float
    ratio: Optional[float]  # p / q (None when q == 0)
    accept_prob: float  # min(1, p/q), or 1/0 under the greedy rule
    u: Optional[float]  # the uniform draw actually compared (None under greedy)
    rule: str
    node: Optional[int] = None  # tree methods: the node decided on (index is then its depth - 1)
    threshold: Optional[float] = None  # typical acceptance: kept iff p > threshold


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
    p: float
    q: float
    residual_prob: float  # probability of the token under the residual distribution
    residual_mass: float  # sum_x max(p(x) - q(x), 0) = 1 - beta
    topk: Optional[TopK]  # top of the residual distribution
    node: Optional[int] = None  # tree methods: the node after which it was drawn (-1: root)
    drawn_from: str = "residual"  # "residual" = norm(max(p - q, 0)); "target" = p itself (typical)


@dataclass(frozen=True)
class BonusSampled(_AtToken):
    """Every draft accepted: one more token from p at the next position, for free.

    Autoregressive decoding is the k = 0 case: each step's only token is its bonus token.
    """

    kind: ClassVar[str] = "bonus_sampled"
    p: float
    node: Optional[int] = None  # tree methods: the accepted leaf it follows (-1: root)


@dataclass(frozen=True)
class TreeBuilt(Event):
    """The draft tree of a step, before the target's single pass over it.

    nodes: [{"id", "parent" (-1 = root, the last committed token), "depth", "position",
    "token_id", "token_text", "q" (at its parent), "cum_q" (product along its path)}], in
    creation order; siblings in the order they were drawn. mask_shape is the shape of the
    target pass's attention mask (rows fed, columns visible).
    """

    kind: ClassVar[str] = "tree_built"
    step: int
    shape: str
    nodes: list
    mask_shape: list
    draft_forwards: int
    q_topk: list = field(default_factory=list)  # [{"node" (-1 = root), "ids", "texts", "probs"}]


@dataclass(frozen=True)
class StepFinished(Event):
    """Summary of one verification round."""

    kind: ClassVar[str] = "step_finished"
    step: int
    k: int  # draft length asked for this step
    drafted: int  # tokens actually drafted (fewer at EOS or near max_new_tokens)
    accepted: int
    evaluated: int  # drafted tokens the rule decided on (accepted + 1 rejected, at most drafted)
    emitted_ids: list
    emitted_texts: list
    beta: list  # exact acceptance probability at each drafted position
    draft_time: float  # seconds, CUDA-synchronised on GPU
    verify_time: float
    draft_forwards: int
    target_forwards: int
    elapsed: float  # seconds since the run started, at the end of this step
    finish_reason: Optional[str]  # "eos" | "length" | None
    info: Optional[dict] = None  # method-specific: k chosen and why, accepted path, ...
    # prompt tokens that rode along in this step's target pass: step 0 feeds the prompt's prefill
    # together with its first drafts (one forward instead of two, as transformers does); 0 after
    prefill: int = 0
    # seconds the decoding thread was on a core over the same span as `elapsed` (time.thread_time);
    # well below `elapsed` means other programs held the cores (specviz.analysis.metrics.judge_timing).
    # None in traces recorded before it was kept
    cpu_elapsed: Optional[float] = None


@dataclass(frozen=True)
class RunFinished(Event):
    kind: ClassVar[str] = "run_finished"
    text: str
    token_ids: list
    finish_reason: str
    metrics: dict


@dataclass(frozen=True)
class BatchStarted(Event):
    """A batched run begins: `rows` sequences decode together, one target pass per step for
    all of them (specviz.engine.batch). Each row then has its own run_started (with its prompt and
    seed), step events and run_finished, all carrying `row`."""

    kind: ClassVar[str] = "batch_started"
    rows: int
    pair: str
    method: str
    k: Any  # int, "auto" (each row its own AdaptiveK) or "load" (one k for the batch, specviz.engine.load.LoadK)
    seeds: list  # each row's seed: generate(pair, prompt_of_row, seed=seed) reproduces the row alone
    device: str
    dtype: str
    spec_off_batch: int = 0  # at or above this many live rows every step is autoregressive (0: never)
    options: dict = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION


@dataclass(frozen=True)
class BatchStep(Event):
    """One shared step of a batched run: every live row drafted, then one target pass verified
    all of them. Per-row lists follow `rows` (the live rows of this step, in order).

    The pass fed `tokens_fed` real tokens; rows are padded to `width` columns each, so the pass
    cost rows * width token slots (padding rides along unused, as in any padded batch)."""

    kind: ClassVar[str] = "batch_step"
    step: int
    rows: list
    k: list  # draft length asked of each row
    drafted: list
    accepted: list
    emitted: list  # tokens each row committed in this step
    tokens_fed: int
    width: int
    draft_time: float  # seconds for the whole batch's drafting
    verify_time: float  # seconds of the one target pass
    draft_forwards: int
    elapsed: float  # seconds since the batch started, at the end of this step
    finished: list = field(default_factory=list)  # rows that finished in this step
    info: Optional[dict] = None  # k="load": the k chosen for the batch and why


@dataclass(frozen=True)
class BatchFinished(Event):
    """Every row has finished. metrics: specviz.engine.batch.batch_metrics of the run (total tokens/s,
    each user's tokens/s and inter-token latency, passes and rows per pass)."""

    kind: ClassVar[str] = "batch_finished"
    rows: int
    metrics: dict


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
    """Restore an event from `to_dict()` output (unknown keys are an error, not ignored); an event
    of an earlier schema comes back as this schema has it (see SCHEMA_VERSION)."""
    try:
        cls = EVENT_TYPES[data["kind"]]
    except KeyError as exc:
        raise ValueError(f"unknown event kind: {data.get('kind')!r}") from exc
    data = _current_schema(data)
    names = {f.name for f in fields(cls)}
    extra = set(data) - names - {"kind"}
    if extra:
        raise ValueError(f"{data['kind']} has unknown fields {sorted(extra)}")
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
