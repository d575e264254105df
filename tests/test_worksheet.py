"""specviz.teaching.worksheet: an answer is printed as the student reads it and recorded, one JSON
line each, where SPECVIZ_WORKSHEET points (what the answer key reads)."""

from specviz import files
from specviz.bench import guide
from specviz.teaching import worksheet


def test_an_answer_is_printed_and_recorded(tmp_path, monkeypatch, capsys):
    path = tmp_path / "answers.jsonl"
    monkeypatch.setenv(worksheet.ENV, str(path))
    assert worksheet.answer(7, "measured speedup at k = 4", 1.6234, "{:.2f}×") == 1.6234
    worksheet.answer(8, "TTFT, AR", 212.4, "{:.0f} ms", note="median of 3")
    worksheet.answer(7, "measured speedup at k = 4", 1.5, "{:.2f}×")  # a cell run again: the last one counts
    worksheet.answer(10, "speedup", float("nan"), "{:.2f}×")
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "Worksheet 7: measured speedup at k = 4 = 1.62×"
    assert out[1] == "Worksheet 8: TTFT, AR = 212 ms (median of 3)"
    assert out[3] == "Worksheet 10: speedup = not measured"
    records = files.read_json_lines(path)
    assert [r["question"] for r in records] == ["7", "8", "7", "10"]
    assert next(r for r in records if r["question"] == "10")["value"] is None
    # the answer key joins a question's answers, the last of a (question, what) pair winning
    assert guide._worksheet(records, "7") == "measured speedup at k = 4 1.50×"
    assert guide._worksheet(records, "8") == "TTFT, AR 212 ms"
    assert guide._worksheet(records, "9") == "—"

def test_without_the_variable_nothing_is_written(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv(worksheet.ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    worksheet.answer(1, "x", 2)
    assert capsys.readouterr().out == "Worksheet 1: x = 2\n" and not list(tmp_path.iterdir())
    assert files.read_json_lines(tmp_path / "absent.jsonl") == []
