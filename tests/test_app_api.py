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


def statuses(markup: str) -> Counter:
    return Counter(re.findall(r'class="sv-chip sv-(\w+)"', markup))


def committed_text(markup: str) -> str:
    found = re.findall(r'class="sv-chip sv-(accepted|residual|bonus|target)"[^>]*data-text="([^"]*)"', markup)
    return "".join(html.unescape(t) for _, t in found)


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


@pytest.mark.parametrize("method, extra", [("tree", {}), ("cascade", {"auto_k": True, "auto_rule": "heuristic"}),
                                           ("spec", {"acceptance": "typical"})])
def test_any_method_races_autoregressive(client, method, extra):
    ar_lane, spec_lane, verdict, *_ = client.predict(
        **{**RUN, "method": method, "temperature": 0.0, "max_new_tokens": 12, **extra}, api_name="/race")
    assert 'data-done="1"' in ar_lane and 'data-done="1"' in spec_lane
    assert f"{method} (" in spec_lane and re.search(r"Speculative was \d+\.\d\d× (faster|slower)", verdict)
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
    ar_lane, spec_lane, verdict, speedup, tau, positions, explained = job.result(timeout=120)
    for lane, name in ((ar_lane, "autoregressive"), (spec_lane, "speculative")):
        assert f'data-lane="{name}"' in lane and 'data-done="1"' in lane
    tokens = [int(re.search(r'data-tokens="(\d+)"', lane).group(1)) for lane in (ar_lane, spec_lane)]
    assert tokens[0] == tokens[1] > 0
    assert committed_text(ar_lane) == committed_text(spec_lane)  # greedy speculative is lossless
    assert re.search(r"Speculative was \d+\.\d\d× (faster|slower)", verdict)
    assert "Same text as autoregressive: yes" in verdict
    assert "measured (race)" in speedup["plot"] and "Tokens per target forward" in tau["plot"]
    n_updates = len(job.outputs())
    assert n_updates >= 2  # lane by lane, step by step


@pytest.mark.parametrize("change, message", [
    (dict(prompt="   "), "The prompt is empty"),
    (dict(max_new_tokens=100_000), "(capped at|greater than maximum value) 256"),
    (dict(prompt="x" * 5000), "at most 4000"),
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
