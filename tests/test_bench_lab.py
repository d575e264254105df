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


WORDS = " ".join(["word"] * 148)  # with a heading's two words: a minute of reading at 150 words a minute


def notebook(end=True):
    """Setup, lab sections 1-2 (a lab exercise in section 2) closed by the lab-end cell, then
    homework: section 3 (a homework exercise) and take-aways."""
    lab_end = [timed("from specviz.teaching.lab import lab_ends_here\n\nlab_ends_here()", 0.5)] if end else []
    return new_notebook(cells=[
        new_markdown_cell("# Title\n" + WORDS), timed("load()", 30.0),
        new_markdown_cell("## 1. First\n" + WORDS), timed("run()", 60.0),
        new_markdown_cell("## 2. Second\n" + WORDS + "\n\n### Lab exercise (code): write it\nWrite it."),
        timed("run()", 90.0), *lab_end,
        new_markdown_cell("## 3. Beyond the lab\n" + WORDS * 3 + "\n### Homework exercise 1\nMore."),
        timed("long()", 600.0), new_markdown_cell("## Take-aways\n" + WORDS * 5)])


def test_sections_number_every_cell():
    assert lab.sections(notebook()) == [0, 0, 1, 1, 2, 2, 2, 3, 3, None]


def test_a_notebooks_lab_part_adds_compute_to_its_end_reading_and_the_exercise_allowance():
    out = lab.summarise(notebook(), (1, 2), kernel_start_s=3.0)
    # compute runs in order: the setup, sections 1-2 and the lab-end cell finish before the lab ends
    assert out["compute_to_lab_end_s"] == pytest.approx(183.5)
    assert out["whole_notebook_s"] == pytest.approx(783.5)
    # the title's, section 1's and section 2's words (headings and the exercise's 7 words included)
    assert out["reading_min"] == pytest.approx((150 + 150 + 150 + 7) / 150, abs=0.01)
    assert out["lab_exercises"] == 1 and out["exercise_min"] == lab.EXERCISE_MINUTES == 4
    # the reader: title 60 s (from the kernel's start at 3 s), the setup's output is there (33 s), section
    # 1 60 s more, its cell done at 93 s, section 2 62.8 s more; its cells are done at 183.5 s, before it
    assert out["reading_with_compute_min"] == pytest.approx((3 + 60 + 60 + 157 / 150 * 60) / 60, abs=0.01)
    assert out["student_min"] == pytest.approx(out["reading_with_compute_min"] + 4, abs=0.01)
    assert out["sections"]["3"]["compute_s"] == 600.0


def test_a_reader_reads_a_links_text_not_its_address():
    assert lab.words("See [the glossary](../docs/glossary.md#greedy-decoding) now.") == 4
    assert lab.words("[![Open In Colab](https://x.org/badge.svg)](https://colab.example/a/b/c)") == 3
    assert lab.words("35 <!-- figure: lab-x slot_minutes {} minutes -->minutes<!-- /figure --> long") == 3


def test_the_lab_end_must_close_the_lab_sections():
    from specviz.errors import SpecvizError

    with pytest.raises(SpecvizError, match="has 0 lab-end cells"):
        lab.summarise(notebook(end=False), (1, 2))
    twice = notebook()
    twice.cells.insert(3, new_code_cell("lab_ends_here()"))
    with pytest.raises(SpecvizError, match="has 2 lab-end cells"):
        lab.summarise(twice, (1, 2))
    with pytest.raises(SpecvizError, match="last cell of its section 1"):  # section 2 sits above it
        lab.summarise(notebook(), (1,))
    with pytest.raises(SpecvizError, match="last cell of its section 3"):  # section 3 sits below it
        lab.summarise(notebook(), (1, 2, 3))
    late = notebook()
    late.cells.insert(7, new_markdown_cell("More of section 2, after the lab's end."))
    with pytest.raises(SpecvizError, match="next '## ' heading right below it"):
        lab.summarise(late, (1, 2))


def test_the_verdict_says_by_how_much_the_lab_fits_or_does_not():
    assert lab.verdict({"02": {"student_min": 10.0}, "04": {"student_min": 21.9}}) == {
        "lab_minutes": 31.9, "fits": True, "slot_minutes": 35, "margin_min": 3.1}
    over = lab.verdict({"02": {"student_min": 20.0}, "04": {"student_min": 17.04}})
    assert over == {"lab_minutes": 37.0, "fits": False, "slot_minutes": 35, "margin_min": -2.0}
    assert lab.verdict_words(over) == "does NOT fit its 35-minute slot: 2.0 min over"
    assert lab.verdict_words(lab.verdict({"02": {"student_min": 35.0}})) == "fits its 35-minute slot, 0.0 min to spare"


def fake_report(cpu: str, scale: float) -> dict:
    """A report as measure() writes it, from the synthetic notebook timed `scale` times slower."""
    nb = notebook()
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.metadata["specviz_wall_s"] = lab.cell_seconds(cell) * scale
    entry = {"notebook": "02_x.ipynb", "loaded_as": "cpu (float32)", **lab.summarise(nb, (1, 2))}
    settings = {"pair": "qwen-coder", "cpu": cpu, "reading_wpm": lab.READING_WPM,
                "exercise_minutes": lab.EXERCISE_MINUTES}
    env = {**lab.machine(cpu), "device_name": "Test CPU"}
    return {"settings": settings, "environment": env, "date_utc": "2026-11-29 07:00", "notebooks": {"02": entry},
            **lab.verdict({"02": entry})}


def test_the_report_and_the_guides_table_show_the_exercise_allowance(tmp_path):
    from specviz.bench import guide

    native, avx2 = fake_report("native", 1.0), fake_report("avx2", 11.0)  # avx2: 33.1 min of compute
    text = lab.markdown(avx2)
    assert "plus 4 minutes for each lab exercise" in text and "| lab exercises |" in text
    assert "waiting at a code cell until its output is there" in text
    row = next(line for line in text.splitlines() if line.startswith("| 02_x.ipynb"))
    assert row.split(" | ")[5:8] == ["33.1 min", "1 × 4 min", f"{avx2['notebooks']['02']['student_min']:.1f} min"]
    assert "does NOT fit its 35-minute slot: 2.1 min over" in text
    for name, rep in zip(guide.LAB_REPORTS, (native, avx2)):
        (tmp_path / f"{name}.json").write_text(json.dumps(rep))
    table = guide.lab_table(tmp_path)
    assert "| notebook, sections | lab exercises (4 min each) |" in table
    assert "| 02, sections 1, 2 | 1 | 7 min (compute 3.0, reading 3.0, both together 3.0; exercises 4) | " in table
    assert "**7.0 min** (fits 35, 28.0 min to spare)" in table
    assert "**37.1 min** (does not fit 35: 2.1 min over)" in table
    assert "then 4 minutes for each lab exercise" in table


def test_the_lab_end_cell_is_the_switchs_call():
    from specviz.teaching import lab as switch

    assert lab.LAB_END_CALL == switch.lab_ends_here.__name__ + "("


# the lab notebooks whose lab part ends in a lab-end cell and holds its one lab exercise
# (notebooks 04 and 09 join when their lab-end cells and lab exercises are in)
READY = ("02",)


@pytest.mark.parametrize("number", READY)
def test_a_lab_notebook_stops_at_its_lab_end_with_one_lab_exercise_above_it(number):
    wanted = dict(lab.LAB_PATH)[number]
    nb = nbformat.read(next(lab.NOTEBOOKS.glob(f"{number}_*.ipynb")), as_version=4)
    end = lab.lab_end(nb, wanted)  # raises unless it closes exactly the lab's sections
    assert lab.lab_exercises(nb, end) == 1
    below = "\n".join(c.source for c in nb.cells[end:] if c.cell_type == "markdown")
    assert not lab.LAB_EXERCISE.search(below)  # the others are homework, after the lab's end


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


def test_a_reader_waits_for_a_cell_that_computes_longer_than_the_reading():
    nb = notebook()
    nb.cells[3].metadata["specviz_wall_s"] = 600.0  # section 1's cell: ten minutes
    out = lab.summarise(nb, (1, 2), kernel_start_s=3.0)
    # the reader reaches section 1's output at 3 + 30 + 600 s, then reads section 2 (62.8 s) while its
    # 90 s cell computes, and waits for it: 723 s, and the lab-end cell's 0.5 s
    assert out["reading_with_compute_min"] == pytest.approx((3 + 30 + 600 + 90 + 0.5) / 60, abs=0.01)
    assert out["compute_to_lab_end_s"] / 60 <= out["reading_with_compute_min"] <= (
        out["compute_to_lab_end_s"] / 60 + out["reading_min"])


def test_the_lab_records_the_worksheet_where_the_notebooks_write_it(tmp_path):
    from specviz.teaching import worksheet

    assert lab.WORKSHEET_ENV == worksheet.ENV
    path = tmp_path / "answers.jsonl"
    path.write_text('{"question": "7", "what": "speedup", "value": 1.5, "shown": "1.50×", "note": ""}\n\n')
    assert lab.read_answers(path) == [{"question": "7", "what": "speedup", "value": 1.5, "shown": "1.50×", "note": ""}]
    assert lab.read_answers(tmp_path / "none.jsonl") == []
