"""Serving: a batch of users sharing one target pass per step (specviz.engine.batch), drawn from the
batched run's events alone.

    batch_summary   the serving numbers of one batched run: the batch's decode tokens/s (the
                    prompts' pass left out), each user's tokens/s and inter-token latency, alpha,
                    the mean shared pass
    compare         a method's batch against plain decoding of the same batch: measured speedup
                    beside the one predicted from alpha and the two lanes' measured step costs
    rows_table      who accepted how many in each shared pass (rows x passes)
    serving_html    the two lanes side by side, and why speculation pays or not at this batch
    batch_speedup_figure   speedup against batch size: a recorded sweep (measured and theory),
                    the crossover marked, and the points of this session's runs

Why the speedup falls with batch size: a plain step feeds B tokens to the target, a speculative
one B x (k + 1). While the pass is bound by reading the weights (small B x (k + 1)) the extra
tokens ride along nearly free; past the knee each extra token costs arithmetic, and the drafts
that get rejected are paid for in full. specviz.analysis.theory.batch_speedup.
"""

from __future__ import annotations

import math

import statistics
from typing import Optional

import plotly.graph_objects as go

from specviz.analysis import theory
from specviz.events import batch_events, split_rows
from specviz.render import steps as st
from specviz.render.html import Rendered, attr, num, text

BATCH_TICKS = (1, 2, 4, 8, 16, 32, 64)
LANE_COLORS = {"spec": "#7c3aed", "load": "#16a34a", "pld": "#0ea5e9", "medusa": "#db2777", "eagle": "#ea580c"}
LAYOUT = dict(height=440, font=dict(size=15), plot_bgcolor="white", margin=dict(l=60, r=20, t=70, b=60))


def batch_summary(events) -> dict:
    """The serving numbers of a batched run (finished or not) from its events."""
    events = [st.as_dict(e) for e in events]
    batch = batch_events(events)
    started = next((e for e in batch if e["kind"] == "batch_started"), None)
    if started is None:
        raise ValueError("not a batched run: no batch_started event")
    steps = [e for e in batch if e["kind"] == "batch_step"]
    finished = next((e for e in batch if e["kind"] == "batch_finished"), None)
    rows = split_rows(events)
    first = next(iter(rows.values()), [{}])[0] if rows else {}
    decode = steps[1:]  # the first step also ran every prompt through the target
    decode_s = steps[-1]["elapsed"] - steps[0]["elapsed"] if len(steps) > 1 else None
    decode_tokens = sum(sum(s["emitted"]) for s in decode)
    evaluated = sum(e.get("evaluated", 0) for evs in rows.values() for e in evs if e["kind"] == "step_finished")
    accepted = sum(sum(s["accepted"]) for s in steps)
    ks = [max(s["k"]) if s["k"] else 0 for s in decode]
    met = (finished or {}).get("metrics") or {}
    return {
        "rows": started["rows"], "method": started["method"], "k": started["k"], "pair": started["pair"],
        "device": started["device"], "dtype": started["dtype"], "lossless": first.get("lossless", True),
        "finished": finished is not None, "passes": len(steps),
        "tokens": sum(sum(s["emitted"]) for s in steps),
        "decode_tokens_per_s": decode_tokens / decode_s if decode_s else None,
        "user_tokens_per_s": met.get("user_tokens_per_s"), "itl_p50": met.get("itl_p50"),
        "itl_p95": met.get("itl_p95"), "ttft": met.get("ttft"),
        "alpha": accepted / evaluated if evaluated else None,
        "k_mean": statistics.fmean(ks) if ks else None,
        "k_varies": started["k"] in ("load", "auto"),  # chosen step by step (a fixed k only shrinks at the budget)
        "decode_tokens_per_row": decode_tokens / started["rows"] if decode else None,
        "tokens_per_row_pass": (sum(sum(s["emitted"]) for s in decode) / sum(len(s["rows"]) for s in decode)
                                if decode else None),
        "pass_s": statistics.fmean(s["verify_time"] for s in decode) if decode else None,
        "step_s": statistics.fmean(s["verify_time"] + s["draft_time"] for s in decode) if decode else None,
        "tokens_fed": statistics.fmean(s["tokens_fed"] for s in decode) if decode else None,
        "why_last": ((steps[-1].get("info") or {}).get("why") if steps else None),
    }


def compare(ar: dict, run: dict) -> dict:
    """A method's batch summary against plain decoding's, both at the same B: the measured
    speedup and the one theory predicts from the run's alpha and k and the two lanes' measured
    step costs (E[tokens per step] x plain step / speculative step, with the run's tail: its last
    steps draft no further than the budget, theory.expected_run_time). With k chosen per step
    (k="load" or "auto") no single k predicts the run: theory is left out."""
    measured = (run["decode_tokens_per_s"] / ar["decode_tokens_per_s"]
                if run.get("decode_tokens_per_s") and ar.get("decode_tokens_per_s") else None)
    predicted = None
    if (run.get("alpha") is not None and isinstance(run["k"], int) and run["k"] > 0 and ar.get("step_s")
            and run.get("step_s") and run.get("decode_tokens_per_row")):
        k, n = run["k"], max(1, round(run["decode_tokens_per_row"]))

        def step(kk: int) -> float:  # the last steps draft less (the budget): cost in proportion
            return ar["step_s"] + (run["step_s"] - ar["step_s"]) * kk / k

        predicted = ar["step_s"] / (theory.expected_run_time(min(run["alpha"], 0.999), k, n, step) / n)
    return {"batch": run["rows"], "method": run["method"], "k": run["k"], "speedup": measured, "theory": predicted,
            "alpha": run.get("alpha"), "pass_ratio": (run["step_s"] / ar["step_s"]
                                                     if run.get("step_s") and ar.get("step_s") else None),
            "ar_tokens_per_s": ar.get("decode_tokens_per_s"), "tokens_per_s": run.get("decode_tokens_per_s"),
            "lossless": run.get("lossless", True)}


def rows_table(events, most_passes: Optional[int] = None) -> Rendered:
    """Rows x shared passes: in each cell the tokens that user's row committed in that pass,
    shaded by the share of its drafts accepted (hover: drafted, accepted); a blank grey cell once
    the row has finished. The header gives each pass's k, its padded shape (rows x width) and the
    target's time for it: one pass, however many rows."""
    events = [st.as_dict(e) for e in events]
    steps = [e for e in events if e["kind"] == "batch_step"]
    started = {e["row"]: e for e in events if e["kind"] == "run_started" and e.get("row") is not None}
    if not steps:
        return Rendered('<div class="sv-muted">No shared pass yet.</div>')
    shown = steps if most_passes is None else steps[:most_passes]
    head = "".join(f'<th title="{attr(_pass_title(s))}">{s["step"] + 1}<br><small>{_k_label(s)}<br>'
                   f'{len(s["rows"])}×{s["width"]}<br>{1e3 * s["verify_time"]:.0f} ms</small></th>' for s in shown)
    body = []
    for row in sorted(started):
        cells, total = [], 0
        for s in shown:
            if row not in s["rows"]:
                cells.append('<td class="sv-gone"></td>')
                continue
            i = s["rows"].index(row)
            drafted, accepted, emitted = s["drafted"][i], s["accepted"][i], s["emitted"][i]
            total += emitted
            share = accepted / drafted if drafted else None
            shade = "" if share is None else f' style="background: rgba(22,163,74,{0.12 + 0.6 * share:.2f})"'
            tip = f"user {row + 1}, pass {s['step'] + 1}: drafted {drafted}, accepted {accepted}, committed {emitted}"
            cells.append(f'<td{shade} title="{attr(tip)}" data-row="{row}" data-accepted="{accepted}">{emitted}</td>')
        prompt = started[row].get("prompt", "")
        label = text(prompt.strip().splitlines()[0][:40] if prompt.strip() else "")
        body.append(f'<tr><td class="sv-user" title="{attr(prompt)}">{row + 1} · {label}</td>{"".join(cells)}'
                    f'<td><b>{total}</b></td></tr>')
    more = "" if len(shown) == len(steps) else f'<div class="sv-muted">{len(steps) - len(shown)} more passes…</div>'
    return Rendered(f'<div class="sv-batch"><table><thead><tr><th>user · prompt</th>{head}<th>tokens</th></tr>'
                    f'</thead><tbody>{"".join(body)}</tbody></table>{more}</div>')


def _k_label(step: dict) -> str:
    k = max(step["k"]) if step["k"] else 0
    return "k = 0 (plain)" if k == 0 else f"k = {k}"


def _pass_title(step: dict) -> str:
    why = (step.get("info") or {}).get("why")
    return (f"pass {step['step'] + 1}: {len(step['rows'])} rows, {step['tokens_fed']} tokens fed (padded to "
            f"{len(step['rows'])} × {step['width']}), target {1e3 * step['verify_time']:.0f} ms, drafting "
            f"{1e3 * step['draft_time']:.0f} ms" + (f"; k chosen because {why}" if why else ""))


def _lane_card(summary: dict, title: str, note: str) -> str:
    s = summary
    counters = [("batch tok/s", num(s.get("decode_tokens_per_s"), 2)),
                ("each user tok/s", num(s.get("user_tokens_per_s"), 2)),
                ("inter-token p50", _ms(s.get("itl_p50"))), ("p95", _ms(s.get("itl_p95"))),
                ("shared passes", str(s.get("passes", 0))), ("tokens / row / pass", num(s.get("tokens_per_row_pass"), 2)),
                ("mean pass", _ms(s.get("step_s"))), ("α", num(s.get("alpha"), 2))]
    cells = "".join(f'<div class="sv-counter"><b>{v}</b><span>{text(k)}</span></div>' for k, v in counters)
    lossy = "" if s.get("lossless", True) else '<div class="sv-lossy">LOSSY: typical acceptance</div>'
    done = " sv-done" if s.get("finished") else ""
    return (f'<div class="sv-lane{done}"><h3>{text(title)}</h3>{lossy}<div class="sv-muted">{text(note)}</div>'
            f'<div class="sv-counters">{cells}</div></div>')


def _ms(seconds) -> str:
    return "—" if seconds is None else f"{1e3 * seconds:.0f} ms"


def serving_html(ar_events, run_events, recorded: str = "") -> Rendered:
    """Plain decoding and the method, each a batch of the same B users, side by side, with the
    verdict and its reason (the cost of the wider pass against the tokens it brings)."""
    ar = batch_summary(ar_events) if ar_events else None
    run = batch_summary(run_events) if run_events else None
    cards = []
    if ar:
        cards.append(_lane_card(ar, f"Plain decoding, B = {ar['rows']}", "one target pass per step: B rows × 1 token"))
    if run:
        k = run["k"]
        how = ("k chosen each step from α and the pass's measured cost (0 = plain)" if k == "load"
               else f"k = {k}: B rows × {k + 1} tokens per pass" if isinstance(k, int) else f"k = {k}")
        cards.append(_lane_card(run, f"{run['method']}, B = {run['rows']}", how))
    verdict = ""
    if ar and run and ar["finished"] and run["finished"]:
        c = compare(ar, run)
        if c["speedup"] is not None:
            win = c["speedup"] >= 1
            reason = (f"each shared pass brought {num(run['tokens_per_row_pass'], 2)} tokens per user and cost "
                      f"{num(c['pass_ratio'], 2)}× a plain step")
            pred = "" if c["theory"] is None else f"; theory from α and those costs: {c['theory']:.2f}×"
            verdict = (f'<div class="sv-verdict {"sv-win" if win else "sv-lose"}">At B = {run["rows"]}, {text(run["method"])} '
                       f'gave {c["speedup"]:.2f}× the batch\'s tokens/s of plain decoding</div>'
                       f'<div class="sv-note">{text(reason + pred)}.</div>')
    note = f'<div class="sv-recorded" data-recorded="1">{text(recorded)}</div>' if recorded else ""
    return Rendered(f'{note}<div class="sv-serving">{"".join(cards)}</div>{verdict}')


def batch_speedup_figure(sweep: Optional[dict] = None, points: Optional[list] = None) -> go.Figure:
    """Speedup over plain decoding against batch size. `sweep` is a bench.batched report's
    "analysis" (measured speedups per lane and the theory of spec from alpha and the measured
    cost table, with the crossovers); `points` are compare() results of this session's runs."""
    fig = go.Figure()
    rows = (sweep or {}).get("rows") or []
    if rows:
        xs = [r["batch"] for r in rows]
        fig.add_scatter(x=xs, y=[r["theory_speedup"] for r in rows], mode="lines", name="spec theory (α, cost table)",
                        line=dict(color=LANE_COLORS["spec"], dash="dash", width=2))
        for lane, key in (("spec", "measured_speedup"), ("load", "load_speedup"), ("pld", "pld_speedup"),
                          ("medusa", "medusa_speedup")):
            ys = [r.get(key) for r in rows]
            if any(y is not None for y in ys):
                fig.add_scatter(x=xs, y=ys, mode="lines+markers", name=f"{lane} measured (recorded sweep)",
                                line=dict(color=LANE_COLORS[lane], width=3 if lane in ("spec", "load") else 2),
                                marker=dict(size=9))
        crossing = sweep.get("crossover_measured")
        if crossing:
            # a shape on a log axis is placed in log10 units (at x=crossing, plotly.js drew it at 10**crossing)
            fig.add_vline(x=math.log10(crossing), line=dict(color="#b91c1c", dash="dot"),
                          annotation_text=f"speculation stops paying: B = {crossing}", annotation_position="top right")
    for p in points or []:
        if p.get("speedup") is None:
            continue
        color = LANE_COLORS.get("load" if p.get("k") == "load" else p.get("method"), "#0f172a")
        fig.add_scatter(x=[p["batch"]], y=[p["speedup"]], mode="markers", showlegend=False,
                        marker=dict(symbol="star", size=16, color=color, line=dict(color="#0f172a", width=1)),
                        hovertext=f"{p.get('label', 'your run')}: {p['method']} k={p['k']}, B={p['batch']}, "
                                  f"{p['speedup']:.2f}×" + ("" if p.get("theory") is None
                                                            else f" (theory {p['theory']:.2f}×)"),
                        hoverinfo="text")
    if not rows and not any(p.get("speedup") is not None for p in points or []):
        fig.add_annotation(text="Serve a batch (or pick a recorded batch size) to draw speedup against batch size.",
                           x=0.5, y=0.5, xref="paper", yref="paper", showarrow=False, font=dict(size=16, color="#64748b"))
    fig.add_hline(y=1.0, line=dict(color="#0f172a", dash="dot"), annotation_text="break-even (1×)",
                  annotation_position="bottom left")
    fig.update_layout(title="Speedup against batch size: one shared target pass per step",
                      xaxis_title="users in the batch (B)", yaxis_title="batch tokens/s over plain decoding",
                      legend=dict(orientation="v"), **LAYOUT)
    fig.update_xaxes(type="log", tickvals=list(BATCH_TICKS), ticktext=[str(b) for b in BATCH_TICKS],
                     gridcolor="#e2e8f0")
    fig.update_yaxes(gridcolor="#e2e8f0", rangemode="tozero")
    return fig


def pass_cost_figure(points: dict, k: int) -> go.Figure:
    """The cost of one target pass against batch size: B rows of 1 token (a plain step) and of
    k + 1 tokens (a speculative step's verification), from a cost table {(rows, width): seconds}
    or its JSON form {"rows": {"width": seconds}}; the ratio of the two on a second axis. While
    the ratio stays near 1 the drafts ride along free; it climbs towards k + 1 as the pass turns
    from reading weights to arithmetic."""
    table = _table(points)
    rows = sorted({r for r, w in table if (r, 1) in table and (r, k + 1) in table})
    fig = go.Figure()
    if not rows:
        return fig
    plain = [1e3 * table[(r, 1)] for r in rows]
    wide = [1e3 * table[(r, k + 1)] for r in rows]
    fig.add_scatter(x=rows, y=plain, mode="lines+markers", name="B rows × 1 token (a plain step)",
                    line=dict(color="#64748b", width=3))
    fig.add_scatter(x=rows, y=wide, mode="lines+markers", name=f"B rows × {k + 1} tokens (verifying k = {k})",
                    line=dict(color=LANE_COLORS["spec"], width=3))
    fig.add_scatter(x=rows, y=[w / p for w, p in zip(wide, plain)], mode="lines+markers", yaxis="y2",
                    name="ratio (right axis)", line=dict(color="#b45309", dash="dash"))
    fig.update_layout(title="One target pass against batch size", xaxis_title="rows in the pass (B)",
                      yaxis_title="ms per pass", legend=dict(orientation="h", y=-0.25),
                      yaxis2=dict(title=f"{k + 1}-token pass ÷ 1-token pass", overlaying="y", side="right",
                                  rangemode="tozero", showgrid=False),
                      **{**LAYOUT, "margin": dict(l=60, r=70, t=70, b=60)})
    fig.update_xaxes(type="log", tickvals=[b for b in BATCH_TICKS if b <= max(rows)] or rows,
                     gridcolor="#e2e8f0")
    fig.update_yaxes(gridcolor="#e2e8f0", rangemode="tozero")
    return fig


def _table(points: dict) -> dict:
    """{(rows, width): seconds} from a table or its JSON form {"rows": {"width": seconds}}."""
    if all(isinstance(key, tuple) for key in points):
        return dict(points)
    return {(int(r), int(w)): s for r, widths in points.items() for w, s in widths.items()}
