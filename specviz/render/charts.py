"""Run-level charts: speedup vs acceptance (theory and measured runs), tokens per target forward,
acceptance by draft position, and why accepted/drafted is not alpha; and, for notebook 9, the
stream as a reader sees it (tokens over time, per-token gaps), acceptance survival by depth and
repeated runs with their intervals.

Theory is Leviathan et al. 2023, section 3 (specviz.analysis.theory): with acceptance rate a, draft length
k and cost ratio c = draft forward / target forward, speedup = (1 - a^(k+1)) / ((1 - a)(ck + 1)).
Measured points come from run summaries (`summarize`), which read only events and the compute
time the app measured around the engine.
"""

from __future__ import annotations

from typing import Optional

import plotly.graph_objects as go

from specviz.analysis import metrics, overlap, theory
from specviz.analysis.metrics import percentile
from specviz.render import steps as st
from specviz.render.html import num, text
from specviz.render.race import arrival_gaps, stream_updates

K_CURVES = (1, 2, 4, 8)
K_COLORS = {1: "#94a3b8", 2: "#0ea5e9", 4: "#7c3aed", 8: "#db2777"}
LAYOUT = dict(height=420, font=dict(size=15), plot_bgcolor="white", margin=dict(l=60, r=20, t=70, b=60))


def summarize(events, compute_s: Optional[float] = None, label: str = "", baseline: Optional[dict] = None) -> dict:
    """A plain-data record of one finished run for the session history and the charts.

    `compute_s`: the run's own compute time (defaults to the engine's elapsed clock).
    `baseline`: the autoregressive record it is compared with (the race's other lane), if any.
    `timing_note` is None, or why the machine was too busy for its speed to mean anything
    (specviz.analysis.metrics.judge_timing on the run's CPU share and forward-time spread).
    """
    run = st.build(events)
    m = st.run_metrics(events)
    seconds = compute_s if compute_s is not None else m.get("wall_time") or 0.0
    started = run.started or {}
    k = m.get("k")
    chosen = m.get("k_chosen") or []
    if m.get("method") == "tree":  # a tree has no draft length k: theory's chain formula does not apply
        k = None
    elif k == "auto":
        k = sum(chosen) / len(chosen) if chosen else None
    record = {"label": label, "pair": started.get("pair"), "method": m.get("method"), "k": k,
              "k_setting": m.get("k"), "lossless": bool(m.get("lossless", run.lossless)),
              "rule": started.get("rule"),
              "temperature": started.get("temperature"), "chat": started.get("chat"),
              "prompt": started.get("prompt") or "", "tokens": m.get("new_tokens", 0),
              "seconds": seconds, "tokens_per_s": m.get("new_tokens", 0) / seconds if seconds else None,
              "alpha": m.get("alpha_empirical"), "tau": m.get("tau"), "c": m.get("c"),
              "target_forwards": m.get("target_forwards"), "speedup": None,
              "device": started.get("device"), "dtype": started.get("dtype"),
              "cpu_linear": started.get("cpu_linear", "aten"), "cpu_share": m.get("cpu_share"),
              "verify_spread": m.get("verify_spread")}
    record["timeline"] = overlap.timeline(events)  # the lanes, for the timeline view beside a later run
    record["timing_note"] = metrics.judge_timing(record["cpu_share"], record["verify_spread"],
                                                 record["device"], m.get("wall_time")).note
    if baseline and baseline.get("tokens_per_s") and record["tokens_per_s"]:
        record["speedup"] = record["tokens_per_s"] / baseline["tokens_per_s"]
        # a ratio is only as good as both of its clocks
        record["speedup_unreliable"] = bool(record["timing_note"] or baseline.get("timing_note"))
    return record


def engine_record(label: str, method: str, k: Optional[int], tokens: int, seconds: float, drafted: int = 0,
                  accepted: int = 0, drafts: int = 0, baseline: Optional[dict] = None) -> dict:
    """A record like `summarize`'s for a run of another engine's own program (llama-server),
    from the counts it reports: alpha = accepted / drafted, tau = tokens per verification step."""
    record = {"label": label, "pair": None, "method": method, "k": k, "k_setting": k, "lossless": True,
              "rule": "llama.cpp", "tokens": tokens, "seconds": seconds,
              "tokens_per_s": tokens / seconds if seconds else None,
              "alpha": accepted / drafted if drafted else None, "tau": 1 + accepted / drafts if drafts else None,
              "c": None, "speedup": None, "timing_note": None, "drafted": drafted, "accepted": accepted}
    if baseline and baseline.get("tokens_per_s") and record["tokens_per_s"]:
        record["speedup"] = record["tokens_per_s"] / baseline["tokens_per_s"]
    return record


def latest_c(history: list) -> Optional[float]:
    return next((r["c"] for r in reversed(history) if r.get("c")), None)


def speedup_figure(history: list, labels: bool = True) -> go.Figure:
    """Theory curves (speedup vs alpha, one per k, at the latest measured c) with the session's
    runs: filled points are measured speedups (race), hollow ones the theory at a run's own
    alpha, k and c. `labels=False`: the measured points without their text (many runs: hover)."""
    c = latest_c(history)
    fig = go.Figure()
    if c is None:
        return _note(fig, "Run speculative decoding (Run or Race) to measure c and draw the theory.")
    alphas = [i / 100 for i in range(0, 100)]
    for k in sorted(set(K_CURVES) | {r["k"] for r in history if _int_k(r.get("k")) and r["k"] > 0}):
        fig.add_scatter(x=alphas, y=[theory.speedup(a, k, c) for a in alphas], mode="lines",
                        name=f"theory k = {k}", line=dict(color=K_COLORS.get(k, "#475569"), width=3))
    fig.add_hline(y=1.0, line=dict(color="#0f172a", dash="dot"), annotation_text="break-even (1×)",
                  annotation_position="top left")
    _add_runs(fig, [r for r in history if r.get("alpha") is not None], labels)
    fig.update_layout(title=f"Speedup vs acceptance rate α (theory at measured c = {c:.2f})",
                      xaxis_title="α (accepted / judged)", yaxis_title="speedup over autoregressive",
                      xaxis_range=[0, 1], legend=dict(orientation="v"), **LAYOUT)
    fig.update_yaxes(gridcolor="#e2e8f0", rangemode="tozero")
    return fig


def _int_k(k) -> bool:
    return isinstance(k, int) and not isinstance(k, bool)


def _lossy(record: dict) -> bool:
    return record.get("lossless") is False


def _measured_color(record: dict) -> str:
    if record.get("speedup_unreliable"):
        return "#cbd5e1"  # greyed: timed on a busy machine (charts.summarize)
    return "#dc2626" if _lossy(record) else "#f59e0b"


def _measured_label(record: dict) -> str:
    marks = (" LOSSY" if _lossy(record) else "") + (" (busy: unreliable)" if record.get("speedup_unreliable") else "")
    return f"{record['speedup']:.2f}× {record.get('method') or ''}{marks}"


def _add_runs(fig: go.Figure, runs: list, labels: bool = True) -> None:
    measured = [r for r in runs if r.get("speedup") is not None]
    predicted = [r for r in runs if r.get("c") and isinstance(r.get("k"), (int, float)) and r["k"] > 0]
    if predicted:
        fig.add_scatter(x=[r["alpha"] for r in predicted],
                        y=[theory.speedup(r["alpha"], r["k"], r["c"]) for r in predicted],
                        mode="markers", name="theory at a run's α, k, c",
                        marker=dict(size=13, symbol="circle-open", line=dict(width=3), color="#0f172a"),
                        text=[_hover(r) for r in predicted], hovertemplate="%{text}<extra></extra>")
    if measured:
        fig.add_scatter(x=[r["alpha"] for r in measured], y=[r["speedup"] for r in measured],
                        mode="markers+text" if labels else "markers", name="measured (race)", textposition="top center",
                        marker=dict(size=16, symbol=["x" if _lossy(r) else "diamond" for r in measured],
                                    color=[_measured_color(r) for r in measured],
                                    line=dict(width=2, color="#0f172a")),
                        text=[_measured_label(r) for r in measured],
                        customdata=[_hover(r) for r in measured], hovertemplate="%{customdata}<extra></extra>")


def _hover(record: dict) -> str:
    k = record.get("k_setting", record.get("k"))
    if k == "auto" and isinstance(record.get("k"), (int, float)):
        k = f"auto (mean {record['k']:.1f})"
    setting = (f"{record.get('method') or ''} k={k}, T={record['temperature']}, "
               f"{'chat' if record['chat'] else 'plain'}")
    lossy = " · LOSSY (typical acceptance)" if _lossy(record) else ""
    return text(f"{record.get('label') or record['prompt'][:40]} ({setting}): α {num(record['alpha'], 2)}, "
                f"c {num(record['c'], 2)}, τ {num(record['tau'], 2)}{lossy}")


def tau_histogram(events) -> go.Figure:
    """How many tokens each target forward produced, with the iid-acceptance prediction."""
    run = st.build(events)
    counts = [len(s.summary["emitted_ids"]) for s in run.steps if s.finished]
    fig = go.Figure()
    if not counts:
        return _note(fig, "No finished step yet.")
    m = st.run_metrics(events)
    a, k = m.get("alpha_empirical"), m.get("k")
    if run.method == "tree" or not _int_k(k):  # the iid chain model needs one fixed draft length
        k = None
    top = max(counts + [k + 1 if k is not None else 1])
    xs = list(range(1, top + 1))
    fig.add_bar(x=xs, y=[counts.count(n) for n in xs], name="steps (measured)", marker_color="#2563eb",
                hovertemplate="%{y} step(s) emitted %{x} token(s)<extra></extra>")
    if a is not None and k is not None and k > 0 and top == k + 1:
        expected = [len(counts) * (a ** (n - 1) * (1 - a) if n <= k else a ** k) for n in xs]
        fig.add_scatter(x=xs, y=expected, mode="markers+lines", name=f"iid model at α = {a:.2f}",
                        line=dict(color="#f59e0b", dash="dash"), marker=dict(size=10))
    fig.update_layout(title=f"Tokens per target forward (τ = {num(m.get('tau'), 2)})",
                      xaxis_title="tokens emitted by one target forward", yaxis_title="steps",
                      xaxis=dict(dtick=1), **LAYOUT)
    return fig


def position_figure(events) -> go.Figure:
    """Acceptance at each draft index i: accepted at i / judged at i (a draft is judged only if
    every earlier draft of its step was accepted). For trees, per depth: steps whose walk
    accepted a node at depth i / steps whose walk reached depth i (as specviz.analysis.metrics counts)."""
    run = st.build(events)
    judged, accepted = [], []

    def count(i: int, ok: bool) -> None:
        while len(judged) <= i:
            judged.append(0)
            accepted.append(0)
        judged[i] += 1
        accepted[i] += ok

    for step in run.steps:
        if step.is_tree:
            levels = max((n.depth for n in step.nodes), default=0)
            path = len(step.path)
            for i in range(min(path + 1, levels)):
                count(i, i < path)
            continue
        for token in step.drafted:
            if token.status in ("accepted", "rejected"):
                count(token.index, token.status == "accepted")
    fig = go.Figure()
    if not judged:
        return _note(fig, "No drafts judged yet (autoregressive runs draft nothing).")
    tree = run.method == "tree"
    rates = [acc / n if n else None for acc, n in zip(accepted, judged)]
    fig.add_bar(x=[f"depth {i + 1}" if tree else f"draft {i + 1}" for i in range(len(judged))], y=rates,
                marker_color="#16a34a", name="accepted / reached" if tree else "accepted / judged",
                text=[f"{acc}/{n}" for acc, n in zip(accepted, judged)], textposition="outside")
    alpha = st.run_metrics(events).get("alpha_empirical")
    if alpha is not None:
        fig.add_hline(y=alpha, line=dict(color="#0f172a", dash="dot"), annotation_text=f"α = {alpha:.2f}")
    if tree:
        fig.update_layout(title="Acceptance by tree depth", xaxis_title="depth in the draft tree",
                          yaxis_title="steps accepting a node / reaching the depth", yaxis_range=[0, 1.15], **LAYOUT)
    else:
        fig.update_layout(title="Acceptance by draft position", xaxis_title="draft index in the step",
                          yaxis_title="accepted / judged", yaxis_range=[0, 1.15], **LAYOUT)
    return fig


def alpha_explainer(events) -> str:
    """Markdown: this run's alpha next to accepted/drafted, and why they differ."""
    m = st.run_metrics(events)
    if not m.get("drafted"):
        return "Run speculative decoding to compare α with accepted/drafted."
    # a trace's metrics may lack keys (older runs) or say None: each number read with .get, shown by num()
    a, k, accepted, evaluated = m.get("alpha_empirical"), m.get("k"), m.get("accepted", 0), m.get("evaluated", 0)
    wasted = m["drafted"] - evaluated
    ratios = (f"**α = accepted / judged = {accepted}/{evaluated} = {num(a, 2)}**, but "
              f"**accepted / drafted = {accepted}/{m['drafted']} = {num(m.get('accepted_per_drafted'), 2)}**.")
    if m.get("method") == "tree":
        return (f"{ratios}\n\n"
                f"A tree drafts many alternatives and keeps at most one path: the {wasted} nodes the walk never "
                "judged (grey in the tree) count as drafted. α counts every judged node, rejected siblings "
                "included; τ (tokens per target forward) is what a tree buys.")
    lines = [ratios,
             f"The difference is the {wasted} grey *wasted* drafts: after the first rejection in a step, "
             "the later drafts are thrown away without being judged, so they count as drafted but were "
             "never given a chance. α is the acceptance probability of a token the rule actually looked at."]
    if _int_k(k) and k > 0 and a is not None and 0 < a:
        lines.append(f"For independent acceptance at α = {a:.2f} and k = {k}, theory predicts "
                     f"accepted/drafted = α(1 − α^k) / (k(1 − α)) = {theory.accepted_per_drafted(a, k):.2f}. "
                     f"The exact mean of β over judged positions (the engine's α analytic) is "
                     f"{num(m.get('alpha_analytic'), 2)}.")
    if m.get("lossless") is False:
        lines.append("**LOSSY run (typical acceptance):** drafts were kept when the target found them typical "
                     "enough, so α here is not the acceptance rate of exact speculative decoding.")
    return "\n\n".join(lines)


# ---------------------------------------------------------------------------------------------
# latency: the stream as its reader sees it (definitions in specviz.render.race)

RUN_COLORS = ("#64748b", "#7c3aed", "#16a34a", "#ea580c", "#0ea5e9", "#db2777", "#2563eb")


def stream_figure(runs: dict, title: str = "Tokens on screen over time") -> go.Figure:
    """{label: events}: tokens visible against the run clock (s), a staircase per run. Each
    riser is one step_finished: one token per step for autoregressive decoding, several at once
    for speculation. The first riser comes at the time to first token."""
    fig = go.Figure()
    for color, (label, events) in zip(RUN_COLORS, runs.items()):
        updates = stream_updates(events)
        if not updates:
            continue
        xs, ys, shown = [0.0], [0], 0
        for t, n, _ in updates:
            shown += n
            xs.append(t)
            ys.append(shown)
        fig.add_scatter(x=xs, y=ys, mode="lines+markers", line_shape="hv", name=text(label),
                        line=dict(color=color, width=3), marker=dict(size=6),
                        hovertemplate="%{y} tokens at %{x:.3f} s<extra>" + text(label) + "</extra>")
    if not fig.data:
        return _note(fig, "No step finished yet.")
    fig.update_layout(title=text(title), xaxis_title="run clock (s)", yaxis_title="tokens shown", **LAYOUT)
    fig.update_yaxes(gridcolor="#e2e8f0", rangemode="tozero")
    return fig


def gap_figure(runs: dict, title: str = "How long a reader waits for each token") -> go.Figure:
    """{label: events}: the empirical CDF of each run's per-token arrival gaps (ms; after the
    first update): the share of tokens that waited at most x. Autoregressive decoding climbs at
    one value; speculation jumps at 0 (tokens that came with another) and again at its step's
    gap. p50 and p95 are in the legend."""
    fig = go.Figure()
    for color, (label, events) in zip(RUN_COLORS, runs.items()):
        gaps = sorted(g * 1000 for g in arrival_gaps(events))
        if not gaps:
            continue
        n = len(gaps)
        fig.add_scatter(x=[gaps[0]] + gaps, y=[0.0] + [(i + 1) / n for i in range(n)], mode="lines", line_shape="hv",
                        name=text(f"{label}: p50 {percentile(gaps, 50):.0f} ms, p95 {percentile(gaps, 95):.0f} ms"),
                        line=dict(color=color, width=3),
                        hovertemplate="%{y:.0%} of tokens waited ≤ %{x:.0f} ms<extra></extra>")
    if not fig.data:
        return _note(fig, "Too few steps to have gaps: run more tokens.")
    fig.update_layout(title=text(title), xaxis_title="wait since the previous token appeared (ms)",
                      yaxis_title="share of tokens", yaxis_range=[0, 1.05], **LAYOUT)
    fig.update_yaxes(gridcolor="#e2e8f0", tickformat=".0%")
    return fig


def acceptance_survival(events) -> Optional[dict]:
    """How far into its draft each step got: survival[i] = share of steps with accepted length
    >= i (i = 0..k; survival[0] = 1), over the steps of a fixed-k chain run that drafted all k
    tokens (the last step, cut by max_new_tokens or an end-of-text draft, is left out). With
    independent acceptance survival[i] = alpha^i. Also: k, steps counted, the run's alpha
    (accepted / judged, every step) and the mean accepted length of the counted steps, which is
    sum(survival[1:]). None for runs without one fixed draft length (ar, tree, k="auto")."""
    events = [st.as_dict(e) for e in events]
    started = next((e for e in events if e.get("kind") == "run_started"), {})
    k = started.get("k")
    if started.get("method") in ("ar", "tree", "lookahead") or not _int_k(k) or k < 1:
        return None
    full = [e["accepted"] for e in events if e.get("kind") == "step_finished" and e["drafted"] == k]
    if not full:
        return None
    survival = [sum(1 for a in full if a >= i) / len(full) for i in range(k + 1)]
    m = st.run_metrics(events)
    return {"k": k, "steps": len(full), "survival": survival, "alpha": m.get("alpha_empirical"),
            "mean_accepted": sum(full) / len(full)}


def survival_figure(runs: dict, title: str = "Acceptance decays with depth") -> go.Figure:
    """{label: events}: P(accepted length >= i) by depth i (solid), beside alpha^i at each run's
    own alpha (dashed): what independent acceptance would give."""
    fig = go.Figure()
    for color, (label, events) in zip(RUN_COLORS[1:], runs.items()):
        surv = acceptance_survival(events)
        if surv is None:
            continue
        depths = list(range(surv["k"] + 1))
        fig.add_scatter(x=depths, y=surv["survival"], mode="lines+markers", line=dict(color=color, width=3),
                        marker=dict(size=9), name=text(f"{label}: measured ({surv['steps']} steps)"),
                        hovertemplate="P(accepted ≥ %{x}) = %{y:.2f}<extra></extra>")
        if surv["alpha"] is not None:
            a = surv["alpha"]
            fig.add_scatter(x=depths, y=[a ** i for i in depths], mode="lines", line=dict(color=color, dash="dash"),
                            name=text(f"{label}: α^i, α = {a:.2f}"), hoverinfo="skip")
    if not fig.data:
        return _note(fig, "No fixed-k chain run with a full draft: run spec, pld or cascade with a fixed k.")
    fig.update_layout(title=text(title), xaxis_title="depth i (drafts accepted in a row)",
                      yaxis_title="share of steps with accepted length ≥ i", yaxis_range=[0, 1.05],
                      xaxis=dict(dtick=1), **LAYOUT)
    fig.update_yaxes(gridcolor="#e2e8f0")
    return fig


def interval_figure(rows: list, title: str = "Every run, the mean and its 95% interval") -> go.Figure:
    """rows: [{"metric", "values", "mean", "low", "high"}, optionally "labels" (one per value) and
    "reference" (a dotted line, e.g. 1 for a speedup)]: one panel per metric, each run a dot, the
    mean a diamond with its interval."""
    from plotly.subplots import make_subplots

    rows = [r for r in rows if r.get("values")]
    if not rows:
        return _note(go.Figure(), "No runs yet.")
    fig = make_subplots(rows=1, cols=len(rows), subplot_titles=[text(r["metric"]) for r in rows])
    for col, row in enumerate(rows, 1):
        values = row["values"]
        labels = [text(lab) for lab in row.get("labels") or [""] * len(values)]
        spread = [0.25 * ((i % 5) - 2) / 2 for i in range(len(values))]  # a little sideways, to see each dot
        fig.add_scatter(x=spread, y=values, mode="markers", marker=dict(size=10, color="#94a3b8", line=dict(width=1)),
                        text=labels, hovertemplate="%{text}: %{y:.3f}<extra>one run</extra>", showlegend=col == 1,
                        name="one run", row=1, col=col)
        fig.add_scatter(x=[0.8], y=[row["mean"]], mode="markers",
                        marker=dict(size=14, symbol="diamond", color="#7c3aed"),
                        error_y=dict(type="data", symmetric=False, array=[row["high"] - row["mean"]],
                                     arrayminus=[row["mean"] - row["low"]], thickness=3, width=10, color="#7c3aed"),
                        hovertemplate=f"mean {row['mean']:.3f} [{row['low']:.3f}, {row['high']:.3f}]<extra></extra>",
                        showlegend=col == 1, name="mean, 95% interval", row=1, col=col)
        if row.get("reference") is not None:
            fig.add_hline(y=row["reference"], line=dict(color="#0f172a", dash="dot"), row=1, col=col)
        fig.update_xaxes(visible=False, range=[-0.6, 1.3], row=1, col=col)
        fig.update_yaxes(gridcolor="#e2e8f0", row=1, col=col)
    fig.update_layout(title=text(title), **LAYOUT)
    return fig


def _note(fig: go.Figure, message: str) -> go.Figure:
    fig.add_annotation(text=text(message), x=0.5, y=0.5, xref="paper", yref="paper", showarrow=False,
                       font=dict(size=16, color="#64748b"))
    fig.update_layout(xaxis_visible=False, yaxis_visible=False, **{**LAYOUT, "height": 300})
    return fig
