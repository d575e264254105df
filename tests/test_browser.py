"""The app in a real browser (Playwright driving /usr/bin/chromium), on the tiny pair.

Skips when playwright or /usr/bin/chromium ($BROWSER_PATH where set) is missing. With SPECVIZ_SCREENSHOTS=<folder> set,
saves a PNG of each view of these tiny-pair runs there (the docs' pictures are the real pair's
presets instead, taken by `make screenshots`, docs/screenshots/take.py):

    SPECVIZ_SCREENSHOTS=docs/screenshots python -m pytest tests/test_browser.py
"""

import json
import os
import re
import socket
from pathlib import Path

import chromium
import pytest

ROOT = Path(__file__).resolve().parents[1]
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run", "--disable-quic"]
EVIL = "<img src=x onerror=window.__pwned=1>"
RUN_TIMEOUT = 90_000  # ms: tiny runs take seconds, but the machine may be shared

sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
CHROMIUM = chromium.require()
expect = sync_api.expect


from test_app_api import import_app  # noqa: E402  (app.py with the tiny pair as its default)


@pytest.fixture(scope="module")
def url():
    app = import_app()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    app.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    yield f"http://127.0.0.1:{port}/"
    app.demo.close()


@pytest.fixture(scope="module")
def ui(url):
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1440, "height": 1000})
        page.set_default_timeout(30_000)
        page.goto(url)
        yield page
        browser.close()


def shot(page, name: str, locator=None) -> None:
    folder = os.environ.get("SPECVIZ_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        (locator or page).screenshot(path=str(Path(folder) / f"{name}.png"), **({} if locator else {"full_page": True}))


def shot_span(page, name: str, top, bottom) -> None:
    """A PNG of the page from the top of one element to the bottom of another."""
    if os.environ.get("SPECVIZ_SCREENSHOTS"):
        first, last = top.bounding_box(), bottom.bounding_box()
        scroll = page.evaluate("window.scrollY")
        left = max(0, min(first["x"], last["x"]) - 12)  # from the content's left edge: no sidebar
        clip = {"x": left, "y": first["y"] + scroll - 12, "width": page.viewport_size["width"] - left,
                "height": last["y"] + last["height"] - first["y"] + 24}
        folder = Path(os.environ["SPECVIZ_SCREENSHOTS"])
        folder.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(folder / f"{name}.png"), clip=clip, full_page=True)


def tab(page, name: str) -> None:
    page.get_by_role("tab", name=name, exact=True).click()


def live(page, where: str) -> None:
    """Wait until a live run's first update replaced the preset's recording in `where`: the
    recording looks finished, so waiting for a finished run alone would not wait at all."""
    expect(page.locator(f"{where} [data-recorded]")).to_have_count(0, timeout=RUN_TIMEOUT)


# The tests below share one page and run in order, like a lesson: run, inspect, race, chart.

def test_page_loads_with_the_legend(ui):
    expect(ui.get_by_role("heading", name="specviz · speculative decoding, step by step")).to_be_visible()
    legend = ui.locator("#sv-legend .sv-chip")
    expect(legend).to_have_count(7)
    for status in ("draft", "accepted", "rejected", "wasted", "residual", "bonus"):
        expect(ui.locator(f"#sv-legend .sv-chip.sv-{status}")).to_be_visible()


def test_a_run_shows_chips_of_every_status(ui):
    ui.get_by_text("Hot sampling, T = 1.5: speculation loses", exact=True).click()
    # an example fills the inputs asynchronously; a Run clicked before that runs greedy
    expect(ui.get_by_label("Temperature (0 = greedy)").first).to_have_value("1.5")
    expect(ui.locator("#sv-stats [data-recorded]")).to_be_visible()  # the preset's recording, at once
    ui.get_by_role("button", name="Run", exact=True).click()
    live(ui, "#sv-stats")
    expect(ui.locator('#sv-stats [data-finished="1"]')).to_be_visible(timeout=RUN_TIMEOUT)
    for status in ("accepted", "rejected", "wasted", "residual", "bonus"):
        expect(ui.locator(f"#sv-text .sv-chip.sv-{status}").first).to_be_visible()
    expect(ui.locator("#sv-panel")).to_contain_text("emitted")
    shot(ui, "step_view")


def test_hovering_a_chip_tells_its_decision(ui):
    chip = ui.locator("#sv-text .sv-chip.sv-rejected").first
    chip.hover()
    tip = chip.evaluate("el => getComputedStyle(el, '::after').content")
    assert "rejected: u = " in tip and "p/q = " in tip
    shot_span(ui, "tooltip", ui.locator("#sv-stats"), ui.locator("#sv-panel"))


def test_clicking_a_rejected_chip_opens_it_in_the_inspector(ui):
    chip = ui.locator("#sv-text .sv-chip.sv-rejected").first
    step = int(chip.get_attribute("data-step"))
    chip.click()
    expect(ui.locator("#sv-panel")).to_contain_text(f"Step {step + 1} of")
    inspector = ui.locator("#sv-inspector")
    expect(inspector).to_contain_text("rejected: u =")
    expect(inspector).to_contain_text("recorded top-10")
    expect(inspector).to_contain_text("residual norm(max(p − q, 0))")
    expect(ui.locator("#sv-panel .sv-chip.sv-draft").first).to_be_visible()  # the draft phase row
    ui.locator("#sv-panel b").first.click()  # move focus off the chip: its tooltip closes
    shot_span(ui, "inspector", ui.locator("#sv-panel"), inspector)


def test_prev_and_next_replay_the_run(ui):
    panel = ui.locator("#sv-panel .sv-panel")
    before = int(panel.get_attribute("data-step"))
    ui.get_by_role("button", name="Next ▶", exact=True).click()
    expect(panel).to_have_attribute("data-step", str(before + 1))
    ui.get_by_role("button", name="◀ Prev", exact=True).click()
    expect(panel).to_have_attribute("data-step", str(before))
    ui.get_by_role("button", name="◀ Prev", exact=True).click()
    expect(panel).to_have_attribute("data-step", str(before - 1))
    expect(ui.locator("#sv-text .sv-step.sv-cur")).to_have_attribute("data-step", str(before - 1))


def test_play_replays_the_run_step_by_step(ui):
    slider = ui.locator("input[aria-label='number input for Step (0 = the prompt alone)']")
    ui.get_by_role("button", name="▶ Play", exact=True).click()
    expect(ui.get_by_role("button", name="⏸ Pause", exact=True)).to_be_visible()
    start = int(slider.input_value())
    expect(slider).not_to_have_value(str(start), timeout=10_000)
    ui.get_by_role("button", name="⏸ Pause", exact=True).click()
    expect(ui.get_by_role("button", name="▶ Play", exact=True)).to_be_visible()


def test_the_race_runs_both_lanes_to_a_verdict(ui):
    tab(ui, "Race")
    ui.get_by_text("Code, greedy: speculation wins", exact=True).click()
    expect(ui.locator("#sv-verdict [data-recorded]")).to_be_visible()
    ui.get_by_role("button", name="Race", exact=True).click()
    live(ui, "#sv-verdict")
    verdict = ui.locator("#sv-verdict")
    # a headline, or on a machine too busy to time (two test workers and a browser on two
    # cores can be) the note saying so instead: both keep the numbers "on its own compute clock"
    expect(verdict).to_contain_text(re.compile(r"Speculative was|No verdict: the timings are unreliable"),
                                    timeout=RUN_TIMEOUT)
    expect(verdict).to_contain_text("own compute clock")
    for lane in ("ar", "spec"):
        expect(ui.locator(f"#sv-lane-{lane} .sv-lane")).to_have_attribute("data-done", "1")
        expect(ui.locator(f"#sv-lane-{lane} .sv-chip").first).to_be_visible()
    shot(ui, "race")


def test_the_speedup_chart_shows_theory_and_the_measured_race(ui):
    tab(ui, "Speedup vs acceptance")
    chart = ui.locator("#sv-speedup")
    expect(chart).to_contain_text("theory k = 4")
    expect(chart).to_contain_text("measured (race)")
    expect(chart).to_contain_text("measured c =")
    expect(ui.locator("#sv-tau")).to_contain_text("Tokens per target forward")
    expect(ui.locator("#sv-positions")).to_contain_text("Acceptance by draft position")
    expect(ui.get_by_text("accepted / drafted", exact=False).first).to_be_visible()
    shot(ui, "speedup")


def test_a_tree_run_shows_its_tree_and_attention_mask(ui):
    tab(ui, "Step view")
    ui.get_by_text("Code, draft tree 3,2,1", exact=True).click()
    expect(ui.get_by_label("Tree shape: children per node at each depth")).to_be_visible()  # tree settings shown
    expect(ui.get_by_label("n-gram size (prompt lookup)")).to_be_hidden()
    expect(ui.locator("#sv-stats [data-recorded]")).to_be_visible()
    ui.get_by_role("button", name="Run", exact=True).click()
    live(ui, "#sv-stats")
    expect(ui.locator("#sv-tree .sv-tree")).to_be_visible(timeout=RUN_TIMEOUT)  # the tree run's first step
    expect(ui.locator('#sv-stats [data-finished="1"]')).to_be_visible(timeout=RUN_TIMEOUT)
    step = int(ui.locator("#sv-panel .sv-panel").get_attribute("data-step"))
    head = ui.locator("#sv-tree .sv-treehead")
    expect(head).to_contain_text(f"Draft tree of step {step + 1} of {step + 1}")  # the last step's tree
    ui.wait_for_function("""() => {  // one drawn node per node of the step's tree_built event
        const tree = document.querySelector('#sv-tree .sv-tree');
        return tree.querySelectorAll('g.sv-node[data-node]').length === Number(tree.dataset.nodes); }""")
    expect(ui.locator("#sv-tree g.sv-node[data-path]").first).to_be_visible()
    expect(ui.locator("#sv-mask")).to_contain_text("Tree attention mask")
    ui.get_by_role("button", name="◀ Prev", exact=True).click()  # the tree follows the step selection
    expect(head).to_contain_text(f"Draft tree of step {step}")
    expect(ui.locator("#sv-tree g.sv-node[data-next]")).to_have_count(1)  # a step before the last has one
    node = ui.locator("#sv-tree g.sv-node[data-path]").last
    depth = int(node.get_attribute("data-index"))
    node.click()  # a judged node opens its depth in the inspector
    expect(ui.locator("#sv-inspector")).to_contain_text(f"depth {depth + 1} · position")
    shot_span(ui, "tree", ui.locator("#sv-panel"), ui.locator("#sv-mask"))


def test_a_lossy_run_says_so(ui):
    ui.get_by_text("Chat, T = 0.7, typical acceptance: LOSSY", exact=True).click()
    expect(ui.get_by_label("Tree shape: children per node at each depth")).to_be_hidden()
    ui.get_by_role("button", name="Run", exact=True).click()
    expect(ui.locator("#sv-text .sv-lossy")).to_contain_text("LOSSY", timeout=RUN_TIMEOUT)
    expect(ui.locator('#sv-stats [data-finished="1"]')).to_be_visible(timeout=RUN_TIMEOUT)
    expect(ui.locator("#sv-stats")).to_contain_text("LOSSY")
    expect(ui.locator("#sv-tree")).to_be_hidden()  # a chain run draws no tree
    expect(ui.locator("#sv-panel")).to_contain_text("LOSSY")
    shot_span(ui, "lossy", ui.locator("#sv-stats"), ui.locator("#sv-panel"))


def test_how_it_works(ui):
    tab(ui, "How it works")
    expect(ui.get_by_text("One step of speculative decoding")).to_be_visible()
    shot(ui, "how_it_works")


def test_markup_in_a_token_never_runs(ui, tmp_path):
    """A trace whose every token is `<img src=x onerror=...>`, through the real renderer and page."""
    events = [json.loads(line) for line in
              (ROOT / "tests" / "golden" / "tiny_spec_t1.jsonl").read_text(encoding="utf-8").splitlines()]
    for event in events:
        if "token_text" in event:
            event["token_text"] = EVIL
        slices = event.get("topk")
        for part in (slices if isinstance(slices, list) else [slices]):
            if isinstance(part, dict):
                part["texts"] = [EVIL] * len(part["texts"])
    path = tmp_path / "evil.jsonl"
    path.write_text("\n".join(json.dumps(e) for e in events), encoding="utf-8")
    tab(ui, "Step view")
    ui.get_by_text("Open a saved trace (.jsonl)").click()
    ui.locator("input[type=file]").set_input_files(str(path))
    chip = ui.locator("#sv-text .sv-chip.sv-accepted").first
    expect(chip).to_have_text(EVIL.replace(" ", "·"), timeout=RUN_TIMEOUT)  # the upload is server work, as a run is
    expect(chip).to_have_attribute("data-text", EVIL)
    ui.locator("#sv-text .sv-chip.sv-rejected").first.click()
    expect(ui.locator("#sv-inspector")).to_contain_text("<img")
    assert ui.locator("#sv-text img, #sv-panel img, #sv-inspector img").count() == 0
    assert ui.evaluate("window.__pwned") is None


def test_a_preset_shows_its_recording_at_once(ui):
    tab(ui, "Race")
    ui.get_by_text("Chat, T = 0.7, typical acceptance: LOSSY", exact=True).click()
    expect(ui.locator("#sv-verdict [data-recorded]")).to_contain_text("recorded on")
    expect(ui.locator("#sv-verdict")).to_contain_text("LOSSY")
    expect(ui.locator("#sv-lane-spec .sv-lane")).to_have_attribute("data-done", "1")
    tab(ui, "Step view")
    expect(ui.locator("#sv-stats [data-recorded]")).to_contain_text("recorded on")
    expect(ui.locator("#sv-text .sv-lossy")).to_be_visible()
    expect(ui.locator("#sv-text .sv-chip.sv-accepted").first).to_be_visible()


def test_the_serving_view_shows_a_recorded_batch_then_serves_a_live_one(ui):
    tab(ui, "Serving: batches")
    ui.get_by_role("button", name="Show recorded").click()
    # the recorded batches (real pair): one table row per user, and the sweep's chart
    rows = ui.locator("#sv-rows tbody tr")
    expect(rows.first).to_be_visible()
    assert rows.count() == 8  # the slider starts at B = 8, a recorded batch size
    expect(ui.locator("#sv-serving [data-recorded]")).to_contain_text("recorded on")
    expect(ui.locator("#sv-serving")).to_contain_text("Plain decoding, B = 8")
    shot(ui, "serving")
    # a live batch of the same 8 users on the tiny pair (method k = load): its passes replace the recording
    ui.get_by_role("button", name="Serve live").click()
    expect(ui.locator("#sv-serving [data-recorded]")).to_have_count(0, timeout=RUN_TIMEOUT)
    expect(ui.locator("#sv-serving .sv-verdict")).to_contain_text("At B = 8", timeout=RUN_TIMEOUT)
    assert rows.count() == 8 and ui.locator("#sv-rows td[data-accepted]").count() >= 8
    assert ui.evaluate("window.__pwned") is None
