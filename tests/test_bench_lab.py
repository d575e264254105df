"""specviz.bench.lab: the lab's time, section by section, from a notebook's own cell timings."""

import datetime
import json

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from specviz.bench import lab
from specviz.render.notebook import loaded_as


def timed(source: str, seconds: float):
    cell = new_code_cell(source)
    start = datetime.datetime(2026, 11, 28, 10, 0, 0, tzinfo=datetime.timezone.utc)
    cell.metadata["execution"] = {"iopub.execute_input": start.isoformat().replace("+00:00", "Z"),
                                  "shell.execute_reply": (start + datetime.timedelta(seconds=seconds)).isoformat()}
    return cell


def notebook():
    words = " ".join(["word"] * 150)  # a minute of reading at 150 words a minute
    return new_notebook(cells=[
        new_markdown_cell("# Title\n" + words), timed("load()", 30.0),
        new_markdown_cell("## 1. First\n" + words), timed("run()", 60.0),
        new_markdown_cell("## 2. Second\n" + words), timed("run()", 90.0),
        new_markdown_cell("## 3. Beyond the lab\n" + words * 3), timed("long()", 600.0),
        new_markdown_cell("## Take-aways\n" + words * 5)])


def test_sections_number_every_cell():
    assert lab.sections(notebook()) == [0, 0, 1, 1, 2, 2, 3, 3, None]


def test_a_notebooks_lab_part_is_the_longer_of_compute_and_reading():
    out = lab.summarise(notebook(), (1, 2), kernel_start_s=3.0)
    # compute runs in order: the setup and sections 1-2 finish before the lab ends, section 3 after
    assert out["compute_to_lab_end_s"] == pytest.approx(183.0)
    assert out["whole_notebook_s"] == pytest.approx(783.0)
    # the title's, section 1's and section 2's words (heading words included), at 150 a minute
    assert out["reading_min"] == pytest.approx((lab.words(notebook().cells[0].source) + lab.words(notebook().cells[2].source)
                                               + lab.words(notebook().cells[4].source)) / 150, abs=0.01)
    assert out["student_min"] == pytest.approx(max(183.0 / 60, out["reading_min"]), abs=0.01)
    assert out["sections"]["3"]["compute_s"] == 600.0


def test_the_wall_clock_around_a_cell_counts_over_the_kernels_record():
    """What a student waits includes the client's side (outputs, widgets): run_notebook keeps the
    wall clock around each cell, and it wins over nbclient's record of the kernel's execution."""
    cell = timed("x()", 2.0)
    assert lab.cell_seconds(cell) == 2.0
    cell.metadata["specviz_wall_s"] = 3.5
    assert lab.cell_seconds(cell) == 3.5


def test_a_partial_run_resumes_only_with_the_same_settings(tmp_path):
    partial = tmp_path / "lab.partial.json"
    settings = {"pair": "qwen-coder", "cpu": "native"}
    partial.write_text(json.dumps({"settings": settings, "notebooks": {"02": {"student_min": 5}}}))
    said = []
    assert lab._resume(partial, settings, said.append) == {"02": {"student_min": 5}}
    assert lab._resume(partial, {**settings, "cpu": "avx2"}, said.append) == {}
    partial.write_text("{not json")
    assert lab._resume(partial, settings, said.append) == {}
    assert any("other settings" in s for s in said) and any("cannot be read" in s for s in said)


def test_the_tiny_pair_is_refused_without_an_explicit_place(capsys):
    assert lab.main(["--pair", "tiny"]) == 2
    assert "timings mean nothing" in capsys.readouterr().err


def test_the_lab_path_is_the_guides():
    """The sections timed are the ones the guide's lab table lists, and each is in its notebook."""
    from specviz.bench.guide import GUIDE

    text = GUIDE.read_text(encoding="utf-8")
    for number, sections in lab.LAB_PATH:
        assert sections == tuple(range(sections[0], sections[-1] + 1))  # "sections a–b" says them all
        listed = f"sections {sections[0]}–{sections[-1]}"
        assert any(f"/{number}_" in line and listed in line for line in text.splitlines()), (number, listed)
        nb = nbformat.read(next(lab.NOTEBOOKS.glob(f"{number}_*.ipynb")), as_version=4)
        assert set(sections) <= set(lab.sections(nb)), (number, sections)


def test_the_load_line_says_what_was_loaded_int8_included():
    def nb_saying(line):
        cell = new_code_cell("load()")
        cell.outputs = [nbformat.v4.new_output("stream", name="stderr", text=line)]
        return new_notebook(cells=[cell])

    assert loaded_as(nb_saying("[specviz] qwen-coder ready on cpu (bfloat16), from ...")) == "cpu (bfloat16)"
    int8 = "[specviz] qwen-coder ready on cpu (int8 weights, float parts in float32), from ..."
    assert loaded_as(nb_saying(int8)) == "cpu (int8 weights, float parts in float32)"


def test_a_notebook_without_the_lab_sections_is_one_sentence():
    from specviz.errors import SpecvizError

    with pytest.raises(SpecvizError, match="none of the lab's sections"):
        lab.summarise(notebook(), (7, 8))
