"""The app through its API (gradio_client), on the tiny pair, launched in-process."""

import html
import json
import os
import re
import socket
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROMPT = "def add(a, b):\n    return"
EVIL = "<img src=x onerror=window.__pwned=1>"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def import_app():
    """app.py with the tiny pair as its default (SPECVIZ_PAIR is read at import)."""
    sys.path.insert(0, str(ROOT))
    before = os.environ.get("SPECVIZ_PAIR")
    os.environ["SPECVIZ_PAIR"] = "tiny"
    try:
        import app
    finally:
        if before is None:
            os.environ.pop("SPECVIZ_PAIR")
        else:
            os.environ["SPECVIZ_PAIR"] = before
    assert app.DEFAULT_PAIR == "tiny", "app was imported earlier with another default pair"
    return app


@pytest.fixture(scope="module")
def server():
    app = import_app()
    port = free_port()
    app.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    yield app, f"http://127.0.0.1:{port}/"
    app.demo.close()


@pytest.fixture(scope="module")
def client(server):
    from gradio_client import Client

    return Client(server[1], verbose=False)


# A race's verdict: the headline, or where the machine was too busy to time (two test workers on
# two cores can be) the note saying so; either way the numbers stay beside it.
VERDICT = r"Speculative was \d+\.\d\d× (faster|slower)|No verdict: the timings are unreliable"


def statuses(markup: str) -> Counter:
    return Counter(re.findall(r'class="sv-chip sv-(\w+)"', markup))


def committed_text(markup: str) -> str:
    found = re.findall(r'class="sv-chip sv-(accepted|residual|bonus|target)"[^>]*data-text="([^"]*)"', markup)
    return "".join(html.unescape(t) for _, t in found)


def shown_text(markup: str, events: list) -> str:
    """The committed chips' text, less the special tokens the chips show and run_finished's text
    leaves out: the end-of-sequence token last when a run ended there, and, in a run that ignored
    end of text (a race's sampled lane, hot), the special tokens it wrote and went past."""
    started, finished = events[0], events[-1]
    shown = committed_text(markup)
    if finished["finish_reason"] == "eos":
        end = re.search(r"<\|[a-z_]+\|>$", shown)
        assert end, "a run that ended on EOS shows its EOS chip last"
        shown = shown[:end.start()]
    if started["options"].get("ignore_eos"):
        shown = re.sub(r"<\|[a-z_]+\|>", "", shown)  # the decoded text skips special tokens
    return shown


RUN = dict(prompt=PROMPT, pair_name="tiny", method="spec", k=4, temperature=1.0, top_p=1.0, max_new_tokens=24,
           seed=0, chat=False)


def test_run_streams_one_update_per_step(server, client):
    app = server[0]
    import specviz

    expected = list(specviz.generate(app.get_pair("tiny"), PROMPT, k=4, temperature=1.0, max_new_tokens=24,
                                     seed=0, record_topk=app.RECORD_TOPK))
    n_steps = sum(e.kind == "step_finished" for e in expected)
    job = client.submit(**RUN, api_name="/run")
    final = job.result(timeout=120)
    updates = job.outputs()
    assert len(updates) == n_steps
    assert [u[3]["value"] for u in updates] == list(range(1, n_steps + 1))  # the step slider follows
    assert 'data-finished="1"' in final[2] and 'data-finished="1"' not in updates[0][2]
    counts = Counter(e.kind for e in expected)
    shown = statuses(final[0])
    assert shown["accepted"] == counts["token_accepted"] and shown["rejected"] == counts["token_rejected"]
    assert shown["residual"] == counts["residual_sampled"]
    assert shown["bonus"] + shown["target"] == counts["bonus_sampled"]  # target: a step that drafted nothing
    assert committed_text(final[0]) == expected[-1].text
    assert final[8]["type"] == "plotly" and "theory k = 4" in final[8]["plot"]
    assert final[6]["visible"] is False and "LOSSY" not in final[0] + final[1] + final[2]  # chain, lossless


def _timeline(outputs) -> tuple:
    """The timeline plot among a run's outputs: (its lanes, its traces' names)."""
    figures = [json.loads(o["plot"]) for o in outputs if isinstance(o, dict) and o.get("type") == "plotly"]
    timelines = [f for f in figures if any(str(y).endswith("· target") for t in f["data"] for y in t.get("y") or [])]
    assert len(timelines) == 1
    data = timelines[0]["data"]
    return {y for t in data if t["type"] == "bar" for y in t["y"]}, {t.get("name") for t in data}


def test_the_timeline_sets_an_ssd_run_beside_the_spec_run_on_the_same_prompt(server):
    from gradio_client import Client

    client = Client(server[1], verbose=False)  # a session of its own: no earlier run to set beside
    ask = {**RUN, "temperature": 0.0, "max_new_tokens": 12}
    lanes, _ = _timeline(client.predict(**{**ask, "method": "ssd"}, api_name="/run"))
    assert lanes == {"ssd k=4 · draft", "ssd k=4 · target"}
    lanes, names = _timeline(client.predict(**{**ask, "method": "spec"}, api_name="/run"))
    assert lanes == {"spec k=4 · draft", "spec k=4 · target", "ssd k=4 · draft", "ssd k=4 · target"}
    assert "drafting ahead (while the target verifies)" in names  # the ssd run, beside this session's spec run


def test_a_tree_run_streams_its_tree_and_mask_every_step(server, client):
    import specviz

    options = dict(method="tree", temperature=1.0, max_new_tokens=16, seed=0)
    expected = [e.to_dict() for e in specviz.generate(server[0].get_pair("tiny"), PROMPT, record_topk=server[0].RECORD_TOPK,
                                                      tree="3,2,1", **options)]
    trees = [e for e in expected if e["kind"] == "tree_built"]
    job = client.submit(**{**RUN, **options, "tree_shape": "3,2,1"}, api_name="/run")
    final = job.result(timeout=120)
    updates = job.outputs()
    assert len(updates) == len(trees)
    for update, built in zip(updates, trees):  # each update shows the tree of the step it ends on
        assert update[6]["visible"] is True
        assert update[6]["value"].count('data-node="') == len(built["nodes"])
        assert f"Draft tree of step {built['step'] + 1}" in update[6]["value"]
        assert update[7]["visible"] is True and "Tree attention mask" in update[7]["value"]["plot"]
    counts, shown = Counter(e["kind"] for e in expected), statuses(final[0])
    assert shown["accepted"] == counts["token_accepted"] and shown["rejected"] == counts["token_rejected"]
    assert committed_text(final[0]) == expected[-1]["text"]
    assert "draft builds a tree" in final[1] and "Acceptance by tree depth" in final[10]["plot"]


def test_a_typical_run_is_marked_lossy(client):
    final = client.predict(**{**RUN, "acceptance": "typical"}, api_name="/run")
    for where, markup in (("text", final[0]), ("panel", final[1]), ("stats", final[2])):
        assert "LOSSY" in markup, where
    assert "LOSSY" in final[11]


def test_suffix_decoding_drafts_from_the_visitors_own_outputs_only(server, client):
    """Two visitors (two API clients, two sessions): the one who asks the same thing again is
    drafted their own first answer; the other, asking it for the first time, is not."""
    from gradio_client import Client

    ask = {**RUN, "method": "suffix", "k": 8, "temperature": 0.0, "max_new_tokens": 32,
           "prompt": "def mean(values):\n    return"}
    first = statuses(client.predict(**ask, api_name="/run")[0])
    again = statuses(client.predict(**ask, api_name="/run")[0])
    other = statuses(Client(server[1], verbose=False).predict(**ask, api_name="/run")[0])
    assert again["accepted"] >= first["accepted"] + 16, (first, again)
    assert other["accepted"] == first["accepted"], (first, other)


@pytest.mark.parametrize("method, extra", [("tree", {}), ("cascade", {"auto_k": True, "auto_rule": "heuristic"}),
                                           ("spec", {"acceptance": "typical"})])
def test_any_method_races_autoregressive(client, method, extra):
    ar_lane, spec_lane, verdict, *_ = client.predict(
        **{**RUN, "method": method, "temperature": 0.0, "max_new_tokens": 12, **extra}, api_name="/race")
    assert 'data-done="1"' in ar_lane and 'data-done="1"' in spec_lane
    assert f"{method} (" in spec_lane and re.search(VERDICT, verdict) and "own compute clock" in verdict
    assert "LOSSY" not in ar_lane  # the baseline is always exact autoregressive decoding
    if extra.get("acceptance") == "typical":
        assert "LOSSY" in spec_lane and "LOSSY" in verdict and 'data-lossy="1"' in verdict
    else:
        assert "LOSSY" not in verdict + spec_lane
        assert "Same text as autoregressive: yes" in verdict  # greedy, lossless: tree and cascade too
    if extra.get("auto_k"):
        assert "k auto, heuristic rule" in spec_lane


def test_an_int8_draft_races_the_same_target(server, client):
    """The int8 draft changes the speculative lane's drafter only: greedy text is still AR's, the
    lane says which draft ran, and the app's pair cache shares the loaded target."""
    ar_lane, spec_lane, verdict, *_ = client.predict(
        **{**RUN, "temperature": 0.0, "max_new_tokens": 12, "draft_quant": "int8"}, api_name="/race")
    assert "int8 draft" in spec_lane and "int8" not in ar_lane
    assert "Same text as autoregressive: yes" in verdict
    app = server[0]
    assert app.get_pair("tiny", draft_quant="int8").target is app.get_pair("tiny").target
    with pytest.raises(Exception, match="Draft weights must be one of none, int8"):
        app.check_request("tiny", PROMPT, 8, draft_quant="int4")


def test_race_returns_both_lanes_and_a_verdict(client):
    job = client.submit(PROMPT, "tiny", "spec", 4, 0.0, 1.0, 16, 0, False, api_name="/race")
    ar_lane, spec_lane, verdict, speedup, tau, positions, explained, timeline = job.result(timeout=120)
    for lane, name in ((ar_lane, "autoregressive"), (spec_lane, "speculative")):
        assert f'data-lane="{name}"' in lane and 'data-done="1"' in lane
    tokens = [int(re.search(r'data-tokens="(\d+)"', lane).group(1)) for lane in (ar_lane, spec_lane)]
    assert tokens[0] == tokens[1] > 0
    assert committed_text(ar_lane) == committed_text(spec_lane)  # greedy speculative is lossless
    assert re.search(VERDICT, verdict) and "own compute clock" in verdict
    assert "Same text as autoregressive: yes" in verdict
    assert "measured (race)" in speedup["plot"] and "Tokens per target forward" in tau["plot"]
    assert _timeline([timeline])[0] == {"spec k=4 · draft", "spec k=4 · target"}
    n_updates = len(job.outputs())
    assert n_updates >= 2  # lane by lane, step by step


@pytest.mark.parametrize("change, message", [
    (dict(prompt="   "), "The prompt is empty"),
    (dict(max_new_tokens=100_000), "(capped at|greater than maximum value) 256"),
    (dict(prompt="x" * 5000), "at most 4000"),
    (dict(method="medusa"), "No medusa heads for the pair 'tiny'.*python -m specviz train medusa --pair tiny"),
])
def test_bad_input_returns_the_apps_error_text(client, change, message):
    from gradio_client.exceptions import AppError

    with pytest.raises(AppError, match=message):
        client.predict(**{**RUN, **change}, api_name="/run")


def test_custom_pairs_are_refused_unless_allowed(server, client):
    from gradio_client.exceptions import AppError

    assert not server[0].ALLOW_CUSTOM
    with pytest.raises(AppError, match="(not in the list of choices|Custom model pairs are disabled)"):
        client.predict(**{**RUN, "pair_name": "target=evil/model,draft=evil/model"}, api_name="/run")
    with pytest.raises(Exception, match="Custom model pairs are disabled"):
        server[0].check_request("target=evil/model,draft=evil/model", PROMPT, 8)


def test_the_app_checks_its_caps_itself_too(server):
    with pytest.raises(Exception, match="max tokens is capped at 256"):
        server[0].check_request("tiny", PROMPT, 257)


def test_a_saved_trace_with_markup_replays_escaped(client, tmp_path):
    from gradio_client import handle_file

    lines = (ROOT / "tests" / "golden" / "tiny_spec_t1.jsonl").read_text(encoding="utf-8").splitlines()
    events = [json.loads(line) for line in lines]
    for event in events:
        if "token_text" in event:
            event["token_text"] = EVIL
    path = tmp_path / "evil.jsonl"
    path.write_text("\n".join(json.dumps(e) for e in events), encoding="utf-8")
    out = client.predict(handle_file(str(path)), api_name="/open_trace")
    assert "<img" not in out[0] and "&lt;img src=x onerror=window.__pwned=1&gt;" in out[0]
    assert statuses(out[0])["accepted"] == sum(e["kind"] == "token_accepted" for e in events)


def test_a_cancelled_run_stops_streaming(client):
    """What the Stop button does (cancels=): the run's generator stops after the current step."""
    import time

    job = client.submit(**{**RUN, "k": 1, "temperature": 0.0, "max_new_tokens": 256}, api_name="/run")
    deadline = time.monotonic() + 60
    while not job.outputs() and time.monotonic() < deadline:
        time.sleep(0.05)  # waiting for the first step, not asserting on time
    assert job.outputs(), "no step arrived within 60 s"
    job.cancel()
    while not job.done() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert job.done() and len(job.outputs()) < 200  # 256 one-token steps would have followed


# ---------------------------------------------------------------------------------------------
# presets: recorded on the real pair, replayed without the engine

def test_the_shipped_recordings_are_the_presets_on_the_real_pair(server):
    """What ships is the real pair's runs of exactly the presets the sidebar fills (a changed
    preset needs a new recording), recorded as the app records, and small."""
    from dataclasses import asdict

    from specviz.bench import recordings as recorded

    app = server[0]
    info = recorded.manifest()
    assert info["recorded"]["pair"] == "qwen-coder" and info["recorded"]["record_topk"] == app.RECORD_TOPK
    assert [entry["label"] for entry in info["presets"]] == app.PRESET_LABELS
    for preset, entry in zip(recorded.PRESETS, info["presets"]):
        assert entry["settings"] == asdict(preset)
        widgets = app._options(preset.method, preset.k, preset.temperature, preset.top_p, float(preset.max_new_tokens),
                               float(preset.seed), preset.chat, acceptance=preset.acceptance)
        assert preset.options() == widgets and preset.ar_options() == app.ar_options(widgets)
    size = sum(path.stat().st_size for path in recorded.DATA.iterdir())
    assert size < 1_000_000, f"the recordings take {size / 1e6:.1f} MB"


def test_presets_replay_their_recordings_through_the_api(server, client):
    from specviz.bench import recordings as recorded

    assert client.predict(api_name="/presets") == server[0].PRESET_LABELS
    for label in server[0].PRESET_LABELS:
        out = client.predict(label, api_name="/preset")
        rec = recorded.recording(label)
        assert out["label"] == label and out["text"] == rec.run[-1]["text"]
        assert shown_text(out["step_view"]["text"], rec.run) == rec.run[-1]["text"]
        assert shown_text(out["race"]["autoregressive"], rec.ar) == rec.ar[-1]["text"]
        where = r"recorded on .+ \(cpu, \d+ threads?\), (bfloat16|float32), \d{4}-\d\d-\d\d"
        assert re.fullmatch(where, out["recorded"])
        for where in (out["step_view"]["stats"], out["race"]["verdict"], out["charts"]["alpha"]):
            assert out["recorded"] in where
        lossy = "LOSSY" in label
        assert out["lossless"] is not lossy
        for where in (out["step_view"]["text"], out["step_view"]["stats"], out["race"]["speculative"],
                      out["race"]["verdict"]):
            assert ("LOSSY" in where) is lossy
        assert 'data-done="1"' in out["race"]["speculative"] and "Speculative was" in out["race"]["verdict"]
        assert "Speedup" in json.dumps(json.loads(out["charts"]["speedup"])) or "pld" == out["settings"]["method"]
        assert out["settings"] == rec.preset.race_options().to_dict()  # rerunning them gives the recorded run
        assert (out["step_view"]["tree"] is not None) == ("tree" in label)
    assert "qwen-coder" not in server[0]._PAIRS  # no replay loaded the real pair


def test_an_unknown_preset_is_one_sentence(client):
    from gradio_client.exceptions import AppError

    with pytest.raises(AppError, match=r"^There is no preset 'no such preset'; the presets are: Code, greedy"):
        client.predict("no such preset", api_name="/preset")


def test_a_preset_click_shows_its_recording_without_the_queue(server):
    """The browser's path: gr.Examples fills the settings, then (chained, queue=False) the
    recording fills the step view, the charts and the race."""
    from specviz.bench import recordings as recorded

    app = server[0]
    replay = [fn for fn in app.demo.fns.values() if fn.fn is app.show_preset]
    assert len(replay) == 1 and replay[0].queue is False and replay[0].concurrency_id != "engine"
    assert replay[0].inputs == [app.examples.dataset]
    shown = app.show_preset((4, app.PRESETS[4]))
    rec = recorded.recording(app.PRESET_LABELS[4])
    assert shown[app.ui.events_state] == rec.run and 'data-recorded="1"' in shown[app.ui.stats_html]
    assert shown_text(shown[app.ui.text_html], rec.run) == rec.run[-1]["text"]
    assert shown[app.ui.tree_view].visible and "Speculative was" in shown[app.ui.verdict_html]


def visitors(url: str, n: int = 30) -> list:
    """n gradio clients, each with a session of its own and the page's list of presets, as a
    class has the page open before it clicks (made before any clock starts)."""
    from gradio_client import Client

    clients = [Client(url, verbose=False) for _ in range(n)]
    for client in clients:
        client.predict(api_name="/presets")
    return clients


def close(clients: list) -> None:
    """Close clients side by side: each waits up to a second for its heartbeat thread."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(len(clients)) as pool:
        list(pool.map(lambda client: client.close(), clients))


def crowd(clients: list) -> list:
    """Every client asks for a preset at the same moment; returns (seconds each waited for its
    answer, the label it asked for, the answer)."""
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    from specviz.bench.recordings import LABELS

    start = threading.Barrier(len(clients))

    def visit(i: int):
        label = LABELS[i % len(LABELS)]
        start.wait()
        began = time.perf_counter()
        answer = clients[i].predict(label, api_name="/preset")
        return time.perf_counter() - began, label, answer

    with ThreadPoolExecutor(len(clients)) as pool:
        return list(pool.map(visit, range(len(clients))))


def clicks(url: str, app, n: int = 30) -> list:
    """n browsers click a preset at the same moment: the replay a click chains after gr.Examples
    fills the settings, posted as the page posts an unqueued event. Returns the waits."""
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    import httpx

    replay = next(fn for fn in app.demo.fns.values() if fn.fn is app.show_preset)
    start = threading.Barrier(n)

    def click(i: int) -> float:
        body = {"fn_index": replay._id, "data": [i % len(app.PRESET_LABELS)], "session_hash": f"visitor{i}",
                "trigger_id": app.examples.dataset._id}
        start.wait()
        began = time.perf_counter()
        answer = httpx.post(f"{url}gradio_api/run/predict", json=body, timeout=60)
        assert answer.status_code == 200 and "recorded on" in answer.text
        return time.perf_counter() - began

    with ThreadPoolExecutor(n) as pool:
        return sorted(pool.map(click, range(n)))


def live_run_and_crowd(url: str, live: dict, n: int = 30, app=None) -> float:
    """Start a long live run, wait until it computes, then n visitors ask for presets at once:
    each must be answered within 5 s while the run is still computing. Returns the slowest wait."""
    import time

    from gradio_client import Client

    clients = visitors(url, n)
    owner = Client(url, verbose=False)
    job = owner.submit(**live, api_name="/run")
    try:
        deadline = time.monotonic() + 120
        while not job.outputs() and time.monotonic() < deadline:
            time.sleep(0.05)  # waiting for the live run's first step, not asserting on time
        assert job.outputs(), "the live run produced no step within 120 s"
        answers = crowd(clients)
        browsers = clicks(url, app, n) if app is not None else None
        ended_first = job.done()
    finally:
        job.cancel()
        close(clients + [owner])
    waits = sorted(wait for wait, _, _ in answers)
    assert all(answer["label"] == label for _, label, answer in answers)
    print(f"\n{n} concurrent preset replays during a live run: slowest {waits[-1]:.2f} s, median {waits[n // 2]:.2f} s")
    assert waits[-1] < 5.0, f"the slowest of {n} visitors waited {waits[-1]:.1f} s for a preset"
    if browsers:
        print(f"{n} concurrent preset clicks in browsers: slowest {browsers[-1]:.2f} s, "
              f"median {browsers[n // 2]:.2f} s")
        assert browsers[-1] < 5.0, f"the slowest of {n} browsers waited {browsers[-1]:.1f} s for a preset"
    assert not ended_first, "the live run ended before the crowd was served: make it longer"
    return waits[-1]


@pytest.mark.alone  # its waits are measured: the other test worker does not share the cores
def test_thirty_visitors_get_presets_while_a_live_run_computes(server, monkeypatch):
    monkeypatch.setenv("GRADIO_ANALYTICS_ENABLED", "False")
    live_run_and_crowd(server[1], {**RUN, "k": 1, "temperature": 0.0, "max_new_tokens": 256}, app=server[0])


def test_a_live_run_beyond_the_line_is_told_busy_at_once(server, client, monkeypatch):
    """With one live run computing and MAX_LIVE_WAITING waiting, the next one is refused with a
    sentence at once, while the others go on; a waiting run says how many are ahead of it and
    gives its place back when cancelled."""
    import threading
    import time

    from gradio_client.exceptions import AppError

    import specviz

    app = server[0]
    monkeypatch.setattr(app.common, "MAX_LIVE_WAITING", 1)  # read by webapp.common.in_line
    # the computing run holds the engine until this test lets it go: however fast the machine,
    # it cannot finish before the refusal and the cancellation are checked
    gate, real = threading.Event(), specviz.generate

    def held(*args, **kwargs):
        for event in real(*args, **kwargs):
            yield event
            if event.kind == "step_finished" and event.step == 2:  # the view has shown two steps
                gate.wait(120)

    monkeypatch.setattr(specviz, "generate", held)
    long_run = {**RUN, "k": 1, "temperature": 0.0, "max_new_tokens": 256}
    computing = client.submit(**long_run, api_name="/run")
    waiting = None
    try:
        deadline = time.monotonic() + 120
        while not computing.outputs() and time.monotonic() < deadline:
            time.sleep(0.05)  # until it computes
        waiting = client.submit(**long_run, api_name="/race")
        while not waiting.outputs() and time.monotonic() < deadline:
            time.sleep(0.05)  # until the second one stands in line
        assert app.live_waiting() == 1 and "1 live run is ahead of you" in waiting.outputs()[0][2]
        refused = client.submit(**RUN, api_name="/race")
        with pytest.raises(AppError, match="^The engine is busy: one live run is computing and 1 more is waiting "
                                           "for it; try again in a minute, or click a preset"):
            refused.result(timeout=15)  # a hang would raise TimeoutError instead
        assert not computing.done() and not waiting.done()  # refused while the engine was still busy
        waiting.cancel()
        while app.live_waiting() and time.monotonic() < deadline:
            time.sleep(0.05)  # the cancelled run leaves the line
        assert app.live_waiting() == 0 and not computing.done()
    finally:
        gate.set()
        for job in (computing, waiting):
            if job is not None:
                job.cancel()


# ---------------------------------------------------------------------------------------------
# hostile uploads: one sentence each

GOLDEN = ROOT / "tests" / "golden" / "tiny_spec_t1.jsonl"


def _golden(change=None) -> bytes:
    events = [json.loads(line) for line in GOLDEN.read_text(encoding="utf-8").splitlines()]
    if change:
        change(events)
    return "".join(json.dumps(e) + "\n" for e in events).encode("utf-8")


def _set(kind, field, value):
    def change(events):
        for event in events:
            if event["kind"] == kind:
                event[field] = value
    return change


HOSTILE = {
    "binary": (bytes(range(256)) * 8, r"The file is not UTF-8 text \(byte 128 is 0x80\): a saved trace is JSON Lines"),
    "empty": (b"", "The file is empty: a saved trace has one JSON event per line."),
    "blank lines": (b"\n  \n\n", "The trace has no events"),
    "not json": (b"hello, world\n", "Line 1 of the trace is not JSON"),
    "json, not an event": (b'{"hello": "world"}\n',
                           'Line 1 of the trace is not a specviz event: a JSON object with a "kind"'),
    "a json array": (b"[1, 2, 3]\n", "Line 1 of the trace is not a specviz event"),
    "nested past the stack": (b"[" * 200_000 + b"\n", "Line 1 of the trace is not JSON"),
    "missing fields": (_golden()[:_golden().index(b"\n") + 1] + b'{"kind": "token_accepted", "step": 0}\n',
                       "Line 2 of the trace is not a valid token_accepted event"),
    "unknown field": (_golden(_set("step_finished", "surprise", 1)),
                      "not a valid step_finished event: .*unknown fields"),
    "no run_started": (_golden(lambda events: events.pop(0)), "The trace starts with a 'draft_proposed' event"),
    "newer schema": (_golden(_set("run_started", "schema_version", 99)),
                     r"This trace was made by a newer specviz \(schema 99\); this reader knows up to schema 2: "
                     "upgrade specviz."),
    "schema as text": (_golden(_set("run_started", "schema_version", "1")), "The trace has event schema '1'"),
    "wrong type": (_golden(_set("draft_proposed", "q", "high")),
                   "^Line 2 of the trace is not a valid draft_proposed event: draft_proposed.q must be a number, not "
                   "text.$"),
    "a far step": (_golden(_set("step_finished", "step", 20_000)),
                   "not a valid step_finished event: step_finished.step is 20000, more than a trace of"),
    "markup in a refusal": (_golden(lambda events: events.insert(0, {"kind": "<img src=x onerror=alert(1)>"})),
                            "^The trace starts with a '&lt;img src=x onerror=alert\\(1\\)&gt;' event"),
    "broken gzip": (b"\x1f\x8b\x08\x00garbage", "The file starts like gzip but does not decompress"),
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_hostile_trace_gets_one_sentence(client, tmp_path, name):
    from gradio_client import handle_file
    from gradio_client.exceptions import AppError

    data, message = HOSTILE[name]
    path = tmp_path / "upload.jsonl"
    path.write_bytes(data)
    with pytest.raises(AppError, match=message):
        client.predict(handle_file(str(path)), api_name="/open_trace")


def test_an_oversized_trace_gets_one_sentence(server, client, tmp_path, monkeypatch):
    """Over the app's limit, plain or unpacking from gzip (a small file can unpack to gigabytes);
    Gradio itself refuses uploads over the same size before they reach the disk."""
    import gzip

    from gradio_client import handle_file
    from gradio_client.exceptions import AppError

    assert server[0].LAUNCH_KWARGS["max_file_size"] == server[0].MAX_TRACE_BYTES
    monkeypatch.setattr(server[0].traces, "MAX_TRACE_BYTES", 2_000)  # read by webapp.traces
    plain, packed = tmp_path / "big.jsonl", tmp_path / "bomb.jsonl.gz"
    plain.write_bytes(_golden())
    packed.write_bytes(gzip.compress(b" " * 100_000))
    assert packed.stat().st_size < 2_000
    with pytest.raises(AppError, match=r"^The file is 0\.0\d+ MB; this app opens traces up to 0\.002 MB\.$"):
        client.predict(handle_file(str(plain)), api_name="/open_trace")
    with pytest.raises(AppError, match=r"^The file unpacks to more than 0\.002 MB, the most this app opens\.$"):
        client.predict(handle_file(str(packed)), api_name="/open_trace")


def test_a_gzipped_trace_opens_like_the_plain_one(client, tmp_path):
    import gzip

    from gradio_client import handle_file

    plain, packed = tmp_path / "run.jsonl", tmp_path / "run.jsonl.gz"
    plain.write_bytes(_golden())
    packed.write_bytes(gzip.compress(_golden()))
    assert client.predict(handle_file(str(packed)), api_name="/open_trace")[0] == \
        client.predict(handle_file(str(plain)), api_name="/open_trace")[0]


def test_a_trace_with_unicode_line_breaks_in_a_token_opens(client, tmp_path):
    """JSON written with ensure_ascii=False (as specviz writes traces) keeps U+2028 and U+0085
    raw inside strings: they are not line breaks of the trace."""
    from gradio_client import handle_file

    events = [json.loads(line) for line in GOLDEN.read_text(encoding="utf-8").splitlines()]
    for event in events:
        if event["kind"] == "token_accepted":
            event["token_text"] = "a\u2028b\x85c"
    path = tmp_path / "breaks.jsonl"
    path.write_text("".join(json.dumps(e, ensure_ascii=False) + "\n" for e in events), encoding="utf-8")
    out = client.predict(handle_file(str(path)), api_name="/open_trace")
    assert statuses(out[0])["accepted"] == sum(e["kind"] == "token_accepted" for e in events)


def test_a_stale_recording_is_refused_in_one_sentence(server, monkeypatch):
    """A preset changed without re-recording must not show the old run under its label."""
    import dataclasses

    from specviz.bench import recordings as recorded

    app = server[0]
    changed = dataclasses.replace(recorded.PRESETS[0], temperature=0.5)
    monkeypatch.setattr(recorded, "PRESETS", (changed,) + recorded.PRESETS[1:])
    monkeypatch.setattr(recorded, "_CACHE", {})
    monkeypatch.setattr(app.preset_view, "_PRESET_VIEWS", {})
    with pytest.raises(Exception, match="The recording of this preset cannot be shown .*has other settings"):
        app.preset_views(app.PRESET_LABELS[0])
