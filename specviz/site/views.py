"""A recording's views as the site plays them: frames drawn by the app's and notebooks' renderers.

Nothing here draws: each function calls specviz.render (chips, panel, inspector, tree, race,
timeline, serving, charts) at every step of a recorded run and keeps what they return, the
HTML as strings and the figures as Plotly's JSON, so a page without Python shows exactly what
the app shows at that step. The codec (specviz.site.codec) stores consecutive frames as edits of
one another.

Clocks. A race steps its two lanes in turn, so a step's `elapsed` (seconds since its run started)
counts the other lane's steps too. The gallery keeps each lane's own clock after every step
(specviz.bench.gallery: `clock`), and that is the time the views show and the race replays. A
recording made without it (the app's presets) gets each step's share of its lane's measured
total in proportion to the step's draft and verify time (`own_clock`).
"""

from __future__ import annotations

import json
from typing import Optional

from specviz import methods
from specviz.analysis import overlap
from specviz.render import chips, inspector, panel, race, serving, steps as st, timeline, tree
from specviz.render.charts import speedup_figure, summarize
from specviz.render.page import figure_json as figure
from specviz.site.codec import delta

# ---------------------------------------------------------------------------------------------
# clocks


def step_ends(events: list) -> list:
    """Index just past each step's step_finished (the last step's: past run_finished)."""
    ends = [i + 1 for i, e in enumerate(events) if e["kind"] == "step_finished"]
    if ends and events[-1]["kind"] == "run_finished":
        ends[-1] = len(events)
    return ends


def own_clock(events: list, busy: float, clock: Optional[list] = None) -> list:
    """The lane's own compute seconds at the end of each step: the recorded clock, else the
    lane's measured total `busy` shared out in proportion to each step's draft + verify time."""
    if clock:
        return [float(seconds) for _, seconds in clock]
    work = [e["draft_time"] + e["verify_time"] for e in events if e["kind"] == "step_finished"]
    total, so_far, out = sum(work) or 1.0, 0.0, []
    for w in work:
        so_far += w
        out.append(round(busy * so_far / total, 4))
    return out


def on_own_clock(events: list, seconds: list) -> list:
    """The events with each step's `elapsed` replaced by the lane's own clock (for views that
    draw time, such as the SSD timeline)."""
    out, step = [], 0
    for e in events:
        if e["kind"] == "step_finished" and step < len(seconds):
            e = {**e, "elapsed": seconds[step]}
            step += 1
        out.append(e)
    return out


# ---------------------------------------------------------------------------------------------
# the step view


def step_view(events: list, seconds: list, with_inspector: bool = True) -> dict:
    """Frame c (c = -1 is the prompt alone): the text up to step c with step c marked, its panel,
    the counters so far, the draft tree (tree methods) and the inspector at the step's default
    position (the rejection, else the last), each as the app's step view draws it."""
    run = st.build(events)
    ends = step_ends(events)
    shows_tree = any(s.is_tree for s in run.steps)
    frames = {"text": [], "panel": [], "stats": [], "tree": [], "inspector": []}
    for c in range(-1, len(run.steps)):
        upto = ends[c] if c >= 0 else next((i for i, e in enumerate(events) if e["kind"] != "run_started"), 1)
        so_far = run if upto == len(events) else st.build(events[:upto])
        frames["text"].append(chips.run_text(run, upto=c, selected=c).html)
        frames["panel"].append(panel.step_panel(run, c).html)
        frames["stats"].append(panel.stats(so_far, st.run_metrics(events[:upto]), seconds[c] if c >= 0 else 0.0).html)
        if shows_tree:
            frames["tree"].append(tree.tree_view(run.step(c), run.greedy, len(run.steps)).html)
        if with_inspector:
            # before the first step there is no position to inspect: the page hides the figure ("")
            frames["inspector"].append(json.dumps(figure(inspector.inspector_figure(run, c)), sort_keys=True)
                                       if c >= 0 else "")
    return {"steps": len(run.steps), "lossless": run.lossless, "method": run.method,
            "legend": chips.legend([s for s in st.STATUSES if s != "target"] if run.method != "ar" else ["target"]).html,
            **{name: delta(values) for name, values in frames.items() if values}}


# ---------------------------------------------------------------------------------------------
# the race


def race_view(run_events: list, ar_events: list, run_seconds: list, ar_seconds: list) -> dict:
    """Both lanes as the app's race draws them after each of their steps, with the time of each
    frame on the lane's own clock, and the verdict the finished race shows."""
    scale = race.gap_scale(ar_events, run_events)
    lanes = {}
    for name, events, seconds, title, subtitle in (
            ("ar", ar_events, ar_seconds, "Autoregressive", "target only: one forward per token"),
            ("run", run_events, run_seconds, "Speculative", methods.setting(run_events[0]))):
        ends = step_ends(events)
        frames = [race.lane_html(events[:1], 0.0, title, subtitle, False, scale).html]
        frames += [race.lane_html(events[:end], seconds[j], title, subtitle, end == len(events), scale).html
                   for j, end in enumerate(ends)]
        lanes[name] = {"times": [0.0] + [round(s, 4) for s in seconds], "frames": delta(frames)}
    ar = summarize(ar_events, ar_seconds[-1], label="race: autoregressive")
    lossy = "" if st.build(run_events[:1]).lossless else " (LOSSY)"
    spec = summarize(run_events, run_seconds[-1], label=f"race: {run_events[0].get('method')}{lossy}", baseline=ar)
    runs = [st.build(events) for events in (ar_events, run_events)]
    same = (runs[0].finished["token_ids"] == runs[1].finished["token_ids"]
            if all(r.finished and r.deterministic for r in runs) else None)
    return {"lanes": lanes, "verdict": race.verdict(ar, spec, same).html, "speedup": spec["speedup"],
            "record": _record(spec)}


def _record(spec: dict) -> dict:
    """What the speedup explorer places: the run's alpha, k, c, tau and measured speedup."""
    keep = ("label", "method", "k", "k_setting", "lossless", "rule", "temperature", "chat", "prompt", "tokens",
            "seconds", "alpha", "tau", "c", "speedup", "speedup_unreliable", "timing_note")
    return {key: spec.get(key) for key in keep}


# ---------------------------------------------------------------------------------------------
# the SSD timeline, the serving view, the speedup explorer


def timeline_view(runs: list) -> dict:
    """[(label, events on their own clock), ...] as the SSD view's lanes figure."""
    return figure(timeline.timeline_figure([(label, overlap.timeline(events)) for label, events in runs]))


def serving_view(ar_events: list, run_events: list, recorded: str) -> dict:
    """A recorded batch: both lanes' cards and verdict, and the rows table after each shared pass."""
    passes = sum(e["kind"] == "batch_step" for e in run_events)
    return {"summary": serving.serving_html(ar_events, run_events, recorded=recorded).html, "passes": passes,
            "rows": delta([serving.rows_table(run_events, most_passes=j).html for j in range(1, passes + 1)]),
            "point": serving.compare(serving.batch_summary(ar_events), serving.batch_summary(run_events))}


def batch_figure(sweep: dict, points: list) -> dict:
    return figure(serving.batch_speedup_figure(sweep, points))


def explorer_figure(records: list) -> dict:
    """The app's speedup chart over the recorded runs: theory curves at their c, every run placed."""
    return figure(speedup_figure(records, labels=False))  # over a hundred runs: their labels on hover
