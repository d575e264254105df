"""The executed-copy builder (notebooks/execute.py) keeps each figure's PNG, drops the Plotly JSON
that would need plotly.js in the page, and opens the copy with where it ran."""

import importlib.util
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbconvert")

from specviz.render.notebook import PLOTLY_JSON  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("execute_notebooks", ROOT / "notebooks" / "execute.py")
execute = importlib.util.module_from_spec(spec)
spec.loader.exec_module(execute)

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="


def test_an_executed_copy_says_where_it_ran_and_keeps_pngs_only():
    nb = nbformat.v4.new_notebook()
    code = nbformat.v4.new_code_cell("fig.show()")
    code.outputs = [
        nbformat.v4.new_output("stream", name="stderr", text="[specviz] qwen-coder ready on cpu (bfloat16), from ...\n"),
        nbformat.v4.new_output("display_data", data={PLOTLY_JSON: {"data": [], "layout": {}}, "image/png": PNG}),
        nbformat.v4.new_output("display_data", data={PLOTLY_JSON: {"data": [], "layout": {"title": "kept"}}}),
    ]
    nb.cells = [nbformat.v4.new_markdown_cell("# 1 · A lesson"), code]
    html = execute.to_html(nb, Path("01_lesson.ipynb"), "qwen-coder")
    assert "Executed copy" in html and "cpu (bfloat16)" in html and execute.cpu_name() in html
    assert PNG in html
    data = [out["data"] for out in code.outputs if out.get("output_type") == "display_data"]
    assert PLOTLY_JSON not in data[0] and PLOTLY_JSON in data[1]  # no PNG: the figure stays


def test_the_runner_finds_every_teaching_notebook():
    names = [p.name[:2] for p in execute.notebooks()]
    assert names == sorted(names) and {"01", "09"} <= set(names)
    assert [p.name[:2] for p in execute.notebooks(["03"])] == ["03"]


def test_the_runner_finds_notebook_10_after_09():
    names = [p.name[:2] for p in execute.notebooks()]
    assert "10" in names and names.index("10") > names.index("09")
    assert [p.name for p in execute.notebooks(["10"])] == ["10_drafters_from_the_target.ipynb"]


def test_the_index_lists_each_copy_with_where_it_ran(tmp_path, monkeypatch):
    monkeypatch.setattr(execute, "OUT", tmp_path)
    nb = nbformat.v4.new_notebook()
    code = nbformat.v4.new_code_cell("load()")
    code.outputs = [nbformat.v4.new_output("stream", name="stderr", text="[specviz] x ready on cpu (float32)\n")]
    nb.cells = [code]
    (tmp_path / "05_trees.html").write_text(execute.to_html(nb, Path("05_trees.ipynb"), "qwen-coder"), encoding="utf-8")
    index = execute.write_index().read_text(encoding="utf-8")
    row = next(line for line in index.splitlines() if line.startswith("| [05_trees]"))
    assert "(05_trees.html)" in row and "../../notebooks/05_trees.ipynb" in row
    assert "qwen-coder pair: " in row and "cpu (float32)" in row and execute.cpu_name() in row


def test_the_template_styles_are_stored_once_and_output_styles_stay():
    page = ('<html><head><meta charset="utf-8"><style type="text/css">.jp-Cell{margin:0}</style>\n'
            "<style>body{color:#000}</style></head><body><div><style>.sv-chip{color:red}</style>x</div></body></html>")
    shared, css = execute.share_css(page)
    head, body = shared.split("</head>")
    assert "<style" not in head and f'<link rel="stylesheet" href="{execute.STYLESHEET}">' in head
    assert ".jp-Cell{margin:0}" in css and "body{color:#000}" in css and ".sv-chip" not in css
    assert "<style>.sv-chip{color:red}</style>" in body  # a cell output's own style stays with it
