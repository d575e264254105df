"""Events -> view model: the one place that groups an event stream into steps for the views.

A step (one verification round, one target pass) holds its drafted tokens in draft order, each
with its final status, and the token that closed it (a residual resample or a bonus token).
Statuses:

    draft     proposed by the draft, not verified yet (seen while a step is in flight)
    accepted  the rule kept it: u < min(1, p/q), or under greedy, it is the target's argmax
    rejected  the first draft the rule turned down
    wasted    drafted after a rejection: thrown away without being judged
    residual  drawn from norm(max(p - q, 0)) at the rejected position
    bonus     every draft accepted: one more token drawn from p for free
    target    nothing was drafted in the step (autoregressive decoding, or a step whose drafter
              proposed nothing): its only token, drawn from p by one target forward

Nothing here decides anything: statuses come from the events' kinds, numbers from their fields.
Unknown event kinds (from a newer engine, e.g. `tree_built`) are kept in `extras`, not rendered.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Optional

STATUSES = ("draft", "accepted", "rejected", "wasted", "residual", "bonus", "target")
COMMITTED = frozenset({"accepted", "residual", "bonus", "target"})


def as_dict(event) -> dict:
    """An event object or its dict, as a dict."""
    return event if isinstance(event, dict) else event.to_dict()


@dataclass
class TokenView:
    """One token chip: where it sits, what happened to it, and the numbers behind that."""

    step: int
    index: int
    position: int
    token_id: int
    text: str
    status: str
    p: Optional[float] = None
    q: Optional[float] = None
    ratio: Optional[float] = None
    accept_prob: Optional[float] = None
    u: Optional[float] = None
    rule: Optional[str] = None
    residual_prob: Optional[float] = None
    residual_mass: Optional[float] = None
    beta: Optional[float] = None


@dataclass
class StepView:
    step: int
    drafted: list = field(default_factory=list)  # TokenView per drafted token, in draft order
    next: Optional[TokenView] = None  # the residual, bonus or target token that closes the step
    p_topk: list = field(default_factory=list)  # recorded top-k of p at index 0..n
    q_topk: dict = field(default_factory=dict)  # index -> recorded top-k of q
    residual_topk: Optional[dict] = None
    summary: Optional[dict] = None  # the step_finished event
    extras: list = field(default_factory=list)  # events of kinds this renderer does not know
    node_status: dict = field(default_factory=dict)  # tree methods: node id -> accepted / rejected

    @property
    def finished(self) -> bool:
        return self.summary is not None

    @property
    def tokens(self) -> list:
        """Every chip of the step: drafted tokens, then the closing token."""
        return self.drafted + ([self.next] if self.next else [])

    @property
    def emitted(self) -> list:
        return [t for t in self.tokens if t.status in COMMITTED]

    @property
    def rejected(self) -> Optional[TokenView]:
        return next((t for t in self.drafted if t.status == "rejected"), None)

    @property
    def wasted(self) -> list:
        return [t for t in self.drafted if t.status == "wasted"]

    def indices(self) -> list:
        """Draft indices that have something to inspect (drafted positions, then the bonus one)."""
        out = [t.index for t in self.drafted]
        if self.next is not None and self.next.index not in out:
            out.append(self.next.index)
        return out

    def at(self, index: int) -> list:
        """Tokens at one draft index: e.g. a rejected draft and the residual that replaced it."""
        return [t for t in self.tokens if t.index == index]


@dataclass
class RunView:
    started: Optional[dict] = None
    steps: list = field(default_factory=list)
    finished: Optional[dict] = None
    extras: list = field(default_factory=list)

    @property
    def method(self) -> str:
        return (self.started or {}).get("method", "")

    @property
    def greedy(self) -> bool:
        return (self.started or {}).get("rule") == "greedy"

    def tokens(self, upto: Optional[int] = None) -> list:
        return [t for s in self.steps[:None if upto is None else upto + 1] for t in s.tokens]

    def count(self, status: str) -> int:
        return sum(t.status == status for t in self.tokens())

    def step(self, number: int) -> Optional[StepView]:
        return self.steps[number] if 0 <= number < len(self.steps) else None


def build(events: Iterable) -> RunView:
    """Group events (objects or dicts, a finished run or one still streaming) into a RunView."""
    run = RunView()
    for event in events:
        data = as_dict(event)
        kind = data.get("kind")
        handler = _HANDLERS.get(kind)
        if handler is not None:
            handler(run, data)
        elif "step" in data and isinstance(data["step"], int):
            _step(run, data["step"]).extras.append(data)
        else:
            run.extras.append(data)
    return run


def _step(run: RunView, number: int) -> StepView:
    while len(run.steps) <= number:
        run.steps.append(StepView(step=len(run.steps)))
    return run.steps[number]


def _token(data: dict, status: str, **numbers) -> TokenView:
    return TokenView(step=data["step"], index=data["index"], position=data["position"],
                     token_id=data["token_id"], text=data["token_text"], status=status, **numbers)


def _on_started(run, data):
    run.started = data


def _on_draft(run, data):
    step = _step(run, data["step"])
    step.drafted.append(_token(data, "draft", q=data["q"]))
    if data.get("topk"):
        step.q_topk[data["index"]] = data["topk"]


def _on_scored(run, data):
    step = _step(run, data["step"])
    step.p_topk = list(data.get("topk") or [])
    for token, p in zip(step.drafted, data["p_draft"]):
        token.p = p


def _on_decision(run, data):
    step = _step(run, data["step"])
    status = "accepted" if data["kind"] == "token_accepted" else "rejected"
    if data.get("node") is not None:
        step.node_status[data["node"]] = status
    for token in step.drafted:
        if token.index == data["index"]:
            token.status = status
            token.p, token.q, token.ratio = data["p"], data["q"], data["ratio"]
            token.accept_prob, token.u, token.rule = data["accept_prob"], data["u"], data["rule"]


def _on_residual(run, data):
    step = _step(run, data["step"])
    step.next = _token(data, "residual", p=data["p"], q=data["q"], residual_prob=data["residual_prob"],
                       residual_mass=data["residual_mass"])
    step.residual_topk = data.get("topk")


def _on_bonus(run, data):
    step = _step(run, data["step"])
    step.next = _token(data, "bonus" if step.drafted else "target", p=data["p"])


def _on_step_finished(run, data):
    step = _step(run, data["step"])
    step.summary = data
    for token in step.drafted:
        if token.index < len(data["beta"]):
            token.beta = data["beta"][token.index]
        if token.status == "draft":  # never judged: a rejection came first
            token.status = "wasted"
    if step.next is not None and step.next.status == "residual" and step.next.index < len(data["beta"]):
        step.next.beta = data["beta"][step.next.index]


def _on_run_finished(run, data):
    run.finished = data


_HANDLERS = {
    "run_started": _on_started,
    "draft_proposed": _on_draft,
    "target_scored": _on_scored,
    "token_accepted": _on_decision,
    "token_rejected": _on_decision,
    "residual_sampled": _on_residual,
    "bonus_sampled": _on_bonus,
    "step_finished": _on_step_finished,
    "run_finished": _on_run_finished,
}


def run_metrics(events: Iterable) -> dict:
    """The run's metrics: run_finished.metrics when the run has ended, else the same fold over
    the events so far (specviz.metrics.fold, the function the engine itself uses)."""
    from specviz.metrics import fold

    events = [as_dict(e) for e in events]
    for data in reversed(events):
        if data.get("kind") == "run_finished":
            return data["metrics"]
    return fold([e for e in events if e.get("kind") in ("run_started", "step_finished")]).to_dict()
