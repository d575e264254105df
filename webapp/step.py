"""The step view: the run's text as chips, replay step by step, the step panel, the draft tree
and its attention mask (tree runs), the inspector of p and q, and opening a saved trace."""

from __future__ import annotations

import html

import gradio as gr

import specviz
from specviz.errors import SpecvizError
from specviz.events import split_rows
from specviz.render import charts as chart_render, chips, inspector, panel, steps, tree
from specviz.render.html import quoted
from specviz.render.race import Lane
from webapp import charts
from webapp.common import CHIP_CLICK_JS, check_request, get_pair, gpu, in_line, options, ui
from webapp.settings import run_inputs
from webapp.traces import read_trace


@gpu
def stream_run(pair_name: str, prompt: str, cfg, draft_quant: str = "none"):
    """One run's events as plain dicts, one step per item, with the run's own compute clock."""
    lane = Lane("run", specviz.generate(get_pair(pair_name, draft_quant=draft_quant), prompt, cfg))
    while not lane.done:
        yield {"events": lane.advance(), "busy": lane.busy}


def step_view(events: list, number: int = None, index: int = None, busy: float = None) -> dict:
    """Everything the step view shows up to step `number` (0-based; -1: the prompt alone;
    default: the last step). The slider counts steps from 1, with 0 for the prompt alone."""
    run = steps.build(events)
    n = len(run.steps)
    number = n - 1 if number is None else max(-1, min(int(number), n - 1))
    step = run.step(number)
    if step is None or not step.tokens:
        index = None
    elif index not in step.indices():
        index = inspector.default_index(step)
    return {
        ui.text_html: chips.run_text(run, upto=number, selected=number).html,
        ui.panel_html: panel.step_panel(run, number).html,
        ui.stats_html: panel.stats(run, steps.run_metrics(events), busy).html,
        ui.step_slider: gr.Slider(minimum=0, maximum=max(1, n), value=number + 1),
        ui.position: gr.Radio(choices=_position_choices(step), value=index),
        ui.inspector_plot: inspector.inspector_figure(run, number, index),
        **tree_outputs(run, step),
    }


def tree_outputs(run, step) -> dict:
    """The draft tree and its attention mask: shown for tree runs only."""
    shown = run.method == "tree" or any(s.is_tree for s in run.steps)
    if not shown:
        return {ui.tree_view: gr.HTML(visible=False), ui.mask_plot: gr.Plot(visible=False)}
    return {ui.tree_view: gr.HTML(tree.tree_view(step, run.greedy, len(run.steps)).html, visible=True),
            ui.mask_plot: gr.Plot(tree.mask_figure(step), visible=True)}


def _position_choices(step) -> list:
    if step is None:
        return []
    choices = []
    for i in step.indices():
        tokens = step.at(i)
        label = " → ".join(f"{quoted(t.text)} {t.status}" for t in tokens)
        choices.append((f"{'depth ' + str(i + 1) if step.is_tree else '#' + str(i)}: {label}", i))
    return choices


def run(prompt, pair_name, method, k, temperature, top_p, max_new_tokens, seed, chat, auto_k=False,
        auto_rule="cost", confidence=0.4, acceptance="exact", ngram=3, tree_shape="3,2,1", tree_dynamic=False,
        tree_budget=16, draft_quant="none", history=None, progress=gr.Progress(), request: gr.Request = None):
    """Stream one run: one update per engine step; charts and history when it ends."""
    history = history or []
    check_request(pair_name, prompt, max_new_tokens, progress, draft_quant)
    cfg = options(method, k, temperature, top_p, max_new_tokens, seed, chat, auto_k, auto_rule, confidence,
                  acceptance, ngram, tree_shape, tree_dynamic, tree_budget, request)
    events, busy = [], 0.0
    try:
        for update in stream_run(pair_name, prompt, cfg, draft_quant):
            events, busy = events + update["events"], update["busy"]
            if events[-1]["kind"] != "run_finished":
                yield {**step_view(events, busy=busy), ui.events_state: events, ui.busy_state: busy}
    except SpecvizError as exc:
        raise gr.Error(str(exc)) from exc
    label = f"{method} run" + ("" if steps.build(events[:1]).lossless else " (LOSSY)")
    history = history + [chart_render.summarize(events, busy, label=label, baseline=_baseline(history, events))]
    yield {**step_view(events, busy=busy), **charts.chart_view(events, history), ui.events_state: events,
           ui.busy_state: busy, ui.history_state: history}


def _baseline(history: list, events: list):
    """The latest autoregressive run of this session with the same pair, prompt and sampling."""
    started = steps.build(events).started or {}
    if started.get("method") == "ar":
        return None
    same = ("pair", "temperature", "chat")
    return next((r for r in reversed(history) if r["method"] == "ar" and r["prompt"] == started["prompt"]
                 and all(r[key] == started[key] for key in same)), None)


def show(events, busy, number, index=None):
    """Replay: the slider's step `number` (1-based; 0 is the prompt alone)."""
    if not events:
        return {}
    return step_view(events, int(number) - 1, index, busy)


def shift(events, busy, number, delta):
    return show(events, busy, max(0, int(number) + delta))


def on_chip(events, busy, evt: gr.EventData):
    data = evt._data or {}
    if not events or "step" not in data:
        return {}
    return {**step_view(events, int(data["step"]), int(data["index"]), busy), ui.inspector_box: gr.Accordion(open=True)}


def toggle_play(playing, events, busy, number):
    playing = bool(events) and not playing
    out = {ui.timer: gr.Timer(active=playing), ui.play_btn: gr.Button("⏸ Pause" if playing else "▶ Play"),
           ui.playing_state: playing}
    n = len(steps.build(events).steps) if events else 0
    if playing and int(number) >= n:
        out.update(show(events, busy, 0))
    return out


def tick(events, busy, number):
    n = len(steps.build(events).steps) if events else 0
    if int(number) >= n:
        return {ui.timer: gr.Timer(active=False), ui.play_btn: gr.Button("▶ Play"), ui.playing_state: False}
    return show(events, busy, int(number) + 1)


def open_trace(file, history):
    """Replay a saved trace (JSONL from `python -m specviz generate --jsonl`, or gzipped): no model
    runs. A batched run's trace shows its first user here (its shared passes: the serving view).
    A public Space gets hostile files: each problem is answered with one sentence."""
    if file is None:
        return {}
    events = read_trace(file if isinstance(file, str) else file.name)
    note = ""
    if events[0]["kind"] == "batch_started":
        rows = split_rows(events)
        if not rows:
            raise gr.Error("The batched trace has no row's events: nothing to show.")
        first = min(rows)
        events = rows[first]
        note = (f'<div class="sv-recorded">A batched run of {len(rows)} users: this is user {first + 1}\'s '
                "stream.</div>")
        if events[0]["kind"] != "run_started":
            raise gr.Error("The batched trace's first row does not start with run_started: it cannot be shown.")
    try:
        shown = {**step_view(events), **charts.chart_view(events, history), ui.events_state: events,
                 ui.busy_state: None}
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
        # a last net: read_trace held every field to the schema's types and ranges, so what is left
        # is events that do not form one run in a way the schema cannot see
        raise gr.Error(html.escape(f"The trace's events cannot be shown: they do not form one run "
                                   f"({type(exc).__name__}: {exc}).", quote=False)) from exc
    shown[ui.stats_html] = note + shown[ui.stats_html]
    return shown


def build() -> None:
    with gr.Row():
        ui.run_btn = gr.Button("Run", variant="primary", scale=2)
        ui.stop_btn = gr.Button("Stop", variant="stop", scale=1)
    gr.HTML(chips.legend().html, elem_id="sv-legend")
    ui.stats_html = gr.HTML(label="stats", elem_id="sv-stats")
    ui.text_html = gr.HTML('<div class="sv-muted">Press Run to generate.</div>', label="text", elem_id="sv-text",
                           js_on_load=CHIP_CLICK_JS)
    with gr.Row():
        ui.prev_btn = gr.Button("◀ Prev", size="sm", scale=0, min_width=90)
        ui.play_btn = gr.Button("▶ Play", size="sm", scale=0, min_width=100)
        ui.next_btn = gr.Button("Next ▶", size="sm", scale=0, min_width=90)
        ui.step_slider = gr.Slider(0, 1, value=0, step=1, label="Step (0 = the prompt alone)", scale=4)
    ui.panel_html = gr.HTML(label="step", elem_id="sv-panel", js_on_load=CHIP_CLICK_JS)
    ui.tree_view = gr.HTML(label="draft tree", elem_id="sv-tree", visible=False, js_on_load=CHIP_CLICK_JS)
    ui.mask_plot = gr.Plot(label="tree attention mask", show_label=False, elem_id="sv-mask", visible=False)
    with gr.Accordion("Step inspector: p, q, their overlap and the residual", open=True) as ui.inspector_box:
        ui.position = gr.Radio([], label="Position in this step (or click a chip)")
        ui.inspector_plot = gr.Plot(label="inspector", show_label=False, elem_id="sv-inspector")
    with gr.Accordion("Open a saved trace (.jsonl)", open=False):
        ui.trace_file = gr.File(file_types=[".jsonl", ".gz"],
                                label="python -m specviz generate --jsonl ... > run.jsonl (or .jsonl.gz)")


def outputs() -> list:
    return [ui.text_html, ui.panel_html, ui.stats_html, ui.step_slider, ui.position, ui.inspector_plot, ui.tree_view,
            ui.mask_plot]


def wire(engine_queue: dict):
    """The step view's listeners; returns the live run's event (Stop cancels it)."""
    view = outputs()
    run_event = ui.run_btn.click(in_line(run, ui.stats_html), run_inputs(),
                                 view + charts.outputs() + [ui.events_state, ui.busy_state, ui.history_state],
                                 api_name="run", show_progress="minimal", **engine_queue)
    private = dict(api_visibility="private", show_progress="hidden")
    replay = [ui.events_state, ui.busy_state, ui.step_slider]
    ui.step_slider.release(show, replay, view, **private)
    ui.prev_btn.click(lambda e, b, n: shift(e, b, n, -1), replay, view, **private)
    ui.next_btn.click(lambda e, b, n: shift(e, b, n, +1), replay, view, **private)
    ui.position.input(show, replay + [ui.position], view, **private)
    for html in (ui.text_html, ui.panel_html):
        html.click(on_chip, [ui.events_state, ui.busy_state], view + [ui.inspector_box], **private)
    ui.play_btn.click(toggle_play, [ui.playing_state] + replay, view + [ui.timer, ui.play_btn, ui.playing_state],
                      **private)
    ui.timer.tick(tick, replay, view + [ui.timer, ui.play_btn, ui.playing_state], **private)
    ui.trace_file.upload(open_trace, [ui.trace_file, ui.history_state],
                         view + charts.outputs() + [ui.events_state, ui.busy_state],
                         api_name="open_trace", show_progress="minimal")
    return run_event
