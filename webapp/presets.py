"""Presets: runs recorded once on the real pair (specviz.bench.recordings), replayed from memory, rendered
once per process, never queued behind the engine: a class clicking presets costs no engine time."""

from __future__ import annotations

import threading
from html import escape

import gradio as gr
from gradio.components.plot import PlotData

from specviz.bench import recordings as recorded
from specviz.render import steps
from webapp import charts, race, step
from webapp.common import ui
from webapp.settings import PRESET_LABELS

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
    ar, spec = race.race_summaries(lanes, rec.preset.method, prefix="recorded ")
    note = recorded_note(rec.note, rec.earlier_code)
    shown = {**step.step_view(rec.run, busy=rec.run_busy), **charts.chart_view(rec.run, [ar, spec]),
             **race.race_view(lanes, ar, spec)}
    shown[ui.stats_html] = note + shown[ui.stats_html]
    shown[ui.verdict_html] = note + shown[ui.verdict_html]
    older = f" **{rec.earlier_code}**" if rec.earlier_code else ""
    shown[ui.explain_md] = f"*{rec.note}: a replay, no model ran.*{older}\n\n{shown[ui.explain_md]}"
    view = {key: serialised(value) for key, value in shown.items()}
    return {"ui": {**view, ui.events_state: rec.run, ui.busy_state: rec.run_busy}, "api": _preset_api(rec, shown)}


def recorded_note(note: str, earlier: str = "") -> str:
    """Where it was recorded; and, when the code that decided it has changed since, that too."""
    older = f' <strong data-earlier-code="1">{escape(earlier)}</strong>' if earlier else ""
    return (f'<div class="sv-recorded" data-recorded="1">{escape(note)}: a replay, no model ran. '
            f"Run or Race computes it live with your settings.{older}</div>")


def serialised(value):
    """A figure as Gradio's serialised plot, made once: Gradio would re-serialise a cached figure
    on every request, the slowest part of serving a replay."""
    return PlotData(type="plotly", plot=value.to_json()) if hasattr(value, "to_plotly_json") else value


def _preset_api(rec, shown: dict) -> dict:
    """The views as plain JSON: HTML strings, Markdown, and Plotly figures as JSON text
    (plotly.io.from_json reads them), which Gradio passes through without walking every number."""
    def figure(component):
        return shown[component].to_json()

    tree_shown = shown[ui.tree_view]
    return {"label": rec.preset.label, "recorded": rec.note, "where": rec.where,
            "settings": rec.preset.race_options().to_dict(),  # as the recorded run ran (race rule)
            "lossless": steps.build(rec.run[:1]).lossless, "text": rec.run[-1]["text"],
            "step_view": {"text": shown[ui.text_html], "panel": shown[ui.panel_html], "stats": shown[ui.stats_html],
                          "tree": tree_shown.value if tree_shown.visible else None,
                          "inspector": figure(ui.inspector_plot)},
            "race": {"autoregressive": shown[ui.ar_html], "speculative": shown[ui.spec_html],
                     "verdict": shown[ui.verdict_html]},
            "charts": {"speedup": figure(ui.speedup_plot), "tau": figure(ui.tau_plot),
                       "positions": figure(ui.position_plot), "alpha": shown[ui.explain_md]}}


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


def wire() -> None:
    # a preset fills the settings (gr.Examples), then shows its recording: outside the queue in a
    # browser (queue=False), in a group of its own for API clients, never behind the engine
    ui.examples.load_input_event.then(show_preset, ui.examples.dataset,
                                      step.outputs() + charts.outputs() + race.outputs()
                                      + [ui.events_state, ui.busy_state],
                                      queue=False, api_visibility="private", show_progress="hidden")
    replays = dict(concurrency_id="replay", concurrency_limit=None)
    gr.api(presets, api_name="presets", **replays)
    gr.api(preset, api_name="preset", **replays)
