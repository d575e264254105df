"""Notebook widgets without a browser: synced traits after a run, play/pause transitions, cursor
stepping, the race on its own clocks, and static fallbacks that escape model text.

The golden traces (tests/golden) stand in for engine runs; a few tests drive the real engine on
the tiny pair. Animations run on an asyncio loop, as they do in a Jupyter kernel.
"""

import asyncio
import html
import json
import re
from collections import Counter
from pathlib import Path

import pytest

from specviz import generate
from specviz.analysis import trace
from specviz.render import lessons, notebook, steps
from specviz.render.widgets import RaceWidget, StepInspector, TokenStream, TreeView

GOLDEN = Path(__file__).parent / "golden"
SCRIPT = "<script>window.__pwned=1</script>"


def load(name: str) -> list:
    return [e.to_dict() for e in trace.load(GOLDEN / name)]


@pytest.fixture(scope="module")
def sampled():
    return load("tiny_spec_t1.jsonl")


@pytest.fixture(autouse=True)
def no_static_images(monkeypatch):
    monkeypatch.setenv("SPECVIZ_STATIC_IMAGES", "0")


def statuses(html_text: str) -> Counter:
    return Counter(re.findall(r'class="sv-chip sv-(\w+)" tabindex', html_text))


def hostile(events: list) -> list:
    """The same run with markup as the text of every emitted token."""
    out = []
    for e in events:
        e = dict(e)
        if "token_text" in e:
            e["token_text"] = SCRIPT
        if e["kind"] == "step_finished":
            e["emitted_texts"] = [SCRIPT] * len(e["emitted_ids"])
        if e["kind"] == "tree_built":
            e["nodes"] = [{**node, "token_text": SCRIPT} for node in e["nodes"]]
        out.append(e)
    return out


def run_async(coro):
    return asyncio.run(coro)


# -- token stream: state -----------------------------------------------------------------------

def test_stream_state_lives_in_synced_traits(sampled):
    w = TokenStream(sampled)
    for name in ("events", "cursor", "playing", "interval_ms", "html", "n_steps"):
        assert w.trait_metadata(name, "sync"), name
    assert w.events == sampled and json.loads(json.dumps(w.events)) == sampled  # JSON-safe as synced
    n = sum(e["kind"] == "step_finished" for e in sampled)
    assert w.n_steps == n and w.cursor == n - 1  # a finished run opens fully shown


def test_stream_html_shows_the_steps_up_to_the_cursor(sampled):
    run = steps.build(sampled)
    w = TokenStream(sampled, cursor=2)
    shown = statuses(w.html.split('class="sv-panel"')[0].split('class="sv-text"')[1])
    expected = Counter(t.status for s in run.steps[:3] for t in s.tokens)
    assert shown == expected
    assert 'data-step="2"' in w.html and 'sv-step sv-cur" data-step="2"' in w.html
    assert f"Step 3 of {w.n_steps}" in w.html
    w.cursor = -1
    assert statuses(w.html.split('class="sv-text"')[1].split('class="sv-panel')[0]) == Counter()
    assert "Before the first step" in w.html


def test_cursor_is_clamped_and_stepping_moves_one_step(sampled):
    w = TokenStream(sampled, cursor=0)
    assert w.step() == 1 and w.step(2) == 3 and w.step(-1) == 2
    w.cursor = 99
    assert w.cursor == w.n_steps - 1
    w.cursor = -7
    assert w.cursor == -1
    assert w.step(-1) == -1


def test_recording_a_live_run_grows_step_by_step(tiny):
    w = TokenStream()
    seen = []
    w.observe(lambda change: seen.append(change["new"]), names="n_steps")
    events = w.record(generate(tiny, "def add(a, b):", k=3, max_new_tokens=12))
    assert events[-1]["kind"] == "run_finished" and events[0]["kind"] == "run_started"
    assert seen == list(range(1, w.n_steps + 1))  # one update per engine step
    assert w.cursor == w.n_steps - 1
    tokens = [t for s in steps.build(w.events).steps for t in s.emitted]
    assert [t.token_id for t in tokens] == events[-1]["token_ids"]


# -- token stream: play / pause ----------------------------------------------------------------

def test_play_animates_to_the_end_then_stops(sampled):
    w = TokenStream(sampled)
    cursors = []
    w.observe(lambda change: cursors.append(change["new"]), names="cursor")

    async def scenario():
        w.play(interval_ms=5)  # at the end: restarts from the prompt
        assert w.playing and w.cursor == -1
        while w.playing:
            await asyncio.sleep(0.005)

    run_async(asyncio.wait_for(scenario(), 10))
    assert cursors == list(range(-1, w.n_steps))
    assert not w.playing and w._task is None


def test_pause_stops_the_task_and_play_resumes_from_the_cursor(sampled):
    w = TokenStream(sampled, cursor=-1)

    async def scenario():
        w.play(interval_ms=20)
        while w.cursor < 1:
            await asyncio.sleep(0.005)
        task = w._task
        w.pause()
        assert w._task is None and task.cancelling()  # cancelled at once, not left to run out
        held = w.cursor
        await asyncio.sleep(0.1)
        assert w.cursor == held and not w.playing and w._task is None
        w.play(interval_ms=5)
        assert w.cursor == held  # resumes, does not restart
        while w.playing:
            await asyncio.sleep(0.005)
        return held

    held = run_async(asyncio.wait_for(scenario(), 10))
    assert 1 <= held < w.n_steps - 1 and w.cursor == w.n_steps - 1


def test_a_step_click_while_playing_pauses(sampled):
    w = TokenStream(sampled, cursor=-1)

    async def scenario():
        w.play(interval_ms=1000)
        await asyncio.sleep(0.01)
        assert w._task is not None
        w.step()
        await asyncio.sleep(0.01)
        assert not w.playing and w._task is None and w.cursor == 0

    run_async(asyncio.wait_for(scenario(), 10))


def test_front_end_changes_drive_the_same_state(sampled):
    """The buttons only set traits (as the front end does through the comm): same transitions."""
    w = TokenStream(sampled, cursor=-1)

    async def scenario():
        w.set_state({"playing": True, "interval_ms": 5})
        while w.playing:
            await asyncio.sleep(0.005)
        w.set_state({"cursor": 1})

    run_async(asyncio.wait_for(scenario(), 10))
    assert w.cursor == 1 and "Step 2 of" in w.html


def test_play_without_an_event_loop_shows_the_end(sampled):
    w = TokenStream(sampled, cursor=0)
    w.play()
    assert not w.playing and w.cursor == w.n_steps - 1


def test_the_front_end_module_binds_the_traits():
    esm = TokenStream._esm
    for needle in ('model.get("html")', '"playing"', '"cursor"', "save_changes", "Play", "Pause", "Step"):
        assert needle in esm


# -- static fallbacks --------------------------------------------------------------------------

def test_stream_fallback_is_the_whole_run_as_html(sampled):
    w = TokenStream(sampled, cursor=0)
    data, _ = w._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in data
    page = data["text/html"]
    run = steps.build(sampled)
    assert statuses(page) >= Counter(t.status for t in run.tokens())  # all steps, legend on top
    assert "<style>" in page and "sv-legend" in page


def test_fallbacks_escape_token_text(sampled):
    evil = hostile(sampled)
    for widget in (TokenStream(evil), StepInspector(evil), TreeView(evil)):
        page = widget._repr_mimebundle_()[0]["text/html"] if isinstance(widget._repr_mimebundle_(), tuple) \
            else widget._repr_mimebundle_()["text/html"]
        assert SCRIPT not in page, type(widget).__name__
        assert html.escape(SCRIPT, quote=False) in page or html.escape(SCRIPT) in page
    assert SCRIPT not in TokenStream(evil).html


# -- inspector and tree ------------------------------------------------------------------------

def test_inspector_opens_at_the_first_rejection_and_follows_step_and_index(sampled):
    run = steps.build(sampled)
    first = next(s.step for s in run.steps if s.rejected is not None)
    w = StepInspector(sampled)
    assert w.step == first and w.resolved_index() == run.steps[first].rejected.index
    assert f"Step {first + 1} ·" in w.figure().layout.title.text
    w.index = 0
    assert w.resolved_index() == 0 and w._position.value == 0
    w.step = first + 1
    assert w.index == -1 and w._slider.value == first + 2  # 1-based slider; a new step opens at its default position
    assert [value for _, value in w._position.options] == run.steps[first + 1].indices()
    w._slider.value = 1
    assert w.step == 0
    w.step = 10_000
    assert w.step == len(run.steps) - 1


def test_inspector_fallback_has_the_panel_and_an_image_when_a_browser_can_draw_one(sampled, monkeypatch):
    """With a browser the static copy carries a PNG; without one (no Chrome/Chromium: the
    fresh laptop) figure_png answers None at once and the panel stays: no skip either way."""
    w = StepInspector(sampled)
    assert 'class="sv-panel"' in w.static_html() and "<img" not in w.static_html()
    monkeypatch.setenv("SPECVIZ_STATIC_IMAGES", "1")
    png = notebook.figure_png(w.figure())
    if notebook.browser_path() is None:
        assert png is None and "<img" not in w.static_html() and 'class="sv-panel"' in w.static_html()
    else:
        assert png.startswith(b"\x89PNG") and 'src="data:image/png;base64,' in w.static_html()


def test_tree_view_draws_the_steps_tree_and_opens_at_a_rejection():
    events = load("tiny_tree_t1.jsonl")
    run = steps.build(events)
    w = TreeView(events)
    first = next(s.step for s in run.steps if any(n.status == "rejected" for n in s.nodes))
    assert w.step == first
    page = w.static_html()
    assert page.count('data-node="') >= len(run.steps[first].nodes) > 1
    assert f"Draft tree of step {first + 1}" in page
    mask = w.mask_figure().data[0].z
    assert len(mask) == len(run.steps[first].nodes)
    w.step = 10_000
    assert w.step == len(run.steps) - 1


def test_tree_view_of_a_chain_run_says_there_is_no_tree(sampled):
    w = TreeView(sampled)
    assert "No draft tree in this step" in w.static_html()
    evil = TreeView(hostile(load("tiny_tree_t1.jsonl"))).static_html()
    assert SCRIPT not in evil and html.escape(SCRIPT, quote=False) in evil


# -- race --------------------------------------------------------------------------------------

def test_race_runs_both_lanes_on_their_own_clocks(tiny):
    w = RaceWidget()
    records = w.run(generate(tiny, "def add(a, b):", method="ar", max_new_tokens=10),
                    generate(tiny, "def add(a, b):", method="spec", k=3, max_new_tokens=10))
    for name, lane in w.lanes.items():
        assert lane["done"] and lane["events"][-1]["kind"] == "run_finished"
        times = [busy for busy, _ in lane["timeline"]]
        assert times == sorted(times) and times[-1] == pytest.approx(lane["busy"])
    assert records["spec"]["speedup"] == pytest.approx(records["spec"]["tokens_per_s"] / records["ar"]["tokens_per_s"])
    assert w.same_text() is True  # greedy, float32: lossless
    # a verdict, or (when this machine is busy, e.g. beside another test worker) the note instead
    assert ("Speculative was" in w.verdict_html()) == (w.timing_note() is None) and not w._replay.disabled


@pytest.mark.parametrize("ar_share, spec_share, busy", [(0.97, 0.98, False), (0.4, 0.98, True), (0.97, 0.5, True)])
def test_race_on_a_busy_machine_shows_the_note_instead_of_a_verdict(ar_share, spec_share, busy, with_cpu_share):
    w = RaceWidget()
    w.run(iter(with_cpu_share(load("tiny_ar.jsonl"), ar_share)),
          iter(with_cpu_share(load("tiny_spec_greedy.jsonl"), spec_share)))
    shown = w.verdict_html()
    assert (w.timing_note() is not None) == busy == ('data-busy="1"' in shown)
    assert ("faster" in shown or "slower" in shown) != busy
    if busy:
        assert w.timing_note() in html.unescape(shown) and "close other programs" in w.timing_note()
        assert "Unreliable, for the record only" in shown


def test_race_replay_shows_lanes_at_their_own_times(tiny):
    w = RaceWidget()
    w.run(generate(tiny, "x = ", method="ar", max_new_tokens=8), generate(tiny, "x = ", method="spec", max_new_tokens=8))
    half = {name: lane["busy"] / 2 for name, lane in w.lanes.items()}
    ar_half = w._lane_html("ar", half["ar"])
    assert 'data-done="0"' in ar_half
    assert int(re.search(r'data-tokens="(\d+)"', ar_half).group(1)) < 8
    assert 'data-done="1"' in w._lane_html("ar", None)
    frames = []
    w._ar.observe(lambda change: frames.append(change["new"]), names="value")

    async def scenario():
        w.replay(speed=max(w.lanes["ar"]["busy"], w.lanes["spec"]["busy"]) / 1.0)  # ~1 s: several frames even on a busy machine
        assert w.playing and w._replay.description == "‖ Pause"
        while w.playing:
            await asyncio.sleep(0.01)

    run_async(asyncio.wait_for(scenario(), 10))
    assert 'data-tokens="0"' in frames[0] and 'data-done="1"' in frames[-1] and len(frames) >= 3
    assert w._replay.description == "▶ Replay"


# -- helpers -----------------------------------------------------------------------------------

def test_exercise_check_says_correct_wrong_or_unanswered(capsys):
    assert notebook.check(None, 3) is None
    assert notebook.check(3.01, 3, tol=0.05) is True
    assert notebook.check(4, 3, hint="count again") is False
    assert notebook.check(["a"], ["a"]) is True
    out = capsys.readouterr().out
    assert "Not answered yet" in out and "✓ Correct." in out and "count again" in out


def test_setup_picks_interactive_plus_png_unless_turned_off(monkeypatch):
    import plotly.io as pio

    before = pio.renderers.default
    try:
        notebook.setup(static_images=False)
        assert pio.renderers.default == "plotly_mimetype"
        monkeypatch.setenv("SPECVIZ_STATIC_IMAGES", "1")
        monkeypatch.setattr(notebook, "browser_path", lambda: "/a/browser")  # found: PNG copies
        notebook.setup()
        assert pio.renderers.default == "plotly_mimetype+specviz_png"
        monkeypatch.setattr(notebook, "browser_path", lambda: None)  # none found: interactive only
        notebook.setup()
        assert pio.renderers.default == "plotly_mimetype"
        monkeypatch.setenv("SPECVIZ_STATIC_IMAGES", "0")
        notebook.setup()
        assert pio.renderers.default == "plotly_mimetype"
    finally:
        pio.renderers.default = before


def test_lesson_table_and_cost_figure():
    table = lessons.table([{"name": SCRIPT, "x": 0.123456}], ["name", ("x", "value")], caption="t").html
    assert SCRIPT not in table and "0.12" in table and "<th>value</th>" in table
    fig = lessons.cost_figure({"target": {1: 0.1, 2: 0.11, 4: 0.12}})
    measured, linear = fig.data[0], fig.data[1]
    assert list(measured.y) == pytest.approx([100, 110, 120]) and list(linear.y) == pytest.approx([100, 200, 400])
