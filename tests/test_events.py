"""Invariants of the event stream over many seeds and settings, and JSONL round trips."""

import json
import random

import pytest

from specviz import events as ev, generate
from specviz.analysis import metrics, trace


def settings(n=24):
    rng = random.Random(0)
    for seed in range(n):
        yield dict(k=rng.randint(1, 6), temperature=rng.choice([0.0, 0.0, 0.7, 1.0, 1.5]),
                   top_p=rng.choice([1.0, 0.9]), top_k=rng.choice([0, 0, 20]),
                   max_new_tokens=rng.randint(1, 40), seed=seed,
                   method=rng.choice(["spec", "spec", "ar"]), record_topk=rng.choice([0, 5]))


@pytest.fixture(scope="module")
def runs(tiny):
    prompts = ["def fibonacci(n):", "The quick brown fox", "x = [1, 2, 3]\n"]
    return [(s, list(generate(tiny, prompts[i % 3], **s))) for i, s in enumerate(settings())]


def test_stream_shape(runs):
    for setting, events in runs:
        assert events[0].kind == "run_started" and events[-1].kind == "run_finished"
        assert sum(e.kind in ("run_started", "run_finished") for e in events) == 2


def test_emitted_tokens_form_the_output(runs, tiny):
    for _, events in runs:
        steps = [e for e in events if e.kind == "step_finished"]
        emitted = [t for s in steps for t in s.emitted_ids]
        assert emitted == events[-1].token_ids
        assert events[-1].text == tiny.decode(emitted)


def test_each_step_is_drafts_then_one_pass_then_decisions(runs):
    for setting, events in runs:
        k = setting["k"] if setting["method"] == "spec" else 0
        for step in [e for e in events if e.kind == "step_finished"]:
            mine = [e for e in events if getattr(e, "step", None) == step.step]
            order = [e.kind for e in mine]
            n_draft = order.count("draft_proposed")
            assert n_draft == step.drafted <= k
            assert order[n_draft] == "target_scored" and order[-1] == "step_finished"
            assert order.count("token_accepted") == step.accepted
            assert order.count("token_rejected") == step.evaluated - step.accepted <= 1
            nexts = order.count("residual_sampled") + order.count("bonus_sampled")
            ended_on_eos_draft = step.finish_reason == "eos" and nexts == 0
            assert nexts == 1 or ended_on_eos_draft
            assert len(step.emitted_ids) == step.accepted + nexts
            assert len(step.beta) == step.drafted


def test_decisions_follow_the_rule(runs):
    for setting, events in runs:
        for e in events:
            if e.kind in ("token_accepted", "token_rejected"):
                accepted = e.kind == "token_accepted"
                if setting["temperature"] == 0.0:
                    assert e.u is None and e.accept_prob == float(accepted)
                else:
                    assert e.accept_prob == pytest.approx(min(1.0, e.p / e.q))
                    assert accepted == (e.u < e.accept_prob)


def test_positions_are_consecutive(runs):
    for _, events in runs:
        start = len(events[0].prompt_ids)
        positions = [e.position for e in events
                     if e.kind in ("token_accepted", "residual_sampled", "bonus_sampled")]
        assert positions == list(range(start, start + len(events[-1].token_ids)))


def test_metrics_fold_agrees_with_run_finished(runs):
    for _, events in runs:
        assert metrics.fold(events[:-1]).to_dict() == events[-1].metrics
        assert metrics.fold([e.to_dict() for e in events]).to_dict() == events[-1].metrics


def test_jsonl_round_trip(runs, tmp_path):
    for i, (_, events) in enumerate(runs):
        path = tmp_path / f"run{i}.jsonl"
        assert trace.save(events, path) == len(events)
        loaded = trace.load(path)
        assert loaded == events
        assert [e.to_dict() for e in loaded] == [json.loads(line) for line in path.read_text().splitlines()]


def test_from_dict_rejects_unknown():
    with pytest.raises(ValueError, match="unknown event kind"):
        ev.from_dict({"kind": "nope"})
    good = ev.BonusSampled(step=0, index=0, position=3, token_id=1, token_text="a", p=0.5).to_dict()
    with pytest.raises(ValueError, match="unknown fields"):
        ev.from_dict({**good, "extra": 1})


# -- old traces, and whether a run's timings can be trusted ------------------------------------

# golden traces recorded again since the CPU clock was kept (typical acceptance's, for Medusa's rule)
RECORDED_WITH_CPU_CLOCK = {"tiny_typical_t1.jsonl"}


def test_golden_traces_recorded_since_the_cpu_clock_carry_it():
    from pathlib import Path

    for name in RECORDED_WITH_CPU_CLOCK:
        steps = [e for e in trace.load(Path(__file__).parent / "golden" / name) if e.kind == "step_finished"]
        assert steps and all(s.cpu_elapsed is not None for s in steps), name


def test_old_golden_traces_still_load_and_fold():
    """Traces recorded before the CPU clock was kept have no cpu_elapsed: they load, fold, and
    are never called busy on that account."""
    from pathlib import Path

    paths = sorted((Path(__file__).parent / "golden").glob("*.jsonl"))
    assert {p.name for p in paths} >= RECORDED_WITH_CPU_CLOCK
    for path in (p for p in paths if p.name not in RECORDED_WITH_CPU_CLOCK):
        events = trace.load(path)
        steps = [e for e in events if e.kind == "step_finished"]
        assert steps and all(s.cpu_elapsed is None for s in steps), path.name
        stats = metrics.fold(events)
        assert stats.cpu_share is None and stats.new_tokens == len(events[-1].token_ids)
        assert metrics.timing_check(events).reliable is not False, path.name
        assert "cpu_elapsed" not in ev.without_timings(steps[0].to_dict())


def timed_run(device="cpu", shares=(0.97,) * 12, verify=(0.1,) * 12, step_s=0.1):
    """A run_started and one decode step_finished per share: elapsed grows by step_s a step and
    the thread's CPU clock by share * step_s."""
    events = [{"kind": "run_started", "method": "ar", "k": 0, "lossless": True, "device": device}]
    cpu = 0.0
    for i, (share, seconds) in enumerate(zip(shares, verify)):
        cpu += share * step_s
        events.append({"kind": "step_finished", "step": i, "k": 0, "drafted": 0, "accepted": 0, "evaluated": 0,
                       "emitted_ids": [1], "emitted_texts": ["a"], "beta": [], "draft_time": 0.0,
                       "verify_time": seconds, "draft_forwards": 0, "target_forwards": 1,
                       "elapsed": (i + 1) * step_s, "finish_reason": None, "info": None, "prefill": 0,
                       "cpu_elapsed": cpu})
    return events


def test_ssd_waiting_for_its_own_drafting_thread_is_not_called_busy():
    """SSD's decoding thread waits while its drafting thread works, so its share is below 1 on a quiet
    machine; the spread judges it instead (a plain run with the same clocks is called busy)."""
    quiet_ssd = timed_run(shares=(0.85,) * 12)
    quiet_ssd[0] = {**quiet_ssd[0], "method": "ssd"}
    assert metrics.timing_check(quiet_ssd).reliable is True and metrics.fold(quiet_ssd).cpu_share is None
    assert metrics.timing_check(timed_run(shares=(0.85,) * 12)).reliable is False
    bursty = timed_run(shares=(0.85,) * 12, verify=(0.1, 0.5) * 6)
    bursty[0] = {**bursty[0], "method": "ssd"}
    assert metrics.timing_check(bursty).reliable is False  # a busy machine still shows, in the spread


def test_a_busy_cpu_run_is_called_unreliable_and_says_why():
    quiet = metrics.timing_check(timed_run())
    assert quiet.reliable is True and quiet.note is None and quiet.cpu_share == pytest.approx(0.97)
    busy = metrics.timing_check(timed_run(shares=(0.97,) * 4 + (0.3,) * 8))  # the load arrived mid-run
    assert busy.reliable is False and busy.cpu_share == pytest.approx((0.97 * 4 + 0.3 * 8) / 12)
    assert "52%" in busy.note and "unreliable" in busy.note and "close other programs" in busy.note
    half = timed_run(shares=(0.5,) * 12)
    assert metrics.timing_note(half) == metrics.timing_check(half).note is not None
    edge = metrics.BUSY_SHARE
    assert metrics.judge_timing(edge, None).reliable is True
    assert metrics.judge_timing(edge - 0.01, None).reliable is False


def test_on_a_cpu_the_share_decides_and_the_spread_does_not():
    """A steady competitor slows every forward alike (measured spread 0.01 beside two spinners):
    the share catches it; a spread that is only noise does not overrule a good share."""
    steady_but_busy = timed_run(shares=(0.4,) * 12, verify=(0.5,) * 12)
    assert metrics.timing_check(steady_but_busy).reliable is False
    jumpy = (0.1, 0.1, 0.5, 0.1, 0.6, 0.1, 0.1, 0.7, 0.1, 0.5, 0.1, 0.6)
    assert metrics.fold(timed_run(verify=jumpy)).verify_spread > metrics.BUSY_SPREAD
    assert metrics.timing_check(timed_run(verify=jumpy)).reliable is True


def test_where_the_share_means_nothing_the_spread_decides():
    jumpy = (0.1, 0.1, 0.5, 0.1, 0.6, 0.1, 0.1, 0.7, 0.1, 0.5, 0.1, 0.6)
    gpu_busy = metrics.timing_check(timed_run("cuda:0", shares=(0.2,) * 12, verify=jumpy))
    assert gpu_busy.reliable is False and "±" in gpu_busy.note and "unreliable" in gpu_busy.note
    gpu_quiet = metrics.timing_check(timed_run("cuda:0", shares=(0.2,) * 12))  # a low share alone says nothing
    assert gpu_quiet.reliable is True and gpu_quiet.note is None
    old = [{k: v for k, v in e.items() if k != "cpu_elapsed"} for e in timed_run(verify=jumpy)]  # no CPU clock
    assert metrics.timing_check(old).reliable is False


def test_nothing_to_judge_gives_no_verdict_either_way():
    few = timed_run("cuda:0", shares=(0.2,) * 5, verify=(0.1, 0.9, 0.1, 0.9, 0.1))  # too few steps for quartiles
    assert metrics.fold(few).verify_spread is None
    assert metrics.timing_check(few) == metrics.TimingCheck(None, None, pytest.approx(0.2), None)
    short = timed_run(shares=(0.3,) * 3, step_s=metrics.MIN_SECONDS / 4)  # too short for coarse thread clocks
    assert metrics.timing_check(short).reliable is None and metrics.timing_note(short) is None
    assert metrics.judge_timing(None, None, "mps").reliable is None


def test_a_timed_block_is_judged_by_the_same_rule():
    from specviz.analysis import timing

    with timing.measure("cpu") as block:
        sum(i * i for i in range(200_000))
    assert block.seconds > 0 and 0 < block.cpu_seconds <= block.seconds + 0.02
    assert block.check == metrics.judge_timing(block.cpu_share, None, "cpu", block.seconds)
    assert timing.Block("cpu", 1.0, 0.4).note == metrics.judge_timing(0.4, None, "cpu", 1.0).note is not None
    assert timing.Block("cuda:0", 1.0, 0.4).note is None
