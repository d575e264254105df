"""Tree view hook: the draft tree of one step, for tree drafting methods (a later issue).

A future `tree_built` event carries `nodes`: dicts with id, parent (None for a root), depth,
token (its text) and q. `tree_nodes(step)` finds them among the step's unknown events and
`tree_html(nodes)` draws the tree as nested lists of escaped chips; the app's Tree tab shows it.
"""

from __future__ import annotations

from typing import Optional

from specviz.render import steps as st
from specviz.render.html import Rendered, attr, num, text, visible


def tree_nodes(step: Optional[st.StepView]) -> list:
    """The nodes of the step's tree_built event, or [] (chain methods draw no tree)."""
    if step is None:
        return []
    for data in step.extras:
        if data.get("kind") == "tree_built":
            return list(data.get("nodes") or [])
    return []


def tree_html(nodes: list) -> Rendered:
    """Nodes as nested lists, children under their parent, each a draft chip with its q."""
    if not nodes:
        return Rendered('<div class="sv-muted">No draft tree in this step: chain methods draft one '
                        'line of tokens. Tree methods (a later version) will show their tree here.</div>')
    children = {}
    for node in nodes:
        children.setdefault(node.get("parent"), []).append(node)

    def branch(parent) -> str:
        items = "".join(
            f'<li><span class="sv-chip sv-draft" data-node="{attr(n.get("id"))}" data-text="{attr(n.get("token", ""))}">'
            f'{text(visible(str(n.get("token", ""))))}</span> <small class="sv-muted">q {num(n.get("q"), 2)}</small>'
            f'{branch(n.get("id"))}</li>' for n in children.get(parent, []))
        return f"<ul>{items}</ul>" if items else ""

    return Rendered(f'<div class="sv-tree">{branch(None)}</div>')
