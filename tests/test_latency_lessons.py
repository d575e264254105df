"""Latency views and the lessons of notebook 9, on golden traces (tests/golden) and hand-built
event dicts: the race lanes' strip of waits, stream latency from events, acceptance survival,
intervals and serving cost. No model runs here: renderers are pure functions of events.
Also: the app's race gives both strips one scale, and docs/teaching.md's links resolve."""

import html
import re
from pathlib import Path

import pytest

from specviz.analysis import trace
from specviz.analysis.metrics import percentile as bench_percentile, stream_stats, updates_from_events
from specviz.render import charts, lessons, race

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = Path(__file__).parent / "golden"
TRACES = sorted(p.name for p in GOLDEN.glob("*.jsonl"))
EVIL = "<img src=x onerror=window.__pwned=1>"
SCRIPT = "<script>window.__pwned=1</script>"


def load(name: str) -> list:
    return [e.to_dict() for e in trace.load(GOLDEN / name)]


def synthetic(steps: list, k: int = 4, method: str = "spec", max_new_tokens: int = 64, texts=None) -> list:
    """Event dicts of a run whose steps are (elapsed seconds, accepted, drafted, tokens emitted)."""
    events = [{"kind": "run_started", "pair": "x", "method": method, "k": k, "max_new_tokens": max_new_tokens,
               "temperature": 0.0, "lossless": True, "rule": "greedy", "prompt": "p", "prompt_ids": [1],
               "prompt_texts": ["p"], "device": "cpu", "dtype": "float32"}]
    for i, (elapsed, accepted, drafted, emitted) in enumerate(steps):
        words = (texts or {}).get(i) or [f"t{i}.{j}" for j in range(emitted)]
        events.append({"kind": "step_finished", "step": i, "k": k, "drafted": drafted, "accepted": accepted,
                       "evaluated": min(accepted + 1, drafted), "emitted_ids": list(range(emitted)),
                       "emitted_texts": words, "beta": [1.0] * drafted, "draft_time": 0.0, "verify_time": 0.01,
                       "draft_forwards": drafted, "target_forwards": 1, "elapsed": elapsed,
                       "finish_reason": "length" if i == len(steps) - 1 else None, "info": None, "prefill": 0,
                       "cpu_elapsed": None})
    return events


# -- stream latency: the same numbers as the benchmark suite -------------------------------------

@pytest.mark.parametrize("name", TRACES)
def test_stream_latency_matches_the_benchmark_suite(name):
    events = load(name)
    ours, suite = race.stream_latency(events), stream_stats(*updates_from_events(events))
    for key in ("ttft", "gap_p50", "gap_p95", "itl_p50", "itl_p95", "jitter", "burst"):
        assert ours[key] == pytest.approx(suite[key], abs=1e-12) if suite[key] is not None else ours[key] is None, key
    assert ours["ttft"] == events[-1]["metrics"]["ttft"]
    assert ours["tokens"] == events[-1]["metrics"]["new_tokens"]


@pytest.mark.parametrize("name", TRACES)
def test_arrival_gaps_add_up_to_the_decode_time(name):
    events = load(name)
    updates = race.stream_updates(events)
    gaps = race.arrival_gaps(events)
    assert len(gaps) == sum(n for _, n, _ in updates[1:])
    assert sum(gaps) == pytest.approx(updates[-1][0] - updates[0][0], abs=1e-12)
    # the first token of each later update waited the update's gap, the others came with it
    assert sum(1 for g in gaps if g > 0) == len(updates) - 1


def test_autoregressive_arrivals_are_its_amortised_latency():
    events = load("tiny_ar.jsonl")
    lat = race.stream_latency(events)
    assert lat["burst"] == 1.0
    assert lat["arrival_p50"] == lat["itl_p50"] == lat["gap_p50"]
    assert lat["arrival_p95"] == lat["itl_p95"] == lat["gap_p95"]


def test_bursts_have_a_zero_median_arrival_and_a_long_tail():
    # one token at 0.1 s, then 5 tokens every 0.5 s: most tokens arrive together with another
    events = synthetic([(0.1, 0, 4, 1)] + [(0.1 + 0.5 * i, 4, 4, 5) for i in range(1, 5)])
    lat = race.stream_latency(events)
    assert lat["arrival_p50"] == 0.0 and lat["arrival_p95"] == pytest.approx(0.5)
    assert lat["itl_p50"] == pytest.approx(0.1) and lat["gap_p50"] == pytest.approx(0.5)
    assert lat["burst"] == 5.0 and lat["jitter"] == pytest.approx(0.0) and lat["ttft"] == 0.1


@pytest.mark.parametrize("values", [[3.0], [1.0, 2.0], [5.0, 1.0, 4.0, 2.0, 3.0], [0.1 * i * i for i in range(17)]])
@pytest.mark.parametrize("q", [0, 5, 50, 95, 100])
def test_percentile_is_the_suites(values, q):
    assert race.percentile(values, q) == pytest.approx(bench_percentile(values, q))
    assert race.percentile([], q) is None


def test_no_steps_no_latency():
    lat = race.stream_latency(synthetic([]))
    assert lat["ttft"] is None and lat["gap_p50"] is None and lat["updates"] == 0


# -- the strip in each race lane ------------------------------------------------------------------

def bars(markup: str) -> list:
    """(x, height, width, tooltip) of each bar of a gap strip."""
    found = re.findall(r'<rect x="([\d.]+)" y="[\d.]+" width="([\d.]+)" height="([\d.]+)"[^>]*><title>(.*?)</title>',
                       markup)
    return [(float(x), float(h), float(w), html.unescape(t)) for x, w, h, t in found]


def test_the_strip_draws_one_bar_per_update_as_wide_as_its_tokens():
    events = load("tiny_spec_t1.jsonl")
    updates = race.stream_updates(events)
    out = race.gap_strip(events).html
    drawn = bars(out)
    assert len(drawn) == len(updates)
    x = 0
    for (bar_x, _, width, _), (_, n, _) in zip(drawn, updates):  # bars sit side by side, n tokens wide each
        assert bar_x == pytest.approx(x) and width == pytest.approx(n - 0.15)
        x += n
    assert f'viewBox="0 0 {events[0]["max_new_tokens"]} {race.STRIP_HEIGHT}"' in out  # like the progress bar
    gaps = [t1 - t0 for (t0, _, _), (t1, _, _) in zip(updates, updates[1:])]
    tallest = max(gaps)
    for (_, height, _, tip), gap in zip(drawn[1:], gaps):  # heights on one scale: the longest wait is full height
        assert height == pytest.approx(max(1.0, gap / tallest * race.STRIP_HEIGHT), abs=0.01)
        assert f"after a {gap * 1000:.0f} ms wait" in tip
    lat = race.stream_latency(events)
    assert f'data-gap-p50="{lat["gap_p50"]:.6f}"' in out and f'data-ttft="{lat["ttft"]:.6f}"' in out
    assert f"wait between updates p50 {lat['gap_p50'] * 1000:.0f} ms" in out
    assert drawn[0][3].startswith("first update") and "time to first token" in drawn[0][3]


def test_a_shared_scale_makes_two_lanes_compare():
    ar, spec = load("tiny_ar.jsonl"), load("tiny_spec_t1.jsonl")
    scale = race.gap_scale(ar, spec)
    assert scale == max(race.gap_scale(ar), race.gap_scale(spec))
    for events in (ar, spec):
        out = race.gap_strip(events, scale).html
        assert f"the tallest {scale * 1000:.0f} ms" in out
        updates = race.stream_updates(events)
        for (_, height, _, _), ((t0, _, _), (t1, _, _)) in zip(bars(out)[1:], zip(updates, updates[1:])):
            assert height == pytest.approx(max(1.0, (t1 - t0) / scale * race.STRIP_HEIGHT), abs=0.01)
    assert race.gap_scale(synthetic([(0.1, 0, 4, 1)])) is None  # one update: no wait between updates


def test_the_strip_waits_for_two_updates():
    assert race.gap_strip(synthetic([])).html == ""
    assert race.gap_strip(synthetic([(0.1, 2, 4, 3)])).html == ""
    assert 'class="sv-gaps"' in race.gap_strip(synthetic([(0.1, 2, 4, 3), (0.3, 0, 4, 1)])).html


def test_the_strip_escapes_model_text():
    events = synthetic([(0.1, 1, 4, 2), (0.4, 2, 4, 3)], texts={0: [EVIL, '"quoted"'], 1: [SCRIPT, "&amp;", "<b>"]})
    out = race.gap_strip(events).html
    assert "<img" not in out and "<script" not in out and "<b>" not in out
    tips = " ".join(tip for *_, tip in bars(out))
    assert "<script>window.__pwned=1</script>" in tips and "&amp;" in tips  # shown, as text


def test_each_lane_shows_its_strip_and_stays_readable(sampled_lanes):
    ar, spec = sampled_lanes
    scale = race.gap_scale(ar, spec)
    for events, title in ((ar, "Autoregressive"), (spec, "Speculative")):
        out = race.lane_html(events, 1.0, title, done=True, gap_scale_s=scale).html
        assert out.count('class="sv-gaps"') == 1 and f"the tallest {scale * 1000:.0f} ms" in out
        assert out.index('class="sv-bar"') < out.index('class="sv-gaps"') < out.index('class="sv-text"')
        assert "LOSSY" not in out  # lossless runs say nothing of the kind, in the strip either
    # without a scale (the notebook widget) each lane uses its own longest wait
    assert f"the tallest {race.gap_scale(spec) * 1000:.0f} ms" in race.lane_html(spec, 1.0, "Speculative").html


@pytest.fixture(scope="module")
def sampled_lanes():
    return load("tiny_ar.jsonl"), load("tiny_spec_t1.jsonl")


# -- the app: one scale for both lanes, and what How it works says --------------------------------

@pytest.fixture(scope="module")
def app():
    from test_app_api import import_app  # app.py with the tiny pair as its default

    return import_app()


def test_the_apps_race_gives_both_strips_one_scale(app, sampled_lanes):
    ar, spec = sampled_lanes
    lanes = {"ar": {"events": ar, "busy": 1.0, "done": True}, "spec": {"events": spec, "busy": 1.0, "done": True}}
    shown = app.race_view(lanes)
    tallest = f"the tallest {race.gap_scale(ar, spec) * 1000:.0f} ms"
    assert tallest in shown[app.ui.ar_html] and tallest in shown[app.ui.spec_html]


def test_how_it_works_says_where_chat_loses_and_names_lookahead(app):
    text = app.HOW_IT_WORKS
    assert "**lookahead**" in text and "Jacobi" in text
    assert "EAGLE" in text and "MT-bench" in text and "this pair" in text
    assert not re.search(r"loses with hot sampling or\s+open-ended chat", text)  # not a law of speculation
    from specviz import methods

    described = [m for m in methods.names() if m not in ("ar", "spec")]
    assert described and all(f"**{m}**" in text for m in described), "every method of the menu is explained"


# -- survival of the accepted length -------------------------------------------------------------

def test_survival_from_hand_built_steps():
    # accepted lengths 4, 2, 0, 3 of full k = 4 drafts; the last step drafted 2 (cut short): left out
    events = synthetic([(0.1, 4, 4, 5), (0.2, 2, 4, 3), (0.3, 0, 4, 1), (0.4, 3, 4, 4), (0.5, 2, 2, 2)])
    surv = charts.acceptance_survival(events)
    assert surv["k"] == 4 and surv["steps"] == 4
    assert surv["survival"] == [1.0, 0.75, 0.75, 0.5, 0.25]
    assert surv["mean_accepted"] == pytest.approx(sum(surv["survival"][1:])) == 2.25


@pytest.mark.parametrize("name", ["tiny_spec_t1.jsonl", "tiny_spec_greedy.jsonl", "tiny_typical_t1.jsonl"])
def test_survival_of_golden_runs(name):
    events = load(name)
    surv = charts.acceptance_survival(events)
    s = surv["survival"]
    assert s[0] == 1.0 and all(a >= b for a, b in zip(s, s[1:])) and len(s) == surv["k"] + 1
    full = [e["accepted"] for e in events if e["kind"] == "step_finished" and e["drafted"] == surv["k"]]
    assert surv["steps"] == len(full) and sum(s[1:]) == pytest.approx(sum(full) / len(full))
    assert surv["alpha"] == events[-1]["metrics"]["alpha_empirical"]


@pytest.mark.parametrize("name", ["tiny_ar.jsonl", "tiny_tree_t1.jsonl", "tiny_cascade_auto.jsonl"])
def test_no_survival_without_one_fixed_draft_length(name):
    assert charts.acceptance_survival(load(name)) is None


def test_survival_figure_draws_measured_and_alpha_to_the_i():
    runs = {"spec": load("tiny_spec_t1.jsonl"), "ar": load("tiny_ar.jsonl")}
    fig = charts.survival_figure(runs)
    surv = charts.acceptance_survival(runs["spec"])
    assert len(fig.data) == 2  # the AR run has no draft: nothing drawn for it
    measured, iid = fig.data
    assert list(measured.y) == surv["survival"]
    assert list(iid.y) == pytest.approx([surv["alpha"] ** i for i in range(surv["k"] + 1)])
    assert "α = " in iid.name
    empty = charts.survival_figure({"ar": load("tiny_ar.jsonl")})
    assert not empty.data and empty.layout.annotations


# -- the stream figures ---------------------------------------------------------------------------

def test_stream_figure_is_a_staircase_of_updates():
    runs = {"ar": load("tiny_ar.jsonl"), "spec": load("tiny_spec_t1.jsonl")}
    fig = charts.stream_figure(runs)
    for line, events in zip(fig.data, runs.values()):
        updates = race.stream_updates(events)
        assert line.line.shape == "hv"
        assert list(line.x)[1:] == pytest.approx([t for t, _, _ in updates])
        assert line.y[-1] == events[-1]["metrics"]["new_tokens"] and line.y[0] == 0


def test_gap_figure_is_the_ecdf_of_arrival_gaps():
    runs = {"ar": load("tiny_ar.jsonl"), "spec": load("tiny_spec_t1.jsonl")}
    fig = charts.gap_figure(runs)
    for line, events in zip(fig.data, runs.values()):
        gaps = sorted(g * 1000 for g in race.arrival_gaps(events))
        assert list(line.x)[1:] == pytest.approx(gaps) and line.y[-1] == 1.0 and line.y[0] == 0.0
        assert f"p95 {race.percentile(gaps, 95):.0f} ms" in line.name


def test_figures_escape_labels():
    fig = charts.stream_figure({EVIL: load("tiny_ar.jsonl")})
    assert "<img" not in fig.data[0].name and "<img" not in fig.data[0].hovertemplate
    assert "<img" not in charts.gap_figure({EVIL: load("tiny_ar.jsonl")}).data[0].name
    assert "<img" not in charts.survival_figure({EVIL: load("tiny_spec_t1.jsonl")}).data[0].name


# -- intervals and serving cost ---------------------------------------------------------------------

def test_interval_figure_has_a_panel_per_metric_with_its_interval():
    rows = [{"metric": "τ", "values": [2.0, 3.0, 4.0], "mean": 3.0, "low": 2.2, "high": 3.8,
             "labels": ["a", EVIL, "c"]},
            {"metric": "speedup", "values": [0.9, 1.3], "mean": 1.1, "low": 0.9, "high": 1.3, "reference": 1.0},
            {"metric": "empty", "values": [], "mean": None, "low": None, "high": None}]
    fig = charts.interval_figure(rows)
    assert [a.text for a in fig.layout.annotations] == ["τ", "speedup"]
    dots = [t for t in fig.data if t.name == "one run"]
    means = [t for t in fig.data if t.name == "mean, 95% interval"]
    assert [list(t.y) for t in dots] == [[2.0, 3.0, 4.0], [0.9, 1.3]]
    assert means[0].y[0] == 3.0 and means[0].error_y.array[0] == pytest.approx(0.8)
    assert means[0].error_y.arrayminus[0] == pytest.approx(0.8)
    assert "<img" not in " ".join(dots[0].text)
    assert [s.y0 for s in fig.layout.shapes] == [1.0]  # the reference line of the speedup panel
    assert charts.interval_figure([]).layout.annotations


def test_cost_per_million_tokens():
    assert lessons.cost_per_million(20, 2.0) == pytest.approx(2.0 / (20 * 3600) * 1e6)
    assert lessons.cost_per_million(5.05, 1.0) * 5.05 * 3600 / 1e6 == pytest.approx(1.0)
    assert lessons.cost_per_million(0, 1.0) is None and lessons.cost_per_million(None, 1.0) is None


def test_serving_figure_prices_each_batch():
    fig = lessons.serving_figure([1, 4, 16], {"AR": [5.0, 20.0, 80.0], EVIL: [9.0, 30.0, 90.0]}, 2.0)
    assert list(fig.data[0].y) == pytest.approx([lessons.cost_per_million(v, 2.0) for v in (5.0, 20.0, 80.0)])
    assert "assumed" in fig.layout.yaxis.title.text and fig.layout.xaxis.type == "log"
    assert "<img" not in fig.data[1].name


# -- the teacher's guide and the notebook list ------------------------------------------------------

def relative_links(path: Path) -> list:
    return [link for link in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", path.read_text(encoding="utf-8"))
            if not re.match(r"[a-z]+:", link)]


@pytest.mark.parametrize("doc", ["docs/teaching.md", "notebooks/README.md"])
def test_the_guides_links_resolve(doc):
    path = ROOT / doc
    links = relative_links(path)
    assert links
    missing = [link for link in links if not (path.parent / link).exists()]
    assert not missing, f"{doc} links to missing files: {missing}"


def test_the_notebook_list_has_notebook_9_and_the_teachers_guide():
    readme = (ROOT / "notebooks" / "README.md").read_text(encoding="utf-8")
    for notebook in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        assert f"({notebook.name})" in readme, notebook.name
    assert "(../docs/teaching.md)" in readme
    guide = (ROOT / "docs" / "teaching.md").read_text(encoding="utf-8")
    assert "09_latency_and_serving.ipynb" in guide
