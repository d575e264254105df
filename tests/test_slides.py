"""The lecture's slides (docs/slides): built by Jupyter's own slideshow export from a notebook
that replays the presets' recordings, with reveal.js kept beside the deck so a projector needs no
network; the committed deck is the current build of the current recordings, stamped with the code
that drew it (a deck of an older renderer or an older lecture.ipynb fails)."""

import importlib.util
import re
import shutil
from pathlib import Path

import pytest

from specviz.bench import provenance
from specviz.render.notebook import keep_static_images

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbclient")

ROOT = Path(__file__).resolve().parents[1]
SLIDES = ROOT / "docs" / "slides"
_spec = importlib.util.spec_from_file_location("slides_build", SLIDES / "build.py")
build = importlib.util.module_from_spec(_spec)  # docs/slides/build.py (a script, not a package)
_spec.loader.exec_module(build)


def headings(nb) -> list:
    return [c.source.splitlines()[0].lstrip("# ").strip() for c in nb.cells
            if c.cell_type == "markdown" and c.source.startswith("#")]


@pytest.fixture(scope="module")
def deck():
    """A fresh build (images where a browser is found; interactive JSON kept where not)."""
    nb = build.execute()
    keep_static_images(nb)
    return nb, build.export(nb)


def test_the_deck_has_a_slide_per_heading_and_no_error(deck):
    nb, html = deck
    titles = headings(nbformat.read(build.SOURCE, as_version=4))
    assert len(titles) >= 12 and len(re.findall(r"<section", html)) >= len(titles)
    for title in titles:
        assert title.replace("&", "&amp;") in html or title in html, title
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert "<pre" not in html.split("Speculative decoding, step by step")[1][:200]  # code is hidden


def test_the_deck_runs_offline(deck):
    """reveal.js, require.js and the MathJax stand-in come from vendor/, beside the deck."""
    _, html = deck
    for key, path in build.VENDOR.items():
        assert f'"{path}' in html or f"'{path}" in html or f"{path}/" in html, key
    for part in ("reveal.js/dist/reveal.js", "reveal.js/dist/reveal.css", "reveal.js/dist/theme/simple.css",
                 "reveal.js/plugin/notes/notes.js", "require.js", "no-mathjax.js"):
        assert (SLIDES / "vendor" / part).is_file(), part
    assert "unpkg.com/reveal.js" not in html


def test_the_committed_deck_is_built_from_the_current_recordings():
    """Re-recording the presets changes the numbers on the slides: `make slides` builds it again."""
    from specviz.bench.guide import preset_rows

    committed = (SLIDES / build.DECK).read_text(encoding="utf-8")
    for row in preset_rows():  # the preset's own row of the deck's table carries its speedup
        found = re.search(r"<tr>(?:(?!</tr>).)*?" + re.escape(row["label"]) + r"(?:(?!</tr>).)*?</tr>", committed, re.S)
        assert found and f">{row['speedup']:.2f}<" in found[0], (row["label"], row["speedup"])
    for title in headings(nbformat.read(build.SOURCE, as_version=4)):
        assert title in committed or title.replace("&", "&amp;") in committed, title


def test_the_committed_deck_is_drawn_by_the_code_now():
    """Until `python docs/slides/build.py` builds it again, a deck older than its code fails here."""
    assert build.problems((SLIDES / build.DECK).read_text(encoding="utf-8")) == []


def test_a_fresh_deck_is_of_the_code_now(deck):
    _, html = deck
    assert build.STAMP.search(html)[1] == provenance.deck_version(build.SOURCE)
    assert build.problems(html) == []


def test_a_deck_built_by_an_older_renderer_fails(deck, tmp_path):
    """The deck's stamp, had it been drawn by an older chips renderer, is not the code's now."""
    _, html = deck
    root = tmp_path / "repo"
    shutil.copytree(provenance.PACKAGE, root / "specviz", ignore=shutil.ignore_patterns("__pycache__", "heads", "serving"))
    chips = root / "specviz" / "render" / "chips.py"
    drawn = provenance.deck_files(build.SOURCE, root)
    assert "specviz/render/chips.py" in drawn and any(f.startswith("specviz/bench/") for f in drawn)
    chips.write_text(chips.read_text() + "\n# a comment changes nothing\n")
    assert provenance.deck_version(build.SOURCE, root) == provenance.deck_version(build.SOURCE)
    chips.write_text(chips.read_text() + "\nOLDER = True\n")
    older = provenance.deck_version(build.SOURCE, root)
    stale = build.STAMP.sub(f'<meta name="specviz-code" content="{older}">', html)
    assert build.problems(stale) == [f"the deck was drawn by code stamp {older}, the code now is "
                                     f"{provenance.deck_version(build.SOURCE)}: python docs/slides/build.py"]
    assert len(build.problems(html.replace('<meta name="specviz-code"', '<meta name="other"'))) == 1  # no stamp


def test_a_changed_lecture_makes_the_deck_stale(deck, tmp_path):
    _, html = deck
    lecture = nbformat.read(build.SOURCE, as_version=4)
    lecture.cells[-1].source += "\nOne more sentence."
    changed = tmp_path / "lecture.ipynb"
    nbformat.write(lecture, changed)
    assert build.problems(html, changed) and not build.problems(html, build.SOURCE)
