"""Token chips: the generated text as coloured tokens, one colour per decision, with a legend.

Each chip carries `data-step`, `data-index`, `data-status` and the real token text in
`data-text`; whitespace is shown ('·' space, '↵' newline). Hovering or focusing (clicking) a chip
shows p, q, p/q, u and the decision in a tooltip drawn from `data-tip` by CSS, so it is text,
never markup. All numbers come from the events (see `specviz.render.steps`).
"""

from __future__ import annotations

from typing import Iterable, Optional

from specviz.render import steps as st
from specviz.render.html import Rendered, attr, num, quoted, text, visible

LEGEND = (
    ("draft", "draft proposal", "proposed by the draft model, sampled from q"),
    ("accepted", "accepted", "the target agreed: its top token (greedy), or u < min(1, p/q) (sampling)"),
    ("rejected", "rejected", "the first draft the target turned down"),
    ("wasted", "wasted", "drafted after a rejection, thrown away unjudged"),
    ("residual", "residual resample", "drawn from norm(max(p − q, 0)) instead of the rejected draft"),
    ("bonus", "bonus", "all drafts accepted: one extra token from p, free"),
    ("target", "target only", "nothing drafted (autoregressive): one forward, one token from p"),
)


def chip(token: st.TokenView, greedy: bool = False, detail: Optional[str] = None) -> str:
    """One token as a chip; `detail` is an optional small line under it (e.g. 'q .41')."""
    node = f' data-tree-node="{attr(token.node)}"' if token.node is not None else ""
    html = (f'<span class="sv-chip sv-{attr(token.status)}" tabindex="0" data-step="{attr(token.step)}" '
            f'data-index="{attr(token.index)}"{node} data-status="{attr(token.status)}" data-text="{attr(token.text)}" '
            f'data-tip="{attr(tooltip(token, greedy))}">{text(visible(token.text))}</span>')
    if detail is None:
        return html
    return f'<span class="sv-cell">{html}<small>{text(detail)}</small></span>'


def tooltip(token: st.TokenView, greedy: bool = False) -> str:
    """The plain-text story of one token: identity, p, q, p/q, u and the decision."""
    drafted = token.status in ("accepted", "rejected", "wasted", "draft")
    where = (f"tree node {token.node}, depth {token.index + 1}" if drafted and token.node is not None
             else f"draft {token.index + 1}" if drafted else "the target's own token")
    lines = [f"{quoted(token.text)}  id {token.token_id} · position {token.position} · "
             f"step {token.step + 1}, {where}"]
    if token.status in ("draft", "accepted", "rejected", "wasted"):
        lines.append(f"p = {num(token.p)}   q = {num(token.q)}   p/q = {num(token.ratio)}")
    if token.after_rejection and token.u is not None:
        lines.append("p and q here are after an earlier sibling's rejection: p ← norm(max(p − q, 0)), "
                     "q without the rejected token")
    lines.append(decision(token, greedy))
    if token.source_note:
        lines.append(f"source: {token.source_note}")
    if token.beta is not None and greedy:  # the greedy rule compares top tokens: p and q above are not its odds
        lines.append(f"β = {num(token.beta)}: greedy keeps a guess exactly when it is the target's top token")
    elif token.beta is not None:
        lines.append(f"β = Σ min(p, q) here = {num(token.beta)}")
    return "\n".join(lines)


# Medusa's typical-acceptance bar with its defaults (posterior_threshold 0.09, the cap; posterior_alpha
# 0.3, the entropy factor), written out here because views import no torch; tests/test_typical.py
# holds it to specviz.verifiers.typical's defaults.
TYPICAL_THRESHOLD = "min(0.09, 0.3·exp(−H(p)))"


def _typical(token: st.TokenView) -> bool:
    return str(token.rule or "").startswith("typical")


def decision(token: st.TokenView, greedy: bool = False) -> str:
    """One line saying what happened to the token and by which numbers."""
    status = token.status
    if _typical(token) and status in ("accepted", "rejected"):
        verb = "above" if status == "accepted" else "below"
        return (f"{status} by typical acceptance (LOSSY): p(x) = {num(token.p)} is {verb} the threshold "
                f"{TYPICAL_THRESHOLD}, H(p) the entropy of p")
    if status == "accepted":
        if greedy or token.u is None:
            return "accepted: it is the target's top token (greedy)"
        return f"accepted: u = {num(token.u)} < min(1, p/q) = {num(token.accept_prob)}"
    if status == "rejected":
        if greedy or token.u is None:
            return "rejected: the target's top token is a different one (greedy)"
        return f"rejected: u = {num(token.u)} ≥ min(1, p/q) = {num(token.accept_prob)}"
    if status == "wasted":
        return f"wasted: drafted (q = {num(token.q)}) after a rejection, never judged"
    if status == "draft":
        return f"draft proposal: q = {num(token.q)}, waiting for the target"
    if status == "residual":
        if _typical(token):
            return f"drawn from p at the refused position (typical acceptance keeps no residual; p = {num(token.p)})"
        if greedy:
            return f"resample: the target's top token replaces the rejected draft (p = {num(token.p)})"
        return (f"residual resample: r(x) = {num(token.residual_prob)} from norm(max(p − q, 0)); "
                f"p = {num(token.p)}, q = {num(token.q)}, 1 − β = {num(token.residual_mass)}")
    if status == "bonus":
        return f"bonus: all drafts accepted, one more token from p (p = {num(token.p)})"
    return f"target only: nothing drafted, one target forward samples from p (p = {num(token.p)})"


def legend(statuses: Iterable[str] = st.STATUSES) -> Rendered:
    """The colour key: one sample chip per status with its meaning."""
    wanted = set(statuses)
    items = [f'<span class="sv-item"><span class="sv-chip sv-{status}" data-legend="{status}">'
             f'{text(label)}</span><span class="sv-muted">{text(meaning)}</span></span>'
             for status, label, meaning in LEGEND if status in wanted]
    return Rendered(f'<div class="sv-legend">{"".join(items)}</div>')


def _step_chips(step: st.StepView, greedy: bool) -> str:
    """A step in reading order: kept drafts, then the discarded ones (struck), then the closing
    token, like a tracked change (deletion, then insertion)."""
    order = ([t for t in step.drafted if t.status in ("accepted", "draft")]
             + [t for t in step.drafted if t.status in ("rejected", "wasted")]
             + ([step.next] if step.next else []))
    out = []
    for token in order:
        out.append(chip(token, greedy))
        if token.status in st.COMMITTED and "\n" in token.text:
            out.append("<br>")
    return "".join(out)


def lossy_banner(run: st.RunView) -> str:
    """A warning line for a run made with a lossy rule (typical acceptance); '' for lossless runs."""
    if not run.started or run.lossless:
        return ""
    return (f'<div class="sv-lossy" data-lossy="1">LOSSY run · rule {text(run.rule)}: a draft is kept when the '
            "target finds it typical enough, not by the exact rule, so this output does not follow the target's "
            "distribution. Choose acceptance = exact for lossless decoding.</div>")


def run_text(run: st.RunView, upto: Optional[int] = None, selected: Optional[int] = None,
             show_prompt: bool = True) -> Rendered:
    """The run's text as chips, step after step up to step `upto` (all when None), with step
    `selected` highlighted. The prompt is shown first, in grey."""
    parts = [lossy_banner(run)]
    if show_prompt and run.started:
        parts.append(f'<span class="sv-prompt">{text(run.started.get("prompt", ""))}</span>')
    last = len(run.steps) - 1 if upto is None else min(upto, len(run.steps) - 1)
    for step in run.steps[:last + 1]:
        cur = " sv-cur" if step.step == selected else ""
        parts.append(f'<span class="sv-step{cur}" data-step="{attr(step.step)}">'
                     f'{_step_chips(step, run.greedy)}</span><span class="sv-sep"></span>')
    return Rendered(f'<div class="sv-text">{"".join(parts)}</div>')
