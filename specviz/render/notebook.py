"""Notebook set-up: Plotly figures that stay interactive in Jupyter and leave a static image.

`setup()` makes every `fig.show()` emit two representations: Plotly's own JSON mimetype
(interactive in JupyterLab, VS Code, nbviewer) and a PNG drawn by kaleido, which is what GitHub
shows. The PNG part never breaks a notebook: without kaleido or a Chrome/Chromium for it to
drive, figures are simply interactive-only. SPECVIZ_STATIC_IMAGES=0 turns PNGs off.

kaleido starts one headless browser for the session (a "sync server") instead of one per
figure: the first image costs a couple of seconds, later ones a fraction of a second.
"""

from __future__ import annotations

import atexit
import base64
import os
import warnings
from typing import Optional

import plotly.io as pio
from plotly.io._base_renderers import MimetypeRenderer

RENDERER = "specviz_png"
_state = {"server": False, "failed": False}


def figure_png(fig, width: Optional[int] = None, height: Optional[int] = None) -> Optional[bytes]:
    """PNG bytes of a figure (or figure dict), or None when no static image can be drawn."""
    if _state["failed"] or os.environ.get("SPECVIZ_STATIC_IMAGES") == "0":
        return None
    try:
        _start_server()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "kopts ignored with a server": expected
            return pio.to_image(fig, format="png", width=width, height=height, validate=False)
    except Exception as exc:  # no kaleido, no browser, or the browser died: stay interactive-only
        _state["failed"] = True
        warnings.warn(f"static figure images are off ({type(exc).__name__}: {exc})", stacklevel=2)
        return None


def _start_server() -> None:
    if _state["server"]:
        return
    import kaleido

    kaleido.start_sync_server(silence_warnings=True)
    _state["server"] = True
    atexit.register(_stop_server)


def _stop_server() -> None:
    if _state["server"]:
        import kaleido

        kaleido.stop_sync_server(silence_warnings=True)
        _state["server"] = False


class StaticPng(MimetypeRenderer):
    """A PNG beside the interactive figure, or nothing when no image can be drawn."""

    def __init__(self, width: int = 900, height: Optional[int] = None):
        self.width, self.height = width, height

    def to_mimebundle(self, fig_dict) -> dict:
        height = self.height or (fig_dict.get("layout") or {}).get("height") or 450
        png = figure_png(fig_dict, width=self.width, height=height)
        return {"image/png": base64.b64encode(png).decode()} if png else {}


def setup(static_images: Optional[bool] = None) -> None:
    """Make `fig.show()` interactive plus a PNG copy (`plotly.io.renderers.default` says which)."""
    pio.renderers[RENDERER] = StaticPng()
    if static_images is None:
        static_images = os.environ.get("SPECVIZ_STATIC_IMAGES") != "0"
    pio.renderers.default = f"plotly_mimetype+{RENDERER}" if static_images else "plotly_mimetype"


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
