"""Figures and tables for the teaching notebooks (notebooks/), from measurements and events.

Pure functions of plain data, like the other renderers: the notebooks measure (forward costs,
runs, sample counts) and these draw. Theory curves come from `specviz.analysis.theory`.

    cost_figure(curves)              forward time vs tokens fed, with the "linear" reference
    throughput_figure(curves)        tokens processed per second of forward, vs tokens fed
    distribution_figure(labels, series)  grouped bars of named distributions over tokens
    joint_figure(counts, joint, ...)     observed frequencies vs exact probabilities
    k_figure(alpha, c, records, ...)     speedup vs draft length k: theory and measured runs
    speedup_curve_figure(settings, points)  speedup vs α, one curve per k at its c and V(k + 1), runs as points
    cost_per_million(tokens_per_s, price_per_hour)   serving cost of a measured speed
    serving_figure(batches, series, ...)  cost per million tokens against batch size
    table(records, columns)              an HTML table of run summaries (escaped)
    caches_after(committed, drafted, accepted)   both KV caches' lengths after a step's crop
    cache_rows(events)                   both KV caches' lengths, step by step, from a chain run's events
    cache_figure(row)                    one step's caches, position by position (kept, read, dropped)
    cache_examples(rows)                 a fully accepted step and the rejection with the fewest accepted
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

import plotly.graph_objects as go

from specviz.analysis import theory
from specviz.render.html import Rendered, attr, num, text

LAYOUT = dict(height=430, font=dict(size=15), plot_bgcolor="white", margin=dict(l=70, r=20, t=70, b=60))
COLORS = ("#2563eb", "#7c3aed", "#16a34a", "#ea580c", "#db2777", "#0ea5e9", "#475569")


def cost_figure(curves: dict, title: str = "One forward pass: time vs tokens fed") -> go.Figure:
    """curves: {label: {n_tokens: seconds}}. Each measured line gets a dotted 'n x the 1-token
    time' line: what the cost would be if every token were paid for separately."""
    fig = go.Figure()
    for color, (label, cost) in zip(COLORS, curves.items()):
        ns = sorted(cost)
        fig.add_scatter(x=ns, y=[cost[n] * 1000 for n in ns], mode="lines+markers", name=f"{label} (measured)",
                        line=dict(color=color, width=3), marker=dict(size=9),
                        hovertemplate="%{x} tokens: %{y:.0f} ms<extra></extra>")
        fig.add_scatter(x=ns, y=[cost[ns[0]] * 1000 * n / ns[0] for n in ns], mode="lines",
                        name=f"{label} if each token cost one forward", line=dict(color=color, dash="dot"),
                        hoverinfo="skip")
    fig.update_layout(title=title, xaxis_title="tokens in one forward (after a cached prefix)",
                      yaxis_title="milliseconds", **LAYOUT)
    fig.update_xaxes(type="log", tickvals=sorted({n for c in curves.values() for n in c}), gridcolor="#e2e8f0")
    fig.update_yaxes(type="log", gridcolor="#e2e8f0")
    return fig


def relative_cost_figure(curves: dict, title: str = "A pass over n tokens, in one-token passes, engine by engine") -> go.Figure:
    """curves: {engine: {n_tokens: seconds}}, each drawn as t(n) / t(1) beside the line y = n
    (every token paid in full): a line near 1 is the memory wall speculation spends, a line near
    y = n a compute-bound kernel where every drafted token costs what decoding it would."""
    fig = go.Figure()
    ns_all = sorted({n for c in curves.values() for n in c})
    fig.add_scatter(x=ns_all, y=ns_all, mode="lines", name="n (each token paid in full)",
                    line=dict(color="#0f172a", dash="dot"), hoverinfo="skip")
    for color, (label, cost) in zip(COLORS, curves.items()):
        ns = sorted(cost)
        fig.add_scatter(x=ns, y=[cost[n] / cost[ns[0]] for n in ns], mode="lines+markers", name=label,
                        line=dict(color=color, width=3), marker=dict(size=8),
                        hovertemplate="%{x} tokens: %{y:.2f}x one token<extra></extra>")
    fig.update_layout(title=title, xaxis_title="tokens in one pass (after a cached prefix)",
                      yaxis_title="cost / one-token pass", **LAYOUT)
    fig.update_xaxes(type="log", tickvals=ns_all, gridcolor="#e2e8f0")
    fig.update_yaxes(type="log", gridcolor="#e2e8f0")
    return fig


def throughput_figure(curves: dict, title: str = "Tokens processed per second of forward") -> go.Figure:
    """curves: {label: {n_tokens: seconds}} drawn as n / t(n): flat = compute-bound, rising =
    memory-bound (the same weights read once serve more tokens)."""
    fig = go.Figure()
    for color, (label, cost) in zip(COLORS, curves.items()):
        ns = sorted(cost)
        fig.add_scatter(x=ns, y=[n / cost[n] for n in ns], mode="lines+markers", name=label,
                        line=dict(color=color, width=3), marker=dict(size=9),
                        hovertemplate="%{x} tokens: %{y:.0f} tokens/s<extra></extra>")
    fig.update_layout(title=title, xaxis_title="tokens in one forward", yaxis_title="tokens / second", **LAYOUT)
    fig.update_xaxes(type="log", tickvals=sorted({n for c in curves.values() for n in c}), gridcolor="#e2e8f0")
    fig.update_yaxes(gridcolor="#e2e8f0", rangemode="tozero")
    return fig


def distribution_figure(labels: Sequence[str], series: dict, title: str = "") -> go.Figure:
    """Grouped bars: series {name: probabilities over `labels`}."""
    fig = go.Figure()
    for color, (name, values) in zip(COLORS, series.items()):
        fig.add_bar(x=[text(lab) for lab in labels], y=list(values), name=text(name), marker_color=color,
                    hovertemplate="%{x}: %{y:.3f}<extra>" + text(name) + "</extra>")
    fig.update_layout(title=text(title), barmode="group", yaxis_title="probability", **LAYOUT)
    fig.update_yaxes(gridcolor="#e2e8f0", rangemode="tozero")
    return fig


def joint_figure(counts: dict, joint: dict, decode: Callable = str, title: str = "") -> go.Figure:
    """Observed frequency of each outcome (counts / runs) beside its exact probability, outcomes
    sorted by exact probability (most likely first)."""
    runs = sum(counts.values()) or 1
    cells = sorted(joint, key=lambda cell: -joint[cell])
    labels = [text(decode(cell)) for cell in cells]
    fig = go.Figure()
    fig.add_bar(x=labels, y=[joint[c] for c in cells], name="exact target probability", marker_color="#2563eb")
    fig.add_bar(x=labels, y=[counts.get(c, 0) / runs for c in cells], name=f"observed frequency ({runs} runs)",
                marker_color="#f59e0b")
    fig.update_layout(title=text(title), barmode="group", xaxis_title="first tokens emitted",
                      yaxis_title="probability", **{**LAYOUT, "height": 460})
    fig.update_yaxes(gridcolor="#e2e8f0", rangemode="tozero")
    return fig


def k_figure(alpha: float, c: float, records: Sequence[dict] = (), k_max: int = 12,
             verify_cost: Optional[Callable[[int], float]] = None, title: str = "") -> go.Figure:
    """Predicted speedup vs draft length k at acceptance `alpha` and cost ratio `c` (with the
    measured verify-cost curve too, when given), and measured runs as points (record['k'],
    record['speedup'])."""
    ks = list(range(1, k_max + 1))
    fig = go.Figure()
    fig.add_scatter(x=ks, y=[theory.speedup(alpha, k, c) for k in ks], mode="lines+markers",
                    name=f"theory: verify costs 1 forward (α {alpha:.2f}, c {c:.2f})",
                    line=dict(color="#7c3aed", width=3))
    if verify_cost is not None:
        fig.add_scatter(x=ks, y=[theory.speedup_with_cost(alpha, k, c, verify_cost) for k in ks],
                        mode="lines+markers", name="theory with this machine's verify cost",
                        line=dict(color="#0ea5e9", width=3, dash="dash"))
    measured = [r for r in records if r.get("speedup") is not None and isinstance(r.get("k"), int)]
    if measured:
        fig.add_scatter(x=[r["k"] for r in measured], y=[r["speedup"] for r in measured], mode="markers+text",
                        name="measured", text=[f"{r['speedup']:.2f}×" for r in measured], textposition="top center",
                        marker=dict(size=15, symbol="diamond", color="#f59e0b", line=dict(width=2, color="#0f172a")))
    fig.add_hline(y=1.0, line=dict(color="#0f172a", dash="dot"), annotation_text="break-even",
                  annotation_position="bottom right")
    fig.update_layout(title=text(title or "Speedup vs draft length k"), xaxis_title="k (tokens drafted per step)",
                      yaxis_title="speedup over autoregressive", **LAYOUT)
    fig.update_yaxes(gridcolor="#e2e8f0", rangemode="tozero")
    return fig


def speedup_curve_figure(settings: dict, points: Sequence[dict] = (),
                         title: str = "Speedup against α: theory and the presets") -> go.Figure:
    """settings: {k: (c, V(k + 1))}; one curve per k of speedup = τ(α, k) / (c·k + V(k + 1)),
    τ(α, k) = (1 − α^(k+1)) / (1 − α); points: measured runs (label, k, alpha, speedup), each in
    its k's colour."""
    alphas = [i / 100 for i in range(101)]
    fig = go.Figure()
    for color, (k, (c, v)) in zip(COLORS, sorted(settings.items())):
        fig.add_scatter(x=alphas, y=[theory.speedup_with_cost(a, k, c, lambda n: v) for a in alphas], mode="lines",
                        name=f"k = {k}: c = {c:.2f}, V({k + 1}) = {v:.2f}", line=dict(color=color, width=3))
        mine = [p for p in points if p["k"] == k]
        if mine:
            fig.add_scatter(x=[p["alpha"] for p in mine], y=[p["speedup"] for p in mine], mode="markers+text",
                            name=f"measured, k = {k}", text=[f"{p['speedup']:.2f}×" for p in mine],
                            textposition="top left", customdata=[text(p["label"]) for p in mine],
                            hovertemplate="%{customdata}: α %{x:.2f}, %{y:.2f}×<extra></extra>",
                            marker=dict(size=15, symbol="diamond", color=color, line=dict(width=2, color="#0f172a")))
    fig.add_hline(y=1.0, line=dict(color="#0f172a", dash="dot"), annotation_text="break-even",
                  annotation_position="bottom right")
    fig.update_layout(title=text(title), xaxis_title="α (the share of judged guesses accepted)",
                      yaxis_title="speedup over autoregressive", xaxis_range=[0, 1.02], **LAYOUT)
    fig.update_yaxes(gridcolor="#e2e8f0", rangemode="tozero")
    return fig


def cost_per_million(tokens_per_s: Optional[float], price_per_hour: float) -> Optional[float]:
    """What a million generated tokens cost on a machine rented at `price_per_hour` that makes
    `tokens_per_s`: price / (tokens per hour) x 10^6. None without a speed."""
    if not tokens_per_s or tokens_per_s <= 0:
        return None
    return price_per_hour / (tokens_per_s * 3600.0) * 1e6


def serving_figure(batches: Sequence[int], series: dict, price_per_hour: float,
                   title: str = "Cost per million tokens vs concurrent requests") -> go.Figure:
    """series: {label: [tokens/s of the whole machine at each batch size]}, drawn as cost per
    million tokens at `price_per_hour` (an assumption, said in the axis title), log-log."""
    fig = go.Figure()
    for color, (label, speeds) in zip(COLORS, series.items()):
        costs = [cost_per_million(v, price_per_hour) for v in speeds]
        fig.add_scatter(x=list(batches), y=costs, mode="lines+markers", name=text(label),
                        line=dict(color=color, width=3), marker=dict(size=9),
                        customdata=list(speeds),
                        hovertemplate="batch %{x}: %{y:.3g} per million tokens (%{customdata:.1f} tokens/s)"
                                      "<extra>" + text(label) + "</extra>")
    fig.update_layout(title=text(title), xaxis_title="requests decoded together (batch size)",
                      yaxis_title=f"per million tokens at {price_per_hour:g} / hour (assumed)", **LAYOUT)
    fig.update_xaxes(type="log", tickvals=list(batches), gridcolor="#e2e8f0")
    fig.update_yaxes(type="log", gridcolor="#e2e8f0")
    return fig


def _cell(value, digits: int = 2) -> str:
    if isinstance(value, float):
        return num(value, digits)
    return text("—" if value is None else value)


def table(records: Sequence[dict], columns: Sequence, caption: str = "", digits: int = 2) -> Rendered:
    """An HTML table: columns are keys, or (key, header) pairs; floats shown with `digits` decimals."""
    cols = [(c, c) if isinstance(c, str) else tuple(c) for c in columns]
    head = "".join(f"<th>{text(h)}</th>" for _, h in cols)
    rows = "".join("<tr>" + "".join(f'<td data-col="{attr(k)}">{_cell(r.get(k), digits)}</td>' for k, _ in cols) + "</tr>"
                   for r in records)
    cap = f"<caption>{text(caption)}</caption>" if caption else ""
    style = ("<style>.sv-table{border-collapse:collapse;font-size:15px}.sv-table td,.sv-table th{border:1px solid "
             "#cbd5e1;padding:3px 10px;text-align:right}.sv-table caption{text-align:left;font-weight:600}</style>")
    return Rendered(f'{style}<table class="sv-table">{cap}<thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>')


# ---------------------------------------------------------------------------------------------
# the two KV caches through a step (notebook 0, the lecture's slides)

CACHE_STATES = {0: ("not in the cache", "#f1f5f9"), 1: ("in the cache", "#93c5fd"), 2: ("read in this step", "#fcd34d"),
                3: ("dropped by the crop (rolled back)", "#fca5a5")}


def _draft_read(committed: int, drafted: int, draft_before: int) -> int:
    """The draft's cache once it guessed: the committed text and every guess but the last (it
    never reads its last guess); unchanged when it guessed nothing."""
    return committed + drafted - 1 if drafted else draft_before


def caches_after(committed: int, drafted: int, accepted: int, draft_before: Optional[int] = None,
                 closed: bool = True) -> tuple:
    """(target cache, draft cache) lengths after a step's crop, as specviz.engine.sequence `_keep` and
    specviz.drafters.model `observe` crop them: the target keeps the committed text and the
    accepted guesses; the draft keeps what it read, cut to the committed text but its last token.
    `closed`: the step ended with a token of the target's own (not on an accepted end of text)."""
    committed_after = committed + accepted + (1 if closed else 0)
    read = _draft_read(committed, drafted, committed - 1 if draft_before is None else draft_before)
    return committed + accepted, min(read, committed_after - 1)


def cache_rows(events: Sequence[dict]) -> list:
    """Per step of a draft-model chain run: both caches' lengths before, during and after the
    step, by the engine's crop (specviz.engine.sequence `_keep`: the target keeps the committed text and
    the accepted guesses; specviz.drafters.model: the draft keeps what it read, cut to the
    committed text but its last token, and never reads its last guess; notebook 0 checks this
    against the real drafter). The target's read is the event's own `tokens_in`. A step that
    drafted nothing (the last one, with no room left) reads nothing into the draft's cache; a
    step that ended on an accepted end of text has no closing token (`closed` False)."""
    started = next(e for e in events if e["kind"] == "run_started")
    fed = {e["step"]: e["tokens_in"] for e in events if e["kind"] == "target_scored"}
    committed, target_cache, draft_cache, rows = len(started["prompt_ids"]), 0, 0, []
    for step in (e for e in events if e["kind"] == "step_finished"):
        after = committed + len(step["emitted_ids"])
        closed = len(step["emitted_ids"]) == step["accepted"] + 1
        target_after, draft_after = caches_after(committed, step["drafted"], step["accepted"], draft_cache, closed)
        full = step["drafted"] > 0 and step["accepted"] == step["drafted"]
        row = {"step": step["step"] + 1, "committed before": committed, "guessed": step["drafted"],
               "accepted": step["accepted"], "draft cache before": draft_cache,
               "draft cache after drafting": _draft_read(committed, step["drafted"], draft_cache),
               "draft cache after crop": draft_after, "target cache before": target_cache,
               "target read": fed[step["step"]], "target cache after crop": target_after,
               "committed after": after, "closed": closed,
               "outcome": ("no guess" if not step["drafted"] else "all accepted" if full
                           else "rejection: rolled back")}
        rows.append(row)
        committed, target_cache, draft_cache = after, row["target cache after crop"], row["draft cache after crop"]
    return rows


def cache_examples(rows: Sequence[dict]) -> tuple:
    """(a step with every guess accepted, the rejection with the fewest accepted), each None when
    the run has none; steps after the first preferred (the first also reads the whole prompt)."""
    later = [r for r in rows if r["step"] > 1] or list(rows)
    full = next((r for r in later if r["outcome"] == "all accepted"), None)
    rejected = min((r for r in later if r["outcome"] == "rejection: rolled back"), key=lambda r: r["accepted"],
                   default=None)
    return full, rejected


def _cache_line(lo: int, hi: int, cached: int, read_to: Optional[int] = None, kept: Optional[int] = None) -> list:
    out = []
    for pos in range(lo, hi):
        if kept is not None and pos < read_to:
            out.append(1 if pos < kept else 3)
        elif pos < cached:
            out.append(1)
        else:
            out.append(2 if read_to is not None and pos < read_to else 0)
    return out


def cache_figure(row: dict) -> go.Figure:
    """One step's two caches, a square per position around it: in the cache, read in this step's
    pass, or dropped by the crop after a rejection (a row of `cache_rows`)."""
    c0 = row["committed before"]
    lo, hi = max(0, c0 - 3), c0 + row["guessed"] + 1
    d0, d1, d2 = row["draft cache before"], row["draft cache after drafting"], row["draft cache after crop"]
    t0, t1, t2 = row["target cache before"], row["target cache before"] + row["target read"], row["target cache after crop"]
    lines = {"draft, before": _cache_line(lo, hi, d0), "draft, after guessing": _cache_line(lo, hi, d0, d1),
             "draft, after crop": _cache_line(lo, hi, d2, d1, d2), "target, before": _cache_line(lo, hi, t0),
             "target, its one pass": _cache_line(lo, hi, t0, t1), "target, after crop": _cache_line(lo, hi, t2, t1, t2)}
    names = list(lines)[::-1]
    scale = [[i / 3, CACHE_STATES[i][1]] for i in range(4)]
    fig = go.Figure(go.Heatmap(z=[lines[n] for n in names], x=list(range(lo, hi)), y=names, zmin=0, zmax=3,
                               colorscale=scale, showscale=False, xgap=2, ygap=2,
                               hovertemplate="position %{x}<extra>%{y}</extra>"))
    for label, color in CACHE_STATES.values():  # a legend for the colours
        fig.add_scatter(x=[None], y=[None], mode="markers", marker=dict(size=12, color=color, symbol="square"),
                        name=text(label))
    fig.add_vline(x=c0 - 0.5, line_dash="dot", line_color="#334155")
    fig.update_layout(**{**LAYOUT, "height": 340},
                      title=text(f"Step {row['step']}: {row['accepted']} of {row['guessed']} guesses accepted "
                                 f"({row['outcome']})") + "<br><sup>dotted line: the end of the committed text "
                                                         "before the step</sup>",
                      xaxis_title="position in the text", legend=dict(orientation="h", y=-0.3))
    return fig
