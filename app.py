"""specviz app: speculative decoding, step by step (Gradio 6; runs locally or as a HF Space).

The Space's entry point: `python app.py` (or `python -m specviz app`). The page is built from
one module per view in webapp/ (step view, race, serving, charts, presets, how it works; see
webapp/__init__.py); this file starts it. Gradio wiring only: each model handler is a small
generator over the engine's events and yields what `specviz.render` draws from them.

Presets replay runs recorded on the real pair (specviz.bench.recordings) at once, outside the engine's
queue; Run, Race and Serve compute live, one at a time, and a live run that would wait too long
is told the engine is busy. See docs/app.md.

Environment: SPECVIZ_PAIR (default pair), SPECVIZ_ALLOW_CUSTOM=1 (let visitors load
`target=...,draft=...` pairs), SPECVIZ_MAX_TOKENS (cap, default 256), SPECVIZ_MAX_WAITING (live
runs that may wait for the engine, default 3), SPECVIZ_MAX_LIVE_BATCH (users in a live batch,
default 8), PORT / GRADIO_SERVER_PORT.
"""

from __future__ import annotations

import threading

# the app's API for tests and scripts: the page, its components (ui), the views' modules and functions
from specviz.errors import env_number
from webapp import common, presets as preset_view, serving, traces  # noqa: F401
from webapp.common import (  # noqa: F401
    _PAIRS, ALLOW_CUSTOM, DEFAULT_PAIR, ENGINE_LINE, RECORD_TOPK, check_request, get_pair, live_waiting, ui)
from webapp.common import options as _options  # noqa: F401
from webapp.howto import HOW_IT_WORKS  # noqa: F401
from webapp.page import LAUNCH_KWARGS, demo, launch, preload  # noqa: F401
from webapp.presets import preset_views, show_preset  # noqa: F401
from webapp.race import ar_options, race_view  # noqa: F401
from webapp.settings import PRESET_LABELS, PRESETS  # noqa: F401
from webapp.traces import MAX_TRACE_BYTES  # noqa: F401

examples = ui.examples

if __name__ == "__main__":
    port = env_number("PORT", None, low=1, high=65535) or env_number("GRADIO_SERVER_PORT", 7860, low=1, high=65535)
    threading.Thread(target=preload, args=(DEFAULT_PAIR,), daemon=True).start()
    launch(server_port=port)
