"""Tree view hook: the draft tree of one step, for tree drafting methods.

A `tree_built` event carries `nodes`: dicts with id, parent (-1 or None for a child of the last
committed token), depth, token_text (or token) and q. `tree_nodes(step)` finds them among the
step's events and `tree_html(nodes, node_status)` draws the tree as nested lists of escaped
chips, coloured by the decisions that name a node (token_accepted / token_rejected `node`).
"""

from __future__ import annotations

from typing import Optional

from specviz.render import steps as st
from specviz.render.html import Rendered, attr, num, text, visible

ROOTS = (None, -1)


def tree_nodes(step: Optional[st.StepView]) -> list:
    """The nodes of the step's tree_built event, or [] (chain methods draw no tree)."""
    if step is None:
        return []
    for data in step.extras:
        if data.get("kind") == "tree_built":
            return list(data.get("nodes") or [])
    return []


def _token(node: dict) -> str:
    return str(node.get("token_text", node.get("token", "")))


def tree_html(nodes: list, node_status: Optional[dict] = None) -> Rendered:
    """Nodes as nested lists, children under their parent, each a chip with its q; a node the
    target decided on takes that decision's colour, the others stay draft proposals."""
    if not nodes:
        return Rendered('<div class="sv-muted">No draft tree in this step: chain methods draft one '
                        'line of tokens. Tree methods show the tree they drafted here.</div>')
    status = node_status or {}
    children = {}
    for node in nodes:
        parent = node.get("parent")
        children.setdefault(None if parent in ROOTS else parent, []).append(node)

    def branch(parent) -> str:
        items = "".join(
            f'<li><span class="sv-chip sv-{status.get(n.get("id"), "draft")}" data-node="{attr(n.get("id"))}" '
            f'data-text="{attr(_token(n))}">{text(visible(_token(n)))}</span> '
            f'<small class="sv-muted">q {num(n.get("q"), 2)}</small>{branch(n.get("id"))}</li>'
            for n in children.get(parent, []))
        return f"<ul>{items}</ul>" if items else ""

    return Rendered(f'<div class="sv-tree">{branch(None)}</div>')
