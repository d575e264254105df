"""The executed-copy builder (notebooks/execute.py) keeps each figure's PNG, drops the Plotly JSON
that would need plotly.js in the page, and opens the copy with where it ran; a copy needs no
network (KaTeX from vendor/, widgets as their static HTML); each committed copy carries the stamp
of the code now and shows its notebook's code cells (else: rebuild it)."""

import importlib.util
import json
import re
import shutil
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbconvert")

from specviz.bench import provenance  # noqa: E402
from specviz.render.notebook import PLOTLY_JSON, WIDGET_VIEW, keep_static_widgets  # noqa: E402

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


# ---------------------------------------------------------------------------------------------
# built, never edited: each committed copy is what the code now would build

COPIES = ROOT / "docs" / "notebooks"


def _exported(tmp_path, cells, name="05_trees.ipynb"):
    """A notebook written to tmp_path/name, and its copy as to_html exports it (no kernel run)."""
    nb = nbformat.v4.new_notebook()
    nb.cells = cells
    source = tmp_path / name
    nbformat.write(nb, source)
    copy = tmp_path / source.with_suffix(".html").name
    copy.write_text(execute.to_html(nbformat.read(source, as_version=4), source, "tiny"), encoding="utf-8")
    return source, copy


def _lesson():
    return [nbformat.v4.new_markdown_cell("# A lesson"), nbformat.v4.new_code_cell("from specviz.render import chips\nx = 1 < 2"),
            nbformat.v4.new_code_cell("print('<b>&amp;</b>')  ")]


@pytest.mark.parametrize("notebook", execute.notebooks(), ids=lambda p: p.stem)
def test_each_committed_copy_is_built_by_the_code_now(notebook):
    """Until `python notebooks/execute.py NN` rebuilds it, a copy older than its code fails here."""
    copy = COPIES / notebook.with_suffix(".html").name
    assert copy.is_file(), f"no executed copy: python notebooks/execute.py {notebook.name[:2]}"
    assert execute.problems(copy, notebook) == [], f"rebuild: python notebooks/execute.py {notebook.name[:2]}"


def test_the_index_lists_each_copys_stamp():
    index = (COPIES / "README.md").read_text(encoding="utf-8")
    for copy in sorted(COPIES.glob("[0-9][0-9]_*.html")):
        row = next(line for line in index.splitlines() if line.startswith(f"| [{copy.stem}]"))
        assert row.rstrip(" |").endswith(str(execute.stamp_of(copy.read_text(encoding="utf-8")))), copy.stem


def test_a_fresh_copy_has_no_problem_and_shows_the_notebooks_code(tmp_path):
    source, copy = _exported(tmp_path, _lesson())
    page = copy.read_text(encoding="utf-8")
    assert execute.stamp_of(page) == provenance.notebook_version(source) and f"code stamp {execute.stamp_of(page)}" in page
    assert execute.code_cells(page) == ["from specviz.render import chips\nx = 1 < 2", "print('<b>&amp;</b>')"]
    assert execute.problems(copy, source) == []


def test_a_text_edited_copy_fails(tmp_path):
    source, copy = _exported(tmp_path, _lesson())
    page = copy.read_text(encoding="utf-8")
    copy.write_text(page.replace('<span class="mi">1</span>', '<span class="mi">2</span>', 1), encoding="utf-8")
    assert execute.problems(copy, source) == [f"{copy.name}: code cell 1 is not {source.name}'s"]


def test_a_copy_of_an_older_notebook_or_older_renderer_fails(tmp_path, monkeypatch):
    source, copy = _exported(tmp_path, _lesson())
    nb = nbformat.read(source, as_version=4)
    nb.cells[0].source = "# A lesson, reworded"  # a markdown cell: the code cells still match
    nbformat.write(nb, source)
    assert execute.problems(copy, source) == [
        f"{copy.name} was drawn by code stamp {execute.stamp_of(copy.read_text())}, the code now is "
        f"{provenance.notebook_version(source)}"]
    fresh = execute.to_html(nbformat.read(source, as_version=4), source, "tiny")
    copy.write_text(fresh, encoding="utf-8")
    assert execute.problems(copy, source) == []
    monkeypatch.setattr(provenance, "notebook_files", lambda nb, root=None: ("specviz/render/chips.py",))
    assert len(execute.problems(copy, source)) == 1  # what draws it changed: a renderer now, not the engine


def test_a_renderer_the_notebook_imports_changes_its_stamp_and_others_do_not(tmp_path):
    root = tmp_path / "repo"
    shutil.copytree(provenance.PACKAGE, root / "specviz", ignore=shutil.ignore_patterns("data", "__pycache__"))
    source, _ = _exported(tmp_path, _lesson())
    files = provenance.notebook_files(source, root)
    assert {"specviz/render/chips.py", "specviz/render/html.py", "specviz/engine/commit.py"} <= set(files)
    assert "specviz/render/widgets.py" not in files and "specviz/runtime/models.py" not in files
    before = provenance.notebook_version(source, root)
    chips = root / "specviz" / "render" / "chips.py"
    chips.write_text(chips.read_text() + "\n# a comment\n")
    assert provenance.notebook_version(source, root) == before
    widgets = root / "specviz" / "render" / "widgets.py"
    widgets.write_text(widgets.read_text() + "\nCHANGED = 1\n")
    assert provenance.notebook_version(source, root) == before  # not imported by this notebook
    chips.write_text(chips.read_text() + "\nCHANGED = 1\n")
    assert provenance.notebook_version(source, root) != before


# ---------------------------------------------------------------------------------------------
# readable offline: math from the vendored KaTeX, widgets as their static HTML

CDN = re.compile(r"cdn\.jsdelivr|unpkg\.com|cdnjs\.cloudflare|mathjax", re.I)


def _widget_output():
    from specviz.analysis import trace
    from specviz.render.widgets import TokenStream

    events = [e.to_dict() for e in trace.load(ROOT / "tests" / "golden" / "tiny_spec_t1.jsonl")]
    stream = TokenStream(events)
    data, _ = stream._repr_mimebundle_()
    return nbformat.v4.new_output("display_data", data=data), stream.static_html()


def test_a_copy_with_math_and_a_widget_needs_no_network(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECVIZ_STATIC_IMAGES", "0")
    output, fallback = _widget_output()
    assert WIDGET_VIEW in output["data"]
    code = nbformat.v4.new_code_cell("TokenStream(events)")
    code.outputs = [output]
    nb = nbformat.v4.new_notebook()
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}}}
    nb.cells = [nbformat.v4.new_markdown_cell("The rule: $$\\min(p, q) + \\max(p - q, 0) = p$$"), code]
    page = execute.to_html(nb, Path("02_x.ipynb"), "tiny")
    chips = re.findall(r'data-status="(\w+)"', fallback)  # the page writes attributes in its own order
    assert len(chips) > 3 and re.findall(r'data-status="(\w+)"', page) == chips
    assert "widget-view" not in page and "widget-state" not in page
    assert not CDN.search(page), CDN.search(page)[0]
    assert re.findall(r'<script[^>]*src="([^"]+)"', page) == [
        "vendor/katex/katex.min.js", "vendor/katex/contrib/auto-render.min.js", "vendor/math.js"]
    assert re.findall(r'<link[^>]*href="([^"]+)"', page) == ["vendor/katex/katex.min.css"]
    assert "\\min(p, q) + \\max(p - q, 0) = p" in page  # the TeX, left for KaTeX to typeset


def test_a_widget_without_html_is_counted():
    nb = nbformat.v4.new_notebook()
    code = nbformat.v4.new_code_cell("w")
    code.outputs = [nbformat.v4.new_output("display_data", data={WIDGET_VIEW: {"model_id": "x"}, "text/plain": "W()"}),
                    nbformat.v4.new_output("display_data", data={WIDGET_VIEW: {"model_id": "y"}, "text/html": "<b>y</b>"})]
    nb.cells = [code]
    assert keep_static_widgets(nb) == 1
    assert [sorted(o["data"]) for o in code.outputs] == [["text/plain"], ["text/html"]]


def test_the_vendored_katex_is_complete():
    """Every script and style the pages load, and every woff2 font the style names, is in vendor/."""
    vendor = COPIES / execute.VENDOR
    for part in ("katex/katex.min.js", "katex/katex.min.css", "katex/contrib/auto-render.min.js", "math.js",
                 "katex/LICENSE"):
        assert (vendor / part).is_file(), part
    css = (vendor / "katex" / "katex.min.css").read_text(encoding="utf-8")
    fonts = re.findall(r"url\((fonts/[^)]+\.woff2)\)", css)
    assert len(fonts) >= 15 and all((vendor / "katex" / f).is_file() for f in fonts)
    size = sum(p.stat().st_size for p in vendor.rglob("*") if p.is_file())
    assert size < 2_000_000, size


def test_a_widget_filled_after_it_was_displayed_shows_its_finished_run(tmp_path, monkeypatch):
    """`display(race); race.run(...)`, as the notebooks do, executed in a real kernel: the copy
    shows the finished race and stream, not the empty widgets they were displayed as."""
    from nbclient import NotebookClient

    monkeypatch.setenv("SPECVIZ_STATIC_IMAGES", "0")
    golden = ROOT / "tests" / "golden"
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(
        "from IPython.display import display\n"
        "from specviz.analysis import trace\n"
        "from specviz.render.widgets import RaceWidget, TokenStream\n"
        f"golden = {str(golden)!r}\n"
        "ar, spec = (trace.load(golden + '/' + name) for name in ('tiny_ar.jsonl', 'tiny_spec_greedy.jsonl'))\n"
        "race = RaceWidget()\n"
        "display(race)\n"
        "records = race.run(iter(ar), iter(spec))"),
        nbformat.v4.new_code_cell("stream = TokenStream()\nevents = stream.live(iter(trace.load("
                                  f"{str(golden / 'tiny_spec_greedy.jsonl')!r})))")]
    NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    page = execute.to_html(nb, Path("04_x.ipynb"), "tiny")
    assert "Racing" not in page and page.count('data-done="1"') == 2  # both lanes, finished
    assert len(re.findall(r'class="[^"]*sv-verdict', page)) == 1
    chips = re.findall(r'data-status="(\w+)"', page.split("jp-CodeCell")[-1])
    assert len(chips) > 3 and "bonus" in chips  # the stream's finished run


def test_a_copys_worksheet_answers_are_kept_for_the_answer_key(tmp_path, monkeypatch):
    monkeypatch.setattr(execute, "ANSWERS", tmp_path / "answers.json")
    line = '{"question": "7", "what": "speedup", "value": 1.5, "shown": "1.50×", "note": ""}\n'
    (tmp_path / "a.jsonl").write_text(line + line.replace("1.5", "1.6").replace("1.50", "1.60"))
    execute.keep_answers("04", tmp_path / "a.jsonl")
    (tmp_path / "b.jsonl").write_text("")
    execute.keep_answers("02", tmp_path / "b.jsonl")  # no answers: left out
    kept = json.loads((tmp_path / "answers.json").read_text())
    assert list(kept["notebooks"]) == ["04"] and [r["value"] for r in kept["notebooks"]["04"]] == [1.5, 1.6]
    assert not (tmp_path / "a.jsonl").exists()
    (tmp_path / "c.jsonl").write_text(line)
    execute.keep_answers("04", tmp_path / "c.jsonl")  # a notebook run again replaces its answers
    assert [r["value"] for r in json.loads((tmp_path / "answers.json").read_text())["notebooks"]["04"]] == [1.5]
