"""SSD's speed predicted apart from any SSD run (specviz.analysis.ssd_model, specviz.bench.ssd):
the outcomes follow from the draft's ranks on the held text exactly as the engine's plain
speculation decides them; the preparation model on hand-computed cases; the prediction reads no
SSD timing (change every SSD number of a report and it stays); the decomposition is labelled as
one; AR is timed inside the rotation."""

import copy

import pytest

from specviz import generate
from specviz.analysis import ssd_model, theory
from specviz.bench import ssd as bench_ssd
from specviz.runtime.tiny_pair import build_tiny_pair

PROMPTS = ["def fibonacci(n):", "Hello, world! ", "import os\nfor name in os.listdir('.'):"]


@pytest.fixture(scope="module")
def tiny():
    return build_tiny_pair()


def test_spec_outcomes_on_hand_built_ranks():
    # ranks of the text's tokens among the draft's candidates: 0 = the draft's top token
    ranks = [0, 0, 2, 0, 0, 0, None, 1]
    assert ssd_model.spec_outcomes(ranks, 3) == [
        (2, 3, "residual", 1),   # x1, x2 accepted; the text's token ranked 2, 1 without the rejected draft
        (3, 3, "bonus", None),   # positions 3-5 accepted; the bonus ranks below RANKS
        (0, 0, "bonus", 1),      # the length limit leaves no draft: the last token is the pass's own
    ]
    assert ssd_model.spec_outcomes([0, 0], 5) == [(1, 1, "bonus", 0)]  # the limit: one draft, then the last token


@pytest.mark.parametrize("k", [1, 3, 5])
def test_outcomes_from_ranks_are_the_engines_verdicts(tiny, k):
    """Greedy plain speculation's accepted count at every step follows from the draft's ranks on
    AR's text alone: the prediction's outcomes are the engine's, not a model of them."""
    for prompt in PROMPTS:
        ids = tiny.encode(prompt)
        ar = list(generate(tiny, prompt, method="ar", max_new_tokens=29))[-1].token_ids
        spec = [e for e in generate(tiny, prompt, method="spec", k=k, max_new_tokens=29) if e.kind == "step_finished"]
        predicted = ssd_model.spec_outcomes(bench_ssd.draft_ranks(tiny, ids, ar), k)
        assert [(a, d) for a, d, _, _ in predicted] == [(s.accepted, s.drafted) for s in spec], (prompt, k)


def test_modelled_hits_replays_the_drafters_own_model():
    texts = [[0] * 12, [1, 0, 0, 3, 0, 0, 0, 0, 2, 0]]
    hits, verdicts = ssd_model.modelled_hits(texts, 2, 3)
    # by hand, replaying OutcomeModel.plan before each observe
    expected_hits = expected_verdicts = 0
    for ranks in texts:
        model = ssd_model.OutcomeModel()
        for a, d, kind, rank in ssd_model.spec_outcomes(ranks, 2):
            if d:
                expected_verdicts += 1
                expected_hits += (a, rank) in [(pa, pr) for pa, pr, _ in model.plan(d, 3)]
                model.observe(a, d, kind, rank)
    assert (hits, verdicts) == (expected_hits, expected_verdicts) and 0 < hits < verdicts
    assert ssd_model.modelled_hits([[0] * 12], 2, 1)[0] > 0  # all accepted: (k, rank 0) is planned first


def test_preparation_on_hand_computed_cases():
    # a pass of 0.25 s, draft forwards of 0.1 s: 2.5 forwards fit; the third finishes 0.05 s late
    prep = ssd_model.preparation(0.25, 0.1, 4)
    assert prep["ready"] == 2 and prep["wait_s"] == pytest.approx(0.05) and prep["forwards_in_pass"] == 2.5
    full = ssd_model.preparation(0.25, 0.1, 1)  # k + 1 = 2 forwards fit: all prepared, no wait
    assert full == {"forwards_in_pass": 2.5, "ready": 1.0, "wait_s": 0.0}
    assert ssd_model.preparation(0.05, 0.1, 3)["ready"] == 0  # not even x_K's forward fits


def _report(k=3):
    """A finished bench.ssd report in miniature: one prompt, its ranks, spec and ssd costs."""
    spec_costs = {"steps": 10, "tokens": 40, "seconds": 4.0, "draft_s": 1.2, "draft_forwards": 30,
                  "verify_s": 2.5, "wait_s": 0.0, "ready_steps": 0, "ready_drafts": 0, "other_s": 0.3}
    ssd_costs = {"steps": 10, "tokens": 40, "seconds": 4.4, "draft_s": 0.4, "draft_forwards": 10,
                 "verify_s": 3.6, "wait_s": 0.3, "ready_steps": 7, "ready_drafts": 14, "other_s": 0.1}
    summary = {"steps": 11, "verdicts": 10, "hits": 8, "draft_s": 2.0, "hidden_s": 1.4}
    prompt = {"kind": "code", "text": "x", "ar": {"tokens": 40, "seconds": 8.0}, "ar_in_rotation": True,
              "ranks": [0, 0, 1, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 1, 0, 0, 0] * 2,
              "lanes": {f"spec-k{k}": {"tokens": 40, "seconds": 4.0, "forced": 0, "costs": spec_costs},
                        f"ssd-k{k}": {"tokens": 40, "seconds": 4.4, "forced": 0, "costs": ssd_costs, "ssd": summary}}}
    split = {str(k): {"cores": 2, "draft_threads": 1, "target_threads": 1, "target_all": 0.25,
                      "target_share": 0.36, "draft_share_alone": 0.1, "target_beside_draft": 0.4,
                      "draft_beside_target": 0.11}}
    return {"settings": {"pair": "tiny", "kinds": ["code"], "prompts": 1, "tokens": 40, "spec_k": [k],
                         "ssd_k": [k], "fanout": 4}, "prompts": [prompt], "split": split}


def test_the_prediction_reads_no_ssd_timing():
    report = _report()
    row = bench_ssd.analyse(report)["code"]["ssd"]["3"]
    changed = copy.deepcopy(report)
    lane = changed["prompts"][0]["lanes"]["ssd-k3"]
    lane["seconds"] *= 3
    for key in ("seconds", "verify_s", "wait_s", "other_s", "draft_s"):
        lane["costs"][key] *= 3
    lane["costs"]["ready_steps"], lane["ssd"]["hits"] = 1, 1
    again = bench_ssd.analyse(changed)["code"]["ssd"]["3"]
    assert again["vs_spec_predicted"] == row["vs_spec_predicted"]  # nothing of the SSD run goes in
    assert again["vs_spec_measured"] != row["vs_spec_measured"]
    assert again["error"] == pytest.approx(again["vs_spec_predicted"] / again["vs_spec_measured"] - 1)
    # the decomposition adds the SSD run's own parts back up: it follows the run, and is named so
    assert again["vs_spec_decomposed"] != row["vs_spec_decomposed"]


def test_the_prediction_is_the_formula_on_the_inputs_measured_apart():
    report = _report()
    row = bench_ssd.analyse(report)["code"]["ssd"]["3"]
    i = row["predicted_inputs"]
    v = 2.5 / 10
    assert i["c"] == pytest.approx(1.2 / 30 / v) and i["overhead"] == pytest.approx(0.3 / 10 / v)
    assert i["slowdown"] == pytest.approx(0.4 / 0.25)  # the split table's pass beside the drafter
    prep = ssd_model.preparation(0.4, 0.11, 3)
    assert i["ready"] == prep["ready"] and i["wait"] == pytest.approx(prep["wait_s"] / 0.25)
    hits, verdicts = ssd_model.modelled_hits([report["prompts"][0]["ranks"]], 3, 4)
    assert i["hit"] == pytest.approx(hits / verdicts)
    assert row["vs_spec_predicted"] == pytest.approx(
        theory.ssd_speedup(i["hit"], 3, i["c"], i["slowdown"], i["ready"], i["wait"], i["overhead"]))
    md = bench_ssd.markdown({**report, "analysis": bench_ssd.analyse(report)})
    assert "predicted apart" in md and "a decomposition of the measurement" in md


def test_a_report_without_ranks_says_it_has_no_prediction():
    report = _report()
    del report["prompts"][0]["ranks"]
    analysis = bench_ssd.analyse(report)
    assert "vs_spec_predicted" not in analysis["code"]["ssd"]["3"]
    assert "No prediction apart from the SSD runs" in bench_ssd.markdown({**report, "analysis": analysis})


def test_ar_is_timed_inside_the_rotation(tiny, monkeypatch):
    order = []
    real = bench_ssd.timed_run

    def spy(pair, cfg, ids, tokens, script=None):
        order.append("ar" if cfg.method == "ar" and script is None else f"{cfg.method}-k{cfg.k}")
        return real(pair, cfg, ids, tokens, script)

    monkeypatch.setattr(bench_ssd, "timed_run", spy)
    settings = {"spec_k": [2], "ssd_k": [2], "tokens": 8, "fanout": 2}
    prompt = type("P", (), {"kind": "code", "text": "def f(x):", "chat": False})()
    records = [bench_ssd.measure_prompt(tiny, settings, prompt, turn) for turn in range(3)]
    # each prompt: AR once for the held text, then the three lanes rotated, AR among them
    assert order == ["ar", "ar", "spec-k2", "ssd-k2", "ar", "spec-k2", "ssd-k2", "ar", "ar", "ssd-k2", "ar", "spec-k2"]
    # (turn 0: the held text, then ar first; turn 1: ar last; turn 2: ar in the middle)
    assert all(r["ar_in_rotation"] and len(r["ranks"]) == r["ar"]["tokens"] for r in records)
