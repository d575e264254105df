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

Tree methods (a `tree_built` event, no draft_proposed): the step's `nodes` hold the whole draft
tree; a decision names its node (`node`), and `drafted` holds the judged nodes in the order the
target's walk judged them (several siblings may be judged at one depth; a token's `index` is its
depth - 1). Nodes the walk never reached end as `wasted` (drafted, never judged) in `nodes` only.
Decisions are matched to drafts by `node` when they carry one, else by `index` (chains).

Nothing here decides anything: statuses come from the events' kinds, numbers from their fields.
Unknown event kinds (from a newer engine) are kept in `extras`, not rendered.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Optional

from specviz.analysis.metrics import fold
from specviz.render.html import quoted

QUOTED_SPAN = 32  # tokens of a copied span a note quotes
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
    node: Optional[int] = None  # tree methods: the node decided on, or the node a closing token follows
    source: Optional[dict] = None  # draft_proposed.source: where a drafter got the token
    source_note: Optional[str] = None  # that source in words (e.g. the earlier span a copy came from)
    after_rejection: bool = False  # tree sampling: judged after a sibling's rejection (p, q are residuals)


@dataclass
class NodeView:
    """One node of a step's draft tree (tree_built), with what the target's walk did to it."""

    id: int
    parent: int  # -1: a child of the root (the last committed token)
    depth: int
    position: Optional[int]
    token_id: Optional[int]
    text: str
    q: Optional[float]
    cum_q: Optional[float]
    p: Optional[float] = None  # target p of the token at its parent (target_scored.p_draft)
    status: str = "draft"  # draft (not judged yet) | accepted | rejected | wasted (never judged)
    decision: Optional[TokenView] = None
    order: Optional[int] = None  # 0-based: when the walk judged it
    source_note: Optional[str] = None  # where the drafter got it, in words (suffix decoding: its counts)


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
    tree: Optional[dict] = None  # tree methods: the tree_built event
    nodes: list = field(default_factory=list)  # tree methods: NodeView per node, by id
    p_rows: list = field(default_factory=list)  # tree methods: top-k of p, row 0 root, 1 + i node i
    root_text: Optional[str] = None  # the last committed token before the step

    @property
    def is_tree(self) -> bool:
        return self.tree is not None

    @property
    def info(self) -> dict:
        return (self.summary or {}).get("info") or {}

    @property
    def path(self) -> list:
        """Tree methods: the accepted node ids, root to leaf (step_finished.info.path once known)."""
        if "path" in self.info:
            return list(self.info["path"])
        return [t.node for t in self.drafted if t.status == "accepted" and t.node is not None]

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
    # while building: the texts committed before step `_closed` (the prompt's, then each step's),
    # extended as steps are made so that building stays linear in the trace
    _texts: Optional[list] = field(default=None, init=False, repr=False, compare=False)
    _closed: int = field(default=0, init=False, repr=False, compare=False)

    @property
    def method(self) -> str:
        return (self.started or {}).get("method", "")

    @property
    def greedy(self) -> bool:
        """Greedy decoding: the rule is "keep the target's argmax" (chains or trees)."""
        return str((self.started or {}).get("rule", "")).startswith("greedy")

    @property
    def deterministic(self) -> bool:
        """Temperature 0: two lossless runs must give the same tokens."""
        return (self.started or {}).get("temperature") == 0

    @property
    def lossless(self) -> bool:
        return bool((self.started or {}).get("lossless", True))

    @property
    def rule(self) -> str:
        return str((self.started or {}).get("rule", ""))

    def texts(self) -> list:
        """Token texts of the whole sequence so far, by absolute position (prompt, then output)."""
        out = list((self.started or {}).get("prompt_texts") or [])
        for step in self.steps:
            out += [t.text for t in step.emitted]
        return out

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
    """Step `number`, made when an event first names it (with any steps before it that no event
    named, all rooted at the same last committed token)."""
    if number >= len(run.steps):
        texts = _texts_before(run, len(run.steps))
        root = texts[-1] if texts else None
        run.steps.extend(StepView(step=i, root_text=root) for i in range(len(run.steps), number + 1))
    return run.steps[number]


def _texts_before(run: RunView, number: int) -> list:
    """The texts committed before step `number` (RunView.texts() when that step's drafts arrive), from
    a list each step's tokens join once: steps are closed in order, as the engine writes them."""
    if run._texts is None:
        run._texts = list((run.started or {}).get("prompt_texts") or [])
    for step in run.steps[run._closed:number]:
        run._texts += [t.text for t in step.emitted]
    run._closed = max(run._closed, min(number, len(run.steps)))
    return run._texts


def _token(data: dict, status: str, **numbers) -> TokenView:
    return TokenView(step=data["step"], index=data["index"], position=data["position"],
                     token_id=data["token_id"], text=data["token_text"], status=status, **numbers)


def _on_started(run, data):
    run.started = data


def _on_draft(run, data):
    step = _step(run, data["step"])
    source = data.get("source")
    step.drafted.append(_token(data, "draft", q=data["q"], source=source,
                               source_note=source_note(source, _texts_before(run, step.step)) if source else None))
    if data.get("topk"):
        step.q_topk[data["index"]] = data["topk"]


def source_note(source: dict, texts: list) -> Optional[str]:
    """Where a drafter got a token, in words: a prompt-lookup copy names the earlier span."""
    kind = source.get("kind")
    if kind == "ngram" and "copied_from" in source:
        at = source["copied_from"]
        words = f"copied from position {at}"
        if 0 <= at < len(texts):
            words += f" ({quoted(texts[at])})"
        match = source.get("match") or []
        if len(match) == 2 and 0 <= match[0] < match[1] <= len(texts):
            start, end = match
            where = f"position {start}" if end - start == 1 else f"positions {start}–{end - 1}"
            # a span's last tokens at most: a note per draft must not grow with the text
            shown = ("…" if end - start > QUOTED_SPAN else "") + "".join(texts[max(start, end - QUOTED_SPAN):end])
            words += (f": continues the earlier {end - start}-gram {quoted(shown)} at {where}, "
                      "the same tokens that end the text so far")
        return words
    if kind == "ngram":
        return "an n-gram guess (prompt lookup) that the draft model kept"
    if kind == "draft":
        return "sampled by the draft model"
    if kind == "medusa":
        return f"guessed by Medusa head {source.get('head')} from the target's last hidden state"
    if kind == "eagle":
        return f"drafted by EAGLE's depth-{source.get('depth')} forward, at the target's feature level"
    if kind == "eagle3":
        return (f"drafted by EAGLE-3's depth-{source.get('depth')} forward, from the target's low, middle "
                "and high layers")
    if kind == "peagle":
        return (f"drafted at depth {source.get('depth')} of P-EAGLE's one parallel forward (a placeholder "
                "position: it does not see the tokens drafted before it)")
    if kind == "dflash":
        return (f"row {source.get('depth')} of DFlash's block: one forward filled every mask of the block at once "
                "(each mask sees the others, not what they will become)")
    if kind == "window":
        return "lookahead's Jacobi window: the target's own guess for this position, refined each step"
    if kind == "pool":
        return "lookahead's n-gram pool: a continuation seen earlier in the window's trajectory"
    if kind == "suffix":
        where = "this prompt and answer" if source.get("tree") == "prompt" else \
            "the session's outputs (this answer so far among them)"
        count = source.get("count")
        return (f"suffix decoding: came next {count} time{'s' if count != 1 else ''} in {where} "
                f"({_percent(source.get('prob'))} of what followed there); estimated chance of acceptance "
                f"{_percent(source.get('score'))}")
    return None


def _percent(x) -> str:
    return f"{100 * x:.0f}%" if isinstance(x, (int, float)) else "?"


def _on_tree_built(run, data):
    step = _step(run, data["step"])
    step.tree = data
    step.nodes = []
    for i, node in enumerate(data.get("nodes") or []):
        parent = node.get("parent")
        step.nodes.append(NodeView(
            id=node.get("id", i), parent=-1 if parent is None else parent, depth=node.get("depth", 0),
            position=node.get("position"), token_id=node.get("token_id"),
            text=str(node.get("token_text", node.get("token", ""))), q=node.get("q"), cum_q=node.get("cum_q"),
            source_note=source_note(node["source"], _texts_before(run, step.step))
            if isinstance(node.get("source"), dict) else None))


def _on_scored(run, data):
    step = _step(run, data["step"])
    if step.is_tree:  # rows: 0 the root, 1 + i node i; a tree's judged tokens come later
        step.p_rows = list(data.get("topk") or [])
        for node, p in zip(step.nodes, data.get("p_draft") or []):
            node.p = p
    else:
        step.p_topk = list(data.get("topk") or [])
    for token, p in zip(step.drafted, data.get("p_draft") or []):
        token.p = p


def _node(step: StepView, node_id) -> Optional[NodeView]:
    if node_id is None or not 0 <= node_id < len(step.nodes):
        return None
    node = step.nodes[node_id]
    return node if node.id == node_id else next((n for n in step.nodes if n.id == node_id), None)


def _tree_p_slice(step: StepView, index: int, parent) -> None:
    """p_topk[index] of a tree step: the recorded p at the node the walk stood on (row parent + 1)."""
    row = (parent if parent is not None else -1) + 1
    if 0 <= row < len(step.p_rows):
        while len(step.p_topk) <= index:
            step.p_topk.append(None)
        step.p_topk[index] = step.p_rows[row]


def _on_decision(run, data):
    step = _step(run, data["step"])
    status = "accepted" if data["kind"] == "token_accepted" else "rejected"
    numbers = dict(p=data["p"], q=data["q"], ratio=data["ratio"], accept_prob=data["accept_prob"], u=data["u"],
                   rule=data["rule"])
    node = _node(step, data.get("node")) if step.is_tree else None
    if data.get("node") is not None:
        step.node_status[data["node"]] = status
    if node is not None:  # a tree: the decision names its node; it becomes a judged token
        after = any(t.index == data["index"] and t.status == "rejected" for t in step.drafted)
        token = _token(data, status, node=node.id, after_rejection=after, **numbers)
        node.status, node.decision, node.order = status, token, len(step.drafted)
        step.drafted.append(token)
        _tree_p_slice(step, data["index"], node.parent)
        return
    for token in step.drafted:
        if token.index == data["index"]:
            token.status = status
            token.p, token.q, token.ratio = numbers["p"], numbers["q"], numbers["ratio"]
            token.accept_prob, token.u, token.rule = numbers["accept_prob"], numbers["u"], numbers["rule"]


def _on_residual(run, data):
    step = _step(run, data["step"])
    step.next = _token(data, "residual", p=data["p"], q=data["q"], residual_prob=data["residual_prob"],
                       residual_mass=data["residual_mass"], node=data.get("node"), rule=run.rule or None)
    step.residual_topk = data.get("topk")
    if step.is_tree:
        _tree_p_slice(step, data["index"], data.get("node"))


def _on_bonus(run, data):
    step = _step(run, data["step"])
    drafted = step.nodes if step.is_tree else step.drafted
    step.next = _token(data, "bonus" if drafted else "target", p=data["p"], node=data.get("node"),
                       rule=run.rule or None)
    if step.is_tree:
        _tree_p_slice(step, data["index"], data.get("node"))


def _on_step_finished(run, data):
    step = _step(run, data["step"])
    step.summary = data
    beta = data.get("beta") or []
    if step.is_tree:  # one beta per decision, in the order the walk judged
        for token, b in zip(step.drafted, beta):
            token.beta = b
        for node in step.nodes:
            if node.status == "draft":  # the walk never reached it
                node.status = "wasted"
        return
    for token in step.drafted:
        if token.index < len(beta):
            token.beta = beta[token.index]
        if token.status == "draft":  # never judged: a rejection came first
            token.status = "wasted"
    if step.next is not None and step.next.status == "residual" and step.next.index < len(beta):
        step.next.beta = beta[step.next.index]


def _on_run_finished(run, data):
    run.finished = data


_HANDLERS = {
    "run_started": _on_started,
    "draft_proposed": _on_draft,
    "tree_built": _on_tree_built,
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
    the events so far (specviz.analysis.metrics.fold, the function the engine itself uses)."""

    events = [as_dict(e) for e in events]
    for data in reversed(events):
        if data.get("kind") == "run_finished":
            return data["metrics"]
    return fold([e for e in events if e.get("kind") in ("run_started", "step_finished")]).to_dict()
