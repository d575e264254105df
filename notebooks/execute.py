"""Run the teaching notebooks on the real pair and save executed HTML copies under docs/notebooks/.

    python notebooks/execute.py [01 04 ...] [--pair qwen-coder] [--force]     (make executed-notebooks)

The committed .ipynb files stay output-free; these copies are what a reader previews without
running anything (docs/notebooks/README.md lists them). The HTML template's styles, the same in
every copy, are stored once beside them (notebook.css). Each copy opens with where it ran: the
CPU, the device and dtype the notebook's pair loaded with, the date and the specviz commit.
Figures are kept as the static PNGs `specviz.render.notebook` draws beside them (the interactive
Plotly JSON would need plotly.js in the page), so a machine with Chrome/Chromium makes the
complete copy.

Resumable: a notebook whose copy exists is skipped unless --force (or named on the command line).
One line per notebook with its time and an ETA for the rest.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

from specviz import files
from specviz.render.notebook import keep_static_images, loaded_as

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
OUT = ROOT / "docs" / "notebooks"
CELL_TIMEOUT_S = 1800
STYLESHEET = "notebook.css"  # the HTML template's styles, the same for every copy: stored once


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


def execute(path: Path, pair: str):
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    env = {"SPECVIZ_PAIR": pair, "SPECVIZ_SMOKE": "0", "SPECVIZ_STATIC_IMAGES": "1", "HF_HUB_OFFLINE": "1",
           "TQDM_DISABLE": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1", "SPECVIZ_LAB": "0"}  # past the lab's end
    os.environ.update(env)  # the kernel inherits this process's environment
    NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                   resources={"metadata": {"path": str(HERE)}}).execute()
    return nb


def to_html(nb, path: Path, pair: str) -> str:
    import nbformat
    from nbconvert import HTMLExporter

    keep_static_images(nb)  # a figure without a PNG keeps its JSON (no browser drew it)
    where = (f"**Executed copy** of `notebooks/{path.name}` on the `{pair}` pair: {cpu_name()}, "
             f"{os.cpu_count()} cores, {loaded_as(nb) or 'no model loaded'}, {datetime.date.today().isoformat()}, "
             f"specviz commit {commit()}. Timings are this machine's; run the notebook to see yours.")
    nb.cells.insert(0, nbformat.v4.new_markdown_cell(where))
    html, _ = HTMLExporter(template_name="lab").from_notebook_node(nb)
    return html


def write_index() -> Path:
    """docs/notebooks/README.md: each executed copy with the line saying where it ran."""
    rows = []
    for page in sorted(OUT.glob("[0-9][0-9]_*.html")):
        found = re.search(r"on the <code>([^<]+)</code> pair: ([^<]*?)\. Timings", page.read_text(encoding="utf-8"))
        where = f"{found[1]} pair: {found[2]}" if found else "(no header)"
        rows.append(f"| [{page.stem}]({page.name}) | [notebook](../../notebooks/{page.stem}.ipynb) | {where} |")
    index = OUT / "README.md"
    files.write_text(index, "# Executed notebooks\n\nEach teaching notebook run top to bottom on the real pair, saved as HTML with its "
                     "figures as images and the page style in notebook.css beside them (`make executed-notebooks` "
                     "regenerates them; download this folder or open a page through an HTML preview to read it). The timings are the machine's named beside it.\n\n"
                     "| copy | source | where it ran (CPU, cores, device and dtype, date, commit) |\n|---|---|---|\n"
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
            nb = execute(path, args.pair)
        except Exception as exc:  # a failing cell: say which notebook, keep the copies made so far
            print(f" failed: {str(exc).strip().splitlines()[-1][:300]}", file=sys.stderr)
            return 1
        page, css = share_css(to_html(nb, path, args.pair))
        files.write_text(OUT / STYLESHEET, css)
        files.write_text(OUT / path.with_suffix(".html").name, page)
        spent.append(time.perf_counter() - start)
        write_index()
        eta = sum(spent) / len(spent) * (len(todo) - i - 1)
        print(f" {spent[-1]:.0f} s (ETA for the rest: {eta / 60:.0f} min)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
