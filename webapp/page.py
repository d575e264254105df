"""The page: the views' tabs in one gr.Blocks, their listeners, the queue, and launch()."""

from __future__ import annotations

import os
import sys

import gradio as gr

from specviz.errors import SpecvizError
from webapp import charts, howto, presets, race, serving, settings, step
from webapp.common import APP_CSS, DEFAULT_PAIR, get_pair, spaces, ui
from webapp.traces import MAX_TRACE_BYTES

THEME = gr.themes.Soft(text_size=gr.themes.sizes.text_lg)
# max_file_size: Gradio refuses bigger uploads before they reach the disk of a public Space
LAUNCH_KWARGS = dict(theme=THEME, css=APP_CSS, ssr_mode=False, max_file_size=MAX_TRACE_BYTES)

with gr.Blocks(title="specviz: speculative decoding, step by step", fill_width=True) as demo:
    gr.Markdown("# specviz · speculative decoding, step by step\nA small draft model guesses; "
                "the big target model checks all guesses in one pass. Every colour and number "
                "below comes from the real engine's events.", elem_classes="sv-title")
    ui.events_state, ui.busy_state, ui.history_state, ui.playing_state = (gr.State([]), gr.State(None), gr.State([]),
                                                                          gr.State(False))
    settings.build_sidebar()
    settings.build_prompt()
    with gr.Tabs():
        with gr.Tab("Step view", id="step"):
            step.build()
        with gr.Tab("Race", id="race"):
            race.build()
        with gr.Tab("Serving: batches", id="serving"):
            serving.build()
        with gr.Tab("Speedup vs acceptance", id="charts"):
            charts.build()
        with gr.Tab("How it works", id="how"):
            howto.build()
    ui.timer = gr.Timer(1.0, active=False)

    # one live run computes at a time: they wait in ENGINE_LINE, not in Gradio's queue, which can
    # hold a run but not refuse it for waiting too long
    engine_queue = dict(concurrency_limit=None, concurrency_id="engine")
    run_event = step.wire(engine_queue)
    race_event = race.wire(engine_queue)
    for stop in (ui.stop_btn, ui.race_stop):
        stop.click(None, cancels=[run_event, race_event])
    serving.wire(engine_queue)
    presets.wire()
    charts.wire()
    settings.wire()
# Nothing waits long in Gradio's queue now (live runs wait in ENGINE_LINE, replays have no limit):
# the cap bounds a burst, and a class of 30 asking for presets at once must fit in it
demo.queue(max_size=128, default_concurrency_limit=8)

if spaces is not None and os.environ.get("SPACE_ID"):
    get_pair(DEFAULT_PAIR)  # ZeroGPU wants weights placed at start-up, not inside a GPU call


def launch(**kwargs):
    """Launch with the app's theme and style sheet (Gradio 6 takes them in launch()), the presets
    rendered first (a second or two): a class arrives all at once, not one visitor at a time."""
    for label in settings.PRESET_LABELS:
        try:
            presets.preset_views(label)
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
