"""llama.cpp beside PyTorch: when does speculation pay, engine by engine (same GGUF files, same CPU).

For each engine (PyTorch bf16 and float32 over the de-quantised weights; llama.cpp over the
shipped Q4_K_M file and copies made from it, Q8_0 and F16):
  cost    one target pass over n new tokens after a 64-token context, n = 1..64, as a multiple
          of a one-token pass (the verify-cost curve), and c = a draft token's cost / a target's
  lanes   specviz's AR, spec (k = 2 and 4) and pld on greedy code prompts no test uses: tok/s, tau,
          alpha; the speedup predicted from alpha, c and the curve (theory.speedup_with_cost)
          beside the measured one; and spec at the k the engine's own curve predicts fastest
          (theory.optimal_k with a pilot run's alpha), chosen before the timed lanes run
and llama.cpp's own programs on the same files: llama-server's greedy decoding without and
with the draft model (its own speculation, draft-max 4 and the curve's k for Q4_K_M), its tok/s
and its drafted/accepted counters. Every lane of one report runs in one process on one machine,
one after another (nothing else may share the cores).

Usage: python -m specviz.bench.engines [--quick] [--tokens 64] [--out docs/benchmarks/engines-qwen-coder]
"""

from __future__ import annotations

import gc
import json
import sys
import time
from pathlib import Path
from typing import Optional

import specviz
from specviz.analysis import theory
from specviz.argparsing import Parser
from specviz.errors import run_command
from specviz.runtime import machine
from specviz.runtime.costs import forward_cost
from specviz.runtime.llamacpp import server as llamacpp_server
from specviz.runtime.models import load_pair

COST_TOKENS = (1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32, 48, 64)
ENGINES = {  # name -> load_pair options
    "torch-bf16": {"dtype": "bfloat16"},
    "torch-fp32": {"dtype": "float32"},
    "llama.cpp-q4_k_m": {"backend": "llama.cpp", "gguf": "q4_k_m"},
    "llama.cpp-q8_0": {"backend": "llama.cpp", "gguf": "q8_0"},
    "llama.cpp-f16": {"backend": "llama.cpp", "gguf": "f16"},
}
LANES = {"ar": {"method": "ar"}, "spec-k2": {"method": "spec", "k": 2}, "spec-k4": {"method": "spec", "k": 4},
         "pld": {"method": "pld", "k": 4}}
PROMPTS = (  # greedy code completion, no chat template; none of them is used by a test
    "def merge_sorted(a: list, b: list) -> list:\n    \"\"\"Merge two sorted lists into one sorted list.\"\"\"\n",
    "class LRUCache:\n    \"\"\"A least-recently-used cache with a fixed capacity.\"\"\"\n\n    def __init__(self, capacity: int):\n",
    "import csv\n\n\ndef read_totals(path):\n    \"\"\"Sum the 'amount' column of a CSV file per 'category'.\"\"\"\n",
)
OWN_DRAFT_MAX = 4
K_CHOICES = 8  # the longest draft the cost curve may choose


def say(text: str) -> None:
    print(f"[engines] {text}", file=sys.stderr, flush=True)


def load(options: dict):
    return load_pair("qwen-coder", progress=lambda _f, m: None, **options)


def cost_section(pair, tokens=COST_TOKENS, repeats: int = 5) -> dict:
    """The target's pass over n tokens (seconds, best of `repeats`) and c from one-token passes."""
    target = forward_cost(pair.target, list(tokens), repeats=repeats)
    draft = forward_cost(pair.draft, [1], repeats=repeats)
    return _cost_of({str(n): s for n, s in target.items()}, draft[1])


def _cost_of(target_s: dict, draft_1_s: float) -> dict:
    one = target_s["1"]
    return {"target_s": target_s, "draft_1_s": draft_1_s, "c": draft_1_s / one,
            "curve": {n: s / one for n, s in target_s.items()}}


def best_cost(sittings: list) -> dict:
    """One cost section from several measured at different times of a run: each pass's best
    (another process on a shared machine only ever adds time, and a burst of it can last the
    seconds one sitting takes, so that its one-token pass, the unit of every V(n), comes out
    slow), with the sittings kept beside it."""
    target_s = {n: min(s["target_s"][n] for s in sittings) for n in sittings[0]["target_s"]}
    return {**_cost_of(target_s, min(s["draft_1_s"] for s in sittings)),
            "sittings": [{"target_s": s["target_s"], "draft_1_s": s["draft_1_s"]} for s in sittings]}


def run_lane(pair, prompt: str, options: dict, tokens: int) -> dict:
    events = list(specviz.generate(pair, prompt, max_new_tokens=tokens, temperature=0.0, **options))
    done = events[-1]
    steps = [e for e in events if e.kind == "step_finished"]
    first = steps[0].elapsed if steps else 0.0  # step 0 holds the prompt's pass: decoding is timed after it
    decode_s = done.metrics["wall_time"] - first
    decoded = len(done.token_ids) - len(steps[0].emitted_ids)
    return {"token_ids": done.token_ids, "tau": done.metrics.get("tau"), "alpha": done.metrics.get("alpha_empirical"),
            "seconds": done.metrics["wall_time"], "decode_tokens_per_s": decoded / decode_s if decode_s > 0 else None,
            "steps": len(steps), "drafted": [s.drafted for s in steps[1:]],
            "accepted": sum(s.accepted for s in steps[1:])}  # over the same decoding steps as "drafted"


def lanes_section(pair, tokens: int, repeats: int, lanes=LANES, prompts=PROMPTS, fresh=None) -> dict:
    """Every lane on every prompt (default: the report's), `repeats` rounds interleaved; each
    (lane, prompt) keeps its fastest round. Tokens per second are decoding only (after the
    prompt's pass), summed over prompts. `fresh(pair)`, if given, runs before every run (to
    forget what a drafter learnt from earlier runs: a later round must not draft from the first's answer)."""
    runs = {name: {} for name in lanes}
    for r in range(repeats):
        for name, options in lanes.items():
            for i, prompt in enumerate(prompts):
                if fresh is not None:
                    fresh(pair)
                run = run_lane(pair, prompt, options, tokens)
                best = runs[name].get(i)
                if best is None or (run["decode_tokens_per_s"] or 0) > (best["decode_tokens_per_s"] or 0):
                    runs[name][i] = run
    out = {}
    for name, per in runs.items():
        rates = [run["decode_tokens_per_s"] for run in per.values()]
        out[name] = {"decode_tokens_per_s": _harmonic(rates),
                     "tau": _mean([run["tau"] for run in per.values()]),
                     "alpha": _mean([run["alpha"] for run in per.values()]),
                     "drafted": [k for i in sorted(per) for k in per[i]["drafted"]],  # per decoding step
                     "accepted_per_drafted": _ratio(sum(run.get("accepted") or 0 for run in per.values()),
                                                    sum(sum(run["drafted"]) for run in per.values())),
                     "token_ids": [per[i]["token_ids"] for i in sorted(per)]}
    return out


def verify_curve(cost: dict):
    """V(n), a target pass over n tokens in one-token passes, from a cost section's timings."""
    return theory.interpolate_cost([(int(n), s) for n, s in cost["target_s"].items()])


def pilot_alpha(pair, tokens: int) -> Optional[float]:
    """alpha of spec k=4 over the prompts, one greedy run each: what the curve's choice of k needs
    before the timed lanes run."""
    return _mean([run_lane(pair, prompt, LANES["spec-k4"], tokens)["alpha"] for prompt in PROMPTS])


def best_k(cost: dict, alpha: Optional[float]) -> int:
    """The draft length the engine's own verify-cost curve predicts fastest (0: do not speculate)."""
    if alpha is None:
        return 0
    curve = verify_curve(cost)
    return theory.optimal_k(min(alpha, 0.999), cost["c"], K_CHOICES, curve)


def lanes_for(k_best: int) -> dict:
    """The fixed lanes, and spec at the curve's k where that is neither of theirs."""
    lanes = dict(LANES)
    if k_best and k_best not in (2, 4):
        lanes["spec-best"] = {"method": "spec", "k": k_best}
    return lanes


def predictions(cost: dict, lanes: dict, options: dict = LANES) -> dict:
    """Each speculative lane's speedup over AR: predicted from its alpha, c and the engine's
    verify-cost curve over the draft lengths its steps really had (prompt lookup drafts only
    where it finds a match; near the end fewer), and measured (tok/s over AR's, same run):

        predicted = sum_s E[tokens | alpha, k_s] / sum_s (V(k_s + 1) + c k_s)

    with V(n) a pass over n tokens in one-token passes (AR pays 1 a token)."""
    curve = verify_curve(cost)
    ar = lanes["ar"]["decode_tokens_per_s"]
    out = {}
    for name, lane in lanes.items():
        if name == "ar" or lane["alpha"] is None or not lane["drafted"]:
            continue
        c = 0.0 if name == "pld" else cost["c"]
        ks = lane["drafted"]
        tokens = sum(theory.expected_tokens(lane["alpha"], k) for k in ks)
        passes = sum(curve(k + 1) + c * k for k in ks)
        predicted, measured = tokens / passes, lane["decode_tokens_per_s"] / ar
        out[name] = {"k": options[name].get("k"), "mean_k": sum(ks) / len(ks), "c": c, "alpha": lane["alpha"],
                     "verify_cost": curve(options[name]["k"] + 1), "predicted": predicted, "measured": measured,
                     "error": measured / predicted - 1.0}
    return out


def draft_forwards(method: str, k: int) -> int:
    """Draft forwards a step of k tokens costs: one per token, DFlash one block, lookups none."""
    return 1 if method == "dflash" else 0 if method in ("pld", "suffix") else k


def pilot_lanes(pair, lanes: dict, prompts, cost: dict, tokens: int, chat: bool = False) -> dict:
    """Per speculative lane, from one greedy run on each pilot prompt (never the report's):
    alpha, and the draft's cost per forward in one-token target passes (the draft model's is
    cost["c"], measured apart; a lookup's next to nothing)."""
    out = {}
    for name, options in lanes.items():
        if name == "ar":
            continue
        runs = [list(specviz.generate(pair, p, max_new_tokens=tokens, temperature=0.0, chat=chat, **options))[-1]
                for p in prompts]
        out[name] = {"alpha": _mean([r.metrics.get("alpha_empirical") for r in runs]),
                     "draft_s_per_forward": _mean([r.metrics.get("draft_s_per_forward") for r in runs])}
    return price_pilots(out, lanes, cost)


def price_pilots(pilots: dict, lanes: dict, cost: dict) -> dict:
    """Each pilot lane's draft cost c per forward in one-token target passes of `cost` (the draft
    model's is cost["c"], measured apart; a lookup's next to nothing)."""
    for name, p in pilots.items():
        per_forward = p["draft_s_per_forward"]
        p["c"] = (cost["c"] if lanes[name]["method"] == "spec" else
                  per_forward / cost["target_s"]["1"] if per_forward else 0.0)
    return pilots


def pilot_predictions(cost: dict, pilots: dict, lanes: dict, results: dict) -> dict:
    """Each speculative lane's speedup over AR in `results`, predicted from the pilot's alpha and
    costs measured apart, over the draft lengths the lane's steps really had (a step that
    drafted nothing yields one token for one one-token pass):

        predicted = sum_s E[tokens | alpha, k_s] / sum_s (V(k_s + 1) + c * forwards(k_s))"""
    curve = verify_curve(cost)
    ar = results["ar"]["decode_tokens_per_s"]
    out = {}
    for name, lane in results.items():
        p = pilots.get(name)
        if name == "ar" or not p or p["alpha"] is None or not lane["drafted"] or not ar:
            continue
        ks = lane["drafted"]
        expected = sum(theory.expected_tokens(min(p["alpha"], 0.999), k) for k in ks)
        passes = sum(curve(k + 1) + p["c"] * draft_forwards(lanes[name]["method"], k) for k in ks)
        predicted, measured = expected / passes, lane["decode_tokens_per_s"] / ar
        out[name] = {"alpha_pilot": p["alpha"], "alpha": lane["alpha"], "c": p["c"], "predicted": predicted,
                     "measured": measured, "error": measured / predicted - 1.0}
    return out


def own_section(tokens: int, repeats: int, gguf: str = "q4_k_m", k_best: int = 0) -> Optional[dict]:
    """llama.cpp's own greedy decoding, without and with its draft model (draft max 4, and the
    draft length the engine's cost curve chose for specviz's lane, so both get the same tuning),
    through llama-server."""

    if llamacpp_server.missing():
        say(f"llama.cpp's own lanes skipped: {llamacpp_server.missing()}")
        return None
    out = {}
    configs = [("own-ar", None), ("own-spec", OWN_DRAFT_MAX)]
    if k_best and k_best != OWN_DRAFT_MAX:
        configs.append((f"own-spec-k{k_best}", k_best))
    for name, draft in configs:
        with llamacpp_server.Server(gguf=gguf, draft_max=draft) as server:
            per = server_runs(server, tokens, repeats)
        out[name] = {**server_lane(per), "draft_max": draft}
    return out


def server_lane(per: dict) -> dict:
    """One llama-server lane from its answers (server_runs): tok/s, drafted and accepted, token ids."""
    drafted = sum(r["draft_n"] for r in per.values())
    accepted = sum(r["draft_accepted"] for r in per.values())
    return {"decode_tokens_per_s": _harmonic([r["tokens_per_s"] for r in per.values()]),
            "draft_n": drafted, "draft_accepted": accepted, "acceptance": _ratio(accepted, drafted),
            "token_ids": [per[i]["token_ids"] for i in sorted(per)]}


def server_runs(server, tokens: int, repeats: int, prompts=PROMPTS) -> dict:
    """{prompt index: llama-server's answer}, each prompt's fastest of `repeats` interleaved rounds."""
    per = {}
    for _ in range(repeats):
        for i, prompt in enumerate(prompts):
            result = server.complete(prompt, tokens)
            if i not in per or result["tokens_per_s"] > per[i]["tokens_per_s"]:
                per[i] = result
    return per


def _ratio(a: float, b: float) -> Optional[float]:
    return a / b if b else None


def _mean(values) -> Optional[float]:
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def _harmonic(rates) -> Optional[float]:
    """Tokens per second over prompts of equal length: total tokens over total seconds."""
    rates = [r for r in rates if r]
    return len(rates) / sum(1.0 / r for r in rates) if rates else None


def analyse(report: dict) -> dict:
    """The issue's three numbers, from one report."""
    engines, own = report["engines"], report.get("own") or {}
    out = {}
    lcpp = engines.get("llama.cpp-q4_k_m")
    if lcpp and "own-ar" in own:
        ratio = lcpp["lanes"]["ar"]["decode_tokens_per_s"] / own["own-ar"]["decode_tokens_per_s"]
        out["ar_over_llamacpp_vs_own_ar"] = {"ratio": ratio, "met": ratio >= 0.85}
    ours = {f"{e}/{lane}": v["decode_tokens_per_s"] for e, rep in engines.items() for lane, v in rep["lanes"].items()}
    theirs = {lane: v["decode_tokens_per_s"] for lane, v in own.items()}
    if ours and theirs:
        best_ours, best_theirs = max(ours, key=ours.get), max(theirs, key=theirs.get)
        out["fastest"] = {"specviz": best_ours, "specviz_tok_s": ours[best_ours], "llama.cpp": best_theirs,
                          "llama.cpp_tok_s": theirs[best_theirs], "met": ours[best_ours] >= theirs[best_theirs]}
    errors = {e: {lane: p["error"] for lane, p in rep["predictions"].items() if isinstance(p, dict)}
              for e, rep in engines.items()}
    out["prediction_error"] = {"per_engine": errors,
                               "met": all(abs(v) <= 0.15 for per in errors.values() for v in per.values())}
    return out


def main(argv=None) -> int:
    return run_command(lambda: _main(argv), "interrupted before the report was written")


def _main(argv) -> int:
    parser = Parser(prog="python -m specviz.bench.engines", description=__doc__.splitlines()[0])
    parser.add_argument("--engines", nargs="+", default=list(ENGINES), choices=list(ENGINES))
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="32 tokens, one round, costs best of 3")
    parser.add_argument("--out", default="engines-qwen-coder", help="report path without extension (.json, .md)")
    args = parser.parse_args(argv)
    tokens, repeats = (32, 1) if args.quick else (args.tokens, args.repeats)
    report = {"machine": _machine(), "tokens": tokens, "repeats": repeats, "prompts": list(PROMPTS), "engines": {}}
    started = time.time()
    for i, name in enumerate(args.engines):
        say(f"{name} ({i + 1}/{len(args.engines)}, {time.time() - started:.0f} s so far): loading")
        pair = load(ENGINES[name])
        cost = cost_section(pair, repeats=3 if args.quick else 5)
        alpha = pilot_alpha(pair, tokens)
        k_best = best_k(cost, alpha)
        options = lanes_for(k_best)
        say(f"{name}: c = {cost['c']:.2f}, a 5-token pass costs {cost['curve']['5']:.2f}x one token, "
            f"alpha ~ {_f(alpha)}: the curve's best k = {k_best}; lanes")
        lanes = lanes_section(pair, tokens, repeats, options)
        report["engines"][name] = {"pair": repr(pair), "cost": cost, "k_best": k_best, "lanes": lanes,
                                   "predictions": predictions(cost, lanes, options)}
        del pair
        gc.collect()
    say("llama.cpp's own programs (llama-server, without and with the draft model)")
    q4 = report["engines"].get("llama.cpp-q4_k_m", {})
    report["own"] = own_section(tokens, repeats, k_best=q4.get("k_best", 0))
    report["analysis"] = analyse(report)
    report["seconds"] = time.time() - started
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps(report, indent=1))
    out.with_suffix(".md").write_text(markdown(report))
    print(markdown(report))
    return 0


def _machine() -> dict:
    import platform

    import torch

    return {"cpu": machine.cpu_name(), "cpu_features": machine.cpu_features(), "cores": machine.cpu_count(),
            "threads": torch.get_num_threads(),
            "machine": platform.machine(), "torch": torch.__version__, "loadavg_start": machine.loadavg(),
            "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime())}


def machine_named(m: dict) -> str:
    """'AMD EPYC (avx2)': the CPU and, where the report recorded them, its kernels' extensions."""
    features = m.get("cpu_features")
    return f"{m.get('cpu', '?')} ({', '.join(features) or 'none of ' + ', '.join(machine.CPU_FEATURES)})" \
        if features is not None else m.get("cpu", "?")


def markdown(report: dict) -> str:
    lines = [f"# llama.cpp beside PyTorch: qwen-coder, greedy code, {report['tokens']} tokens",
             "", f"Machine: {machine_named(report['machine'])}, {report['machine'].get('threads', '?')} threads. "
             "Every lane in one process, one after another; tok/s count decoding after the prompt's pass.", "",
             "| engine | c | pass(5)/pass(1) | pass(64)/pass(1) | AR tok/s | spec k=2 | spec k=4 | pld | "
             "best k (curve) | spec best k | alpha | predicted k=4 | measured k=4 |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, rep in report["engines"].items():
        lanes, pred, cost = rep["lanes"], rep["predictions"], rep["cost"]
        lines.append(f"| {name} | {cost['c']:.2f} | {cost['curve']['5']:.2f} | {cost['curve']['64']:.2f} | "
                     f"{lanes['ar']['decode_tokens_per_s']:.1f} | {_tps(lanes, 'spec-k2')} | {_tps(lanes, 'spec-k4')} | "
                     f"{_tps(lanes, 'pld')} | {rep.get('k_best', '-')} | {_tps(lanes, _best_lane(rep))} | "
                     f"{_f(lanes['spec-k4']['alpha'])} | {_x(pred['spec-k4']['predicted'])} | "
                     f"{_x(pred['spec-k4']['measured'])} |")
    own = report.get("own")
    if own:
        lines += ["", "llama.cpp's own programs (llama-server, same Q4_K_M files):", "",
                  "| lane | tok/s | drafted | accepted | acceptance |", "|---|---|---|---|---|"]
        for name, lane in own.items():
            lines.append(f"| {name} | {lane['decode_tokens_per_s']:.1f} | {lane['draft_n']} | {lane['draft_accepted']} | "
                         f"{_f(lane['acceptance'])} |")
    lines += ["", "Predicted against measured speedup over each engine's own AR (theory.speedup_with_cost):", "",
              "| engine | lane | k (mean drafted) | c | alpha | V(k+1) | predicted | measured | error |",
              "|---|---|---|---|---|---|---|---|---|"]
    for name, rep in report["engines"].items():
        for lane, p in rep["predictions"].items():
            if isinstance(p, dict):
                lines.append(f"| {name} | {lane} | {p['k']} ({p['mean_k']:.1f}) | {p['c']:.2f} | {p['alpha']:.2f} | "
                             f"{p['verify_cost']:.2f} | "
                             f"{_x(p['predicted'])} | {_x(p['measured'])} | {p['error']:+.0%} |")
    lines += ["", "Cost curves (a pass over n tokens / a one-token pass):", "",
              "| engine | " + " | ".join(str(n) for n in COST_TOKENS) + " |",
              "|---|" + "---|" * len(COST_TOKENS)]
    for name, rep in report["engines"].items():
        lines.append(f"| {name} | " + " | ".join(f"{rep['cost']['curve'][str(n)]:.2f}" for n in COST_TOKENS) + " |")
    analysis = report.get("analysis", {})
    lines += ["", "## Targets", ""]
    if "ar_over_llamacpp_vs_own_ar" in analysis:
        a = analysis["ar_over_llamacpp_vs_own_ar"]
        lines.append(f"- specviz AR over llama.cpp / llama.cpp's own AR: {a['ratio']:.2f} (>= 0.85: "
                     f"{'met' if a['met'] else 'missed'})")
    if "fastest" in analysis:
        a = analysis["fastest"]
        lines.append(f"- fastest specviz lane {a['specviz']} {a['specviz_tok_s']:.1f} tok/s against llama.cpp's best "
                     f"{a['llama.cpp']} {a['llama.cpp_tok_s']:.1f} tok/s ({'met' if a['met'] else 'missed'})")
    a = analysis.get("prediction_error")
    if a:
        worst = max((abs(v) for per in a["per_engine"].values() for v in per.values()), default=0.0)
        lines.append(f"- prediction within 15% of the measured speedup, every engine and lane: worst {worst:.0%} "
                     f"({'met' if a['met'] else 'missed'})")
    return "\n".join(lines) + "\n"


def _best_lane(rep: dict) -> str:
    """The lane that ran the curve's k: its own, or spec-k2/k4 when the curve chose one of those."""
    k = rep.get("k_best")
    return "spec-best" if "spec-best" in rep["lanes"] else f"spec-k{k}"


def _tps(lanes: dict, name: str) -> str:
    lane = lanes.get(name)
    return f"{lane['decode_tokens_per_s']:.1f}" if lane and lane["decode_tokens_per_s"] else "-"


def _x(v) -> str:
    return "-" if v is None else f"{v:.2f}x"


def _f(v) -> str:
    return "-" if v is None else f"{v:.2f}"


if __name__ == "__main__":
    sys.exit(main())
