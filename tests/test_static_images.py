"""Static figure images never stall a notebook: without a browser they are off at once with one
line saying why, and a browser that never answers costs at most the start deadline.

kaleido's own sync server waited forever when its browser could not start (notebooks and
`make test` hung on machines without Chrome); these tests reproduce both machines: none found
(BROWSER_PATH naming nothing, as on a fresh laptop), and a "browser" that starts but never speaks.
"""

import os
import stat
import time

import plotly.graph_objects as go
import plotly.io as pio
import pytest

from specviz.render import notebook

FIGURE = go.Figure(go.Bar(x=["a", "b"], y=[1, 2]))


@pytest.fixture(autouse=True)
def fresh_state(monkeypatch):
    """Each test starts as a new session would: no browser started, nothing decided."""
    monkeypatch.setattr(notebook, "_state", {"browser": None, "off": None})
    monkeypatch.setenv("SPECVIZ_STATIC_IMAGES", "1")
    default = pio.renderers.default
    yield
    browser = notebook._state["browser"]
    if browser is not None:
        browser.close()
    pio.renderers.default = default


def test_without_a_browser_figures_are_interactive_only_and_setup_says_why(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("BROWSER_PATH", str(tmp_path / "no-such-browser"))
    assert notebook.browser_path() is None
    reason = notebook.static_images_off()
    assert "no Chrome/Chromium found" in reason
    notebook.setup()
    assert pio.renderers.default == "plotly_mimetype"
    assert capsys.readouterr().out.strip() == f"specviz: {reason}"
    assert notebook.figure_png(FIGURE) is None
    assert notebook.StaticPng().to_mimebundle(FIGURE.to_dict()) == {}
    assert notebook._state["browser"] is None  # nothing was started


def test_a_browser_that_never_answers_costs_the_deadline_once(monkeypatch, tmp_path, capsys):
    silent = tmp_path / "chromium"
    silent.write_text("#!/bin/sh\nexec sleep 300\n")
    silent.chmod(silent.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("BROWSER_PATH", str(silent))
    monkeypatch.setattr(notebook, "START_TIMEOUT_S", 2.0)
    assert notebook.browser_path() == str(silent) and notebook.static_images_off() is None
    start = time.perf_counter()
    assert notebook.figure_png(FIGURE) is None
    first = time.perf_counter() - start
    assert first < 2.0 + 10.0, f"figure_png waited {first:.1f} s for a silent browser"  # deadline + shut-down
    assert "static figure images are off" in capsys.readouterr().err
    assert notebook.static_images_off().startswith("static figure images are off")
    start = time.perf_counter()
    assert notebook.figure_png(FIGURE) is None  # decided: no second wait
    assert time.perf_counter() - start < 1.0


@pytest.mark.skipif(notebook.browser_path() is None, reason="no Chrome/Chromium here (apt-get install chromium)")
def test_with_a_browser_a_figure_becomes_a_png():
    png = notebook.figure_png(FIGURE, width=300, height=200)
    assert png is not None and png.startswith(b"\x89PNG")
    assert int.from_bytes(png[16:20], "big") == 300 and int.from_bytes(png[20:24], "big") == 200
