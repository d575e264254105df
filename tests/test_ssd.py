"""Speculative speculative decoding (specviz.drafters.ssd): the drafter prepares the next step for
the likely verification outcomes while the target verifies. Verification is unchanged, so the
output is the target's (greedy: token for token; sampled: chi-square on exact toy models, a
broken rule failing it); a hit's draft really is the prepared one; the timeline and the summary
read what the events say; the theory's ceiling and floor."""

import threading

import pytest
import torch
from test_distribution import RUNS, ResampleFromTarget, _first_tokens, _p_value, _target_joint, toy  # noqa: F401

from specviz import generate
from specviz.analysis import overlap, ssd_model, theory
from specviz.config import RunConfig, Warp
from specviz.drafters import ssd
from specviz.engine import sequence
from specviz.errors import InputError
from specviz.runtime.tiny_pair import build_tiny_pair

PROMPTS = ["def fibonacci(n):", "Hello, world! ", "import os\nfor name in os.listdir('.'):"]


@pytest.fixture(scope="module")
def tiny():
    return build_tiny_pair()


def _steps(events):
    return [e for e in events if e.kind == "step_finished"]


@pytest.mark.parametrize("prepare", ["full", "overlap"])
@pytest.mark.parametrize("k,fanout", [(1, 1), (3, 4), (5, 8)])
def test_greedy_equals_ar(tiny, prepare, k, fanout):
    for prompt in PROMPTS:
        ar = list(generate(tiny, prompt, method="ar", max_new_tokens=37))[-1]
        run = list(generate(tiny, prompt, method="ssd", k=k, max_new_tokens=37, ssd_prepare=prepare,
                            ssd_fanout=fanout))
        assert run[-1].token_ids == ar.token_ids, (prompt, prepare, k)


def test_a_hit_is_drafted_by_the_preparation_and_a_miss_from_scratch(tiny):
    hits = 0
    for prompt in PROMPTS:
        steps = _steps(list(generate(tiny, prompt, method="ssd", k=4, max_new_tokens=48, ssd_prepare="full")))
        for step, after in zip(steps, steps[1:]):
            info, nxt = step.info["ssd"], after.info["ssd"]
            outcome = (info["outcome"]["accepted"], info["outcome"]["token"])
            # what the verdict was: this step's accepted count and the target's own token
            assert outcome == (step.accepted, step.emitted_ids[-1])
            prepared = {(p["accepted"], p["token"]) for p in info["prepared"]}
            assert info["hit"] == (outcome in prepared)
            if info["hit"]:
                hits += 1
                # prepared in full: the next step's draft is ready, no draft forward on the critical path
                assert nxt["draft"]["from"] == "prepared" and after.draft_forwards == 0
                assert nxt["draft"]["prepared"] == after.drafted
            elif after.k:  # (the run's last step may have no room to draft)
                assert nxt["draft"]["from"] == "drafted" and after.draft_forwards >= 1
    assert hits >= 5  # the tiny pair's draft is its target's cousin: outcomes are predictable


def test_the_first_step_drafts_from_scratch_and_the_fanout_bounds_the_outcomes(tiny):
    steps = _steps(list(generate(tiny, PROMPTS[0], method="ssd", k=3, max_new_tokens=30, ssd_fanout=2,
                                 ssd_prepare="full")))
    assert steps[0].info["ssd"]["draft"]["from"] == "drafted"
    assert all(len(s.info["ssd"]["prepared"]) <= 2 for s in steps)
    assert any(len(s.info["ssd"]["prepared"]) == 2 for s in steps)


def _capped(pair, cap, **kw):
    """An SSD drafter whose preparation stops after `cap` levels, as if the pass had ended there:
    partly prepared branches, and bonus branches (one level behind) with nothing drafted yet."""
    drafter = ssd.build(pair, RunConfig(method="ssd", **kw), pair.eos_token_ids)
    drafter.levels_cap = cap
    return drafter


@pytest.mark.parametrize("cap", [1, 2])
def test_partly_prepared_branches_are_drafted_on_exactly(tiny, cap):
    for prompt in PROMPTS:
        ar = list(generate(tiny, prompt, method="ar", max_new_tokens=40))[-1]
        run = list(generate(tiny, prompt, method="ssd", k=4, max_new_tokens=40,
                            drafter=_capped(tiny, cap, k=4, ssd_prepare="full")))
        assert run[-1].token_ids == ar.token_ids
        ready = [s.info["ssd"]["draft"] for s in _steps(run) if s.info["ssd"]["draft"]["from"] == "prepared"]
        assert ready and all(d["prepared"] <= cap for d in ready)
        assert any(d["forwards"] > 0 for d in ready)  # drafted on, on the critical path


def test_greedy_drafts_what_plain_speculation_drafts(tiny):
    """Preparing changes when a draft is made, not what it is: step for step the same drafts as spec's."""
    for prompt in PROMPTS:
        spec = _steps(list(generate(tiny, prompt, method="spec", k=3, max_new_tokens=40)))
        run = _steps(list(generate(tiny, prompt, method="ssd", k=3, max_new_tokens=40, ssd_prepare="full")))
        assert [(s.drafted, s.accepted, s.emitted_ids) for s in run] == [(s.drafted, s.accepted, s.emitted_ids)
                                                                        for s in spec]
        assert any(s.info["ssd"]["draft"]["from"] == "prepared" for s in run)


def test_a_seeded_sampled_run_does_not_depend_on_how_far_preparation_got(tiny):
    """Each prepared outcome draws from a generator of its own: the same tokens whether
    preparation stopped at the verdict or ran to full depth."""
    for seed in range(3):
        runs = [list(generate(tiny, PROMPTS[1], method="ssd", k=3, max_new_tokens=40, temperature=1.0, seed=seed,
                              ssd_prepare=prepare))[-1].token_ids for prepare in ("overlap", "full")]
        runs += [list(generate(tiny, PROMPTS[1], method="ssd", k=3, max_new_tokens=40, temperature=1.0, seed=seed,
                               drafter=_capped(tiny, cap, k=3, seed=seed, temperature=1.0)))[-1].token_ids
                 for cap in (0, 1, 2)]
        assert all(r == runs[0] for r in runs)


def test_the_preparation_runs_on_its_own_thread_with_its_share_of_the_cores(tiny, monkeypatch):
    if "OpenMP" not in torch.__config__.parallel_info():
        pytest.skip("thread counts are per thread on PyTorch's OpenMP builds only")
    seen = {"draft": set(), "target": set()}
    levels, score = ssd.SSDDrafter._levels, sequence._Run._score

    def spy_levels(self, *args):
        seen["draft"].add((threading.current_thread().name.startswith("specviz-ssd"), torch.get_num_threads()))
        return levels(self, *args)

    def spy_score(self, tree):  # the target's pass, while the drafter prepares beside it (or not)
        seen["target"].add((torch.get_num_threads(), self.drafter.job is not None))
        return score(self, tree)

    monkeypatch.setattr(ssd.SSDDrafter, "_levels", spy_levels)
    monkeypatch.setattr(sequence._Run, "_score", spy_score)
    original = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        list(generate(tiny, PROMPTS[0], method="ssd", k=3, max_new_tokens=20, ssd_threads=1))
        assert seen["draft"] == {(True, 1)}  # 1 of 3 cores prepares ...
        assert (2, True) in seen["target"] and all(t == (2 if preparing else 3) for t, preparing in seen["target"])
        assert torch.get_num_threads() == 3  # the target has every core back after each pass
    finally:
        torch.set_num_threads(original)


def _count_calls(monkeypatch) -> list:
    """Every torch.set_num_threads call from now on: (made on SSD's thread, the count)."""
    calls, real = [], torch.set_num_threads

    def spy(n):
        calls.append((threading.current_thread().name.startswith("specviz-ssd"), n))
        real(n)

    monkeypatch.setattr(torch, "set_num_threads", spy)
    return calls


@pytest.fixture
def three_cores():
    if "OpenMP" not in torch.__config__.parallel_info():
        pytest.skip("thread counts are per thread on PyTorch's OpenMP builds only")
    original = torch.get_num_threads()
    torch.set_num_threads(3)
    yield
    torch.set_num_threads(original)


def test_thread_counts_are_set_once_on_the_drafters_thread_and_around_each_pass_on_the_callers(
        tiny, monkeypatch, three_cores):
    calls = _count_calls(monkeypatch)
    run = list(generate(tiny, PROMPTS[0], method="ssd", k=3, max_new_tokens=30, ssd_threads=1, ssd_prepare="full"))
    passes = sum("ahead" in s.info["ssd"] for s in _steps(run))
    assert passes > 5
    assert [n for worker, n in calls if worker] == [1]  # once, as the thread started; never from it during a pass
    # the caller: its own count back after starting that thread, then the target's share for each pass beside it
    assert [n for worker, n in calls if not worker] == [3] + [2, 3] * passes
    assert torch.get_num_threads() == 3


def test_the_cores_come_back_when_starting_the_preparation_fails(tiny, monkeypatch, three_cores):
    drafter = ssd.build(tiny, RunConfig(method="ssd", k=3, ssd_threads=1), tiny.eos_token_ids)
    submit, prepared = drafter.pool.submit, []

    def failing(fn, *args):  # the third step's ahead() fails after the target's pass got its share
        if fn == drafter._prepare:
            prepared.append(fn)
            if len(prepared) == 3:
                raise RuntimeError("the pool is gone")
        return submit(fn, *args)

    monkeypatch.setattr(drafter.pool, "submit", failing)
    calls = _count_calls(monkeypatch)
    with pytest.raises(RuntimeError, match="the pool is gone"):
        list(generate(tiny, PROMPTS[0], method="ssd", k=3, max_new_tokens=30, drafter=drafter))
    assert calls[-2:] == [(False, 2), (False, 3)] and torch.get_num_threads() == 3


def test_a_finished_runs_thread_ends_with_its_drafter(tiny):
    import gc

    for _ in range(12):
        list(generate(tiny, PROMPTS[0], method="ssd", k=2, max_new_tokens=6))
    gc.collect()
    for thread in threading.enumerate():
        if thread.name.startswith("specviz-ssd"):
            thread.join(timeout=10)  # told to end when its pool was collected
    assert not [t.name for t in threading.enumerate() if t.name.startswith("specviz-ssd")]


def test_preparation_stops_where_the_draft_cache_would_overflow(tiny):
    """A static cache sized for the run itself (prompt, new tokens, one draft and its check) has
    no room left for a full preparation near the end: it stops there, and the output is AR's."""
    prompt_len, k, new = len(tiny.encode(PROMPTS[0])), 4, 40
    room = prompt_len + new + k + 1
    ar = list(generate(tiny, PROMPTS[0], method="ar", max_new_tokens=new))[-1]

    def run(room):
        drafter = ssd.build(tiny, RunConfig(method="ssd", k=k, ssd_fanout=8, ssd_prepare="full"), tiny.eos_token_ids)
        drafter.room, forward, longest = room, drafter.runner.forward, [0]

        def spy(ids, *args, **kw):
            longest[0] = max(longest[0], drafter.runner.length + len(ids))
            return forward(ids, *args, **kw)

        drafter.runner.forward = spy
        events = list(generate(tiny, PROMPTS[0], method="ssd", k=k, max_new_tokens=new, drafter=drafter))
        assert events[-1].token_ids == ar.token_ids
        return [s.info["ssd"].get("ahead", {}).get("stopped") for s in _steps(events)], longest[0]

    stopped, longest = run(None)
    assert "cache full" not in stopped and longest > room  # unguarded, preparation outgrows that cache
    stopped, longest = run(room)
    assert "cache full" in stopped and longest <= room
    assert stopped[0] is None  # early on, there was room for all of it


def test_only_a_static_cache_has_a_fixed_room(tiny):
    from specviz.runtime.lm import CachedLM

    assert ssd.cache_room(CachedLM(tiny.draft)) is None


def test_the_split_cost_times_the_target_on_its_share_beside_the_draft(tiny, monkeypatch):
    """On any core count: the target's pass with every core, then with cores - draft threads,
    alone and beside the draft; the draft on its threads. Counts are faked per thread (6 cores)."""
    from specviz.bench import ssd as bench
    from specviz.runtime.lm import CachedLM

    counts, seen, forward = threading.local(), [], CachedLM.forward
    monkeypatch.setattr(torch, "get_num_threads", lambda: getattr(counts, "n", 6))
    monkeypatch.setattr(torch, "set_num_threads", lambda n: setattr(counts, "n", n))

    def spy(self, ids, *args, **kw):
        role = "target" if self.model is tiny.target else "draft"
        seen.append((role, threading.current_thread() is threading.main_thread(), torch.get_num_threads()))
        return forward(self, ids, *args, **kw)

    monkeypatch.setattr(CachedLM, "forward", spy)
    out = bench.split_cost(tiny, k=3, threads=1, repeats=2)
    assert (out["cores"], out["draft_threads"], out["target_threads"]) == (6, 1, 5)
    # every core, its share alone, its share beside the draft: a prefill and 2 timed passes each
    assert [n for role, main, n in seen if role == "target"] == [6] * 3 + [5] * 3 + [5] * 3
    assert {n for role, main, n in seen if role == "draft"} == {1}
    assert any(role == "draft" and not main for role, main, n in seen)  # beside: on a thread of its own
    assert torch.get_num_threads() == 6


def test_bad_options_are_refused():
    for bad, match in [(dict(ssd_fanout=0), "ssd_fanout"), (dict(ssd_fanout=17), "ssd_fanout"),
                       (dict(ssd_prepare="later"), "ssd_prepare"), (dict(ssd_threads=0), "ssd_threads"),
                       (dict(k="auto"), "k='auto'"), (dict(batch=2), "one sequence")]:
        with pytest.raises(InputError, match=match):
            RunConfig.of(method="ssd", **bad)


# ---------------------------------------------------------------------------------------------
# what the drafter expects of the outcome

def test_the_outcome_model_prepares_where_acceptance_is_likely_to_end():
    model = ssd_model.OutcomeModel()
    for _ in range(50):  # every draft accepted: the bonus token's candidates come first
        model.observe(4, 4, "bonus", 0)
    plan = model.plan(4, 3)
    assert [a for a, _, _ in plan] == [4, 4, 4] and [r for _, r, _ in plan] == [0, 1, 2]
    model = ssd_model.OutcomeModel()
    for _ in range(50):  # the first draft always rejected, the residual token its second best
        model.observe(0, 4, "residual", 1)
    plan = model.plan(4, 2)
    assert [(a, r) for a, r, _ in plan] == [(0, 1), (0, 0)]
    assert plan[0][2] > plan[1][2]


def test_candidates_skip_the_rejected_draft():
    q = torch.tensor([0.1, 0.5, 0.3, 0.1])
    assert ssd.candidates(q, None, 2) == [1, 2]
    assert ssd.candidates(q, 1, 2) == [2, 0] or ssd.candidates(q, 1, 2) == [2, 3]
    assert ssd.rank_of(q, 1, 2) == 0 and ssd.rank_of(q, None, 2) == 1


# ---------------------------------------------------------------------------------------------
# sampling on exact toy models

@pytest.mark.parametrize("prepare", ["full", "overlap"])
def test_sampling_follows_the_target(toy, prepare):  # noqa: F811
    warp = Warp(1.0)
    counts, runs = _first_tokens(toy, warp, runs=RUNS // 2, method="ssd", k=2, ssd_prepare=prepare)
    assert _p_value(counts, _target_joint(toy, warp), RUNS // 2) > 1e-4
    steps = [e for events in runs for e in events if e.kind == "step_finished"]
    assert sum(s.info["ssd"]["draft"]["from"] == "prepared" for s in steps) > RUNS // 20  # hits happen
    assert sum(e.kind == "token_rejected" for events in runs for e in events) > RUNS // 20


class MisreportedQ(ssd.SSDDrafter):
    """Broken: a prepared draft reports a q other than the one it was drawn from (uniform)."""

    def _from_branch(self, branch, k, warp, committed):
        proposal = super()._from_branch(branch, k, warp, committed)
        flat = {node: torch.full_like(q, 1.0 / q.numel()) for node, q in proposal.dists.items()}
        return type(proposal).chain(proposal.tokens, [flat[i - 1] for i in range(len(proposal.tokens))],
                                    proposal.forwards, proposal.seconds)


def test_a_drafter_that_misreports_q_fails_the_same_test(toy):  # noqa: F811
    warp = Warp(1.0)
    counts, _ = _first_tokens(toy, warp, runs=RUNS // 2, method="ssd", k=1,  # k = 1: the second step decides
                              make_drafter=lambda seed: MisreportedQ(toy.draft, (), k=1, prepare="full", seed=seed))
    assert _p_value(counts, _target_joint(toy, warp), RUNS // 2) < 1e-4


def test_a_fanout_wider_than_the_vocabulary_prepares_what_there_is(toy):  # noqa: F811
    for seed in range(20):
        list(generate(toy, [0, 1], method="ssd", k=2, temperature=1.0, max_new_tokens=8, seed=seed, ssd_fanout=16,
                      ssd_prepare="full"))


def test_a_broken_rule_fails_with_it_too(toy):  # noqa: F811
    warp = Warp(1.0)
    counts, _ = _first_tokens(toy, warp, runs=RUNS // 2, verifier=ResampleFromTarget(), method="ssd", k=2,
                              ssd_prepare="full")
    assert _p_value(counts, _target_joint(toy, warp), RUNS // 2) < 1e-4


# ---------------------------------------------------------------------------------------------
# the timeline, the summary and the theory

def _step(n, elapsed, draft, verify, ahead=None, wait=None, hit=None, prepared=2):
    info = {"draft": {"from": "drafted", "start": 0.0, "end": draft, "forwards": 1},
            "verify": {"start": draft, "end": draft + verify}, "prepared": [{}] * prepared,
            "hit": hit, "alpha": 0.5, "outcome": {}}
    if ahead:
        info["ahead"] = {"start": ahead[0], "end": ahead[1], "levels": 2}
    if wait:
        info["wait"] = {"start": draft + verify, "end": draft + verify + wait}
    return {"kind": "step_finished", "step": n, "elapsed": elapsed, "drafted": 2, "draft_time": draft,
            "verify_time": verify, "info": {"ssd": info}}


def test_the_summary_counts_hidden_and_exposed_drafting():
    events = [{"kind": "run_started", "method": "ssd", "k": 2},
              _step(0, 1.0, 0.2, 0.6, ahead=(0.25, 0.9), wait=0.1, hit=True),
              _step(1, 1.9, 0.0, 0.6, ahead=(0.05, 0.5), hit=False)]
    events[2]["info"]["ssd"]["draft"] = {"from": "prepared", "prepared": 2, "start": 0.0, "end": 0.0}
    s = overlap.ssd_summary(events)
    assert (s["steps"], s["verdicts"], s["hits"], s["hit_rate"], s["depth_on_hit"]) == (2, 2, 1, 0.5, 2)
    assert s["hidden_s"] == pytest.approx(0.55 + 0.45)  # the parts of 0.65 s and 0.45 s under the passes
    assert s["draft_s"] == pytest.approx(0.2 + 0.65 + 0.45)
    assert s["wait_s"] == pytest.approx(0.1) and s["exposed_s"] == pytest.approx(0.2)
    tl = overlap.timeline(events)
    assert [(x["step"], x["kind"]) for x in tl["segments"]] == [
        (0, "draft"), (0, "verify"), (0, "prepare"), (0, "wait"), (1, "verify"), (1, "prepare")]
    assert tl["segments"][4]["start"] == pytest.approx(1.0)  # step 1 starts where step 0 ended
    assert [o["hit"] for o in tl["outcomes"]] == [True, False]


def test_plain_speculation_draws_draft_then_verify(tiny):
    events = list(generate(tiny, PROMPTS[0], method="spec", k=3, max_new_tokens=20))
    tl = overlap.timeline(events)
    assert overlap.ssd_summary(events) is None and tl["outcomes"] == []
    for a, b in zip(tl["segments"], tl["segments"][1:]):
        assert b["start"] >= a["end"] - 1e-9  # one lane at a time


def test_the_figure_marks_every_verdict(tiny):
    from specviz.render.timeline import timeline_figure

    events = list(generate(tiny, PROMPTS[0], method="ssd", k=3, max_new_tokens=30, ssd_prepare="full"))
    tl = overlap.timeline(events)
    fig = timeline_figure([("ssd", tl), ("spec", overlap.timeline(list(generate(tiny, PROMPTS[0], method="spec",
                                                                               k=3, max_new_tokens=30))))])
    marks = {t.name: len(t.x) for t in fig.data if t.type == "scatter"}
    hits = sum(o["hit"] for o in tl["outcomes"])
    assert marks.get("hit: next draft ready", 0) == hits
    assert marks.get("miss: next draft from scratch", 0) == len(tl["outcomes"]) - hits
    lanes = {y for t in fig.data if t.type == "bar" for y in t.y}
    assert lanes == {"ssd · draft", "ssd · target", "spec · draft", "spec · target"}


def test_the_theory_ceiling_and_floor():
    c, k = 0.2, 4
    # every outcome prepared in time, on hardware of its own: the drafting is gone from the step
    assert theory.ssd_speedup(1.0, k, c, wait=0.0) == pytest.approx(1 + c * k)
    assert theory.ssd_speedup(1.0, k, c, wait=0.0, overhead=0.25) == pytest.approx(1 + c * k / 1.25)
    # never a hit: plain speculation's step
    assert theory.ssd_speedup(0.0, k, c, wait=0.0) == pytest.approx(1.0)
    # sharing the cores doubles the pass: the hidden drafting does not pay for it
    assert theory.ssd_speedup(0.9, k, c, slowdown=2.0, wait=0.0) < 1.0
    # preparation longer than the pass is waited for
    assert theory.ssd_speedup(1.0, k, 0.5) == pytest.approx((0.5 * k + 1) / ((k + 1) * 0.5))


def test_the_step_panel_says_what_was_prepared_and_how_the_check_ended(tiny):
    from specviz.render import panel, steps

    events = [e.to_dict() for e in generate(tiny, PROMPTS[0], method="ssd", k=3, max_new_tokens=30,
                                           ssd_prepare="full")]
    run = steps.build(events)
    notes = {s.step: " / ".join(panel.step_notes(s, run.texts())) for s in run.steps}
    for s in run.steps:
        info = s.info["ssd"]
        if info.get("prepared"):
            assert f"{len(info['prepared'])} outcome(s) were prepared" in notes[s.step]
            assert ("a hit: the next step's draft is ready" in notes[s.step]) == info["hit"]
        if s.step and info["draft"]["from"] == "prepared":
            assert "this step's draft was ready" in notes[s.step]
    html = panel.step_panel(run, run.steps[1].step).html
    assert "outcome(s) were prepared" in html


def test_the_app_shows_ssd_beside_the_spec_run_on_the_same_prompt(tiny):
    from specviz.render import charts, timeline

    spec = [e.to_dict() for e in generate(tiny, PROMPTS[0], method="spec", k=3, max_new_tokens=20)]
    other = [e.to_dict() for e in generate(tiny, PROMPTS[1], method="spec", k=3, max_new_tokens=20)]
    ssd_run = [e.to_dict() for e in generate(tiny, PROMPTS[0], method="ssd", k=3, max_new_tokens=20)]
    history = [charts.summarize(spec), charts.summarize(other)]
    runs = timeline.beside(ssd_run, history)
    assert [label for label, _ in runs] == ["ssd k=3", "spec k=3"]
    assert runs[1][1] == history[0]["timeline"]  # the spec run on the same prompt, not the latest one
    assert [label for label, _ in timeline.beside(other, history)] == ["spec k=3"]  # no ssd run on that prompt


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_on_cuda_the_preparation_runs_on_a_second_stream_and_stays_exact(monkeypatch):
    pair = build_tiny_pair(device="cuda", dtype="float32")
    streams = set()
    levels = ssd.SSDDrafter._levels

    def spy(self, *args):
        streams.add(torch.cuda.current_stream().cuda_stream)
        return levels(self, *args)

    monkeypatch.setattr(ssd.SSDDrafter, "_levels", spy)
    for prompt in PROMPTS:
        ar = list(generate(pair, prompt, method="ar", max_new_tokens=32))[-1]
        run = list(generate(pair, prompt, method="ssd", k=3, max_new_tokens=32))
        assert run[-1].token_ids == ar.token_ids
        assert _steps(run)[0].info["ssd"]["threads"] == "cuda streams"
    assert streams and torch.cuda.default_stream().cuda_stream not in streams


def test_with_an_int8_draft_greedy_is_still_ar(tiny):
    from specviz.runtime.quant import quantize_draft

    q = quantize_draft(tiny, "int8")
    for prompt in PROMPTS:
        ar = list(generate(tiny, prompt, method="ar", max_new_tokens=30))[-1]
        run = list(generate(q, prompt, method="ssd", k=3, max_new_tokens=30))
        assert run[-1].token_ids == ar.token_ids
        assert run[0].draft_quant == "int8"
