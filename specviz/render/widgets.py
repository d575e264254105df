"""Notebook widgets over the engine's events: token stream, step inspector, tree view, race.

Every widget draws with the same renderers as the app (`chips`, `panel`, `inspector`, `tree`,
`race`), so colours, legend and tooltips match; nothing here decides anything.

    TokenStream(events)     anywidget: the run as chips, animated step by step. State lives in
                            synced traits (`events`, `cursor`, `playing`, `interval_ms`); Play
                            runs an asyncio task in the kernel, so the kernel stays idle and
                            Pause/Step clicks are handled while it plays.
    StepInspector(events)   one step taken apart: step panel, p vs q bars, overlap, residual.
    TreeView(events)        the draft tree of a step (tree methods emit `tree_built`).
    RaceWidget()            autoregressive vs speculative, each lane on its own measured clock
                            (specviz.render.race); Replay re-plays both lanes side by side at
                            the times they were computed. On a busy machine its verdict is the
                            note saying so (`timing_note()`), not faster/slower.
    BatchWidget()           a batch of users sharing one target pass per step: plain decoding,
                            then a method, the rows of every shared pass (who accepted how
                            many) as they are computed, and a slider to replay the passes.

Each widget has a static fallback: `_repr_mimebundle_` adds `text/html` (and the inspector a
PNG when kaleido can draw one), so a saved notebook shows something meaningful on GitHub or
nbviewer, where widget JavaScript does not run, and the executed copies (notebooks/execute.py)
show it in place of the widget. A run's end rewrites it (`refresh_static`), so the saved HTML is
the finished run, not the empty widget first displayed.
"""

from __future__ import annotations

import asyncio
import base64
from typing import Iterable, Optional

import anywidget
import ipywidgets as ipw
import traitlets as t

from specviz.render import chips, inspector, notebook, panel, steps as st, tree as tree_render
from specviz.render.charts import summarize
from specviz.render.html import CSS, Rendered
from specviz.render.race import Lane, busy_note, gap_scale, lane_html, race, verdict
from specviz.render.serving import batch_summary, compare, rows_table, serving_html

WIDGET_CSS = CSS + r"""
.sv-controls { display: flex; flex-wrap: wrap; gap: 8px; align-items: center; margin: 4px 0 8px 0; }
.sv-controls button { font-size: 15px; padding: 4px 12px; border-radius: 6px; border: 1px solid #94a3b8;
  background: #f8fafc; color: #0f172a; cursor: pointer; }
.sv-controls button:focus { outline: 3px solid #2563eb; outline-offset: 1px; }
.sv-controls input[type=range] { flex: 1 1 180px; min-width: 120px; }
.sv-controls .sv-where { font-size: 15px; color: #475569; font-variant-numeric: tabular-nums; }
.sv-stream .sv-text { min-height: 60px; }
"""


def _dicts(events: Iterable) -> list:
    return [st.as_dict(e) for e in events]


# ---------------------------------------------------------------------------------------------
# token stream

_STREAM_ESM = r"""
function render({ model, el }) {
  el.classList.add("sv-root", "sv-stream");
  const bar = document.createElement("div");
  bar.className = "sv-controls";
  const button = (label, title, onClick) => {
    const b = document.createElement("button");
    b.textContent = label; b.title = title; b.setAttribute("aria-label", title);
    b.addEventListener("click", onClick); bar.appendChild(b); return b;
  };
  const set = (changes) => { for (const [k, v] of Object.entries(changes)) model.set(k, v); model.save_changes(); };
  const last = () => model.get("n_steps") - 1;
  button("◀ Back", "Back one step", () => set({ playing: false, cursor: Math.max(-1, model.get("cursor") - 1) }));
  const play = button("▶ Play", "Play", () => set({ playing: !model.get("playing") }));
  play.classList.add("sv-play");
  button("Step ▶", "Forward one step", () => set({ playing: false, cursor: Math.min(last(), model.get("cursor") + 1) }));
  const scrub = document.createElement("input");
  scrub.type = "range"; scrub.min = -1; scrub.setAttribute("aria-label", "Step");
  scrub.addEventListener("input", () => set({ playing: false, cursor: Number(scrub.value) }));
  bar.appendChild(scrub);
  const where = document.createElement("span");
  where.className = "sv-where";
  bar.appendChild(where);
  const view = document.createElement("div");
  el.append(bar, view);
  const draw = () => {
    const cursor = model.get("cursor"), n = model.get("n_steps");
    play.textContent = model.get("playing") ? "‖ Pause" : "▶ Play";
    play.title = model.get("playing") ? "Pause" : "Play";
    play.setAttribute("aria-label", play.title);
    scrub.max = Math.max(0, n - 1); scrub.value = cursor;
    where.textContent = cursor < 0 ? `prompt · ${n} steps` : `step ${cursor + 1} of ${n}`;
    el.dataset.cursor = cursor; el.dataset.playing = model.get("playing") ? "1" : "0";
    view.innerHTML = model.get("html");
  };
  for (const name of ["html", "playing", "cursor", "n_steps"]) model.on(`change:${name}`, draw);
  draw();
}
export default { render };
"""


class _StaticCopy:
    """A widget that a page without a kernel (an executed copy, GitHub, nbconvert) shows as its
    `static_html()`: the live widget's view stays in its own output, the HTML beside it.

    A widget is often displayed empty and then filled by a run (`display(race); race.run(...)`),
    so the HTML of the moment it was displayed would show an empty widget. Each display is
    therefore given an id, and `refresh_static()` (called when a run ends) rewrites every output
    showing the widget with the HTML of its finished state."""

    def _repr_mimebundle_(self, **kwargs):
        bundle = super()._repr_mimebundle_(**kwargs)
        data, meta = bundle if isinstance(bundle, tuple) else (bundle, {})
        data["text/html"] = self.static_html()
        return data, meta

    def _ipython_display_(self) -> None:
        from IPython.display import display

        data, meta = self._repr_mimebundle_()
        handle = display(data, metadata=meta, raw=True, display_id=True)
        if handle is not None:  # None outside IPython: nothing to refresh later
            self._static_handles = getattr(self, "_static_handles", []) + [handle]

    def refresh_static(self) -> None:
        """Write the widget's current state into every output that displays it."""
        for handle in getattr(self, "_static_handles", []):
            data, meta = self._repr_mimebundle_()
            handle.update(data, metadata=meta, raw=True)


class TokenStream(_StaticCopy, anywidget.AnyWidget):
    """A run as token chips with Back / Play / Step controls and a step slider.

    `cursor` is the last step shown (-1: the prompt alone). Chips carry their p, q, p/q, u and
    the decision in a hover/focus tooltip; the step panel under them tells the current step.
    """

    _esm = _STREAM_ESM
    _css = WIDGET_CSS

    events = t.List(t.Dict()).tag(sync=True)
    cursor = t.Int(-1).tag(sync=True)
    playing = t.Bool(False).tag(sync=True)
    interval_ms = t.Int(700).tag(sync=True)
    n_steps = t.Int(0).tag(sync=True)  # derived from events
    html = t.Unicode("").tag(sync=True)  # derived from events and cursor, drawn by the renderers

    def __init__(self, events: Iterable = (), cursor: Optional[int] = None, **kwargs):
        events = _dicts(events)
        super().__init__(**kwargs)
        self._run = st.build([])
        self._task: Optional[asyncio.Future] = None
        self.events = events
        self.cursor = self.n_steps - 1 if cursor is None else cursor
        self._draw()

    # -- derived state ------------------------------------------------------------------------

    @t.observe("events")
    def _on_events(self, change) -> None:
        self._run = st.build(self.events)
        self.n_steps = len(self._run.steps)
        self.cursor = min(self.cursor, self.n_steps - 1)
        self._draw()

    @t.validate("cursor")
    def _clamp(self, proposal) -> int:
        return max(-1, min(int(proposal["value"]), self.n_steps - 1))

    @t.observe("cursor")
    def _on_cursor(self, change) -> None:
        self._draw()

    def _draw(self) -> None:
        run = self._run
        body = chips.run_text(run, upto=self.cursor, selected=self.cursor).html
        upto = self._events_upto()  # counters follow the cursor: the run as it stood at that step
        so_far = run if upto == len(self.events) else st.build(self.events[:upto])
        self.html = (chips.legend(self._statuses()).html + body + panel.step_panel(run, self.cursor).html
                     + panel.stats(so_far, st.run_metrics(self.events[:upto])).html)

    def _statuses(self) -> list:
        if self._run.method == "ar":
            return ["target"]
        return [s for s in st.STATUSES if s != "target"]

    def _events_upto(self) -> int:
        """How many events belong to steps 0..cursor (for counters that follow the cursor)."""
        if self.cursor >= self.n_steps - 1:
            return len(self.events)
        for i, data in enumerate(self.events):
            if isinstance(data.get("step"), int) and data["step"] > self.cursor:
                return i
        return len(self.events)

    # -- controls (the buttons set the same traits) --------------------------------------------

    def step(self, n: int = 1) -> int:
        """Move the cursor n steps (negative: back); stops playing. Returns the new cursor."""
        self.playing = False
        self.cursor = self.cursor + n
        return self.cursor

    def play(self, interval_ms: Optional[int] = None) -> None:
        """Animate from the cursor (from the prompt if the run is already shown to the end)."""
        if interval_ms is not None:
            self.interval_ms = int(interval_ms)
        self.playing = True

    def pause(self) -> None:
        self.playing = False

    @t.observe("playing")
    def _on_playing(self, change) -> None:
        if change["new"]:
            if self.cursor >= self.n_steps - 1:
                self.cursor = -1
            self._start()
        elif self._task is not None:
            self._task.cancel()
            self._task = None

    def _start(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no event loop (a plain script): show the end, nothing to animate
            self.cursor = self.n_steps - 1
            self.playing = False
            return
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._animate())

    async def _animate(self) -> None:
        try:
            while self.playing and self.cursor < self.n_steps - 1:
                await asyncio.sleep(max(self.interval_ms, 10) / 1000)
                if self.playing:
                    self.cursor += 1
        finally:
            self._task = None
            if self.cursor >= self.n_steps - 1:
                self.playing = False

    # -- live runs ------------------------------------------------------------------------------

    def record(self, events: Iterable, follow: bool = True) -> list:
        """Pull events from a running engine, one step per widget update (the text grows as the
        engine computes). Returns the events as dicts."""
        pending = []
        for event in events:
            pending.append(st.as_dict(event))
            if pending[-1]["kind"] in ("step_finished", "run_finished", "run_started"):
                self.events = self.events + pending
                pending = []
                if follow:
                    self.cursor = self.n_steps - 1
        if pending:
            self.events = self.events + pending
        return self.events

    def live(self, events: Iterable) -> list:
        """Display the widget, record a running engine into it, then refresh the displayed
        output so a saved notebook keeps the finished run as its static fallback."""
        from IPython.display import display

        display(self)
        self.record(events)
        self.refresh_static()
        return self.events

    # -- static fallback -----------------------------------------------------------------------

    def static_html(self) -> str:
        """The whole run as plain HTML (style sheet included): legend, chips, counters."""
        run = self._run
        body = (chips.legend(self._statuses()).html + chips.run_text(run).html
                + panel.stats(run, st.run_metrics(self.events)).html)
        return Rendered(body)._repr_html_()


# ---------------------------------------------------------------------------------------------
# step inspector

def _figure_png(fig) -> Optional[bytes]:
    """A PNG of a Plotly figure, or None when no static image engine (kaleido) is available."""

    return notebook.figure_png(fig)


def _link_step(slider: ipw.IntSlider, widget) -> None:
    """Keep a 1-based step slider and a widget's 0-based `step` trait in sync, both ways."""
    slider.observe(lambda change: setattr(widget, "step", change["new"] - 1), names="value")
    widget.observe(lambda change: setattr(slider, "value", change["new"] + 1), names="step")
    slider.value = widget.step + 1


def _show(output: ipw.Output, fig) -> None:
    """Draw a figure into an Output widget through the notebook's Plotly renderers; outside a
    running IPython (a script, a test) there is nowhere to draw, so nothing is done."""
    from IPython import get_ipython
    from IPython.display import display

    if get_ipython() is None:
        return
    output.clear_output(wait=True)
    with output:
        display(fig)


class StepInspector(_StaticCopy, ipw.VBox):
    """Step panel plus the inspector figure (p vs q bars, min(p, q), residual) for one step and
    draft position, with a step slider and a position menu. `step` and `index` are traits, so
    `ipywidgets.link((stream, "cursor"), (inspector, "step"))` keeps it on a stream's step."""

    step = t.Int(0)
    index = t.Int(-1)  # -1: the default position (the rejection, else the last)
    _ready = False  # trait changes made while __init__ builds the children draw nothing yet

    def __init__(self, events: Iterable = (), step: Optional[int] = None, index: int = -1, **kwargs):
        self.events = _dicts(events)
        self.run = st.build(self.events)
        n = len(self.run.steps)
        self._slider = ipw.IntSlider(min=1, max=max(1, n), description="step",  # counted from 1, like the panel
                                     layout=ipw.Layout(width="420px"))
        self._position = ipw.Dropdown(description="position", layout=ipw.Layout(width="520px"))
        self._panel = ipw.HTML()
        self._figure = ipw.Output()
        super().__init__([ipw.HBox([self._slider, self._position]), self._panel, self._figure], **kwargs)
        _link_step(self._slider, self)
        self._position.observe(self._on_position, names="value")
        self.step = self._first_interesting() if step is None else step
        self.index = index
        self._ready = True
        self._refresh()

    def _first_interesting(self) -> int:
        """The first step with a rejection (most to see), else 0."""
        return next((s.step for s in self.run.steps if s.rejected is not None), 0)

    @t.validate("step")
    def _clamp(self, proposal) -> int:
        return max(0, min(int(proposal["value"]), len(self.run.steps) - 1))

    @t.observe("step")
    def _on_step(self, change) -> None:
        self.index = -1
        self._refresh()

    @t.observe("index")
    def _on_index(self, change) -> None:
        self._refresh()

    def _on_position(self, change) -> None:
        if change["new"] is not None and change["new"] != self.resolved_index():
            self.index = change["new"]

    def resolved_index(self) -> Optional[int]:
        step = self.run.step(self.step)
        if step is None or not step.tokens:
            return None
        return self.index if self.index in step.indices() else inspector.default_index(step)

    def figure(self):
        return inspector.inspector_figure(self.run, self.step, self.resolved_index())

    def _choices(self) -> list:
        step = self.run.step(self.step)
        if step is None:
            return []
        return [(f"token {i + 1} of the step: " + " → ".join(f"{t.text!r} {t.status}" for t in step.at(i)), i)
                for i in step.indices()]

    def _refresh(self) -> None:
        if not self._ready:
            return
        self._position.unobserve(self._on_position, names="value")
        self._position.options = self._choices()
        self._position.value = self.resolved_index()
        self._position.observe(self._on_position, names="value")
        self._panel.value = Rendered(panel.step_panel(self.run, self.step).html)._repr_html_()
        _show(self._figure, self.figure())

    def static_html(self) -> str:
        png = _figure_png(self.figure())
        image = (f'<img alt="inspector: p vs q at step {self.step + 1}" style="max-width:100%" '
                 f'src="data:image/png;base64,{base64.b64encode(png).decode()}">') if png else ""
        return Rendered(panel.step_panel(self.run, self.step).html)._repr_html_() + image


# ---------------------------------------------------------------------------------------------
# tree view

class TreeView(_StaticCopy, ipw.VBox):
    """The draft tree of each step (tree methods: `tree_built` events) as the app draws it: the
    tree with the walk's decisions and the accepted path, the step panel, and the tree attention
    mask of the target pass. Opens at the first step with a rejected node."""

    step = t.Int(0)
    _ready = False  # trait changes made while __init__ builds the children draw nothing yet

    def __init__(self, events: Iterable = (), step: Optional[int] = None, **kwargs):
        self.events = _dicts(events)
        self.run = st.build(self.events)
        self._slider = ipw.IntSlider(min=1, max=max(1, len(self.run.steps)), description="step")
        self._html = ipw.HTML()
        self._mask = ipw.Output()
        super().__init__([self._slider, self._html, self._mask], **kwargs)
        _link_step(self._slider, self)
        self.step = self._first_interesting() if step is None else step
        self._ready = True
        self._refresh()

    def _first_interesting(self) -> int:
        return next((s.step for s in self.run.steps if any(n.status == "rejected" for n in s.nodes)), 0)

    @t.validate("step")
    def _clamp(self, proposal) -> int:
        return max(0, min(int(proposal["value"]), len(self.run.steps) - 1))

    @t.observe("step")
    def _on_step(self, change) -> None:
        self._refresh()

    def nodes(self) -> list:
        return tree_render.tree_nodes(self.run.step(self.step))

    def mask_figure(self):
        return tree_render.mask_figure(self.run.step(self.step))

    def html(self) -> str:
        step = self.run.step(self.step)
        body = (tree_render.tree_view(step, self.run.greedy, len(self.run.steps)).html
                + panel.step_panel(self.run, self.step).html)
        return Rendered(body)._repr_html_()

    def static_html(self) -> str:
        png = _figure_png(self.mask_figure()) if self.nodes() else None
        image = (f'<img alt="tree attention mask of step {self.step + 1}" style="max-width:100%" '
                 f'src="data:image/png;base64,{base64.b64encode(png).decode()}">') if png else ""
        return self.html() + image

    def _refresh(self) -> None:
        if self._ready:
            self._html.value = self.html()
            if self.nodes():
                _show(self._mask, self.mask_figure())


# ---------------------------------------------------------------------------------------------
# race

class RaceWidget(_StaticCopy, ipw.VBox):
    """Autoregressive vs speculative on one prompt, each lane timed on its own clock.

    `run(ar_events, spec_events)` drives both engines with `specviz.render.race.race` (only one
    computes at a time; the lane whose clock is behind goes next) and updates the lanes as they
    compute. It keeps each lane's timeline (own-clock seconds at the end of every step), so
    `replay()` (or the Replay button) shows both lanes side by side at the times they reached
    each step, as if they had run in parallel on two identical machines.
    """

    playing = t.Bool(False)
    speed = t.Float(1.0)  # replay speed: 2.0 plays twice as fast as measured

    TITLES = {"ar": ("Autoregressive", "target only: one forward per token"),
              "spec": ("Speculative", "draft k tokens, verify them in one target forward")}

    def __init__(self, **kwargs):
        self.lanes = {name: {"events": [], "busy": 0.0, "done": False, "timeline": []} for name in self.TITLES}
        self._ar, self._spec, self._verdict = ipw.HTML(), ipw.HTML(), ipw.HTML()
        self._replay = ipw.Button(description="▶ Replay", tooltip="Replay both lanes on their own clocks",
                                  disabled=True)
        self._replay.on_click(lambda _: setattr(self, "playing", not self.playing))
        lanes = ipw.HBox([self._ar, self._spec], layout=ipw.Layout(width="100%"))
        for box in (self._ar, self._spec):
            box.layout = ipw.Layout(width="50%")
        super().__init__([self._replay, lanes, self._verdict], **kwargs)
        self._task: Optional[asyncio.Future] = None
        self._draw({name: None for name in self.TITLES})

    # -- recording ----------------------------------------------------------------------------

    def run(self, ar_events: Iterable, spec_events: Iterable) -> dict:
        """Race two event streams; returns {"ar": record, "spec": record} (charts.summarize)."""
        lanes = {"ar": Lane("ar", ar_events), "spec": Lane("spec", spec_events)}
        for lane, new in race(*lanes.values()):
            state = self.lanes[lane.name]
            state["events"] = state["events"] + new
            state["busy"], state["done"] = lane.busy, lane.done
            state["timeline"].append((lane.busy, len(state["events"])))
            self._draw({name: None for name in self.TITLES})
        self._replay.disabled = False
        self.refresh_static()
        return self.records()

    def records(self) -> dict:
        ar = summarize(self.lanes["ar"]["events"], self.lanes["ar"]["busy"], label="race: autoregressive")
        spec = summarize(self.lanes["spec"]["events"], self.lanes["spec"]["busy"], label="race: speculative",
                         baseline=ar)
        return {"ar": ar, "spec": spec}

    def same_text(self) -> Optional[bool]:
        ends = [st.build(lane["events"]).finished for lane in self.lanes.values()]
        return ends[0]["token_ids"] == ends[1]["token_ids"] if all(ends) else None

    def timing_note(self) -> Optional[str]:
        """None when both lanes were timed on a quiet machine, else why their speeds mean nothing
        (the note the verdict shows instead of faster/slower); None too while the race runs."""
        if not all(lane["done"] for lane in self.lanes.values()):
            return None
        records = self.records()
        return busy_note(records["ar"], records["spec"])

    # -- drawing -------------------------------------------------------------------------------

    def _lane_html(self, name: str, at: Optional[float]) -> str:
        """Lane `name` as it stood at own-clock time `at` (None: everything recorded)."""
        lane = self.lanes[name]
        upto, seconds, done = len(lane["events"]), lane["busy"], lane["done"]
        if at is not None:
            reached = [(busy, n) for busy, n in lane["timeline"] if busy <= at]
            upto = reached[-1][1] if reached else 0
            seconds = min(at, lane["busy"])
            done = done and upto == len(lane["events"])
        title, subtitle = self.TITLES[name]
        scale = gap_scale(*(other["events"] for other in self.lanes.values()))  # both strips on one scale
        return Rendered(lane_html(lane["events"][:upto], seconds, title, subtitle, done, scale).html)._repr_html_()

    def _draw(self, at: dict) -> None:
        self._ar.value = self._lane_html("ar", at["ar"])
        self._spec.value = self._lane_html("spec", at["spec"])
        self._verdict.value = self.verdict_html()

    def verdict_html(self) -> str:
        if not all(lane["done"] for lane in self.lanes.values()):
            busy = {name: lane["busy"] for name, lane in self.lanes.items()}
            return Rendered(f'<div class="sv-verdict sv-muted">Racing… autoregressive at {busy["ar"]:.2f} s, '
                            f'speculative at {busy["spec"]:.2f} s of its own compute</div>')._repr_html_()
        records = self.records()
        return verdict(records["ar"], records["spec"], self.same_text())._repr_html_()

    # -- replay --------------------------------------------------------------------------------

    def replay(self, speed: Optional[float] = None) -> None:
        if speed is not None:
            self.speed = float(speed)
        self.playing = True

    @t.observe("playing")
    def _on_playing(self, change) -> None:
        self._replay.description = "‖ Pause" if change["new"] else "▶ Replay"
        if not change["new"]:
            if self._task is not None:
                self._task.cancel()
                self._task = None
            self._draw({name: None for name in self.TITLES})
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.playing = False
            return
        self._task = loop.create_task(self._animate())

    async def _animate(self, frame_s: float = 0.1) -> None:
        end = max(lane["busy"] for lane in self.lanes.values())
        clock = 0.0
        self._draw({name: clock for name in self.TITLES})
        try:
            while self.playing and clock < end:
                await asyncio.sleep(frame_s)
                clock += frame_s * self.speed
                self._draw({name: clock for name in self.TITLES})
        finally:
            self._task = None
            self.playing = False

    def static_html(self) -> str:
        lanes = (f'<div style="display:flex;gap:12px"><div style="flex:1">{self._lane_html("ar", None)}</div>'
                 f'<div style="flex:1">{self._lane_html("spec", None)}</div></div>')
        return lanes + self.verdict_html()


# ---------------------------------------------------------------------------------------------
# a batch of users

class BatchWidget(_StaticCopy, ipw.VBox):
    """A batched run beside plain decoding of the same batch (specviz.engine.batch).

    `run(ar_events, run_events)` computes plain decoding first, then the method (one after the
    other: two batches at once would compete for the same cores), and redraws the two lanes'
    serving numbers and the rows of each shared pass after every pass. The slider then replays
    the method's passes one by one. `comparison()` is the measured speedup beside the theory."""

    passes = t.Int(0)  # shared passes of the method shown (0: all)

    def __init__(self, **kwargs):
        self.lanes = {"ar": [], "run": []}
        self._summary, self._rows = ipw.HTML(), ipw.HTML()
        self._slider = ipw.IntSlider(min=0, max=0, description="passes", disabled=True,
                                     tooltip="replay the method's shared passes (0: all)")
        self._slider.observe(lambda change: setattr(self, "passes", change["new"]), names="value")
        super().__init__([self._summary, self._slider, self._rows], **kwargs)
        self._draw()

    def run(self, ar_events: Iterable, run_events: Iterable) -> Optional[dict]:
        for name, events in (("ar", ar_events), ("run", run_events)):
            for event in events:
                data = st.as_dict(event)
                self.lanes[name].append(data)
                if data["kind"] in ("batch_step", "batch_finished"):
                    self._draw()
        n = sum(e["kind"] == "batch_step" for e in self.lanes["run"])
        self._slider.max, self._slider.disabled = n, False
        self.refresh_static()
        return self.comparison()

    def comparison(self) -> Optional[dict]:
        """compare() of the finished lanes (None while either runs)."""
        if not all(any(e["kind"] == "batch_finished" for e in lane) for lane in self.lanes.values()):
            return None
        return compare(batch_summary(self.lanes["ar"]), batch_summary(self.lanes["run"]))

    @t.observe("passes")
    def _on_passes(self, change) -> None:
        self._draw()

    def _draw(self) -> None:
        shown = self.lanes["run"] or self.lanes["ar"]
        if not shown:
            self._summary.value = Rendered('<div class="sv-muted">run(ar_events, run_events) to serve a '
                                           'batch.</div>')._repr_html_()
            return
        self._summary.value = serving_html(self.lanes["ar"], self.lanes["run"])._repr_html_()
        self._rows.value = rows_table(shown, self.passes or None)._repr_html_()

    def static_html(self) -> str:
        return self._summary.value + self._rows.value
