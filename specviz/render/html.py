"""HTML plumbing shared by the renderers: the `Rendered` result, escaping, number formats, CSS.

Every piece of model text goes through `text()` or `attr()` before it reaches HTML: a model that
emits `<script>` or `<img onerror=...>` shows those characters, it never runs them.
"""

from __future__ import annotations

import html
from typing import Optional

from specviz.render.style import CSS

# Whitespace made visible in chips; the real text stays in the chip's data-text attribute.
_VISIBLE = {" ": "·", "\n": "↵", "\t": "→", "\r": "␍"}


class Rendered:
    """A rendered view: `.html` for a web page (style sheet given once by the page), and
    `_repr_html_()` for notebooks (style sheet included), after CircuitsVis."""

    def __init__(self, html_body: str):
        self.html = html_body

    def _repr_html_(self) -> str:
        return f"<style>{CSS}</style><div class='sv-root'>{self.html}</div>"

    def __str__(self) -> str:
        return self.html

    def __repr__(self) -> str:
        return f"Rendered({len(self.html)} chars of HTML)"


def text(value) -> str:
    """Model or user text escaped for element content."""
    return html.escape(str(value), quote=False)


def attr(value) -> str:
    """Any value escaped for a double-quoted attribute (quotes included)."""
    return html.escape(str(value), quote=True)


def visible(token_text: str) -> str:
    """Token text with whitespace shown (space '·', newline '↵', tab '→'); empty text as '∅'."""
    if token_text == "":
        return "∅"
    return "".join(_VISIBLE.get(ch, ch) for ch in token_text)


def quoted(token_text: str) -> str:
    """A token for prose and tooltips: visible whitespace inside quotes (not yet escaped)."""
    return f"'{visible(token_text)}'"


def num(value: Optional[float], digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def ms(seconds: Optional[float]) -> str:
    return "—" if seconds is None else f"{seconds * 1000:.0f} ms"
