"""Tree view: the draft tree of one step and the tree attention mask of its target pass.

A `tree_built` event carries the step's `nodes` (id, parent (-1: a child of the root, the last
committed token), depth, token_text, q, cum_q); the decisions name the node they judged
(`node`), and the residual or bonus token names the node it was drawn after. The view model
(`specviz.render.steps`, `StepView.nodes`) joins them; this module draws:

    tree_view(step, greedy)   the tree, left to right as text reads: the root, then one column
                              per depth; each node a box with its escaped token and q (draft, at
                              its parent) and p (target, at its parent); the accepted path in
                              green with thick edges, rejected nodes red and struck, nodes the
                              walk never judged grey and dashed, and the residual or bonus token
                              after the path's end. Small numbers give the order of the walk's
                              decisions; hovering a node tells its numbers and its decision.
    mask_figure(step)         the attention mask among the nodes as a heatmap: row i sees node j
                              iff j is an ancestor of i or i itself (every row also sees the
                              whole committed prefix), built from the parent links.
    tree_html(nodes, status)  the tree from raw tree_built nodes and {node id: decision}.
    tree_nodes(step)          the tree_built nodes of a step ([] for chain methods).

Every token text is escaped (SVG <text> content and <title> tooltips are markup too).
"""

from __future__ import annotations

from typing import Optional

import plotly.graph_objects as go

from specviz.render import steps as st
from specviz.render.chips import decision, tooltip
from specviz.render.html import Rendered, attr, num, quoted, text, visible

ROOTS = (None, -1)
EMPTY = ('<div class="sv-muted">No draft tree in this step: chain methods draft one line of tokens. '
         'Tree methods (method = tree) show the tree they drafted here.</div>')

ROW, BOX_H, CHAR_W, SUB_W, PAD, GAP = 56, 46, 11.0, 7.3, 12, 46
STYLE = {  # fill, stroke, text colour, dashed
    "root": ("#0f172a", "#0f172a", "#f8fafc", False),
    "accepted": ("#bbf7d0", "#16a34a", "#052e16", False),
    "rejected": ("#fecaca", "#dc2626", "#450a0a", False),
    "wasted": ("#f1f5f9", "#9ca3af", "#64748b", True),
    "draft": ("#ede9fe", "#7c3aed", "#3b0764", True),
    "residual": ("#fed7aa", "#ea580c", "#431407", False),
    "bonus": ("#bfdbfe", "#2563eb", "#172554", False),
    "target": ("#f1f5f9", "#94a3b8", "#0f172a", False),
}
LEGEND = (("accepted", "accepted path"), ("rejected", "rejected (judged)"), ("wasted", "never judged"),
          ("residual", "residual / resample"), ("bonus", "bonus"))


def tree_nodes(step: Optional[st.StepView]) -> list:
    """The nodes of the step's tree_built event, or [] (chain methods draw no tree)."""
    if step is None:
        return []
    if step.tree is not None:
        return list(step.tree.get("nodes") or [])
    for data in step.extras:
        if data.get("kind") == "tree_built":
            return list(data.get("nodes") or [])
    return []


def node_views(nodes: list, node_status: Optional[dict] = None) -> list:
    """NodeViews from raw tree_built nodes (dicts), coloured by {node id: status}."""
    status = node_status or {}
    out = []
    for i, node in enumerate(nodes):
        parent = node.get("parent")
        out.append(st.NodeView(id=node.get("id", i), parent=-1 if parent in ROOTS else parent,
                               depth=node.get("depth") or 0, position=node.get("position"),
                               token_id=node.get("token_id"), text=str(node.get("token_text", node.get("token", ""))),
                               q=node.get("q"), cum_q=node.get("cum_q"), status=status.get(node.get("id", i), "draft"),
                               source_note=st.source_note(node["source"], []) if isinstance(node.get("source"), dict)
                               else None))
    return out


def tree_html(nodes: list, node_status: Optional[dict] = None) -> Rendered:
    """The tree of raw tree_built `nodes`, each node coloured by `node_status` (id -> accepted /
    rejected; others stay draft proposals)."""
    views = node_views(nodes, node_status)
    if not views:
        return Rendered(EMPTY)
    path = _path_from_status(views)
    return Rendered(_legend() + _svg(views, path, None, None, None, False))


def tree_view(step: Optional[st.StepView], greedy: bool = False, total_steps: Optional[int] = None) -> Rendered:
    """The step's draft tree with the walk's decisions, the accepted path and the closing token."""
    if step is None or not step.nodes:
        return Rendered(EMPTY)
    path = [n for n in step.path if 0 <= n < len(step.nodes)]
    shape = (step.tree or {}).get("shape", "tree")
    head = (f'<div class="sv-treehead"><b>Draft tree of step {step.step + 1}'
            f'{f" of {total_steps}" if total_steps else ""}</b> · {len(step.nodes)} nodes · {text(shape)} · '
            f'accepted path: {text(" → ".join(quoted(step.nodes[n].text) for n in path) or "none")}'
            + (f' · then {text(step.next.status)} {text(quoted(step.next.text))}' if step.next is not None else "")
            + '</div>')
    return Rendered(head + _legend() + _svg(step.nodes, path, step.next, step.root_text, step.step, greedy))


def _path_from_status(nodes: list) -> list:
    """Without step_finished: the accepted nodes, root to leaf, following parent links."""
    accepted = {n.id: n for n in nodes if n.status == "accepted"}
    path, parent = [], -1
    while True:
        child = next((n for n in accepted.values() if n.parent == parent), None)
        if child is None:
            return path
        path.append(child.id)
        parent = child.id


def _legend() -> str:
    items = "".join(f'<span class="sv-item"><span class="sv-chip sv-{status}">{text(label)}</span></span>'
                    for status, label in LEGEND)
    return f'<div class="sv-legend sv-treelegend">{items}<span class="sv-muted">n = order of the walk\'s ' \
           f'decisions; hover a node for p, q and why</span></div>'


def _layout(nodes: list, closing: Optional[st.TokenView]) -> tuple:
    """(rows, depth) per key: leaves get consecutive rows in depth-first order, a parent sits at
    the middle of its children. Keys: node ids, 'root', and 'next' for the closing token."""
    children = {}
    for node in nodes:
        children.setdefault(node.parent, []).append(node.id)
    if closing is not None:
        children.setdefault(-1 if closing.node is None else closing.node, []).append("next")
    depth = {n.id: n.depth for n in nodes}
    rows, counter = {}, [0]

    def place(key) -> float:
        kids = children.get(-1 if key == "root" else key, []) if key != "next" else []
        if not kids:
            rows[key] = float(counter[0])
            counter[0] += 1
        else:
            ys = [place(k) for k in kids]
            rows[key] = (ys[0] + ys[-1]) / 2
        return rows[key]

    place("root")
    depth["root"] = 0
    if closing is not None:
        parent = -1 if closing.node is None else closing.node
        depth["next"] = (depth.get(parent, 0) if parent != -1 else 0) + 1
    return rows, depth, max(1, counter[0])


def _label(token_text: str, limit: int = 12) -> str:
    shown = visible(token_text)
    return shown if len(shown) <= limit else shown[:limit - 1] + "…"


def _node_tip(node: st.NodeView, greedy: bool) -> str:
    lines = [f"{quoted(node.text)} · tree node {node.id} · depth {node.depth}"
             + (f" · position {node.position}" if node.position is not None else ""),
             f"q = {num(node.q)} (draft, at its parent) · cumulative q = {num(node.cum_q)}",
             f"p = {num(node.p)} (target, at its parent)"]
    if node.source_note:
        lines.append(node.source_note)
    if node.decision is not None:
        token = node.decision
        lines.append(f"judged {node.order + 1}{_nth(node.order + 1)} in the walk")
        if token.after_rejection and token.u is not None:
            lines.append(f"after a sibling's rejection: p = {num(token.p)}, q = {num(token.q)} are the residual "
                         "norm(max(p − q, 0)) and q without the rejected token")
        lines.append(decision(token, greedy))
    elif node.status == "wasted":
        lines.append("never judged: the walk did not reach its parent, or a sibling was accepted first")
    elif node.status in ("accepted", "rejected"):
        lines.append(node.status)
    else:
        lines.append("draft proposal: waiting for the target")
    return "\n".join(lines)


def _nth(n: int) -> str:
    return "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")


def _box(x, y, w, status, label, tip, extra_attrs="", strike=False, order=None, thick=False, sub=None) -> str:
    """One node: a rounded box with the token on top and a small line of numbers under it."""
    fill, stroke, colour, dashed = STYLE.get(status, STYLE["draft"])
    dash = ' stroke-dasharray="5 3"' if dashed else ""
    deco = ' text-decoration="line-through"' if strike else ""
    token_y = y + (0 if not sub else -4) + 6
    parts = [f'<g class="sv-node sv-n-{attr(status)}"{extra_attrs}><title>{text(tip)}</title>',
             f'<rect x="{x:.1f}" y="{y - BOX_H / 2:.1f}" width="{w:.1f}" height="{BOX_H}" rx="7" fill="{fill}" '
             f'stroke="{stroke}" stroke-width="{4 if thick else 2}"{dash}/>',
             f'<text x="{x + w / 2:.1f}" y="{token_y:.1f}" text-anchor="middle" font-size="18" fill="{colour}"'
             f'{deco} class="sv-svgtok">{text(label)}</text>']
    if sub:
        parts.append(f'<text x="{x + w / 2:.1f}" y="{y + 17:.1f}" text-anchor="middle" font-size="12" '
                     f'fill="{colour}">{text(sub)}</text>')
    if order is not None:
        parts.append(f'<circle cx="{x:.1f}" cy="{y - BOX_H / 2:.1f}" r="9" fill="#0f172a"/>'
                     f'<text x="{x:.1f}" y="{y - BOX_H / 2 + 4:.1f}" text-anchor="middle" font-size="11" '
                     f'fill="#f8fafc">{text(order)}</text>')
    parts.append("</g>")
    return "".join(parts)


def _numbers(q, p) -> str:
    return f"q {num(q, 2)}" + (f" · p {num(p, 2)}" if p is not None else "")


def _svg(nodes: list, path: list, closing: Optional[st.TokenView], root_text: Optional[str],
         step_no: Optional[int], greedy: bool) -> str:
    by_id = {n.id: n for n in nodes}
    rows, depth, n_rows = _layout(nodes, closing)
    labels = [_label(n.text) for n in nodes] + ([_label(closing.text)] if closing is not None else [])
    subs = [_numbers(n.q, n.p) for n in nodes]
    box_w = max(CHAR_W * max((len(s) for s in labels), default=1), SUB_W * max((len(s) for s in subs), default=1),
                60.0) + 2 * PAD
    root_label = "root" if root_text is None else f"root {quoted(_label(root_text, 8))}"
    root_w = CHAR_W * len(root_label) + 2 * PAD
    col_w = box_w + GAP
    levels = max(depth.values())
    width = 16 + root_w + GAP + levels * col_w
    height = n_rows * ROW + 24

    def x_of(key) -> float:
        return 8 if key == "root" else 8 + root_w + GAP + (depth[key] - 1) * col_w

    def y_of(key) -> float:
        return 14 + ROW / 2 + rows[key] * ROW

    def right(key) -> float:
        return x_of(key) + (root_w if key == "root" else box_w)

    on_path = set(path)
    edges, boxes = [], []
    edge_keys = [(("root" if n.parent == -1 else n.parent), n.id) for n in nodes]
    if closing is not None:
        parent = "root" if closing.node in (None, -1) else closing.node
        if parent == "root" or parent in by_id:
            edge_keys.append((parent, "next"))
    for parent, child in edge_keys:
        if parent != "root" and parent not in by_id:
            continue
        x1, y1, x2, y2 = right(parent), y_of(parent), x_of(child), y_of(child)
        mid = (x1 + x2) / 2
        if child == "next":
            colour = STYLE[closing.status][1]
            style = f'stroke="{colour}" stroke-width="3" stroke-dasharray="6 4"'
        elif child in on_path:
            style = 'stroke="#16a34a" stroke-width="4"'
        elif by_id[child].status == "rejected":
            style = 'stroke="#dc2626" stroke-width="1.6"'
        else:
            style = 'stroke="#cbd5e1" stroke-width="1.6"'
        on = ' data-path="1"' if child in on_path else ""
        edges.append(f'<path class="sv-edge" data-from="{attr(parent)}" data-to="{attr(child)}"{on} '
                     f'd="M{x1:.1f},{y1:.1f} C{mid:.1f},{y1:.1f} {mid:.1f},{y2:.1f} {x2:.1f},{y2:.1f}" '
                     f'fill="none" {style}/>')
    root_tip = (f"root: the last committed token {quoted(root_text)}" if root_text is not None
                else "root: the last committed token") + "; its children are the first drafted position"
    boxes.append(_box(x_of("root"), y_of("root"), root_w, "root", root_label, root_tip, ' data-root="1"'))
    for node in nodes:
        status = "accepted" if node.id in on_path else node.status
        attrs = f' data-node="{attr(node.id)}" data-status="{attr(status)}"'
        if node.id in on_path:
            attrs += ' data-path="1"'
        if node.decision is not None and step_no is not None:
            attrs += f' data-step="{attr(step_no)}" data-index="{attr(node.depth - 1)}" tabindex="0"'
        boxes.append(_box(x_of(node.id), y_of(node.id), box_w, status, _label(node.text), _node_tip(node, greedy),
                          attrs, strike=status == "rejected", thick=node.id in on_path,
                          order=None if node.order is None else node.order + 1, sub=_numbers(node.q, node.p)))
    if closing is not None and "next" in depth:
        attrs = f' data-next="{attr(closing.status)}" data-status="{attr(closing.status)}"'
        if step_no is not None:
            attrs += f' data-step="{attr(step_no)}" data-index="{attr(closing.index)}" tabindex="0"'
        sub = (f"{closing.status} r {num(closing.residual_prob, 2)}" if closing.status == "residual"
               and closing.residual_prob is not None else f"{closing.status} p {num(closing.p, 2)}")
        boxes.append(_box(x_of("next"), y_of("next"), box_w, closing.status, _label(closing.text),
                          tooltip(closing, greedy), attrs, thick=True, sub=sub))
    return (f'<div class="sv-tree" data-nodes="{len(nodes)}"><svg xmlns="http://www.w3.org/2000/svg" '
            f'viewBox="0 0 {width:.0f} {height:.0f}" width="{width:.0f}" style="max-width:100%;height:auto" '
            f'font-family="ui-monospace, SFMono-Regular, Menlo, Consolas, monospace" role="img" '
            f'aria-label="draft tree">{"".join(edges)}{"".join(boxes)}</svg></div>')


# ---------------------------------------------------------------------------------------------
# tree attention mask

MASK_LEVELS = ("#ffffff", "#93c5fd", "#1d4ed8", "#86efac", "#15803d")  # none, ancestor, itself, on the path


def _discrete(colours) -> list:
    n = len(colours)
    out = []
    for i, colour in enumerate(colours):
        out += [[i / n, colour], [(i + 1) / n - (1e-6 if i < n - 1 else 0), colour]]
    return out


def ancestors(nodes: list, node_id: int) -> list:
    """Node ids from the root's child down to `node_id`, by parent links (NodeViews or dicts)."""
    parent_of = {_get(n, "id"): _get(n, "parent") for n in nodes}
    out, node = [], node_id
    while node not in ROOTS and node in parent_of:
        out.append(node)
        node = parent_of[node]
    return out[::-1]


def _get(node, name):
    return node.get(name) if isinstance(node, dict) else getattr(node, name)


def mask_matrix(nodes: list, path=()) -> list:
    """z[i][j]: 0 when row i cannot see node j; else 1 (an ancestor) or 2 (itself), plus 2 in the
    rows of the accepted `path` (3, 4) so they stand out. Nonzero iff j is i or an ancestor of i."""
    ids = [_get(n, "id") for n in nodes]
    on_path = set(path)
    out = []
    for node_id in ids:
        seen = set(ancestors(nodes, node_id))
        lift = 2 if node_id in on_path else 0
        out.append([2 + lift if j == node_id else 1 + lift if j in seen else 0 for j in ids])
    return out


def mask_figure(step: Optional[st.StepView]) -> go.Figure:
    """The tree attention mask of the step's target pass, among the draft nodes."""
    fig = go.Figure()
    if step is None or not step.nodes:
        fig.add_annotation(text="No tree attention mask: this step drafted no tree.", x=0.5, y=0.5, xref="paper",
                           yref="paper", showarrow=False, font=dict(size=15, color="#64748b"))
        fig.update_layout(height=200, xaxis_visible=False, yaxis_visible=False, plot_bgcolor="white")
        return fig
    nodes = step.nodes
    path = set(step.path)
    marks = {"accepted": "✔ ", "rejected": "✘ "}
    labels = [f"{marks.get('accepted' if n.id in path else n.status, '')}{n.id}: {text(_label(n.text, 8))}"
              for n in nodes]
    z = mask_matrix(nodes, path)
    words = {0: "cannot see", 1: "sees its ancestor", 2: "is", 3: "sees its ancestor", 4: "is"}
    hover = [[text(f"{quoted(a.text)} (node {a.id}, depth {a.depth}) {words[z[i][j]]} {quoted(b.text)} "
                   f"(node {b.id})") for j, b in enumerate(nodes)] for i, a in enumerate(nodes)]
    fig.add_heatmap(z=z, x=labels, y=labels, zmin=-0.5, zmax=4.5, colorscale=_discrete(MASK_LEVELS), showscale=False, xgap=1, ygap=1,
                    customdata=hover, hovertemplate="%{customdata}<extra></extra>", name="tree attention")
    rows_fed, columns = (list((step.tree or {}).get("mask_shape") or []) + [None, None])[:2]
    prefix = columns - len(nodes) if isinstance(columns, int) else None
    note = (f"every row also sees the {prefix} tokens before the tree (whole mask {rows_fed} × {columns})"
            if prefix is not None else "every row also sees the committed prefix")
    cell = 26 if len(nodes) <= 20 else 16 if len(nodes) <= 40 else 12
    size = len(nodes) * cell
    fig.update_layout(
        title=dict(text=f"Tree attention mask of step {step.step + 1}: row i sees node j iff j is i or an ancestor of i"
                        f"<br><span style='font-size:13px'>{text(note)}<br>blue: itself (dark) or an ancestor (light); "
                        "green: rows of the accepted path (✔); ✘ rejected</span>", x=0.01),
        height=size + 210, width=None, font=dict(size=13), plot_bgcolor="white",
        margin=dict(l=120, r=20, t=110, b=120))
    fig.update_xaxes(side="bottom", tickangle=-60, title_text="attends to (key)", type="category",
                     constrain="domain", scaleanchor="y")
    fig.update_yaxes(autorange="reversed", title_text="node (query row)", type="category", constrain="domain")
    return fig
