"""The serving view: a batched run's events drawn as the rows of each shared pass, the serving
numbers of plain decoding and a method side by side, speedup against batch size; the theory of a
short run's tail; the app's serving handlers (live on the tiny pair, recorded runs, limits)."""

import math
import random
import re
import sys
from pathlib import Path

import pytest

from specviz import generate
from specviz.analysis import theory
from specviz.bench import recordings as recorded
from specviz.events import split_rows
from specviz.render import serving as render

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = ["def f(x):", "<img src=x onerror=window.__pwned=1>", "import os\nimport sys\n"]


@pytest.fixture(scope="module")
def batched(tiny):
    ar = [e.to_dict() for e in generate(tiny, PROMPTS, method="ar", max_new_tokens=10)]
    spec = [e.to_dict() for e in generate(tiny, PROMPTS, method="spec", k=3, max_new_tokens=10)]
    return ar, spec


def test_the_summary_is_the_events_numbers(batched):
    ar, spec = batched
    s = render.batch_summary(spec)
    steps = [e for e in spec if e["kind"] == "batch_step"]
    rows = split_rows(spec)
    assert s["rows"] == 3 and s["passes"] == len(steps) and s["finished"] and s["method"] == "spec" and s["k"] == 3
    assert s["tokens"] == sum(len(evs[-1]["token_ids"]) for evs in rows.values())
    decode = sum(sum(st["emitted"]) for st in steps[1:])
    assert s["decode_tokens_per_s"] == pytest.approx(decode / (steps[-1]["elapsed"] - steps[0]["elapsed"]))
    evaluated = sum(e["evaluated"] for evs in rows.values() for e in evs if e["kind"] == "step_finished")
    assert s["alpha"] == pytest.approx(sum(sum(st["accepted"]) for st in steps) / evaluated)
    c = render.compare(render.batch_summary(ar), s)
    assert c["speedup"] == pytest.approx(s["decode_tokens_per_s"] / render.batch_summary(ar)["decode_tokens_per_s"])
    ar_step, n = render.batch_summary(ar)["step_s"], round(s["decode_tokens_per_row"])
    want = ar_step * n / theory.expected_run_time(min(s["alpha"], 0.999), 3, n,
                                                  lambda kk: ar_step + (s["step_s"] - ar_step) * kk / 3)
    assert c["theory"] == pytest.approx(want)
    assert abs(theory.batch_speedup(min(s["alpha"], 0.999), 3, ar_step, s["step_s"]) - want) / want < 0.5


def test_no_single_k_theory_when_the_policy_chooses_k(tiny):
    load = [e.to_dict() for e in generate(tiny, PROMPTS, method="spec", k="load", max_new_tokens=10)]
    ar = [e.to_dict() for e in generate(tiny, PROMPTS, method="ar", max_new_tokens=10)]
    s = render.batch_summary(load)
    assert s["k_varies"] and render.compare(render.batch_summary(ar), s)["theory"] is None


def test_the_rows_table_has_a_row_per_user_and_a_cell_per_shared_pass(batched):
    _, spec = batched
    html = render.rows_table(spec).html
    steps = [e for e in spec if e["kind"] == "batch_step"]
    body = html.split("<tbody>")[1]
    assert body.count("<tr>") == 3
    for row in range(3):
        cells = re.findall(rf'data-row="{row}" data-accepted="(\d+)"', html)
        want = [st["accepted"][st["rows"].index(row)] for st in steps if row in st["rows"]]
        assert [int(c) for c in cells] == want
    # a finished row leaves grey cells, never a number
    gone = sum(3 - len(st["rows"]) for st in steps)
    assert html.count('class="sv-gone"') == gone
    # a prompt's markup is shown, never run
    assert "<img" not in html and "&lt;img src=x onerror" in html


def test_the_serving_html_compares_the_lanes_and_says_why(batched):
    ar, spec = batched
    html = render.serving_html(ar, spec).html
    assert "Plain decoding, B = 3" in html and "spec, B = 3" in html
    assert re.search(r"At B = 3, spec gave \d+\.\d\d× the batch's tokens/s of plain decoding", html)
    assert "cost" in html and "theory from α" in html
    assert "<img" not in html


def test_the_batch_figure_marks_the_crossover_and_the_session_points():
    sweep = {"rows": [{"batch": b, "measured_speedup": m, "theory_speedup": t, "load_speedup": 1.0,
                       "pld_speedup": None, "medusa_speedup": None}
                      for b, m, t in ((1, 1.4, 1.5), (2, 1.05, 1.0), (4, 0.85, 0.9))],
             "crossover_measured": 4}
    fig = render.batch_speedup_figure(sweep, [{"batch": 2, "speedup": 1.1, "theory": 1.0, "method": "spec", "k": 4}])
    names = [t.name for t in fig.data]
    assert "spec theory (α, cost table)" in names and "spec measured (recorded sweep)" in names
    assert any("stops paying: B = 4" in (a.text or "") for a in fig.layout.annotations)
    assert any(t.marker.symbol == "star" for t in fig.data if t.mode == "markers")
    # a shape on a log axis is placed in log10 units: at x = 4 plotly.js would draw it at B = 10**4
    (line,) = [s for s in fig.layout.shapes if s.x0 == s.x1]
    assert fig.layout.xaxis.type == "log" and line.x0 == pytest.approx(math.log10(4))


# ---------------------------------------------------------------------------------------------
# the theory of a short run's tail

def _simulate(a: float, k: int, n: int, cost, rng, cap: bool = True) -> float:
    seconds, left = 0.0, n
    while left > 0:
        kk = min(k, left - 1) if cap else k
        seconds += cost(kk)
        j = 0
        while j < kk and rng.random() < a:
            j += 1
        left -= min(j + 1, left)
    return seconds


@pytest.mark.parametrize("a,k,n", [(0.9, 4, 27), (0.5, 3, 10), (0.97, 6, 31)])
def test_expected_run_time_matches_the_engine_rule_simulated(a, k, n):
    def cost(kk):
        return 1.0 + 0.3 * kk

    rng = random.Random(5)
    runs = [_simulate(a, k, n, cost, rng) for _ in range(20000)]
    mean = sum(runs) / len(runs)
    assert theory.expected_run_time(a, k, n, cost) == pytest.approx(mean, rel=0.01)
    # an engine that drafted past its budget would pay for drafts it cannot use: the model tells
    uncapped = sum(_simulate(a, k, n, cost, rng, cap=False) for _ in range(20000)) / 20000
    assert abs(uncapped - mean) / mean > 0.02


def test_expected_run_time_exact_cases():
    cost = lambda kk: {0: 1.0, 1: 1.5, 4: 3.0}.get(kk, 2.0)  # noqa: E731
    assert theory.expected_run_time(1.0, 4, 27, cost) == 5 * 3.0 + 1.5  # 5 full steps, then k = 1 for 2 tokens
    # nothing accepted: 3 tokens in 3 steps drafting 2, 1, then 0 tokens (never past the budget)
    assert theory.expected_run_time(0.0, 4, 3, lambda kk: 1.0 + kk) == 3 + 2 + 1


# ---------------------------------------------------------------------------------------------
# the app's serving view

@pytest.fixture(scope="module")
def app():
    sys.path.insert(0, str(ROOT))
    from test_app_api import import_app

    return import_app()


def test_live_batches_are_bounded_with_a_clear_message(app):
    import gradio as gr

    serving = app.serving
    with pytest.raises(gr.Error, match=f"capped at {serving.MAX_LIVE_BATCH} users"):
        serving.check_serving("tiny", serving.MAX_LIVE_BATCH + 1, "spec", 4, 8)
    with pytest.raises(gr.Error, match="1 to 32 users"):
        serving.check_serving("tiny", 33, "spec", 4, 8)
    with pytest.raises(gr.Error, match="New tokens per user"):
        serving.check_serving("tiny", 2, "spec", 4, 10_000)
    with pytest.raises(gr.Error, match="k must be a whole number"):
        serving.check_serving("tiny", 2, "spec", 0, 8)
    with pytest.raises(gr.Error, match="serving methods are"):
        serving.check_serving("tiny", 2, "tree", 4, 8)
    with pytest.raises(gr.Error, match="Custom model pairs are disabled"):
        serving.check_serving("target=evil/model,draft=evil/model", 2, "spec", 4, 8)
    assert serving.check_serving("tiny", 2.0, "load", None, 8.0) == (2, None, 8)


def test_a_live_batch_streams_its_passes_then_adds_its_point(app):
    updates = list(app.serving.serve("tiny", 3, "spec", 2, 6, [], progress=None))
    ui = app.ui
    last = updates[-1]
    assert len(updates) > 3  # pass by pass, not all at the end
    assert last[ui.rows_html].split("<tbody>")[1].count("<tr>") == 3
    assert "Plain decoding, B = 3" in last[ui.serving_html] and "spec, B = 3" in last[ui.serving_html]
    point = last[ui.serving_state][-1]
    assert point["batch"] == 3 and point["method"] == "spec" and point["speedup"] > 0
    assert any(t.marker.symbol == "star" for t in last[ui.batch_plot].data if t.mode == "markers")


def test_recorded_batches_snap_to_the_nearest_and_say_so(app, tiny, tmp_path, monkeypatch):
    recorded.record_serving("tiny", folder=tmp_path, batches=(1, 2, 4), tokens=4, say=lambda line: None)
    monkeypatch.setattr(recorded, "SERVING", tmp_path)
    monkeypatch.setattr(recorded, "_CACHE", {})
    monkeypatch.setattr(app.serving, "_VIEWS", {})
    ui = app.ui
    shown = app.serving.recorded_view(3, "load")
    assert "showing B = 4" in shown[ui.serving_html] and 'data-recorded="1"' in shown[ui.serving_html]
    assert shown[ui.rows_html].split("<tbody>")[1].count("<tr>") == 4
    assert "k chosen each step from α" in shown[ui.serving_html]
    other = app.serving.recorded_view(2, "pld")
    assert "pld is not recorded batch by batch" in other[ui.serving_html]
    import gradio as gr

    for bad in (("<img src=x onerror=1>", "spec"), (0, "spec"), ("8", "spec"), (2, "<b>pld</b>")):
        with pytest.raises(gr.Error, match="(serving methods are|A batch holds)"):
            app.serving.recorded_view(*bad)
    api = app.serving.serving_preset(1, "spec")
    assert set(api) == {"summary", "rows", "chart"} and "Plain decoding, B = 1" in api["summary"]


def test_the_bench_keeps_its_runs_and_the_app_ships_them(tiny, tmp_path):
    """bench.batched --traces keeps each lane's fastest run; record-serving --traces ships those
    very runs beside the sweep, so the app's recorded points are the sweep's measurement."""
    import json

    from specviz.bench import batched

    report = tmp_path / "sweep.json"
    assert batched.main(["--pair", "tiny", "--batches", "1,2", "--tokens", "10", "--lanes", "ar,spec,load",
                         "--repeats", "2", "--skip", "single,memory", "--out", str(report),
                         "--traces", str(tmp_path / "traces")]) == 0
    data = json.loads(report.read_text())
    assert len(data["done"]) == 2 * 3 * 2 and all(len(lane["rates"]) == 2 for b in data["lanes"].values()
                                                  for lane in b.values())
    for lanes in data["lanes"].values():  # greedy: every run of every lane equals AR, row for row
        assert all(lane["greedy_equal_ar"] is not False for lane in lanes.values())
        for lane in lanes.values():  # the kept run is the fastest
            assert lane["decode_tokens_per_s"] == max(lane["rates"])
    info = recorded.serving_from_bench(report, tmp_path / "traces", tmp_path / "serving", say=lambda line: None)
    assert sorted(info["runs"]) == ["1-ar", "1-load", "1-spec", "2-ar", "2-load", "2-spec"]
    assert info["sweep"]["analysis"] == data["analysis"]
    events = recorded.serving_recording(2, "spec", tmp_path / "serving")
    kept = data["lanes"]["2"]["spec"]
    finished = {e["row"]: e["token_ids"] for e in events if e["kind"] == "run_finished"}
    assert [finished[row] for row in sorted(finished)] == kept["rows"]


def test_a_batched_trace_opens_in_the_step_view_as_its_first_user(app, batched, tmp_path):
    from specviz.analysis.trace import dumps
    from webapp import step

    _, spec = batched
    path = tmp_path / "batch.jsonl"
    path.write_text("".join(dumps(e) + "\n" for e in spec), encoding="utf-8")
    shown = step.open_trace(str(path), [])
    ui = app.ui
    assert "A batched run of 3 users: this is user 1" in shown[ui.stats_html]
    first = split_rows(spec)[0]
    assert shown[ui.events_state] == first  # the step view replays user 1's own stream
