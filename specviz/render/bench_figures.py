"""Figures of the benchmark suite's report (specviz.bench): pure functions of the JSON report.

  speedup      speedup over AR of every method, greedy groups
  memory-wall  one target (and draft) forward over 1..64 tokens
  alpha        measured decode speedup against alpha with the theory's curve
  batch        predicted spec speedup at batch 1, 4, 16 from forward costs at that batch
"""

from __future__ import annotations

import plotly.graph_objects as go

LAYOUT = dict(height=440, width=820, font=dict(size=14), plot_bgcolor="white",
              margin=dict(l=70, r=20, t=70, b=60))


def _f(value, fmt: str = ".2f") -> str:
    return "–" if value is None else f"{value:{fmt}}"


def figures(report: dict) -> dict:
    """{name: plotly Figure}."""
    return {"speedup": speedup_figure(report), "memory-wall": memory_wall_figure(report),
            "alpha": alpha_figure(report), "batch": batch_figure(report)}


def speedup_figure(report: dict):
    fig = go.Figure()
    for g, rows in report["results"].items():
        if g.endswith("@greedy"):
            fig.add_bar(name=g.split("@")[0], x=list(rows), y=[r["speedup"] for r in rows.values()])
    fig.add_hline(y=1.0, line_dash="dot", line_color="#64748b")
    env = report["environment"]
    fig.update_layout(title=f"Speedup over AR, greedy ({env['pair']}, {env['device']}, {env['dtype']})",
                      yaxis_title="tokens/s ÷ AR tokens/s", barmode="group", **LAYOUT)
    return fig


def memory_wall_figure(report: dict):
    fig = go.Figure()
    for role, color in (("target", "#7c3aed"), ("draft", "#0ea5e9")):
        curve = report["cost_curve"][role]
        ns = [int(n) for n in curve]
        fig.add_scatter(x=ns, y=[v * 1000 for v in curve.values()], mode="lines+markers", name=role,
                        line_color=color)
    fig.update_layout(title="The memory wall: one forward over n tokens costs about as much as over one",
                      xaxis_title="tokens in one forward (n)", yaxis_title="ms per forward", xaxis_type="log",
                      **LAYOUT)
    return fig


def alpha_figure(report: dict):
    c = report["controlled"]
    fig = go.Figure()
    fig.add_scatter(x=[p["alpha"] for p in c["theory"]], y=[p["speedup"] for p in c["theory"]], mode="lines",
                    name=f"theory (c = {_f(c['c'])}, measured verify cost)", line_color="#94a3b8")
    pts = [p for p in c["points"] if p["alpha"] is not None]
    fig.add_scatter(x=[p["alpha"] for p in pts], y=[p["decode_speedup"] for p in pts], mode="markers",
                    name="controlled drafter (measured)", marker=dict(size=11, color="#7c3aed"),
                    text=[f"a_set {p['a_set']:g}" for p in pts])
    fits = report["ratios"]["model_fit"]
    fig.add_scatter(x=[f["alpha"] for f in fits.values()], y=[f["measured_speedup"] for f in fits.values()],
                    mode="markers", hovertext=list(fits),
                    name="spec on the prompt set (measured)",
                    marker=dict(size=10, color="#db2777", symbol="diamond"))
    fig.add_hline(y=1.0, line_dash="dot", line_color="#64748b")
    fig.update_layout(title=f"Decode speedup against acceptance rate, k = {c['k']}",
                      xaxis_title="alpha (measured)", yaxis_title="decode speedup over AR", **LAYOUT)
    return fig


def batch_figure(report: dict):
    """Spec's speedup against batch size: measured with the batched engine (reports since suite
    version 2) beside the theory from forward costs; older reports: the proxy alone."""
    measured = "batch" in report
    rows = (report["batch"] if measured else report["batch_proxy"])["rows"]
    fig = go.Figure()
    fig.add_scatter(x=[r["batch"] for r in rows], y=[r["predicted_speedup"] for r in rows],
                    mode="lines+markers", name="predicted spec speedup (alpha, forward costs)", line_color="#7c3aed",
                    line_dash="dash" if measured else "solid")
    if measured:
        fig.add_scatter(x=[r["batch"] for r in rows], y=[r["measured_speedup"] for r in rows], mode="lines+markers",
                        name="measured: B users decoded together", line_color="#16a34a")
    fig.add_scatter(x=[r["batch"] for r in rows], y=[r["verify_cost"] for r in rows], mode="lines+markers",
                    name="verify cost (k+1 tokens ÷ 1 token)", line_color="#f59e0b")
    fig.add_hline(y=1.0, line_dash="dot", line_color="#64748b")
    fig.update_layout(title="Batch size: one target pass per step for B users" if measured
                      else "Batch size (proxy from forward costs at each batch)", xaxis_title="batch",
                      xaxis_type="log", **LAYOUT)
    return fig
