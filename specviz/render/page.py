"""Figures for a page without Python: Plotly's JSON, its shared template and its own bundle.

The static site (specviz.site) writes each renderer's figure for plotly.js in the page: the
template every figure carries is stored once, and the floats are cut to what a chart can show.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import plotly
import plotly.graph_objects as go


def figure_json(fig: go.Figure) -> dict:
    """A figure as Plotly JSON without the shared template (the page puts it back); a figure
    drawn with another template keeps its own."""
    data = json.loads(fig.to_json())
    if data.get("layout", {}).get("template") == shared_template():
        del data["layout"]["template"]
    return _rounded(data)


def _rounded(value):
    """Floats to 5 significant digits: what a figure can show (its hover texts are written already),
    in a third of the bytes."""
    if isinstance(value, float):
        return float(f"{value:.5g}")
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    return value


@functools.lru_cache(maxsize=1)
def shared_template() -> dict:
    """The default template every renderer's figure carries; read, never changed."""
    return json.loads(go.Figure().to_json())["layout"].get("template", {})


def plotly_bundle() -> str:
    """The installed plotly package's own plotly.js: the bundle the app's charts use."""
    return (Path(plotly.__file__).parent / "package_data" / "plotly.min.js").read_text(encoding="utf-8")
