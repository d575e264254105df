"""`python -m specviz site OUT`: the course as a static folder that needs no server and no network.

Built only from committed files, without loading a model: the gallery's recordings
(specviz.bench.gallery: every method on the same three prompts), the app's presets and serving
runs (specviz.bench.recordings), the glossary, the deck and the executed notebooks. Every view is
drawn by the app's renderers at every recorded step (specviz.site.views); player.js only shows
frame c for step c. Plotly's own JavaScript (from the installed plotly package) draws the charts.
Data files are scripts (`SV.got(key, ...)`), so the site opens from file:// as well as from any
static host, and the build is deterministic: the same recordings give the same bytes.

    OUT/index.html         start: what speculation is, the first recording playing, the way in
    OUT/gallery.html       every method on the same texts: step view, inspector, tree, race, SSD
                           timeline, a batch; any two side by side
    OUT/explorer.html      speedup against acceptance: the theory's curves under sliders, every run on them
    OUT/serving.html       recorded batches of 1 to 32 users
    OUT/lab.html           the worksheet questions the site answers, each with where to look
    OUT/glossary.html, OUT/slides/, OUT/notebooks/   the course
    OUT/README.md          a static Hugging Face Space's front matter (GitHub Pages serves it as it is)
"""

from __future__ import annotations

import functools
import hashlib
import json
import multiprocessing
import os
import re
import shutil
import statistics
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Callable

from specviz import __version__, files, methods
from specviz.analysis.metrics import timing_note
from specviz.bench import gallery, recordings
from specviz.bench.provenance import REPO
from specviz.errors import InputError
from specviz.render.page import plotly_bundle, shared_template
from specviz.render.html import CSS
from specviz.site import codec, pages, views
from specviz.site.pages import REPOSITORY

STATIC = Path(__file__).resolve().parent / "static"
BUDGET = 15_000_000  # bytes: the whole site, what a free host and a class's download afford; `sizes()` says what takes the room
NOTEBOOKS = REPO / "docs" / "notebooks"
SLIDES = REPO / "docs" / "slides"


def build(out: Path, say: Callable[[str], None] = print, gallery_folder: Path = gallery.DATA,
          presets_folder: Path = recordings.DATA, serving_folder: Path = recordings.SERVING,
          complete: bool = True) -> dict:
    """Write the site into `out` (replaced whole); returns its manifest (what site.json holds).
    `complete`: refuse a gallery that lacks an entry (a method added since it was recorded)."""
    out = Path(out)
    if out.exists() and any(out.iterdir()) and not (out / "site.json").exists():
        raise InputError(f"{out} is a folder with other files in it: give a new folder, or an earlier site's, "
                         "which is replaced whole.")
    _check_sources(gallery_folder, complete)
    if not (NOTEBOOKS.is_dir() and SLIDES.is_dir()):
        raise InputError(f"the site is built from a checkout of the specviz repository: {NOTEBOOKS.parent} lacks "
                         "the executed notebooks and the slides (git clone the repository, then make site).")
    try:
        return _write(out, say, gallery_folder, presets_folder, serving_folder)
    except OSError as exc:  # a folder under a file, no permission, a full disk: one sentence
        raise InputError(f"cannot write the site to {out}: {exc.strerror or exc}") from exc


def _write(out: Path, say, gallery_folder: Path, presets_folder: Path, serving_folder: Path) -> dict:
    with files.new_folder(out, "the site") as tmp:
        _assets(tmp)
        entries = _gallery(tmp, gallery_folder, say)
        presets = _presets(tmp, presets_folder, say)
        serving = _serving(tmp, serving_folder, say)
        pages.write_all(tmp, entries, presets, serving, gallery.manifest(gallery_folder))
        _course(tmp, say)
        info = _manifest(tmp, gallery_folder, presets_folder, serving_folder)
    say(f"wrote the site to {out}: {info['files']} files, {info['bytes'] / 1e6:.1f} MB "
        f"(budget {BUDGET / 1e6:.0f} MB); open {out / 'index.html'}")
    return info


def _check_sources(folder: Path, complete: bool) -> None:
    if not (Path(folder) / gallery.MANIFEST).exists():
        raise InputError(f"no gallery recordings in {folder}: record them with python -m specviz.bench.gallery record")
    tokens = gallery.manifest(folder)["recorded"].get("tokens", gallery.TOKENS)
    missing = gallery.missing(folder, tokens) if complete else []
    if missing:
        raise InputError(f"the gallery lacks {len(missing)} recording(s) ({', '.join(missing[:3])}...): run "
                         "python -m specviz.bench.gallery record, which adds what is missing")


# ---------------------------------------------------------------------------------------------
# assets: the player, the style, Plotly


def _assets(out: Path) -> None:
    assets = out / "assets"
    assets.mkdir()
    for name in ("player.js", "gallery.js", "site.css"):
        shutil.copyfile(STATIC / name, assets / name)
    files.write_text(assets / "views.css", CSS)
    bundle = plotly_bundle()
    # Plotly's own bundle, gzip-compressed like the data (a third of its size: the budget's largest
    # part); player.js decodes and runs it once per page. Its licence header travels beside it
    files.write_text(assets / "plotly.js", f'SV.got("plotly",{json.dumps(codec.pack_text(bundle))});\n')
    files.write_text(assets / "plotly.LICENSE.txt", bundle[:bundle.index("*/") + 2] + "\n"
                     "(assets/plotly.js holds this plotly.js bundle, unchanged, gzip-compressed and base64-encoded)\n")
    files.write_text(assets / "template.js", "window.SV = window.SV || {};\nSV.template = "
                     + json.dumps(shared_template(), sort_keys=True, separators=(",", ":")) + ";\n")


def data_text(key: str, data) -> str:
    """data/KEY.js: the page loads it with a script tag (file:// allows no fetch)."""
    return f'SV.got({json.dumps(key)},"{codec.pack(data)}");\n'


def data_file(out: Path, key: str, data) -> int:
    text = data_text(key, data)
    files.write_text(out / "data" / f"{key}.js", text)
    return len(text)


# ---------------------------------------------------------------------------------------------
# the gallery: every method on the same prompts


def _gallery(out: Path, folder: Path, say) -> list:
    """Every entry drawn at every step, on every core (the renderers' figures take the time); the
    rows come back in the registry's order, so the pages and files are the same whatever the cores."""
    info = gallery.manifest(folder)
    order = {v.name: i for i, v in enumerate(gallery.variants())}
    keys = sorted(info["entries"], key=lambda key: (order.get(info["entries"][key]["variant"], 99), key))
    rows = []
    with _pool() as pool:
        for done, (row, text) in enumerate(pool.map(functools.partial(_entry, folder=folder), keys, chunksize=4), 1):
            files.write_text(out / "data" / f"{row['key']}.js", text)
            rows.append(row)
            if done % 20 == 0:
                say(f"  gallery: {done} of {len(keys)} recordings drawn")
    return rows


def _pool():
    workers = max(1, min(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1, 8))
    # spawn: a fresh interpreter per worker, safe in a process that runs threads (a browser under test)
    return ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))


def _entry(key: str, folder: Path) -> tuple:
    """(the gallery's row for `key`, its data file's text): its step view, race and, for SSD, the
    timeline beside plain speculation on the same text; a batch: its serving view."""
    info = gallery.manifest(folder)
    entry = info["entries"][key]
    variant = next(v for v in gallery.variants() if v.name == entry["variant"])
    run, ar = gallery.lanes(key, folder)
    where = _where(info["recorded"])
    earlier = recordings.earlier_code(entry.get("code"), variant.method, entry["settings"]["k"], variant.batch,
                                      command="record (specviz.bench.gallery)")
    row = {"key": key, "variant": variant.name, "label": variant.label, "method": variant.method,
           "prompt": entry["prompt"], "temperature": entry["temperature"], "lossy": variant.lossy,
           "note": variant.note, "batch": variant.batch, "earlier": earlier,
           "busy": bool(timing_note(run) or timing_note(ar))}
    data = {"key": key, "where": where, "earlier": earlier}
    if variant.batch:
        data["serving"] = views.serving_view(ar, run, f"{where}: a replay, no model ran")
        point = data["serving"]["point"]
        row.update(speedup=point.get("speedup"), tau=None, alpha=point.get("alpha"), passes=data["serving"]["passes"])
    else:
        run_s = views.own_clock(run, entry["run"]["busy"], entry["run"].get("clock"))
        ar_s = views.own_clock(ar, entry["ar"]["busy"], entry["ar"].get("clock"))
        data["step"] = views.step_view(run, run_s)
        data["race"] = views.race_view(run, ar, run_s, ar_s)
        record = {**data["race"]["record"], "label": variant.label}  # the explorer's hover names the gallery's row
        row.update(speedup=record["speedup"], tau=record["tau"], alpha=record["alpha"], c=record["c"], record=record,
                   steps=data["step"]["steps"], forwards=_forwards(run), ar_forwards=_forwards(ar))
        if variant.method == "ssd":
            data["timeline"] = _ssd_timeline(info, entry, run, run_s, folder)
    text = data_text(key, data)
    row["bytes"] = len(text)
    return row, text


def _ssd_timeline(info: dict, entry: dict, run: list, run_s: list, folder: Path) -> dict:
    """SSD's lanes beside plain speculation's (the spec entry on the same text and sampling)."""
    spec_key = next(k for k, e in info["entries"].items() if e["variant"] == "spec" and e["prompt"] == entry["prompt"]
                    and e["temperature"] == entry["temperature"])
    spec_entry = info["entries"][spec_key]
    spec, _ = gallery.lanes(spec_key, folder)
    spec_s = views.own_clock(spec, spec_entry["run"]["busy"], spec_entry["run"].get("clock"))
    return views.timeline_view([("ssd k=4", views.on_own_clock(run, run_s)),
                                ("spec k=4", views.on_own_clock(spec, spec_s))])


def _forwards(events: list) -> int:
    return events[-1]["metrics"].get("target_forwards", 0)


def _where(recorded: dict) -> str:
    return f"{recordings.where_note(recorded)}, specviz {recorded.get('specviz')}"


# ---------------------------------------------------------------------------------------------
# the app's presets: the lecture's recordings, each with the range of its repeated races


def _presets(out: Path, folder: Path, say) -> list:
    rows = []
    for number, label in enumerate(recordings.LABELS, 1):
        rec = recordings.recording(label, folder)
        run_s = views.own_clock(rec.run, rec.run_busy)
        ar_s = views.own_clock(rec.ar, rec.ar_busy)
        key = f"preset-{number:02d}"
        spread = ""
        if rec.speedups:
            ordered = sorted(rec.speedups)
            spread = (f"this replay is the first of {len(ordered)} races of this preset ({rec.speedups[0]:.2f}×); "
                      f"over all {len(ordered)}: median {statistics.median(ordered):.2f}×, "  # as the guide's tables
                      f"range {ordered[0]:.2f}–{ordered[-1]:.2f}×")
        data = {"key": key, "where": _where(rec.where), "earlier": rec.earlier_code,
                "spread": spread, "step": views.step_view(rec.run, run_s), "race": views.race_view(rec.run, rec.ar, run_s, ar_s),
                "paced": "each step replayed at its share of its lane's measured time (this recording kept totals only)"}
        rows.append({"key": key, "label": label, "method": rec.preset.method, "spread": spread,
                     "speedups": list(rec.speedups or ()), "record": data["race"]["record"],
                     "bytes": data_file(out, key, data)})
    say(f"  presets: {len(rows)} recordings drawn")
    return rows


# ---------------------------------------------------------------------------------------------
# the serving view's recorded batches


def _serving(out: Path, folder: Path, say) -> dict:
    info = recordings.serving_manifest(folder)
    where = _where(info["recorded"])
    points, keys = [], []
    for batch in info["batches"]:
        ar = recordings.serving_recording(batch, "ar", folder)
        for lane in ("spec", "load"):
            run = recordings.serving_recording(batch, lane, folder)
            key = f"serving-B{batch:02d}-{lane}"
            data = views.serving_view(ar, run, f"{where}: a replay, no model ran")
            data["earlier"] = recordings.serving_earlier_code(batch, lane, folder)
            data_file(out, key, data)
            points.append({**data["point"], "label": f"recorded B = {batch}, {'k = load' if lane == 'load' else 'k = 4'}"})
            keys.append({"key": key, "batch": batch, "lane": lane})
    say(f"  serving: {len(keys)} batches drawn")
    return {"keys": keys, "where": where, "figure": views.batch_figure((info.get("sweep") or {}).get("analysis") or {},
                                                                        points),
            "sweep": (info.get("sweep") or {}).get("source")}


# ---------------------------------------------------------------------------------------------
# the course: the executed notebooks and the deck, made to work offline beside the site


def _course(out: Path, say) -> None:
    (out / "notebooks").mkdir()
    pages = sorted(NOTEBOOKS.glob("*.html"))
    with _pool() as pool:
        for path, page in zip(pages, pool.map(_course_page, pages)):
            files.write_text(out / "notebooks" / path.name, page)
    shutil.copyfile(NOTEBOOKS / "notebook.css", out / "notebooks" / "notebook.css")
    shutil.copytree(NOTEBOOKS / "vendor", out / "notebooks" / "vendor")
    (out / "slides").mkdir()
    files.write_text(out / "slides" / "lecture.slides.html",
                     smaller_images((SLIDES / "lecture.slides.html").read_text(encoding="utf-8")))
    shutil.copytree(SLIDES / "vendor", out / "slides" / "vendor")
    say(f"  course: {len(list(NOTEBOOKS.glob('*.html')))} executed notebooks and the deck")


def _course_page(path: Path) -> str:
    return smaller_images(course_links(path.read_text(encoding="utf-8")))


PNG = re.compile(r"data:image/png;base64,([A-Za-z0-9+/=]+)")


def smaller_images(page: str) -> str:
    """The page's PNG figures in 256 colours (charts have few; the budget has room for their
    copies only so), each kept as it was where that is not smaller."""
    return PNG.sub(lambda m: "data:image/png;base64," + _fewer_colours(m[1]), page)


def _fewer_colours(encoded: str) -> str:
    import base64
    import io

    from PIL import Image

    raw = base64.b64decode(encoded)
    image = Image.open(io.BytesIO(raw))
    image = image.convert("RGBA") if image.mode not in ("RGB", "RGBA") else image
    small = io.BytesIO()
    image.quantize(256, method=Image.Quantize.FASTOCTREE).save(small, format="PNG", optimize=True)
    return base64.b64encode(small.getvalue()).decode("ascii") if small.tell() < len(raw) else encoded


def course_links(page: str) -> str:
    """An executed copy's links as the site lays them out: the glossary and the other notebooks
    beside it, the repository's other pages on GitHub (a click away, nothing loaded)."""
    # the Colab badge is an image on Colab's server: offline, its words instead (the link stays)
    page = re.sub(r'<img alt="Open In Colab" src="https://[^"]*"\s*/?>', "Open in Colab", page)
    page = page.replace('href="../docs/glossary.md', 'href="../glossary.html')
    page = re.sub(r'href="(\d\d_[a-z0-9_]+)\.ipynb', r'href="\1.html', page)
    page = re.sub(r'href="\.\./(docs/[^"#]+|teacher/[^"#]+)', lambda m: f'href="{REPOSITORY}{m[1]}', page)
    return re.sub(r'href="README\.md', f'href="{REPOSITORY}docs/notebooks/README.md', page)


# ---------------------------------------------------------------------------------------------
# the manifest: what the site was built from, and its size


def _digest(folder: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(Path(folder).iterdir()):
        if path.is_file():
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def sizes(folder: Path) -> dict:
    """Bytes by top-level part of a built site (what takes the room)."""
    out: dict = {}
    for path in Path(folder).rglob("*"):
        if path.is_file():
            rel = path.relative_to(folder)
            part = rel.parts[0] if len(rel.parts) > 1 else "pages"
            part = "assets/plotly.js" if rel.name == "plotly.js" else part
            out[part] = out.get(part, 0) + path.stat().st_size
    return dict(sorted(out.items()))


def _manifest(out: Path, gallery_folder: Path, presets_folder: Path, serving_folder: Path) -> dict:
    parts = sizes(out)
    info = {"specviz": __version__, "methods": list(methods.names()),
            "sources": {"gallery": _digest(gallery_folder), "presets": _digest(presets_folder),
                        "serving": _digest(serving_folder)},
            "files": sum(1 for p in out.rglob("*") if p.is_file()) + 1, "sizes": parts}
    info["bytes"] = sum(parts.values())
    files.write_json(out / "site.json", info)
    info["bytes"] += (out / "site.json").stat().st_size
    return info

