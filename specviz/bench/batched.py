"""When batching kills speculation, measured: the batched engine (specviz.engine.batch) on a real pair.

    python -m specviz.bench.batched                       # the real pair, B = 1 .. 32
    python -m specviz.bench.batched --batches 1,4 --tokens 16 --out /tmp/quick.json

Sections, all in one process, one after the other (nothing else should run on the cores):
  cost     the cost of one target pass against the tokens it feeds (1 .. 256, as B rows of
           k + 1), and the draft's: where the pass stops being bound by reading the weights
           (the knee), which is where speculation's extra tokens stop being free
  lanes    at B = 1, 2, 4, 8, 16, 32 users (B different prompts of SERVING_BANK), greedy: ar,
           spec (fixed k), pld, medusa and the load policy (spec, k="load"). Each lane: the
           batch's decode tokens/s (the prompt's pass left out), each user's tokens/s and
           inter-token latency, the acceptance rate; every lane's rows are checked token for
           token against the ar lane's. Each lane runs --repeats times, the lanes of one B in
           turn (forwards, then backwards), and keeps its fastest run
  theory   each B's spec speedup predicted from alpha (measured in the spec lane), the cost
           table and k, with the run's tail (its last steps draft less), beside the measured
           one; and the same theory with the pass costs the lanes measured while they ran (how
           much of a gap is the model, how much the machine's drift since the table); the
           batch where speculation stops paying
  single   spec at B = 1 through the batched path against the single-sequence engine
  memory   B = 32 rows of 256-token contexts: resident memory added over the loaded pair, and
           the KV caches' bytes

A JSON report (and a Markdown summary beside it) is written after every lane, and --resume
continues an interrupted run from it. Progress and an ETA go to stderr.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Optional

from specviz import files
from specviz.analysis import theory
from specviz.analysis.paired import paired
from specviz.bench.provenance import code_version
from specviz.bench.recordings import write_trace
from specviz.engine.batch import generate_batch
from specviz.engine.load import CostTable, LoadK
from specviz.engine.sequence import generate
from specviz.errors import SpecvizError, run_command
from specviz.prompts import SERVING_BANK
from specviz.runtime.batch_lm import batch_runner_for
from specviz.runtime.machine import dtype_name, environment
from specviz.runtime.models import load_pair

SECTION_VERSION = 2  # 2: lanes run `repeats` times, interleaved, the fastest kept
BATCHES = (1, 2, 4, 8, 16, 32)
LANES = {  # name -> generate_batch options
    "ar": dict(method="ar"),
    "spec": dict(method="spec", k=4),
    "pld": dict(method="pld", k=4),
    "medusa": dict(method="medusa", k=3),
    "load": dict(method="spec", k="load"),
}
WIDTHS = tuple(range(1, 9))
REPEAT_UP_TO = 8  # default --repeat-up-to


def say(text: str) -> None:
    print(f"[bench.batched] {text}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# measurements

def cost_section(pair, batches: list) -> dict:
    """The cost table of both models: B rows of w tokens, B on the grid up to the largest batch
    (and the batches asked for), w = 1..8 (target; 1 and 2 for the draft). 32 rows x 8 = 256 tokens."""
    target, draft = CostTable.of(pair.target), CostTable.of(pair.draft)
    for b in sorted(set(batches)):
        say(f"  cost of a pass at B = {b}, 1..{WIDTHS[-1]} tokens per row")
        target.need(b, WIDTHS)
        draft.need(b, (1, 2, LoadK.CATCH_UP_WIDTH))
    by_tokens = tokens_curve(target.points)
    return {"target": target.to_dict(), "draft": draft.to_dict(), "by_tokens": by_tokens, "knee": knee(by_tokens),
            "note": f"one forward over B rows of w tokens after a {target.context}-token context per row; "
                    f"the fastest of {target.repeats} rounds over all widths, after a warm-up round"}


def tokens_curve(points: dict) -> dict:
    """{tokens in the pass: seconds}, the cheapest measured shape for each total (B x w)."""
    out: dict = {}
    for (rows, width), s in points.items():
        n = rows * width
        out[n] = min(out.get(n, s), s)
    return {n: out[n] for n in sorted(out)}


def knee(points: dict, rise: float = 1.5) -> Optional[int]:
    """The fewest tokens at which a pass costs `rise` times a one-token pass: below it the pass
    is bound by reading the weights (extra tokens nearly free), above it by arithmetic."""
    points = {int(n): s for n, s in points.items()}
    base = points.get(1)
    return next((n for n in sorted(points) if base and points[n] >= rise * base), None)


def run_lane(pair, prompts: list, options: dict, tokens: int, keep: Optional[list] = None) -> dict:
    """One batched run: its serving numbers, each row's tokens, alpha and tokens per step (and its
    events appended to `keep`, when given)."""
    events = list(generate_batch(pair, prompts, max_new_tokens=tokens, record_topk=0, **options))
    if keep is not None:
        keep.extend(events)
    return lane_numbers(events)


def lane_numbers(events: list) -> dict:
    """A batched run's numbers from its events (Event objects or dicts)."""
    events = [e if hasattr(e, "kind") else _Ev(e) for e in events]
    steps = [e for e in events if e.kind == "batch_step"]
    rows = {e.row: e.token_ids for e in events if e.kind == "run_finished"}
    finished = events[-1].metrics
    decode_tokens = sum(sum(s.emitted) for s in steps[1:])
    decode_s = steps[-1].elapsed - steps[0].elapsed if len(steps) > 1 else None
    accepted = sum(sum(s.accepted) for s in steps)
    evaluated = sum(e.evaluated for e in events if e.kind == "step_finished")
    row_steps = sum(len(s.rows) for s in steps)
    ks = [max(s.k) for s in steps[1:]]
    return {
        "tokens": finished["tokens"], "wall_s": finished["wall_time"], "steps": len(steps),
        "decode_tokens_per_s": decode_tokens / decode_s if decode_s else None, "decode_tokens": decode_tokens,
        "tokens_per_s": finished["tokens_per_s"],
        "user_tokens_per_s": finished["user_tokens_per_s"], "itl_ms": _ms(finished["itl"]),
        "itl_p50_ms": _ms(finished["itl_p50"]), "itl_p95_ms": _ms(finished["itl_p95"]),
        "ttft_s": finished["ttft"], "prefill_s": steps[0].elapsed,
        "alpha": accepted / evaluated if evaluated else None,
        "tokens_per_row_step": finished["tokens"] / row_steps if row_steps else None,
        "verify_s": sum(s.verify_time for s in steps[1:]), "draft_s": sum(s.draft_time for s in steps[1:]),
        "k_chosen": ks, "k_mean": statistics.fmean(ks) if ks else None,
        "why_last": (steps[-1].info or {}).get("why") if steps else None,
        "rows": [rows[b] for b in sorted(rows)],
        **row_numbers(events),
    }


class _Ev:
    """An event dict read as attributes (traces give dicts, runs give events)."""

    def __init__(self, data: dict):
        self.__dict__.update(data)
        self.__dict__.setdefault("row", None)
        self.__dict__.setdefault("info", None)


def row_numbers(events: list) -> dict:
    """Each row's acceptance rate and decode tokens (after its first step): rows accept
    differently, and the batch runs until its slowest row is done (the ragged theory)."""
    accepted, evaluated, decode, first = {}, {}, {}, set()
    for e in events:
        if e.kind == "step_finished" and e.row is not None:
            accepted[e.row] = accepted.get(e.row, 0) + e.accepted
            evaluated[e.row] = evaluated.get(e.row, 0) + e.evaluated
            if e.row in first:
                decode[e.row] = decode.get(e.row, 0) + len(e.emitted_ids)
            first.add(e.row)
    order = sorted(accepted)
    by_rows: dict = {}
    for e in [e for e in events if e.kind == "batch_step"][1:]:  # decoding steps: the first also ran the prompts
        by_rows.setdefault(str(len(e.rows)), []).append(e.verify_time + e.draft_time)
    return {"row_alpha": [accepted[r] / evaluated[r] if evaluated[r] else None for r in order],
            "row_decode_tokens": [decode.get(r, 0) for r in order],
            "step_s_by_rows": {live: statistics.fmean(t) for live, t in by_rows.items()}}


def _ms(seconds):
    return None if seconds is None else 1e3 * seconds


def predicted_speedup(alpha: float, k: int, rows: int, target: CostTable, draft: CostTable,
                      tokens: Optional[float] = None) -> dict:
    """Spec's speedup over AR at `rows` users from alpha, k and the measured cost table. A step
    drafting k' tokens costs T(B, k' + 1) + D(B, 2) + (k' - 1) D(B, 1) (the draft's first forward
    also feeds the token the last step added); plain decoding costs T(B, 1) per token. With
    `tokens` (decode tokens per row) the run's tail is modelled too: the last steps draft no further
    than the budget (theory.expected_run_time); without it, every step drafts k."""
    a = min(alpha, 0.999)

    def step(kk: int) -> float:
        return target(rows, kk + 1) + (draft(rows, 2) + (kk - 1) * draft(rows, 1) if kk else 0.0)

    ar_step = target(rows, 1)
    if tokens:
        n = max(1, round(tokens))
        spec_per_token = theory.expected_run_time(a, k, n, step) / n
    else:
        spec_per_token = step(k) / theory.expected_tokens(a, k)
    return {"expected_tokens": theory.expected_tokens(a, k), "ar_step_s": ar_step, "spec_step_s": step(k),
            "c": draft(rows, 1) / target(rows, 1), "speedup": ar_step / spec_per_token, "tokens": tokens}


def single_section(pair, tokens: int, repeats: int = 6) -> dict:
    """Spec at B = 1: the batched path against the single-sequence engine on the bank's first
    prompt, decode tokens/s (the prompt's pass left out). The two run back to back `repeats`
    times (the order alternating); the ratio is the median of each pair's ratio, so the machine's
    drift between pairs cancels."""
    prompt = SERVING_BANK[0]
    out = {"single": [], "batched": []}
    for r in range(repeats):
        for name in (("single", "batched") if r % 2 == 0 else ("batched", "single")):
            if name == "single":
                events = list(generate(pair, prompt, method="spec", k=4, max_new_tokens=tokens, record_topk=0))
                steps = [e for e in events if e.kind == "step_finished"]
                n = sum(len(s.emitted_ids) for s in steps[1:])
                out[name].append(n / (steps[-1].elapsed - steps[0].elapsed))
            else:
                out[name].append(run_lane(pair, [prompt], LANES["spec"], tokens)["decode_tokens_per_s"])
    single, batched = statistics.median(out["single"]), statistics.median(out["batched"])
    paired = [b / s for b, s in zip(out["batched"], out["single"])]
    return {"single_tokens_per_s": single, "batched_tokens_per_s": batched, "ratio": statistics.median(paired),
            "paired_ratios": paired, "tokens": tokens, "runs": out}


def policy_section(pair, batches: list, tokens: int, rounds: int, report: dict, save) -> dict:
    """The load policy against the better of plain decoding and spec k = 4, paired: at each B the
    three lanes run back to back in each of `rounds` rounds (the order rotating), each round's
    ratio is load over the better of that round's two fixed lanes, and the policy's score is the
    median of the rounds' ratios. Lanes run minutes apart differ by 10-25% on a CPU for the same
    passes (a lane's fastest of two runs does not remove that), more than the margins a policy
    decides between; a paired ratio cancels the machine's drift between rounds."""
    out = report.setdefault("policy", {})
    names = ("ar", "spec", "load")
    todo = [b for b in batches if str(b) not in out or len(out[str(b)]["rounds"]) < rounds]
    started, weight_all, weight_done = time.perf_counter(), sum(todo), 0
    for b in todo:
        prompts = [SERVING_BANK[j % len(SERVING_BANK)] for j in range(b)]
        entry = out.setdefault(str(b), {"rounds": []})
        for r in range(len(entry["rounds"]), rounds):
            order = names[r % 3:] + names[:r % 3]
            entry["rounds"].append({name: run_lane(pair, prompts, LANES[name], tokens)["decode_tokens_per_s"]
                                    for name in order})
        ratios = [x["load"] / max(x["ar"], x["spec"]) for x in entry["rounds"] if x["load"] and x["ar"] and x["spec"]]
        entry.update(ratios=ratios, ratio=statistics.median(ratios) if ratios else None)
        weight_done += b
        eta = (time.perf_counter() - started) / weight_done * (weight_all - weight_done)
        say(f"policy B={b:>2}: load / best of ar and spec, median of {len(ratios)} rounds: "
            f"{entry['ratio'] if entry['ratio'] is not None else float('nan'):.2f}  [ETA {eta / 60:.1f} min]")
        save()
    return out


class PeakRSS:
    """The process's resident memory, sampled every 20 ms in a thread (Linux: /proc/self/statm)."""

    def __init__(self):
        self.peak = self.now()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def now() -> Optional[int]:
        try:
            with open("/proc/self/statm") as fh:
                return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, AttributeError):
            return None

    def _run(self):
        while not self._stop.wait(0.02):
            now = self.now()
            if now is not None and (self.peak is None or now > self.peak):
                self.peak = now

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def long_prompts(pair, rows: int, context: int, tokens: int) -> list:
    """`rows` bank prompts, each led by enough comment lines that prompt + answer fill `context` tokens."""
    out = []
    for b in range(rows):
        body = SERVING_BANK[b % len(SERVING_BANK)]
        lead, i = "", 0
        while len(pair.encode(lead + body)) < context - tokens:
            lead += f"# note {i}: this module is part of a larger project; keep functions small and tested.\n"
            i += 1
        ids = pair.encode(lead + body)
        out.append(ids[len(ids) - (context - tokens):])  # exactly context - tokens prompt tokens
    return out


def memory_section(pair, rows: int = 32, context: int = 256, tokens: int = 32) -> dict:
    """Resident memory that `rows` rows of `context`-token contexts add over the loaded pair,
    measured in a process of its own that loads the pair and then runs the batch: in the bench's
    process the allocator keeps what the lanes before it freed, so a batch of 32 would reuse it
    and seem to add nothing."""
    import multiprocessing

    options = {"dtype": dtype_name(pair), "cpu_linear": getattr(pair, "cpu_linear", None)}
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(_memory_child, (pair.name, options, rows, context, tokens))


def _memory_child(pair_name: str, options: dict, rows: int, context: int, tokens: int) -> dict:
    pair = load_pair(pair_name, **{key: value for key, value in options.items() if value})
    for _ in generate_batch(pair, SERVING_BANK[:1], method="spec", k=4, max_new_tokens=2, record_topk=0):
        pass  # the runtime's own first allocations (thread pools, kernels) belong to the loaded pair
    return measure_memory(pair, rows, context, tokens)


def measure_memory(pair, rows: int, context: int, tokens: int) -> dict:
    prompts = long_prompts(pair, rows, context, tokens)
    gc.collect()
    base = PeakRSS.now()
    kv = {}
    with PeakRSS() as peak:
        steps = sum(e.kind == "batch_step" for e in generate_batch(
            pair, prompts, method="spec", k=4, max_new_tokens=tokens, record_topk=0))
    # the KV caches of the same shapes, measured directly
    for role in ("target", "draft"):
        runner = batch_runner_for(getattr(pair, role), rows)
        runner.forward([p + [0] * (context - len(p)) for p in prompts], [1] * rows)
        kv[role] = runner.kv_bytes()
        del runner
    gc.collect()
    return {"rows": rows, "context": context, "rss_before": base, "rss_peak": peak.peak,
            "added_bytes": None if base is None or peak.peak is None else peak.peak - base,
            "kv_bytes": kv, "kv_total": sum(kv.values()), "steps": steps}


def others_busy(seconds: float = 2.0) -> Optional[float]:
    """Cores kept busy by other processes over `seconds` (Linux /proc; None elsewhere): the
    machine's busy time less this process's own."""
    def sample():
        with open("/proc/stat") as fh:
            fields = [int(x) for x in fh.readline().split()[1:]]
        return sum(fields) - fields[3] - (fields[4] if len(fields) > 4 else 0), os.times()
    try:
        (busy0, own0), t0 = sample(), time.perf_counter()
        time.sleep(seconds)
        (busy1, own1), t1 = sample(), time.perf_counter()
    except (OSError, ValueError, IndexError):
        return None
    tick = os.sysconf("SC_CLK_TCK")
    own = (own1.user + own1.system) - (own0.user + own0.system)
    return max(0.0, ((busy1 - busy0) / tick - own) / (t1 - t0))


# ---------------------------------------------------------------------------------------------
# the run: sections, checkpoints, ETA

def analyse(report: dict) -> dict:
    """Theory beside measurement, the crossover, the policy's margin, the issue's numbers."""
    lanes, cost = report.get("lanes", {}), report.get("cost")
    if not cost:
        return {}
    target, draft = CostTable(None).load(cost["target"]), CostTable(None).load(cost["draft"])
    _TABLES.update(target=target, draft=draft)
    k = LANES["spec"]["k"]
    rows_out, crossover = [], None
    for b in sorted(int(x) for x in lanes):
        lane = lanes[str(b)]
        ar, spec = lane.get("ar"), lane.get("spec")
        if not ar or not spec or not ar["decode_tokens_per_s"] or not spec["decode_tokens_per_s"]:
            continue  # a lane done in its first step has no decoding rate
        measured = spec["decode_tokens_per_s"] / ar["decode_tokens_per_s"]
        pooled = predicted_speedup(spec["alpha"], k, b, target, draft, decode_tokens(spec) / b)
        ragged = ragged_speedup(spec, ar, k, b, target, draft)
        predicted = {**pooled, "speedup": ragged if ragged is not None else pooled["speedup"]}
        in_run = ragged_speedup(spec, ar, k, b, None, None)
        if in_run is None:
            in_run = in_run_speedup(spec, ar, k, decode_tokens(spec) / b)
        best_fixed = max(ar["decode_tokens_per_s"], spec["decode_tokens_per_s"])
        load = lane.get("load")
        row = {"batch": b, "ar_tokens_per_s": ar["decode_tokens_per_s"], "spec_tokens_per_s": spec["decode_tokens_per_s"],
               "measured_speedup": measured, "theory_speedup": predicted["speedup"],
               "measured_over_theory": measured / predicted["speedup"], "alpha": spec["alpha"], "c": predicted["c"],
               "decode_tokens_per_row": decode_tokens(spec) / b, "in_run_theory_speedup": in_run,
               "pooled_theory_speedup": pooled["speedup"], "theory_model": "ragged" if ragged is not None else "pooled",
               "row_alpha": spec.get("row_alpha"),
               "measured_over_in_run_theory": measured / in_run if in_run else None,
               "ar_pass_s": _per_step(ar, "verify_s"), "table_ar_pass_s": target(b, 1),
               "pld_speedup": _ratio(lane.get("pld"), ar), "medusa_speedup": _ratio(lane.get("medusa"), ar),
               "load_speedup": _ratio(load, ar),
               "load_over_best": load["decode_tokens_per_s"] / best_fixed if load and load["decode_tokens_per_s"] else None,
               "load_k_mean": load["k_mean"] if load else None}
        rows_out.append(row)
        if crossover is None and measured < 1.0:
            crossover = b
    mean_alpha = statistics.fmean(r["alpha"] for r in rows_out) if rows_out else 0.7
    mean_tokens = statistics.fmean(r["decode_tokens_per_row"] for r in rows_out) if rows_out else None
    measured_rows = sorted(int(r) for r in cost["target"])
    # the theory shown beside each measured B (ragged, the cost table); and, between and beyond
    # them, the pooled theory at the mean alpha
    theory_cross = next((r["batch"] for r in rows_out if r["theory_speedup"] < 1.0), None)
    pooled_cross = next((b for b in range(1, measured_rows[-1] + 1)
                         if predicted_speedup(mean_alpha, k, b, target, draft, mean_tokens)["speedup"] < 1.0), None)
    ar_rates = {r["batch"]: r["ar_tokens_per_s"] for r in rows_out}
    policy = report.get("policy") or {}
    for r in rows_out:  # the paired score where the policy section ran (the lanes' ratio otherwise)
        r["load_over_best_paired"] = (policy.get(str(r["batch"])) or {}).get("ratio")
    load_scores = [r["load_over_best_paired"] if policy else r["load_over_best"] for r in rows_out]
    checks = {
        "ar_16_over_1": ar_rates[16] / ar_rates[1] if 16 in ar_rates and 1 in ar_rates else None,
        # what this machine's passes allow: 16 rows in one pass against 16 one-row passes (the table)
        "ar_16_ceiling": 16 * target(1, 1) / target(16, 1) if "16" in cost["target"] else None,
        "spec_b1_batched_over_single": (report.get("single") or {}).get("ratio"),
        "measured_over_theory": [round(r["measured_over_theory"], 3) for r in rows_out],
        "measured_over_in_run_theory": [None if r["measured_over_in_run_theory"] is None
                                        else round(r["measured_over_in_run_theory"], 3) for r in rows_out],
        "load_over_best": [None if r["load_over_best"] is None else round(r["load_over_best"], 3) for r in rows_out],
        "load_over_best_paired": [None if r["load_over_best_paired"] is None else round(r["load_over_best_paired"], 3)
                                  for r in rows_out],
        "memory_added_gb": ((report.get("memory") or {}).get("added_bytes") or 0) / 1e9 or None,
    }
    checks["pass"] = {
        "ar_16x_at_least_8": checks["ar_16_over_1"] is not None and checks["ar_16_over_1"] >= 8,
        "ar_16x_within_10pct_of_the_pass_ceiling": None not in (checks["ar_16_over_1"], checks["ar_16_ceiling"])
                                                   and checks["ar_16_over_1"] >= 0.9 * checks["ar_16_ceiling"],
        "spec_b1_within_5pct": checks["spec_b1_batched_over_single"] is not None
                               and checks["spec_b1_batched_over_single"] >= 0.95,
        "theory_within_15pct": bool(rows_out) and all(0.85 <= r["measured_over_theory"] <= 1.15 for r in rows_out),
        "in_run_theory_within_15pct": bool(rows_out) and all(
            r["measured_over_in_run_theory"] is not None and 0.85 <= r["measured_over_in_run_theory"] <= 1.15
            for r in rows_out),
        "load_at_least_095": bool(load_scores) and all(s is not None and s >= 0.95 for s in load_scores),
        "memory_under_1_5gb": checks["memory_added_gb"] is not None and checks["memory_added_gb"] <= 1.5,
    }
    return {"rows": rows_out, "crossover_measured": crossover, "crossover_theory": theory_cross,
            "crossover_pooled_theory": pooled_cross, "checks": checks, "paired": paired(report)}


def _per_step(lane: dict, key: str) -> Optional[float]:
    steps = lane["steps"] - 1  # the first step also ran the prompts
    return lane[key] / steps if steps > 0 else None


def ragged_speedup(spec: dict, ar: dict, k: int, rows: int, target: Optional[CostTable],
                   draft: Optional[CostTable]) -> Optional[float]:
    """Spec's speedup from each row's own alpha, with the batch's ragged end: row r needs S_r
    steps on average (theory.expected_run_time at unit cost, its own alpha, its decode tokens),
    and the batch runs until its slowest row is done, each step costing a pass of the rows still
    live. A batch of rows that accept differently pays for its stragglers: late passes of few rows
    cost nearly what full ones did while the pass is memory-bound.

    Costs from the cost table (`target`, `draft`); with None, from what the two lanes measured as
    they ran (the plain lane's mean pass; the spec lane's mean step at each number of live rows,
    others scaled from the table's shape): the acceptance model alone, the machine's drift since
    the table left out. None without per-row numbers."""
    alphas, tokens = spec.get("row_alpha"), spec.get("row_decode_tokens")
    ar_tokens = ar.get("row_decode_tokens")
    if not alphas or not tokens or not ar_tokens or any(a is None for a in alphas):
        return None
    steps = sorted(theory.expected_run_time(min(a, 0.999), k, max(1, n), lambda kk: 1.0)
                   for a, n in zip(alphas, tokens))
    table = _TableStep(target, draft, k)
    if target is None:  # in-run costs
        measured = {int(live): t for live, t in (spec.get("step_s_by_rows") or {}).items()}
        ar_step = _per_step(ar, "verify_s")
        if not measured or not ar_step:
            return None
        full = max(measured)

        def step(live: int) -> float:
            return measured[live] if live in measured else measured[full] * table(live) / table(full)
    else:
        ar_step, step = target(rows, 1), table
    spec_time, before = 0.0, 0.0
    for i, s_i in enumerate(steps):  # between the i-th and (i+1)-th row's end, rows - i rows are live
        spec_time += (s_i - before) * step(rows - i)
        before = s_i
    ar_time = max(ar_tokens) * ar_step  # plain rows finish together (the same budget)
    return (sum(tokens) / spec_time) / (sum(ar_tokens) / ar_time)


class _TableStep:
    """A speculative step's cost at `live` rows from the cost tables (the report's, when the
    lanes' own are asked for: only its shape is used then)."""

    def __init__(self, target, draft, k):
        self.target, self.draft, self.k = target or _TABLES["target"], draft or _TABLES["draft"], k

    def __call__(self, live: int) -> float:
        return self.target(live, self.k + 1) + self.draft(live, 2) + (self.k - 1) * self.draft(live, 1)


_TABLES: dict = {}  # the report's tables, set by analyse()


def in_run_speedup(spec: dict, ar: dict, k: int, tokens: float) -> Optional[float]:
    """The same theory with the pass costs these two lanes measured while they ran, instead of the
    cost table measured minutes before: a plain step costs the AR lane's mean pass, a k-draft step
    the spec lane's mean pass plus drafting (shorter tail steps in proportion). It separates what
    the model of acceptance predicts from how far the machine's speed drifted since the table."""
    ar_step, verify, drafting = _per_step(ar, "verify_s"), _per_step(spec, "verify_s"), _per_step(spec, "draft_s")
    if not ar_step or verify is None or drafting is None or spec.get("alpha") is None:
        return None

    def step(kk: int) -> float:
        return ar_step + (verify + drafting - ar_step) * kk / k

    n = max(1, round(tokens))
    return ar_step / (theory.expected_run_time(min(spec["alpha"], 0.999), k, n, step) / n)


def decode_tokens(lane: dict) -> float:
    """Tokens the batch committed after its first step (reports before this field: rate x time)."""
    if lane.get("decode_tokens") is not None:
        return lane["decode_tokens"]
    return lane["decode_tokens_per_s"] * (lane["wall_s"] - lane["prefill_s"])


def _ratio(lane, ar):
    return lane["decode_tokens_per_s"] / ar["decode_tokens_per_s"] if lane and ar and lane["decode_tokens_per_s"] else None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specviz.bench.batched", description=__doc__.split("\n\n")[0])
    parser.add_argument("--pair", default=None, help="preset (default: $SPECVIZ_PAIR or qwen-coder)")
    parser.add_argument("--batches", default=",".join(map(str, BATCHES)))
    parser.add_argument("--lanes", default=",".join(LANES))
    parser.add_argument("--tokens", type=int, default=32, help="new tokens per user")
    parser.add_argument("--repeats", type=int, default=2,
                        help="runs of each lane at B <= --repeat-up-to (its fastest is kept)")
    parser.add_argument("--repeat-up-to", type=int, default=REPEAT_UP_TO,
                        help=f"the largest batch whose lanes run --repeats times (default {REPEAT_UP_TO}: on a "
                             "float32 CPU a batch of 32 takes minutes a lane; where passes are fast, repeat every B)")
    parser.add_argument("--traces", default=None, help="a folder for each kept lane's events (gzipped JSONL), "
                                                       "which `python -m specviz.bench.recordings record-serving` ships")
    parser.add_argument("--out", default=None, help="report path (.json; a .md is written beside it)")
    parser.add_argument("--resume", action="store_true", help="continue the report at --out")
    parser.add_argument("--skip", default="", help="sections to leave out: policy,single,memory")
    parser.add_argument("--policy-rounds", type=int, default=3,
                        help="rounds of ar, spec and load back to back at each B for the policy's paired score")
    parser.add_argument("--redraw", action="store_true",
                        help="rewrite --out's analysis and Markdown from its measured lanes; runs no model")
    args = parser.parse_args(argv)
    if args.redraw:
        return run_command(lambda: _redraw(args), "interrupted; each file is written whole or not at all")
    return run_command(lambda: _run(args), "interrupted; every finished lane is saved in the report, and the same "
                                           "command with --resume goes on after them")


def _redraw(args) -> int:
    if not args.out:
        raise SpecvizError("--redraw needs --out, the report to rewrite")
    path = Path(args.out)
    report = json.loads(path.read_text(encoding="utf-8"))
    report["analysis"] = analyse(report)
    files.write_json(path, report)
    files.write_text(path.with_suffix(".md"), markdown(report))
    say(f"rewrote {path} and {path.with_suffix('.md')}")
    return 0


def _run(args) -> int:
    try:
        batches = [int(b) for b in args.batches.split(",") if b]
    except ValueError:  # not whole numbers: refused below, with the other bad input
        batches = []
    lanes = [name for name in args.lanes.split(",") if name]
    bad = [name for name in lanes if name not in LANES]
    if bad or not batches or any(not 1 <= b <= len(SERVING_BANK) for b in batches):
        raise SpecvizError(f"lanes are {', '.join(LANES)} and batches 1..{len(SERVING_BANK)}; got {args.lanes!r}, "
                           f"{args.batches!r}")
    pair = load_pair(args.pair)
    tag = "cuda" if pair.device.type == "cuda" else ("bf16" if "bfloat16" in str(pair.dtype) else "fp32")
    out = Path(args.out or f"docs/benchmarks/batched-{pair.name}-{tag}.json")
    report = json.loads(out.read_text(encoding="utf-8")) if args.resume and out.exists() else {}
    report.setdefault("version", SECTION_VERSION)
    report["environment"] = environment(pair, False)
    report["plan"] = {"batches": batches, "lanes": lanes, "tokens": args.tokens, "lane_options": LANES,
                      "repeats": args.repeats, "repeat_up_to": args.repeat_up_to}
    # the code that decides each lane (a resumed report keeps the first sitting's: its lanes were run by it)
    report.setdefault("code", {lane: code_version(LANES[lane]["method"], LANES[lane].get("k"), batched=True)
                               for lane in lanes})
    report.setdefault("lanes", {})
    started = time.perf_counter()

    def save():
        report["analysis"] = analyse(report)
        files.write_json(out, report)
        files.write_text(out.with_suffix(".md"), markdown(report))

    busy = others_busy()
    if busy is not None and busy > 0.25:
        say(f"warning: other processes keep {busy:.1f} cores busy: they slow every number measured here")
    if "cost" not in report:
        say("measuring the cost of a pass: B rows of w tokens")
        report["cost"] = cost_section(pair, batches)
        save()
    else:  # resumed: the policy's table comes from the report, not a second measurement
        for role in ("target", "draft"):
            CostTable.of(getattr(pair, role)).load(report["cost"][role])
    # every lane `repeats` times, the lanes of one B in turn (forwards, then backwards): each lane
    # keeps its fastest run, so a slow spell of the machine costs one run of each, not one lane
    # (batches above --repeat-up-to run once: a slow spell as long as a lane's run then decides it,
    # seen as a plain lane 25% slower than the AR lane's identical passes)
    work = [(b, name, rep) for b in batches for rep in range(args.repeats if b <= args.repeat_up_to else 1)
            for name in (lanes if rep % 2 == 0 else lanes[::-1])]
    done = report.setdefault("done", [])
    left = [w for w in work if f"{w[0]}-{w[1]}-{w[2]}" not in done]
    total_w, done_w, spent = sum(b for b, _, _ in left), 0.0, 0.0
    for i, (b, name, rep) in enumerate(left):
        lane_rows = report["lanes"].setdefault(str(b), {})
        t0 = time.perf_counter()
        prompts = [SERVING_BANK[j % len(SERVING_BANK)] for j in range(b)]
        events: list = []
        result = run_lane(pair, prompts, LANES[name], args.tokens, events)
        previous = lane_rows.get(name)
        rates = (previous or {}).get("rates", []) + [result["decode_tokens_per_s"]]
        if previous is None or (result["decode_tokens_per_s"] or 0) > (previous["decode_tokens_per_s"] or 0):
            lane_rows[name] = result
            if args.traces:  # the kept run's events: the app's recorded serving runs come from here
                write_trace([e.to_dict() for e in events], Path(args.traces) / f"B{b:02d}-{name}.jsonl.gz")
        lane_rows[name]["rates"] = rates
        # greedy: every run's rows equal the AR lane's (and an AR run's the other AR runs')
        ar_rows = (previous or {}).get("rows") if name == "ar" else lane_rows.get("ar", {}).get("rows")
        same = None if ar_rows is None else result["rows"] == ar_rows
        before = (previous or {}).get("greedy_equal_ar")
        lane_rows[name]["greedy_equal_ar"] = False if False in (before, same) else (same if same is not None else before)
        done.append(f"{b}-{name}-{rep}")
        spent += time.perf_counter() - t0
        done_w += b
        eta = spent / done_w * (total_w - done_w) if done_w else 0
        say(f"B={b:>2} {name:6s} {result['decode_tokens_per_s'] or float('nan'):7.2f} tok/s, "
            f"user {result['user_tokens_per_s'] or float('nan'):.2f} "
            f"tok/s, alpha {result['alpha'] if result['alpha'] is not None else float('nan'):.2f}"
            f"{'' if same in (None, True) else ' ROWS DIFFER FROM AR'}  "
            f"[{i + 1}/{len(left)}, ETA {eta / 60:.1f} min]")
        save()
    skip = set(args.skip.split(","))
    if "policy" not in skip and args.policy_rounds:
        say(f"the load policy, paired with ar and spec in {args.policy_rounds} rounds at each B")
        policy_section(pair, batches, args.tokens, args.policy_rounds, report, save)
    if "single" not in skip and "single" not in report:
        say("spec at B = 1: the batched path against the single-sequence engine")
        report["single"] = single_section(pair, max(64, args.tokens))  # longer runs: fewer steps' noise
        save()
    if "memory" not in skip and "memory" not in report:
        say("memory: 32 rows of 256-token contexts")
        report["memory"] = memory_section(pair)
        save()
    report["wall_s"] = report.get("wall_s", 0) + time.perf_counter() - started
    save()
    say(f"report: {out} and {out.with_suffix('.md')}")
    return 0


def _paired_lines(report: dict) -> list:
    found = paired(report)
    if not found:
        return []
    floor = found["noise_floor"]
    lines = ["## Spec over AR, paired", "",
             "Each round runs ar, spec and load back to back (the policy's rounds below); a ratio is spec over ar "
             "in one round. Noise floor: " + (f"{100 * floor:.1f}%, the largest distance from 1 of load over ar "
                                              f"where load never speculated ({found['floor_from']} rounds: the same "
                                              "decoding timed twice)" if floor is not None else
                                              "not measured (load speculated at every B)") +
             ". A difference inside it is no measurable difference.", "",
             "| B | rounds: spec / ar | median | range | verdict |", "|---:|---|---:|---|---|"]
    for r in found["rows"]:
        lines.append(f"| {r['batch']} | {', '.join(f'{x:.2f}x' for x in r['ratios'])} | {r['median']:.2f}x | "
                     f"{r['low']:.2f}-{r['high']:.2f} | {r['verdict']} |")
    stops = found["stops_paying_at"]
    lines += ["", f"Paired, speculation stops paying at B = {stops}." if stops else
              "Paired, no batch size measured spec slower than AR beyond the noise floor.", ""]
    return lines


def markdown(report: dict) -> str:
    env, an = report.get("environment", {}), report.get("analysis") or {}
    lines = [f"# Batched speculation on {env.get('pair')} ({env.get('device_name')}, {env.get('dtype')}, "
             f"{env.get('threads')} threads)", "",
             "Generated by `python -m specviz.bench.batched`; greedy, "
             f"{report['plan']['tokens']} new tokens per user, B different prompts. "
             "Tokens/s are the batch's decode rate (the prompts' pass left out).", ""]
    cost = report.get("cost")
    if cost:
        widths = sorted({int(w) for per in cost["target"].values() for w in per})
        lines += ["## The cost of one target pass (ms): B rows of w tokens", "",
                  f"Knee (a pass costs 1.5x a one-token pass): {cost['knee']} tokens in the pass.", "",
                  "| B | " + " | ".join(f"w={w}" for w in widths) + " | draft w=1 | draft w=2 | draft w=8 |",
                  "|---:|" + "---:|" * (len(widths) + 3)]
        for b, per in sorted(cost["target"].items(), key=lambda kv: int(kv[0])):
            d = cost["draft"].get(b, {})
            cells = [f"{1e3 * per[str(w)]:.0f}" if str(w) in per else "" for w in widths]
            lines.append(f"| {b} | " + " | ".join(cells) + f" | {_f(_ms(d.get('1')), 0)} | {_f(_ms(d.get('2')), 0)} | {_f(_ms(d.get('8')), 0)} |")
        lines.append("")
    rows = an.get("rows") or []
    if rows:
        lines += ["## Speedup against batch size", "",
                  "Theory: each row's own alpha and the cost table, the batch running until its slowest row is "
                  "done (pooled: one alpha for every row, all rows ending together); in-run: the same theory "
                  "with the pass times the two lanes measured as they ran. load / best compares the load lane with "
                  "lanes run minutes apart" + ("; the policy's score is the paired one below" if report.get("policy")
                                               else "") + ".", "",
                  "| B | AR tok/s | spec tok/s | measured | theory | measured/theory | pooled theory | in-run theory | "
                  "measured/in-run | AR pass ms (table) | alpha | pld | medusa | load | load / best | load mean k |",
                  "|---:|" + "---:|" * 15]
        for r in rows:
            lines.append(f"| {r['batch']} | {r['ar_tokens_per_s']:.2f} | {r['spec_tokens_per_s']:.2f} | "
                         f"{r['measured_speedup']:.2f}x | {r['theory_speedup']:.2f}x | {r['measured_over_theory']:.2f} | "
                         f"{_x(r.get('pooled_theory_speedup'))} | "
                         f"{_x(r.get('in_run_theory_speedup'))} | {_f(r.get('measured_over_in_run_theory'))} | "
                         f"{_f(_ms(r.get('ar_pass_s')), 0)} ({_f(_ms(r.get('table_ar_pass_s')), 0)}) | "
                         f"{r['alpha']:.2f} | {_x(r['pld_speedup'])} | {_x(r['medusa_speedup'])} | "
                         f"{_x(r['load_speedup'])} | {_f(r['load_over_best'])} | {_f(r['load_k_mean'])} |")
        lines += ["", f"Unpaired (each lane's fastest repeat, run minutes apart), speculation stops paying (spec k = {LANES['spec']['k']}): measured at B = "
                      f"{an.get('crossover_measured') or 'none measured'}, predicted at B = {an.get('crossover_theory')} "
                      f"(the pooled theory, every row at the mean alpha: B = {an.get('crossover_pooled_theory')}).", ""]
        lines += ["## Each user's view", "", "| B | lane | user tok/s | inter-token p50 ms | p95 ms | TTFT s |",
                  "|---:|---|---:|---:|---:|---:|"]
        for b, lanes in sorted(report["lanes"].items(), key=lambda kv: int(kv[0])):
            for name, lane in lanes.items():
                lines.append(f"| {b} | {name} | {_f(lane['user_tokens_per_s'])} | {_f(lane['itl_p50_ms'], 0)} | "
                             f"{_f(lane['itl_p95_ms'], 0)} | {_f(lane['ttft_s'])} |")
        lines.append("")
    lines += _paired_lines(report)
    policy = report.get("policy")
    if policy:
        lines += ["## The load policy, paired", "",
                  "ar, spec (k = 4) and load back to back in each round (the order rotating); each round's ratio is "
                  "load over the better of that round's ar and spec, the score their median.", "",
                  "| B | rounds: load / best | median | rounds: spec / ar |", "|---:|---|---:|---|"]
        for b, entry in sorted(policy.items(), key=lambda kv: int(kv[0])):
            spec_ar = [x["spec"] / x["ar"] for x in entry["rounds"] if x["spec"] and x["ar"]]
            lines.append(f"| {b} | {', '.join(f'{x:.2f}' for x in entry['ratios'])} | {_f(entry['ratio'])} | "
                         f"{', '.join(f'{x:.2f}x' for x in spec_ar)} |")
        lines.append("")
    checks = an.get("checks")
    if checks:
        lines += ["## The benchmark's own checks", ""]
        for key, ok in checks["pass"].items():
            lines.append(f"- {key}: {'yes' if ok else 'NO'}")
        lines += ["", f"AR at B = 16 over B = 1: {_f(checks['ar_16_over_1'])}x (the cost table's ratio, 16 one-row "
                      f"passes against one 16-row pass: {_f(checks.get('ar_16_ceiling'))}x); spec at B = 1 batched over single: "
                      f"{_f(checks['spec_b1_batched_over_single'])}; memory added at B = 32, 256-token contexts: "
                      f"{_f(checks['memory_added_gb'])} GB (KV caches "
                      f"{_f(((report.get('memory') or {}).get('kv_total') or 0) / 1e9)} GB).", ""]
    return "\n".join(lines)


def _x(v):
    return "" if v is None else f"{v:.2f}x"


def _f(v, digits: int = 2):
    return "" if v is None else f"{v:.{digits}f}"


if __name__ == "__main__":
    sys.exit(main())
