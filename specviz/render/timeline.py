"""The timeline view: a Gantt chart of the draft's and the target's lanes, step after step.

Each run gets two rows. Plain speculation's bars alternate: the draft lane works, then the target
lane, never both. Speculative speculative decoding (SSD) drafts the next step while the target
verifies: its "prepare" bars sit under the target's "verify" bars, the overlap is shaded, and
each verdict is marked: a hit (the outcome was prepared for: the next draft is ready at once)
or a miss (the next step drafts from scratch, on the critical path). Several runs share one time
axis, so the same picture for plain speculation can sit beside SSD's.

Drawn from `specviz.analysis.overlap.timeline` records, which read only events.
"""

from __future__ import annotations

from typing import Optional

import plotly.graph_objects as go

from specviz.render import charts
from specviz.render.html import text

COLORS = {"draft": "#0ea5e9", "verify": "#7c3aed", "prepare": "#7dd3fc", "wait": "#f59e0b"}
NAMES = {"draft": "drafting (on the critical path)", "verify": "target's pass",
         "prepare": "drafting ahead (while the target verifies)", "wait": "waiting for the draft's forward"}
SHADE = "rgba(22, 163, 74, 0.16)"  # the overlap: drafting hidden behind the target's pass
FIRST_STEPS = 10  # the x axis opens on the first steps (zoom or pan for the rest)


def timeline_figure(runs: list, title: str = "Who works when: the draft's and the target's lanes",
                    first_steps: Optional[int] = FIRST_STEPS) -> go.Figure:
    """`runs`: [(label, overlap.timeline(events)), ...], drawn top to bottom on one time axis."""
    fig = go.Figure()
    rows, shown, end = [], set(), 0.0
    for label, run in runs:
        lanes = {lane: f"{text(label)} · {lane}" for lane in ("draft", "target")}  # tick labels are markup
        rows += [lanes["draft"], lanes["target"]]
        for kind in ("draft", "prepare", "verify", "wait"):
            segs = [s for s in run["segments"] if s["kind"] == kind]
            if not segs:
                continue
            fig.add_trace(go.Bar(
                orientation="h", base=[s["start"] for s in segs], x=[s["end"] - s["start"] for s in segs],
                y=[lanes[s["lane"]] for s in segs], marker_color=COLORS[kind], name=NAMES[kind],
                legendgroup=kind, showlegend=kind not in shown, width=0.6,
                customdata=[[s["step"], 1000 * (s["end"] - s["start"])] for s in segs],
                hovertemplate=f"{text(NAMES[kind])}<br>step %{{customdata[0]}}: %{{customdata[1]:.0f}} ms<extra></extra>"))
            shown.add(kind)
        _shade(fig, run, lanes)
        _verdicts(fig, run, lanes, shown)
        end = max([end] + [s["end"] for s in run["segments"]])
    fig.update_layout(title=text(title), barmode="overlay", height=170 + 90 * len(runs), font=dict(size=14),
                      plot_bgcolor="white", margin=dict(l=10, r=20, t=60, b=50),
                      legend=dict(orientation="h", y=-0.25), xaxis_title="seconds since the run started")
    fig.update_yaxes(categoryorder="array", categoryarray=list(reversed(rows)), automargin=True)
    fig.update_xaxes(range=[0, _opening(runs, first_steps) or end or 1.0], gridcolor="#e2e8f0")
    return fig


def _shade(fig: go.Figure, run: dict, lanes: dict) -> None:
    """Shade where drafting ahead overlaps the target's pass of the same step: hidden time."""
    verify = {s["step"]: s for s in run["segments"] if s["kind"] == "verify"}
    for s in run["segments"]:
        v = verify.get(s["step"])
        if s["kind"] != "prepare" or v is None:
            continue
        lo, hi = max(s["start"], v["start"]), min(s["end"], v["end"])
        if hi > lo:
            fig.add_shape(type="rect", x0=lo, x1=hi, y0=lanes["draft"], y1=lanes["target"], yref="y",
                          fillcolor=SHADE, line_width=0, layer="below")


def _verdicts(fig: go.Figure, run: dict, lanes: dict, shown: set) -> None:
    for hit in (True, False):
        marks = [o for o in run.get("outcomes", []) if o["hit"] == hit]
        if not marks:
            continue
        name = "hit: next draft ready" if hit else "miss: next draft from scratch"
        fig.add_trace(go.Scatter(
            x=[o["time"] for o in marks], y=[lanes["draft"]] * len(marks), mode="markers", name=name,
            marker=dict(symbol="circle" if hit else "x", size=11, color="#16a34a" if hit else "#dc2626",
                        line=dict(width=1, color="white")),
            legendgroup=name, showlegend=name not in shown,
            customdata=[[o["step"], o["prepared"]] for o in marks],
            hovertemplate=f"step %{{customdata[0]}}: {name} (%{{customdata[1]}} outcomes prepared)<extra></extra>"))
        shown.add(name)


def _opening(runs: list, first_steps: Optional[int]) -> Optional[float]:
    """Where the x axis opens: the end of the longest of the runs' first `first_steps` steps."""
    if not first_steps:
        return None
    ends = [max((s["end"] for s in run["segments"] if s["step"] < first_steps), default=0.0) for _, run in runs]
    return max(ends, default=0.0) or None


def beside(events, history: list) -> list:
    """The latest run's timeline (from its events) and, for SSD or plain speculation, the latest
    earlier run of the other on the same prompt from the session's `history` (chart records,
    specviz.render.charts.summarize): [(label, timeline), ...] for `timeline_figure`."""
    from specviz.analysis import overlap

    current = overlap.timeline(events)
    started, _ = overlap.run_steps(events)
    runs = [(_label(current), current)]
    other = {"ssd": "spec", "spec": "ssd"}.get(current["method"])
    match = [r for r in reversed(history) if r.get("timeline") and r["method"] == other
             and r.get("prompt") == started.get("prompt")]
    match.sort(key=lambda r: r["timeline"]["k"] != current["k"])  # the same k first, else the latest
    if match:
        runs.append((_label(match[0]["timeline"]), match[0]["timeline"]))
    return runs


def _label(run: dict) -> str:
    return f"{run['method']} k={run['k']}" if isinstance(run.get("k"), int) and run["method"] != "ar" else run["method"]


K_COLORS = {**charts.K_COLORS, 3: "#16a34a", 5: "#db2777", 6: "#ea580c"}  # the speedup chart's, and the k between
KIND_SYMBOLS = {"code": "circle", "chat": "diamond"}


def theory_points(analysis: dict) -> list:
    """The measured SSD points of a specviz.bench.ssd report's analysis, one per kind and k, each
    with the prediction made apart from the SSD runs (specviz.analysis.ssd_model) and its inputs,
    which the curves are drawn from."""
    points = []
    for kind, x in analysis.items():
        for k, row in x["ssd"].items():
            if "inputs" not in row or "predicted_inputs" not in row:
                continue
            apart = row["predicted_inputs"]
            points.append({"kind": kind, "k": int(k), "hit": row["inputs"]["hit"], "measured": row["vs_spec_measured"],
                           "predicted": row["vs_spec_predicted"], "predicted_hit": apart["hit"],
                           "inputs": {**apart, "ssd_overhead": apart["overhead"]}})
    return points


def ssd_theory_figure(points: list, title: str = "SSD over plain speculation: theory and measurement") -> go.Figure:
    """specviz.analysis.theory.ssd_speedup against the hit rate, at each k with the costs measured
    apart from the SSD runs on this machine (solid: the cores shared as they were) and with the
    draft on hardware of its own (dotted: the pass not slowed); the measured runs as filled points,
    the predictions made apart as open ones (`theory_points`)."""
    from specviz.analysis import theory

    fig = go.Figure()
    hits = [i / 50 for i in range(51)]
    for k in sorted({p["k"] for p in points}):
        mine = [p for p in points if p["k"] == k]
        mean = {key: sum(p["inputs"][key] for p in mine) / len(mine)
                for key in ("c", "slowdown", "wait", "overhead", "ssd_overhead")}
        ready = sum(p["inputs"]["ready"] for p in mine) / len(mine)
        color = K_COLORS.get(k, "#334155")
        fig.add_trace(go.Scatter(x=hits, y=[theory.ssd_speedup(h, k, mean["c"], mean["slowdown"], ready, mean["wait"],
                                                               mean["overhead"], ssd_overhead=mean["ssd_overhead"])
                                            for h in hits],
                                 mode="lines", line=dict(color=color, width=2), name=f"k={k}, this machine"))
        fig.add_trace(go.Scatter(x=hits, y=[theory.ssd_speedup(h, k, mean["c"], overhead=mean["overhead"],
                                                               ssd_overhead=mean["ssd_overhead"]) for h in hits],
                                 mode="lines", line=dict(color=color, width=2, dash="dot"),
                                 name=f"k={k}, draft on its own hardware"))
        for kind in sorted({p["kind"] for p in mine}):
            here = [p for p in mine if p["kind"] == kind]
            fig.add_trace(go.Scatter(
                x=[p["hit"] for p in here], y=[p["measured"] for p in here], mode="markers",
                marker=dict(color=color, size=13, symbol=KIND_SYMBOLS.get(kind, "square"), line=dict(width=1, color="white")),
                name=f"measured: {kind}, k={k}",
                customdata=[[p["predicted"]] for p in here],
                hovertemplate=f"{kind}, k={k}<br>hit %{{x:.0%}}: measured %{{y:.2f}}x, predicted apart "
                              f"%{{customdata[0]:.2f}}x<extra></extra>"))
            fig.add_trace(go.Scatter(
                x=[p.get("predicted_hit", p["hit"]) for p in here], y=[p["predicted"] for p in here], mode="markers",
                marker=dict(color=color, size=13, symbol=KIND_SYMBOLS.get(kind, "square") + "-open", line=dict(width=2)),
                name=f"predicted apart: {kind}, k={k}",
                hovertemplate=f"{kind}, k={k}<br>modelled hit %{{x:.0%}}: predicted %{{y:.2f}}x<extra></extra>"))
    fig.add_hline(y=1.0, line=dict(color="#64748b", dash="dash"), annotation_text="plain speculation",
                  annotation_position="bottom right")
    fig.update_layout(title=text(title), height=460, font=dict(size=14), plot_bgcolor="white",
                      margin=dict(l=60, r=20, t=60, b=60), xaxis_title="hit rate (steps whose draft was prepared)",
                      yaxis_title="SSD's speed over spec's, same k", legend=dict(font=dict(size=12)))
    fig.update_xaxes(range=[0, 1], tickformat=".0%", gridcolor="#e2e8f0")
    fig.update_yaxes(gridcolor="#e2e8f0")
    return fig
