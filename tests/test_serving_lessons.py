"""Notebooks 7, 9 and 11: the batching crossover to trust comes from the paired report, each
notebook's own estimate is said beside it, and notebook 9's depth verdicts say "too few to tell"
where the steps cannot tell a curve from alpha^k."""

import copy
import json
from pathlib import Path

import pytest

from specviz.analysis.depth import MIN_STEPS, depth_verdict
from specviz.bench import crossover
from specviz.errors import SpecvizError

nbformat = pytest.importorskip("nbformat")

ROOT = Path(__file__).resolve().parents[1]
REPORT = json.loads((ROOT / "docs" / "benchmarks" / f"{crossover.REFERENCE}.json").read_text())
SERVING_NOTEBOOKS = ("07_adaptive_and_cascades", "09_latency_and_serving", "11_batching_kills_speculation")


def write(folder: Path, report: dict, name: str = "batched-test") -> str:
    (folder / f"{name}.json").write_text(json.dumps(report))
    return name


def test_the_reference_is_the_committed_paired_report():
    ref = crossover.reference()
    assert ref["stops_paying_at"] == REPORT["analysis"]["paired"]["stops_paying_at"]
    assert [r["batch"] for r in ref["rows"]] == REPORT["plan"]["batches"]
    assert ref["k"] == REPORT["plan"]["lane_options"]["spec"]["k"]
    said = crossover.summary(ref)
    assert f"from B = {ref['stops_paying_at']}" in said and ref["page"] in said
    assert f"{ref['rows'][0]['median']:.2f}× at B = 1" in said


def test_a_slower_round_moves_the_crossover_it_quotes(tmp_path):
    """Plant spec rounds at B = 8 well below plain: the quoted crossover moves to 8."""
    report = copy.deepcopy(REPORT)
    for r in report["policy"]["8"]["rounds"]:
        r["spec"] = 0.8 * r["ar"]
    ref = crossover.reference(write(tmp_path, report), tmp_path)
    assert ref["stops_paying_at"] == 8
    assert "from B = 8" in crossover.summary(ref)


def test_no_batch_measurably_slower_is_said_so(tmp_path):
    report = copy.deepcopy(REPORT)
    for entry in report["policy"].values():
        for r in entry["rounds"]:
            r["spec"] = 1.5 * r["ar"]
    ref = crossover.reference(write(tmp_path, report), tmp_path)
    assert ref["stops_paying_at"] is None
    assert "not measurably slower than plain decoding at any B up to 32" in crossover.summary(ref)


def test_beside_says_the_notebooks_own_then_the_reference():
    ref = crossover.reference()
    line = crossover.beside(None, 16, "In this proxy", ref)
    assert line.startswith("In this proxy: none up to B = 16.\nThe crossover to trust: paired rounds")
    assert crossover.beside(4, 16, "Measured here", ref).startswith("Measured here: B = 4.")
    assert [r["batch"] for r in crossover.rows(ref)] == REPORT["plan"]["batches"]


def test_a_missing_or_unpaired_report_is_one_clear_sentence(tmp_path):
    with pytest.raises(SpecvizError, match="could not be read"):
        crossover.reference("no-such-report", tmp_path)
    report = copy.deepcopy(REPORT)
    del report["policy"]
    with pytest.raises(SpecvizError, match="no paired rounds"):
        crossover.reference(write(tmp_path, report), tmp_path)


@pytest.mark.parametrize("name", SERVING_NOTEBOOKS)
def test_each_serving_notebook_says_its_own_crossover_beside_the_reference(name):
    nb = nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4)
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert "specviz.bench" in code and "crossover" in code  # bench.crossover, imported as a module or by name
    assert "beside(" in code and "reference()" in code
    prose = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert "batched-qwen-coder-bf16" in prose  # the page to read, linked or quoted through a figure marker


# ---------------------------------------------------------------------------------------------
# depth verdicts (notebook 9, section 2)

def test_a_share_far_above_alpha_k_is_above():
    v = depth_verdict(60, 40, 0.8, 6)  # 0.67 against 0.26
    assert v["verdict"] == "above" and v["low"] > 0.8 ** 6 and v["share"] == 40 / 60


def test_a_share_far_below_alpha_k_is_below():
    assert depth_verdict(100, 10, 0.8, 3)["verdict"] == "below"  # 0.10 against 0.512


def test_a_few_steps_never_tell_even_far_apart():
    """Seven steps (notebook 9's chat run before): far from alpha^k, still too few."""
    assert depth_verdict(MIN_STEPS - 1, MIN_STEPS - 1, 0.3, 6)["verdict"] == "too few to tell"
    assert depth_verdict(7, 0, 0.45, 6)["verdict"] == "too few to tell"


def test_alpha_k_inside_the_interval_is_too_few_to_tell():
    v = depth_verdict(40, 17, 0.87, 6)  # 0.425 against 0.434: well inside
    assert v["low"] < v["expected"] < v["high"] and v["verdict"] == "too few to tell"


def test_the_interval_is_the_exact_binomial_one():
    v = depth_verdict(20, 0, 0.5, 1)
    assert v["low"] == 0.0 and abs(v["high"] - (1 - 0.025 ** (1 / 20))) < 1e-9  # Clopper-Pearson at 0 of n


def test_impossible_counts_are_refused():
    with pytest.raises(ValueError):
        depth_verdict(5, 6, 0.5, 2)
    with pytest.raises(ValueError):
        depth_verdict(0, 0, 0.5, 2)
