"""Seam rules, checked by parsing imports (no module is imported here):

- renderers (specviz/render/*.py), app.py and its views (webapp/*.py) import neither torch nor
  transformers, and the renderers import nothing of the engine's internals (only events, metrics, theory, trace, and
  files, which writes a file whole and imports only the standard library);
- every other specviz module imports no UI library (gradio, plotly, ipywidgets, anywidget), but
  the app's outside clients (bench.classroom), which import no model library and no engine.
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MODEL_LIBS = {"torch", "transformers"}
UI_LIBS = {"gradio", "gradio_client", "plotly", "ipywidgets", "anywidget"}
RENDER_MAY_USE = ("specviz.events", "specviz.metrics", "specviz.theory", "specviz.trace", "specviz.errors",
                  "specviz.files", "specviz.render")


def imported_modules(source: str) -> set:
    """Every module named by an import statement or an importlib.import_module("...") call."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None))
              in ("import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant)):
            names.add(str(node.args[0].value))
    return names


def top_levels(names: set) -> set:
    return {name.split(".")[0] for name in names}


def render_files() -> list:
    return sorted((ROOT / "specviz" / "render").glob("*.py"))


# outside clients of the app (they drive it over HTTP as visitors do, from processes of their
# own): held to the renderers' rule instead, no model library and no engine internals
APP_CLIENTS = (ROOT / "specviz" / "bench" / "classroom.py",)
CLIENT_MAY_USE = ("specviz.files", "specviz.errors")


def core_files() -> list:
    render = ROOT / "specviz" / "render"
    return sorted(p for p in (ROOT / "specviz").rglob("*.py") if render not in p.parents and p not in APP_CLIENTS)


@pytest.mark.parametrize("path", APP_CLIENTS, ids=lambda p: p.name)
def test_app_clients_load_no_model_and_use_no_engine(path):
    imported = imported_modules(path.read_text(encoding="utf-8"))
    assert not top_levels(imported) & MODEL_LIBS, f"{path.name} imports a model library"
    ours = {name for name in imported if name.startswith("specviz.") or name == "specviz"}
    assert ours <= set(CLIENT_MAY_USE) | {"specviz"}, f"{path.name} imports {sorted(ours)}"


def test_the_parser_catches_every_import_form():
    source = ("import torch.nn as nn\nfrom transformers import AutoModel\nimport importlib\n"
              "importlib.import_module('plotly.graph_objects')\nfrom . import sibling\n")
    assert {"torch", "transformers", "plotly"} <= top_levels(imported_modules(source))
    assert "sibling" not in imported_modules(source)


def app_files() -> list:
    return [ROOT / "app.py"] + sorted((ROOT / "webapp").glob("*.py"))


def test_there_are_files_to_check():
    assert len(render_files()) >= 6 and len(app_files()) >= 8 and len(core_files()) >= 8


@pytest.mark.parametrize("path", render_files() + app_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_renderers_and_app_import_no_model_library(path):
    found = top_levels(imported_modules(path.read_text(encoding="utf-8"))) & MODEL_LIBS
    assert not found, f"{path.name} imports {sorted(found)}"


@pytest.mark.parametrize("path", render_files(), ids=lambda p: p.name)
def test_renderers_use_no_engine_internals(path):
    ours = {name for name in imported_modules(path.read_text(encoding="utf-8")) if name.startswith("specviz.")}
    bad = {name for name in ours if not any(name == ok or name.startswith(ok + ".") for ok in RENDER_MAY_USE)}
    assert not bad, f"{path.name} imports {sorted(bad)}"


@pytest.mark.parametrize("path", core_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_core_modules_import_no_ui_library(path):
    found = top_levels(imported_modules(path.read_text(encoding="utf-8"))) & UI_LIBS
    assert not found, f"{path.relative_to(ROOT)} imports {sorted(found)}"


# ---------------------------------------------------------------------------------------------
# no import cycles: loading heads needs no training code, a benchmark's report no other benchmark

def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(sources: dict) -> dict:
    """{module: the modules of `sources` it imports}, imports inside functions included (a lazy
    import still ties the two modules together). `from package import submodule` names the
    submodule, not the package: a package's __init__ that lists its submodules is no cycle."""
    graph = {}
    for name, source in sources.items():
        edges = set()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                subs = {f"{node.module}.{a.name}" for a in node.names} & set(sources)
                edges |= subs | ({node.module} if len(subs) < len(node.names) else set())
            elif isinstance(node, ast.Import):
                edges |= {a.name for a in node.names}
        graph[name] = (edges & set(sources)) - {name}
    return graph


def cycles(graph: dict) -> list:
    """The import cycles of `graph`: its strongly connected components of more than one module."""
    index, low, stack, found = {}, {}, [], []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = stack[stack.index(v):]
            del stack[stack.index(v):]
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_cycle_finder_finds_lazy_cycles_and_not_packages():
    sources = {"a": "import b\n", "b": "def f():\n    from c import x\n", "c": "from a import y\n",
               "p": "from p import m, n\n", "p.m": "from p import n\n", "p.n": "x = 1\n", "d": "import a\n"}
    assert cycles(import_graph(sources)) == [["a", "b", "c"]]


def test_specviz_has_no_import_cycle():
    sources = {module_name(p): p.read_text(encoding="utf-8") for p in (ROOT / "specviz").rglob("*.py")}
    assert len(sources) >= 30
    assert cycles(import_graph(sources)) == []
