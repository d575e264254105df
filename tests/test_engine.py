"""Greedy speculative decoding is token-for-token autoregressive decoding, whatever the drafter
gets right or wrong, wherever EOS or the length limit falls."""

import dataclasses

import pytest

from specviz import events as ev
from specviz import generate
from specviz.drafters import ScriptedDrafter

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
