"""Every teaching notebook runs top to bottom in smoke mode (tiny pair, few tokens), and the
committed files stay clean: no outputs, a tagged `parameters` cell with the SMOKE switch, and
learning goals at the top.

Notebooks assert their own claims (e.g. the chi-square test of notebook 3 must pass for the real
rule and fail for the broken ones), so an execution without errors is a real check.
"""

import json
import time
from pathlib import Path

import pytest

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
    images = IMAGES.get(path.name[:2])
    monkeypatch.setenv("SPECVIZ_STATIC_IMAGES", "1" if images else "0")
    if images == "no browser":
        monkeypatch.setenv("BROWSER_PATH", str(tmp_path / "no-browser-here"))
    # no PYTHONPATH: the kernel imports specviz as a student's does, from the installed package
    monkeypatch.delenv("PYTHONPATH", raising=False)
    nb = nbformat.read(path, as_version=4)
    # IPC (Unix socket) transport: no TCP ports to collide with a kernel that is still shutting down
    km = KernelManager(kernel_name="python3", transport="ipc", connection_file=str(tmp_path / "kernel.json"))
    client = nbclient.NotebookClient(nb, km=km, timeout=TIMEOUT_PER_CELL, kernel_name="python3",
                                     resources={"metadata": {"path": str(path.parent)}})
    start = time.perf_counter()
    # cleanup_kc: the kernel is shut down when the run ends (nbclient does so by itself only for a
    # kernel manager it made; each leaked kernel kept its 0.4-1.5 GB until the worker ended)
    client.execute(cleanup_kc=True)  # raises CellExecutionError, with the cell and traceback, on any error
    seconds = time.perf_counter() - start
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    figures = [o for o in outputs if "application/vnd.plotly.v1+json" in o.get("data", {})]
    pngs = [o for o in figures if "image/png" in o["data"]]
    if images == "no browser":
        said = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
        assert "static figure images are off: no Chrome/Chromium found" in said
        assert figures and not pngs  # interactive figures, no image, no wait
    elif images and static_images_possible():  # figures leave a static image for GitHub
        assert pngs
    assert seconds < 120, f"{path.name} took {seconds:.0f} s in smoke mode; slowest cells: {slowest(nb)}"


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
