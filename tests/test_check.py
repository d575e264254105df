"""`python -m specviz check`: one screen on the tiny pair, and a verdict that follows what is planted
(an int8 fallback, too little memory, busy cores, a lab over its slot); bad flags are one line.

The command runs in this process (specviz.cli.main) on the tiny pair. Whether this machine's cores
are busy is planted both ways (the real judge, metrics.judge_timing, given a CPU share), so that
no test depends on what else runs beside it.
"""

import json

import pytest

from specviz import cli
from specviz.analysis.metrics import judge_timing
from specviz.bench import check
from specviz.render.check import lines

GiB = 2**30


def quiet(_events):
    return judge_timing(1.0, None, "cpu", 1.0)


def busy(_events):
    return judge_timing(0.5, None, "cpu", 1.0)


def lab_report(folder, reading=5.0, compute_s=60.0, **entry):
    """A lab report of one notebook whose machine decoded at 0.5 s a token."""
    notebook = {"notebook": "02_draft_and_verify.ipynb", "loaded_as": "cpu (float32)", "lab_sections": [1, 2],
                "compute_to_lab_end_s": compute_s, "reading_min": reading,
                "student_min": max(compute_s / 60, reading), **entry}
    report = {"environment": {"device_name": "test CPU", "ar_s_per_token": 0.5}, "notebooks": {"02": notebook},
              "slot_minutes": 35}
    (folder / "lab-qwen-coder-avx2.json").write_text(json.dumps(report))
    return folder


@pytest.fixture(autouse=True)
def ample_memory(monkeypatch):
    """A machine planted with room to spare: the test worker's own memory (its peak holds whatever
    an earlier test in the same process loaded) and other programs' are not this check's subject;
    the memory tests plant their own figures over these."""
    monkeypatch.setattr(check, "memory_now", lambda: {"total_bytes": 24 * GiB, "available_bytes": 16 * GiB,
                                                      "resident_bytes": GiB // 2})
    monkeypatch.setattr(check, "rss", lambda: (GiB, GiB // 2))


@pytest.fixture
def fast(monkeypatch):
    """The race cut to one short run a lane, on a machine planted quiet."""
    monkeypatch.setattr(check, "TOKENS", 8)
    monkeypatch.setattr(check, "REPEATS", 1)
    monkeypatch.setattr(check, "timing_check", quiet)


def run_cli(capsys, *args):
    status = cli.main(["check", "--pair", "tiny", *args])
    out = capsys.readouterr()
    return status, out.out.splitlines(), out.err


def test_the_screen_names_each_check_and_ends_ready(capsys, monkeypatch):
    monkeypatch.setattr(check, "timing_check", quiet)
    status, screen, err = run_cli(capsys)
    assert status == 0, err
    assert len(screen) <= 25
    starts = ["specviz check:", "Pair      tiny on cpu in float32", "          why: the tiny pair's default",
              "          the tiny pair checks the install only", "Cores     ", "Memory    ",
              "          this process peaked at ", "          headroom beside a browser and Jupyter (2.0 GiB): ",
              "Race      greedy code prompt, 32 tokens, speculative (k = 4) and autoregressive, 2 runs each",
              "          speculative ", "Lab       would take about ", "          this machine computes at ", "Needs     Python ", "Disk      "]
    assert [line[:len(start)] for line, start in zip(screen, starts)] == starts
    assert "same text: yes" in screen[9] and ("x faster" in screen[9] or "x slower" in screen[9])
    assert "Jupyter, ipywidgets, anywidget, plotly: found" in screen[12]
    assert screen[-1] == "Ready for the lab"
    assert "race 4/4: " in err and "ETA" in err  # progress on stderr, the screen on stdout


def test_json_carries_the_measurements(capsys, fast):
    status, screen, _ = run_cli(capsys, "--json")
    result = json.loads("\n".join(screen))
    assert status == 0 and result["ready"] is True and result["problems"] == []
    race = result["race"]
    assert race["tokens"] == 8 and race["same_text"] is True  # greedy speculative is AR's text
    assert race["speedup"] == race["spec_tokens_per_s"] / race["ar_tokens_per_s"]
    assert race["ar_s_per_token"] == 1 / race["ar_tokens_per_s"]
    assert result["pair"]["dtype"] == "float32" and result["pair"]["int8"] is False
    assert result["memory"]["peak_bytes"] >= result["memory"]["resident_after_bytes"] > 0


def test_an_int8_fallback_is_not_ready(capsys, fast, monkeypatch):
    monkeypatch.setenv("SPECVIZ_MEMORY", "low")  # as the loader falls back when float weights do not fit
    status, screen, _ = run_cli(capsys)
    assert status == 1
    assert "in int8 weights, float parts in float32" in screen[1]
    assert screen[2].startswith("          why: int8 weights (asked for")
    assert screen[-1].startswith("Not ready: the pair fell back to int8 weights (another target model)")


def test_too_little_memory_is_not_ready_by_how_much(capsys, fast, monkeypatch):
    monkeypatch.setattr(check, "memory_now", lambda: {"total_bytes": 8 * GiB, "available_bytes": 4 * GiB,
                                                      "resident_bytes": GiB // 2})
    monkeypatch.setattr(check, "rss", lambda: (int(3.5 * GiB), 3 * GiB))
    status, screen, _ = run_cli(capsys)
    assert status == 1
    assert "Memory    8.0 GiB total, 4.0 GiB available before the load" in screen
    assert "          this process peaked at 3.5 GiB (load and race), holds 3.0 GiB after" in screen
    assert "          headroom beside a browser and Jupyter (2.0 GiB): 1.0 GiB SHORT" in screen
    assert screen[-1] == ("Not ready: memory: 1.0 GiB short for the pair beside a browser and Jupyter; "
                          "close other programs")


def test_busy_cores_give_no_verdict_on_speed(capsys, fast, monkeypatch):
    monkeypatch.setattr(check, "timing_check", busy)
    status, screen, _ = run_cli(capsys)
    race = screen.index(next(line for line in screen if line.startswith("Race")))
    assert screen[race + 1] == ("          no verdict on speed: the cores were busy (the decoding thread ran 50% "
                                "of the time); close other programs and run again")
    assert screen[race + 2].startswith("          for the record only: ")
    assert not any("x faster" in line or "x slower" in line for line in screen)
    assert "(timed on a busy machine: likely too long)" in next(line for line in screen if line.startswith("Lab"))
    assert status == 0 and screen[-1] == "Ready for the lab"  # busy is a reason to rerun, not a verdict


def test_a_lab_over_its_slot_is_not_ready_by_how_much(capsys, fast, monkeypatch, tmp_path):
    monkeypatch.setattr(check, "REPORTS", lab_report(tmp_path, reading=40.0, compute_s=0.0))
    status, screen, _ = run_cli(capsys)
    assert status == 1
    lab = screen.index(next(line for line in screen if line.startswith("Lab")))
    assert screen[lab] == "Lab       would take about 44 min here; it has 35: does NOT fit, 9 min over"
    assert screen[lab + 2].startswith("          what to do: cut MAX_NEW_TOKENS and SEEDS in the notebooks' "
                                      "parameters cells, follow the executed copies in docs/notebooks/")
    assert screen[-1] == "Not ready: the lab would take about 44 min, 9 over its 35"


def test_without_lab_reports_the_prediction_is_skipped(capsys, fast, monkeypatch, tmp_path):
    monkeypatch.setattr(check, "REPORTS", tmp_path)
    status, screen, _ = run_cli(capsys)
    assert status == 0
    assert ("Lab       no prediction: lab-qwen-coder-native.json could not be read (FileNotFoundError); "
            "lab-qwen-coder-avx2.json could not be read (FileNotFoundError)") in screen


@pytest.mark.parametrize("args, message", [
    (["--bogus"], "error: unrecognized arguments: --bogus (see --help)"),
    (["--pair"], "error: argument --pair: expected one argument (see --help)"),
])
def test_bad_flags_are_one_line_and_status_2(capsys, args, message):
    with pytest.raises(SystemExit) as stop:
        cli.main(["check", *args])
    assert stop.value.code == 2
    assert capsys.readouterr().err == message + "\n"


def test_an_unknown_pair_is_one_line_before_anything_loads(capsys):
    assert cli.main(["check", "--pair", "gpt5"]) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.startswith("error: Unknown pair 'gpt5': choose one of qwen-coder, tiny")
    assert out.err.count("\n") == 1


# ---------------------------------------------------------------------------------------------
# the lab's prediction, on hand-made reports

RACE = {"ar_s_per_token": 1.0, "busy": None}  # twice as slow a token as the reports' machine


def test_compute_scales_by_the_ar_time_per_token_and_reading_does_not(tmp_path):
    lab = check.lab_prediction(RACE, "float32", lab_report(tmp_path, reading=5.0, compute_s=240.0))
    assert lab["scale"] == 2.0 and lab["reference"]["source"] == "lab-qwen-coder-avx2.json"
    # overlapped, as the report's student_min says (max(4, 5) = 5): here max(8, 5) + 4 for the exercise
    assert lab["notebooks"][0]["minutes"] == 12.0 and lab["exercises_assumed"] is True
    assert lab["fits"] is True and lab["minutes"] == 12.0


def test_a_report_that_adds_compute_reading_and_exercises_is_followed(tmp_path):
    folder = lab_report(tmp_path, reading=5.0, compute_s=240.0, exercise_min=3.0, student_min=12.0)  # 4 + 5 + 3
    lab = check.lab_prediction(RACE, "float32", folder)
    assert lab["notebooks"][0]["minutes"] == 8.0 + 5.0 + 3.0 and lab["exercises_assumed"] is False


def test_a_report_without_ar_time_borrows_its_machines_suite_run(tmp_path):
    lab_report(tmp_path)
    report = json.loads((tmp_path / "lab-qwen-coder-avx2.json").read_text())
    del report["environment"]["ar_s_per_token"]
    (tmp_path / "lab-qwen-coder-avx2.json").write_text(json.dumps(report))
    suite = {"environment": {"device_name": "test CPU", "dtype": "float32"},
             "results": {"code@greedy": {"ar": {"tokens_per_s": 4.0}}}}
    (tmp_path / "suite-qwen-coder-full-avx2.json").write_text(json.dumps(suite))
    lab = check.lab_prediction(RACE, "float32", tmp_path)
    assert lab["reference"] == {"ar_s_per_token": 0.25, "source": "suite-qwen-coder-full-avx2.json"}
    suite["environment"]["device_name"] = "another CPU"
    (tmp_path / "suite-qwen-coder-full-avx2.json").write_text(json.dumps(suite))
    skipped = check.lab_prediction(RACE, "float32", tmp_path)["skipped"]
    assert "lab-qwen-coder-avx2.json has no ar_s_per_token and suite-qwen-coder-full-avx2.json ran on another " \
           "machine" in skipped


def test_the_committed_lab_reports_give_a_prediction():
    lab = check.lab_prediction(RACE, "float32")
    assert lab.get("skipped") is None, ("the check cannot predict the lab from docs/benchmarks: give the lab "
                                        f"reports environment.ar_s_per_token ({lab.get('skipped')})")
    assert lab["minutes"] > 0


def test_memory_headroom_counts_the_process_it_replaces():
    before = {"total_bytes": 16 * GiB, "available_bytes": 10 * GiB, "resident_bytes": GiB}
    assert check.memory_after(before, 6 * GiB, 5 * GiB)["headroom_bytes"] == 10 * GiB + GiB - 6 * GiB - 2 * GiB


def test_every_flag_at_once_still_fits_one_screen():
    result = {"pair": {"name": "tiny", "device": "cuda:0", "dtype": "float32", "int8": True, "why": "int8 weights",
                       "load_s": 1.0, "threads": 2, "cores": 2,
                       "last_load": {"changed": True, "before": {"dtype": "bfloat16", "weights": "float"}}},
              "memory": {"total_bytes": GiB, "available_bytes": GiB, "peak_bytes": GiB, "resident_after_bytes": GiB,
                         "beside_bytes": 2 * GiB, "headroom_bytes": -2 * GiB},
              "race": {"tokens": 32, "k": 4, "repeats": 2, "busy": "busy", "cpu_share": 0.5, "speedup": 1.0,
                       "ar_tokens_per_s": 1.0, "tau": 1.0, "same_text": False},
              "lab": {"minutes": 50.0, "slot_minutes": 35, "busy": True, "exercises_assumed": True, "compute_min": 20.0,
                      "report": "lab-qwen-coder-avx2", "scale": 3.0, "reading_min": 18.0, "exercise_min": 12.0},
              "needs": {"python": "3.9.0", "python_ok": False, "libraries": {"Jupyter": False, "plotly": True},
                        "optional": {"kaleido": False}, "cache": "/c", "disk_free_bytes": 0},
              "problems": ["a", "b", "c", "d", "e", "f"]}
    screen = lines(result)
    assert len(screen) <= 25 and screen[-1] == "Not ready: a; b; c; d; e; f"
    assert "Jupyter: MISSING" in screen[-3] and "Python 3.9.0 (too old)" in screen[-3]


def test_problems_name_each_planted_condition():
    result = {"pair": {"int8": True, "converted_now": True}, "memory": {"headroom_bytes": -GiB},
              "lab": {"minutes": 40.0, "slot_minutes": 35, "fits": False, "busy": False},
              "needs": {"libraries": {"Jupyter": False, "plotly": True}, "python_ok": False, "python": "3.9.0",
                        "disk_free_bytes": 0}}
    found = check.problems(result)
    assert [p.split(" ")[0] for p in found] == ["the", "memory:", "the", "missing", "Python", "only"]
    assert "(this run included the one-time conversion: run the check again)" in found[1]
    assert found[2] == "the lab would take about 40 min, 5 over its 35"
    result["lab"]["busy"] = True  # a busy race's prediction is too long: measure again
    assert check.problems(result)[2] == ("the cores were busy during the race, so the lab's 40 min cannot be "
                                         "trusted: close other programs and run the check again")


def test_a_module_is_found_without_being_imported_and_a_missing_parent_is_no_error():
    assert check.importable("plotly") and not check.importable("google.colab.no_such_module")
    assert not check.importable("no_such_package_anywhere")


def test_a_report_with_a_timeline_is_replayed_with_this_machines_compute():
    from specviz.bench import check, lab

    # setup 60 s of compute, 150 words (a minute), a 120 s cell, 150 words, the lab end
    cells = [["code", 60.0], ["prose", 150], ["code", 120.0], ["prose", 150], ["code", 0.0]]
    entry = {"notebook": "02_x.ipynb", "compute_to_lab_end_s": 180.0, "reading_min": 2.0, "exercise_min": 4,
             "student_min": lab.replay(cells) + 4, "lab_cells": cells, "kernel_start_s": 0.0}
    assert check.predict_notebook(entry, 1.0)["minutes"] == pytest.approx(entry["student_min"])
    # twice as slow: the reader waits for the setup (2 min), reads 1, waits for the cell (2 + 4 = 6), reads 1
    assert check.predict_notebook(entry, 2.0)["minutes"] == pytest.approx(7.0 + 4)
    # ten times as fast: reading alone (2 min) sets the pace
    assert check.predict_notebook(entry, 0.1)["minutes"] == pytest.approx(2.1 + 4, abs=0.11)
