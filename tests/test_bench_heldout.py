"""Drafters across held-out prompts (specviz.bench.heldout): the pooled ratio, its bootstrap
interval over prompts and the verdict on hand-made runs; a real run on the tiny pair (held to
AR's text, resumable, the report written); bad input refused in one line. The timed comparison
itself is a benchmark (python -m specviz.bench.heldout), not a test."""

import json
import random
import subprocess
import sys

import pytest

from specviz.bench import heldout


def _prompt(rates: dict, ar: float = 1.0, tokens: int = 64) -> dict:
    """A prompt's record: each lane's runs at the given tokens/s (one run each, or a list), each
    run `tokens` long (AR's answer: every lane is held to it)."""
    runs = {lane: [{"tokens": tokens, "seconds": tokens / r, "tau": 2.0, "forced": 0}
                   for r in (rs if isinstance(rs, list) else [rs])] for lane, rs in rates.items()}
    return {"kind": "code", "ar": {"tokens": tokens, "seconds": tokens / ar}, "lanes": runs}


def test_a_long_answer_weighs_more_than_a_short_one():
    # 100 tokens at 2x and 10 tokens at 0.5x: pooled 110 tokens in 50 + 20 s against 110 in 100 + 10 s
    prompts = [_prompt({"a": 2.0, "b": 1.0}, tokens=100), _prompt({"a": 0.5, "b": 1.0}, tokens=10)]
    out = heldout.summarise(prompts, "a", "b", draws=10)
    assert out["ratio"] == pytest.approx((110 / 70) / (110 / 110))
    assert out["tokens_per_s"] == pytest.approx(110 / 70) and out["per_prompt_median"] == pytest.approx(1.25)


def test_the_interval_is_the_middle_95_percent_of_the_resampled_ratios():
    prompts = [_prompt({"a": 1.0 + 0.1 * i, "b": 1.0}, tokens=20 + i) for i in range(6)]
    rng, draws = random.Random(0), 40
    redrawn = sorted(heldout.summarise([rng.choice(prompts) for _ in prompts], "a", "b", draws=1)["ratio"]
                     for _ in range(draws))
    assert heldout.summarise(prompts, "a", "b", draws=draws)["ci95"] == pytest.approx([redrawn[1], redrawn[38]])


def test_the_ratio_pools_runs_and_the_interval_spans_the_prompts():
    # one prompt 2x faster, one 0.8x: pooled over seconds, 128 tokens in 32 + 80 s against 128 in 64 + 64 s
    prompts = [_prompt({"a": 2.0, "b": 1.0}), _prompt({"a": 0.8, "b": 1.0})]
    out = heldout.summarise(prompts, "a", "b", draws=400)
    assert out["ratio"] == pytest.approx((128 / 112) / (128 / 128))
    assert out["per_prompt_median"] == pytest.approx(1.4) and out["wins"] == 1 and out["prompts"] == 2
    # resampling two prompts: both fast (2.0), both slow (0.8) or one of each, so the interval spans them
    assert out["ci95"][0] == pytest.approx(0.8) and out["ci95"][1] == pytest.approx(2.0)
    assert out["verdict"] == "tie" and out["vs_ar"] == pytest.approx(128 / 112)
    # over AR (1.0 tokens/s on both prompts) the interval spans the same two prompts
    assert out["vs_ar_ci95"] == pytest.approx([0.8, 2.0])


def test_the_interval_over_ar_resamples_the_prompts_as_the_ratio_does():
    # AR at 1.0 and 2.0: lane "a" is 1.5x AR on the first prompt, 1.0x on the second
    prompts = [_prompt({"a": 1.5, "b": 1.0}, ar=1.0), _prompt({"a": 2.0, "b": 1.0}, ar=2.0)]
    out = heldout.summarise(prompts, "a", "b", draws=400)
    assert out["vs_ar"] == pytest.approx((128 / (64 / 1.5 + 32)) / (128 / 96))
    assert out["vs_ar_ci95"] == pytest.approx([1.0, 1.5])
    assert out["draft_s_per_step"] is None  # runs that did not record it
    for p, d in zip(prompts, (0.01, 0.03)):
        p["lanes"]["a"][0]["draft_s_per_step"] = d
    assert heldout.summarise(prompts, "a", "b", draws=10)["draft_s_per_step"] == pytest.approx(0.02)


def test_a_lead_on_every_prompt_is_a_lead_and_a_loss_on_every_prompt_a_loss():
    prompts = [_prompt({"a": [1.1 + 0.01 * i, 1.12], "b": 1.0}) for i in range(8)]
    assert heldout.summarise(prompts, "a", "b")["verdict"] == "leads"
    assert heldout.summarise(prompts, "b", "a")["verdict"] == "trails"
    assert heldout.summarise(prompts, "b", "b")["ci95"] == [1.0, 1.0]
    # one prompt's big win does not make a lead where the others lose
    mixed = [_prompt({"a": 3.0, "b": 1.0})] + [_prompt({"a": 0.95, "b": 1.0}) for _ in range(7)]
    out = heldout.summarise(mixed, "a", "b")
    assert out["ratio"] > 1 and out["wins"] == 1 and out["verdict"] == "tie"


def test_the_prompts_are_held_out_and_enough_of_them():
    from specviz.training.prompt_bank import held_out

    chosen = heldout.bank_prompts("code", 5)
    assert len(chosen) == 5 and all(held_out(p) and p.kind == "code" for p in chosen)
    assert heldout.bank_prompts("code", 3) == chosen[:3]  # the bank's own order: a longer run extends a shorter
    with pytest.raises(heldout.InputError, match="held-out code prompts; ask for at most"):
        heldout.bank_prompts("code", 100000)


def test_a_run_on_the_tiny_pair_is_held_resumable_and_reported(tmp_path, capsys):
    args = ["--pair", "tiny", "--kinds", "code", "--prompts", "2", "--tokens", "6", "--repeats", "1",
            "--methods", "pld", "--baseline", "spec", "--out", str(tmp_path / "h"), "--quiet"]
    (tmp_path / "h.partial.json").write_text('{"settings": {"pair": "ti')  # a write cut short: starts over
    assert heldout.main(args) == 0
    report = json.loads((tmp_path / "h.json").read_text())
    assert not (tmp_path / "h.partial.json").exists()
    assert len(report["prompts"]) == 2 and report["sittings"] == 1 and len(report["environments"]) == 1
    for p in report["prompts"]:
        assert set(p["lanes"]) == {"pld", "spec"} and all(len(runs) == 1 for runs in p["lanes"].values())
        assert all(r["tokens"] == p["ar"]["tokens"] for runs in p["lanes"].values() for r in runs)
    code = report["analysis"]["code"]
    assert code["spec"]["ratio"] == pytest.approx(1.0) and code["spec"]["verdict"] == "tie"
    assert code["pld"]["ratio"] == pytest.approx(heldout.summarise(report["prompts"], "pld", "spec")["ratio"])
    md = (tmp_path / "h.md").read_text()
    assert "| pld |" in md and "| spec |" in md and "(baseline)" in md and "2 held-out prompts" in md
    assert all(r["draft_s_per_step"] is not None for p in report["prompts"] for runs in p["lanes"].values()
               for r in runs)
    row = next(line for line in md.splitlines() if line.startswith("| pld |")).split(" | ")
    low, high = code["pld"]["vs_ar_ci95"]
    assert row[7] == f"{code['pld']['vs_ar']:.2f}x ({low:.2f} to {high:.2f})"
    assert row[8] == f"{1e3 * code['pld']['draft_s_per_step']:.1f}"
    # a partial file with these settings and one prompt in it: the rerun measures only the other
    first = {**report, "prompts": report["prompts"][:1], "sittings": 1}
    first.pop("analysis")
    (tmp_path / "h.partial.json").write_text(json.dumps(first))
    assert heldout.main(args) == 0
    again = json.loads((tmp_path / "h.json").read_text())
    assert again["sittings"] == 2 and again["prompts"][0] == report["prompts"][0]
    assert [p["text"] for p in again["prompts"]] == [p["text"] for p in report["prompts"]]
    assert "2 sitting(s)." in (tmp_path / "h.md").read_text()
    # one measured with other settings is not mixed in, and a sitting on another machine is said
    other = {**first, "settings": {**first["settings"], "tokens": 5},
             "environments": [{**first["environments"][0], "threads": 99}]}
    (tmp_path / "h.partial.json").write_text(json.dumps(other))
    assert heldout.main(args) == 0
    assert json.loads((tmp_path / "h.json").read_text())["sittings"] == 1
    (tmp_path / "h.partial.json").write_text(json.dumps({**other, "settings": first["settings"]}))
    assert heldout.main(args[:-1]) == 0
    assert "its timings mix with theirs" in capsys.readouterr().err
    assert "1 of them on another machine or setting: the timings mix" in (tmp_path / "h.md").read_text()


@pytest.mark.parametrize("args, message", [
    (["--methods", "hf-assisted"], "unknown or unheld lane(s) hf-assisted"),
    (["--methods", "warp-drive"], "unknown or unheld lane(s) warp-drive"),
    (["--prompts", "0"], "must be at least 1"),
    (["--prompts", "100000"], "held-out code prompts; ask for at most"),
    (["--kinds", "poetry"], "invalid choice"),
])
def test_bad_input_is_one_line(args, message):
    out = subprocess.run([sys.executable, "-m", "specviz.bench.heldout", "--pair", "tiny", "--kinds", "code",
                          *args], capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
