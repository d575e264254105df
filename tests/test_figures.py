"""No page quotes a measured figure by hand: every figure is a marker read from its report, or an
allowlisted exception with a reason (specviz.bench.figures), and a planted edit is named."""

import json
import shutil

import pytest

from specviz.bench import figures
from specviz.errors import SpecvizError


def test_every_page_matches_its_reports_and_holds_no_unmarked_figure():
    found = [line for path in figures.pages() for line in figures.problems(path)]
    assert found == []


def _copy(tmp_path, pages: list):
    """The pages named, copied under a tmp root in their folders (the reports are read in place)."""
    for name in pages:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(figures.ROOT / name, tmp_path / name)
    return [tmp_path / name for name in pages]


def _first_marked(text: str):
    return next(figures.FIGURE.finditer(text))


@pytest.mark.parametrize("page", ["docs/heads.md", "docs/llamacpp.md", "docs/app.md",
                                  "notebooks/10_drafters_from_the_target.ipynb"])
def test_a_marked_figure_edited_by_hand_is_named(tmp_path, page):
    (path,) = _copy(tmp_path, [page])
    raw = path.read_text(encoding="utf-8")
    mark = _first_marked(raw)  # a marker sits on one line, so it is verbatim in a notebook's JSON too
    planted = mark[0].replace(f"-->{mark['text']}<!--", f"-->9{mark['text']}<!--")
    assert mark[0] in raw
    path.write_text(raw.replace(mark[0], planted, 1), encoding="utf-8")
    found = figures.problems(path, tmp_path)
    assert len(found) == 1 and found[0].startswith(page) and mark["path"] in found[0]
    assert figures.main(["--check"], say=lambda line: None, root=tmp_path) == 1
    assert figures.main([], say=lambda line: None, root=tmp_path) == 0  # the rewrite mends it
    assert path.read_text(encoding="utf-8") == raw


def test_a_copied_table_edited_by_hand_is_named(tmp_path):
    (path,) = _copy(tmp_path, ["docs/heads.md"])
    raw = path.read_text(encoding="utf-8")
    table = next(figures.TABLE.finditer(raw))
    path.write_text(raw.replace(table["text"], table["text"].replace("x |", "5x |", 1), 1), encoding="utf-8")
    (found,) = figures.problems(path, tmp_path)
    assert f'the table {table["report"]} "{table["heading"]}" differs' in found


@pytest.mark.parametrize("page, sentence", [
    ("docs/glossary.md", "\nOn our machine spec ran 2.37x AR.\n"),
    ("notebooks/README.md", "\nIt decodes 12.5 tok/s on a laptop.\n"),
    ("docs/benchmarks/README.md", "\nThe run took 41 s and 3.1 GiB.\n"),
])
def test_a_figure_typed_by_hand_is_named(tmp_path, page, sentence):
    (path,) = _copy(tmp_path, [page])
    path.write_text(path.read_text(encoding="utf-8") + sentence, encoding="utf-8")
    found = figures.problems(path, tmp_path)
    assert found and all(line.startswith(f"{page}: ") and "typed by hand" in line for line in found)


def test_a_figure_typed_into_a_notebook_cell_is_named(tmp_path):
    (path,) = _copy(tmp_path, ["notebooks/01_memory_wall.ipynb"])
    nb = json.loads(path.read_text(encoding="utf-8"))
    cell = next(c for c in nb["cells"] if c["cell_type"] == "markdown")
    cell["source"].append("\nHere the verify pass took 212 ms.")
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    (found,) = figures.problems(path, tmp_path)
    assert found.startswith(f"notebooks/01_memory_wall.ipynb cell {cell['id']}: '212 ms' is typed by hand")


def test_an_allowed_figure_that_left_its_page_is_named(tmp_path):
    (path,) = _copy(tmp_path, ["docs/glossary.md"])
    gone = figures.Allowed("docs/glossary.md", "a figure no page holds: 7.77x", figures.EXAMPLE)
    found = figures.problems(path, tmp_path, allowed=figures.ALLOWED + (gone,))
    assert found == [f"docs/glossary.md: the allowed figure {gone.quote!r} ({gone.reason}) is no longer on the page; "
                     "remove its entry"]


def test_every_allowed_entry_gives_a_reason_and_names_a_scanned_page():
    names = {figures.name_of(p) for p in figures.pages()}
    assert all(a.reason and a.page in names for a in figures.ALLOWED)


def test_what_counts_as_measured():
    seen = [f for _, f in figures.unmarked(
        "spec 1.50× and 1.5x, 12.5 tok/s, 544 ms, 41 s, 13%, 3.1 GiB, 1.061 (1.015 to 1.112); "
        "not: k = 4, 2 × 0.5, 95% CI, 0x1F, 2009061 tokens")]
    assert seen == ["1.50×", "1.5x", "12.5 tok/s", "544 ms", "41 s", "13%", "3.1 GiB", "1.061 (1.015 to 1.112"]


def test_paths_reach_keys_with_dots_indices_ratios_and_scales():
    data = {"engines": {"llama.cpp-q8_0": {"a": 3.0, "b": [1.5, 0.25]}}}
    assert figures.lookup(data, "engines[llama.cpp-q8_0].b[1]*1000") == 250.0
    assert figures.lookup(data, "engines[llama.cpp-q8_0].a/engines[llama.cpp-q8_0].b[0]") == 2.0
    assert figures.lookup(data, "engines[llama.cpp-q8_0].b.min") == 0.25
    assert figures.lookup(data, "engines[llama.cpp-q8_0].b.max*2") == 3.0


def test_a_missing_report_or_key_is_one_sentence(tmp_path):
    with pytest.raises(SpecvizError, match="could not be read"):
        figures.render("x <!-- figure: nope a.b {:.2f} -->1<!-- /figure -->")
    with pytest.raises(SpecvizError, match="lacks 'nope'"):
        figures.render("x <!-- figure: heldout-qwen-coder-64 analysis.nope {:.2f} -->1<!-- /figure -->")
    with pytest.raises(SpecvizError, match="no such column"):
        figures.report_table("heldout-qwen-coder-64", "code", ["lane", "nope"])
