"""The teacher's guide quotes no measured figure by hand: its machines, presets and answer-key
tables are written from the committed reports and recordings (specviz.bench.guide), and the
committed guide must equal what they give."""

import json
import re
import shutil

import pytest

from specviz.bench import guide


def test_the_committed_guide_and_readme_match_their_reports_and_recordings():
    shown = set()
    for page in guide.PAGES:
        text = page.read_text(encoding="utf-8")
        shown |= {m[2] for m in guide.BLOCK.finditer(text)}
        assert guide.stale(text) == [], f"{page.name}: run python -m specviz.bench.guide"
    assert shown == set(guide.TABLES)  # every table is on a page
    readme = guide.README.read_text(encoding="utf-8")
    assert next(m for m in guide.BLOCK.finditer(readme))[2] == "headline"


def test_readmes_sentence_is_the_held_out_mean_with_its_interval_and_the_best_case_says_so():
    rep = guide.report(guide.HELDOUT)
    code = rep["analysis"]["code"][guide.HEADLINE_LANE]
    sentence = guide.headline()
    low, high = code["vs_ar_ci95"]
    assert f"**{code['vs_ar']:.2f}×** (95% interval over prompts {low:.2f}–{high:.2f})" in sentence
    rows = {r["label"]: r for r in guide.preset_rows()}
    best = rows["Code, greedy: speculation wins"]
    assert (f"{best['speedup_median']:.2f}× (median of {best['repeats']} runs, {best['speedup_lo']:.2f}–"
            f"{best['speedup_hi']:.2f}) (a best case)") in sentence  # one prompt's races, named for what they are
    readme = guide.README.read_text(encoding="utf-8")
    edited = readme.replace(f"**{code['vs_ar']:.2f}×**", f"**{code['vs_ar'] + 0.5:.2f}×**", 1)
    assert edited != readme and guide.stale(edited) == ["headline"]


def test_the_batching_row_is_paired_and_says_no_more_than_the_noise_floor(tmp_path):
    for path in guide.REPORTS.glob("*.json"):
        shutil.copy(path, tmp_path / path.name)
    cell = guide._batched(guide.BATCHED[guide.NATIVE], tmp_path)
    assert "paired rounds" in cell and "beyond the noise floor" in cell
    name = tmp_path / f"{guide.BATCHED[guide.NATIVE]}.json"
    rep = json.loads(name.read_text())
    for entry in rep["policy"].values():  # spec within 1% of AR everywhere past B = 8: inside the floor
        for x in entry["rounds"]:
            if x["spec"] < x["ar"]:
                x["spec"] = x["ar"] * 0.995
    name.write_text(json.dumps(rep))
    assert "no batch size measurably slower than AR" in guide._batched(guide.BATCHED[guide.NATIVE], tmp_path)
    assert "unpaired" in guide._batched(guide.BATCHED[guide.AVX2], tmp_path)  # no rounds: no crossover claimed


def test_a_figure_edited_by_hand_is_found():
    text = guide.GUIDE.read_text(encoding="utf-8")
    block = next(m for m in guide.BLOCK.finditer(text) if m[2] == "machines")
    figure = re.search(r"\d\.\d\d×", block[3])[0]  # the first speedup in the table, whatever it reads
    edited = text.replace(block[3], block[3].replace(figure, f"{float(figure[:-1]) + 0.15:.2f}×", 1))
    assert edited != text and guide.stale(edited) == ["machines"]
    assert guide.main(["--check"], say=lambda line: None) == 0


def test_a_report_that_changes_changes_the_table(tmp_path):
    """The table is read from the report: change the report and the cell follows."""
    for path in guide.REPORTS.glob("*.json"):
        shutil.copy(path, tmp_path / path.name)
    name = tmp_path / f"{guide.NATIVE}.json"
    rep = json.loads(name.read_text())
    rep["results"]["code@greedy"]["spec"]["speedup"] = 3.21
    name.write_text(json.dumps(rep))
    assert "3.21×" in guide.machines_table(tmp_path) and "3.21×" not in guide.machines_table()


def test_an_unknown_table_and_a_missing_report_are_one_sentence(tmp_path):
    from specviz.errors import SpecvizError

    with pytest.raises(SpecvizError, match="asks for a generated table 'nope'"):
        guide.render("<!-- generated: nope (python -m specviz.bench.guide) -->\nx\n<!-- end generated -->")
    with pytest.raises(SpecvizError, match="could not be read"):
        guide.machines_table(tmp_path)


def test_a_report_that_lacks_a_figure_is_one_sentence(tmp_path):
    from specviz.errors import SpecvizError

    for path in guide.REPORTS.glob("*.json"):
        shutil.copy(path, tmp_path / path.name)
    name = tmp_path / f"{guide.NATIVE}.json"
    rep = json.loads(name.read_text())
    del rep["ranking"]
    name.write_text(json.dumps(rep))
    with pytest.raises(SpecvizError, match="machines table could not be written: its report lacks 'ranking'"):
        guide._made("machines", lambda: guide.machines_table(tmp_path))


def test_the_answer_key_quotes_what_the_lab_notebooks_printed(tmp_path):
    """Questions 6-11 are read from the worksheet answers the notebooks recorded: the executed
    copies' (docs/notebooks/answers.json) and each lab run's (its report's notebooks.*.worksheet),
    each in its own column; a question nobody answered shows a dash, never a typed number."""
    for path in guide.REPORTS.glob("*.json"):
        shutil.copy(path, tmp_path / path.name)

    def record(question, what, shown):
        return {"question": question, "what": what, "value": None, "shown": shown, "note": ""}

    for name, speedup in zip(guide.LAB_REPORTS, ("1.61×", "1.23×")):
        rep = json.loads((tmp_path / f"{name}.json").read_text())
        for entry in rep["notebooks"].values():
            entry["worksheet"] = []
        rep["notebooks"]["04"]["worksheet"] = [record("7", "measured speedup at k = 4", speedup)]
        (tmp_path / f"{name}.json").write_text(json.dumps(rep))
    executed = tmp_path / "answers.json"
    executed.write_text(json.dumps({"notebooks": {"04": [record("7", "measured speedup at k = 4", "1.55×"),
                                                         record("6", "α", "0.88")]}}))
    table = guide.answers_table(tmp_path, executed=executed)
    row7 = next(line for line in table.splitlines() if line.startswith("| 7 |"))
    assert row7.split(" | ")[1:4] == ["measured speedup at k = 4 1.55×", "measured speedup at k = 4 1.61×",
                                      "measured speedup at k = 4 1.23×"]
    row6 = next(line for line in table.splitlines() if line.startswith("| 6 |"))
    assert row6.split(" | ")[1:4] == ["α 0.88", "—", "—"] and "Lab exercise: α(1 − α^k) / (k(1 − α)) = 0.59" in row6
    assert "| 12 |" in table and "design, not speculation's cost" in table


def test_the_key_names_the_machine_its_executed_copies_ran_on(tmp_path):
    """The copies' column says where the copies that answered ran, read from each copy's opening
    line: a rebuild on another CPU or dtype changes the heading, and two machines are both named."""
    executed = tmp_path / "answers.json"
    executed.write_text(json.dumps({"notebooks": {"04": [], "09": []}}))

    def copy(number, where):
        (tmp_path / f"{number}_x.html").write_text(
            f"<p><strong>Executed copy</strong> of <code>notebooks/{number}_x.ipynb</code> on the <code>qwen-coder</code> "
            f"pair: {where}, 2026-12-07, specviz commit abc1234. Timings are this machine's</p>")

    copy("04", "Intel Xeon, 2 cores, cpu (bfloat16)")
    copy("09", "Intel Xeon, 2 cores, cpu (bfloat16)")
    heading = guide.answers_table(executed=executed).splitlines()[0]
    assert heading.split(" | ")[1] == "the executed copies (Intel Xeon, 2 cores, cpu (bfloat16))"
    copy("09", "AMD EPYC, 2 cores, cpu (float32)")
    heading = guide.answers_table(executed=executed).splitlines()[0]
    assert heading.split(" | ")[1] == ("the executed copies (notebook 04: Intel Xeon, 2 cores, cpu (bfloat16); "
                                       "notebook 09: AMD EPYC, 2 cores, cpu (float32))")
    page = next(guide.EXECUTED_ANSWERS.parent.glob("04_*.html")).read_text(encoding="utf-8")
    assert guide.provenance.copy_machine(page), "the committed copies' opening line no longer reads as the key expects"


def test_the_worksheet_and_its_key_are_apart():
    """Students get docs/worksheet.md; the key is in the teacher's folder (left out of make student-pack)."""
    worksheet = (guide.ROOT / "docs" / "worksheet.md").read_text(encoding="utf-8")
    key = guide.ANSWER_KEY.read_text(encoding="utf-8")
    assert "generated: answers" not in worksheet and "generated: answers" in key
    assert guide.ANSWER_KEY.parent.name == "teacher" and len(re.findall(r"^\d+\. ", worksheet, re.M)) == 12
    assert "teacher" in (guide.ROOT / "Makefile").read_text(encoding="utf-8").split("student-pack:")[1].split("\n\n")[0]
