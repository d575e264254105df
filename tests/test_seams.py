"""Seam rules, checked by parsing imports (no module is imported here):

- the layers: each folder of specviz/ imports only the layers below it (LAYERS, lowest first),
  and only the entry points and the schema sit at specviz/'s top;
- renderers (specviz/render/*.py), the static site's builder (specviz/site/*.py), app.py and its
  views (webapp/*.py) import neither torch nor transformers, and the renderers import nothing of the engine's internals (only events, the
  analysis layer, errors and files, which writes a file whole and imports only the standard library);
- every other specviz module imports no UI library (gradio, plotly, ipywidgets, anywidget), but
  the app's outside clients (bench.classroom), which import no model library and no engine;
- no import cycle, lazy imports included;
- nothing in the project imports a path 0.1.0 had and 0.2.0 moved (specviz.deprecated keeps them
  for users' code until 0.3.0).
"""

import ast
import functools
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MODEL_LIBS = {"torch", "transformers"}
UI_LIBS = {"gradio", "gradio_client", "plotly", "ipywidgets", "anywidget"}
# specviz.deprecated: render/__init__'s 0.1.0 names until 0.3.0 (it imports nothing until a name is used)
RENDER_MAY_USE = ("specviz.events", "specviz.analysis", "specviz.errors", "specviz.files", "specviz.render",
                  "specviz.deprecated")


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


def site_files() -> list:
    """The static site's builder: a consumer of the renderers like the app (their Plotly JSON comes
    from specviz.render.page), held to the renderers' rule of no model library too."""
    return sorted((ROOT / "specviz" / "site").glob("*.py"))


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


@pytest.mark.parametrize("path", render_files() + app_files() + site_files(), ids=lambda p: str(p.relative_to(ROOT)))
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


# ---------------------------------------------------------------------------------------------
# the layers: the tree is the architecture (docs/architecture.md)

# specviz/'s own top: the entry points (__init__, __main__, cli, argparsing) and what every layer
# shares (the event schema, the run's config, the method registry, errors, files, the prompts, and
# the table of 0.1.0's moved paths, which the packages' __init__ files read until 0.3.0)
TOP = {"__init__", "__main__", "cli", "argparsing", "events", "config", "methods", "errors", "files", "prompts",
       "deprecated"}
ENTRY_POINTS = {"specviz", "specviz.__main__", "specviz.cli"}
SCHEMA = {"specviz.events", "specviz.config", "specviz.methods", "specviz.errors", "specviz.files", "specviz.prompts",
          "specviz.argparsing", "specviz.deprecated"}
# each layer with the layers it may import (besides itself and the schema), lowest first
LAYERS = {
    "analysis": (),
    "render": ("analysis",),
    "verifiers": ("analysis",),
    "runtime": ("analysis",),
    "drafters": ("analysis", "verifiers", "runtime"),
    "engine": ("analysis", "verifiers", "runtime", "drafters"),
    "training": ("analysis", "verifiers", "runtime", "drafters", "engine", "render"),
    "teaching": ("analysis", "verifiers", "runtime", "drafters", "engine", "render"),
    "bench": ("analysis", "verifiers", "runtime", "drafters", "engine", "render", "training"),
    # the static site: pages drawn by the renderers from the bench's recordings (runtime: the
    # machine's name for its measurement report, nothing that loads a model)
    "site": ("analysis", "render", "bench", "runtime"),
}


def layer_of(module: str) -> str:
    """"schema", "entry" or the folder a specviz module sits in."""
    if module in SCHEMA:
        return "schema"
    if module in ENTRY_POINTS:
        return "entry"
    return module.split(".")[1]


def specviz_modules() -> dict:
    return {module_name(p): p for p in (ROOT / "specviz").rglob("*.py")}


def test_only_entry_points_and_the_schema_sit_at_the_top():
    top = {p.stem for p in (ROOT / "specviz").glob("*.py")}
    assert top == TOP, f"move {sorted(top - TOP)} into a layer folder" if top - TOP else sorted(TOP - top)
    folders = {p.name for p in (ROOT / "specviz").iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders == set(LAYERS), sorted(folders ^ set(LAYERS))


def layer_violations(module: str, source: str) -> list:
    """The specviz modules `source` (the text of `module`) imports from a layer it may not use."""
    layer = layer_of(module)
    allowed = {"schema", layer} | set(LAYERS.get(layer, ()))
    known = specviz_modules()
    bad = []
    for name in sorted(imported_modules(source)):
        if not name.startswith("specviz.") or name == "specviz.__version__":
            continue
        owner = name if name in known else name.rsplit(".", 1)[0]  # `from package import name`
        if owner in known and layer_of(owner) not in allowed:
            bad.append(name)
    return bad


def test_the_layer_rule_catches_an_upward_import_even_a_lazy_one():
    lazy = "import torch\n\ndef f():\n    from specviz.engine.batch import generate_batch\n"
    assert layer_violations("specviz.runtime.lm", lazy) == ["specviz.engine.batch", "specviz.engine.batch.generate_batch"]
    assert layer_violations("specviz.engine.batch", "from specviz.runtime import lm\n") == []
    assert layer_violations("specviz.render.race", "from specviz.verifiers import sampling\n") == [
        "specviz.verifiers", "specviz.verifiers.sampling"]
    assert layer_violations("specviz.config", "from specviz.engine import adaptive\n") == [
        "specviz.engine", "specviz.engine.adaptive"]


@pytest.mark.parametrize("module", sorted(m for m in specviz_modules() if layer_of(m) != "entry"))
def test_each_layer_imports_only_the_layers_below_it(module):
    bad = layer_violations(module, specviz_modules()[module].read_text(encoding="utf-8"))
    layer = layer_of(module)
    assert not bad, f"{module} ({layer}) imports {bad}: a {layer} module may use {sorted(LAYERS.get(layer, ()))}"


# ---------------------------------------------------------------------------------------------
# 0.1.0's paths (specviz.deprecated) are for users' code until 0.3.0; the project uses the new ones

@functools.lru_cache
def deprecated_paths() -> frozenset:
    """Every old path specviz.deprecated serves: its old modules, and each package's old names."""
    tables = {}
    for node in ast.parse((ROOT / "specviz" / "deprecated.py").read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and node.targets[0].id in ("MODULES", "PACKAGES"):
            tables[node.targets[0].id] = ast.literal_eval(node.value)
    names = {f"{package}.{entry.split('=')[0]}" for package, table in tables["PACKAGES"].items()
             for entries in table.values() for entry in entries.split()}
    return frozenset(tables["MODULES"]) | names


@functools.lru_cache
def project_sources() -> dict:
    """{file: its Python source}: the package, the app, the tests (but the one that tries the old
    paths) and the notebooks' code cells (IPython's %magic and !shell lines left out)."""
    paths = sorted((ROOT / "specviz").rglob("*.py")) + app_files() + sorted((ROOT / "tests").rglob("*.py"))
    out = {p: p.read_text(encoding="utf-8") for p in paths if p.name != "test_api.py"}
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = json.loads(nb.read_text(encoding="utf-8"))["cells"]
        code = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
        out[nb] = "\n".join(line for cell in code for line in cell.splitlines() if not line.lstrip().startswith(("%", "!")))
    return out


def test_the_old_paths_are_known_and_the_parser_sees_them():
    old = deprecated_paths()
    assert {"specviz.metrics", "specviz.verifiers.RejectionVerifier", "specviz.engine.generate"} <= old
    assert "specviz.verifiers.RejectionVerifier" in imported_modules("from specviz.verifiers import RejectionVerifier\n")


@pytest.mark.parametrize("path", sorted(project_sources()), ids=lambda p: str(p.relative_to(ROOT)))
def test_nothing_in_the_project_imports_a_deprecated_path(path):
    imported = imported_modules(project_sources()[path])
    old = {name for name in imported
           if any(name == path_ or name.startswith(path_ + ".") for path_ in deprecated_paths())}
    assert not old, f"{path.relative_to(ROOT)} imports {sorted(old)}: use the new paths (CHANGELOG.md)"
