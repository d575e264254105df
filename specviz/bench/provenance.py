"""Which code decided a recording: a short hash of the engine, the method's drafter and the k policy.

A recording shown in the app or the course claims to be what specviz does. Once the code that
makes its decisions changes, the recording shows what an earlier specviz did. So each recording
stores `code_version(...)` of the code that decided it, and the app and the tests compare it with
the code now: the app says when a recording was made by earlier code, and tests/test_presets.py
and tests/test_serving.py fail until it is recorded again.

The hash is of the code's meaning, not its text: each file is parsed and written back without its
comments, docstrings and layout (ast.unparse), so a comment or a reworded docstring leaves it
unchanged and a changed rule does not. No torch: the app reads it before any model loads.

The course's built pages carry such a stamp too (`artefact_version`), of the code that draws them,
and a test fails when a committed page's stamp is not the code's now:

- an executed notebook copy (docs/notebooks/*.html): the notebook's cells, the step every method
  shares (ENGINE), and the renderers, teaching and analysis modules its code imports, followed
  through their own imports inside those three folders (`notebook_files`). Left out on purpose:
  the drafters, runtime (loading, kernels, quantisation), bench and training, which would make
  every commit stale a dozen copies that take minutes each to rebuild; they change a copy's
  timings and texts as a re-run on another machine would, not what the copy says it shows. The
  preset recordings a copy replays carry their own `code_version`.
- the lecture deck (docs/slides/lecture.slides.html): the lecture notebook's cells, the renderers
  and teaching modules it imports (followed as above), the bench modules it imports itself (which
  read the numbers it shows) and the presets' manifest (`deck_files`).
- the screenshots and GIF (docs/screenshots): app.py, webapp/, the renderers they import (followed
  as above) and the presets' manifest (`app_files`).
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
from pathlib import Path
from typing import Iterable, Optional

from specviz import methods

PACKAGE = Path(__file__).resolve().parents[1]
REPO = PACKAGE.parent  # app.py, webapp/, notebooks/ and docs/ beside the package (a checkout)
PRESETS_MANIFEST = "specviz/data/presets/manifest.json"
# the step every method shares: one target pass, the rules, commit and crop, the events it writes
ENGINE = ("config.py", "engine/sequence.py", "engine/commit.py", "engine/record.py",
          "engine/setup.py", "verifiers/base.py", "verifiers/exact.py", "verifiers/sampling.py",
          "verifiers/draft_tree.py", "verifiers/typical.py", "drafters/base.py")
BATCH = ("engine/batch.py",)  # the batched engine (the serving recordings)
POLICIES = {"load": ("engine/load.py",), "auto": ("engine/adaptive.py",)}  # k = "load", k = "auto"


def _meaning(path: Path) -> str:
    """The file's code without comments, docstrings or layout."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            node.body = body[1:] or [ast.Pass()]
    return ast.unparse(tree)


def drafter_files(method: str) -> tuple:
    """The module that builds `method`'s drafter (and its batched drafter), as package paths."""
    record = methods.get(method)
    modules = {record.build.partition(":")[0]} | ({record.batch_build.partition(":")[0]} if record.batch_build else set())
    return tuple(sorted(m.removeprefix("specviz.").replace(".", "/") + ".py" for m in modules if m))


def files_for(method: str, k=None, batched: bool = False) -> tuple:
    """Every file whose code decides a run of `method` at draft length `k`."""
    policy = POLICIES.get(k, ()) if isinstance(k, str) else ()
    return tuple(sorted(set(ENGINE) | set(drafter_files(method)) | set(policy) | (set(BATCH) if batched else set())))


def code_version(method: str, k=None, batched: bool = False, root: Path = PACKAGE) -> str:
    """Twelve hex digits naming the code that decides such a run (`files_for`)."""
    digest = hashlib.sha256()
    for name in files_for(method, k, batched):
        digest.update(name.encode() + b"\0" + _meaning(Path(root) / name).encode() + b"\0")
    return digest.hexdigest()[:12]


# ---------------------------------------------------------------------------------------------
# built pages: executed notebook copies, the deck, the screenshots (paths relative to REPO)

NOTEBOOK_LAYERS = ("render", "teaching", "analysis")  # what draws and computes what a copy shows
DECK_LAYERS = ("render", "teaching")


def _module_path(name: str, root: Path) -> str:
    """'specviz.render.chips' -> 'specviz/render/chips.py' (or its package's __init__.py), '' if none."""
    base = name.replace(".", "/")
    for candidate in (f"{base}.py", f"{base}/__init__.py"):
        if (root / candidate).is_file():
            return candidate
    return ""


def _parsable(code: str) -> str:
    """Notebook code with IPython's magics and shell lines (%, !) turned into comments."""
    return "\n".join(line.replace("%", "#", 1) if line.lstrip().startswith("%")
                     else line.replace("!", "#", 1) if line.lstrip().startswith("!") else line
                     for line in code.splitlines())


def imported_files(code: str, root: Path = REPO) -> set:
    """The specviz files that `code`'s import statements name (a module imported from a package:
    its own file)."""
    found = set()
    for node in ast.walk(ast.parse(_parsable(code))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        paths = [_module_path(n, root) for n in names if n.split(".")[0] == "specviz"]
        found |= {p for p in paths if p}
    return found


def drawing_files(code: Iterable, layers: tuple, root: Path = REPO) -> set:
    """The files of `layers` (folders of specviz) that the code imports, and those they import,
    followed inside `layers` only."""
    inside = tuple(f"specviz/{layer}/" for layer in layers)
    todo = {p for text in code for p in imported_files(text, root) if p.startswith(inside)}
    done = set()
    while todo:
        path = todo.pop()
        done.add(path)
        todo |= {p for p in imported_files((root / path).read_text(encoding="utf-8"), root)
                 if p.startswith(inside) and p not in done}
    return done


def cells(notebook: Path) -> list:
    """[(cell type, source)] of a notebook, outputs and metadata aside (no nbformat needed)."""
    data = json.loads(Path(notebook).read_text(encoding="utf-8"))
    return [(c["cell_type"], "".join(c["source"]) if isinstance(c["source"], list) else c["source"])
            for c in data["cells"]]


def _code(notebook: Path) -> list:
    return [source for kind, source in cells(notebook) if kind == "code"]


def notebook_files(notebook: Path, root: Path = REPO) -> tuple:
    """The code that draws an executed copy of `notebook` (the module docstring says why these)."""
    return tuple(sorted({f"specviz/{name}" for name in ENGINE} | drawing_files(_code(notebook), NOTEBOOK_LAYERS, root)))


def deck_files(lecture: Path, root: Path = REPO) -> tuple:
    """The code and data that draw the deck built from `lecture`: the renderers and teaching
    modules it imports (followed), the bench modules it imports itself (the numbers it shows;
    not followed: bench imports the engine and runtime) and the presets' manifest."""
    code = _code(lecture)
    bench = {p for text in code for p in imported_files(text, root) if p.startswith("specviz/bench/")}
    return tuple(sorted(drawing_files(code, DECK_LAYERS, root) | bench | {PRESETS_MANIFEST}))


def app_files(root: Path = REPO) -> tuple:
    """The code and data the app's screenshots show: app.py, webapp/, their renderers, the presets."""
    app = ["app.py"] + sorted(p.relative_to(root).as_posix() for p in (root / "webapp").glob("*.py"))
    drawn = drawing_files([(root / p).read_text(encoding="utf-8") for p in app], ("render",), root)
    return tuple(sorted(set(app) | drawn | {PRESETS_MANIFEST}))


def artefact_version(names: Iterable, notebook: Optional[Path] = None, root: Path = REPO) -> str:
    """Twelve hex digits naming `names` (python by meaning, other files by text) and the cells of
    `notebook` (their type and source, each line's trailing spaces aside)."""
    digest = hashlib.sha256()
    for name in sorted(names):
        path = Path(root) / name
        text = _meaning(path) if name.endswith(".py") else path.read_text(encoding="utf-8")
        digest.update(name.encode() + b"\0" + text.encode() + b"\0")
    for kind, source in cells(notebook) if notebook else ():
        tidy = "\n".join(line.rstrip() for line in source.strip().splitlines())
        digest.update(kind.encode() + b"\0" + tidy.encode() + b"\0")
    return digest.hexdigest()[:12]


def notebook_version(notebook: Path, root: Path = REPO) -> str:
    """The stamp an executed copy of `notebook` must carry to be of the code now."""
    return artefact_version(notebook_files(notebook, root), notebook, root)


def deck_version(lecture: Path, root: Path = REPO) -> str:
    """The stamp the deck built from `lecture` must carry to be of the code now."""
    return artefact_version(deck_files(lecture, root), lecture, root)


def app_version(root: Path = REPO) -> str:
    """The stamp the screenshots' manifest must carry to be of the code now."""
    return artefact_version(app_files(root), None, root)


# an executed copy's opening line (notebooks/execute.py, to_html): "... on the `pair` pair: CPU, cores,
# device (dtype), date, specviz commit C. Timings ..."
COPY_HEADER = re.compile(r"on the <code>([^<]+)</code> pair: ([^<]*?)\. Timings")
COPY_DATED = re.compile(r"^(.*), \d{4}-\d\d-\d\d, specviz commit \S+$")


def copy_header(page: str) -> Optional[tuple]:
    """(pair, where it ran: CPU, cores, device and dtype, date and commit) from an executed copy's
    opening line, or None (a page without one)."""
    found = COPY_HEADER.search(page)
    return (found[1], found[2]) if found else None


def copy_machine(page: str) -> Optional[str]:
    """The machine an executed copy ran on (CPU, cores, device and dtype: its header without the
    date and commit), or None."""
    header = copy_header(page)
    found = COPY_DATED.match(header[1]) if header else None
    return found[1] if found else None
