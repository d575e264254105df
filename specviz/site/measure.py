"""What the static site costs to build and to open, measured: `python -m specviz.site.measure`.

Builds the site from the committed recordings (timed: `make site` must take under a minute
without a model), then opens it from disk in Chromium with every request outside the folder
refused: the time from navigation to the start page's first view drawn (the player marks the
moment, `data-drawn-at`, on the page's own clock), the gallery's first view, and the requests that
tried to leave. Each page is opened `--repeats` times in a fresh tab; the report gives the median
and the range. Writes docs/benchmarks/site-qwen-coder.{json,md}.

    python -m specviz.site.measure [--repeats 5] [--out docs/benchmarks]

Needs playwright and a Chromium ($BROWSER_PATH, else /usr/bin/chromium); nothing else should run
on the cores while it times.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from specviz import files
from specviz.bench.provenance import REPO
from specviz.errors import InputError, run_command
from specviz.site import build as site

OUT = REPO / "docs" / "benchmarks"
NAME = "site-qwen-coder"
PAGES = {"start page (index.html)": ("index.html", "#sv-first"),
         "gallery (gallery.html)": ("gallery.html#k=spec.code.t0", "#sv-a [data-drawn-at]")}


def _browser_path() -> str:
    path = os.environ.get("BROWSER_PATH") or "/usr/bin/chromium"
    if not os.access(path, os.X_OK):
        raise InputError(f"{path} is missing: install Chromium (apt-get install chromium) or set BROWSER_PATH")
    return path


def first_views(folder: Path, repeats: int) -> dict:
    """Milliseconds from navigation to each page's first drawn view, and the requests refused."""
    from playwright.sync_api import sync_playwright

    root, outside, out = folder.as_uri() + "/", [], {}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=_browser_path(), args=["--no-sandbox", "--disable-gpu"])
        try:
            for label, (page, selector) in PAGES.items():
                times = []
                for _ in range(repeats):
                    tab = browser.new_page(viewport={"width": 1280, "height": 900})
                    tab.route("**/*", lambda r: r.continue_() if r.request.url.startswith(root)
                              else (outside.append(r.request.url), r.abort()))
                    tab.goto(root + page)
                    drawn = tab.locator(selector).first
                    drawn.wait_for(state="attached")
                    tab.wait_for_function(f"document.querySelector('{selector}').dataset.drawnAt !== undefined")
                    times.append(float(drawn.get_attribute("data-drawn-at")))
                    tab.close()
                out[label] = {"page": page, "ms": [round(t, 1) for t in times],
                              "median_ms": round(statistics.median(times), 1)}
        finally:
            browser.close()
    return {"pages": out, "outside_requests": outside}


def measure(repeats: int = 5, say=print) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "site"
        started = time.perf_counter()
        info = site.build(folder, say=lambda line: None)
        build_s = time.perf_counter() - started
        say(f"built in {build_s:.1f} s: {info['bytes'] / 1e6:.2f} MB")
        views = first_views(folder, repeats)
    from specviz.runtime.machine import cpu_name  # the report names the machine it timed

    return {"machine": cpu_name(), "cores": os.cpu_count(), "build_s": round(build_s, 1), "bytes": info["bytes"],
            "budget": site.BUDGET, "sizes": info["sizes"], "files": info["files"], "repeats": repeats, **views}


def markdown(rep: dict) -> str:
    rows = "".join(f"| {label} | {v['median_ms']:.0f} ms | {min(v['ms']):.0f}–{max(v['ms']):.0f} ms |\n"
                   for label, v in rep["pages"].items())
    parts = "".join(f"| {name} | {size / 1e6:.2f} MB |\n" for name, size in
                    sorted(rep["sizes"].items(), key=lambda kv: -kv[1]))
    return (f"# The static site: size, build and first view\n\n"
            f"Measured by `python -m specviz.site.measure` on {rep['machine']} ({rep['cores']} cores), Chromium, the "
            f"site opened from disk with every request outside its folder refused.\n\n"
            f"- built in **{rep['build_s']:.0f} s** (`python -m specviz site OUT`, no model loaded)\n"
            f"- **{rep['bytes'] / 1e6:.1f} MB** in {rep['files']} files (budget {rep['budget'] / 1e6:.0f} MB)\n"
            f"- requests that tried to leave the folder: **{len(rep['outside_requests'])}**\n\n"
            f"| first view drawn, from navigation | median of {rep['repeats']} | range |\n|---|---|---|\n{rows}\n"
            f"What takes the room:\n\n| part | size |\n|---|---|\n{parts}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specviz.site.measure", description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)

    def run() -> int:
        rep = measure(args.repeats)
        files.write_json(args.out / f"{NAME}.json", rep)
        files.write_text(args.out / f"{NAME}.md", markdown(rep))
        print(markdown(rep))
        return 0

    return run_command(run)


if __name__ == "__main__":
    sys.exit(main())
