"""specviz app: speculative decoding, step by step (Gradio 6; runs locally or as a HF Space).

Gradio wiring only. Each model handler is a small generator over the engine's events and yields
what `specviz.render` draws from them: nothing here decides, scores or re-derives anything.

Views: Step view (chips, replay, step panel, the draft tree and its attention mask for tree runs,
inspector), Race (autoregressive vs any method, each on its own clock), Speedup vs acceptance
(theory and this session's runs), How it works. Presets replay runs recorded on the real pair
(specviz.presets) at once, outside the engine's queue; Run and Race compute live, one at a time,
and a live run that would wait too long is told the engine is busy. See docs/app.md.

Environment: SPECVIZ_PAIR (default pair), SPECVIZ_ALLOW_CUSTOM=1 (let visitors load
`target=...,draft=...` pairs), SPECVIZ_MAX_TOKENS (cap, default 256), SPECVIZ_MAX_WAITING (live
runs that may wait for the engine, default 3), PORT / GRADIO_SERVER_PORT.
"""

from __future__ import annotations

import gzip
import functools
import io
import json
import os
import sys
import threading
import zlib
from html import escape

try:  # ZeroGPU on Hugging Face Spaces: `spaces` must be imported before torch
    import spaces
except ImportError:
    spaces = None

import gradio as gr
from gradio.components.plot import PlotData

import specviz
from specviz import engine, events as ev, presets as recorded
from specviz.adaptive import RULES as AUTO_RULES
from specviz.config import DRAFT_TREE_METHODS, RunConfig
from specviz.errors import SpecvizError
from specviz.models import default_pair_name, list_pairs
from specviz.quant import MODES, quantize_draft
from specviz.render import CSS, charts, chips, inspector, panel, steps, tree
from specviz.render.race import Lane, gap_scale, lane_html, race, race_status, verdict
from specviz.render.html import quoted

MAX_TOKENS = int(os.environ.get("SPECVIZ_MAX_TOKENS", "256"))
MAX_PROMPT_CHARS = 4000
MAX_TRACE_BYTES = 20_000_000  # also the most a gzipped trace may unpack to
GZIP_MAGIC = b"\x1f\x8b"
ALLOW_CUSTOM = os.environ.get("SPECVIZ_ALLOW_CUSTOM") == "1"
DEFAULT_PAIR = default_pair_name()
PRESET_PAIRS = [name for name, _ in list_pairs()]
DRAFT_WEIGHTS = MODES  # specviz.quant: "none" or an int8 weight-only draft (CPU)
RECORD_TOPK = recorded.RECORD_TOPK
# Live runs allowed to wait for the engine slot; one more is told the engine is busy, at once. A
# default race (64 tokens) takes ~25-30 s on the real pair on a 2-core CPU, so the last of three
# waits about two minutes, which is what "try again in a minute" can honestly promise.
MAX_LIVE_WAITING = max(1, int(os.environ.get("SPECVIZ_MAX_WAITING", "3")))

# Presets: what gr.Examples fills in the sidebar; each was also recorded once on the real pair
# (specviz.presets) and clicking one replays that recording at once, without the engine.
PRESETS = [preset.example() for preset in recorded.PRESETS]
PRESET_LABELS = recorded.LABELS
ar_options = recorded.ar_options  # the race's baseline: one definition for live and recorded races
ACCEPTANCE_CHOICES = [("exact (lossless)", "exact"), ("typical (LOSSY)", "typical")]

CHIP_CLICK_JS = """
element.addEventListener('click', (e) => {
  const chip = e.target.closest('.sv-chip[data-step], .sv-node[data-step]');
  if (chip) trigger('click', {step: Number(chip.dataset.step), index: Number(chip.dataset.index)});
});
"""

APP_CSS = CSS + """
.sv-title h1 { margin-bottom: 0; }
.sv-recorded { font-size: 0.85em; padding: 2px 8px; margin-bottom: 4px; border-left: 3px solid #7c3aed;
               background: rgba(124, 58, 237, 0.08); }
#sv-text { min-height: 120px; }
"""
THEME = gr.themes.Soft(text_size=gr.themes.sizes.text_lg)
# max_file_size: Gradio refuses bigger uploads before they reach the disk of a public Space
LAUNCH_KWARGS = dict(theme=THEME, css=APP_CSS, ssr_mode=False, max_file_size=MAX_TRACE_BYTES)


# ---------------------------------------------------------------------------------------------
# model pairs: loaded once per process, lazily, shared read-only by every session

_PAIRS: dict = {}
_PAIRS_LOCK = threading.Lock()


def get_pair(name: str, progress=None, draft_quant: str = "none"):
    """The pair, loaded once per process; with draft_quant="int8", the same pair with an int8
    draft (built once, sharing the loaded target and the draft's float weights)."""
    with _PAIRS_LOCK:
        if name not in _PAIRS:
            say = (lambda fraction, message: progress(fraction, desc=message)) if progress else None
            pair = specviz.load_pair(name, progress=say)
            if spaces is None:
                warm_up(pair)
            _PAIRS[name] = pair
        if draft_quant in (None, "", "none"):
            return _PAIRS[name]
        key = (name, draft_quant)
        if key not in _PAIRS:
            pair = quantize_draft(_PAIRS[name], draft_quant)
            if spaces is None:
                warm_up(pair)
            _PAIRS[key] = pair
        return _PAIRS[key]


def warm_up(pair) -> None:
    """One short run of each method, off every clock: the first forward passes of a fresh model
    (and the first tree-attention pass) are slow, and whichever race lane ran first would
    otherwise pay for both."""
    for method in engine.METHODS:
        extra = {"tree": "2,1"} if method == "tree" else {}
        try:
            for _ in specviz.generate(pair, "warm up", method=method, k=2, max_new_tokens=3, record_topk=0, **extra):
                pass
        except SpecvizError:  # a method that needs settings this warm-up does not know: it warms itself
            pass


def _gpu(fn):
    """On a ZeroGPU Space the engine streams run under spaces.GPU (they yield plain data, as it
    requires); elsewhere they run as they are."""
    return spaces.GPU(duration=120)(fn) if spaces is not None else fn


@_gpu
def stream_run(pair_name: str, prompt: str, cfg: RunConfig, draft_quant: str = "none"):
    """One run's events as plain dicts, one step per item, with the run's own compute clock."""
    lane = Lane("run", specviz.generate(get_pair(pair_name, draft_quant=draft_quant), prompt, cfg))
    while not lane.done:
        yield {"events": lane.advance(), "busy": lane.busy}


@_gpu
def stream_race(pair_name: str, prompt: str, cfg: RunConfig, draft_quant: str = "none"):
    """Both lanes' events, one step of one lane per item: whichever lane's own clock is behind.
    Both lanes run the same target; an int8 draft only changes the speculative lane's drafter."""
    ar = Lane("ar", specviz.generate(get_pair(pair_name), prompt, ar_options(cfg)))
    spec = Lane("spec", specviz.generate(get_pair(pair_name, draft_quant=draft_quant), prompt, cfg))
    for lane, new in race(ar, spec):
        yield {"lane": lane.name, "events": new, "busy": lane.busy, "done": lane.done}


def check_request(pair_name, prompt, max_new_tokens, progress=None, draft_quant="none") -> None:
    """App-level limits (the engine checks the rest), then the pair, loaded once per process."""
    if draft_quant not in DRAFT_WEIGHTS:
        raise gr.Error(f"Draft weights must be one of {', '.join(DRAFT_WEIGHTS)}.")
    if pair_name not in PRESET_PAIRS and not ALLOW_CUSTOM and pair_name != DEFAULT_PAIR:
        raise gr.Error(f"Custom model pairs are disabled on this server: choose one of {', '.join(PRESET_PAIRS)}.")
    if not isinstance(prompt, str):
        raise gr.Error("The prompt must be text.")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise gr.Error(f"The prompt is {len(prompt)} characters; this app accepts at most {MAX_PROMPT_CHARS}.")
    if isinstance(max_new_tokens, (int, float)) and max_new_tokens > MAX_TOKENS:
        raise gr.Error(f"max tokens is capped at {MAX_TOKENS} in this app (asked for {int(max_new_tokens)}).")
    try:
        get_pair(pair_name, progress, draft_quant)
    except SpecvizError as exc:
        raise gr.Error(str(exc)) from exc


def _options(method, k, temperature, top_p, max_new_tokens, seed, chat, auto_k=False, auto_rule="cost",
             confidence=0.4, acceptance="exact", ngram=3, tree_shape="3,2,1", tree_dynamic=False,
             tree_budget=16) -> RunConfig:
    """The run the widgets ask for (whole numbers arrive as floats); a bad value is a gr.Error
    that says what is wrong. Controls hidden for the chosen method are not applied: "auto k"
    only where the engine offers it, the acceptance rule only for drafting chains (ar drafts
    nothing, trees verify exactly)."""
    auto = bool(auto_k) and method in engine.AUTO_METHODS
    try:
        return RunConfig.of(method=method, k="auto" if auto else _int(k), temperature=temperature, top_p=top_p,
                            max_new_tokens=_int(max_new_tokens), seed=_int(seed), chat=bool(chat),
                            record_topk=RECORD_TOPK,
                            acceptance="exact" if method == "ar" or method in engine.TREE_METHODS else acceptance,
                            auto_rule=auto_rule, confidence=confidence, ngram=_int(ngram),
                            tree="dynamic" if tree_dynamic and method == "tree" else tree_shape,
                            tree_budget=_int(tree_budget))
    except SpecvizError as exc:
        raise gr.Error(str(exc)) from exc


def _int(value):
    return int(value) if isinstance(value, float) and value.is_integer() else value


# ---------------------------------------------------------------------------------------------
# step view


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
        text_html: chips.run_text(run, upto=number, selected=number).html,
        panel_html: panel.step_panel(run, number).html,
        stats_html: panel.stats(run, steps.run_metrics(events), busy).html,
        step_slider: gr.Slider(minimum=0, maximum=max(1, n), value=number + 1),
        position: gr.Radio(choices=_position_choices(step), value=index),
        inspector_plot: inspector.inspector_figure(run, number, index),
        **tree_outputs(run, step),
    }


def tree_outputs(run, step) -> dict:
    """The draft tree and its attention mask: shown for tree runs only."""
    shown = run.method == "tree" or any(s.is_tree for s in run.steps)
    if not shown:
        return {tree_view: gr.HTML(visible=False), mask_plot: gr.Plot(visible=False)}
    return {tree_view: gr.HTML(tree.tree_view(step, run.greedy, len(run.steps)).html, visible=True),
            mask_plot: gr.Plot(tree.mask_figure(step), visible=True)}


def _position_choices(step) -> list:
    if step is None:
        return []
    choices = []
    for i in step.indices():
        tokens = step.at(i)
        label = " → ".join(f"{quoted(t.text)} {t.status}" for t in tokens)
        choices.append((f"{'depth ' + str(i + 1) if step.is_tree else '#' + str(i)}: {label}", i))
    return choices


def chart_view(events: list, history: list) -> dict:
    return {speedup_plot: charts.speedup_figure(history), tau_plot: charts.tau_histogram(events),
            position_plot: charts.position_figure(events), explain_md: charts.alpha_explainer(events)}


def run(prompt, pair_name, method, k, temperature, top_p, max_new_tokens, seed, chat, auto_k=False,
        auto_rule="cost", confidence=0.4, acceptance="exact", ngram=3, tree_shape="3,2,1", tree_dynamic=False,
        tree_budget=16, draft_quant="none", history=None, progress=gr.Progress()):
    """Stream one run: one update per engine step; charts and history when it ends."""
    history = history or []
    check_request(pair_name, prompt, max_new_tokens, progress, draft_quant)
    options = _options(method, k, temperature, top_p, max_new_tokens, seed, chat, auto_k, auto_rule, confidence,
                       acceptance, ngram, tree_shape, tree_dynamic, tree_budget)
    events, busy = [], 0.0
    try:
        for update in stream_run(pair_name, prompt, options, draft_quant):
            events, busy = events + update["events"], update["busy"]
            if events[-1]["kind"] != "run_finished":
                yield {**step_view(events, busy=busy), events_state: events, busy_state: busy}
    except SpecvizError as exc:
        raise gr.Error(str(exc)) from exc
    label = f"{method} run" + ("" if steps.build(events[:1]).lossless else " (LOSSY)")
    history = history + [charts.summarize(events, busy, label=label, baseline=_baseline(history, events))]
    yield {**step_view(events, busy=busy), **chart_view(events, history), events_state: events,
           busy_state: busy, history_state: history}


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
    return {**step_view(events, int(data["step"]), int(data["index"]), busy), inspector_box: gr.Accordion(open=True)}


def toggle_play(playing, events, busy, number):
    playing = bool(events) and not playing
    out = {timer: gr.Timer(active=playing), play_btn: gr.Button("⏸ Pause" if playing else "▶ Play"),
           playing_state: playing}
    n = len(steps.build(events).steps) if events else 0
    if playing and int(number) >= n:
        out.update(show(events, busy, 0))
    return out


def tick(events, busy, number):
    n = len(steps.build(events).steps) if events else 0
    if int(number) >= n:
        return {timer: gr.Timer(active=False), play_btn: gr.Button("▶ Play"), playing_state: False}
    return show(events, busy, int(number) + 1)


def open_trace(file, history):
    """Replay a saved trace (JSONL from `python -m specviz generate --jsonl`, or gzipped): no model
    runs. A public Space gets hostile files: each problem is answered with one sentence."""
    if file is None:
        return {}
    events = read_trace(file if isinstance(file, str) else file.name)
    try:
        return {**step_view(events), **chart_view(events, history), events_state: events, busy_state: None}
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
        # each line is an event with the right fields, but a value has the wrong type (the schema
        # checks names, not types) or the events do not form one run
        raise gr.Error(f"The trace's events cannot be shown: a field has the wrong type or the events do not form "
                       f"one run ({type(exc).__name__}: {exc}).") from exc


def read_trace(path: str) -> list:
    """The events of an uploaded trace as dicts, each checked against the schema."""
    size = os.path.getsize(path)
    if size == 0:
        raise gr.Error("The file is empty: a saved trace has one JSON event per line.")
    if size > MAX_TRACE_BYTES:
        raise gr.Error(f"The file is {_mb(size)}; this app opens traces up to {_mb(MAX_TRACE_BYTES)}.")
    with open(path, "rb") as fh:
        data = fh.read()
    if data[:2] == GZIP_MAGIC:
        data = _gunzip(data)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise gr.Error(f"The file is not UTF-8 text (byte {exc.start} is 0x{data[exc.start]:02x}): a saved trace "
                       "is JSON Lines, from `python -m specviz generate --jsonl`.") from None
    # split on "\n" only: str.splitlines() also splits inside a token's text at U+2028 or U+0085,
    # which JSON written with ensure_ascii=False keeps raw
    events = [_trace_event(line, number) for number, line in enumerate(text.split("\n"), 1) if line.strip()]
    if not events:
        raise gr.Error("The trace has no events: a saved trace has one JSON event per line.")
    if events[0]["kind"] != "run_started":
        raise gr.Error(f"The trace starts with a {events[0]['kind']!r} event; a specviz run starts with run_started.")
    version = events[0].get("schema_version", ev.SCHEMA_VERSION)
    if not isinstance(version, int) or version > ev.SCHEMA_VERSION:
        raise gr.Error(f"The trace has event schema {version!r}; this app reads up to {ev.SCHEMA_VERSION}: "
                       "update specviz.")
    return events


def _gunzip(data: bytes) -> bytes:
    """A gzipped trace (as the presets are shipped), read no further than the size limit: a small
    file can unpack to gigabytes."""
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as gz:
            out = gz.read(MAX_TRACE_BYTES + 1)
    except (OSError, EOFError, zlib.error) as exc:
        raise gr.Error(f"The file starts like gzip but does not decompress ({exc}).") from None
    if len(out) > MAX_TRACE_BYTES:
        raise gr.Error(f"The file unpacks to more than {_mb(MAX_TRACE_BYTES)}, the most this app opens.")
    return out


def _mb(size: int) -> str:
    return f"{size / 1e6:.3g} MB"


def _trace_event(line: str, number: int) -> dict:
    """A known event kind is checked against the schema; an unknown one (newer engine) is kept."""
    try:
        data = json.loads(line)
    except (ValueError, RecursionError) as exc:  # RecursionError: "[[[[..." nested past the stack
        raise gr.Error(f"Line {number} of the trace is not JSON ({exc}): a saved trace has one JSON event "
                       "per line.") from None
    if not isinstance(data, dict) or not isinstance(data.get("kind"), str):
        raise gr.Error(f"Line {number} of the trace is not a specviz event: a JSON object with a \"kind\" is expected.")
    if data["kind"] not in ev.EVENT_TYPES:
        return data
    try:
        return ev.from_dict(data).to_dict()
    except (ValueError, TypeError) as exc:
        raise gr.Error(f"Line {number} of the trace is not a valid {data['kind']} event: {exc}.") from None


# ---------------------------------------------------------------------------------------------
# race


def race_run(prompt, pair_name, method, k, temperature, top_p, max_new_tokens, seed, chat, auto_k=False,
             auto_rule="cost", confidence=0.4, acceptance="exact", ngram=3, tree_shape="3,2,1", tree_dynamic=False,
             tree_budget=16, draft_quant="none", history=None, progress=gr.Progress()):
    """Autoregressive vs the selected method ("spec" when "ar" is selected), with all its settings
    (tree, prompt lookup, cascade, auto k, typical acceptance), streamed lane by lane on their own
    clocks."""
    history = history or []
    check_request(pair_name, prompt, max_new_tokens, progress, draft_quant)
    options = _options("spec" if method == "ar" else method, k, temperature, top_p, max_new_tokens, seed, chat,
                       auto_k, auto_rule, confidence, acceptance, ngram, tree_shape, tree_dynamic, tree_budget)
    lanes = {"ar": {"events": [], "busy": 0.0, "done": False}, "spec": {"events": [], "busy": 0.0, "done": False}}
    try:
        for update in stream_race(pair_name, prompt, options, draft_quant):
            lane = lanes[update["lane"]]
            lane["events"] = lane["events"] + update["events"]
            lane["busy"], lane["done"] = update["busy"], update["done"]
            yield race_view(lanes)
    except SpecvizError as exc:
        raise gr.Error(str(exc)) from exc
    ar, spec = race_summaries(lanes, options.method)
    history = history + [ar, spec]
    yield {**race_view(lanes, ar, spec), **chart_view(lanes["spec"]["events"], history), history_state: history}


def race_view(lanes: dict, ar: dict = None, spec: dict = None) -> dict:
    # one bar scale for both lanes' waits between updates, so their strips compare
    scale = gap_scale(lanes["ar"]["events"], lanes["spec"]["events"])
    out = {ar_html: lane_html(lanes["ar"]["events"], lanes["ar"]["busy"], "Autoregressive",
                              "target only: one forward per token", lanes["ar"]["done"], scale).html,
           spec_html: lane_html(lanes["spec"]["events"], lanes["spec"]["busy"], "Speculative",
                                _method_line(lanes["spec"]["events"]), lanes["spec"]["done"], scale).html}
    if ar and spec:
        out[verdict_html] = verdict(ar, spec, _same_text(lanes)).html
    else:
        out[verdict_html] = race_status(lanes["ar"]["busy"], lanes["spec"]["busy"]).html
    return out


def _method_line(events: list) -> str:
    return method_setting(steps.build(events[:1]).started or {})


def method_setting(started: dict) -> str:
    """The method of a run with its settings, from run_started, e.g. 'tree (static 3,2,1): ...'."""
    method = started.get("method", "spec")
    options = started.get("options") or {}
    parts = []
    if method in ("spec", "pld", "cascade", "medusa", "eagle"):
        k = started.get("k")
        parts.append(f"k auto, {options.get('auto_rule', '')} rule" if k == "auto" else f"k = {k}")
    if method in ("pld", "cascade") and "ngram" in options:
        parts.append(f"n-gram ≤ {options['ngram']}")
    if method in DRAFT_TREE_METHODS:
        shape = options.get("tree", "dynamic")
        parts.append(f"dynamic, budget {options.get('tree_budget')}" if shape == "dynamic" else f"shape {shape}")
    if started.get("lossless") is False:
        parts.append(f"{started.get('rule', 'typical')} acceptance")
    if started.get("draft_quant", "none") != "none":
        parts.append(f"{started['draft_quant']} draft")
    help_text = engine.METHOD_HELP.get(method, "draft, then verify in one target pass")
    return f"{method}" + (f" ({', '.join(parts)})" if parts else "") + f": {help_text}"


def _same_text(lanes: dict):
    """At temperature 0 both lanes must produce the same tokens (a lossy rule need not); None when
    sampling."""
    runs = [steps.build(lane["events"]) for lane in lanes.values()]
    if not all(run.finished and run.deterministic for run in runs):
        return None
    return runs[0].finished["token_ids"] == runs[1].finished["token_ids"]


# ---------------------------------------------------------------------------------------------
# presets: recorded once on the real pair (specviz.presets), replayed from memory, never queued
# behind the engine

_PRESET_VIEWS: dict = {}
_PRESET_LOCK = threading.Lock()


def preset_views(label: str) -> dict:
    """A preset's recorded run, rendered once per process: "ui" (the updates a click shows) and
    "api" (the same views as plain JSON). A class clicking presets costs no engine time."""
    with _PRESET_LOCK:
        if label not in _PRESET_VIEWS:
            _PRESET_VIEWS[label] = _render_preset(_recording(label))
        return _PRESET_VIEWS[label]


def _recording(label):
    try:
        return recorded.recording(label)
    except KeyError:
        raise gr.Error(f"There is no preset {str(label)[:80]!r}; the presets are: "
                       f"{'; '.join(PRESET_LABELS)}.") from None
    except (OSError, ValueError) as exc:  # missing or stale data: the preset still fills the settings
        raise gr.Error(f"The recording of this preset cannot be shown ({exc}); press Run to compute it live.") from None


def _render_preset(rec) -> dict:
    """The step view, charts and race of a recording, each labelled with where it was recorded."""
    lanes = {"ar": {"events": rec.ar, "busy": rec.ar_busy, "done": True},
             "spec": {"events": rec.run, "busy": rec.run_busy, "done": True}}
    ar, spec = race_summaries(lanes, rec.preset.method, prefix="recorded ")
    note = recorded_note(rec.note)
    shown = {**step_view(rec.run, busy=rec.run_busy), **chart_view(rec.run, [ar, spec]), **race_view(lanes, ar, spec)}
    shown[stats_html] = note + shown[stats_html]
    shown[verdict_html] = note + shown[verdict_html]
    shown[explain_md] = f"*{rec.note}: a replay, no model ran.*\n\n{shown[explain_md]}"
    ui = {key: _serialised(value) for key, value in shown.items()}
    return {"ui": {**ui, events_state: rec.run, busy_state: rec.run_busy}, "api": _preset_api(rec, shown)}


def race_summaries(lanes: dict, method: str, prefix: str = "") -> tuple:
    """A finished race's two records for the charts: the speculative lane measured against the
    autoregressive one, each on its own compute clock."""
    ar = charts.summarize(lanes["ar"]["events"], lanes["ar"]["busy"], label=f"{prefix}race: autoregressive")
    lossy = "" if steps.build(lanes["spec"]["events"][:1]).lossless else " (LOSSY)"
    spec = charts.summarize(lanes["spec"]["events"], lanes["spec"]["busy"], label=f"{prefix}race: {method}{lossy}",
                            baseline=ar)
    return ar, spec


def recorded_note(note: str) -> str:
    return (f'<div class="sv-recorded" data-recorded="1">{escape(note)}: a replay, no model ran. '
            "Run or Race computes it live with your settings.</div>")


def _serialised(value):
    """A figure as Gradio's serialised plot, made once: Gradio would re-serialise a cached figure
    on every request, the slowest part of serving a replay."""
    return PlotData(type="plotly", plot=value.to_json()) if hasattr(value, "to_plotly_json") else value


def _preset_api(rec, shown: dict) -> dict:
    """The views as plain JSON: HTML strings, Markdown, and Plotly figures as JSON text
    (plotly.io.from_json reads them), which Gradio passes through without walking every number."""
    def figure(component):
        return shown[component].to_json()

    tree_shown = shown[tree_view]
    return {"label": rec.preset.label, "recorded": rec.note, "where": rec.where, "settings": rec.preset.options().to_dict(),
            "lossless": steps.build(rec.run[:1]).lossless, "text": rec.run[-1]["text"],
            "step_view": {"text": shown[text_html], "panel": shown[panel_html], "stats": shown[stats_html],
                          "tree": tree_shown.value if tree_shown.visible else None,
                          "inspector": figure(inspector_plot)},
            "race": {"autoregressive": shown[ar_html], "speculative": shown[spec_html], "verdict": shown[verdict_html]},
            "charts": {"speedup": figure(speedup_plot), "tau": figure(tau_plot), "positions": figure(position_plot),
                       "alpha": shown[explain_md]}}


def show_preset(example):
    """A click on a preset (gr.Examples' dataset gives (index, values)): its recorded run."""
    return preset_views(PRESET_LABELS[example[0]])["ui"]


def presets() -> list[str]:
    """The presets' labels, for /preset."""
    return list(PRESET_LABELS)


def preset(label: str) -> dict:
    """A preset's recorded run (a label from /presets) as view data: step view, race and charts,
    rendered from a trace recorded once on the real pair ("recorded" says on which device, dtype
    and date). No model runs and nothing waits for the engine."""
    return preset_views(label)["api"]


# ---------------------------------------------------------------------------------------------
# the engine's line: one live run computes, a few wait in order, the next is told at once


class EngineLine:
    """Live runs take turns on the engine, first come first served. Gradio's own queue cannot
    refuse a run for waiting too long, only hold it; so the engine's listeners run unqueued
    (no concurrency limit) and wait here, where the one too many is refused at once."""

    def __init__(self):
        self._turns = threading.Condition()
        self._line: list = []  # tickets; the first one computes

    def join(self, most_waiting: int) -> object:
        with self._turns:
            if len(self._line) > most_waiting:
                raise gr.Error(busy_message(len(self._line) - 1))
            ticket = object()
            self._line.append(ticket)
            return ticket

    def wait(self, ticket, seconds: float) -> bool:
        """True once it is `ticket`'s turn; False after `seconds` (to show the wait)."""
        with self._turns:
            return self._turns.wait_for(lambda: self._line[0] is ticket, seconds)

    def ahead(self, ticket) -> int:
        with self._turns:
            return self._line.index(ticket)

    def leave(self, ticket) -> None:
        with self._turns:
            self._line.remove(ticket)
            self._turns.notify_all()

    def waiting(self) -> int:
        with self._turns:
            return max(0, len(self._line) - 1)


ENGINE_LINE = EngineLine()


def in_line(handler, status):
    """`handler` (a live-run generator) behind its turn on the engine; while it waits, `status`
    says how many runs are ahead. Gradio closes a cancelled generator between yields (Stop, a
    closed tab), so the ticket is given back then too: a wait yields at least twice a second."""
    @functools.wraps(handler)
    def live(*args, **kwargs):
        ticket = ENGINE_LINE.join(MAX_LIVE_WAITING)
        try:
            while not ENGINE_LINE.wait(ticket, 0.5):
                yield {status: waiting_note(ENGINE_LINE.ahead(ticket))}
            yield from handler(*args, **kwargs)
        finally:
            ENGINE_LINE.leave(ticket)
    return live


def busy_message(waiting: int) -> str:
    more = f"{waiting} more {'is' if waiting == 1 else 'are'}"
    return (f"The engine is busy: one live run is computing and {more} waiting for it; try again in a minute, "
            "or click a preset to see a recorded run.")


def waiting_note(ahead: int) -> str:
    runs = "run is" if ahead == 1 else "runs are"
    return (f'<div class="sv-muted" data-waiting="{ahead}">Waiting for the engine: {ahead} live {runs} ahead '
            'of you.</div>')


def live_waiting() -> int:
    """Live runs waiting for the engine, not computing yet."""
    return ENGINE_LINE.waiting()


def clear_history():
    return {history_state: [], speedup_plot: charts.speedup_figure([])}


def method_help(method: str) -> str:
    return engine.METHOD_HELP.get(method, "")


def on_method(method, auto_k, auto_rule, dynamic=False):
    """Show the controls the chosen method uses, and what the method does. Trees: the draft
    model's may be static or dynamic, Medusa's are static (a shape), EAGLE-2's dynamic (a budget)."""
    auto_ok = method in engine.AUTO_METHODS
    auto = bool(auto_k) and auto_ok
    tree = method in DRAFT_TREE_METHODS
    dynamic = method == "eagle-tree" or (method == "tree" and bool(dynamic))
    return {method_dd: gr.Dropdown(info=method_help(method)),
            k: gr.Slider(visible=method != "ar" and method not in engine.TREE_METHODS, interactive=not auto),
            auto_k_box: gr.Checkbox(visible=auto_ok),
            auto_rule_dd: gr.Dropdown(visible=auto),
            confidence_sl: gr.Slider(visible=auto and auto_rule == "confidence"),
            ngram_sl: gr.Slider(visible=method in ("pld", "cascade")),
            tree_box: gr.Group(visible=tree),
            tree_dynamic_cb: gr.Checkbox(visible=method == "tree"),
            tree_shape_tb: gr.Textbox(visible=tree and method != "eagle-tree", interactive=not dynamic),
            tree_budget_sl: gr.Slider(visible=tree and dynamic),
            acceptance_radio: gr.Radio(visible=method != "ar" and method not in engine.TREE_METHODS)}


def on_tree_kind(dynamic):
    return {tree_shape_tb: gr.Textbox(interactive=not dynamic), tree_budget_sl: gr.Slider(visible=bool(dynamic))}


# ---------------------------------------------------------------------------------------------
# layout

HOW_IT_WORKS = """
### One step of speculative decoding (Leviathan et al. 2023, Chen et al. 2023)
1. **Draft.** The small draft model proposes k tokens one by one, sampling each from its
   distribution **q** (dashed violet chips).
2. **Verify.** The big target model scores all k drafts *and* the position after them in **one
   forward pass**, giving its distribution **p** at each position.
3. **Accept or reject, left to right.** Draft x is kept with probability min(1, p(x)/q(x)): a
   uniform draw **u** is compared with it (u < min(1, p/q): green *accepted*). Under greedy decoding
   (temperature 0) the rule is simply "keep x if it is the target's top token".
4. **First rejection** (red, struck): stop there. The drafts after it are *wasted* (grey, struck):
   never judged. The replacement is drawn from the **residual** norm(max(p − q, 0)) (orange): the
   part of p that q under-covered. This correction makes the output distributed exactly as the
   target alone would sample it: speculative decoding is lossless.
5. **All accepted?** The target's pass already computed p at the next position, so one **bonus**
   token (blue) comes for free.

### The numbers
- **β = Σ min(p, q)** at a position: the exact probability that a draft from q is accepted there
  (the overlap bars in the inspector). **α** is its average: measured as accepted / judged.
- **τ = tokens per target forward** = accepted + 1 per step. Each step costs one target forward
  plus k draft forwards; **c** = draft forward time / target forward time, measured.
- Theory: speedup = (1 − α^(k+1)) / ((1 − α)(c·k + 1)). Speculation wins when drafts are easy to
  guess (code, rewrites: high α) and the draft is cheap (small c); it loses when α is low or c is
  large (the tiny demo pair: draft and target are the same size, so c is about 1).
- Where α is low depends on the drafter, not only on the text. With *this* pair on a CPU (a
  0.5B draft of the same family, c ≈ 0.4-0.5), open-ended chat and creative writing lose at a
  fixed k = 4 (reference benchmark, greedy: α 0.62 and 0.35, 0.89× and 0.59×). That is this pair,
  not a law: drafters trained on the target's own features reach high α on chat too (EAGLE
  reports 2.7-3.5× on MT-bench chat, LLaMA2-Chat 70B on a GPU).
- **accepted / drafted is not α**: wasted drafts count as drafted but were never judged.
- **Latency is not only tokens/s.** A speculative step shows several tokens at once, then nothing
  until the next step: per token it is faster, but the wait between updates is longer, and the
  first token comes no sooner (the prompt's prefill is the same, and the first step drafts before
  the target's pass over the prompt checks anything). The strip in each race lane draws those waits.

### Other methods (Method in the settings; the race runs any of them against autoregressive)
- **tree**: the draft proposes several candidates per position (a tree, e.g. 3,2,1 children per
  depth, or a dynamic tree grown from its likeliest nodes). One target pass scores every node with a
  **tree attention mask**: each node sees the committed text, its ancestors and itself, never a
  sibling branch. The target then walks the tree from the root and keeps at most one path; siblings
  are judged in the order they were drawn, each against the residual left by the ones rejected
  before it (or, greedy, against the target's top token). The tree and its mask are drawn under
  the step panel.
- **pld** (prompt lookup): no draft model; the draft copies what followed an earlier occurrence of
  the last n tokens (hover a draft to see the span it was copied from).
- **lookahead** (Jacobi decoding, Fu et al. 2024; greedy only): no draft model either. The target
  itself keeps guesses for the next few positions and refines them with every pass (a Jacobi
  iteration); the n-grams those guesses trace out go into a pool. Each step, the window's guesses
  and the pool's n-grams that follow the last token are verified together as one tree, in the one
  target pass. Exact: a kept token is always the target's own greedy choice.
- **cascade**: prompt lookup speeds up the draft model, which then drafts for the target.
- **medusa** / **medusa-tree** (Cai et al. 2024): no draft model. Small heads read the target's own
  last hidden state, from its verification pass: head k guesses the token k places after the one
  the target itself just chose. One tiny forward drafts k tokens (a chain) or a static tree of the
  heads' top candidates. The heads were trained here, on the target's own outputs.
- **eagle** / **eagle-tree** (Li et al. 2024): a one-layer draft network at the target's *feature*
  level: from the target's hidden state and the next token it predicts the next hidden state, and
  the target's output head reads a token from it; one small forward per depth. eagle-tree grows a
  dynamic tree from its likeliest nodes (EAGLE-2). Both methods read only the target's most
  frequent tokens; a rarer token the target wants is a rejection, never a wrong output.
- **auto k**: k is chosen every step by a rule (heuristic, confidence or cost); the step panel says why.
- **typical acceptance** keeps a draft when the target finds it typical enough. It is **LOSSY**:
  the output no longer follows the target's distribution, and every view says so.
- The race keeps the comparison fair on a small machine: only one engine computes at a time, and
  each lane's clock counts only its own compute.
"""


with gr.Blocks(title="specviz: speculative decoding, step by step", fill_width=True) as demo:
    gr.Markdown("# specviz · speculative decoding, step by step\nA small draft model guesses; "
                "the big target model checks all guesses in one pass. Every colour and number "
                "below comes from the real engine's events.", elem_classes="sv-title")
    events_state, busy_state, history_state, playing_state = gr.State([]), gr.State(None), gr.State([]), gr.State(False)
    with gr.Sidebar(open=True, width=330, label="Settings"):
        gr.Markdown("### Settings")
        pair = gr.Dropdown(sorted(set(PRESET_PAIRS) | {DEFAULT_PAIR}), value=DEFAULT_PAIR, label="Model pair",
                           allow_custom_value=ALLOW_CUSTOM)
        method_dd = gr.Dropdown(list(engine.METHODS), value="spec", label="Method (the race runs it against ar)",
                                info=method_help("spec"))
        k = gr.Slider(1, 16, value=4, step=1, label="k: draft tokens per step")
        with gr.Row():
            auto_k_box = gr.Checkbox(False, label="auto k", scale=1, min_width=80)
            auto_rule_dd = gr.Dropdown(list(AUTO_RULES), value="cost", label="rule choosing k", visible=False,
                                       scale=2, min_width=120)
        confidence_sl = gr.Slider(0.05, 0.95, value=0.4, step=0.05, visible=False,
                                  label="confidence: stop drafting when q(x) <")
        ngram_sl = gr.Slider(1, 8, value=3, step=1, visible=False, label="n-gram size (prompt lookup)")
        with gr.Group(visible=False) as tree_box:
            tree_shape_tb = gr.Textbox("3,2,1", label="Tree shape: children per node at each depth")
            tree_dynamic_cb = gr.Checkbox(False, label="dynamic tree (EAGLE-2: grow the likeliest nodes)")
            tree_budget_sl = gr.Slider(1, 64, value=16, step=1, visible=False, label="dynamic tree budget (nodes)")
        acceptance_radio = gr.Radio(ACCEPTANCE_CHOICES, value="exact", label="Acceptance rule",
                                    info="typical (Medusa) accepts more but is LOSSY: the output no longer "
                                         "follows the target's distribution")
        draft_radio = gr.Radio(list(DRAFT_WEIGHTS), value="none", label="Draft weights",
                               info="int8: the draft model's linear weights in int8 (CPU). Cheaper drafts, "
                                    "the same output: only the draft's q changes, the target is untouched")
        temperature = gr.Slider(0.0, 2.0, value=0.0, step=0.05, label="Temperature (0 = greedy)")
        top_p = gr.Slider(0.05, 1.0, value=1.0, step=0.05, label="Top-p")
        max_new_tokens = gr.Slider(1, MAX_TOKENS, value=min(64, MAX_TOKENS), step=1, label="Max new tokens")
        seed = gr.Number(0, precision=0, minimum=0, label="Seed")
        chat = gr.Checkbox(False, label="Chat template")
    prompt = gr.Textbox(PRESETS[0][0], lines=3, max_lines=12, label="Prompt")
    examples = gr.Examples(PRESETS, [prompt, method_dd, k, temperature, chat, acceptance_radio],
                           example_labels=PRESET_LABELS,
                           label="Presets: a recorded run at once (Run or Race computes it live)")
    with gr.Tabs():
        with gr.Tab("Step view", id="step"):
            with gr.Row():
                run_btn = gr.Button("Run", variant="primary", scale=2)
                stop_btn = gr.Button("Stop", variant="stop", scale=1)
            gr.HTML(chips.legend().html, elem_id="sv-legend")
            stats_html = gr.HTML(label="stats", elem_id="sv-stats")
            text_html = gr.HTML('<div class="sv-muted">Press Run to generate.</div>', label="text", elem_id="sv-text",
                                js_on_load=CHIP_CLICK_JS)
            with gr.Row():
                prev_btn = gr.Button("◀ Prev", size="sm", scale=0, min_width=90)
                play_btn = gr.Button("▶ Play", size="sm", scale=0, min_width=100)
                next_btn = gr.Button("Next ▶", size="sm", scale=0, min_width=90)
                step_slider = gr.Slider(0, 1, value=0, step=1, label="Step (0 = the prompt alone)", scale=4)
            panel_html = gr.HTML(label="step", elem_id="sv-panel", js_on_load=CHIP_CLICK_JS)
            tree_view = gr.HTML(label="draft tree", elem_id="sv-tree", visible=False, js_on_load=CHIP_CLICK_JS)
            mask_plot = gr.Plot(label="tree attention mask", show_label=False, elem_id="sv-mask", visible=False)
            with gr.Accordion("Step inspector: p, q, their overlap and the residual", open=True) as inspector_box:
                position = gr.Radio([], label="Position in this step (or click a chip)")
                inspector_plot = gr.Plot(label="inspector", show_label=False, elem_id="sv-inspector")
            with gr.Accordion("Open a saved trace (.jsonl)", open=False):
                trace_file = gr.File(file_types=[".jsonl", ".gz"],
                                     label="python -m specviz generate --jsonl ... > run.jsonl (or .jsonl.gz)")
        with gr.Tab("Race", id="race"):
            with gr.Row():
                race_btn = gr.Button("Race", variant="primary", scale=2)
                race_stop = gr.Button("Stop", variant="stop", scale=1)
            gr.Markdown("Same prompt and settings, autoregressive vs the chosen method (any of them: spec, "
                        "tree, prompt lookup, lookahead, cascade, Medusa, EAGLE, auto k; spec when ar is chosen). Only one engine "
                        "computes at a time (always the one whose own clock is behind), so neither slows the other; "
                        "each lane shows its own measured compute time. The strip in each lane is its stream as a "
                        "reader sees it: one bar per visible update, as wide as the tokens it brought and as tall "
                        "as the wait before it (both lanes on one scale; hover a bar).")
            with gr.Row(equal_height=True):
                ar_html = gr.HTML(label="autoregressive lane", elem_id="sv-lane-ar")
                spec_html = gr.HTML(label="speculative lane", elem_id="sv-lane-spec")
            verdict_html = gr.HTML(label="verdict", elem_id="sv-verdict")
        with gr.Tab("Speedup vs acceptance", id="charts"):
            speedup_plot = gr.Plot(charts.speedup_figure([]), label="speedup vs acceptance", show_label=False, elem_id="sv-speedup")
            with gr.Row():
                tau_plot = gr.Plot(label="tokens per target forward", show_label=False, elem_id="sv-tau")
                position_plot = gr.Plot(label="acceptance by position", show_label=False, elem_id="sv-positions")
            gr.Markdown("The charts below describe the latest run: a Run in the step view, or the speculative "
                        "lane of the latest race.", elem_classes="sv-muted")
            explain_md = gr.Markdown("Run speculative decoding to compare α with accepted/drafted.", label="alpha explained")
            clear_btn = gr.Button("Clear this session's runs", size="sm")
        with gr.Tab("How it works", id="how"):
            gr.HTML(chips.legend().html)
            gr.Markdown(HOW_IT_WORKS)
    timer = gr.Timer(1.0, active=False)

    settings = [prompt, pair, method_dd, k, temperature, top_p, max_new_tokens, seed, chat, auto_k_box, auto_rule_dd,
                confidence_sl, acceptance_radio, ngram_sl, tree_shape_tb, tree_dynamic_cb, tree_budget_sl, draft_radio,
                history_state]
    view = [text_html, panel_html, stats_html, step_slider, position, inspector_plot, tree_view, mask_plot]
    charts_out = [speedup_plot, tau_plot, position_plot, explain_md]
    # one live run computes at a time: they wait in ENGINE_LINE, not in Gradio's queue, which can
    # hold a run but not refuse it for waiting too long
    engine_queue = dict(concurrency_limit=None, concurrency_id="engine")
    run_event = run_btn.click(in_line(run, stats_html), settings,
                              view + charts_out + [events_state, busy_state, history_state],
                              api_name="run", show_progress="minimal", **engine_queue)
    race_event = race_btn.click(in_line(race_run, verdict_html), settings,
                                [ar_html, spec_html, verdict_html, history_state] + charts_out,
                                api_name="race", show_progress="minimal", **engine_queue)
    for stop in (stop_btn, race_stop):
        stop.click(None, cancels=[run_event, race_event])
    private = dict(api_visibility="private", show_progress="hidden")
    replay = [events_state, busy_state, step_slider]
    step_slider.release(show, replay, view, **private)
    prev_btn.click(lambda e, b, n: shift(e, b, n, -1), replay, view, **private)
    next_btn.click(lambda e, b, n: shift(e, b, n, +1), replay, view, **private)
    position.input(show, replay + [position], view, **private)
    for html in (text_html, panel_html):
        html.click(on_chip, [events_state, busy_state], view + [inspector_box], **private)
    play_btn.click(toggle_play, [playing_state] + replay, view + [timer, play_btn, playing_state], **private)
    timer.tick(tick, replay, view + [timer, play_btn, playing_state], **private)
    trace_file.upload(open_trace, [trace_file, history_state], view + charts_out + [events_state, busy_state],
                      api_name="open_trace", show_progress="minimal")
    # a preset fills the settings (gr.Examples), then shows its recording: outside the queue in a
    # browser (queue=False), in a group of its own for API clients, never behind the engine
    examples.load_input_event.then(show_preset, examples.dataset,
                                   view + charts_out + [ar_html, spec_html, verdict_html, events_state, busy_state],
                                   queue=False, **private)
    replays = dict(concurrency_id="replay", concurrency_limit=None)
    gr.api(presets, api_name="presets", **replays)
    gr.api(preset, api_name="preset", **replays)
    clear_btn.click(clear_history, None, [history_state, speedup_plot], **private)
    method_controls = [method_dd, k, auto_k_box, auto_rule_dd, confidence_sl, ngram_sl, tree_box, tree_dynamic_cb,
                       tree_shape_tb, tree_budget_sl, acceptance_radio]
    for control in (method_dd, auto_k_box, auto_rule_dd):
        control.change(on_method, [method_dd, auto_k_box, auto_rule_dd, tree_dynamic_cb], method_controls, **private)
    tree_dynamic_cb.change(on_tree_kind, tree_dynamic_cb, [tree_shape_tb, tree_budget_sl], **private)
# Nothing waits long in Gradio's queue now (live runs wait in ENGINE_LINE, replays have no limit):
# the cap bounds a burst, and a class of 30 asking for presets at once must fit in it
demo.queue(max_size=128, default_concurrency_limit=8)

if spaces is not None and os.environ.get("SPACE_ID"):
    get_pair(DEFAULT_PAIR)  # ZeroGPU wants weights placed at start-up, not inside a GPU call


def launch(**kwargs):
    """Launch with the app's theme and style sheet (Gradio 6 takes them in launch()), the presets
    rendered first (a second or two): a class arrives all at once, not one visitor at a time."""
    for label in PRESET_LABELS:
        try:
            preset_views(label)
        except gr.Error as exc:  # said again to whoever clicks that preset
            print(f"warning: {exc}", file=sys.stderr)
    return demo.launch(**{**LAUNCH_KWARGS, **kwargs})


def preload(name: str) -> None:
    """Load (and on a first start, prepare) the default pair while the page is already up; a
    visitor who clicks Run meanwhile waits on the same lock, with the progress bar."""
    try:
        get_pair(name)
    except SpecvizError as exc:  # shown again, as gr.Error, to whoever clicks Run
        print(f"error: {exc}", file=sys.stderr)


if __name__ == "__main__":
    threading.Thread(target=preload, args=(DEFAULT_PAIR,), daemon=True).start()
    launch(server_port=int(os.environ.get("PORT") or os.environ.get("GRADIO_SERVER_PORT") or 7860))
