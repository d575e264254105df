"""Greedy speculative decoding is token-for-token autoregressive decoding, whatever the drafter
gets right or wrong, wherever EOS or the length limit falls."""

import dataclasses

import pytest

from specviz import events as ev, generate
from specviz.drafters.scripted import ScriptedDrafter

PROMPTS = ["def fibonacci(n):", "Hello, world! ", "x"]


def run(pair, prompt, **kw):
    return list(generate(pair, prompt, **kw))


def ar_ids(pair, prompt, n, **kw):
    return run(pair, prompt, method="ar", max_new_tokens=n, **kw)[-1].token_ids


def kinds(events, kind):
    return [e for e in events if e.kind == kind]


@pytest.mark.parametrize("k", [1, 2, 4, 8])
@pytest.mark.parametrize("prompt", PROMPTS)
def test_greedy_spec_equals_ar_tiny(tiny, prompt, k):
    expected = ar_ids(tiny, prompt, 40)
    events = run(tiny, prompt, method="spec", k=k, max_new_tokens=40)
    assert events[-1].token_ids == expected
    assert len(expected) == 40 or events[-1].finish_reason == "eos"


def test_tiny_pair_shows_every_outcome(tiny):
    """The tiny draft agrees with the target often but not always."""
    events = run(tiny, PROMPTS[0], k=4, max_new_tokens=64)
    for kind in ("token_accepted", "token_rejected", "residual_sampled", "bonus_sampled"):
        assert kinds(events, kind), kind
    alpha = events[-1].metrics["alpha_empirical"]
    assert 0.3 < alpha < 0.95


@pytest.mark.parametrize("correct", [0, 1, 2, 3, 4])
def test_scripted_partial_acceptance(tiny, correct):
    """A drafter right for exactly `correct` tokens per step: exactly that many are accepted,
    the next one is rejected and replaced by the target's own token."""
    prompt, n, k = PROMPTS[0], 30, 4
    truth = ar_ids(tiny, prompt, n + k)
    drafter = ScriptedDrafter(truth, correct, vocab_size=len(tiny.tokenizer))
    events = run(tiny, prompt, k=k, max_new_tokens=n, drafter=drafter)
    assert events[-1].token_ids == truth[:n]
    for step in kinds(events, "step_finished"):
        assert step.accepted == min(correct, step.drafted)
        if step.drafted > correct:
            assert step.evaluated == correct + 1
    wrong_steps = [s for s in kinds(events, "step_finished") if s.drafted > correct]
    assert len(kinds(events, "token_rejected")) == len(wrong_steps)
    assert len(kinds(events, "residual_sampled")) == len(wrong_steps)


@pytest.mark.parametrize("n", [1, 2, 5, 7, 13])
def test_length_limit_mid_step(tiny, n):
    events = run(tiny, PROMPTS[0], k=4, max_new_tokens=n)
    assert events[-1].token_ids == ar_ids(tiny, PROMPTS[0], n)
    assert len(events[-1].token_ids) == n and events[-1].finish_reason == "length"
    emitted = 0
    for step in kinds(events, "step_finished"):
        assert step.drafted <= n - emitted - 1  # never drafts past the limit
        emitted += len(step.emitted_ids)


def _with_eos_at(tiny, prompt, at):
    """The tiny pair with the token the target emits at index `at` declared as EOS."""
    truth = ar_ids(tiny, prompt, 40)
    i = next(i for i in range(at, 40) if truth[i] not in truth[:i])
    return dataclasses.replace(tiny, eos_token_ids=[truth[i]], _texts={}), truth, i


@pytest.mark.parametrize("k", [1, 4, 8])
def test_eos_inside_a_draft(tiny, k):
    pair, truth, i = _with_eos_at(tiny, PROMPTS[0], 6)
    assert ar_ids(pair, PROMPTS[0], 40) == truth[:i + 1]
    spec = run(pair, PROMPTS[0], k=k, max_new_tokens=40)
    assert spec[-1].token_ids == truth[:i + 1] and spec[-1].finish_reason == "eos"
    scripted = run(pair, PROMPTS[0], k=k, max_new_tokens=40,
                   drafter=ScriptedDrafter(truth, k, vocab_size=len(tiny.tokenizer)))
    assert scripted[-1].token_ids == truth[:i + 1]
    last = kinds(scripted, "step_finished")[-1]
    if i % k != k - 1 or k == 1:
        # EOS was drafted and accepted mid-run; no bonus after it, nothing drafted past it
        assert kinds(scripted, "token_accepted")[-1].token_id == truth[i]
        assert not [e for e in scripted if e.kind == "bonus_sampled" and e.step == last.step]
        assert kinds(scripted, "draft_proposed")[-1].token_id == truth[i]


@pytest.mark.parametrize("method,temperature", [("ar", 0.0), ("spec", 0.0), ("pld", 0.0), ("tree", 0.0),
                                                ("ar", 1.0), ("spec", 1.0)])
def test_ignore_eos_runs_to_the_count(tiny, method, temperature):
    """ignore_eos: end of text stops nothing, so two lanes of a race emit the same number of
    tokens; greedy, the tokens are still AR's (run past the EOS), and the EOS itself is emitted."""
    pair, truth, i = _with_eos_at(tiny, PROMPTS[0], 6)
    # a seed whose run, left alone, ends on that EOS: the case ignore_eos must change
    seed = next(seed for seed in range(50) if run(pair, PROMPTS[0], method=method, k=4, temperature=temperature,
                                                    max_new_tokens=40, seed=seed)[-1].finish_reason == "eos")
    events = run(pair, PROMPTS[0], method=method, k=4, temperature=temperature, max_new_tokens=40, seed=seed,
                 ignore_eos=True)
    assert len(events[-1].token_ids) == 40 and events[-1].finish_reason == "length"
    assert events[0].eos_token_ids == [] and events[0].options.get("ignore_eos") is True
    if temperature == 0:
        assert events[-1].token_ids == truth[:40] and truth[i] in events[-1].token_ids


def test_ignore_eos_in_a_batch(tiny):
    """The batched engine runs every row to the count as well."""
    pair, truth, i = _with_eos_at(tiny, PROMPTS[0], 6)
    rows = [e for e in run(pair, [PROMPTS[0], PROMPTS[1]], method="spec", k=4, max_new_tokens=30, ignore_eos=True)
            if e.kind == "run_finished"]
    assert [len(r.token_ids) for r in rows] == [30, 30] and rows[0].token_ids == truth[:30]


def test_same_seed_same_events(tiny):
    def stripped(seed):
        return [ev.without_timings(e.to_dict()) for e in
                run(tiny, PROMPTS[0], k=3, temperature=1.0, top_p=0.9, max_new_tokens=30, seed=seed)]

    assert stripped(5) == stripped(5)
    assert stripped(5) != stripped(6)


def test_token_ids_prompt_and_chat(tiny):
    ids = tiny.encode("abc")
    assert run(tiny, ids, max_new_tokens=5)[-1].token_ids == run(tiny, "abc", max_new_tokens=5)[-1].token_ids
    chat = run(tiny, "abc", chat=True, max_new_tokens=3)
    assert chat[0].prompt_ids[:1] == tiny.encode("<|im_start|>") and chat[0].chat is True


@pytest.mark.parametrize("kwargs, message", [
    (dict(prompt=""), "prompt is empty"),
    (dict(prompt="   "), "prompt is empty"),
    (dict(k=0), "k (draft length)"),
    (dict(k=1000), "k (draft length)"),
    (dict(k=2.5), "k (draft length)"),
    (dict(temperature=-1.0), "temperature"),
    (dict(temperature=float("nan")), "temperature"),
    (dict(top_p=0.0), "top_p"),
    (dict(top_p=1.5), "top_p"),
    (dict(top_k=-3), "top_k"),
    (dict(max_new_tokens=0), "max_new_tokens"),
    (dict(max_new_tokens=10**6), "max_new_tokens"),
    (dict(method="beam"), "Unknown method"),
    (dict(seed=-1), "seed"),
    (dict(prompt="a" * 1000), "does not fit"),
    (dict(prompt=[5, 10**6]), "token ids"),
])
def test_bad_input_is_refused_at_call_time(tiny, kwargs, message):
    from specviz.errors import InputError

    kwargs = {"prompt": "def f(x):", "max_new_tokens": 64, **kwargs}
    prompt = kwargs.pop("prompt")
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        generate(tiny, prompt, **kwargs)  # raises before the first event is asked for


@pytest.mark.parametrize("kw", [dict(method="ar"), dict(method="spec", k=3), dict(method="tree", tree="2,2"),
                                dict(method="pld", k=4), dict(method="lookahead")])
def test_one_target_pass_per_step_and_the_prefill_rides_with_the_first(tiny, kw):
    """No separate prefill pass: the target runs exactly once per step, step 0's pass carries the
    prompt (StepFinished.prefill), and c is measured on the other steps' passes."""
    calls, drafts = [], []
    handles = [tiny.target.register_forward_pre_hook(lambda mod, args, kwargs: calls.append(
        kwargs["input_ids"].shape[1]), with_kwargs=True),
        tiny.draft.register_forward_pre_hook(lambda mod, args, kwargs: drafts.append(
            kwargs["input_ids"].shape[1]), with_kwargs=True)]
    try:
        events = list(generate(tiny, "def f(x):", max_new_tokens=12, **kw))
    finally:
        for handle in handles:
            handle.remove()
    # the draft model runs exactly the forwards the events count; its first one takes the prompt
    assert len(drafts) == events[-1].metrics["draft_forwards"]
    if drafts:
        assert drafts[0] == len(events[0].prompt_ids)
    steps = [e for e in events if e.kind == "step_finished"]
    prompt = events[0].prompt_ids
    assert len(calls) == len(steps) == events[-1].metrics["target_forwards"]
    assert steps[0].prefill == len(prompt) - 1 and all(s.prefill == 0 for s in steps[1:])
    assert calls[0] == len(prompt) + steps[0].drafted
    m = events[-1].metrics
    assert m["decode_target_forwards"] == len(steps) - 1
    assert m["decode_verify_time"] == pytest.approx(sum(s.verify_time for s in steps[1:]))


def test_c_leaves_out_the_pass_that_carried_the_prefill():
    from specviz.analysis.metrics import fold

    def step(i, prefill, verify):
        return {"kind": "step_finished", "step": i, "k": 2, "drafted": 2, "accepted": 2, "evaluated": 2,
                "emitted_ids": [1, 2, 3], "emitted_texts": ["a", "b", "c"], "beta": [1, 1], "draft_time": 0.1,
                "verify_time": verify, "draft_forwards": 2, "target_forwards": 1, "elapsed": 1.0 + i,
                "finish_reason": None, "info": None, "prefill": prefill}

    stats = fold([step(0, 30, 2.0), step(1, 0, 0.1), step(2, 0, 0.1)])
    assert stats.c == pytest.approx(0.05 / 0.1) and stats.verify_time == pytest.approx(2.2)
    assert stats.verify_s_per_forward == pytest.approx(0.1) and stats.draft_s_per_forward == pytest.approx(0.05)
    assert stats.decode_draft_forwards == 4 and stats.draft_forwards == 6
    assert fold([step(0, 30, 2.0)]).c == pytest.approx(0.05 / 2.0)  # one step: nothing else to use
    ar = [{**step(i, prefill, verify), "draft_forwards": 0, "draft_time": 0.0, "drafted": 0}
          for i, (prefill, verify) in enumerate([(30, 2.0), (0, 0.1), (0, 0.1)])]
    stats = fold(ar)  # autoregressive: a verification pass costs what the decode steps cost
    assert stats.verify_s_per_forward == pytest.approx(0.1) and stats.draft_s_per_forward is None and stats.c is None


# -- the decoding thread's CPU clock (is the machine busy?) ------------------------------------

def test_cpu_clock_leaves_out_the_consumer_even_when_it_resumes_the_run_on_other_threads(tiny):
    """A server may call next() from any thread of its pool, and a consumer's own work between
    events is not the run's: cpu_elapsed must stay a clock of the run's compute only."""
    import time
    from concurrent.futures import ThreadPoolExecutor

    def burn(seconds):  # CPU work on the calling thread: its thread_time moves on by `seconds`
        end = time.thread_time() + seconds
        while time.thread_time() < end:
            pass

    pools = [ThreadPoolExecutor(1), ThreadPoolExecutor(1)]
    pools[0].submit(burn, 0.3).result()  # the two threads' CPU clocks now differ by 0.3 s
    it = generate(tiny, PROMPTS[0], method="spec", k=3, max_new_tokens=20)
    events, consumer = [], 0.0
    try:
        while True:
            event = pools[len(events) % 2].submit(next, it, None).result()
            if event is None:
                break
            events.append(event)
            burn(0.005)
            consumer += 0.005
    finally:
        for pool in pools:
            pool.shutdown()
    steps = kinds(events, "step_finished")
    clocks = [s.cpu_elapsed for s in steps]
    assert clocks == sorted(clocks) and clocks[0] >= 0
    assert all(s.cpu_elapsed <= s.elapsed + 0.02 for s in steps)  # one thread: never more CPU than wall
    assert clocks[-1] < consumer / 2


def test_a_cpu_burner_lowers_the_recorded_cpu_share(tiny):
    """Processes spinning on every core (twice over) take the decoding thread off the cores: the
    share the engine records falls below the busy threshold and the run is judged unreliable."""
    import os
    import subprocess
    import sys

    from specviz.analysis.metrics import BUSY_SHARE, MIN_SECONDS, judge_timing

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    spin = "print('go', flush=True)\nwhile True:\n    pass\n"
    burners = [subprocess.Popen([sys.executable, "-c", spin], stdout=subprocess.PIPE, text=True)
               for _ in range(2 * cores)]
    try:
        for burner in burners:
            assert burner.stdout.readline().strip() == "go"  # spinning before anything is timed
        cpu = elapsed = 0.0
        for seed in range(20):  # a few runs: enough compute for the clocks to mean something
            last = kinds(run(tiny, PROMPTS[seed % 3], temperature=1.0, seed=seed, max_new_tokens=80),
                         "step_finished")[-1]
            cpu, elapsed = cpu + last.cpu_elapsed, elapsed + last.elapsed
            if elapsed >= 2 * MIN_SECONDS:
                break
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    assert cpu / elapsed < BUSY_SHARE
    assert judge_timing(cpu / elapsed, None, "cpu", elapsed).reliable is False


def test_every_runner_answers_the_calls_the_engine_makes():
    # runtime/lm.py's Runner is what docs/architecture.md tells a new runtime to implement: every
    # runner the project has implements each of its calls with the same parameters
    import inspect

    from specviz.runtime.lm import CachedLM, GraphLM, Runner
    from specviz.runtime.llamacpp.runner import LlamaCppRunner
    from specviz.teaching.toy import TableRunner

    calls = {name: inspect.signature(getattr(Runner, name)) for name in ("forward", "crop", "keep", "reset")}
    for runner in (CachedLM, GraphLM, LlamaCppRunner, TableRunner):
        for name, want in calls.items():
            got = inspect.signature(getattr(runner, name))
            assert list(got.parameters) == list(want.parameters), (runner.__name__, name, got)
