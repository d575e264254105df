"""The engines bench's arithmetic (specviz.bench.engines), on hand-made costs and lanes: the draft
length chosen from an engine's verify-cost curve, the lanes that choice adds, the prediction
beside the measurement, and the issue's three numbers read off a report. The timed run itself
is a benchmark (python -m specviz.bench.engines), not a test."""

import pytest

from specviz.analysis import theory
from specviz.bench import engines


def _cost(points: dict, c: float, one: float = 0.07) -> dict:
    """A cost section as cost_section writes it: the curve (in one-token passes) through the
    given points, at every n the bench measures, and the target's pass seconds."""
    curve = theory.interpolate_cost(list(points.items()))
    return {"target_s": {str(n): curve(n) * one for n in engines.COST_TOKENS}, "c": c, "draft_1_s": c * one,
            "curve": {str(n): curve(n) for n in engines.COST_TOKENS}}


# llama.cpp's Q4_K_M shape: its batched kernels take activations four rows at a time, so a pass
# over 4 tokens is cheap and one over 5 pays for a second block
STEPPED = _cost({1: 1.0, 2: 1.47, 3: 1.76, 4: 1.59, 5: 2.08, 6: 2.38, 8: 2.95, 12: 3.56}, c=0.54)
FLAT = _cost({1: 1.0, 4: 1.0, 8: 1.02, 12: 1.02}, c=0.43)  # PyTorch bf16 on CPU: flat past 8 tokens


def test_the_curve_chooses_k_on_its_step_and_further_where_it_is_flat():
    assert engines.best_k(STEPPED, 0.97) == 3  # k + 1 = 4: the verify pass still fits one block
    assert engines.best_k(FLAT, 0.97) == engines.K_CHOICES  # nothing stops a long draft but alpha
    assert engines.best_k(FLAT, 0.5) == 1  # E[tokens] 1.5 for 1.43 passes; k = 2: 1.75 for 1.86
    assert engines.best_k(_cost({1: 1.0, 2: 2.0, 3: 3.0}, c=0.9), 0.6) == 0  # compute-bound: never pays
    assert engines.best_k(STEPPED, None) == 0
    # the choice is the theory's maximum, not a rule of thumb
    curve = theory.interpolate_cost([(int(n), s) for n, s in STEPPED["target_s"].items()])
    gains = {k: theory.speedup_with_cost(0.97, k, 0.54, curve) for k in range(1, 9)}
    assert max(gains, key=gains.get) == 3 and gains[3] > gains[4] > 1.0


def test_a_lane_at_the_curves_k_is_added_only_where_no_fixed_lane_has_it():
    assert engines.lanes_for(3)["spec-best"] == {"method": "spec", "k": 3}
    assert set(engines.lanes_for(4)) == set(engines.LANES)
    assert set(engines.lanes_for(0)) == set(engines.LANES)


def _lane(tps, alpha=None, drafted=()):
    return {"decode_tokens_per_s": tps, "alpha": alpha, "drafted": list(drafted), "tau": None, "token_ids": []}


def test_predictions_use_each_lanes_own_k_and_the_curve():
    options = engines.lanes_for(3)
    lanes = {"ar": _lane(14.0), "spec-k4": _lane(15.0, 0.97, [4] * 10), "spec-best": _lane(17.0, 0.97, [3] * 10)}
    pred = engines.predictions(STEPPED, lanes, options)
    curve = theory.interpolate_cost([(int(n), s) for n, s in STEPPED["target_s"].items()])
    assert pred["spec-best"]["k"] == 3
    assert pred["spec-best"]["verify_cost"] == pytest.approx(1.59)
    assert pred["spec-best"]["predicted"] == pytest.approx(theory.speedup_with_cost(0.97, 3, 0.54, curve))
    assert pred["spec-best"]["measured"] == pytest.approx(17.0 / 14.0)
    assert pred["spec-k4"]["verify_cost"] == pytest.approx(2.08)


def _report(ours_best: float, theirs: dict) -> dict:
    lanes = {"ar": _lane(14.0), "spec-k4": _lane(15.0, 0.97, [4] * 10), "spec-best": _lane(ours_best, 0.97, [3] * 10)}
    own = {name: {"decode_tokens_per_s": tps, "draft_n": 0, "draft_accepted": 0, "acceptance": None}
           for name, tps in theirs.items()}
    return {"engines": {"llama.cpp-q4_k_m": {"cost": STEPPED, "k_best": 3, "lanes": lanes,
                                             "predictions": engines.predictions(STEPPED, lanes, engines.lanes_for(3))}},
            "own": own, "tokens": 64, "machine": {"cpu": "test", "threads": 2}}


def test_the_fastest_lane_is_compared_with_llamacpps_best_configuration():
    met = engines.analyse(_report(17.5, {"own-ar": 16.7, "own-spec": 13.6, "own-spec-k3": 15.0}))
    assert met["fastest"]["specviz"] == "llama.cpp-q4_k_m/spec-best" and met["fastest"]["llama.cpp"] == "own-ar"
    assert met["fastest"]["met"] is True
    assert met["ar_over_llamacpp_vs_own_ar"]["ratio"] == pytest.approx(14.0 / 16.7)
    missed = engines.analyse(_report(16.0, {"own-ar": 16.7, "own-spec-k3": 18.0}))
    assert missed["fastest"]["llama.cpp"] == "own-spec-k3" and missed["fastest"]["met"] is False


def test_the_report_names_the_curves_k_and_its_lane():
    report = _report(17.5, {"own-ar": 16.7})
    report["analysis"] = engines.analyse(report)
    text = engines.markdown(report)
    row = next(line for line in text.splitlines() if line.startswith("| llama.cpp-q4_k_m | 0.54"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[8:10] == ["3", "17.5"]  # best k (curve), spec at that k
    assert "spec-best (17.5 tok/s)" not in text and "llama.cpp-q4_k_m/spec-best 17.5 tok/s" in text
