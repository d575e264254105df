"""k="load" measures its pass-cost table once per machine and model and keeps it in the cache: a
fresh process (a freshly loaded pair) reads it and measures nothing, a table saved for anything
else is measured again with one line saying why, and the run's own clock never holds the
measurement."""

import json

import pytest

from specviz import generate, load_pair
from specviz.engine import load
from specviz.engine.load import CostTable
from specviz.engine.setup import Clock

PROMPTS = ["def add(a, b):", "class Stack:"]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    return tmp_path


def count_measures(monkeypatch) -> list:
    calls = []
    real = load.measure_pass

    def counting(model, rows, widths, *args):
        calls.append((rows, tuple(widths)))
        return real(model, rows, widths, *args)

    monkeypatch.setattr(load, "measure_pass", counting)
    return calls


def tokens(events):
    return [e.token_ids for e in events if e.kind == "run_finished"]


def test_a_fresh_process_reads_the_table_and_measures_nothing(cache, monkeypatch, capsys):
    calls = count_measures(monkeypatch)
    first = list(generate(load_pair("tiny"), PROMPTS, method="spec", k="load", max_new_tokens=10))
    assert calls, "the first run measures the table"
    err = capsys.readouterr().err
    assert "measuring the cost of a batched pass" in err and "once per machine and model" in err
    saved = list((cache / CostTable.SAVED).glob("*.json"))
    assert len(saved) == 1  # the tiny pair's two models have one architecture, so one table serves both
    calls.clear()
    again = list(generate(load_pair("tiny"), PROMPTS, method="spec", k="load", max_new_tokens=10))  # a new pair
    assert calls == [] and "measuring" not in capsys.readouterr().err
    assert tokens(again) == tokens(first)  # greedy: the same tokens, the table or no table


def test_a_table_for_something_else_or_broken_is_measured_again(cache, monkeypatch, capsys):
    list(generate(load_pair("tiny"), PROMPTS, method="spec", k="load", max_new_tokens=6))
    capsys.readouterr()
    target = CostTable.of(load_pair("tiny").target)
    saved = json.loads(target.path.read_text())
    settings = saved["settings"]
    other = "was measured with other settings"
    for broken, why in ((dict(saved, settings=dict(settings, key=dict(settings["key"], machine="another CPU"))), other),
                        (dict(saved, settings=dict(settings, version=0)), other),
                        (dict(saved, points=["not", "a", "table"]), "holds no pass-cost table"),
                        (None, "cannot be read (a write cut short?)")):
        target.path.write_text("{half a file" if broken is None else json.dumps(broken))
        calls = count_measures(monkeypatch)
        table = CostTable.of(load_pair("tiny").target)
        assert table.points == {} and why in capsys.readouterr().err
        table.need(2, (1, 2))
        assert calls and json.loads(table.path.read_text())["settings"] == settings  # measured and kept again


def test_the_measurement_is_before_the_runs_clock(cache, monkeypatch):
    """The table is measured before run_started's clock starts: a run's timings hold only its
    own passes, whatever the measurement cost."""
    seen = {}
    real = load.measure_pass

    def slow(model, rows, widths, *args):
        seen.setdefault("first", rows)
        out = real(model, rows, widths, *args)
        return out

    monkeypatch.setattr(load, "measure_pass", slow)
    clock_started = []
    real_start = Clock.start
    monkeypatch.setattr(Clock, "start", lambda self: (clock_started.append(bool(seen)), real_start(self)))
    list(generate(load_pair("tiny"), PROMPTS, method="spec", k="load", max_new_tokens=6))
    assert clock_started == [True]  # the clock started after the table was measured


def test_a_cache_that_cannot_keep_the_table_says_so_and_the_run_goes_on(cache, monkeypatch, capsys):
    from specviz import files

    def full(path, data, indent=1):
        raise files.disk_full(path.parent, "keeping the pass-cost table")

    monkeypatch.setattr(files, "write_json", full)
    events = list(generate(load_pair("tiny"), PROMPTS, method="spec", k="load", max_new_tokens=6))
    assert len(tokens(events)) == len(PROMPTS)
    assert "could not be kept in the cache" in capsys.readouterr().err
