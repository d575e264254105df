"""Every teaching notebook runs top to bottom in smoke mode (tiny pair, few tokens), and the
committed files stay clean: no outputs, a tagged `parameters` cell with the SMOKE switch, and
learning goals at the top.

Notebooks assert their own claims (e.g. the chi-square test of notebook 3 must pass for the real
rule and fail for the broken ones), so an execution without errors is a real check. Nothing a cell
builds is dropped unseen: the smoke run watches every expression statement that is not the cell's
last (tests/dropped_displays.py), and a reading of the source covers the branches it never takes.
"""

import ast
import json
import time
from pathlib import Path

import pytest

import dropped_displays

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
from jupyter_client.manager import KernelManager  # noqa: E402  (installed with nbclient)

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
TIMEOUT_PER_CELL = 240


def test_there_are_notebooks():
    assert len(NOTEBOOKS) >= 5
    names = {p.name[:2] for p in NOTEBOOKS}
    assert {"01", "02", "03", "04", "08"} <= names


def test_every_notebook_is_listed_where_the_sequence_is_taught():
    """Each notebook (10, Drafters that learn from the target, and 11, When batching kills
    speculation, included) has its row in notebooks/README.md and is named in the teacher's guide."""
    assert {"10", "11"} <= {p.name[:2] for p in NOTEBOOKS}
    readme, guide = (ROOT / "notebooks" / "README.md").read_text(), (ROOT / "docs" / "teaching.md").read_text()
    for path in NOTEBOOKS:
        assert f"]({path.name})" in readme, path.name
    assert "../notebooks/10_drafters_from_the_target.ipynb" in guide
    assert "../notebooks/11_batching_kills_speculation.ipynb" in guide


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_committed_notebook_is_clean(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(not c.outputs and c.execution_count is None for c in code), "commit notebooks with outputs cleared"
    params = [c for c in code if "parameters" in c.metadata.get("tags", [])]
    assert len(params) == 1, "exactly one cell tagged 'parameters'"
    assert "SPECVIZ_SMOKE" in params[0].source and "SPECVIZ_PAIR" in params[0].source
    assert "Learning goals" in nb.cells[0].source
    assert "/work/shared" not in json.dumps(nb)


# Static images on for two notebooks: notebook 1 with whatever browser this machine has (a PNG
# beside every figure when there is one), notebook 4 with none (BROWSER_PATH naming nothing, as
# on a laptop without Chrome): it must finish, say why in one line and keep its figures.
IMAGES = {"01": "this machine's browser", "04": "no browser"}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_opens_in_colab_and_installs_only_there(path):
    """A Colab badge to this very file in the repository pyproject.toml names, and one cell that
    installs specviz when (and only when) it runs inside Colab."""
    import re

    repo = re.search(r'^Source = "https://github\.com/([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)[1]
    nb = nbformat.read(path, as_version=4)
    assert f"https://colab.research.google.com/github/{repo}/blob/main/notebooks/{path.name}" in nb.cells[0].source
    colab = [c for c in nb.cells if c.cell_type == "code" and "google.colab" in c.source]
    assert len(colab) == 1 and re.search(r'^if "google\.colab" in sys\.modules:$', colab[0].source, re.M)
    body = colab[0].source.split('if "google.colab" in sys.modules:', 1)[1]
    assert all(line.startswith("    ") or not line.strip() for line in body.splitlines())  # nothing outside


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_in_smoke_mode(path, monkeypatch, tmp_path):
    monkeypatch.setenv("SPECVIZ_SMOKE", "1")
    monkeypatch.setenv("SPECVIZ_PAIR", "tiny")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TQDM_DISABLE", "1")
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # tiny models: threads only contend on a busy 2-core runner
    monkeypatch.setenv("SPECVIZ_LAB", "0")  # the whole notebook, past the lab-end cell (specviz.teaching.lab)
    images = IMAGES.get(path.name[:2])
    monkeypatch.setenv("SPECVIZ_STATIC_IMAGES", "1" if images else "0")
    if images == "no browser":
        monkeypatch.setenv("BROWSER_PATH", str(tmp_path / "no-browser-here"))
    # no PYTHONPATH: the kernel imports specviz as a student's does, from the installed package
    monkeypatch.delenv("PYTHONPATH", raising=False)
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    dropped = execute_watching_drops(nb, path.parent, tmp_path)
    seconds = time.perf_counter() - start
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert not dropped, f"{path.name}: built but never shown (wrap it in display(...)): {dropped}"
    figures = [o for o in outputs if "application/vnd.plotly.v1+json" in o.get("data", {})]
    pngs = [o for o in figures if "image/png" in o["data"]]
    if images == "no browser":
        said = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
        assert "static figure images are off: no Chrome/Chromium found" in said
        assert figures and not pngs  # interactive figures, no image, no wait
    elif images and static_images_possible():  # figures leave a static image for GitHub
        assert pngs
    assert seconds < 120, f"{path.name} took {seconds:.0f} s in smoke mode; slowest cells: {slowest(nb)}"


def execute_watching_drops(nb, folder: Path, tmp_path: Path) -> list:
    """Execute `nb` in a fresh kernel (working folder `folder`) with the dropped-display hook of
    tests/dropped_displays.py installed before its first cell. Returns one (cell index, line, type)
    per displayable value an expression statement built and Jupyter dropped. The hook's own two
    cells are taken out again: `nb` ends with the outputs it has without the hook.
    Raises CellExecutionError, with the cell and traceback, on any error."""
    nb.cells.insert(0, nbformat.v4.new_code_cell(dropped_displays.KERNEL_HOOK))
    nb.cells.append(nbformat.v4.new_code_cell(dropped_displays.KERNEL_REPORT))
    # IPC (Unix socket) transport: no TCP ports to collide with a kernel that is still shutting down
    km = KernelManager(kernel_name="python3", transport="ipc", connection_file=str(tmp_path / "kernel.json"))
    client = nbclient.NotebookClient(nb, km=km, timeout=TIMEOUT_PER_CELL, kernel_name="python3",
                                     resources={"metadata": {"path": str(folder)}})
    try:
        # cleanup_kc: the kernel is shut down when the run ends (nbclient does so by itself only for a
        # kernel manager it made; each leaked kernel kept its 0.4-1.5 GB until the worker ended)
        client.execute(cleanup_kc=True)
    finally:
        hook, report = nb.cells.pop(0), nb.cells.pop()
    assert not hook.outputs, hook.outputs
    said = "".join(o.get("text", "") for o in report.outputs if o.get("output_type") == "stream")
    record = json.loads(said.split(dropped_displays.MARKER, 1)[1])
    assert record["watching"], "IPython unregistered the hook (it raised): nothing was watched"
    offset = record["count"] - report.execution_count  # the report cell's count as the hook saw it
    cell_of = {c.execution_count + offset: i for i, c in enumerate(nb.cells) if c.cell_type == "code"}
    return [(cell_of.get(d["count"]), d["line"], d["type"]) for d in record["found"]]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_renderer_result_is_dropped_in_the_source(path):
    """The reading half of the check: a renderer called by a bare statement that is not its cell's
    last, in any branch (a `cuda` branch the smoke run on a CPU never takes included)."""
    from IPython.core.inputtransformer2 import TransformerManager

    nb = nbformat.read(path, as_version=4)
    sources = [(i, TransformerManager().transform_cell(c.source))
               for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    modules = set().union(*(dropped_displays.renderer_modules(ast.parse(source)) for _, source in sources))
    found = [(i, *drop) for i, source in sources for drop in dropped_displays.static_drops(source, modules)]
    assert not found, f"{path.name}: (cell, line, call) built but never shown (wrap it in display(...)): {found}"


PLANTED = ("from specviz.render import lessons\nrows = [{'a': 1.5}]",
           "lessons.table(rows, ['a'])  # planted: dropped\nkept = [1]\nkept.append(2)\nlen(kept)",
           "if rows:\n    lessons.table(rows, ['a'], caption='nested')  # planted: dropped\n"
           "    make = lessons.table\n    make(rows, ['a'])  # planted: dropped, a plain call",
           "def f():\n    'its docstring'\n    return 3\nf.__doc__",
           "import plotly.graph_objects as go\nfig = go.Figure()\nfig.add_scatter(y=[1, 2])  # fluent: not a drop\n"
           "fig.update_layout(title='t').update_xaxes(title='x')\nfig.layout.title.text")
FIXED = ("from IPython.display import display\nfrom specviz.render import lessons\nrows = [{'a': 1.5}]",
         "display(lessons.table(rows, ['a']))\nkept = [1]\nkept.append(2)\nlen(kept)",
         "if rows:\n    display(lessons.table(rows, ['a'], caption='nested'))\n"
         "    make = lessons.table\n    display(make(rows, ['a']))",
         *PLANTED[3:])


def test_the_drop_checks_have_power(tmp_path, monkeypatch):
    """A synthetic notebook with three planted dropped tables (one before other statements, two in
    an `if`, one of them a plain call the reading cannot know) is reported cell and line by the
    run and, for the renderer calls, by the reading; the same notebook with display(...) passes.
    The hook changes nothing the cells show or compute: a cell's last value is still its result,
    and a docstring is still a docstring; a fluent method (`fig.update_layout`) is no drop."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.delenv("PYTHONPATH", raising=False)
    modules = dropped_displays.renderer_modules(ast.parse(PLANTED[0]))
    assert [dropped_displays.static_drops(s, modules) for s in PLANTED] == [[], [(1, "lessons.table")],
                                                                            [(2, "lessons.table")], [], []]
    assert [dropped_displays.static_drops(s, modules) for s in FIXED] == [[]] * len(FIXED)

    planted = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in PLANTED])
    table = "specviz.render.html.Rendered"
    assert execute_watching_drops(planted, tmp_path, tmp_path) == [(1, 1, table), (2, 2, table), (2, 4, table)]
    results = [[o["data"]["text/plain"] for o in c.outputs if o.output_type == "execute_result"] for c in planted.cells]
    assert results == [[], ["2"], [], ["'its docstring'"], ["'t'"]]

    fixed = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in FIXED])
    assert execute_watching_drops(fixed, tmp_path, tmp_path) == []
    shown = [[o for o in c.outputs if "text/html" in o.get("data", {})] for c in fixed.cells]
    assert [len(s) for s in shown] == [0, 1, 2, 0, 0] and "nested" in shown[2][0]["data"]["text/html"]


def test_the_source_check_reads_branches_a_run_never_takes():
    source = ("from specviz.render import lessons as L, notebook\nnotebook.setup()\n"
              "if pair.device.type == 'cuda':\n    L.table(rows, ['kernel'])\n    print('on cuda')\n"
              "else:\n    display(L.table(rows, ['kernel']))\nL.k_figure(0.5, 0.1)")
    modules = dropped_displays.renderer_modules(ast.parse(source))
    assert modules == {"L", "notebook"}
    assert dropped_displays.static_drops(source, modules) == [(4, "L.table")]


def static_images_possible() -> bool:
    """kaleido is installed and a Chrome/Chromium is there for it to drive."""
    from specviz.render.notebook import browser_path

    return browser_path() is not None


def slowest(nb, n: int = 3) -> list:
    """(cell index, seconds, first line) of the slowest cells, from nbclient's timing metadata."""
    from datetime import datetime

    def stamp(value: str) -> datetime:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))

    cells = []
    for i, cell in enumerate(nb.cells):
        timing = cell.metadata.get("execution", {})
        if "iopub.execute_input" in timing and "shell.execute_reply" in timing:
            spent = (stamp(timing["shell.execute_reply"]) - stamp(timing["iopub.execute_input"])).total_seconds()
            cells.append((i, round(spent, 1), cell.source.split("\n")[0][:60]))
    return sorted(cells, key=lambda c: -c[1])[:n]
