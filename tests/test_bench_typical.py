"""The lossy lesson over seeds (specviz.bench.typical): the two presets differ in the rule alone,
the interval and the verdict on hand-made runs, a real run on the tiny pair (AR in the rotation,
resumable, the report written), bad input refused in one line. The timed comparison itself is a
benchmark (python -m specviz.bench.typical), not a test."""

import dataclasses
import json
import subprocess
import sys

import pytest

from specviz.bench import typical


def test_the_two_presets_are_one_workload_with_two_rules():
    chosen = typical.presets()
    exact, lossy = (dataclasses.asdict(chosen[rule]) for rule in ("exact", "typical"))
    assert (exact.pop("acceptance"), lossy.pop("acceptance")) == ("exact", "typical")
    for preset in (exact, lossy):
        preset.pop("label"), preset.pop("claim")
    assert exact == lossy and exact["temperature"] > 0


def test_the_interval_is_students_t_over_the_runs():
    out = typical.interval([1.0, 2.0, 3.0])
    half = 4.302652729911275 / 3 ** 0.5  # t(0.975, 2 degrees of freedom) x sd 1 / sqrt(3)
    assert out == pytest.approx({"mean": 2.0, "lo": 2.0 - half, "hi": 2.0 + half})
    assert typical.interval([0.9]) == {"mean": 0.9, "lo": None, "hi": None}


def _run(exact: float, lossy: float, alpha=(0.6, 0.7)) -> dict:
    lane = lambda speedup, a: {"alpha": a, "tau": 1 + 4 * a, "tokens_per_s": 10 * speedup,  # noqa: E731
                               "speedup": speedup}
    return {"ar": {"tokens_per_s": 10.0}, "exact": lane(exact, alpha[0]), "typical": lane(lossy, alpha[1])}


@pytest.mark.parametrize("pairs, verdict", [
    ([(0.9, 1.0), (0.95, 1.04), (0.92, 1.03), (0.97, 1.06)], "faster"),
    ([(1.0, 0.9), (1.04, 0.95), (1.03, 0.92), (1.06, 0.97)], "slower"),
    ([(0.9, 1.0), (0.95, 0.9), (0.92, 0.95), (0.97, 0.99)], "no measurable difference"),
])
def test_the_verdict_is_typical_minus_exact_paired_by_run(pairs, verdict):
    summary = typical.summarise([_run(e, t) for e, t in pairs])
    diff = summary["typical_minus_exact"]
    assert diff["verdict"] == verdict and summary["runs"] == len(pairs)
    assert diff["speedup"]["mean"] == pytest.approx(sum(t - e for e, t in pairs) / len(pairs))
    assert summary["exact"]["speedup"]["mean"] == pytest.approx(sum(e for e, _ in pairs) / len(pairs))
    assert diff["alpha"]["mean"] == pytest.approx(0.1)


def test_a_run_on_the_tiny_pair_times_ar_in_the_rotation_resumes_and_reports(tmp_path):
    args = ["--pair", "tiny", "--seeds", "2", "--prompts", "1", "--tokens", "12", "--out", str(tmp_path / "t"),
            "--quiet"]
    assert typical.main(args) == 0
    report = json.loads((tmp_path / "t.json").read_text())
    assert not (tmp_path / "t.partial.json").exists()
    settings = report["settings"]
    assert (settings["posterior_threshold"], settings["posterior_alpha"]) == (0.09, 0.3)
    assert settings["prompts"] == [typical.presets()["typical"].prompt] and settings["tokens"] == 12
    runs = report["runs"]
    assert [r["seed"] for r in runs] == [0, 1]
    assert [r["order"] for r in runs] == [["ar", "exact", "typical"], ["exact", "typical", "ar"]]  # rotated
    for r in runs:  # every lane runs to the preset's count, end of text ignored: one workload
        assert r["ar"]["tokens"] == r["exact"]["tokens"] == r["typical"]["tokens"] == 12
        for rule in typical.RULES:
            assert r[rule]["speedup"] == pytest.approx(r[rule]["tokens_per_s"] / r["ar"]["tokens_per_s"])
    summary = report["summary"]
    for rule in typical.RULES:  # the report's stable keys
        for measure in typical.MEASURES:
            assert set(summary[rule][measure]) == {"mean", "lo", "hi"}
    assert summary["typical"]["alpha"]["mean"] == pytest.approx(sum(r["typical"]["alpha"] for r in runs) / 2)
    md = (tmp_path / "t.md").read_text()
    assert "| typical (LOSSY) |" in md and "posterior_threshold 0.09, posterior_alpha 0.3" in md
    assert f"typical acceptance was **{summary['typical_minus_exact']['verdict']}**" in md
    # a partial file with these settings and one run in it: the rerun measures only the other
    first = {**report, "runs": runs[:1], "sittings": 1, "environments": report["environments"][:1]}
    first.pop("summary")
    (tmp_path / "t.partial.json").write_text(json.dumps(first))
    assert typical.main(args) == 0
    again = json.loads((tmp_path / "t.json").read_text())
    assert again["sittings"] == 2 and again["runs"][0] == runs[0] and [r["seed"] for r in again["runs"]] == [0, 1]
    # the same seed draws the same texts: the measured alpha is the run's, not the clock's
    assert again["runs"][1]["typical"]["alpha"] == runs[1]["typical"]["alpha"]


@pytest.mark.parametrize("args, message", [
    (["--seeds", "1"], "--seeds must be at least 2"),
    (["--prompts", "3"], "invalid choice"),
    (["--tokens", "0"], "--tokens must be at least 1"),
])
def test_bad_input_is_one_line(args, message):
    out = subprocess.run([sys.executable, "-m", "specviz.bench.typical", "--pair", "tiny", *args],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_the_prompts_are_the_presets_then_a_held_out_chat_prompt():
    from specviz.bench.heldout import bank_prompts

    assert typical.prompt_texts(1) == [typical.presets()["typical"].prompt]
    assert typical.prompt_texts(2) == [typical.presets()["typical"].prompt, bank_prompts("chat", 1)[0].text]
