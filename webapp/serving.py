"""Serving: B users decoded together, one target pass per step for all of them (specviz.engine.batch),
plain decoding and the chosen method side by side: the batch's tokens/s, each user's tokens/s
and inter-token latency, speedup against batch size with the crossover marked, and the rows of
every shared pass (who accepted how many).

Recorded runs (specviz.bench.recordings: B = 1 .. 32 on the real pair, with the bench's sweep) show at
once and never wait for the engine; a live batch is bounded (users, tokens) and takes its turn on
the engine's line like every live run. The users' prompts are the serving bank's first B.
"""

from __future__ import annotations

import threading
import uuid

import gradio as gr

import specviz
from specviz import methods
from specviz.bench import recordings as recorded
from specviz.errors import SpecvizError, env_number
from specviz.prompts import SERVING_BANK
from specviz.render import serving as render
from webapp.common import MAX_TOKENS, allowed_pair, gpu, in_line, load, ui, whole
from webapp.presets import serialised

MAX_SERVE_BATCH = 32  # the slider's end: the recorded runs go this far
# Live batches a visitor may ask for: a batch of 32 speculative rows on a 2-core CPU takes minutes
# (the recorded runs show it at once); raise it on a bigger machine.
MAX_LIVE_BATCH = env_number("SPECVIZ_MAX_LIVE_BATCH", 8, low=1, high=MAX_SERVE_BATCH)
MAX_SERVE_TOKENS = min(64, MAX_TOKENS)
MAX_SERVE_K = 8


def method_choices() -> list:
    """The serving menu: spec under the load policy, and every method that runs in a batch
    (specviz.methods) at a fixed k."""
    return [("spec, k chosen each step from load (k = load)", "load")] + [
        (f"{name}: {methods.get(name).drafts_with}, fixed k", name) for name in methods.names(batch=True)
        if name != "ar"]


def check_method(method) -> None:
    names = [value for _, value in method_choices()]
    if method not in names:
        raise gr.Error(f"The serving methods are {', '.join(names)}; got {str(method)[:40]!r}.")


RECORDED_LANES = ("spec", "load")  # the methods recorded at every batch size

_VIEWS: dict = {}
_VIEWS_LOCK = threading.Lock()


def lane_options(method: str, k) -> dict:
    """generate_batch's options for a serving method of the menu."""
    if method == "load":
        return {"method": "spec", "k": "load"}
    if ("min_prob", "suffix_min_prob") in methods.get(method).options:  # suffix decoding: a session of its own
        return {"method": method, "k": whole(k), "suffix_session": f"serving:{uuid.uuid4().hex}"}
    return {"method": method, "k": whole(k)}


# ---------------------------------------------------------------------------------------------
# recorded


def recorded_batches() -> list:
    try:
        return list(recorded.serving_manifest()["batches"])
    except (OSError, ValueError, KeyError):
        return []


def sweep() -> dict:
    """The bench's measured sweep shipped with the recordings ({} when there is none)."""
    try:
        return (recorded.serving_manifest().get("sweep") or {}).get("analysis") or {}
    except (OSError, ValueError):
        return {}


def nearest(batch: int, batches: list) -> int:
    """The recorded batch size nearest to `batch` on a log scale (the sizes double)."""
    return min(batches, key=lambda b: (abs((b / batch) - 1) if b >= batch else abs((batch / b) - 1), b))


def recorded_view(batch, method) -> dict:
    """The recorded batch nearest to `batch` for `method` (spec or load; another method shows
    spec's recording and says so), rendered once per process."""
    check_method(method)
    if isinstance(batch, bool) or not isinstance(batch, (int, float)) or not 1 <= batch <= MAX_SERVE_BATCH:
        raise gr.Error(f"A batch holds 1 to {MAX_SERVE_BATCH} users, got {str(batch)[:40]!r}.")
    batches = recorded_batches()
    if not batches:
        raise gr.Error("This installation has no recorded serving runs (specviz/data/serving): press Serve live, or "
                       "record them with `python -m specviz.bench.recordings record-serving`.")
    b = nearest(max(1, int(batch)), batches)
    lane = method if method in RECORDED_LANES else "spec"
    with _VIEWS_LOCK:
        if (b, lane) not in _VIEWS:
            _VIEWS[(b, lane)] = _render_recorded(b, lane)
        view = dict(_VIEWS[(b, lane)])
    notes = []
    earlier = recorded.serving_earlier_code(b, lane)
    if earlier:
        notes.append(earlier.rstrip("."))
    if b != int(batch):
        notes.append(f"recorded at B = {', '.join(map(str, batches))}: showing B = {b}")
    if method != lane:
        notes.append(f"{method} is not recorded batch by batch (the chart has its sweep): showing spec; "
                     "Serve live runs it")
    if notes:
        view[ui.serving_html] = f'<div class="sv-muted">{"; ".join(notes)}.</div>' + view[ui.serving_html]
    return view


def _render_recorded(batch: int, lane: str) -> dict:
    try:
        ar, run = recorded.serving_recording(batch, "ar"), recorded.serving_recording(batch, lane)
        where = recorded.serving_manifest()["recorded"]
    except (OSError, ValueError, KeyError) as exc:
        raise gr.Error(f"The recorded batch B = {batch} cannot be read ({exc}); press Serve live.") from None
    note = (f"recorded on {where.get('device_name')} ({where.get('device')}, {where.get('threads')} threads), "
            f"{where.get('dtype')}, {where.get('date')}: a replay, no model ran")
    point = {**render.compare(render.batch_summary(ar), render.batch_summary(run)), "label": "recorded run"}
    return {ui.serving_html: render.serving_html(ar, run, recorded=note).html,
            ui.rows_html: render.rows_table(run).html,
            ui.batch_plot: serialised(render.batch_speedup_figure(sweep(), [point]))}


def serving_preset(batch: float, method: str = "load") -> dict:
    """A recorded batch as plain JSON for API clients: the summary and rows as HTML, the chart as
    Plotly JSON (no model runs)."""
    view = recorded_view(batch, method)
    return {"summary": view[ui.serving_html], "rows": view[ui.rows_html], "chart": view[ui.batch_plot].plot}


# ---------------------------------------------------------------------------------------------
# live


def check_serving(pair_name, batch, method, k, tokens) -> tuple:
    """The app's limits on a live batch, each a gr.Error that says what to change."""
    allowed_pair(pair_name)
    batch, k, tokens = whole(batch), whole(k), whole(tokens)
    if not isinstance(batch, int) or not 1 <= batch <= MAX_SERVE_BATCH:
        raise gr.Error(f"A batch holds 1 to {MAX_SERVE_BATCH} users, got {batch}.")
    if batch > MAX_LIVE_BATCH:
        raise gr.Error(f"Live batches are capped at {MAX_LIVE_BATCH} users on this server (a bigger one would hold "
                       f"the engine for minutes): Show recorded replays B up to {MAX_SERVE_BATCH} at once.")
    check_method(method)
    if method != "load" and (not isinstance(k, int) or not 1 <= k <= MAX_SERVE_K):
        raise gr.Error(f"k must be a whole number from 1 to {MAX_SERVE_K}, got {k}.")
    if not isinstance(tokens, int) or not 1 <= tokens <= MAX_SERVE_TOKENS:
        raise gr.Error(f"New tokens per user must be 1 to {MAX_SERVE_TOKENS} in this app, got {tokens}.")
    return batch, k, tokens


@gpu
def stream_serving(pair_name: str, batch: int, options: dict, tokens: int):
    """Plain decoding of the batch, then the method's: each alone on the engine (one after the
    other, never interleaved: two batches would compete for the same cores). One item per event."""
    pair = load(pair_name)
    prompts = SERVING_BANK[:batch]
    for lane, opts in (("ar", {"method": "ar"}), ("run", options)):
        for event in specviz.generate(pair, prompts, max_new_tokens=tokens, record_topk=0, **opts):
            yield lane, event.to_dict()


def serve(pair_name, batch, method, k, tokens, points=None, progress=gr.Progress()):
    """A live batch: plain decoding, then the method, streamed pass by pass."""
    points = points or []
    batch, k, tokens = check_serving(pair_name, batch, method, k, tokens)
    load(pair_name, progress)
    lanes = {"ar": [], "run": []}
    try:
        for lane, event in stream_serving(pair_name, batch, lane_options(method, k), tokens):
            lanes[lane].append(event)
            if event["kind"] in ("batch_step", "batch_finished"):
                shown = lanes["run"] or lanes["ar"]
                yield {ui.serving_html: render.serving_html(lanes["ar"], lanes["run"]).html,
                       ui.rows_html: render.rows_table(shown).html}
    except SpecvizError as exc:
        raise gr.Error(str(exc)) from exc
    point = {**render.compare(render.batch_summary(lanes["ar"]), render.batch_summary(lanes["run"])),
             "label": "your live run"}
    points = points + [point]
    yield {ui.serving_html: render.serving_html(lanes["ar"], lanes["run"]).html,
           ui.rows_html: render.rows_table(lanes["run"]).html,
           ui.batch_plot: render.batch_speedup_figure(sweep(), points), ui.serving_state: points}


# ---------------------------------------------------------------------------------------------
# layout

INTRO = (
    "A server decodes many users together: **one target pass per step for the whole batch**. Plain decoding "
    "feeds it B tokens, speculation B × (k + 1). Small passes are bound by reading the weights, so the extra "
    "tokens ride along nearly free; big ones are bound by arithmetic, and every rejected draft is paid in full. "
    "Slide the batch size: the recorded runs (the real pair) show where speculation stops paying. The table "
    "has one row per user and one column per shared pass: the tokens each user got from it, shaded by the "
    "share of its drafts accepted. Every method here is exact: each user's text is its own plain greedy text.")


def build() -> None:
    gr.Markdown(INTRO)
    with gr.Row():
        ui.serve_batch = gr.Slider(1, MAX_SERVE_BATCH, value=8, step=1, scale=3,
                                   label=f"users in the batch (B); live runs up to {MAX_LIVE_BATCH}")
        ui.serve_method = gr.Dropdown(method_choices(), value="load", label="method", scale=2)
        ui.serve_k = gr.Slider(1, MAX_SERVE_K, value=4, step=1, label="k (fixed-k methods)", scale=2)
        ui.serve_tokens = gr.Slider(1, MAX_SERVE_TOKENS, value=min(32, MAX_SERVE_TOKENS), step=1, scale=2,
                                    label="new tokens per user (live)")
    with gr.Row():
        ui.serve_recorded_btn = gr.Button("Show recorded", variant="secondary", scale=2)
        ui.serve_btn = gr.Button("Serve live", variant="primary", scale=2)
        ui.serve_stop = gr.Button("Stop", variant="stop", scale=1)
    ui.serving_html = gr.HTML(label="serving", elem_id="sv-serving")
    ui.batch_plot = gr.Plot(render.batch_speedup_figure(sweep()), label="speedup against batch size",
                            show_label=False, elem_id="sv-batch-plot")
    ui.rows_html = gr.HTML(label="rows of each shared pass", elem_id="sv-rows")
    ui.serving_state = gr.State([])


def wire(engine_queue: dict):
    """The serving view's listeners; returns the live batch's event (Stop cancels it)."""
    shown = [ui.serving_html, ui.rows_html, ui.batch_plot]
    private = dict(api_visibility="private", show_progress="hidden")
    inputs = [ui.serve_batch, ui.serve_method]
    ui.serve_recorded_btn.click(recorded_view, inputs, shown, queue=False, **private)
    ui.serve_batch.release(recorded_view, inputs, shown, queue=False, **private)
    gr.api(serving_preset, api_name="serving_preset", concurrency_id="replay", concurrency_limit=None)
    event = ui.serve_btn.click(in_line(serve, ui.serving_html),
                               [ui.pair, ui.serve_batch, ui.serve_method, ui.serve_k, ui.serve_tokens,
                                ui.serving_state], shown + [ui.serving_state], api_name="serve",
                               show_progress="minimal", **engine_queue)
    ui.serve_stop.click(None, cancels=[event])
    return event
