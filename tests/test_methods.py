"""Every method beyond the plain chain: greedy-exact, distribution-exact, and lossy when it says so."""

import pytest
from test_distribution import RUNS, _first_tokens, _p_value, _target_joint, toy  # noqa: F401

from specviz import generate, methods
from specviz.events import check_trace, from_dict
from specviz.config import Warp
from specviz.drafters.lookup import lookup

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


def test_lookup_finds_the_first_longest_match():
    tokens = [1, 2, 3, 9, 1, 2, 3, 7, 8, 5, 1, 2, 3]
    found = lookup(tokens, 2, max_ngram=3)
    assert found == {"tokens": [9, 1], "ngram": 3, "match": [0, 3], "copied": [3, 5]}
    latest = lookup(tokens, 2, max_ngram=3, prefer="latest")
    assert latest == {"tokens": [7, 8], "ngram": 3, "match": [4, 7], "copied": [7, 9]}
    assert lookup([4, 5, 6], 3) is None
    assert lookup([5, 1, 5], 3, max_ngram=2)["tokens"] == [1, 5]
    assert lookup([7, 7, 7], 2, max_ngram=1) == {"tokens": [7, 7], "ngram": 1, "match": [0, 1], "copied": [1, 3]}


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


LOOKAHEAD = [dict(), dict(lookahead_window=3, ngram=2, lookahead_pool=2), dict(lookahead_window=8, ngram=4)]


@pytest.mark.parametrize("kw", LOOKAHEAD, ids=[ids(kw) or "default" for kw in LOOKAHEAD])
@pytest.mark.parametrize("prompt", PROMPTS + ["x"], ids=["code", "repeats", "x"])
def test_lookahead_greedy_equals_ar(tiny, prompt, kw):
    expected = list(generate(tiny, prompt, method="ar", max_new_tokens=50))[-1].token_ids
    events = list(generate(tiny, prompt, method="lookahead", max_new_tokens=50, **kw))
    assert events[-1].token_ids == expected


def test_lookahead_pool_learns_a_cycle():
    """On a model whose greedy continuation is a cycle, the trajectories' diagonal n-grams are
    right, so once the pool has them each pass accepts a whole (N - 1)-token n-gram plus one."""
    import torch

    from specviz.teaching.toy import TableLM, toy_pair

    table = torch.full((5, 5), -5.0)
    for a in range(5):
        table[a, (a + 1) % 5] = 5.0  # 0 -> 1 -> 2 -> 3 -> 4 -> 0
    model = TableLM(table, 2)
    events = list(generate(toy_pair(model, model), [0], method="lookahead", lookahead_window=5,
                           ngram=5, max_new_tokens=60))
    assert events[-1].token_ids == [(i + 1) % 5 for i in range(60)]
    steps = [e for e in events if e.kind == "step_finished"]
    assert events[-1].metrics["tau"] > 3.5
    assert steps[-2].info["lookahead"]["accepted"] == 4 and steps[-2].info["lookahead"]["accepted_from"] == "pool"
    # the Jacobi trajectory: a step's guesses are the previous step's outputs, shifted by what was kept
    for before, after in zip(steps, steps[1:]):
        shift, outputs = len(before.emitted_ids), before.info["lookahead"]["window_outputs"]
        carried = outputs[shift:shift + len(after.info["lookahead"]["window"])]
        assert after.info["lookahead"]["window"][:len(carried)] == carried


def test_lookahead_pool_is_used_and_shown(tiny):
    events = list(generate(tiny, REPEATS, method="lookahead", max_new_tokens=60))
    built = [e for e in events if e.kind == "tree_built"]
    assert all({n["source"]["kind"] for n in b.nodes} <= {"window", "pool"} for b in built)
    assert any(n["source"]["kind"] == "pool" for b in built for n in b.nodes)  # the pool offered candidates
    steps = [e for e in events if e.kind == "step_finished"]
    assert all(s.info["lookahead"]["accepted_from"] in ("window", "pool", "none") for s in steps)
    assert steps[-1].info["lookahead"]["pool_keys"] > 0


def test_lookahead_collects_diagonal_ngrams():
    from specviz.drafters.lookahead import LookaheadDrafter

    d = LookaheadDrafter(window=3, ngram=3)
    d.start([7, 8])
    d.levels = [{2: 1, 3: 2, 4: 3}]
    d.window = {2: 11, 3: 12, 4: 13}
    d._collect({2: 21, 3: 22, 4: 23, 5: 24})
    # iteration t at s, t + 1 at s + 1, t + 2 at s + 2
    assert d.pool == {1: [[12, 23]], 2: [[13, 24]]}


def test_lookahead_refuses_sampling(tiny):
    from specviz.errors import InputError

    with pytest.raises(InputError, match="greedy-only"):
        generate(tiny, "x", method="lookahead", temperature=0.7)
    with pytest.raises(InputError, match="n-gram size from 2"):
        generate(tiny, "x", method="lookahead", ngram=1)


@pytest.mark.parametrize("method", [m for m in methods.names() if not methods.get(m).heads])
def test_every_methods_trace_reads_back_through_the_schema(tiny, method):
    """A saved trace of any method opens again (the app's upload and the site's build read traces
    through the schema): lookahead's tree nodes once named their branch with a bare string, which
    the schema's `source` (an object) refused."""
    events = [e.to_dict() for e in generate(tiny, REPEATS, method=method, max_new_tokens=24)]
    assert [from_dict(e).to_dict() for e in events] == events
    check_trace(events)
