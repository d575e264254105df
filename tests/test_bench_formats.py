"""specviz.bench.formats' arithmetic, on a report made up here: which lanes count (a type whose
perplexity is above the shipped file's does not), the fastest that counts, and predictions made
from the pilot's acceptance, not the measured run's."""

import pytest

from specviz.analysis import theory
from specviz.bench import formats


def _lane(tps, alpha=None, drafted=()):
    return {"decode_tokens_per_s": tps, "alpha": alpha, "drafted": list(drafted), "tau": None}


def _report():
    cost = {"target_s": {str(n): 0.02 * (1 + 0.5 * (n - 1)) for n in formats.COST_TOKENS}, "draft_1_s": 0.01, "c": 0.5}
    cost["curve"] = {n: s / 0.02 for n, s in cost["target_s"].items()}
    lanes = {"ar": _lane(40.0), "spec": _lane(44.0, 0.9, [3, 3]), "eagle3": _lane(30.0, 0.5, [3]),
             "dflash": _lane(20.0, 0.4, [3])}
    return {"formats": {"q4_k_m": {"perplexity": 5.0, "lanes": lanes, "cost": cost},
                        "q4_0": {"perplexity": 5.4, "lanes": {**lanes, "spec": _lane(60.0, 0.9, [3])}, "cost": cost}},
            "own_greedy": {"decode_tokens_per_s": 40.0}}


def test_a_type_of_lower_quality_does_not_count_and_the_fastest_counted_is_named():
    report = _report()
    s = formats.summary(report)
    assert s["per_lane"]["q4_0/spec"]["over_own_greedy"] == pytest.approx(1.5)
    assert not s["per_lane"]["q4_0/spec"]["quality_not_below_q4_k_m"]
    assert s["fastest_counted"] == "q4_k_m/spec" and s["fastest_counted_over_own_greedy"] == pytest.approx(1.1)
    report["formats"]["q4_0"]["perplexity"] = 5.0  # the same quality: it counts, and is fastest
    assert formats.summary(report)["fastest_counted"] == "q4_0/spec"


def test_predictions_use_the_pilots_acceptance_and_costs_measured_apart():
    report = _report()
    rep = report["formats"]["q4_k_m"]
    pilots = {"spec": {"alpha": 0.8, "c": 0.5}, "eagle3": {"alpha": 0.6, "c": 0.2}, "dflash": {"alpha": 0.3, "c": 0.7}}
    out = formats.predictions(rep["cost"], pilots, rep["lanes"])
    v4 = 1 + 0.5 * 3  # this made-up curve's pass over 4 tokens
    spec = 2 * theory.expected_tokens(0.8, 3) / (2 * (v4 + 0.5 * 3))
    assert out["spec"]["predicted"] == pytest.approx(spec) and out["spec"]["alpha_pilot"] == 0.8
    assert out["eagle3"]["predicted"] == pytest.approx(theory.expected_tokens(0.6, 3) / (v4 + 0.2 * 3))
    assert out["dflash"]["predicted"] == pytest.approx(theory.expected_tokens(0.3, 3) / (v4 + 0.7))  # one block a step
    assert out["spec"]["measured"] == pytest.approx(44.0 / 40.0)
    assert "ar" not in out


def test_a_report_names_the_cpus_kernel_extensions(tmp_path):
    """The machine line says which vector extensions the CPU has (they decide llama.cpp's kernels
    and native bf16); a report from before they were recorded keeps its plain line."""
    from specviz.bench import engines
    from specviz.runtime import machine

    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: AMD EPYC\n"
                    "flags\t\t: fpu sse2 avx avx2 fma avx512f avx512_bf16 avx512vl\n")
    assert machine.cpu_features(str(info)) == ["avx2", "avx512f", "avx512_bf16"]
    info.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma\n")
    assert machine.cpu_features(str(info)) == ["avx2"]
    assert machine.cpu_features(str(tmp_path / "none")) == []
    assert engines.machine_named({"cpu": "AMD EPYC", "cpu_features": ["avx2"]}) == "AMD EPYC (avx2)"
    assert engines.machine_named({"cpu": "AMD EPYC"}) == "AMD EPYC"
    report = _report()
    report.update(machine={"cpu": "AMD EPYC", "cpu_features": ["avx2", "avx512_bf16"], "threads": 2}, tokens=64, k=3)
    for rep in report["formats"].values():
        rep.update(bytes=1e9, predictions={})
    assert "Machine: AMD EPYC (avx2, avx512_bf16), 2 threads" in formats.markdown(report)


def test_the_report_shows_the_passes_in_milliseconds_and_renders_again_from_its_json(tmp_path, capsys):
    """Each type's curve has its own unit (its one-token pass), so the report also shows the passes
    the docs compare across types in milliseconds, beside the AR lane's time a token; --render
    rewrites the Markdown from the JSON alone, and says what to do where there is none."""
    import json

    report = _report()
    report.update(machine={"cpu": "AMD EPYC", "threads": 2}, tokens=64, k=3)
    for rep in report["formats"].values():
        rep.update(bytes=1e9, predictions={})
    report["formats"]["q4_0"]["lanes"]["ar"] = _lane(50.0)
    md = formats.markdown(report)
    # the made-up passes: 20 ms for one token, + 10 ms a token more; AR 40 and 50 tok/s
    assert "| type | 1 token | 4 tokens | 8 tokens | AR lane, a token |" in md
    assert "| Q4_K_M | 20.0 | 50.0 | 90.0 | 25.0 |" in md and "| Q4_0 | 20.0 | 50.0 | 90.0 | 20.0 |" in md
    out = tmp_path / "formats"
    out.with_suffix(".json").write_text(json.dumps(report))
    assert formats.main(["--render", "--out", str(out)]) == 0
    assert out.with_suffix(".md").read_text() == md
    capsys.readouterr()
    assert formats.main(["--render", "--out", str(tmp_path / "none")]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no report at" in err[0] and "python -m specviz.bench.formats" in err[0]
