"""An executed copy opened from disk in a real browser with the network blocked: its math is
typeset by the KaTeX vendored beside the copies (docs/notebooks/vendor), fonts included, and the
page asks for nothing but files. Skips cleanly without playwright or Chromium."""

import importlib.util
import shutil
from pathlib import Path

import chromium
import pytest

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbconvert")
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
CHROMIUM = chromium.require()
pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("execute_notebooks", ROOT / "notebooks" / "execute.py")
execute = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(execute)


def test_math_renders_from_the_vendored_katex_with_the_network_blocked(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("The rule: $$\\min(p, q) + \\max(p - q, 0) = p$$ with $p$ the target."),
                nbformat.v4.new_code_cell("price = '$5 and $6'")]
    shutil.copytree(ROOT / "docs" / "notebooks" / execute.VENDOR, tmp_path / execute.VENDOR)
    page = tmp_path / "02_x.html"
    page.write_text(execute.to_html(nb, Path("02_x.ipynb"), "tiny"), encoding="utf-8")
    asked = []

    def only_files(route):
        asked.append(route.request.url)
        route.continue_() if route.request.url.startswith("file:") else route.abort()

    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        try:
            tab = browser.new_page()
            tab.route("**/*", only_files)
            tab.goto(page.as_uri())
            tab.wait_for_selector("body[data-math=katex]", timeout=30_000)
            assert tab.locator(".katex-display").count() == 1 and tab.locator(".katex").count() == 2
            assert tab.locator(".jp-CodeCell .katex").count() == 0  # code keeps its dollar signs
            loaded = tab.evaluate("document.fonts.ready.then(() => [...document.fonts]"
                                  ".filter(f => f.status === 'loaded').map(f => f.family))")
            assert "KaTeX_Main" in loaded and "KaTeX_Math" in loaded
        finally:
            browser.close()
    assert asked and all(url.startswith("file:") for url in asked), [u for u in asked if not u.startswith("file:")]
