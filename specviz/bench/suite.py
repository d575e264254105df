"""The benchmark suite: what speculative decoding buys on one pair, in one run, as ratios.

Per pair, device and dtype, over a fixed prompt set (specviz.prompts), greedy and sampled:
every specviz method and transformers' own generate() (plain, assistant_model, prompt lookup) on
the same prompt ids, interleaved (each repeat rotates the method order so slow drift of the
machine hits every method alike) and summarised as medians. Around them: the verify-cost curve
(one target forward over 1..64 tokens), its batch-size proxy, the memory-bandwidth limit of
decoding, and a controlled-acceptance sweep that traces speedup against alpha on real timings.

specviz runs keep their events on with top-10 slices (record_topk=10), as the app runs them.
Usage: python -m specviz.bench [--pair qwen-coder] [--quick] [--out PREFIX] [--check-against F]
Definitions of every number: specviz.bench.ratios and specviz.analysis.metrics (latency: stream_stats); docs/benchmarks/.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import re
import shlex
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Optional

import torch

from specviz import files
from specviz import methods as registry
from specviz.analysis import metrics, theory
from specviz.argparsing import Parser
from specviz.bench import hf, ratios, report as rep, roofline
from specviz.bench.batched import run_lane
from specviz.bench.controlled import ControlledDrafter
from specviz.bench.held import HeldVerifier
from specviz.bench.synthetic import SIZES, random_pair
from specviz.config import RunConfig, vocab_size
from specviz.engine.sequence import generate
from specviz.errors import InputError, run_command
from specviz.prompts import PROMPTS, SERVING_BANK
from specviz.runtime import costs, kernels
from specviz.runtime.head_nets import KINDS, HeadsError, check_heads_file
from specviz.runtime.lm import use_cuda_graphs
from specviz.runtime.machine import dtype_name, environment, loadavg
from specviz.runtime.models import load_pair
from specviz.runtime.quant import quantize_draft

SUITE_VERSION = 2  # 2: "batch" (measured batched decoding) replaces "batch_proxy"
RECORD_TOPK = 10


@dataclass(frozen=True)
class Lane:
    """One method as the suite runs it: a specviz RunConfig, or a kind of transformers' generate()
    (specviz.bench.hf) with its draft length; beside either, what belongs to the bench and not
    to the run: the draft's weights and the linear kernels."""

    config: Optional[RunConfig] = None  # a specviz lane
    kind: Optional[str] = None  # a transformers lane: plain | assisted | assisted-default | pld
    k: Optional[int] = None  # transformers' draft length (assisted, pld)
    draft: str = "none"  # "int8": the draft model's linear weights in int8 (specviz.runtime.quant; CPU only)
    kernel: Optional[str] = None  # "aten" | "gemv"; None: specviz on the pair's kernels, transformers on nn.Linear

    @property
    def engine(self) -> str:
        return "transformers" if self.config is None else "specviz"

    def describe(self) -> dict:
        """The lane as the report's `methods` names it: method and what sets its drafts, or the
        generate() kind and k; the bench's settings where they are not the default."""
        cfg = self.config
        if cfg is None:
            out = {"kind": self.kind, "k": self.k}
        else:  # k for chains (AR has none), the shape for trees
            out = {"method": cfg.method, "k": cfg.k if cfg.draft_k else None,
                   "tree": cfg.tree if cfg.method in ("tree", "medusa-tree") else None}
        out.update(draft=None if self.draft == "none" else self.draft, kernel=self.kernel)
        return {"engine": self.engine, **{key: value for key, value in out.items() if value is not None}}


# Medusa: one token per head; EAGLE's drafts cost little, so it drafts deeper (P-EAGLE: all 5 in one forward)
HEADS_K = {"medusa": 4, "eagle": 5, "eagle3": 5, "peagle": 5, "dflash": 5}
SUFFIX_K = 32  # above suffix's own ceiling (SPEC_FACTOR x MAX_MATCH + SPEC_OFFSET = 26): the match and min_prob decide
MEDUSA_TREE = "3,2,1,1"


def method_table(k: int, pld_k: int) -> dict:
    """name -> Lane."""
    run = RunConfig(record_topk=RECORD_TOPK)
    spec, spec_auto = run.replace(method="spec", k=k), run.replace(method="spec", k="auto")
    return {
        "ar": Lane(run.replace(method="ar")),
        "spec": Lane(spec),
        "spec-auto": Lane(spec_auto),
        "spec-int8": Lane(spec, draft="int8"),
        "spec-int8-auto": Lane(spec_auto, draft="int8"),
        "tree": Lane(run.replace(method="tree", tree="3,2,1")),
        "tree-dynamic": Lane(run.replace(method="tree", tree="dynamic")),
        "pld": Lane(run.replace(method="pld", k=pld_k)),
        "lookahead": Lane(run.replace(method="lookahead")),
        "cascade": Lane(run.replace(method="cascade", k=k)),
        # drafters on the target's own hidden states, with the heads shipped for the pair
        "medusa": Lane(run.replace(method="medusa", k=HEADS_K["medusa"])),
        "medusa-tree": Lane(run.replace(method="medusa-tree", tree=MEDUSA_TREE)),
        "eagle": Lane(run.replace(method="eagle", k=HEADS_K["eagle"])),
        "eagle-tree": Lane(run.replace(method="eagle-tree")),
        "eagle3": Lane(run.replace(method="eagle3", k=HEADS_K["eagle3"])),
        "eagle3-tree": Lane(run.replace(method="eagle3-tree")),
        "eagle3-tree-auto": Lane(run.replace(method="eagle3-tree", tree_budget="auto")),  # sized to the machine
        "peagle": Lane(run.replace(method="peagle", k=HEADS_K["peagle"])),
        "dflash": Lane(run.replace(method="dflash", k=HEADS_K["dflash"])),
        "dflash-tree-auto": Lane(run.replace(method="dflash-tree", tree_budget="auto")),  # sized to the machine
        # no model: the prompt's and the session's suffix trees (a run of the bench starts an empty
        # session unless its config names one: run_specviz)
        "suffix": Lane(run.replace(method="suffix", k=SUFFIX_K)),
        "suffix-tree": Lane(run.replace(method="suffix-tree", k=SUFFIX_K)),
        "hf": Lane(kind="plain"),
        "hf-assisted": Lane(kind="assisted", k=k),
        "hf-assisted-default": Lane(kind="assisted-default"),
        "hf-assisted-int8": Lane(kind="assisted", k=k, draft="int8"),
        # transformers' loop on specviz's CPU kernels: separates the loop from the kernels
        "hf-assisted-gemv": Lane(kind="assisted", k=k, kernel="gemv"),
        "hf-pld": Lane(kind="pld", k=pld_k),
    }


GREEDY_ONLY = frozenset({"lookahead"})
HEAD_LANES = {name: registry.get(lane.config.method).heads for name, lane in method_table(4, 8).items()
              if lane.config is not None and registry.get(lane.config.method).heads}
# methods whose draft model runs with int8 weight-only linears (specviz.runtime.quant; CPU only): the
# target is the same bf16 model as everywhere else, so their ratios to AR stay like for like
INT8_METHODS = frozenset(name for name, lane in method_table(4, 8).items() if lane.draft == "int8")


@dataclass(frozen=True)
class Plan:
    mode: str
    prompts: tuple  # greedy groups: every method
    tokens: int
    repeats: int
    k: int
    pld_k: int
    methods: tuple
    temperatures: tuple  # sampled groups: `sampled_methods` on `sampled_prompts`
    sampled_prompts: tuple
    sampled_methods: tuple
    cost_tokens: tuple
    cost_repeats: int
    batches: tuple
    a_sets: tuple
    controlled_prompt: str
    budget_s: float  # the wall time the suite should stay under on 2 CPU cores (real pair)
    prompt_tokens: tuple = ()  # ((prompt, new tokens), ...): prompts measured over a longer answer
    batch_tokens: int = 16  # new tokens per user in the batched runs (B users of the serving bank)
    hold: bool = False  # greedy groups: specviz lanes held to AR's text (specviz.bench.held, --hold-to-ar)

    def tokens_for(self, prompt: str) -> int:
        return dict(self.prompt_tokens).get(prompt, self.tokens)


ALL_METHODS = tuple(method_table(4, 8))
# The rewrite's answer (the whole renamed function) is about 120 tokens: the full plan measures it
# whole, since a copying drafter's gain is over the copied span, not over its first 48 tokens.
# 32 new tokens (the rewrite 128) and six methods in the sampled groups keep the full plan
# within its budget on 2 cores of a native-bf16 CPU; transformers' default adaptive schedule
# (hf-assisted-default) is left to --methods: it is not a same-k comparison. Plain `hf` runs in the
# greedy groups only: its ratio to AR does not depend on the temperature. The quick plan leaves out
# hf-assisted-gemv (transformers' loop on specviz's kernels), a diagnosis rather than a ranking.
FULL = Plan("full", tuple(PROMPTS), 32, 1, 4, 8, tuple(m for m in ALL_METHODS if m != "hf-assisted-default"),
            (0.7, 1.0), ("code", "chat"), ("ar", "spec", "spec-int8", "pld", "hf-assisted", "hf-pld"),
            (1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32, 48, 64), 3, (1, 4, 16),
            (0.0, 0.25, 0.5, 0.7, 0.85, 1.0), "code", 900.0, (("rewrite", 128),))
QUICK = Plan("quick", ("code", "rewrite", "chat"), 32, 1, 4, 8,
             ("ar", "spec", "spec-int8", "pld", "hf-assisted"), (0.7,), ("code",),
             ("ar", "spec", "hf-assisted"), (1, 2, 4, 5, 8, 16, 32, 64), 2, (1, 4, 16),
             (0.5, 0.8, 1.0), "code", 180.0)  # a_set 0 costs 4 draft forwards per token: full plan only


def groups(plan: Plan) -> dict:
    """{group name: (prompt name, temperature, methods)}: greedy groups first."""
    out = {f"{p}@greedy": (p, 0.0, plan.methods) for p in plan.prompts}
    for t in plan.temperatures:
        for p in plan.sampled_prompts:
            out[f"{p}@t{t:g}"] = (p, t, tuple(m for m in plan.sampled_methods if m not in GREEDY_ONLY))
    return out


# ---------------------------------------------------------------------------------------------
# one timed run

def run_method(pair, table: dict, name: str, prompt_ids: list, temperature: float, tokens: int,
               seed: int, static_cache: bool = False, script: Optional[list] = None) -> dict:
    """One timed run of the lane `table[name]`: the record ratios.summarise_method reads.
    `script`: AR's greedy answer, to which a specviz lane's verification is held (HeldVerifier)."""
    lane = table[name]
    pair = quantize_draft(pair, lane.draft)  # the pair itself for "none"
    # transformers on the stock nn.Linear layers, as its users run it, unless the lane names a kernel
    stock = lane.kernel == "aten" or (lane.kernel is None and lane.engine == "transformers")
    with kernels.aten_linears(pair.target, pair.draft) if stock else contextlib.nullcontext():
        if lane.config is None:
            record = run_transformers(pair, lane, prompt_ids, temperature, tokens, seed, static_cache)
        else:
            # only the exact greedy rule is held (a lossy rule's text is its own by design)
            hold = script is not None and lane.config.method != "ar" and lane.config.acceptance == "exact"
            held = HeldVerifier(script) if hold else None
            record = run_specviz(pair, lane.config, prompt_ids, temperature, tokens, seed, verifier=held)
            if held is not None:
                record["forced"] = held.forced
    return {**record, "cpu_linear": "aten" if stock else getattr(pair, "cpu_linear", "aten")}


_FRESH_SESSIONS = itertools.count()


def run_specviz(pair, cfg: RunConfig, prompt_ids: list, temperature: float, tokens: int, seed: int,
                drafter=None, verifier=None) -> dict:
    """One run's numbers: the outer wall clock for tokens/s, the run's metrics for the rest. A run
    whose config names no suffix session gets an empty one of its own: suffix decoding then drafts
    from its prompt alone, never from the bench's other runs (specviz.bench.repeated names them)."""
    session = cfg.suffix_session or f"bench:{next(_FRESH_SESSIONS)}"
    start = time.perf_counter()
    events = list(generate(pair, prompt_ids, cfg.replace(temperature=temperature, max_new_tokens=tokens,
                                                         seed=seed, suffix_session=session),
                           drafter=drafter, verifier=verifier))
    seconds = time.perf_counter() - start
    m = events[-1].metrics
    new = m["new_tokens"]
    return {
        "engine": "specviz", "seconds": seconds, "new_tokens": new, "tokens_per_s": new / seconds,
        **metrics.stream_stats(*metrics.updates_from_events(events)),
        "tau": m["tau"], "alpha_empirical": m["alpha_empirical"], "alpha_analytic": m["alpha_analytic"],
        "accepted_per_drafted": m["accepted_per_drafted"], "position_acceptance": m["position_acceptance"],
        "c": m["c"], "target_forwards": m["target_forwards"],
        "target_forwards_per_token": m["target_forwards"] / new if new else None,
        # per forward over the steps without the prompt's prefill in them (specviz.analysis.metrics)
        "draft_s_per_forward": m["draft_s_per_forward"], "target_s_per_forward": m["verify_s_per_forward"],
        # a whole draft per step, however many forwards it took (P-EAGLE: one for k tokens)
        "draft_s_per_step": (m["decode_draft_time"] / m["decode_target_forwards"]
                             if m["decode_target_forwards"] else None),
        # the share of the run's own clock outside the draft and target forwards (specviz.bench.assisted)
        "outside_forwards": 1.0 - (m["draft_time"] + m["verify_time"]) / m["wall_time"],
        "counters": m["counters"], "lossless": m["lossless"], "token_ids": events[-1].token_ids,
        "draft_quant": events[0].draft_quant,
    }


def run_transformers(pair, lane: Lane, prompt_ids: list, temperature: float, tokens: int, seed: int,
                     static_cache: bool) -> dict:
    """transformers' generate(): its streamer's updates stand for specviz's step_finished events."""
    out = hf.run(pair, prompt_ids, lane.kind, k=lane.k, temperature=temperature, max_new_tokens=tokens,
                 seed=seed, static_cache=static_cache)
    new = len(out["token_ids"])
    updates = len(out["counts"])  # one streamer update per target forward
    return {"engine": "transformers", "seconds": out["seconds"], "new_tokens": new,
            "tokens_per_s": new / out["seconds"], **metrics.stream_stats(out["times"], out["counts"]),
            "tau": new / updates if updates else None, "target_forwards": updates,
            "target_forwards_per_token": updates / new if new else None, "token_ids": out["token_ids"],
            "draft_quant": getattr(pair, "draft_quant", "none") if lane.kind.startswith("assisted") else None}


# ---------------------------------------------------------------------------------------------
# the sections

def measure_methods(pair, plan: Plan, say, static_cache: bool = False, table: Optional[dict] = None) -> dict:
    """{group: {method: [run records]}}, interleaved and rotated per repeat; the plan's methods are
    names in `table` (default: method_table)."""
    table = table or method_table(plan.k, plan.pld_k)
    plan_groups = groups(plan)
    ids = {p: pair.encode(PROMPTS[p].text, chat=PROMPTS[p].chat) for p in PROMPTS}
    first = ids[plan.prompts[0]]
    for name in plan.methods:  # warm-up: first calls pay one-off costs (allocations, kernels)
        run_method(pair, table, name, first, 0.0, 4, 0, static_cache)
    raw = {g: {m: [] for m in methods} for g, (_, _, methods) in plan_groups.items()}
    # --hold-to-ar: AR's greedy answer per greedy group, untimed, the text the lanes are held to
    scripts = {g: run_method(pair, table, "ar", ids[prompt], 0.0, plan.tokens_for(prompt), 0)["token_ids"]
               for g, (prompt, temperature, _) in plan_groups.items() if plan.hold and temperature == 0.0}
    for r in range(plan.repeats):
        for i, (g, (prompt, temperature, methods)) in enumerate(plan_groups.items()):
            turn = (r + i) % len(methods)
            for name in methods[turn:] + methods[:turn]:
                rec = run_method(pair, table, name, ids[prompt], temperature, plan.tokens_for(prompt), r,
                                 static_cache, scripts.get(g))
                raw[g][name].append(rec)
            say(f"  {g} repeat {r + 1}/{plan.repeats}: "
                + ", ".join(f"{m} {raw[g][m][-1]['tokens_per_s']:.1f}" for m in methods) + " tok/s")
    return raw


def measure_costs(pair, plan: Plan) -> dict:
    """The verify-cost curve of both models and its batch-size proxy."""
    vocab = min(vocab_size(pair), 1000)  # random ids for timing, inside any vocabulary
    curve = {role: costs.forward_cost(getattr(pair, role), list(plan.cost_tokens),
                                        repeats=plan.cost_repeats, vocab=vocab)
             for role in ("target", "draft")}
    # a 32-token context per row: at batch 16 the prefill alone is 512 tokens on a CPU
    batch = {"target": costs.batch_cost(pair.target, list(plan.batches), [1, plan.k + 1], prefix=32,
                                          repeats=plan.cost_repeats, vocab=vocab),
             "draft": costs.batch_cost(pair.draft, list(plan.batches), [1], prefix=32,
                                         repeats=plan.cost_repeats, vocab=vocab)}
    return {"curve": curve, "batch": batch}


def measure_controlled(pair, plan: Plan, ar_runs: list, verify_cost) -> dict:
    """Speedup against alpha with the controlled-acceptance drafter, greedy, k = plan.k, against
    `ar_runs`, the same prompt's AR runs; the first one's tokens are the drafter's script."""
    prompt = PROMPTS[plan.controlled_prompt]
    ids = pair.encode(prompt.text, chat=prompt.chat)
    script, cfg = ar_runs[0]["token_ids"], RunConfig(method="spec", k=plan.k, record_topk=RECORD_TOPK)
    runs = {a: [] for a in plan.a_sets}
    for r in range(plan.repeats):
        for a in plan.a_sets:
            drafter = ControlledDrafter(pair.draft, script, a, vocab_size(pair), pair.eos_token_ids, seed=r)
            runs[a].append(run_specviz(pair, cfg, ids, 0.0, plan.tokens, r, drafter=drafter))
    rows = ratios.summarise_group({"ar": ar_runs, **runs}, greedy=False)  # speedups over those AR runs
    points = []
    for a, recs in runs.items():
        row = rows[a]
        fit = ratios.model_fit(row, plan.k, verify_cost)
        points.append({"a_set": a, "alpha": row["alpha_empirical"], "tau": row["tau"],
                       "tokens_per_s": row["tokens_per_s"], "speedup": row["speedup"],
                       "decode_speedup": row["decode_speedup"], "c": row["c_vs_ar"],
                       "predicted_speedup": fit and fit["predicted_speedup"], "ratio": fit and fit["ratio"],
                       "off_script": sum(rec["counters"].get("off_script", 0) for rec in recs),
                       "same_as_ar": all(rec["token_ids"] == script for rec in recs)})
    c_mean = ratios.median(p["c"] for p in points)
    curve = [{"alpha": a / 50, "speedup": theory.speedup_with_cost(a / 50, plan.k, c_mean, verify_cost)}
             for a in range(51)]
    return {"prompt": plan.controlled_prompt, "k": plan.k, "points": points, "theory": curve, "c": c_mean}


def measure_roofline(pair, results: dict, cost: dict) -> dict:
    bw = roofline.copy_bandwidth(pair.device)
    out = {"bandwidth_bytes_per_s": bw["bytes_per_s"], "bandwidth_method": bw["method"]}
    for role in ("target", "draft"):
        w = roofline.weight_bytes_per_token(getattr(pair, role))
        out[role] = {"weight_bytes_per_token": w, "limit_tokens_per_s": roofline.limit(bw["bytes_per_s"], w),
                     "forward_tokens_per_s": 1.0 / cost["curve"][role][1]}
        out[role]["forward_vs_limit"] = out[role]["forward_tokens_per_s"] / out[role]["limit_tokens_per_s"]
    greedy = [rows for g, rows in results.items() if g.endswith("@greedy")]
    limit = out["target"]["limit_tokens_per_s"]
    for name in ("ar", "hf"):
        tps = ratios.median(rows[name]["decode_tokens_per_s"] for rows in greedy if name in rows)
        out[f"{name}_decode_tokens_per_s"] = tps
        out[f"{name}_vs_limit"] = tps / limit if tps else None
    return out


# ---------------------------------------------------------------------------------------------
# the whole suite

def run_suite(pair, plan: Plan, say=print, static_cache: bool = False, load_s: float = 0.0) -> dict:
    """Every section of the report; wall_time_s counts `load_s` (model loading) too."""
    started = time.perf_counter() - load_s
    sections = {"load": load_s}
    env = environment(pair, static_cache)  # before the runs: its load average is the starting one

    def timed(name, fn, *args):
        say(f"{name} ...")
        t0 = time.perf_counter()
        out = fn(*args)
        sections[name] = time.perf_counter() - t0
        return out

    say(f"specviz bench ({plan.mode}) on {pair.name}, {pair.device}, {dtype_name(pair)}, "
        f"{torch.get_num_threads()} threads")
    cost = timed("verify-cost curve and forward costs per batch", measure_costs, pair, plan)
    verify_cost = theory.interpolate_cost(list(cost["curve"]["target"].items()))
    raw = timed("methods", measure_methods, pair, plan, say, static_cache)
    results = {g: ratios.summarise_group(per, greedy=g.endswith("@greedy")) for g, per in raw.items()}
    fits = {g: ratios.model_fit(rows["spec"], plan.k, verify_cost)
            for g, rows in results.items() if "spec" in rows}
    group = f"{plan.controlled_prompt}@greedy"
    controlled = timed("controlled acceptance sweep", measure_controlled, pair, plan, raw[group]["ar"],
                       verify_cost)
    roof = timed("bandwidth", measure_roofline, pair, results, cost)
    batched = timed("batched decoding", measure_batched, pair, plan)
    engines = ratios.engine_vs_transformers(results)
    report = {
        "suite_version": SUITE_VERSION, "mode": plan.mode, "plan": asdict(plan),
        "environment": env, "prompts": prompt_table(pair),
        "methods": {name: lane.describe() for name, lane in method_table(plan.k, plan.pld_k).items()
                    if name in set(plan.methods) | set(plan.sampled_methods)},
        "results": results,
        "ratios": {"engine_efficiency": engines["spec/hf-assisted"], "engine_vs_transformers": engines,
                   "model_fit": {g: f for g, f in fits.items() if f}, "roofline": roof},
        "cost_curve": cost["curve"],
        "batch": {"k": plan.k, "tokens": plan.batch_tokens, "note": BATCH_NOTE, "rows": ratios.batch_rows(
            cost["batch"]["target"], cost["batch"]["draft"], batched, plan.k)},
        "controlled": controlled, "ranking": ratios.ranking(results),
    }
    report.update(wall_time_s=time.perf_counter() - started, load_s=load_s, section_s=sections)
    report["environment"]["loadavg_end"] = loadavg()
    report["targets"] = ratios.targets(report)
    return report


BATCH_NOTE = ("B users of the serving bank decoded together (specviz.engine.batch: one target pass per step "
              "for every row, ragged acceptance), plain and speculative, greedy; measured beside the "
              "theory from the spec lane's alpha and the forward costs measured at that batch size. "
              "The full sweep, B = 1 to 32 with more methods and the load policy: python -m "
              "specviz.bench.batched.")


def measure_batched(pair, plan: Plan) -> dict:
    """{B: {"ar": lane, "spec": lane}}: B users decoded together at each of the plan's batch sizes."""

    return {b: {"ar": run_lane(pair, SERVING_BANK[:b], {"method": "ar"}, plan.batch_tokens),
                "spec": run_lane(pair, SERVING_BANK[:b], {"method": "spec", "k": plan.k}, plan.batch_tokens)}
            for b in plan.batches}


def prompt_table(pair) -> dict:
    return {name: {"category": p.category, "chat": p.chat, "description": p.description,
                   "prompt_tokens": len(pair.encode(p.text, chat=p.chat)), "text": p.text}
            for name, p in PROMPTS.items()}


def plan_for(quick: bool, methods=None, **overrides) -> Plan:
    """The quick or full plan with overrides; `methods` keeps only those methods (and ar)."""
    plan = replace(QUICK if quick else FULL, **{k: v for k, v in overrides.items() if v is not None})
    if overrides.get("tokens") is not None:  # --tokens: every prompt, the rewrite included
        plan = replace(plan, prompt_tokens=())
    if methods:
        unknown = set(methods) - set(ALL_METHODS)
        if unknown:
            raise InputError(f"unknown method(s) {', '.join(sorted(unknown))}: "
                             f"choose from {', '.join(ALL_METHODS)}")
        keep = {"ar", *methods}
        plan = replace(plan, methods=tuple(m for m in ALL_METHODS if m in keep),  # any method, by name
                       sampled_methods=tuple(m for m in plan.sampled_methods if m in keep))
    return plan


# ---------------------------------------------------------------------------------------------
# command line

def build_parser() -> Parser:
    parser = Parser(prog="python -m specviz bench", description=__doc__.splitlines()[0])
    parser.add_argument("--pair", default="qwen-coder",
                        help="preset (qwen-coder, tiny), 'target=...,draft=...', or a random-weight pair of "
                             "real sizes 'random:<target>/<draft>' with sizes " + ", ".join(SIZES))
    parser.add_argument("--device", default=None, help="cpu | cuda (default: cuda when present)")
    parser.add_argument("--dtype", default=None, help="bfloat16 | float32 | float16 (default: the pair's)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--cpu-linear", default=None, help="aten | gemv: specviz's linear kernels on CPU "
                        "(specviz.runtime.kernels; transformers' lanes run the stock nn.Linear, hf-assisted-gemv aside); "
                        "default: the pair's (with no --dtype, what specviz.runtime.cpu measures on this CPU)")
    parser.add_argument("--quick", action="store_true", help="the quick plan (3 prompts, greedy + one "
                        "sampled group; budgeted at 3 minutes on 2 native-bf16 cores with qwen-coder)")
    parser.add_argument("--tokens", type=int, default=None, help="new tokens per run (plan default)")
    parser.add_argument("--repeats", type=int, default=None, help="repeats per method (plan default)")
    parser.add_argument("--k", type=int, default=None, help="draft length of spec, cascade, hf-assisted")
    parser.add_argument("--methods", nargs="+", default=None, metavar="NAME",
                        help="run only these of the plan's methods (ar is always run: every ratio needs it); "
                             "names: " + ", ".join(ALL_METHODS))
    parser.add_argument("--out", default=None, help="write OUT.json, OUT.md and OUT-<figure>.html/.png "
                        "(default docs/benchmarks/suite-<pair>-<mode>)")
    parser.add_argument("--no-figures", action="store_true")
    parser.add_argument("--no-png", action="store_true", help="figures as HTML only (no kaleido)")
    parser.add_argument("--check-against", default=None, metavar="REPORT.json",
                        help="compare method rankings with an earlier report; exit 1 on a swap")
    parser.add_argument("--tolerance", type=float, default=0.10,
                        help="ranking check: methods closer than this are not ordered (default 0.10)")
    parser.add_argument("--static-cache", action="store_true",
                        help="plain transformers generate() with cache_implementation='static' "
                             "(GPU mode; transformers refuses it in assisted and prompt-lookup generate)")
    parser.add_argument("--cuda-graphs", action="store_true",
                        help="specviz's target and draft forwards replay CUDA graphs over a static KV cache "
                             "(specviz.runtime.lm.GraphLM; CUDA only; transformers' lanes stay eager)")
    parser.add_argument("--hold-to-ar", action="store_true",
                        help="greedy groups: hold specviz's lanes to AR's text (specviz.bench.held): where a bf16 "
                             "verify pass flips a near-tie of AR's argmax, commit AR's token and count it as "
                             "forced, so that every drafter is timed on the same text")
    parser.add_argument("--quiet", action="store_true")
    return parser


def file_name(pair_name: str) -> str:
    """A pair's name as a report's file name: runs of anything but letters, digits and dots -> '-'."""
    return re.sub(r"[^A-Za-z0-9.]+", "-", pair_name).strip("-")


def load(spec: str, device=None, dtype=None, cpu_linear=None):
    if spec.startswith("random:"):
        return load_pair(random_pair(spec, device=device, dtype=dtype), cpu_linear=cpu_linear)
    return load_pair(spec, device=device, dtype=dtype, cpu_linear=cpu_linear)


def refuse_missing_heads(pair_name: str, methods) -> None:
    """An InputError naming the lanes of `methods` whose trained heads the pair lacks, if any
    (the held-out and repeated-work benchmarks run every lane they are given)."""
    missing = missing_heads(pair_name)
    lacking = [m for m in methods if HEAD_LANES.get(m) in missing]
    if lacking:
        raise InputError(f"no trained heads for {', '.join(lacking)} on {pair_name} "
                         "(python -m specviz train <kind> --pair ... trains them)")


def write_reports(prefix: Path, report: dict, text: str, partial: Path, say) -> None:
    """A finished benchmark's PREFIX.json and PREFIX.md (`text`, printed too); its partial file goes."""
    files.write_json(prefix.with_name(prefix.name + ".json"), report)
    files.write_text(prefix.with_name(prefix.name + ".md"), text)
    partial.unlink(missing_ok=True)
    print(text)
    say(f"wrote {prefix}.json and {prefix}.md")


def missing_heads(pair_name: str) -> set:
    """The kinds of heads (medusa, eagle, eagle3, peagle) not shipped, or broken, for the pair."""

    missing = set()
    for kind in KINDS:
        try:
            check_heads_file(kind, pair_name)
        except HeadsError:
            missing.add(kind)
    return missing


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    args.command = "python -m specviz bench" + "".join(f" {shlex.quote(a)}" for a in argv)
    return run_command(lambda: _run(args), "interrupted; the suite keeps no partial results, so running it again starts "
                                           "over (--quick or --methods make it shorter)")


def _run(args) -> int:
    import transformers

    transformers.logging.set_verbosity_error()  # assisted generate() warns about its own config copies
    say = (lambda *_: None) if args.quiet else (lambda msg: print(msg, file=sys.stderr, flush=True))
    plan = plan_for(args.quick, args.methods, tokens=args.tokens, repeats=args.repeats, k=args.k,
                    hold=args.hold_to_ar or None)
    if args.threads:
        torch.set_num_threads(args.threads)
    started = time.perf_counter()
    pair = load(args.pair, device=args.device, dtype=args.dtype, cpu_linear=args.cpu_linear)
    if args.cuda_graphs:
        for model in (pair.target, pair.draft):
            use_cuda_graphs(model, max_len=1024)
    drop = set()
    if torch.device(pair.device).type != "cpu":  # the int8 draft kernel is a CPU kernel
        drop |= INT8_METHODS
    if getattr(pair, "cpu_linear", "aten") != "gemv":  # nothing to separate: both run nn.Linear
        drop.add("hf-assisted-gemv")
    missing = missing_heads(pair.name)
    if missing and any(HEAD_LANES.get(m) in missing for m in plan.methods):
        say(f"no {' or '.join(sorted(missing))} heads for {pair.name}: their lanes are left out "
            f"({' and '.join(f'python -m specviz train {kind} --pair {pair.name}' for kind in sorted(missing))} "
            "train them)")
        drop |= {m for m, kind in HEAD_LANES.items() if kind in missing}
    plan = replace(plan, methods=tuple(m for m in plan.methods if m not in drop),
                   sampled_methods=tuple(m for m in plan.sampled_methods if m not in drop))
    report = run_suite(pair, plan, say, static_cache=args.static_cache, load_s=time.perf_counter() - started)
    report["environment"]["command"] = args.command  # the report says how to run it again
    code = 0
    if args.check_against:
        previous = json.loads(Path(args.check_against).read_text())
        check = ratios.compare_rankings(report["results"], previous["results"], args.tolerance)
        report["ranking_check"] = {"against": Path(args.check_against).name, **check}
        code = 0 if check["ok"] else 1
    prefix = Path(args.out or f"docs/benchmarks/suite-{file_name(pair.name)}-{plan.mode}")
    written = rep.write(report, prefix, png=not args.no_png, with_figures=not args.no_figures)
    print(rep.markdown(report).split("## Per group")[0])
    say("wrote " + ", ".join(str(p) for p in written.values()))
    return code
