"""A teaching notebook in real JupyterLab, driven by Debian's chromium through Playwright.

Starts `jupyter lab` on a free 127.0.0.1 port with a token and no browser, serving a temporary
copy of notebook 2 (so autosave never touches the committed file), runs all its cells in smoke
mode (tiny pair) and checks that the token-stream widget renders its chips and legend and that
Play / Pause / Step drive the kernel-side animation. The server is stopped at the end.

Skips cleanly when playwright, jupyterlab or /usr/bin/chromium ($BROWSER_PATH where set) is missing. With
SPECVIZ_SCREENSHOTS=<folder> set, saves a PNG of the widget there.
"""

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import chromium
import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "02_draft_and_verify.ipynb"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]
TIMEOUT = 120_000  # ms: running the notebook takes seconds, but the machine may be shared

sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
pytest.importorskip("jupyterlab", reason="jupyterlab is not installed")
CHROMIUM = chromium.require()
expect = sync_api.expect
pytestmark = pytest.mark.browser


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until_up(url: str, proc: subprocess.Popen, log: Path, seconds: float = 90) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"jupyter lab exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.25)  # polling the server, not an assertion
    raise TimeoutError(f"jupyter lab did not answer at {url}:\n{log.read_text()[-3000:]}")


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """(base url, token) of a JupyterLab serving a copy of notebook 2, stopped afterwards."""
    home = tmp_path_factory.mktemp("lab")
    work = home / "work"
    work.mkdir()
    shutil.copy(NOTEBOOK, work / NOTEBOOK.name)
    port, token = free_port(), "specviz-test-token"
    settings = home / "settings"
    for plugin, values in (("notebook-extension/tracker", '{"windowingMode": "none"}'),  # every cell in the DOM
                           ("apputils-extension/notification", '{"fetchNews": "false"}')):
        path = settings / "@jupyterlab" / f"{plugin}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(values)
    env = {**os.environ, "SPECVIZ_SMOKE": "1", "SPECVIZ_PAIR": "tiny", "SPECVIZ_STATIC_IMAGES": "0",
           "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TQDM_DISABLE": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "JUPYTER_CONFIG_DIR": str(home / "config"), "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
           "JUPYTERLAB_SETTINGS_DIR": str(settings), "JUPYTERLAB_WORKSPACES_DIR": str(home / "ws"),
           "IPYTHONDIR": str(home / "ipython")}
    cmd = [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ServerApp.ip=127.0.0.1",
           f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
           f"--ServerApp.root_dir={work}", "--ServerApp.terminals_enabled=False", "--LabApp.news_url=",
           "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate", "--LabApp.extension_manager=readonly"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:  # CI containers run as root
        cmd.append("--allow-root")
    log = open(home / "lab.log", "w")
    proc = subprocess.Popen(cmd, env=env, cwd=work, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(f"{base}/api/status?token={token}", proc, home / "lab.log")
        yield base, token
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)  # the server and the kernels it started
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        log.close()


@pytest.fixture(scope="module")
def notebook_page(lab):
    base, token = lab
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.set_default_timeout(TIMEOUT)
        expect.set_options(timeout=TIMEOUT)
        page.goto(f"{base}/lab/tree/{NOTEBOOK.name}?token={token}")
        expect(page.locator(".jp-Notebook")).to_be_visible()
        # run only once the kernel is connected and idle (earlier execute requests can be lost)
        expect(page.locator(".jp-StatusBar-Widget", has_text=re.compile(r"Python 3 \(ipykernel\) \| Idle"))).to_be_visible()
        try:
            yield page
        finally:
            expect.set_options(timeout=5_000)  # Playwright's default, for other test modules
            browser.close()


def run_all_cells(page) -> None:
    page.get_by_role("menuitem", name="Run", exact=True).click()
    page.get_by_role("menuitem", name=re.compile(r"^Run All Cells")).click()


def test_token_stream_renders_and_animates_in_jupyterlab(notebook_page, tmp_path):
    try:
        check_token_stream(notebook_page)
    except AssertionError as exc:
        shot = tmp_path / "jupyterlab.png"
        notebook_page.screenshot(path=str(shot), full_page=True)
        raise AssertionError(f"{exc}\nscreenshot of the failure: {shot}") from None


def check_token_stream(page):
    run_all_cells(page)
    streams = page.locator(".sv-stream")
    expect(streams).to_have_count(2)  # the live run (section 1) and its replay (section 2)
    stream = streams.nth(1)
    text = stream.locator(".sv-text")
    chips = text.locator(".sv-chip[data-step]")

    # the same chips, legend and tooltips as the app, drawn from the engine's events
    expect(stream.locator(".sv-legend [data-legend='accepted']")).to_be_visible()
    expect(chips.first).to_be_visible()
    expect(chips.first).to_have_attribute("data-tip", re.compile(r"p = \d"))

    # section 2 started an animation in the kernel: pause it (or wait for it to end)
    pause = stream.get_by_role("button", name="Pause")
    if pause.count():
        pause.click()
    expect(stream).to_have_attribute("data-playing", "0")

    # back to the prompt alone with the slider: no chips
    stream.get_by_role("slider", name="Step").fill("-1")
    expect(stream).to_have_attribute("data-cursor", "-1")
    expect(chips).to_have_count(0)

    # Play: the kernel's asyncio task advances the cursor while the kernel is otherwise idle
    stream.get_by_role("button", name="Play").click()
    expect(stream).to_have_attribute("data-playing", "1")
    expect(stream).to_have_attribute("data-cursor", "2")
    expect(chips).not_to_have_count(0)
    stream.get_by_role("button", name="Pause").click()
    expect(stream).to_have_attribute("data-playing", "0")

    # Step and Back move exactly one verification step
    cursor = int(stream.get_attribute("data-cursor"))
    stream.get_by_role("button", name="Forward one step").click()
    expect(stream).to_have_attribute("data-cursor", str(cursor + 1))
    expect(stream.locator(f".sv-step.sv-cur[data-step='{cursor + 1}']")).to_be_visible()
    stream.get_by_role("button", name="Back one step").click()
    expect(stream).to_have_attribute("data-cursor", str(cursor))

    # both views show one model: the live view follows the replay's cursor
    expect(streams.nth(0)).to_have_attribute("data-cursor", str(cursor))

    # the step inspector: its Plotly figure (p vs q bars) drawn inside the widget
    inspector = page.locator(".widget-vbox", has=page.locator(".widget-output .js-plotly-plot")).first
    expect(inspector.locator(".js-plotly-plot .barlayer .point path").first).to_be_attached()
    expect(inspector.locator(".sv-panel")).to_be_visible()

    folder = os.environ.get("SPECVIZ_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        stream.screenshot(path=str(Path(folder) / "notebook_token_stream.png"))
        inspector.scroll_into_view_if_needed()
        inspector.screenshot(path=str(Path(folder) / "notebook_step_inspector.png"))


def test_run_all_stops_at_the_lab_end_with_a_message_and_no_traceback(notebook_page, tmp_path):
    """A student's Run All (SPECVIZ_LAB unset, as in class) stops at the lab-end cell
    (specviz.teaching.lab): its output is the message alone, and the homework sections below it
    (section 5's greedy comparison) never run."""
    page = notebook_page
    try:
        run_all_cells(page)
        said = page.locator(".jp-OutputArea-output", has_text="The lab ends here.")
        expect(said).to_have_count(1)
        expect(said).to_contain_text("click the next cell and use Run > Run Selected Cell and All Below.")
        idle = re.compile(r"Python 3 \(ipykernel\) \| Idle")
        expect(page.locator(".jp-StatusBar-Widget", has_text=idle)).to_be_visible()
        text = said.inner_text()
        assert "Traceback" not in text and "lab.py" not in text and "LabEnd" not in text, text
        ran = page.locator(".jp-OutputArea-output", has_text="greedy speculative vs autoregressive")
        expect(ran).to_have_count(0)  # in the source of section 5's cell, never in an output
    except AssertionError as exc:
        shot = tmp_path / "jupyterlab-lab-end.png"
        page.screenshot(path=str(shot), full_page=True)
        raise AssertionError(f"{exc}\nscreenshot of the failure: {shot}") from None
