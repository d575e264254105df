"""Speedup vs acceptance: theory curves at the measured c with this session's runs, tokens per
target forward, acceptance by draft position and why accepted/drafted is not alpha."""

from __future__ import annotations

import gradio as gr

from specviz.render import charts, timeline
from webapp.common import ui


def build() -> None:
    ui.speedup_plot = gr.Plot(charts.speedup_figure([]), label="speedup vs acceptance", show_label=False,
                              elem_id="sv-speedup")
    with gr.Row():
        ui.tau_plot = gr.Plot(label="tokens per target forward", show_label=False, elem_id="sv-tau")
        ui.position_plot = gr.Plot(label="acceptance by position", show_label=False, elem_id="sv-positions")
    gr.Markdown("The charts below describe the latest run: a Run in the step view, or the speculative "
                "lane of the latest race.", elem_classes="sv-muted")
    ui.explain_md = gr.Markdown("Run speculative decoding to compare α with accepted/drafted.", label="alpha explained")
    ui.timeline_plot = gr.Plot(label="timeline", show_label=False, elem_id="sv-timeline")
    gr.Markdown("Who works when, step by step: the draft's lane and the target's. Plain speculation takes "
                "turns; ssd (speculative speculative decoding) drafts the next step while the target verifies "
                "(shaded), and each verdict is a hit (its draft was prepared) or a miss. Run spec and ssd on "
                "the same prompt to see both.", elem_classes="sv-muted")
    ui.clear_btn = gr.Button("Clear this session's runs", size="sm")


def outputs() -> list:
    return [ui.speedup_plot, ui.tau_plot, ui.position_plot, ui.explain_md, ui.timeline_plot]


def chart_view(events: list, history: list) -> dict:
    return {ui.speedup_plot: charts.speedup_figure(history), ui.tau_plot: charts.tau_histogram(events),
            ui.position_plot: charts.position_figure(events), ui.explain_md: charts.alpha_explainer(events),
            ui.timeline_plot: timeline.timeline_figure(timeline.beside(events, history))}


def clear_history():
    return {ui.history_state: [], ui.speedup_plot: charts.speedup_figure([])}


def wire() -> None:
    ui.clear_btn.click(clear_history, None, [ui.history_state, ui.speedup_plot], api_visibility="private",
                       show_progress="hidden")
