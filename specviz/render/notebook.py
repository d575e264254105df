"""Notebook set-up: Plotly figures that stay interactive in Jupyter and leave a static image.

`setup()` makes every `fig.show()` emit two representations: Plotly's own JSON mimetype
(interactive in JupyterLab, VS Code, Colab, nbviewer) and a PNG drawn by kaleido in a headless
Chrome/Chromium, which is what GitHub shows. The PNG part never breaks or stalls a notebook:

- it is tried only when a browser is found (`browser_path`: $BROWSER_PATH, the PATH, the usual
  install folders, kaleido_get_chrome's download); otherwise `setup()` says so in one line and
  figures are interactive-only;
- every call into the browser waits at most `START_TIMEOUT_S` (the first image starts it) or
  `FIGURE_TIMEOUT_S`; past that, or on any error, static images turn off for the session with
  one line saying why, and the browser is shut down.

kaleido's own sync server (`kaleido.start_sync_server`, what `plotly.io.to_image` uses) waits on a
queue with no timeout, and when its browser never starts that wait is forever: notebooks and
tests hung on machines without Chrome. So the browser runs here on a private event loop whose
every call has a deadline. SPECVIZ_STATIC_IMAGES=0 turns PNGs off.

`show_pair(pair)`, the last line of every notebook's load cell, shows the loaded pair as
`print(pair)` did, and a coloured banner when the load picked a target the student did not ask
for: int8 weights because memory ran short (`pair.memory_choice`), or a target other than the
last load of the same pair name (`pair.last_load`, kept by specviz.runtime.models in the cache): another
notebook's kernel still holding memory changes the model the next notebook decodes.
"""

from __future__ import annotations

import asyncio
import atexit
import base64
import os
import re
import sys
import threading
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Optional

import plotly.io as pio
from plotly.io._base_renderers import MimetypeRenderer

from specviz.render.html import text

RENDERER = "specviz_png"
START_TIMEOUT_S = 10.0  # starting a headless browser: a few seconds, more on a cold or busy laptop
FIGURE_TIMEOUT_S = 10.0  # one figure: a fraction of a second once the browser runs
_lock = threading.Lock()
_state: dict = {"browser": None, "off": None}  # off: why static images are off, once known


def browser_path() -> Optional[str]:
    """The Chrome/Chromium (or Edge, Brave) kaleido would drive, or None: $BROWSER_PATH, then the
    PATH, the usual install folders and kaleido_get_chrome's download (choreographer's search).
    A path that is not an executable file counts as none."""
    try:
        from choreographer.browsers.chromium import Chromium

        path = Chromium.find_browser(skip_local=False)
    except Exception:  # no kaleido/choreographer, or its search failed: no browser known
        return None
    return path if path and os.path.isfile(path) and os.access(path, os.X_OK) else None


def static_images_off() -> Optional[str]:
    """Why no static image can be drawn in this session (one sentence), or None when it can."""
    if _state["off"]:
        return _state["off"]
    if os.environ.get("SPECVIZ_STATIC_IMAGES") == "0":
        return "static figure images are off (SPECVIZ_STATIC_IMAGES=0)"
    try:
        import kaleido  # noqa: F401
    except ImportError:
        return "static figure images are off: kaleido is not installed (pip install kaleido)"
    if browser_path() is None:
        return ("static figure images are off: no Chrome/Chromium found (install one, or set "
                "BROWSER_PATH); figures stay interactive")
    return None


def figure_png(fig, width: Optional[int] = None, height: Optional[int] = None) -> Optional[bytes]:
    """PNG bytes of a figure (or figure dict), or None when no static image can be drawn. Never
    waits longer than START_TIMEOUT_S + FIGURE_TIMEOUT_S."""
    if static_images_off():
        return None
    fig = fig if isinstance(fig, dict) else fig.to_dict()
    layout = fig.get("layout") or {}
    opts = dict(format="png", width=width or layout.get("width") or 700,
                height=height or layout.get("height") or 500, scale=1)
    with _lock:
        try:
            if _state["browser"] is None:
                _state["browser"] = _Browser(browser_path())
            return _state["browser"].png(fig, opts)
        except Exception as exc:  # no browser after all, it hung, or it died: interactive-only
            reason = "timed out" if isinstance(exc, FutureTimeout) else f"{type(exc).__name__}: {exc}"
            _turn_off(f"static figure images are off ({reason}); figures stay interactive")
            return None


def _turn_off(reason: str) -> None:
    _state["off"] = reason
    print(f"specviz: {reason}", file=sys.stderr)
    browser, _state["browser"] = _state["browser"], None
    if browser is not None:
        browser.close()


class _Browser:
    """One headless browser, driven by kaleido on a private event loop thread; every call waits
    at most its timeout (kaleido.Kaleido is asyncio-only)."""

    def __init__(self, path: str):
        import kaleido

        self._loop = asyncio.new_event_loop()
        threading.Thread(target=self._loop.run_forever, name="specviz-kaleido", daemon=True).start()
        self._kaleido = None
        atexit.register(self.close)

        async def start():
            # mathjax=False: no CDN fetch (offline classrooms); figures here use no LaTeX
            self._kaleido = kaleido.Kaleido(path=path, mathjax=False)
            await self._kaleido.open()

        try:
            self._call(start(), START_TIMEOUT_S)
        except BaseException:
            self.close(polite=False)  # a browser that never answered must not outlive this
            raise

    def _call(self, coroutine, timeout: float):
        async def settled():  # the outcome as a value: one given up on leaves no stray traceback
            try:
                return await coroutine, None
            except BaseException as exc:  # noqa: BLE001 (cancellation included)
                return None, exc

        future = asyncio.run_coroutine_threadsafe(settled(), self._loop)
        try:
            value, error = future.result(timeout)
        except FutureTimeout:
            future.cancel()
            raise
        if error is not None:
            raise error
        return value

    def png(self, fig: dict, opts: dict) -> bytes:
        return self._call(self._kaleido.calc_fig(fig, opts=opts), FIGURE_TIMEOUT_S)

    def close(self, polite: bool = True) -> None:
        """Close the browser (a few seconds at most; not asked at all when it never answered),
        end its process group if it is still there, and stop the loop."""
        kaleido, self._kaleido = self._kaleido, None
        if kaleido is not None:
            try:
                if polite:
                    self._call(kaleido.close(), 5.0)
            except Exception:  # it stopped answering: the process group goes below
                pass
            process = getattr(kaleido, "subprocess", None)
            if process is not None and process.poll() is None:
                from choreographer.utils._kill import kill  # the group: the wrapper and the browser

                kill(process)
        self._loop.call_soon_threadsafe(self._loop.stop)


class StaticPng(MimetypeRenderer):
    """A PNG beside the interactive figure, or nothing when no image can be drawn."""

    def __init__(self, width: int = 900, height: Optional[int] = None):
        self.width, self.height = width, height

    def to_mimebundle(self, fig_dict) -> dict:
        height = self.height or (fig_dict.get("layout") or {}).get("height") or 450
        png = figure_png(fig_dict, width=self.width, height=height)
        return {"image/png": base64.b64encode(png).decode()} if png else {}


def setup(static_images: Optional[bool] = None) -> None:
    """Make `fig.show()` interactive plus a PNG copy where a browser can draw one
    (`plotly.io.renderers.default` says which); where none can, say why in one line."""
    pio.renderers[RENDERER] = StaticPng()
    reason = "static figure images are off (setup(static_images=False))" if static_images is False \
        else static_images_off()
    pio.renderers.default = "plotly_mimetype" if reason else f"plotly_mimetype+{RENDERER}"
    if reason:
        print(f"specviz: {reason}")


def check(answer, expected, tol: float = 0.0, hint: str = "") -> Optional[bool]:
    """An exercise check a student can run: True when `answer` matches `expected` (numbers
    within `tol`, anything else by equality), False with the hint when not, None when the
    exercise is not answered yet (answer is None). Prints one line either way."""
    if answer is None:
        print("Not answered yet: replace None with your answer and run this cell again.")
        return None
    if isinstance(expected, (int, float)) and isinstance(answer, (int, float)):
        ok = abs(answer - expected) <= tol
    else:
        ok = answer == expected
    print("✓ Correct." if ok else f"✗ Not yet. {hint}".rstrip())
    return ok


# ---------------------------------------------------------------------------------------------
# executed notebooks: what their outputs say (the executed copies, the lab's timing, the slides)

PLOTLY_JSON = "application/vnd.plotly.v1+json"


def loaded_as(nb) -> Optional[str]:
    """The device and dtype an executed notebook's pair reported when it loaded ("cpu (bfloat16)",
    "cpu (int8 weights, float parts in float32)"), or None when no pair loaded."""
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            text = out.get("text", "") if out.get("output_type") == "stream" else ""
            found = re.search(r"ready on (\S+) \(([^)]*)\)", text)
            if found:
                return f"{found[1]} ({found[2]})"
    return None


def keep_static_images(nb) -> int:
    """Keep each figure's PNG and drop its interactive JSON (a page without plotly.js cannot draw
    it); the number of figures left without a PNG."""
    missing = 0
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if PLOTLY_JSON in data:
                if "image/png" in data:
                    del data[PLOTLY_JSON]
                else:
                    missing += 1
    return missing


WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def keep_static_widgets(nb) -> int:
    """Show each widget as its static HTML (specviz's widgets put it in the same output,
    specviz.render.widgets._StaticCopy) and drop the widget view and the notebook's widget state:
    a page drawing the view needs the widget manager's JavaScript from a CDN, and shows nothing
    offline. Returns the number of widget outputs left without HTML (they show as text)."""
    missing = 0
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if WIDGET_VIEW in data:
                del data[WIDGET_VIEW]
                missing += "text/html" not in data
    nb.metadata.pop("widgets", None)
    return missing


# ---------------------------------------------------------------------------------------------
# the loaded pair, and a banner when its target is not the one the student expects

SHUT_DOWN = ("shut down the other notebooks' kernels (in each: Kernel > Shut Down Kernel), then re-run this "
             "cell; if it still loads int8, restart this kernel (Kernel > Restart Kernel) and run from the top")
BANNER_COLORS = {"warn": ("#fef3c7", "#b45309", "#78350f"), "info": ("#dbeafe", "#2563eb", "#172554")}


class PairView:
    """A loaded pair as a notebook shows it: the line `print(pair)` gave, then the banner (if any)
    as a coloured box in HTML and as plain lines where HTML is not shown."""

    def __init__(self, summary: str, banner: Optional[dict] = None):
        self.summary, self.banner = summary, banner

    def lines(self) -> list:
        if not self.banner:
            return [self.summary]
        b = self.banner
        return [self.summary, f"⚠ {b['title']}", f"What: {b['what']}", f"Why: {b['why']}",
                f"What it changes: {b['changes']}", f"What to do: {b['todo']}"]

    def __repr__(self) -> str:
        return "\n".join(self.lines())

    def _repr_html_(self) -> str:
        line = f"<pre style='margin:0 0 6px 0;white-space:pre-wrap'>{text(self.summary)}</pre>"
        if not self.banner:
            return line
        b = self.banner
        fill, edge, ink = BANNER_COLORS[b["level"]]
        parts = "".join(f"<div style='margin-top:4px'><b>{label}</b> {text(b[key])}</div>"
                        for label, key in (("What:", "what"), ("Why:", "why"), ("What it changes:", "changes"),
                                           ("What to do:", "todo")))
        return (f"{line}<div role='alert' class='sv-pair-banner' style='background:{fill};border:2px solid {edge};"
                f"border-left-width:8px;color:{ink};border-radius:8px;padding:10px 14px;font-size:15px;"
                f"line-height:1.45'><div style='font-weight:700;font-size:16px'>⚠ {text(b['title'])}</div>"
                f"{parts}</div>")


def show_pair(pair) -> PairView:
    """The pair as `print(pair)` showed it, with a banner when this load's target differs from the
    last load of its name, or is int8 because memory ran short (`pair_banner`)."""
    return PairView(repr(pair), pair_banner(pair))


def pair_banner(pair) -> Optional[dict]:
    """{level, title, what, why, changes, todo}, or None when the load gave what it gave last time
    (or nothing is known of a last time) and memory did not run short."""
    last = getattr(pair, "last_load", None)
    if not last:  # a load that named its dtype or memory mode: it got what it asked for
        return None
    now, before, changed = last["now"], last["before"], last["changed"]  # specviz.runtime.models.remember_load
    memory = getattr(pair, "memory_choice", None) or {}
    short = "need_bytes" in memory  # memory="auto" chose int8: the float pair did not fit
    if not (short or changed):
        return None
    int8, name = now["weights"] == "int8", pair.name
    what = f"{name} loaded with {_weights(now)}"
    what += f"; the last load of {name} had {_weights(before)}." if changed else "."
    if short:
        why = f"memory ran short at this load: {memory['reason']}."
    elif not int8 and before.get("weights") == "int8":
        why = "this time the float pair fitted in the memory available; at the last load it did not."
    elif getattr(pair, "cpu_choice", None):
        why = f"this load's device or dtype is not the last one's; on this CPU: {pair.cpu_choice['note']}."
    else:
        why = "this load's device or dtype is not the last one's."
    if int8:
        changes = ("the int8 target is the model being decoded (autoregressive decoding and every method run "
                   "it), so its text, α, τ and timings differ from the float pair's: from the numbers in this "
                   "course's text and in notebooks that ran the float pair.")
        title = ("The target is int8, not the float pair: memory ran short" if short
                 else "The target is int8, not the one the last load of this pair gave")
        todo = SHUT_DOWN + "."
    else:
        changes = ("timings, α, τ and, near a tie, the text differ from those of the last load: compare numbers "
                   "only between runs of the same target.")
        title = "The target is not the one the last load of this pair gave"
        todo = "nothing here; to compare numbers with another notebook, run both on the same target."
    return {"level": "warn" if int8 else "info", "title": title, "what": what, "why": why,
            "changes": changes, "todo": todo}


def _weights(facts: dict) -> str:
    """'int8 weights (float parts in float32) on cpu', 'bfloat16 weights on cpu', 'Q4_K_M weights (llama.cpp)'."""
    weights, dtype, device = facts.get("weights"), facts.get("dtype"), facts.get("device")
    if weights == "int8":
        return f"int8 weights (float parts in {dtype}) on {device}"
    if weights in (None, "", "float"):
        return f"{dtype} weights on {device}"
    return f"{weights} weights (llama.cpp)"
