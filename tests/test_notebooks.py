"""Every teaching notebook runs top to bottom in smoke mode (tiny pair, few tokens), and the
committed files stay clean: no outputs, a tagged `parameters` cell with the SMOKE switch, and
learning goals at the top.

Notebooks assert their own claims (e.g. the chi-square test of notebook 3 must pass for the real
rule and fail for the broken ones), so an execution without errors is a real check.
"""

import json
import os
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


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_in_smoke_mode(path, monkeypatch, tmp_path):
    monkeypatch.setenv("SPECVIZ_SMOKE", "1")
    monkeypatch.setenv("SPECVIZ_PAIR", "tiny")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TQDM_DISABLE", "1")
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # tiny models: threads only contend on a busy 2-core runner
    # PNG copies of figures (kaleido starts a headless Chromium, ~3 s): checked on one notebook
    monkeypatch.setenv("SPECVIZ_STATIC_IMAGES", "1" if path.name.startswith("01_") else "0")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    nb = nbformat.read(path, as_version=4)
    # IPC (Unix socket) transport: no TCP ports to collide with a kernel that is still shutting down
    km = KernelManager(kernel_name="python3", transport="ipc", connection_file=str(tmp_path / "kernel.json"))
    client = nbclient.NotebookClient(nb, km=km, timeout=TIMEOUT_PER_CELL, kernel_name="python3",
                                     resources={"metadata": {"path": str(path.parent)}})
    start = time.perf_counter()
    client.execute()  # raises CellExecutionError, with the cell and traceback, on any error
    seconds = time.perf_counter() - start
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    if path.name.startswith("01_") and static_images_possible():  # figures leave a static image for GitHub
        assert any("image/png" in o.get("data", {}) and "application/vnd.plotly.v1+json" in o["data"] for o in outputs)
    assert seconds < 120, f"{path.name} took {seconds:.0f} s in smoke mode; slowest cells: {slowest(nb)}"


def static_images_possible() -> bool:
    """kaleido is installed and a Chrome/Chromium is on the PATH for it to drive."""
    import importlib.util
    import shutil

    browsers = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
    return importlib.util.find_spec("kaleido") is not None and any(shutil.which(b) for b in browsers)


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
