"""The repeated-work benchmark (specviz.bench.repeated) on the tiny pair: turns in order, every
lane held to AR's text, a suffix lane drafting from its own earlier turns of the task only,
resumable, reported."""

import json
import subprocess
import sys

import pytest

from specviz.bench import repeated
from specviz.bench.suite import method_table
from specviz.prompts import REPEATED, RepeatedTask, turn_text
from specviz.runtime.tiny_pair import build_tiny_pair

# the tiny pair's text is noise: a task asked again word for word answers the same, so the
# second turn of a suffix lane can draft all of it from the first
SAME = RepeatedTask("same", "again", ("def fibonacci(n):",) * 2, chat=False)
EDIT = RepeatedTask("edit", "edit", ("x = 1", "{previous} then"), chat=False)


def test_the_set_and_its_turns():
    assert len(REPEATED) >= 5 and {t.kind for t in REPEATED} == {"again", "edit"}
    assert all(len(t.turns) >= 3 for t in REPEATED) and len({t.name for t in REPEATED}) == len(REPEATED)
    stack = next(t for t in REPEATED if t.kind == "edit")
    assert "{previous}" not in turn_text(stack, 1, "class Stack: ...") and "class Stack: ..." in turn_text(stack, 1,
                                                                                                      "class Stack: ...")


def test_a_run_on_the_tiny_pair_is_held_in_order_and_resumable(tmp_path):
    pair = build_tiny_pair()
    settings = {"pair": "tiny", "tokens": 24, "repeats": 1, "methods": ["pld", "suffix"], "tasks": ["same", "edit"]}
    partial = tmp_path / "r.partial.json"
    report = repeated.run(pair, method_table(4, 8), settings, partial, lambda *_: None, tasks=(SAME, EDIT))
    turns = {(t["task"], t["turn"]): t for t in report["turns"]}
    assert list(turns) == [("same", 0), ("same", 1), ("edit", 0), ("edit", 1)]
    assert all(r["tokens"] == t["ar"]["tokens"] and r["forced"] == 0 for t in turns.values()
               for runs in t["lanes"].values() for r in runs)
    # the same request again: suffix decoding drafts its first answer (a long accepted draft a step)
    first, second = turns[("same", 0)]["lanes"]["suffix"][0], turns[("same", 1)]["lanes"]["suffix"][0]
    assert second["tau"] > max(3.0, 2 * first["tau"]), (first, second)
    # an edit turn holds the previous answer in its prompt
    assert turns[("edit", 1)]["prompt_tokens"] > turns[("edit", 0)]["prompt_tokens"]
    a = repeated.analyse(report)
    # the later turns' gain, from the records (a timing on the tiny pair is no test of speed: the
    # benchmark's report measures that on the real pair; here the arithmetic and the later turns' tau)
    def rate(records):
        return sum(r["tokens"] for r in records) / sum(r["seconds"] for r in records)

    later = [t for t in turns.values() if t["turn"] > 0]
    assert a["suffix"]["repeats"] == pytest.approx(rate([r for t in later for r in t["lanes"]["suffix"]])
                                                   / rate([t["ar"] for t in later]))
    assert a["suffix"]["tau"] > a["pld"]["tau"] and set(a["suffix"]["per_task"]) == {"same", "edit"}
    md = repeated.markdown(report)
    assert "| suffix |" in md and "| pld |" in md and "as a multiple of prompt lookup's" in md
    # resumed with one task half done: that task is measured again from its first turn
    half = {**report, "turns": report["turns"][:3]}
    half.pop("analysis")
    partial.write_text(json.dumps(half))
    said = []
    again = repeated.run(pair, method_table(4, 8), settings, partial, said.append, tasks=(SAME, EDIT))
    assert [(t["task"], t["turn"]) for t in again["turns"]] == list(turns) and again["sittings"] == 2
    assert again["turns"][:2] == report["turns"][:2] and any("edit again from the first turn" in s for s in said)


@pytest.mark.parametrize("args, message", [
    (["--methods", "hf-assisted"], "unknown or unheld lane(s) hf-assisted"),
    (["--tokens", "0"], "must be at least 1"),
])
def test_bad_input_is_one_line(args, message):
    out = subprocess.run([sys.executable, "-m", "specviz.bench.repeated", "--pair", "tiny", *args],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
