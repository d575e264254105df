"""The benchmark suite on the tiny pair: every section present, numbers consistent with each other
and with the theory, the controlled drafter sets alpha, latency statistics of known streams,
and the ranking check catches a swap. Timings on the tiny pair are noise: nothing here asserts
a speed, only how the numbers relate."""

import json
import math

import pytest
import torch

from specviz import generate
from specviz.analysis import metrics as latency, theory
from specviz.bench import hf, ratios
from specviz.bench.controlled import ControlledDrafter

SECTIONS = ("suite_version", "mode", "plan", "environment", "prompts", "methods", "results", "ratios",
            "cost_curve", "batch", "controlled", "ranking", "targets", "wall_time_s")


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """The real command line, quick mode, on the tiny pair; figures as HTML only (no browser)."""
    from specviz.bench.suite import main

    prefix = tmp_path_factory.mktemp("bench") / "suite-tiny"
    assert main(["--pair", "tiny", "--quick", "--no-png", "--quiet", "--out", str(prefix)]) == 0
    return prefix


@pytest.fixture(scope="module")
def report(written):
    return json.loads(written.with_name(written.name + ".json").read_text())


def test_report_files_and_sections(written, report):
    assert set(SECTIONS) <= set(report)
    md = written.with_name(written.name + ".md").read_text()
    for heading in ("## Targets", "## Speedup over AR", "## Engine efficiency", "## Model fit",
                    "## Memory-bandwidth limit", "## Controlled acceptance", "## Verify-cost curve",
                    "## Batch size: B users decoded together", "## Ranking", "## Per group"):
        assert heading in md
    for fig in ("speedup", "memory-wall", "alpha", "batch"):
        assert written.with_name(f"{written.name}-{fig}.html").stat().st_size > 1000
    assert report["environment"]["pair"] == "tiny" and report["environment"]["threads"] >= 1
    assert report["environment"]["command"] == (  # the report says how it was made, to run it again
        f"python -m specviz bench --pair tiny --quick --no-png --quiet --out {written}")
    assert f"Command: `{report['environment']['command']}`" in md
    plan = report["plan"]
    assert list(report["results"]) == [f"{p}@greedy" for p in plan["prompts"]] + [
        f"{p}@t{t:g}" for t in plan["temperatures"] for p in plan["sampled_prompts"]]
    for group, rows in report["results"].items():
        wanted = plan["methods"] if group.endswith("@greedy") else plan["sampled_methods"]
        assert list(rows) == list(wanted)


def _png_of(size):
    import io

    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", size, "red").save(out, format="PNG")
    return out.getvalue()


def test_the_figures_go_on_one_sheet_and_a_missing_browser_keeps_the_html(report, tmp_path, monkeypatch):
    from PIL import Image

    from specviz.bench import report as rep

    sizes = iter([(700, 500), (600, 400), (700, 500), (650, 500)])  # drawn in figures() order
    monkeypatch.setattr(rep, "_png", lambda fig: _png_of(next(sizes)))
    written = rep.write(report, tmp_path / "r")
    md = written["md"].read_text()
    assert md.endswith("## Figures\n\n![figures](r-figures.png)\n")
    with Image.open(written["figures"]) as sheet:  # 2 across, 2 down, each cell the largest figure
        assert sheet.size == (1400, 1000)
        assert sheet.getpixel((1399, 999)) == (255, 255, 255)  # the 650-wide figure leaves white
        assert sheet.getpixel((0, 0)) == sheet.getpixel((1299, 999)) == (255, 0, 0)
    monkeypatch.setattr(rep, "_png", lambda fig: None)  # no browser: no sheet, the HTML linked
    written = rep.write(report, tmp_path / "s")
    md = written["md"].read_text()
    assert "figures" not in written and not (tmp_path / "s-figures.png").exists()
    assert all(f"- [{name}](s-{name}.html)" in md for name in ("speedup", "memory-wall", "alpha", "batch"))


def test_a_report_is_redrawn_from_its_json_alone(written, tmp_path, capsys):
    from specviz.bench.report import main

    for suffix in (".json", ".md"):
        (tmp_path / f"copy{suffix}").write_text(written.with_name(written.name + suffix).read_text())
    (tmp_path / "copy.md").write_text("stale")
    assert main([str(tmp_path / "copy.json"), "--no-png"]) == 0
    assert (tmp_path / "copy.md").read_text() == written.with_name(written.name + ".md").read_text().replace(
        f"{written.name}-", "copy-")
    (tmp_path / "bad.json").write_text("{not json")
    capsys.readouterr()
    assert main([str(tmp_path / "bad.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "bad.json" in err and "\n" not in err


def test_speedups_are_ratios_of_the_same_runs(report):
    for group, rows in report["results"].items():
        ar = rows["ar"]
        for name, row in rows.items():
            assert row["speedup"] == pytest.approx(row["tokens_per_s"] / ar["tokens_per_s"])
            assert row["tokens_per_s"] == pytest.approx(row["new_tokens"] / row["seconds"])
            assert row["target_forwards_per_token"] == pytest.approx(row["target_forwards"] / row["new_tokens"])
            assert row["tau"] == pytest.approx(row["new_tokens"] / row["target_forwards"])
            if row["engine"] == "specviz" and row["draft_s_per_forward"]:
                assert row["c_vs_ar"] == pytest.approx(row["draft_s_per_forward"] / ar["target_s_per_forward"])
            else:
                assert row["c_vs_ar"] is None
        eff = report["ratios"]["engine_efficiency"].get(group)
        if "hf-assisted" in rows:
            assert eff == pytest.approx(rows["spec"]["tokens_per_s"] / rows["hf-assisted"]["tokens_per_s"])
        for pair, by_group in report["ratios"]["engine_vs_transformers"].items():
            ours, theirs = pair.split("/")
            if ours in rows and theirs in rows:
                assert by_group[group] == pytest.approx(rows[ours]["tokens_per_s"] / rows[theirs]["tokens_per_s"])
            else:
                assert group not in by_group


def test_greedy_outputs_match_autoregressive(report):
    """float32 tiny pair: every method and transformers' generate emit AR's tokens."""
    for group, rows in report["results"].items():
        for row in rows.values():
            assert row["same_as_ar"] is (True if group.endswith("@greedy") else None)


def test_model_fit_recomputed_from_its_own_alpha_and_c(report):
    curve = report["cost_curve"]["target"]
    verify_cost = theory.interpolate_cost([(int(n), s) for n, s in curve.items()])
    k = report["plan"]["k"]
    fits = report["ratios"]["model_fit"]
    assert set(fits) == {g for g, rows in report["results"].items() if "spec" in rows}
    for group, fit in fits.items():
        row = report["results"][group]["spec"]
        assert fit["alpha"] == row["alpha_empirical"] and fit["c"] == row["c_vs_ar"]
        predicted = theory.speedup_with_cost(row["alpha_empirical"], k, row["c_vs_ar"], verify_cost)
        assert fit["predicted_speedup"] == pytest.approx(predicted)
        assert fit["ratio"] == pytest.approx(row["decode_speedup"] / predicted)
        assert row["decode_speedup"] == pytest.approx(row["decode_tokens_per_s"]
                                                      / report["results"][group]["ar"]["decode_tokens_per_s"])
        assert fit["verify_cost"] == pytest.approx(verify_cost(k + 1))


def test_controlled_sweep_sets_alpha(report):
    points = {p["a_set"]: p for p in report["controlled"]["points"]}
    assert points[1.0]["alpha"] == 1.0 and points[1.0]["tau"] == pytest.approx(report["plan"]["k"] + 1, rel=0.2)
    assert all(p["same_as_ar"] and p["off_script"] == 0 for p in points.values())
    alphas = [points[a]["alpha"] for a in sorted(points)]
    assert alphas == sorted(alphas)


def test_roofline_batch_and_targets_consistent(report):
    roof = report["ratios"]["roofline"]
    t = roof["target"]
    assert t["limit_tokens_per_s"] == pytest.approx(roof["bandwidth_bytes_per_s"] / t["weight_bytes_per_token"])
    assert roof["ar_vs_limit"] == pytest.approx(roof["ar_decode_tokens_per_s"] / t["limit_tokens_per_s"])
    batch = report["batch"]
    k = batch["k"]
    assert [r["batch"] for r in batch["rows"]] == list(report["plan"]["batches"])
    for r in batch["rows"]:
        expected = theory.expected_tokens(min(r["alpha"], 0.999), k) / (r["c"] * k + r["verify_cost"])
        assert r["predicted_speedup"] == pytest.approx(expected)
        # measured with real batches: every row equal to its own AR text, the speedup their ratio
        assert r["greedy_equal_ar"] and r["measured_speedup"] == pytest.approx(r["spec_tokens_per_s"] / r["ar_tokens_per_s"])
    names = [t["name"] for t in report["targets"]]
    assert len(names) == 5 and not any(t["applies"] for t in report["targets"])  # tiny: not judged
    pld = next(t for t in report["targets"] if t["name"].startswith("pld"))
    assert pld["value"] == report["results"]["rewrite@greedy"]["pld"]["speedup"]


@pytest.mark.parametrize("a_set, alpha", [(1.0, 1.0), (0.0, 0.0)])
def test_controlled_drafter_alpha_under_greedy(tiny, a_set, alpha):
    ids = tiny.encode("def fibonacci(n):")
    ar = list(generate(tiny, ids, method="ar", max_new_tokens=40))[-1]
    assert len(ar.token_ids) == 40
    drafter = ControlledDrafter(tiny.draft, ar.token_ids, a_set, tiny.target.config.vocab_size,
                                tiny.eos_token_ids)
    events = list(generate(tiny, ids, method="spec", k=4, max_new_tokens=40, drafter=drafter))
    m = events[-1].metrics
    assert m["alpha_empirical"] == alpha and events[-1].token_ids == ar.token_ids
    assert m["draft_forwards"] == m["drafted"]  # one draft-model forward per proposed token: real cost


def test_controlled_drafter_in_between(tiny):
    ids = tiny.encode("def fibonacci(n):")
    ar = list(generate(tiny, ids, method="ar", max_new_tokens=80))[-1]
    drafter = ControlledDrafter(tiny.draft, ar.token_ids, 0.6, tiny.target.config.vocab_size,
                                tiny.eos_token_ids, seed=3)
    m = list(generate(tiny, ids, method="spec", k=4, max_new_tokens=80, drafter=drafter))[-1].metrics
    assert m["evaluated"] > 30 and m["counters"]["corrupted"] > 0
    assert 0.35 < m["alpha_empirical"] < 0.85  # Bernoulli(0.6) decisions


def _stream(elapsed, counts):
    return [{"kind": "run_started"}] + [{"kind": "step_finished", "elapsed": t, "emitted_ids": [7] * n}
                                        for t, n in zip(elapsed, counts)] + [{"kind": "run_finished"}]


def test_latency_of_a_known_stream():
    stats = latency.stream_stats(*latency.updates_from_events(_stream([0.5, 0.6, 0.9, 1.0], [1, 2, 3, 1])))
    # gaps 0.1, 0.3, 0.1; per token 0.05 x2, 0.1 x3, 0.1 x1
    assert stats["ttft"] == 0.5
    assert stats["gap_p50"] == pytest.approx(0.1) and stats["gap_p95"] == pytest.approx(0.28)
    assert stats["itl_p50"] == pytest.approx(0.1) and stats["itl_p95"] == pytest.approx(0.1)
    assert stats["jitter"] == pytest.approx(0.2)
    assert stats["burst"] == pytest.approx(2.0)
    assert stats["decode_tokens_per_s"] == pytest.approx(6 / 0.5)


def test_latency_of_a_steady_stream_has_no_jitter():
    stats = latency.stream_stats([0.2 + 0.05 * i for i in range(10)], [1] * 10)
    assert stats["jitter"] == pytest.approx(0.0, abs=1e-12) and stats["itl_p95"] == pytest.approx(0.05)
    assert latency.stream_stats([], [])["ttft"] is None


def test_percentile_matches_linear_interpolation():
    values = [3.0, 1.0, 4.0, 1.5, 9.0]
    assert latency.percentile(values, 50) == 3.0
    assert latency.percentile(values, 95) == pytest.approx(4.0 + 0.8 * 5.0)
    assert latency.percentile(values, 0) == 1.0 and latency.percentile(values, 100) == 9.0


def _results(tps: dict) -> dict:
    return {"code@greedy": {m: {"tokens_per_s": v} for m, v in tps.items()}}


def test_ranking_check_detects_a_swap():
    previous = _results({"ar": 5.0, "spec": 10.0, "pld": 7.0, "hf": 5.2})
    same = ratios.compare_rankings(_results({"ar": 5.1, "spec": 9.0, "pld": 7.2, "hf": 4.9}), previous)
    assert same["ok"] and same["swaps"] == 0
    swapped = ratios.compare_rankings(_results({"ar": 5.0, "spec": 6.0, "pld": 9.0, "hf": 5.1}), previous)
    assert not swapped["ok"] and swapped["swaps"] == 1
    assert swapped["groups"]["code@greedy"]["swapped"][0]["methods"] == ["spec", "pld"]
    # ar and hf trade places but within the tolerance in both runs: not a swap, but tau sees it
    assert same["groups"]["code@greedy"]["kendall_tau"] < 1.0
    assert ratios.ranking(previous)["code@greedy"] == ["spec", "pld", "hf", "ar"]


def test_cli_check_against_fails_on_an_inverted_ranking(written, report, tmp_path):
    from specviz.bench.suite import main

    inverted = {"results": {g: {m: {"tokens_per_s": 1.0 / row["tokens_per_s"]} for m, row in rows.items()}
                            for g, rows in report["results"].items()}}
    previous = tmp_path / "previous.json"
    previous.write_text(json.dumps(inverted))
    out = tmp_path / "again"
    code = main(["--pair", "tiny", "--quick", "--no-figures", "--quiet", "--out", str(out),
                 "--check-against", str(previous), "--repeats", "1", "--tokens", "12"])
    check = json.loads(out.with_name("again.json").read_text())["ranking_check"]
    assert code == 1 and check["swaps"] > 0 and not check["ok"]


def test_transformers_sampling_arguments_are_explicit(tiny):
    kw = hf.generate_kwargs(tiny, "assisted", 4, 0.7)
    assert kw["do_sample"] and kw["top_k"] == 0 and kw["top_p"] == 1.0 and kw["temperature"] == 0.7
    assert kw["assistant_model"] is tiny.draft
    assert hf.generate_kwargs(tiny, "pld", 8, 0.0)["prompt_lookup_num_tokens"] == 8
    with pytest.raises(ValueError):
        hf.generate_kwargs(tiny, "medusa", 4, 0.0)


def test_random_weight_pair_falls_back_to_cpu():
    """The GPU mode's random-weight pairs, built at the test size on the CPU."""
    from specviz.bench.suite import load

    pair = load("random:tiny/tiny", device="cpu", dtype="float32")
    ids = pair.encode("x = 1")
    ar = list(generate(pair, ids, method="ar", max_new_tokens=16))[-1]
    drafter = ControlledDrafter(pair.draft, ar.token_ids, 1.0, 151_936, pair.eos_token_ids)
    m = list(generate(pair, ids, method="spec", k=4, max_new_tokens=16, drafter=drafter))[-1].metrics
    assert m["alpha_empirical"] == 1.0 and math.isclose(m["tau"], 16 / m["target_forwards"])


def test_static_cache_for_plain_generate_only(tiny):
    """GPU mode's --static-cache: plain generate() takes it; assisted generate() runs without it."""
    ids = tiny.encode("def fibonacci(n):")
    plain = hf.run(tiny, ids, "plain", max_new_tokens=12)
    assert hf.run(tiny, ids, "plain", max_new_tokens=12, static_cache=True)["token_ids"] == plain["token_ids"]
    assisted = hf.run(tiny, ids, "assisted", max_new_tokens=12, static_cache=True)
    assert assisted["token_ids"] == plain["token_ids"] and sum(assisted["counts"]) == 12


@pytest.mark.parametrize("k", [1, 2])
def test_transformers_assisted_drafts_k_tokens(tiny, k):
    """transformers reads the draft length from the assistant's generation_config, not from
    generate()'s arguments: each update must hold at most k + 1 tokens, and the draft model's
    config must be left as it was."""
    before = {name: getattr(tiny.draft.generation_config, name, None) for name in hf.ASSISTANT_FIELDS}
    ids = tiny.encode("def fibonacci(n):")
    out = hf.run(tiny, ids, "assisted", k=k, max_new_tokens=40)
    assert max(out["counts"]) <= k + 1 and len(out["counts"]) >= 40 / (k + 1)
    assert out["token_ids"] == hf.run(tiny, ids, "plain", max_new_tokens=40)["token_ids"]
    assert {name: getattr(tiny.draft.generation_config, name, None) for name in hf.ASSISTANT_FIELDS} == before


def test_plans_measure_the_rewrite_whole_unless_told_otherwise():
    from specviz.bench.suite import FULL, INT8_METHODS, plan_for

    assert FULL.tokens_for("rewrite") == 128 and FULL.tokens_for("code") == FULL.tokens
    assert plan_for(False, tokens=16).tokens_for("rewrite") == 16
    assert INT8_METHODS == {"spec-int8", "spec-int8-auto", "hf-assisted-int8"}


def test_int8_draft_methods_run_the_quantised_draft(report):
    """spec-int8 is the same algorithm as spec with the int8 draft: same output under greedy, and
    the report names the draft it ran."""
    assert report["methods"]["spec-int8"] == {"engine": "specviz", "method": "spec", "k": 4, "draft": "int8"}
    rows = report["results"]["code@greedy"]
    assert rows["spec-int8"]["same_as_ar"] is True and rows["spec-int8"]["draft_quant"] == "int8"
    assert rows["spec"]["draft_quant"] == "none"


def test_a_short_rewrite_does_not_judge_the_pld_target(report):
    """The quick plan stops the rewrite after 32 tokens: the pld target is shown, not judged."""
    pld = next(t for t in report["targets"] if t["name"].startswith("pld on greedy code rewrite"))
    assert pld["applies"] is False and "whole rewrite" in pld["why"]


def test_engine_target_compares_like_kernels(report):
    """On specviz's gemv kernels, spec/hf-assisted measures kernels too: the target then uses
    hf-assisted-gemv (transformers on the same kernels), or is not judged without it."""
    import copy

    from specviz.bench import ratios
    from specviz.bench.report import markdown

    real = copy.deepcopy(report)
    real["environment"].update(pair="qwen-coder", device="cpu")
    assert ratios.targets(real)[0]["applies"] is True  # both on nn.Linear: judged on spec/hf-assisted
    gemv = copy.deepcopy(real)
    gemv["environment"].update(cpu_linear="gemv", cpu_choice={"note": "float32 with W @ x.T: measured"})
    row = ratios.targets(gemv)[0]
    assert row["applies"] is False and row["value"] is None and "gemv kernels" in row["why"]
    lanes = {g: 1.25 for g in real["ratios"]["engine_efficiency"]}
    gemv["ratios"]["engine_vs_transformers"]["spec/hf-assisted-gemv"] = lanes
    row = ratios.targets(gemv)[0]
    assert row["applies"] is True and abs(row["value"] - 1.25) < 1e-9 and "hf-assisted-gemv" in row["name"]
    gemv["targets"] = ratios.targets(gemv)
    text = markdown(gemv)
    assert "gemv kernels (chosen for this CPU)" in text and "float32 with W @ x.T: measured" in text


def test_cuda_graphs_need_cuda(tiny, capsys):
    """The CUDA-graph runner is a CUDA option: on a CPU the bench says so in one line (status 2),
    the library raises InputError, and runs record which runner the target used."""
    from specviz import generate
    from specviz.bench.suite import main
    from specviz.errors import InputError
    from specviz.runtime.lm import CachedLM, runner_for, use_cuda_graphs

    assert main(["--pair", "tiny", "--quick", "--cuda-graphs", "--no-figures", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: CUDA graphs need a CUDA device; this model is on cpu."]
    with pytest.raises(InputError, match="CUDA graphs need a CUDA device"):
        use_cuda_graphs(tiny.target)
    assert isinstance(runner_for(tiny.target), CachedLM)
    started = next(iter(generate(tiny, "ab", max_new_tokens=2)))
    assert started.cuda_graphs is False and started.to_dict()["cuda_graphs"] is False


def test_same_k_comparison_runs_the_chosen_lanes(tmp_path, capsys):
    """specviz.bench.assisted: specviz's loop against transformers' assisted generate at the same
    k, on the same kernels; --lanes keeps a rerun to the lanes a ratio needs."""
    from specviz.bench import assisted

    out = tmp_path / "assisted.json"
    assert assisted.main(["--pair", "tiny", "--tokens", "8", "--repeats", "1", "--lanes", "spec",
                          "hf-assisted-gemv", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["cpu_linear"] == "gemv" and json.loads(capsys.readouterr().out) == report
    for row in report["results"].values():
        assert set(row) == {"ar", "spec", "hf-assisted-gemv", "ratios", "same_tokens_as_hf_assisted_gemv"}
        assert set(row["ratios"]) == {"spec_vs_hf_assisted_same_kernels_gemv"}
        assert row["same_tokens_as_hf_assisted_gemv"] is True  # the same greedy tokens, both engines
        assert row["ratios"]["spec_vs_hf_assisted_same_kernels_gemv"] == pytest.approx(
            row["spec"]["tokens_per_s"] / row["hf-assisted-gemv"]["tokens_per_s"])
    with pytest.raises(SystemExit):
        assisted.main(["--pair", "tiny", "--lanes", "nonsense"])


def test_head_targets_judge_the_best_eagle_against_the_draft_model_and_medusa():
    from specviz.bench.ratios import _head_targets

    def lane(speedup, tau=None, c=None, per_step=None):
        return {"speedup": speedup, "tau": tau, "c": c, "draft_s_per_step": per_step}

    res = {"code@greedy": {"spec": lane(1.6, 4.5, 0.4), "spec-int8": lane(1.9, 4.4, 0.3), "medusa": lane(1.7, 2.1),
                           "eagle": lane(1.2, 1.7, 0.02), "eagle3": lane(2.0, 3.2, 0.03, per_step=0.10),
                           "eagle3-tree": lane(1.8, 3.4, 0.12), "peagle": lane(2.1, 2.9, 0.05, per_step=0.04)},
           "chat@greedy": {"spec": lane(1.0), "medusa": lane(1.1), "eagle3": lane(0.9), "peagle": lane(1.05)}}
    rows = {r["name"]: r for r in _head_targets(res)}
    # the best tau is the tree's, and its c (0.12 per level) misses the 0.1 target
    tau = rows["best EAGLE tau on greedy code completion (eagle3-tree)"]
    assert tau["value"] == 3.4 and tau["met"]
    assert rows["eagle3-tree draft forward / target forward (c), greedy code completion"]["met"] is False
    code = rows["fastest EAGLE (peagle) / fastest of draft model and Medusa (spec-int8), greedy code completion"]
    assert code["value"] == pytest.approx(2.1 / 1.9) and code["met"]
    chat = rows["fastest EAGLE (peagle) / fastest of draft model and Medusa (medusa), greedy chat"]
    assert chat["value"] == pytest.approx(1.05 / 1.1) and chat["met"] is False
    parallel = rows["peagle draft per step / eagle3's (k = 5), greedy code completion"]
    assert parallel["value"] == pytest.approx(0.4) and parallel["met"]
    assert rows["medusa tau on greedy code completion"]["met"]
    assert _head_targets({"code@greedy": {"spec": lane(1.5, 4.0, 0.4)}}) == []  # no head lanes ran: no rows


@pytest.mark.parametrize("method", ["spec", "tree"])
def test_a_run_held_to_a_text_commits_that_text_and_counts_where_the_target_chose_otherwise(tiny, method):
    from specviz.bench.held import HeldVerifier

    prompt = "import os"
    ar = list(generate(tiny, prompt, method="ar", max_new_tokens=16))[-1].token_ids
    assert len(ar) == 16
    held = HeldVerifier(ar)
    run = list(generate(tiny, prompt, method=method, max_new_tokens=16, verifier=held))
    assert run[-1].token_ids == ar and held.forced == 0  # float32: the real run, token for token
    # a text the target would not write (a flipped near-tie, made by hand at token 5)
    steps = [e for e in run if e.kind == "step_finished"]
    assert len(steps) > 1  # several verify passes, so the hold is checked across steps
    other = ar[:5] + [(ar[5] + 1) % 256] + ar[6:]
    held = HeldVerifier(other)
    assert list(generate(tiny, prompt, method=method, max_new_tokens=16, verifier=held))[-1].token_ids == other
    # exactly the positions where the target, fed this text, chooses otherwise (one float32 forward
    # over the whole text): the flipped token, and those after it whose context it changed
    ids = tiny.encode(prompt)
    with torch.inference_mode():
        logits = tiny.target(torch.tensor([ids + other])).logits[0]
    choices = logits[len(ids) - 1:len(ids) - 1 + len(other)].argmax(-1).tolist()
    assert held.forced == sum(c != t for c, t in zip(choices, other)) >= 1 and held.at == len(other)
    # a text that ends at the end of text before max_new_tokens: the held run ends there too
    short = list(generate(tiny, "def add(a, b):", method="ar", max_new_tokens=16))[-1]
    assert short.finish_reason == "eos" and len(short.token_ids) < 16
    held = HeldVerifier(short.token_ids)
    done = list(generate(tiny, "def add(a, b):", method=method, max_new_tokens=16, verifier=held))[-1]
    assert done.token_ids == short.token_ids and done.finish_reason == "eos" and held.forced == 0


def test_the_suite_holds_greedy_specviz_lanes_to_ar_and_reports_what_it_forced(tiny):
    from specviz.bench import report as rep
    from specviz.bench.suite import measure_methods, plan_for

    plan = plan_for(True, ["spec"], tokens=8, repeats=1, hold=True)
    raw = measure_methods(tiny, plan, lambda *_: None)
    greedy = [g for g in raw if g.endswith("@greedy")]
    assert greedy and all(rec["forced"] == 0 for g in greedy for rec in raw[g]["spec"])
    assert all("forced" not in rec for g in greedy for rec in raw[g]["ar"])  # AR is the text, never held
    sampled = [g for g in raw if not g.endswith("@greedy")]
    assert sampled and all("forced" not in rec for g in sampled for rec in raw[g]["spec"])
    results = {g: ratios.summarise_group(raw[g], g.endswith("@greedy")) for g in raw}
    results[greedy[0]]["spec"]["forced"] = 2  # as a run whose verify pass flipped two near-ties
    text = "\n".join(rep.speedup_table({"results": results}))
    assert "(2 held)" in text and "held to AR's text" in text
    plain = {g: ratios.summarise_group(raw[g], g.endswith("@greedy")) for g in raw}
    for g in plain:
        for row in plain[g].values():
            row["forced"] = None
    assert "held to AR's text" not in "\n".join(rep.speedup_table({"results": plain}))
