"""Build the lecture's slides: docs/slides/lecture.ipynb executed and exported by Jupyter's own
slideshow export (nbconvert, reveal.js), code hidden, figures as images.

    python docs/slides/build.py [--out DIR]        (make slides)

The notebook replays the presets' recordings and reads the committed reports through specviz's
renderers: no model loads, a build takes seconds. reveal.js and require.js are kept beside the deck
(vendor/), and the template (templates/offline) drops the two scripts nbconvert would fetch from a
CDN, so it runs on a projector without network. Figures are PNGs drawn by kaleido in a
Chrome/Chromium (as the executed notebooks' are); without one the build stops and says so.

Built, never edited: the deck carries, in `<meta name="specviz-code">`, the stamp of what drew it
(specviz.bench.provenance.deck_version: lecture.ipynb's cells, the renderers and teaching modules
it imports, the presets' manifest); `problems(deck)` says when that is not the code now, and
tests/test_slides.py fails on the committed deck until it is built again.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "lecture.ipynb"
DECK = "lecture.slides.html"
STAMP = re.compile(r'<meta name="specviz-code" content="([0-9a-f]+)">')
VENDOR = {"reveal_url_prefix": "vendor/reveal.js", "require_js_url": "vendor/require.js",
          "mathjax_url": "vendor/no-mathjax.js"}


def execute(source: Path = SOURCE):
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(source, as_version=4)
    before = dict(os.environ)
    os.environ.update({"SPECVIZ_STATIC_IMAGES": "1", "TQDM_DISABLE": "1"})  # the kernel inherits it
    try:
        NotebookClient(nb, timeout=300, kernel_name="python3",
                       resources={"metadata": {"path": str(source.parent)}}).execute()
    finally:  # a caller (a test worker) keeps its own environment
        os.environ.clear()
        os.environ.update(before)
    return nb


def export(nb, source: Path = SOURCE) -> str:
    """The executed lecture as the deck, stamped with the code that drew it (from `source`)."""
    from nbconvert import SlidesExporter

    from specviz.bench.provenance import deck_version

    exporter = SlidesExporter(exclude_input=True, exclude_input_prompt=True, exclude_output_prompt=True,
                              reveal_theme="simple", reveal_scroll=False, template_name="offline",
                              extra_template_basedirs=[str(HERE / "templates")], **VENDOR)
    html, _ = exporter.from_notebook_node(nb, resources={"metadata": {"name": "specviz lecture"}})
    return html.replace("<head>", f'<head>\n<meta name="specviz-code" content="{deck_version(source)}">', 1)


def problems(deck: str, source: Path = SOURCE) -> list:
    """Why a deck is not what the code now would build (one sentence), or [] when it is."""
    from specviz.bench.provenance import deck_version

    found, now = STAMP.search(deck), deck_version(source)
    if found and found[1] == now:
        return []
    return [f"the deck was drawn by code stamp {found[1] if found else 'none'}, the code now is {now}: "
            "python docs/slides/build.py"]


def build(out: Path = HERE, require_images: bool = True) -> Path:
    from specviz import files

    from specviz.render.notebook import keep_static_images

    nb = execute()
    missing = keep_static_images(nb)
    if missing and require_images:
        raise SystemExit(f"{missing} figure(s) have no image: the slides need a Chrome/Chromium for kaleido "
                         "(install Chromium, or set BROWSER_PATH), then build again.")
    path = Path(out) / DECK
    files.write_text(path, export(nb))
    return path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python docs/slides/build.py", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE, help="folder for lecture.slides.html (default: beside this)")
    args = parser.parse_args(argv)
    try:
        path = build(args.out)
    except KeyboardInterrupt:
        print("interrupted; the deck is written whole or not at all", file=sys.stderr)
        return 130
    print(f"wrote {path}; open it in a browser (reveal.js: arrows or space to move, f for full screen)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
