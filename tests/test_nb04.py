"""Notebook 4's lab part, read from the committed notebook: section 1 prints the race's speedup
even when the machine was busy (with the note beside it, not instead of it), and the lab holds one
required exercise above its end, the others after it as homework."""

import contextlib
import io
import re
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")

PATH = Path(__file__).resolve().parents[1] / "notebooks" / "04_speedup_vs_acceptance.ipynb"
BUSY = "Autoregressive lane: other programs took the cores (62% CPU share), so these timings are unreliable"


def cells():
    return nbformat.read(PATH, as_version=4).cells


class FakeRace:
    """What section 1's cell uses of a RaceWidget: run() returns both lanes' records."""

    def __init__(self, note):
        self.note = note

    def run(self, ar_events, spec_events):
        return {"ar": {"tokens_per_s": 6.04}, "spec": {"tokens_per_s": 9.31, "speedup": 9.31 / 6.04}}

    def timing_note(self):
        return self.note


def race_output(note) -> str:
    source = next(c.source for c in cells() if c.cell_type == "code" and "race.run(" in c.source)
    names = {"RaceWidget": lambda: FakeRace(note), "display": lambda obj: None, "pair": None, "K": 4,
             "CODE_PROMPT": "", "MAX_NEW_TOKENS": 8,
             "specviz": type("specviz", (), {"generate": staticmethod(lambda *a, **kw: iter(()))})}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(source, names)
    return out.getvalue()


def test_section_1_prints_the_speedup_on_a_quiet_machine():
    assert race_output(None) == "autoregressive 6.0 tokens/s, speculative 9.3 tokens/s: 1.54×\n"


def test_section_1_prints_the_speedup_on_a_busy_machine_with_the_note():
    said = race_output(BUSY).splitlines()
    assert said[0] == "autoregressive 6.0 tokens/s, speculative 9.3 tokens/s: 1.54×"
    assert len(said) == 2 and said[1].endswith(BUSY) and "busy machine" in said[1]


def test_one_lab_exercise_above_the_lab_end_and_the_others_after_it():
    nb = cells()
    end = [i for i, c in enumerate(nb) if c.cell_type == "code" and "lab_ends_here()" in c.source]
    assert len(end) == 1
    end = end[0]
    assert nb[end + 1].source.startswith("## 4. "), "the lab ends with section 3"
    headings = [(i, h) for i, c in enumerate(nb) if c.cell_type == "markdown"
                for h in re.findall(r"^### (.+)$", c.source, re.M)]
    assert [h for i, h in headings if i < end] == ["Lab exercise"]
    assert [h.split(" (")[0] for i, h in headings if i > end and "exercise" in h.lower()] == [
        "Homework exercise 1", "Homework exercise 2"]
    checks = [i for i, c in enumerate(nb) if c.cell_type == "code" and "exercises.check_" in c.source]
    assert sum(i < end for i in checks) == 1 and len(checks) == 3
