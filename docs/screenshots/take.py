"""Take the docs' screenshots of the app: every view, on the real pair's recorded presets.

    python docs/screenshots/take.py [--out docs/screenshots]        (make screenshots)

Starts the app in this process (its live default is the tiny pair, which nothing here runs), opens
it in Debian's Chromium through Playwright, clicks the presets (runs of Qwen2.5-Coder 0.5B drafting
for 1.5B, recorded once: specviz/data/presets) and saves a PNG of each view. Nothing is computed
live, so the pictures show the real pair's text, chips and numbers. Needs /usr/bin/chromium
(apt-get install chromium) and playwright (installed with specviz's requirements).

Built, never edited: manifest.json beside the pictures names them and the stamp of the code and
presets they show (specviz.bench.provenance.app_version: app.py, webapp/, the renderers they
import, the presets' manifest); `problems()` says when they are stale, and
tests/test_screenshots.py fails until they are taken again.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run", "--disable-quic"]
SHOTS = ("step_view", "tooltip", "inspector", "tree", "lossy", "race", "speedup", "serving", "how_it_works")
GIF = "steps.gif"  # the hook preset played step by step: the README's animation
GIF_WIDTH, GIF_FRAME_MS = 900, 1100
MANIFEST = "manifest.json"


def start_app() -> tuple:
    os.environ["SPECVIZ_PAIR"] = "tiny"  # the live default; the presets replay the real pair's runs
    sys.path.insert(0, str(ROOT))
    import app

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    app.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    return app, f"http://127.0.0.1:{port}/"


def presets() -> tuple:
    """The presets each picture shows, by what they are (their labels may change)."""
    from specviz.bench.recordings import PRESETS

    hook = PRESETS[0]
    chat = next(p for p in PRESETS if p.chat and p.temperature > 0 and p.acceptance == "exact")
    tree = next(p for p in PRESETS if p.method == "tree")
    lossy = next(p for p in PRESETS if p.acceptance == "typical")
    return hook, chat, tree, lossy


def preset(page, chosen) -> None:
    """Click a preset and wait for its own recording (its prompt's text) to fill the step view."""
    page.get_by_role("tab", name="Step view", exact=True).click()
    page.get_by_text(chosen.label, exact=True).click()
    first_line = chosen.prompt.strip().splitlines()[0][:30]
    page.locator("#sv-text", has_text=first_line).wait_for()
    page.locator("#sv-stats [data-recorded]").wait_for()
    page.wait_for_timeout(1200)  # the chips and the inspector's figure settle


def span(page, top: str, bottom: str, path: Path) -> None:
    """The page from the top of one element to the bottom of another, content width."""
    first, last = page.locator(top).bounding_box(), page.locator(bottom).bounding_box()
    scroll = page.evaluate("window.scrollY")
    left = max(0, min(first["x"], last["x"]) - 12)
    clip = {"x": left, "y": first["y"] + scroll - 12, "width": page.viewport_size["width"] - left,
            "height": last["y"] + last["height"] - first["y"] + 24}
    page.screenshot(path=str(path), clip=clip, full_page=True)


def animation(page, steps: int, path: Path) -> None:
    """The step view from the prompt alone to the last step, one frame a step, as an animated GIF."""
    from io import BytesIO

    from PIL import Image

    for _ in range(steps):  # back to the prompt alone
        page.get_by_role("button", name="◀ Prev").click()
        page.wait_for_timeout(300)
    frames = []
    for _ in range(steps + 1):
        page.wait_for_timeout(700)
        box = {k: v for k, v in page.locator("#sv-text").bounding_box().items()}
        panel = page.locator("#sv-panel").bounding_box()
        clip = {"x": box["x"] - 12, "y": box["y"] - 12, "width": box["width"] + 24,
                "height": panel["y"] + panel["height"] - box["y"] + 24}
        shot = Image.open(BytesIO(page.screenshot(clip=clip))).convert("RGB")
        frames.append(shot.resize((GIF_WIDTH, round(shot.height * GIF_WIDTH / shot.width))))
        page.get_by_role("button", name="Next ▶").click()
    height = max(f.height for f in frames)  # one canvas: the text grows step by step
    canvas = [Image.new("RGB", (GIF_WIDTH, height), "white") for _ in frames]
    for frame, base in zip(frames, canvas):
        base.paste(frame, (0, 0))
    canvas[0].save(path, save_all=True, append_images=canvas[1:], duration=GIF_FRAME_MS, loop=0, optimize=True)


def tab(page, name: str, path: Path) -> None:
    page.get_by_role("tab", name=name, exact=True).click()
    page.wait_for_timeout(1500)
    page.locator(".tabitem:visible").first.screenshot(path=str(path))


def take(out: Path) -> list:
    from playwright.sync_api import sync_playwright

    app, url = start_app()
    hook, chat, tree, lossy = presets()
    out.mkdir(parents=True, exist_ok=True)
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            page = browser.new_page(viewport={"width": 1440, "height": 1000})
            page.set_default_timeout(30_000)
            page.goto(url)
            preset(page, hook)
            span(page, "#sv-stats", "#sv-panel", out / "step_view.png")
            from specviz.bench.recordings import recording
            steps = sum(e["kind"] == "step_finished" for e in recording(hook.label).run)
            animation(page, steps, out / GIF)
            preset(page, hook)
            page.locator("#sv-text .sv-chip.sv-bonus").first.hover()
            page.wait_for_timeout(500)
            span(page, "#sv-text", "#sv-panel", out / "tooltip.png")
            preset(page, chat)
            page.locator("#sv-text .sv-chip.sv-residual").first.click()
            page.wait_for_timeout(1500)
            page.locator("#sv-inspector").screenshot(path=str(out / "inspector.png"))
            preset(page, tree)
            for _ in range(6):  # the last step may have had no room left for a tree: step back to one
                if page.locator("#sv-tree .sv-chip").count():
                    break
                page.get_by_role("button", name="◀ Prev").click()
                page.wait_for_timeout(800)
            page.locator("#sv-tree").screenshot(path=str(out / "tree.png"))
            preset(page, lossy)
            span(page, "#sv-stats", "#sv-panel", out / "lossy.png")
            preset(page, hook)
            for name, file in (("Race", "race"), ("Speedup vs acceptance", "speedup"),
                               ("Serving: batches", "serving"), ("How it works", "how_it_works")):
                tab(page, name, out / f"{file}.png")
            browser.close()
    finally:
        app.demo.close()
    return [out / f"{name}.png" for name in SHOTS] + [out / GIF]


def write_manifest(out: Path, paths: list) -> Path:
    """manifest.json: the pictures, and the stamp of the code and presets they were taken from."""
    from specviz import files
    from specviz.bench.provenance import app_files, app_version

    manifest = {"code": app_version(), "files": list(app_files()), "shots": sorted(p.name for p in paths)}
    path = Path(out) / MANIFEST
    files.write_text(path, json.dumps(manifest, indent=1) + "\n")
    return path


def problems(folder: Path = HERE) -> list:
    """Why the pictures in `folder` are not of the code now (one sentence each), or []."""
    from specviz.bench.provenance import app_version

    path = Path(folder) / MANIFEST
    if not path.is_file():
        return [f"{path.name} is missing: python docs/screenshots/take.py"]
    manifest = json.loads(path.read_text(encoding="utf-8"))
    found = [f"{name} is missing" for name in expected() if name not in manifest["shots"]
             or not (Path(folder) / name).is_file()]
    if manifest["code"] != app_version():
        found.append(f"the pictures show code stamp {manifest['code']}, the code now is {app_version()}: "
                     "python docs/screenshots/take.py")
    return found


def expected() -> list:
    return sorted([f"{name}.png" for name in SHOTS] + [GIF])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python docs/screenshots/take.py", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE)
    args = parser.parse_args(argv)
    if not os.path.exists(CHROMIUM):
        print(f"{CHROMIUM} is missing: apt-get install chromium, then run this again", file=sys.stderr)
        return 2
    try:
        paths = take(args.out)
        write_manifest(args.out, paths)
    except KeyboardInterrupt:
        print("interrupted; the screenshots taken so far are in place", file=sys.stderr)
        return 130
    print(f"wrote {len(paths)} screenshots to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
