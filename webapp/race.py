"""The race: autoregressive against any method on the same prompt and settings, lane by lane on
their own clocks (specviz.render.race: only one engine computes at a time, always the lane whose
clock is behind, so neither slows the other)."""

from __future__ import annotations

import gradio as gr

import specviz
from specviz import methods
from specviz.bench import recordings as recorded
from specviz.errors import SpecvizError
from specviz.render import charts as chart_render, steps
from specviz.render.race import Lane, engine_lanes_html, gap_scale, lane_html, race, race_status, verdict
from webapp import charts
from webapp.common import check_request, get_pair, gpu, in_line, options, ui
from webapp.settings import run_inputs

# the race's two lanes: one definition for live and recorded races (sampled lanes run to the count)
ar_options, race_options = recorded.ar_options, recorded.race_options


@gpu
def stream_race(pair_name: str, prompt: str, cfg, draft_quant: str = "none"):
    """Both lanes' events, one step of one lane per item: whichever lane's own clock is behind.
    Both lanes run the same target; an int8 draft only changes the speculative lane's drafter."""
    ar = Lane("ar", specviz.generate(get_pair(pair_name), prompt, ar_options(cfg)))
    spec = Lane("spec", specviz.generate(get_pair(pair_name, draft_quant=draft_quant), prompt, race_options(cfg)))
    for lane, new in race(ar, spec):
        yield {"lane": lane.name, "events": new, "busy": lane.busy, "done": lane.done}


def race_run(prompt, pair_name, method, k, temperature, top_p, max_new_tokens, seed, chat, auto_k=False,
             auto_rule="cost", confidence=0.4, acceptance="exact", ngram=3, tree_shape="3,2,1", tree_dynamic=False,
             tree_budget=16, draft_quant="none", history=None, progress=gr.Progress(), request: gr.Request = None):
    """Autoregressive vs the selected method ("spec" when "ar" is selected), with all its settings
    (tree, prompt lookup, cascade, auto k, typical acceptance), streamed lane by lane on their own
    clocks."""
    history = history or []
    check_request(pair_name, prompt, max_new_tokens, progress, draft_quant)
    cfg = options("spec" if method == "ar" else method, k, temperature, top_p, max_new_tokens, seed, chat,
                  auto_k, auto_rule, confidence, acceptance, ngram, tree_shape, tree_dynamic, tree_budget, request)
    lanes = {"ar": {"events": [], "busy": 0.0, "done": False}, "spec": {"events": [], "busy": 0.0, "done": False}}
    try:
        for update in stream_race(pair_name, prompt, cfg, draft_quant):
            lane = lanes[update["lane"]]
            lane["events"] = lane["events"] + update["events"]
            lane["busy"], lane["done"] = update["busy"], update["done"]
            yield race_view(lanes)
    except SpecvizError as exc:
        raise gr.Error(str(exc)) from exc
    ar, spec = race_summaries(lanes, cfg.method)
    own = own_lanes(pair_name, prompt, cfg)
    history = history + [ar, spec] + own
    yield {**race_view(lanes, ar, spec, own), **charts.chart_view(lanes["spec"]["events"], history),
           ui.history_state: history}


def own_lanes(pair_name: str, prompt: str, cfg) -> list:
    """On the llama.cpp pair, after the race: llama.cpp's own program (llama-server) on the same
    file, prompt and settings, without and with its own speculation (draft-simple, k drafts a
    step), as records for the table and the charts. Nothing where llama-server is not built."""
    from specviz.bench import watch
    from specviz.runtime.llamacpp import server as llamacpp_server

    pair = get_pair(pair_name)
    if pair.backend != "llama.cpp" or llamacpp_server.missing():
        return []
    k = cfg.k if isinstance(cfg.k, int) else 4
    try:
        ids, records = pair.encode(prompt, cfg.chat), []
        for name, draft in (("llama.cpp's own AR", None), (f"llama.cpp's own spec (k = {k})", k)):
            server = llamacpp_server.shared(pair.weights.lower(), draft)
            before = _drafts(server, watch)
            out = server.complete(ids, cfg.max_new_tokens, cfg.warp.temperature, cfg.warp.top_p, cfg.seed,
                                  race_options(cfg).ignore_eos)
            drafts = _drafts(server, watch) - before
            seconds = out["predicted_n"] / out["tokens_per_s"] if out["tokens_per_s"] else 0.0
            records.append(chart_render.engine_record(name, "llama-server spec" if draft else "llama-server ar",
                                                      draft or None, out["predicted_n"] or 0, seconds,
                                                      out["draft_n"], out["draft_accepted"], int(drafts),
                                                      records[0] if records else None))
    except SpecvizError as exc:
        raise gr.Error(str(exc)) from exc
    return records


def _drafts(server, watch) -> float:
    """Verification steps with a draft so far (a server without a draft exports no such counter)."""
    try:
        return watch.parse(server.metrics_text()).drafts
    except ValueError:
        return 0.0


def race_view(lanes: dict, ar: dict = None, spec: dict = None, own: list = ()) -> dict:
    # one bar scale for both lanes' waits between updates, so their strips compare
    scale = gap_scale(lanes["ar"]["events"], lanes["spec"]["events"])
    out = {ui.ar_html: lane_html(lanes["ar"]["events"], lanes["ar"]["busy"], "Autoregressive",
                                 "target only: one forward per token", lanes["ar"]["done"], scale).html,
           ui.spec_html: lane_html(lanes["spec"]["events"], lanes["spec"]["busy"], "Speculative",
                                   _method_line(lanes["spec"]["events"]), lanes["spec"]["done"], scale).html}
    if ar and spec:
        note = ("Same file, same prompt, same settings; its clock is llama-server's own decoding time "
                "(timings.predicted_ms), speculation included.")
        out[ui.verdict_html] = verdict(ar, spec, _same_text(lanes)).html + engine_lanes_html(list(own), note).html
    else:
        out[ui.verdict_html] = race_status(lanes["ar"]["busy"], lanes["spec"]["busy"]).html
    return out


def race_summaries(lanes: dict, method: str, prefix: str = "") -> tuple:
    """A finished race's two records for the charts: the speculative lane measured against the
    autoregressive one, each on its own compute clock."""
    ar = chart_render.summarize(lanes["ar"]["events"], lanes["ar"]["busy"], label=f"{prefix}race: autoregressive")
    lossy = "" if steps.build(lanes["spec"]["events"][:1]).lossless else " (LOSSY)"
    spec = chart_render.summarize(lanes["spec"]["events"], lanes["spec"]["busy"],
                                  label=f"{prefix}race: {method}{lossy}", baseline=ar)
    return ar, spec


def _method_line(events: list) -> str:
    return methods.setting(steps.build(events[:1]).started or {})


def _same_text(lanes: dict):
    """At temperature 0 both lanes must produce the same tokens (a lossy rule need not); None when
    sampling."""
    runs = [steps.build(lane["events"]) for lane in lanes.values()]
    if not all(run.finished and run.deterministic for run in runs):
        return None
    return runs[0].finished["token_ids"] == runs[1].finished["token_ids"]


def build() -> None:
    with gr.Row():
        ui.race_btn = gr.Button("Race", variant="primary", scale=2)
        ui.race_stop = gr.Button("Stop", variant="stop", scale=1)
    gr.Markdown("Same prompt and settings, autoregressive vs the chosen method (any of them: spec, "
                "tree, prompt lookup, lookahead, cascade, Medusa, EAGLE, auto k; spec when ar is chosen). Only one engine "
                "computes at a time (always the one whose own clock is behind), so neither slows the other; "
                "each lane shows its own measured compute time. The strip in each lane is its stream as a "
                "reader sees it: one bar per visible update, as wide as the tokens it brought and as tall "
                "as the wait before it (both lanes on one scale; hover a bar).")
    with gr.Row(equal_height=True):
        ui.ar_html = gr.HTML(label="autoregressive lane", elem_id="sv-lane-ar")
        ui.spec_html = gr.HTML(label="speculative lane", elem_id="sv-lane-spec")
    ui.verdict_html = gr.HTML(label="verdict", elem_id="sv-verdict")


def outputs() -> list:
    return [ui.ar_html, ui.spec_html, ui.verdict_html]


def wire(engine_queue: dict):
    """The race's listener; returns its event (Stop cancels it)."""
    return ui.race_btn.click(in_line(race_run, ui.verdict_html), run_inputs(),
                             outputs() + [ui.history_state] + charts.outputs(),
                             api_name="race", show_progress="minimal", **engine_queue)
