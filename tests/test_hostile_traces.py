"""Hostile traces: an uploaded trace is answered in one sentence or shown, fast, and nothing it
carries reaches the page as markup.

A public Space gets files anyone can write. `webapp.traces.read_trace` holds every event to the
schema (specviz.events.check_trace) and the step view's renderers draw what passes. The plain
tests pin the step numbers that once held a worker for minutes; the property test throws
generated mutations of the golden traces (values of every type and size in any field, fields
dropped, markup in every text) at both and asks of each: refused in one sentence, or drawn, in
a bounded time, with every piece of trace text escaped.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import gradio as gr
import pytest
from hypothesis import HealthCheck, given, settings, strategies as hs

from specviz.events import split_rows
from specviz.render import charts, chips, inspector, panel, steps, timeline, tree
from webapp.step import _position_choices
from webapp.traces import read_trace

GOLDEN = Path(__file__).resolve().parent / "golden"
TRACES = sorted(GOLDEN.glob("*.jsonl"))
MARK = "<xss-mark>"  # markup a trace smuggles in; escaped, it reads &lt;xss-mark&gt;
BOUND_S = 1.0


def _events(path: Path) -> list:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _write(tmp_path: Path, events: list) -> str:
    path = tmp_path / "upload.jsonl"
    path.write_text("".join(json.dumps(e, ensure_ascii=False) + "\n" for e in events), encoding="utf-8")
    return str(path)


def first_user(events: list) -> list:
    """What webapp.step.open_trace shows of a trace: a batched run's first user ([]: nothing)."""
    if events[0]["kind"] != "batch_started":
        return events
    rows = split_rows(events)
    return rows[min(rows)] if rows and rows[min(rows)][0]["kind"] == "run_started" else []


def opened(events: list) -> list:
    """The texts of what opening the trace draws (webapp.step.step_view and chart_view at the last
    step): HTML, and the strings of each figure."""
    run = steps.build(events)
    last = run.step(len(run.steps) - 1)
    out = [chips.run_text(run).html, panel.step_panel(run).html, panel.stats(run, steps.run_metrics(events)).html,
           tree.tree_view(last, run.greedy, len(run.steps)).html, charts.alpha_explainer(events)]
    _position_choices(last)  # drawn as well, but a Radio's labels are text, not markup
    figures = [inspector.inspector_figure(run, len(run.steps) - 1), tree.mask_figure(last),
               charts.tau_histogram(events), charts.position_figure(events),
               timeline.timeline_figure(timeline.beside(events, [])),
               charts.speedup_figure([charts.summarize(events, label="upload")])]
    return out + [s for fig in figures for s in _strings(fig.to_plotly_json())]


def every_step(events: list) -> list:
    """The step panel and draft tree of every step (the replay slider's views)."""
    run, out = steps.build(events), []
    for number, step in enumerate(run.steps):
        out += [panel.step_panel(run, number).html, tree.tree_view(step, run.greedy, len(run.steps)).html]
        _position_choices(step)
    return out


def _strings(value) -> list:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in _strings(v)]
    return []


def answer(path: str):
    """read_trace, then the views opening the trace draws: ('refused', message) or ('shown', their
    texts), and the seconds that took. Anything else (a renderer's traceback) fails the test."""
    start = time.perf_counter()
    try:
        events = first_user(read_trace(path))
    except gr.Error as exc:
        return ("refused", str(exc.message)), time.perf_counter() - start
    texts = opened(events) if events else []
    return ("shown", texts), time.perf_counter() - start


def assert_one_sentence(message: str) -> None:
    assert "\n" not in message and message.endswith(".") and "Traceback" not in message, message
    assert MARK not in message, f"the refusal carries markup: {message}"


# ---------------------------------------------------------------------------------------------
# the step numbers that held a worker

def _small_trace(step: int) -> list:
    """The opening of the autoregressive golden trace, about 3 KB, its last event at step `step`."""
    events = _events(GOLDEN / "tiny_ar.jsonl")[:10]
    events[-1]["step"] = step
    return events


@pytest.mark.parametrize("step", [20_000, 200_000])
def test_a_small_trace_naming_a_far_step_is_refused_at_once(tmp_path, step):
    path = _write(tmp_path, _small_trace(step))
    assert 2_500 < Path(path).stat().st_size < 3_500
    (verdict, message), seconds = answer(path)
    assert verdict == "refused" and seconds < BOUND_S
    assert message == (f"Line 10 of the trace is not a valid step_finished event: step_finished.step is {step}, "
                       "more than a trace of 10 events can hold (at most 9).")


def test_building_the_steps_is_linear_in_the_step_number():
    """Past the schema (a renderer fed directly): 20,000 empty steps are made in a fraction of a
    second; rebuilding the whole text for each new step, as before, took over a minute."""
    events = _small_trace(20_000)
    start = time.perf_counter()
    run = steps.build(events)
    assert time.perf_counter() - start < BOUND_S
    assert len(run.steps) == 20_001 and run.steps[-1].root_text == "6"


# ---------------------------------------------------------------------------------------------
# generated hostile traces

HOSTILE_VALUES = hs.one_of(
    hs.integers(min_value=-10**12, max_value=10**12), hs.sampled_from([20_000, 200_000, 10**9, -1, 0, 65, 129]),
    hs.floats(allow_nan=True, allow_infinity=True), hs.booleans(), hs.none(),
    hs.text(max_size=8), hs.just(MARK), hs.just(f'"><img src=x onerror=alert(1)>{MARK}'),
    hs.lists(hs.integers(min_value=-3, max_value=10**6), max_size=4), hs.just({}), hs.just({"kind": MARK}))


# values of the right kind that may still not fit (a node, step or index the run never had)
PLAUSIBLE_VALUES = hs.one_of(hs.integers(min_value=-1, max_value=70), hs.floats(min_value=0, max_value=1),
                             hs.none(), hs.just([]))


def _leaves(value, path=()):
    """Every (path, value) inside an event: the places a mutation can hit."""
    yield path, value
    if isinstance(value, dict):
        for key, v in value.items():
            yield from _leaves(v, path + (key,))
    elif isinstance(value, list):
        for i, v in enumerate(value[:3]):
            yield from _leaves(v, path + (i,))


def _set_at(event, path, value) -> None:
    for key in path[:-1]:
        event = event[key]
    event[path[-1]] = value


def _drop_at(event, path) -> None:
    for key in path[:-1]:
        event = event[key]
    if isinstance(event, dict):
        del event[path[-1]]


@hs.composite
def hostile_traces(draw):
    """A golden trace with one to three of: a value replaced (any JSON type, any size), a field
    dropped, or markup written into a text (which stays valid, so the views must escape it)."""
    events = _events(draw(hs.sampled_from(TRACES)))
    for _ in range(draw(hs.integers(1, 3))):
        event = events[draw(hs.integers(0, len(events) - 1))]
        places = [p for p, _ in _leaves(event) if p and p != ("kind",)]
        path = draw(hs.sampled_from(places))
        what = draw(hs.sampled_from(["replace", "replace", "plausible", "plausible", "drop", "markup", "markup"]))
        if what == "drop":
            _drop_at(event, path)
        elif what == "markup":
            texts = [p for p, v in _leaves(event) if isinstance(v, str) and p and p[-1] != "kind"]
            if texts:
                _set_at(event, draw(hs.sampled_from(texts)), f'a"\'&{MARK}')
        else:
            _set_at(event, path, draw(HOSTILE_VALUES if what == "replace" else PLAUSIBLE_VALUES))
    return events


@settings(max_examples=100, derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large])
@given(events=hostile_traces())
def test_a_hostile_trace_is_refused_in_one_sentence_or_shown_escaped(tmp_path, events):
    (verdict, result), seconds = answer(_write(tmp_path, events))
    if verdict == "refused":
        assert_one_sentence(result)
    else:
        leaked = [s for s in result + every_step(first_user(events)) if MARK in s]
        assert not leaked, f"unescaped markup from the trace: {leaked[0][:300]}"
    assert seconds < 2 * BOUND_S, f"{verdict} after {seconds:.2f} s"


def test_markup_in_every_text_of_a_trace_is_escaped_in_every_view(tmp_path):
    """Not left to chance: every string value of every golden trace set to markup at once."""
    for source in TRACES:
        events = _events(source)
        for event in events:
            for path, value in list(_leaves(event)):
                if isinstance(value, str) and path and path[-1] not in ("kind", "k"):  # k: a number or a word
                    _set_at(event, path, f'a"&{MARK}')
        (verdict, result), _ = answer(_write(tmp_path, events))
        assert verdict == "shown", result
        assert not [s for s in result + every_step(events) if MARK in s], source.name


def test_the_committed_recordings_still_validate_and_numbers_must_be_finite(tmp_path):
    events = _events(GOLDEN / "tiny_spec_t1.jsonl")
    assert answer(_write(tmp_path, events))[0][0] == "shown"
    events[1]["q"] = math.inf
    (verdict, message), _ = answer(_write(tmp_path, events))
    assert message == ("Line 2 of the trace is not a valid draft_proposed event: draft_proposed.q is inf: a number "
                       "here must be finite.")


def test_metrics_without_a_key_or_with_none_are_shown(tmp_path):
    """Every key of run_finished.metrics is optional (older traces lack the newer ones)."""
    events = _events(GOLDEN / "tiny_spec_t1.jsonl")
    del events[-1]["metrics"]["evaluated"]
    events[-1]["metrics"]["alpha_empirical"] = None
    (verdict, _), _ = answer(_write(tmp_path, events))
    assert verdict == "shown"
    accepted = events[-1]["metrics"]["accepted"]
    assert charts.alpha_explainer(events).startswith(f"**α = accepted / judged = {accepted}/0 = —**")


def test_a_probability_a_rounding_error_past_one_reads_and_a_wrong_one_is_refused(tmp_path):
    """The real pair's float32 sums over its whole vocabulary land a little past 1 (a recorded
    residual mass was 1 + 1.07e-6): such a trace opens; a probability of 1.01 is no rounding error."""
    events = _events(GOLDEN / "tiny_spec_t1.jsonl")
    events[1]["q"] = 1 + 2e-6
    assert answer(_write(tmp_path, events))[0][0] == "shown"
    events[1]["q"] = 1.01
    (verdict, message), _ = answer(_write(tmp_path, events))
    assert verdict != "shown" and "draft_proposed.q is 1.01, but it must be from 0 to 1" in message
