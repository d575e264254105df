"""The static site in a real browser (Debian's Chromium through Playwright), offline: every request
outside the site's folder is refused and counted. Each page loads without a console error; Play
advances the step view and Prev returns; a method picked in the gallery shows its recording; a
slider moves the explorer's curve to the theory's value; the race ends with the recorded
speedup; the served folder works as file:// does; a planted missing or broken recording is
caught. Skips cleanly without playwright or Chromium."""

import functools
import http.server
import shutil
import threading
from pathlib import Path

import chromium
import pytest

from specviz.analysis import theory
from specviz.bench import gallery
from specviz.render import chips, steps as st
from specviz.site import build as site

sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
CHROMIUM = chromium.require()
pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def out(site_built):
    return site_built[0]  # conftest.py: one build for this file and test_site.py


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        try:
            yield b
        finally:
            b.close()


class Visit:
    """A tab that may ask only for files under `root` (a file:// or http:// prefix): every other
    request is refused and kept in `outside`; console errors and page errors go to `errors`."""

    def __init__(self, browser, root: str, viewport=(1280, 900)):
        self.root, self.outside, self.errors, self.asked = root, [], [], []
        self.tab = browser.new_page(viewport={"width": viewport[0], "height": viewport[1]})
        self.tab.on("console", lambda m: m.type == "error" and self.errors.append(m.text))
        self.tab.on("pageerror", lambda e: self.errors.append(str(e)))
        self.tab.on("requestfailed", lambda r: r.url.startswith(root) and self.errors.append(f"failed: {r.url}"))
        self.tab.route("**/*", self._route)

    def _route(self, route):
        url = route.request.url
        self.asked.append(url)
        if url.startswith(self.root):
            route.continue_()
        else:
            self.outside.append(url)
            route.abort()

    def go(self, page: str, timeout_ms: int = 120_000):
        """Open `page` and wait until every view it started has been drawn or has failed (the
        player's count of work in flight, <html data-sv-busy>, back at 0): leaving a page sooner
        aborts its requests, which would count as errors. The page's own signal, not the network's
        half second of quiet: that wait timed out on CI's loaded machine, and a starved browser can
        pause longer than that between a recording and the Plotly bundle it asks for next. A page
        that never settles fails naming itself."""
        try:
            self.tab.goto(self.root + page, timeout=timeout_ms)
            self.tab.wait_for_function("(document.documentElement.dataset.svBusy || '0') === '0'",
                                       timeout=timeout_ms)
        except sync_api.TimeoutError as e:
            raise AssertionError(f"{page} did not settle in {timeout_ms / 1000:.0f} s: {e}") from None
        return self.tab

    def close(self):
        self.tab.close()


def visit(browser, out: Path, **kw) -> Visit:
    return Visit(browser, out.as_uri() + "/", **kw)


def test_every_page_loads_offline_without_a_console_error(browser, out):
    pages = sorted(str(p.relative_to(out)) for p in out.rglob("*.html"))
    assert len(pages) >= 20 and "notebooks/04_speedup_vs_acceptance.html" in pages
    for page in pages:
        v = visit(browser, out)
        try:
            tab = v.go(page)
            tab.wait_for_timeout(300)  # scripts that run after load (a player's first frame) have run
            assert not v.errors, f"{page}: {v.errors}"
            assert not v.outside, f"{page} asked outside the folder: {v.outside}"
            assert tab.evaluate("document.body.innerText.trim().length") > 200, f"{page} is blank"
            undrawn = tab.evaluate("""[...document.querySelectorAll('.sv-figure')].filter((el) => !el.hidden &&
                !el.closest('details:not([open])') && !(Number(el.dataset.drawn) >= 1)).length""")
            assert undrawn == 0, f"{page}: settled with {undrawn} figure(s) not drawn"
        finally:
            v.close()


def test_the_first_view_plays_and_steps_back(browser, out):
    v = visit(browser, out)
    tab = v.go("index.html")
    first = tab.locator("#sv-first")
    first.locator(".sv-chip").first.wait_for()
    steps = int(first.get_attribute("data-steps"))
    assert int(first.get_attribute("data-cursor")) == steps - 1
    first.get_by_role("button", name="Previous step").click()
    assert first.get_attribute("data-cursor") == str(steps - 2)
    first.get_by_role("button", name="Play").click()  # from the end, Play starts again at the prompt
    tab.wait_for_function("Number(document.querySelector('#sv-first').dataset.cursor) >= 2", timeout=10_000)
    first.get_by_role("button", name="Pause").click()
    at = int(first.get_attribute("data-cursor"))
    first.get_by_role("button", name="Previous step").click()
    assert int(first.get_attribute("data-cursor")) == at - 1
    tab.keyboard.press("ArrowRight")
    assert int(first.get_attribute("data-cursor")) == at
    rec = site.recordings.recording(site.recordings.LABELS[0])
    shown = first.locator(".sv-text-slot .sv-chip").count()
    expected = chips.run_text(st.build(rec.run), upto=at, selected=at).html.count('class="sv-chip ')
    assert shown == expected  # the frame at step `at` is the renderer's text up to that step
    assert not v.errors and not v.outside
    v.close()


def test_a_method_picked_in_the_gallery_shows_its_recording(browser, out):
    v = visit(browser, out)
    tab = v.go("gallery.html#k=spec.code.t0")
    tab.wait_for_function("document.body.dataset.shown === 'spec.code.t0||step'")
    entries = [e for e in gallery.manifest()["entries"].values() if e["prompt"] == "code" and e["temperature"] == 0]
    assert tab.locator("#sv-pick-a option").count() == len(entries)  # every method on this text, greedy
    tab.select_option("#sv-pick-a", "pld.code.t0")
    tab.wait_for_function("document.body.dataset.shown === 'pld.code.t0||step'")
    run, _ = gallery.lanes("pld.code.t0")
    text = "".join(tab.locator("#sv-a .sv-text-slot .sv-chip").evaluate_all(
        "(els) => els.filter((e) => !['rejected', 'wasted'].includes(e.dataset.status)).map((e) => e.dataset.text)"))
    assert text == run[-1]["text"]
    tab.select_option("#sv-pick-b", "eagle.code.t0")  # side by side on the same text
    tab.wait_for_function("document.body.dataset.shown === 'pld.code.t0|eagle.code.t0|step'")
    assert tab.locator("#sv-b .sv-text-slot .sv-chip").count() > 10
    tab.get_by_role("radio", name="T = 0.7").check()  # the same pair of methods, sampled
    tab.wait_for_function("document.body.dataset.shown === 'pld.code.t0.7|eagle.code.t0.7|step'")
    assert not v.errors and not v.outside
    v.close()


def test_the_race_ends_with_the_recorded_speedup(browser, out):
    speedup = gallery.manifest()["entries"]["spec.code.t0"]["speedup"]
    v = visit(browser, out)
    tab = v.go("gallery.html#k=spec.code.t0&view=race")
    race = tab.locator("#sv-a .sv-raceview")
    race.wait_for()
    tab.select_option("#sv-a select", "4")
    race.get_by_role("button", name="Replay").click()
    assert race.get_attribute("data-done") == "0" and race.locator(".sv-verdict-slot").inner_text() == ""
    tab.wait_for_function("document.querySelector('#sv-a .sv-raceview').dataset.done === '1'", timeout=20_000)
    assert f"{speedup:.2f}×" in race.locator(".sv-verdict-slot").inner_text()
    assert not v.errors and not v.outside
    v.close()


def test_a_slider_moves_the_curve_to_the_theory(browser, out):
    v = visit(browser, out)
    tab = v.go("explorer.html")
    tab.wait_for_selector("#sv-explorer .main-svg")
    curve = "document.getElementById('sv-explorer').data.find((t) => t.name === 'theory k = 4').y[80]"
    before = tab.evaluate(curve)
    for name, value in (("c", "0.5"), ("v", "1.5"), ("k", "6"), ("alpha", "0.8")):
        tab.locator(f"#sv-{name}").fill(value)
    after = tab.evaluate(curve)
    assert after != before and after == pytest.approx(theory.expected_tokens(0.8, 4) / (0.5 * 4 + 1.5), rel=1e-9)
    shown = float(tab.locator("#sv-explorer").get_attribute("data-speedup"))
    assert shown == pytest.approx(theory.expected_tokens(0.8, 6) / (0.5 * 6 + 1.5), abs=1e-4)
    assert f"speedup {shown:.2f}×" in tab.locator("#sv-readout").inner_text()
    assert not v.errors and not v.outside
    v.close()


def test_the_batches_page_plays_its_passes(browser, out):
    v = visit(browser, out)
    tab = v.go("serving.html")
    tab.wait_for_function("document.body.dataset.shown")
    passes = tab.locator("#sv-passes")
    last = int(passes.get_attribute("data-pass"))
    passes.locator("input[type=range]").fill("1")
    assert passes.get_attribute("data-pass") == "1" and last > 1
    tab.select_option("#sv-batch", "serving-B32-load")
    tab.wait_for_function("document.body.dataset.shown === 'serving-B32-load'")
    assert "B = 32" in tab.locator("#sv-serving").inner_text()
    assert not v.errors and not v.outside
    v.close()


@pytest.mark.parametrize("size", [(1024, 768), (390, 844)], ids=["projector", "phone"])
def test_the_views_fit_a_projector_and_a_phone(browser, out, size):
    v = visit(browser, out, viewport=size)
    for page in ("index.html", "gallery.html#k=eagle-tree.edit.t0", "gallery.html#k=spec.chat.t0&view=race",
                 "explorer.html", "serving.html"):
        tab = v.go(page)
        tab.wait_for_timeout(400)
        wide = tab.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert wide <= 1, f"{page} is {wide}px wider than a {size[0]}px screen"
    assert not v.errors and not v.outside
    v.close()


def test_the_served_folder_works_as_the_disk_does(browser, out):
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(out))
    handler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        v = Visit(browser, f"http://127.0.0.1:{server.server_port}/")
        tab = v.go("index.html")
        tab.locator("#sv-first .sv-chip").first.wait_for()
        tab = v.go("gallery.html#k=tree.code.t0")
        tab.wait_for_function("document.body.dataset.shown === 'tree.code.t0||step'")
        tab.keyboard.press("Home")
        tab.keyboard.press("ArrowRight")  # the first step: a tree method draws its tree
        assert tab.locator("#sv-a .sv-tree-slot svg").count() == 1
        assert not v.errors and not v.outside and len(v.asked) > 5
        v.close()
    finally:
        server.shutdown()


@pytest.mark.parametrize("plant", ["removed", "broken"])
def test_a_planted_missing_or_broken_recording_is_caught(browser, out, tmp_path, plant):
    copy = tmp_path / "site"
    shutil.copytree(out, copy)
    data = copy / "data" / "pld.code.t0.js"
    if plant == "removed":
        data.unlink()
    else:
        data.write_text(data.read_text()[:2000] + '");\n')
    v = visit(browser, copy)
    tab = v.go("gallery.html#k=pld.code.t0")
    tab.wait_for_selector("#sv-a .sv-warn")
    assert "cannot be shown" in tab.locator("#sv-a").inner_text()
    assert v.errors  # what the load test above would fail on
    v.close()
