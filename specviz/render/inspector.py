"""The step inspector: p and q at one draft position, their overlap, and the residual.

Left: bars of p (target) and q (draft) over the tokens in their recorded top-k slices, and
min(p, q) per token: the overlap whose total, beta = sum_x min(p(x), q(x)), is the probability
that a draft sampled from q is accepted (Leviathan et al. 2023, section 3.5). Right: after a
rejection, the residual norm(max(p - q, 0)) the replacement was drawn from. The drafted token and
the emitted token are outlined. Bars are the top-k the engine recorded, not whole distributions;
beta and the residual mass are the engine's exact values over the whole vocabulary.
"""

from __future__ import annotations

from typing import Optional

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from specviz.render import steps as st
from specviz.render.chips import decision
from specviz.render.html import num, quoted, text, visible

P_COLOR, Q_COLOR, MIN_COLOR, RES_COLOR = "#2563eb", "#7c3aed", "#16a34a", "#ea580c"
FONT = dict(size=15)


def inspector_figure(run: st.RunView, number: int, index: Optional[int] = None) -> go.Figure:
    """Figure for step `number` at draft index `index` (default: the rejected one, else the last)."""
    step = run.step(number)
    if step is None or not step.tokens:
        return _empty("Run something, then pick a step and a position.")
    index = default_index(step) if index is None or index not in step.indices() else index
    here = step.at(index)
    drafted = next((t for t in here if t.status in ("draft", "accepted", "rejected", "wasted")), None)
    closing = next((t for t in here if t.status in ("residual", "bonus", "target")), None)
    fig = make_subplots(rows=1, cols=2, column_widths=[0.62, 0.38], horizontal_spacing=0.1,
                        subplot_titles=(_left_title(step, index, drafted), _right_title(closing, drafted)))
    top = max(_add_pq(fig, step, index, drafted, closing), _add_residual(fig, step, closing, drafted))
    note = (f"Bars are the recorded top-{_k(step, index)} of each distribution (from the events), not the "
            "whole vocabulary; β and 1 − β are exact.")
    if step.is_tree:
        note = (f"p: the recorded top-{_k(step, index)} at the node the walk stood on; q: known for the drafted "
                "children only (a tree records no top-k of q); β is exact.")
    fig.update_layout(title=dict(text=f"{text(_title(step, index, drafted, closing, run.greedy))}"
                                      f"<br><span style='font-size:13px'>{note}</span>", x=0.01),
                      barmode="group", height=520, margin=dict(l=60, r=20, t=110, b=120), font=FONT,
                      legend=dict(orientation="h", y=-0.3, x=0), plot_bgcolor="white")
    for col in (1, 2):
        fig.update_yaxes(range=[0, min(1.05, top * 1.25 + 0.02)], gridcolor="#e2e8f0", col=col)
    fig.update_yaxes(title_text="probability", col=1)
    return fig


def default_index(step: st.StepView) -> int:
    """Where to look first: the rejection if there was one, else the step's last position."""
    rejected = step.rejected
    return rejected.index if rejected is not None else step.indices()[-1]


def _title(step, index, drafted, closing, greedy) -> str:
    where = f"depth {index + 1}" if step.is_tree else f"draft {index + 1}"
    head = f"Step {step.step + 1} · {where} · position {(drafted or closing).position}"
    judged = [t for t in step.at(index) if t.status in ("accepted", "rejected")]
    if step.is_tree and len(judged) > 1:
        return head + f" · {len(judged)} siblings judged in draw order: " + ", ".join(
            f"{quoted(t.text)} {t.status}" for t in judged)
    token = drafted or closing
    return f"{head} · {quoted(token.text)} {token.status}: {decision(token, greedy).split(': ', 1)[-1]}"


def _children(step, index, drafted, closing) -> list:
    """Tree steps: the drafted children of the node the walk stood on at this depth (their q and p
    at that node are exact, from tree_built and target_scored)."""
    if not step.is_tree:
        return []
    node = next((n for n in step.nodes if drafted is not None and n.id == drafted.node), None)
    parent = node.parent if node is not None else (closing.node if closing is not None else None)
    if parent is None:
        return []
    return [n for n in step.nodes if n.parent == parent]


def _left_title(step, index, drafted) -> str:
    if drafted is None:
        return "p at the bonus position (nothing drafted here)"
    beta = drafted.beta
    return f"p (target) vs q (draft) · β = Σ min(p, q) = {num(beta)}"


def _right_title(closing, drafted) -> str:
    if closing is not None and closing.status == "residual" and str(closing.rule or "").startswith("typical"):
        return "p at the refused position (typical acceptance draws from p: no residual)"
    if closing is not None and closing.status == "residual":
        return f"residual norm(max(p − q, 0)) · 1 − β = {num(closing.residual_mass)}"
    if drafted is not None and drafted.status == "accepted":
        return "residual: not needed (accepted)"
    return "residual: not sampled here"


def _k(step, index) -> int:
    slices = [s for s in (_p_slice(step, index), step.q_topk.get(index)) if s]
    return max((len(s["ids"]) for s in slices), default=0)


def _p_slice(step, index) -> Optional[dict]:
    return step.p_topk[index] if index < len(step.p_topk) else None


def _merge(p_slice, q_slice, drafted) -> list:
    """Rows (id, text, p, q) over the union of the recorded slices, highest max(p, q) first;
    None where a token fell outside that distribution's recorded top-k."""
    rows = {}
    for which, part in (("p", p_slice), ("q", q_slice)):
        for tid, ttext, prob in zip(part["ids"], part["texts"], part["probs"]) if part else ():
            rows.setdefault(tid, {"id": tid, "text": ttext, "p": None, "q": None})[which] = prob
    if drafted is not None:  # the drafted token's own p and q are always known exactly
        row = rows.setdefault(drafted.token_id, {"id": drafted.token_id, "text": drafted.text})
        row["p"], row["q"] = drafted.p, drafted.q
    return sorted(rows.values(), key=lambda r: -max(r.get("p") or 0, r.get("q") or 0))


def _labels(rows: list) -> list:
    """Tick labels: visible whitespace, escaped (Plotly reads a subset of HTML), unique."""
    seen = {}
    for r in rows:
        seen[r["text"]] = seen.get(r["text"], 0) + 1
    return [text(visible(r["text"])) + (f" #{r['id']}" if seen[r["text"]] > 1 else "") for r in rows]


def _outline(rows, marked: dict) -> tuple:
    widths = [4 if r["id"] in marked else 0 for r in rows]
    return widths, ["#0f172a"] * len(rows)


def _add_pq(fig, step, index, drafted, closing) -> float:
    """p, q and min(p, q) bars with the drafted and emitted tokens outlined; returns the top bar."""
    p_slice = _p_slice(step, index)
    children = _children(step, index, drafted, closing)
    if closing is not None and closing.status in ("bonus", "target"):
        rows = _merge(p_slice, None, None)
    elif children:  # a tree records q only for what it drafted: each child's q and p at this node
        rows = _merge(p_slice, None, None)
        by_id = {r["id"]: r for r in rows}
        for node in children:
            row = by_id.setdefault(node.token_id, {"id": node.token_id, "text": node.text, "p": None})
            if row not in rows:
                rows.append(row)
            row["p"], row["q"] = node.p, node.q
        rows.sort(key=lambda r: -max(r.get("p") or 0, r.get("q") or 0))
    else:
        rows = _merge(p_slice, step.q_topk.get(index), drafted)
    x = _labels(rows)
    judged = [t for t in step.at(index) if t.status in ("accepted", "rejected")] if step.is_tree else []
    marked = {t.token_id: t for t in [drafted, *judged, closing] if t is not None}
    widths, colors = _outline(rows, marked)
    p = [r.get("p") for r in rows]
    fig.add_bar(x=x, y=p, name="p (target)", marker_color=P_COLOR, marker_line_width=widths,
                marker_line_color=colors, row=1, col=1, hovertemplate="%{x}: p = %{y:.3f}<extra></extra>")
    q = [r.get("q") for r in rows] if drafted is not None else []
    if drafted is not None:
        fig.add_bar(x=x, y=q, name="q (draft)", marker_color=Q_COLOR, marker_line_width=widths,
                    marker_pattern_shape="/", marker_pattern_fgcolor="#ffffff",  # hatched: told apart from p without hue
                    marker_line_color=colors, row=1, col=1, hovertemplate="%{x}: q = %{y:.3f}<extra></extra>")
        overlap = [min(a, b) if a is not None and b is not None else None for a, b in zip(p, q)]
        fig.add_bar(x=x, y=overlap, name="min(p, q): overlap", marker_color=MIN_COLOR, row=1, col=1,
                    hovertemplate="%{x}: min(p, q) = %{y:.3f}<extra></extra>")
    heights = [max(a or 0, b or 0) for a, b in zip(p, q or [None] * len(p))]
    ids = [r["id"] for r in rows]
    for token in marked.values():
        if token.token_id in ids:
            i = ids.index(token.token_id)
            fig.add_annotation(x=x[i], y=heights[i], text=f"▼ {token.status}", showarrow=False, yanchor="bottom",
                               font=dict(size=14, color="#0f172a"), row=1, col=1)
    return max(heights, default=0.0)


def _add_residual(fig, step, closing, drafted) -> float:
    """The residual's recorded top-k with the resampled token outlined; returns the top bar."""
    if closing is None or closing.status != "residual" or not step.residual_topk:
        reason = ("accepted: the rule never looked at the residual" if drafted is not None
                  and drafted.status == "accepted" else "no rejection at this position")
        if closing is not None and closing.status == "residual":
            reason = "residual top-k was not recorded"
        left, right = fig.layout.xaxis2.domain
        fig.add_annotation(text=reason, xref="paper", yref="paper", x=(left + right) / 2, y=0.5,
                           xanchor="center", showarrow=False, font=dict(size=14, color="#64748b"))
        fig.update_xaxes(visible=False, row=1, col=2)
        return 0.0
    part = step.residual_topk
    rows = [{"id": i, "text": t, "r": r} for i, t, r in zip(part["ids"], part["texts"], part["probs"])]
    widths = [4 if r["id"] == closing.token_id else 0 for r in rows]
    fig.add_bar(x=_labels(rows), y=[r["r"] for r in rows], name="residual", marker_color=RES_COLOR,
                marker_line_width=widths, marker_line_color="#0f172a", row=1, col=2,
                hovertemplate="%{x}: r = %{y:.3f}<extra></extra>")
    return max(r["r"] for r in rows)


def _empty(message: str) -> go.Figure:
    fig = go.Figure()
    fig.add_annotation(text=text(message), x=0.5, y=0.5, xref="paper", yref="paper", showarrow=False,
                       font=dict(size=16, color="#64748b"))
    fig.update_layout(height=300, xaxis_visible=False, yaxis_visible=False, plot_bgcolor="white")
    return fig
