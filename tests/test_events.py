"""Invariants of the event stream over many seeds and settings, and JSONL round trips."""

import json
import random

import pytest

from specviz import events as ev
from specviz import generate, metrics, trace


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
