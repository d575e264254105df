"""The selected step taken apart (draft -> verify -> emit), and the run's counters.

The step panel shows the three phases of one verification round as rows of chips: what the
draft proposed (with q), what the target decided (with p/q and u) and what was emitted, then
one sentence that tells the step in words. Every number is read from the events.
"""

from __future__ import annotations

from typing import Optional

from specviz.render import steps as st
from specviz.render.chips import chip
from specviz.render.html import Rendered, ms, num, quoted, text


def step_panel(run: st.RunView, number: Optional[int] = None) -> Rendered:
    """Step `number` (default: the last) as draft / verify / emit rows and a sentence."""
    if number is None:
        number = len(run.steps) - 1
    step = run.step(min(number, len(run.steps) - 1))
    if step is None:
        what = "the prompt alone; press Next or Play" if run.steps else "press Run"
        return Rendered(f'<div class="sv-panel sv-muted">Before the first step: {what}.</div>')
    rows = []
    if step.drafted:
        drafts = [st.TokenView(**{**t.__dict__, "status": "draft"}) for t in step.drafted]
        rows.append(_row("1 · draft proposes, q", [chip(t, run.greedy, f"q {num(t.q, 2)}") for t in drafts]))
        verdicts = [chip(t, run.greedy, _verify_detail(t, run.greedy)) for t in step.drafted]
        if step.next is not None:
            verdicts.append(chip(step.next, run.greedy, _next_detail(step.next)))
        rows.append(_row("2 · target verifies in 1 pass", verdicts))
    emitted = [chip(t, run.greedy) for t in step.emitted]
    rows.append(_row(("3 · " if step.drafted else "") + "emitted", emitted))
    title = f"Step {step.step + 1} of {len(run.steps)}"
    return Rendered(f'<div class="sv-panel" data-step="{step.step}"><b>{title}</b>{"".join(rows)}'
                    f'<p class="sv-explain">{text(sentence(step, run.greedy))}</p></div>')


def _row(label: str, cells: list) -> str:
    return f'<div class="sv-row"><span class="sv-rowlabel">{text(label)}</span>{"".join(cells)}</div>'


def _verify_detail(token: st.TokenView, greedy: bool) -> str:
    if token.status == "wasted":
        return "unjudged"
    if token.status == "draft":
        return "…"
    if greedy or token.u is None:
        return f"p {num(token.p, 2)}"
    return f"p/q {num(token.ratio, 2)} u {num(token.u, 2)}"


def _next_detail(token: st.TokenView) -> str:
    if token.status == "residual":
        return f"r {num(token.residual_prob, 2)}"
    return f"p {num(token.p, 2)}"


def sentence(step: st.StepView, greedy: bool = False) -> str:
    """The step in words: drafted, accepted, why the rejection, what replaced it, the cost."""
    s = step.summary
    if not step.drafted and step.next is not None:
        words = f"One target forward, one token: {quoted(step.next.text)} sampled from p."
    else:
        accepted = sum(t.status == "accepted" for t in step.drafted)
        words = f"Drafted {len(step.drafted)}, accepted {accepted}"
        rejected = step.rejected
        if rejected is not None:
            why = ("it is not the target's top token" if greedy or rejected.u is None
                   else f"u = {num(rejected.u, 2)} ≥ min(1, p/q) = {num(rejected.accept_prob, 2)}")
            words += f"; rejected {quoted(rejected.text)} at draft #{rejected.index} because {why}"
        if step.next is not None and step.next.status == "residual":
            words += f"; resampled {quoted(step.next.text)} from the residual norm(max(p − q, 0))"
        elif step.next is not None:
            words += f"; all accepted, so bonus {quoted(step.next.text)} from p"
        if step.wasted:
            words += f"; {len(step.wasted)} draft(s) wasted"
        words += "."
    if s is not None:
        words += (f" 1 target forward → {len(s['emitted_ids'])} token(s)"
                  f" (draft {ms(s['draft_time'])}, verify {ms(s['verify_time'])}).")
        if s.get("finish_reason"):
            words += f" Run ends: {s['finish_reason']}."
    return words


def stats(run: st.RunView, metrics: dict, compute_s: Optional[float] = None) -> Rendered:
    """Counters of the run so far: tokens, steps, target forwards, tau, alpha, speed, c.

    `compute_s` is the run's own compute time when the caller measured it (time spent inside the
    engine's iterator); otherwise the engine's elapsed clock is used.
    """
    seconds = compute_s if compute_s is not None else metrics.get("wall_time") or 0.0
    tokens = metrics.get("new_tokens", 0)
    items = [("tokens", str(tokens)), ("steps", str(metrics.get("steps", 0))),
             ("target forwards", str(metrics.get("target_forwards", 0))),
             ("τ tokens/forward", num(metrics.get("tau"), 2))]
    if run.method != "ar":
        items += [("α accepted/judged", num(metrics.get("alpha_empirical"), 2)),
                  ("c draft/target cost", num(metrics.get("c"), 2))]
    items += [("seconds", num(seconds, 2)), ("tokens/s", num(tokens / seconds if seconds else None, 1))]
    cells = "".join(f'<span><b>{text(v)}</b> <span class="sv-muted">{text(k)}</span></span>'
                    for k, v in items)
    state = ""
    if run.finished:
        state = f'<span class="sv-muted">finished ({text(run.finished["finish_reason"])})</span>'
    elif run.started:
        state = '<span class="sv-muted">running…</span>'
    lossy = ""
    if run.started and not run.started.get("lossless", True):
        lossy = '<span class="sv-warn">lossy rule: output may differ from the target\'s</span>'
    return Rendered(f'<div class="sv-stats" data-finished="{int(run.finished is not None)}">'
                    f'{cells}{state}{lossy}</div>')
