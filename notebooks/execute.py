"""Run the teaching notebooks on the real pair and save executed HTML copies under docs/notebooks/.

    python notebooks/execute.py [01 04 ...] [--pair qwen-coder] [--force]     (make executed-notebooks)

The committed .ipynb files stay output-free; these copies are what a reader previews without
running anything (docs/notebooks/README.md lists them). The HTML template's styles, the same in
every copy, are stored once beside them (notebook.css). Each copy opens with where it ran: the
CPU, the device and dtype the notebook's pair loaded with, the date and the specviz commit.
Figures are kept as the static PNGs `specviz.render.notebook` draws beside them (the interactive
Plotly JSON would need plotly.js in the page), so a machine with Chrome/Chromium makes the
complete copy.

A copy is read from disk with no network: its math is drawn by the KaTeX kept in vendor/ beside
the copies (not MathJax from a CDN), each widget shows its own static HTML (the widget's
JavaScript would come from a CDN), and the page loads nothing else from the network.

Built, never edited: each copy carries the stamp of the code that drew it
(specviz.bench.provenance.notebook_version: the notebook's cells, the engine, the renderers it
imports), in its header and in `<meta name="specviz-code">`, and the index lists it.
`problems(copy, notebook)` says how a committed copy differs from what this code would build (a
stale stamp, code cells that are not the notebook's); tests/test_execute_notebooks.py runs it on
every committed copy.

Resumable: a notebook whose copy exists is skipped unless --force (or named on the command line).
One line per notebook with its time and an ETA for the rest.
"""

from __future__ import annotations

import argparse
import datetime
import html as html_text
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

from specviz import files
from specviz.bench import provenance
from specviz.render.notebook import keep_static_images, keep_static_widgets, loaded_as

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
OUT = ROOT / "docs" / "notebooks"
CELL_TIMEOUT_S = 1800
ANSWERS = OUT / "answers.json"  # the worksheet answers the copies printed (the answer key reads them)
STYLESHEET = "notebook.css"  # the HTML template's styles, the same for every copy: stored once
VENDOR = "vendor"  # KaTeX and its loader, beside the copies (docs/notebooks/vendor)
STAMP = re.compile(r'<meta name="specviz-code" content="([0-9a-f]+|unknown)">')
# the lab template with nothing from a CDN: KaTeX from vendor/ draws the math; no require.js,
# widget manager or mermaid (a copy has no widget JavaScript and no diagram)
OFFLINE_TEMPLATE = """{%- extends 'lab/index.html.j2' -%}
{%- block html_head_js_requirejs -%}{%- endblock html_head_js_requirejs -%}
{% block jupyter_widgets %}{% endblock jupyter_widgets %}
{%- block html_head_js_mathjax -%}
<link rel="stylesheet" href="VENDOR/katex/katex.min.css">
<script defer src="VENDOR/katex/katex.min.js"></script>
<script defer src="VENDOR/katex/contrib/auto-render.min.js"></script>
<script defer src="VENDOR/math.js"></script>
{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
""".replace("VENDOR", VENDOR)


def notebooks(names=()) -> list:
    found = sorted(HERE.glob("[0-9][0-9]_*.ipynb"))
    return [p for p in found if not names or p.name[:2] in names]


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def execute(path: Path, pair: str, answers: Optional[Path] = None):
    """The notebook run top to bottom; the worksheet answers its cells print go to `answers`."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    env = {"SPECVIZ_PAIR": pair, "SPECVIZ_SMOKE": "0", "SPECVIZ_STATIC_IMAGES": "1", "HF_HUB_OFFLINE": "1",
           "TQDM_DISABLE": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1", "SPECVIZ_LAB": "0"}  # past the lab's end
    if answers is not None:
        files.remove(answers)
        env["SPECVIZ_WORKSHEET"] = str(answers)  # specviz.teaching.worksheet
    os.environ.update(env)  # the kernel inherits this process's environment
    NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                   resources={"metadata": {"path": str(HERE)}}).execute()
    return nb


def keep_answers(number: str, answers: Path) -> None:
    """The copy's worksheet answers into ANSWERS ({"notebooks": {number: [records]}}), which the
    guide's answer key quotes as "the executed copy"; a notebook without answers is left out."""
    records = files.read_json_lines(answers)
    try:
        kept = json.loads(ANSWERS.read_text(encoding="utf-8"))
    except FileNotFoundError:
        kept = {"notebooks": {}}
    kept["notebooks"].pop(number, None)
    if records:
        kept["notebooks"][number] = records
    kept["notebooks"] = dict(sorted(kept["notebooks"].items()))
    files.write_json(ANSWERS, kept)
    files.remove(answers)


def to_html(nb, path: Path, pair: str) -> str:
    """The executed notebook as a page that needs no network, opening with where it ran and the
    stamp of the code that drew it (`path`: the notebook file; one that does not exist: 'unknown')."""
    import nbformat

    keep_static_images(nb)  # a figure without a PNG keeps its JSON (no browser drew it)
    textual = keep_static_widgets(nb)  # a widget shows its static HTML: its JavaScript would need a CDN
    if textual:
        print(f"note: {textual} widget(s) of {path.name} have no static HTML and show as text", file=sys.stderr)
    stamp = provenance.notebook_version(path) if path.is_file() else "unknown"
    where = (f"**Executed copy** of `notebooks/{path.name}` on the `{pair}` pair: {cpu_name()}, "
             f"{os.cpu_count()} cores, {loaded_as(nb) or 'no model loaded'}, {datetime.date.today().isoformat()}, "
             f"specviz commit {commit()}. Timings are this machine's; run the notebook to see yours. "
             f"Drawn by code stamp {stamp}.")
    nb.cells.insert(0, nbformat.v4.new_markdown_cell(where))
    page = export(nb)
    return page.replace("<head>", f'<head>\n<meta name="specviz-code" content="{stamp}">', 1)


def export(nb) -> str:
    from jinja2 import DictLoader
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(template_name="lab", template_file="specviz_offline.html.j2",
                            extra_loaders=[DictLoader({"specviz_offline.html.j2": OFFLINE_TEMPLATE})])
    return exporter.from_notebook_node(nb, resources={"metadata": {"name": title_of(nb)}})[0]


def title_of(nb) -> str:
    """The notebook's first heading (the page's title; nbconvert would call every copy "Notebook")."""
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            found = re.search(r"^#\s+(.+)$", cell.source, re.M)
            if found:
                return found[1].strip()
    return "specviz notebook"


def stamp_of(page: str):
    """The code stamp a copy carries, or None (a copy built before stamps)."""
    found = STAMP.search(page)
    return found[1] if found else None


def code_cells(page: str) -> list:
    """The source of each code cell a copy shows, in order (its highlighted input, unescaped;
    trailing spaces aside)."""
    sources = []
    for chunk in re.split(r'<div class="jp-Cell jp-CodeCell', page)[1:]:
        found = re.search(r'<div class="highlight[^"]*"><pre>(.*?)</pre>', chunk, re.S)
        sources.append(_tidy(html_text.unescape(re.sub(r"<[^>]+>", "", found[1]))) if found else "")
    return sources


def _tidy(source: str) -> str:
    return "\n".join(line.rstrip() for line in source.strip().splitlines())


def problems(copy: Path, notebook: Path) -> list:
    """How a committed copy is not what the code now would build: one sentence each, [] if none."""
    page = Path(copy).read_text(encoding="utf-8")
    found = []
    stamp, now = stamp_of(page), provenance.notebook_version(notebook)
    if stamp != now:
        found.append(f"{copy.name} was drawn by code stamp {stamp or 'none'}, the code now is {now}")
    shown = code_cells(page)
    wanted = [_tidy(s) for kind, s in provenance.cells(notebook) if kind == "code"]
    if len(shown) != len(wanted):
        found.append(f"{copy.name} shows {len(shown)} code cells, {notebook.name} has {len(wanted)}")
    found += [f"{copy.name}: code cell {i + 1} is not {notebook.name}'s" for i, (a, b) in enumerate(zip(shown, wanted))
              if a != b]
    return found


def write_index() -> Path:
    """docs/notebooks/README.md: each executed copy with the line saying where it ran."""
    rows = []
    for page in sorted(OUT.glob("[0-9][0-9]_*.html")):
        text = page.read_text(encoding="utf-8")
        header = provenance.copy_header(text)
        where = f"{header[0]} pair: {header[1]}" if header else "(no header)"
        rows.append(f"| [{page.stem}]({page.name}) | [notebook](../../notebooks/{page.stem}.ipynb) | {where} "
                    f"| {stamp_of(text) or 'none'} |")
    index = OUT / "README.md"
    files.write_text(index, "# Executed notebooks\n\nEach teaching notebook run top to bottom on the real pair, saved as HTML with its "
                     "figures as images and the page style in notebook.css beside them (`make executed-notebooks` "
                     "regenerates them; download this folder, vendor/ included, and open a page from disk: it needs no network). "
                     "The timings are the machine's named beside it. The code stamp names the code that drew the copy "
                     "(specviz.bench.provenance); a test fails when it is not the code's now.\n\n"
                     "| copy | source | where it ran (CPU, cores, device and dtype, date, commit) | code stamp |\n"
                     "|---|---|---|---|\n"
                     + "\n".join(rows) + "\n")
    return index


def share_css(page: str) -> tuple:
    """(page, css): the page with the styles of its <head> (the template's) replaced by a link to
    the one shared STYLESHEET; styles inside cell outputs stay where they are."""
    end = page.index("</head>")
    head = page[:end]
    css = "\n".join(re.findall(r"<style[^>]*>(.*?)</style>", head, re.S))
    head = re.sub(r"<style[^>]*>.*?</style>\s*", "", head, flags=re.S)
    return f'{head}<link rel="stylesheet" href="{STYLESHEET}">\n{page[end:]}', css


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python notebooks/execute.py", description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="two-digit notebook numbers (default: all)")
    parser.add_argument("--pair", default="qwen-coder")
    parser.add_argument("--force", action="store_true", help="run again even where a copy exists")
    args = parser.parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    todo = [p for p in notebooks(args.names)
            if args.force or args.names or not (OUT / p.with_suffix(".html").name).exists()]
    if not todo:
        print("every notebook has its executed copy (--force runs them again)")
    spent = []
    for i, path in enumerate(todo):
        start = time.perf_counter()
        print(f"[{i + 1}/{len(todo)}] {path.name} ...", end="", flush=True)
        try:
            nb = execute(path, args.pair, OUT / f".answers-{path.name[:2]}.jsonl")
        except Exception as exc:  # a failing cell: say which notebook, keep the copies made so far
            print(f" failed: {str(exc).strip().splitlines()[-1][:300]}", file=sys.stderr)
            return 1
        page, css = share_css(to_html(nb, path, args.pair))
        files.write_text(OUT / STYLESHEET, css)
        files.write_text(OUT / path.with_suffix(".html").name, page)
        keep_answers(path.name[:2], OUT / f".answers-{path.name[:2]}.jsonl")
        spent.append(time.perf_counter() - start)
        write_index()
        eta = sum(spent) / len(spent) * (len(todo) - i - 1)
        print(f" {spent[-1]:.0f} s (ETA for the rest: {eta / 60:.0f} min)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
