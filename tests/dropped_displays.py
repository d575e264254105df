"""Find what a notebook cell builds and Jupyter silently drops.

A cell shows only the value of its last top-level expression statement. A table, figure, panel,
widget or DataFrame built by any other expression statement (earlier in the cell, or inside an
`if`, `for`, `with` or `def`) is computed and thrown away: a heading with nothing under it.

Two checks, used by tests/test_notebooks.py:

- `KERNEL_HOOK`, run in the notebook's kernel before its cells (test_notebook_runs_in_smoke_mode):
  an IPython AST transformer that passes the value of every such statement through a recorder,
  which returns it unchanged and notes (execution count, line, type) when the value is one that
  Jupyter would have displayed, unless a method returned its own receiver (a fluent mutation:
  `fig.update_layout(...)` returns `fig`). `KERNEL_REPORT`, run last, prints the notes after
  `MARKER`, with whether the hook was still installed (IPython drops a transformer that raises).
- `static_drops(source)`: the same statements found by reading the source, for branches a smoke
  run never takes (`if pair.device.type == "cuda":`): a bare call of a renderer module's function.
"""

from __future__ import annotations

import ast

MARKER = "specviz-dropped-displays:"

# what IPython's display formatters would show beyond plain text (checked on the type, as IPython's
# own get_real_method does, so that an object whose __getattr__ answers anything is not counted)
KERNEL_HOOK = r'''
import ast as _ast
import sys as _sys


class _SpecvizDrops:
    """Records the displayable values of expression statements Jupyter does not show."""

    REPRS = ("_repr_html_", "_repr_mimebundle_", "_repr_png_", "_repr_jpeg_", "_repr_svg_", "_repr_markdown_",
             "_repr_latex_", "_repr_json_", "_repr_javascript_", "_ipython_display_")
    KINDS = (("plotly.basedatatypes", "BaseFigure"), ("pandas", "DataFrame"), ("ipywidgets", "Widget"))

    def __init__(self):
        self.found = []

    def displayable(self, value) -> bool:
        if value is None:
            return False
        if any(callable(getattr(type(value), name, None)) for name in self.REPRS):
            return True
        return any(isinstance(value, getattr(_sys.modules[module], name))
                   for module, name in self.KINDS if module in _sys.modules and hasattr(_sys.modules[module], name))

    def __call__(self, value, count, line):
        if self.displayable(value):
            kind = type(value).__module__ + "." + type(value).__qualname__
            self.found.append({"count": count, "line": line, "type": kind})
        return value

    def method(self, receiver, name, count, line):
        """`receiver.name(...)` as a statement: its value is recorded unless it is the receiver
        itself, a fluent mutation (`fig.update_layout(...)` returns `fig`, shown or not elsewhere)."""
        bound = getattr(receiver, name)

        def call(*args, **kwargs):
            value = bound(*args, **kwargs)
            return value if value is receiver else self(value, count, line)

        return call


class _SpecvizDropWatch(_ast.NodeTransformer):
    """Wraps every expression statement but the cell's last top-level one in the recorder."""

    SKIP = (_ast.Constant, _ast.Await, _ast.Yield, _ast.YieldFrom)  # docstrings; keep (a)waits as they are

    def visit_Module(self, node):
        last = node.body[-1] if node.body and isinstance(node.body[-1], _ast.Expr) else None
        self.count = get_ipython().execution_count  # IPython 9 counts the cell before transforming it, 8 after
        node.body = [statement if statement is last else self.visit(statement) for statement in node.body]
        return node

    def visit_Expr(self, node):
        value = node.value
        if isinstance(value, self.SKIP):
            return node
        self.generic_visit(node)
        where = [_ast.Constant(self.count), _ast.Constant(node.lineno)]
        drops = _ast.Name(id="__specviz_drops__", ctx=_ast.Load())
        func = getattr(value, "func", None)
        if isinstance(func, _ast.Attribute) and not func.attr.startswith("__"):  # obj.m(...): see method()
            method = _ast.Call(func=_ast.Attribute(value=drops, attr="method", ctx=_ast.Load()),
                               args=[func.value, _ast.Constant(func.attr), *where], keywords=[])
            call = _ast.Call(func=method, args=value.args, keywords=value.keywords)
        else:
            call = _ast.Call(func=drops, args=[value, *where], keywords=[])
        wrapped = _ast.copy_location(_ast.Expr(value=_ast.copy_location(call, value)), node)
        return _ast.fix_missing_locations(wrapped)


__specviz_drops__ = _SpecvizDrops()
get_ipython().ast_transformers.append(_SpecvizDropWatch())
del _SpecvizDrops, _SpecvizDropWatch
'''

# `count`: the watcher's count for this very cell, to map counts to cells (executed last, it is
# the report cell's own execution count, or that plus one: IPython versions differ)
KERNEL_REPORT = r'''
import json as _json
_watch = [t for t in get_ipython().ast_transformers if type(t).__name__ == "_SpecvizDropWatch"]
print("''' + MARKER + r'''" + _json.dumps({"found": __specviz_drops__.found, "watching": bool(_watch),
                                           "count": _watch[0].count if _watch else None}))
'''

# functions of the renderer modules that draw nothing (all others return something to show)
QUIET = {"setup", "check", "browser_path", "static_images_off", "figure_png", "summarize"}
RENDER_NAMES = {"Markdown", "HTML", "Image", "SVG"}  # IPython.display's objects


def renderer_modules(tree: ast.AST) -> set:
    """Names the source binds to specviz.render modules (`from specviz.render import lessons`)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "specviz.render":
            names.update(alias.asname or alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.asname for alias in node.names
                         if alias.name.startswith("specviz.render.") and alias.asname)
    return names


def static_drops(source: str, modules: set) -> list:
    """(line, call) of each expression statement but the last top-level one that calls a renderer
    (`lessons.table(...)`, `charts.speedup_figure(...)`, `Markdown(...)`): its result is dropped.
    `modules`: the renderer module names bound anywhere in the notebook."""
    tree = ast.parse(source)
    last = tree.body[-1] if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and node is not last and isinstance(node.value, ast.Call):
            func = node.value.func
            renderer = (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
                        and func.value.id in modules and func.attr not in QUIET)
            if renderer or (isinstance(func, ast.Name) and func.id in RENDER_NAMES):
                found.append((node.lineno, ast.unparse(func)))
    return sorted(found)
