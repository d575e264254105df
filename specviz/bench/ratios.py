"""From raw timed runs to the suite's ratios. Pure: plain data in, plain data out, no torch.

Definitions (a group = one prompt at one temperature; every ratio compares runs of one group):
  speedup            tokens/s of a method / tokens/s of specviz's AR (end to end: prefill
                     included, as a user waits for it); tokens/s = best of the repeats
  decode_speedup     the same on decode tokens/s (after the first update)
  engine efficiency  specviz spec tokens/s / transformers' assisted generation tokens/s, same k
  c_vs_ar            seconds per draft forward (this run) / seconds per target forward of AR runs:
                     the c of the theory, whose unit is a 1-token target forward
  model fit          measured decode speedup / theory.speedup_with_cost(alpha, k, c_vs_ar,
                     verify cost), with alpha = the run's alpha_empirical and the verify-cost
                     curve measured by the suite (a forward over k + 1 tokens / over 1 token).
                     Decode speedup, because the theory models decoding steps, not the prefill
                     that both runs share
  ranking            methods ordered by median tokens/s; two runs agree when no pair of methods
                     that both runs separate by more than `tolerance` is ordered oppositely
"""

from __future__ import annotations

import math
import statistics
from typing import Optional

from specviz.analysis import theory

SCALARS = ("seconds", "new_tokens", "tokens_per_s", "ttft", "gap_p50", "gap_p95", "itl_p50",
           "itl_p95", "jitter", "burst", "decode_tokens_per_s", "tau", "alpha_empirical",
           "alpha_analytic", "accepted_per_drafted", "c", "target_forwards",
           "target_forwards_per_token", "draft_s_per_forward", "target_s_per_forward", "draft_s_per_step")


def median(values) -> Optional[float]:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _ratio(a, b) -> Optional[float]:
    return a / b if a is not None and b else None


def mean_lists(lists: list) -> list:
    """Element-wise mean of lists of different lengths (each index over the lists that have it)."""
    width = max((len(x) for x in lists), default=0)
    return [statistics.fmean([x[i] for x in lists if len(x) > i]) for i in range(width)]


BEST_OF = {"seconds": min, "tokens_per_s": max, "decode_tokens_per_s": max}


def summarise_method(runs: list) -> dict:
    """One method in one group: throughput is the best of the repeats (other work on a shared
    machine only ever slows a run down), everything else the median."""
    out = {name: median(r.get(name) for r in runs) for name in SCALARS}
    for name, best in BEST_OF.items():
        values = [r[name] for r in runs if r.get(name) is not None]
        out[name] = best(values) if values else None
    out["repeats"] = len(runs)
    out["engine"] = runs[0]["engine"]
    out["draft_quant"] = runs[0].get("draft_quant")  # None where no draft model ran
    out["position_acceptance"] = mean_lists([r.get("position_acceptance") or [] for r in runs])
    out["tokens_per_s_runs"] = [r["tokens_per_s"] for r in runs]
    forced = [r["forced"] for r in runs if r.get("forced") is not None]  # held to AR's text (bench.held)
    out["forced"] = max(forced) if forced else None
    return out


def summarise_group(per_method: dict, greedy: bool = True) -> dict:
    """{method: summary} with speedups, c_vs_ar and, under greedy, sameness against AR."""
    out = {name: summarise_method(runs) for name, runs in per_method.items()}
    ar = out.get("ar")
    ar_ids = per_method["ar"][0].get("token_ids") if ar else None
    for name, row in out.items():
        row["speedup"] = _ratio(row["tokens_per_s"], ar and ar["tokens_per_s"])
        row["decode_speedup"] = _ratio(row["decode_tokens_per_s"], ar and ar["decode_tokens_per_s"])
        row["c_vs_ar"] = _ratio(row["draft_s_per_forward"], ar and ar["target_s_per_forward"])
        ids = per_method[name][0].get("token_ids")
        row["same_as_ar"] = None if not greedy or ar_ids is None or ids is None else ids == ar_ids
    return out


def model_fit(row: dict, k: int, verify_cost) -> Optional[dict]:
    """Measured speedup against the theory's prediction from the same run's alpha and c."""
    a, c, measured = row.get("alpha_empirical"), row.get("c_vs_ar"), row.get("decode_speedup")
    if a is None or c is None or measured is None:
        return None
    predicted = theory.speedup_with_cost(a, k, c, verify_cost)
    return {"alpha": a, "alpha_analytic": row.get("alpha_analytic"), "c": c, "k": k,
            "verify_cost": verify_cost(k + 1), "tau_measured": row.get("tau"),
            "tau_predicted": theory.expected_tokens(a, k), "predicted_speedup": predicted,
            "measured_speedup": measured, "end_to_end_speedup": row.get("speedup"),
            "ratio": measured / predicted}


ENGINE_PAIRS = (("ar", "hf"), ("spec", "hf-assisted"), ("spec", "hf-assisted-gemv"),
                ("spec-int8", "hf-assisted-int8"), ("pld", "hf-pld"))


def engine_vs_transformers(results: dict) -> dict:
    """{"ours/theirs": {group: ours tokens/s / theirs tokens/s}} for each algorithm both engines
    run, over the groups that ran both ("spec/hf-assisted" is the report's engine efficiency)."""
    return {f"{ours}/{theirs}": {group: _ratio(rows[ours]["tokens_per_s"], rows[theirs]["tokens_per_s"])
                                 for group, rows in results.items() if ours in rows and theirs in rows}
            for ours, theirs in ENGINE_PAIRS}


def geomean(values) -> Optional[float]:
    values = [v for v in values if v]
    return math.exp(statistics.fmean(math.log(v) for v in values)) if values else None


def ranking(results: dict) -> dict:
    """{group: [methods, fastest first]}."""
    return {group: sorted(rows, key=lambda m: -(rows[m]["tokens_per_s"] or 0.0))
            for group, rows in results.items()}


def compare_rankings(current: dict, previous: dict, tolerance: float = 0.10) -> dict:
    """Do two reports rank methods alike? `current`/`previous` are report["results"] dicts.

    A pair of methods is decided in a run when the faster is faster by more than `tolerance`;
    a swap is a pair decided in both runs in opposite orders. Kendall's tau over all pairs of
    methods common to both runs is reported too (ties count as neither agreeing nor not).
    """
    groups, swaps = {}, 0
    for group in sorted(set(current) & set(previous)):
        cur, prev = current[group], previous[group]
        names = [m for m in cur if m in prev]
        agree = disagree = 0
        swapped = []
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                r_cur = _ratio(cur[a]["tokens_per_s"], cur[b]["tokens_per_s"])
                r_prev = _ratio(prev[a]["tokens_per_s"], prev[b]["tokens_per_s"])
                if not r_cur or not r_prev:
                    continue
                same = (r_cur > 1) == (r_prev > 1)
                agree, disagree = agree + same, disagree + (not same)
                if not same and _decided(r_cur, tolerance) and _decided(r_prev, tolerance):
                    swapped.append({"methods": [a, b], "previous_ratio": r_prev, "current_ratio": r_cur})
        pairs = agree + disagree
        groups[group] = {"kendall_tau": (agree - disagree) / pairs if pairs else None,
                         "swapped": swapped}
        swaps += len(swapped)
    return {"tolerance": tolerance, "groups": groups, "swaps": swaps, "ok": swaps == 0}


def _decided(ratio: float, tolerance: float) -> bool:
    return ratio > 1 + tolerance or ratio < 1 / (1 + tolerance)


def batch_rows(target_cost: dict, draft_cost: dict, lanes: dict, k: int) -> list:
    """At each batch size: plain and speculative decoding of B users together, measured
    (`lanes[b]`: bench.batched.run_lane results for "ar" and "spec"), beside the speedup the
    theory predicts from the spec lane's alpha and the forward costs measured at that batch."""
    rows = []
    for b in sorted(lanes):
        t1, tk, d1 = target_cost[b][1], target_cost[b][k + 1], draft_cost[b][1]
        ar, spec = lanes[b]["ar"], lanes[b]["spec"]
        alpha = spec["alpha"] if spec["alpha"] is not None else 0.0
        measured = (spec["decode_tokens_per_s"] / ar["decode_tokens_per_s"]
                    if spec["decode_tokens_per_s"] and ar["decode_tokens_per_s"] else None)
        rows.append({"batch": b, "target_1_s": t1, f"target_{k + 1}_s": tk, "draft_1_s": d1, "c": d1 / t1,
                     "verify_cost": tk / t1, "alpha": spec["alpha"],
                     "predicted_speedup": theory.batch_speedup(min(alpha, 0.999), k, t1, tk + k * d1),
                     "ar_tokens_per_s": ar["decode_tokens_per_s"], "spec_tokens_per_s": spec["decode_tokens_per_s"],
                     "measured_speedup": measured, "greedy_equal_ar": spec["rows"] == ar["rows"]})
    return rows


def targets(report: dict) -> list:
    """The suite's targets (docs/benchmarks/suite.md), judged on this report. They are set for
    the real pair on CPU (`applies`); on other pairs and devices they are shown but not a verdict."""
    res, ratios, env = report["results"], report["ratios"], report["environment"]
    applies = env["pair"] == "qwen-coder" and env["device"] == "cpu"
    same_kernels = env.get("cpu_linear", "aten") == "aten"
    lanes = ratios["engine_efficiency"]
    if not same_kernels:  # specviz on W @ x.T, transformers on nn.Linear: compare on the same kernels
        lanes = ratios.get("engine_vs_transformers", {}).get("spec/hf-assisted-gemv") or {}
    eff = geomean(v for g, v in lanes.items() if g.endswith("@greedy"))
    fits = [ratios["model_fit"][g]["ratio"] for g in ("code@greedy", "rewrite@greedy")
            if g in ratios["model_fit"]]
    code = res.get("code@greedy", {})
    ours = {m: row["speedup"] for m, row in code.items() if row["engine"] == "specviz" and m != "ar"}
    best = max(ours, key=ours.get) if ours else None
    pld = res.get("rewrite@greedy", {}).get("pld", {})
    plan = report["plan"]
    rows = [
        _target(f"spec k={plan['k']} (events on) / transformers assisted, greedy groups (geometric mean)",
                eff, 1.0, aim=1.1),
        _target("measured / theory speedup, spec on code prompts (mean of code, rewrite)",
                statistics.fmean(fits) if fits else None, 0.9),
        _target(f"best specviz method on greedy code completion ({best}) / AR",
                ours.get(best), 2.0, decode=best and code[best]["decode_speedup"]),
        _target("pld on greedy code rewrite / AR", pld.get("speedup"), 3.0,
                decode=pld.get("decode_speedup")),
        _target(f"suite wall time, {report['mode']} mode (s)", report["wall_time_s"], plan["budget_s"],
                lower_is_better=True),
    ]
    rows += _head_targets(res)
    if not same_kernels:
        rows[0]["name"] += ", both on specviz's gemv kernels (hf-assisted-gemv)"
    for row in rows:
        row["applies"] = applies
    if not same_kernels and eff is None:
        rows[0].update(applies=False, why="specviz runs its gemv kernels and transformers nn.Linear, so "
                                          "spec/hf-assisted measures kernels too; the full plan runs "
                                          "hf-assisted-gemv for the same-kernel ratio")
    rewrite_tokens = dict(plan.get("prompt_tokens") or ()).get("rewrite", plan["tokens"])
    if rewrite_tokens < 100:  # the rewrite's answer is ~114 tokens: a prefix does not judge it
        rows[3].update(applies=False, why=f"judged on the whole rewrite (full plan); this run stops "
                                          f"after {rewrite_tokens} tokens")
    return rows


EAGLES = ("eagle", "eagle-tree", "eagle3", "eagle3-tree", "eagle3-tree-auto", "peagle")  # the EAGLE family's lanes
RIVALS = ("spec", "spec-int8", "medusa", "medusa-tree")  # what it must beat: the draft model and Medusa


def _head_targets(res: dict) -> list:
    """Drafters on the target's hidden states (shown only where their lanes ran): the best EAGLE
    lane's acceptance on greedy code completion (tau: tokens per target forward) and the cost of
    its draft forwards (c); whether the fastest EAGLE lane beats the fastest of the draft model
    and Medusa on greedy code completion and on chat; what P-EAGLE's one forward saves against
    EAGLE-3's k; Medusa's acceptance."""
    rows = []
    code = res.get("code@greedy", {})
    taus = {m: code[m]["tau"] for m in EAGLES if code.get(m, {}).get("tau") is not None}
    if taus:
        best = max(taus, key=taus.get)
        rows.append(_target(f"best EAGLE tau on greedy code completion ({best})", taus[best], 3.0))
        rows.append(_target(f"{best} draft forward / target forward (c), greedy code completion",
                            code[best].get("c"), 0.1, lower_is_better=True))
    for group, label in (("code@greedy", "code completion"), ("chat@greedy", "chat")):
        lanes = res.get(group, {})
        speed = {m: lanes[m]["speedup"] for m in (*EAGLES, *RIVALS) if lanes.get(m, {}).get("speedup")}
        eagles, rivals = [m for m in EAGLES if m in speed], [m for m in RIVALS if m in speed]
        if eagles and rivals:
            e, r = max(eagles, key=speed.get), max(rivals, key=speed.get)
            rows.append(_target(f"fastest EAGLE ({e}) / fastest of draft model and Medusa ({r}), greedy {label}",
                                speed[e] / speed[r], 1.0))
    parallel, sequential = code.get("peagle", {}), code.get("eagle3", {})
    if parallel.get("draft_s_per_step") and sequential.get("draft_s_per_step"):
        rows.append(_target("peagle draft per step / eagle3's (k = 5), greedy code completion",
                            parallel["draft_s_per_step"] / sequential["draft_s_per_step"], 0.5,
                            lower_is_better=True))
    if code.get("medusa"):
        rows.append(_target("medusa tau on greedy code completion", code["medusa"].get("tau"), 2.0))
    return rows


def _target(name: str, value, threshold: float, aim: Optional[float] = None,
            lower_is_better: bool = False, decode: Optional[float] = None) -> dict:
    """One target; speedups are judged end to end, `decode` shows the same ratio without prefill."""
    met = None if value is None else (value <= threshold if lower_is_better else value >= threshold)
    return {"name": name, "value": value, "threshold": threshold, "aim": aim,
            "lower_is_better": lower_is_better, "met": met, "decode_value": decode}
