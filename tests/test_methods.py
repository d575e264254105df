"""Every method beyond the plain chain: greedy-exact, distribution-exact, and lossy when it says so."""

import pytest

from specviz import generate
from specviz.drafters.lookup import lookup
from specviz.sampling import Warp

from test_distribution import RUNS, _first_tokens, _p_value, _target_joint, toy  # noqa: F401

REPEATS = "def add(a, b):\n    return a + b\n\ndef add3(a, b, c):\n    return a + b + c\n\ndef add"
PROMPTS = ["def fibonacci(n):", REPEATS]
EXACT = [
    dict(method="pld"), dict(method="pld", ngram=1, k=8), dict(method="cascade"),
    dict(method="cascade", k=2, ngram=2), dict(method="spec", k="auto"),
    dict(method="spec", k="auto", auto_rule="heuristic"),
    dict(method="spec", k="auto", auto_rule="confidence", confidence=0.5),
    dict(method="cascade", k="auto", auto_rule="heuristic"),
]


def ids(kw):
    return ",".join(f"{k}={v}" for k, v in kw.items())


@pytest.mark.parametrize("kw", EXACT, ids=[ids(kw) for kw in EXACT])
@pytest.mark.parametrize("prompt", PROMPTS, ids=["code", "repeats"])
def test_greedy_equals_ar(tiny, prompt, kw):
    expected = list(generate(tiny, prompt, method="ar", max_new_tokens=40))[-1].token_ids
    events = list(generate(tiny, prompt, max_new_tokens=40, **kw))
    assert events[-1].token_ids == expected
    assert events[0].lossless and events[-1].metrics["lossless"]


def test_lookup_finds_latest_longest_match():
    tokens = [1, 2, 3, 9, 1, 2, 3, 7, 8, 5, 1, 2, 3]
    found = lookup(tokens, 2, max_ngram=3)
    assert found == {"tokens": [7, 8], "ngram": 3, "match": [4, 7], "copied": [7, 9]}
    assert lookup([4, 5, 6], 3) is None
    assert lookup([5, 1, 5], 3, max_ngram=2)["tokens"] == [1, 5]


def test_pld_events_name_the_copied_span(tiny):
    events = list(generate(tiny, REPEATS, method="pld", k=4, max_new_tokens=12))
    drafts = [e for e in events if e.kind == "draft_proposed"]
    assert drafts and all(e.source["kind"] == "ngram" and e.q == 1.0 for e in drafts)
    committed = events[0].prompt_ids + events[-1].token_ids
    for e in drafts:  # the drafted token is the one at the position it says it copied
        assert committed[e.source["copied_from"]] == e.token_id or e.source["copied_from"] >= len(committed)


def test_cascade_counts_its_own_work(tiny):
    m = list(generate(tiny, REPEATS, method="cascade", k=4, max_new_tokens=40))[-1].metrics
    c = m["counters"]
    assert c["draft_forwards"] == m["draft_forwards"] and c["ngram_proposed"] >= c["ngram_accepted"] >= 0
    assert c["draft_forwards"] <= m["drafted"]  # n-gram hits save draft forwards, never add


def test_auto_k_records_choice_and_reason(tiny):
    for rule in ("heuristic", "confidence", "cost"):
        events = list(generate(tiny, PROMPTS[0], k="auto", auto_rule=rule, max_new_tokens=30))
        steps = [e for e in events if e.kind == "step_finished"]
        assert all(s.info["k_rule"] == rule and s.info["why"].startswith(rule) for s in steps)
        assert events[-1].metrics["k_chosen"] == [s.info["k_chosen"] for s in steps]
        assert all(s.drafted <= s.info["k_chosen"] for s in steps)


def test_heuristic_schedule_moves_plus_two_minus_one(tiny):
    steps = [e for e in generate(tiny, PROMPTS[0], k="auto", auto_rule="heuristic", max_new_tokens=60)
             if e.kind == "step_finished"]
    for before, after in zip(steps, steps[1:]):
        full = before.accepted == before.drafted
        expected = min(before.info["k_chosen"] + 2, 12) if full else max(1, before.info["k_chosen"] - 1)
        assert after.info["k_chosen"] == expected


def test_typical_acceptance_is_marked_lossy(tiny):
    events = list(generate(tiny, PROMPTS[0], acceptance="typical", max_new_tokens=30))
    assert events[0].lossless is False and events[0].rule == "typical (lossy)"
    assert events[-1].metrics["lossless"] is False
    assert all(e.rule == "typical (lossy)" for e in events if e.kind in ("token_accepted", "token_rejected"))


@pytest.mark.parametrize("method", ["pld", "cascade"])
def test_sampling_distribution_exact(toy, method):  # noqa: F811
    """Deterministic n-gram proposals (one-hot q) keep the output law exactly the target's."""
    warp, prompt = Warp(1.0), (0, 1, 2, 3, 0, 1, 2, 3, 0)  # repeats give the lookup something to copy
    counts, runs = _first_tokens(toy, warp, runs=RUNS // 2, k=2, method=method, prompt=prompt)
    assert _p_value(counts, _target_joint(toy, warp, prompt), RUNS // 2) > 1e-4
    kinds = [e.kind for events in runs for e in events]
    assert kinds.count("draft_proposed") > RUNS // 2 and kinds.count("token_rejected") > RUNS // 20
