"""The verify cost as a choice: which GGUF type of the target lets speculation pay on this CPU.

llama.cpp's CPU kernels differ by weight type. A one-token pass reads every weight once (memory
bound); a pass over n tokens multiplies n rows, and there the kernels part: Q4_0 and Q4_K
matrices are repacked at load for a kernel that takes four rows at a time, while Q6_K (the
shipped Q4_K_M file's output head and some of its layers) and Q8_0 are multiplied row by row
on x86. So V(n), a pass over n tokens in one-token passes, is a property of the file's type,
and speculation's speedup tau / (V(k + 1) + draft cost) with it.

For each type (the shipped Q4_K_M, and copies llama.cpp's quantizer makes from it: Q4_0, Q8_0, and
two that keep the shipped Q4_K tensors byte for byte and change only its Q6_K ones, to Q8_0, which
keeps their quality and is multiplied by a tiled kernel, or to Q4_K, the 4-bit K kernel alone):
  cost        V(n) for n = 1..16 after a 64-token context, and c, the 0.5B draft's one-token
              pass over the target's (specviz.runtime.costs.forward_cost), before and after the
              lanes, each pass's best of the two (engines.best_cost)
  quality     the target's perplexity on a fixed text no prompt here comes from (the first
              tokens of the standard library's textwrap.py; its digest is recorded)
  pilot       every lane once on pilot prompts: alpha, and the heads' cost per forward
  lanes       specviz's AR, spec, eagle3 and dflash on the report's held-out code prompts
              (specviz.bench.engines.PROMPTS, which no test, pilot or training prompt uses),
              greedy, decoding tok/s, and each lane's speedup predicted from the pilot's alpha
              and costs measured apart, beside the measured one
and llama-server's own greedy decoding of the shipped Q4_K_M file, the denominator of every
speedup in the summary. Everything runs in one process, one lane after another.

Usage: python -m specviz.bench.formats [--tokens 64] [--repeats 2] [--out docs/benchmarks/llamacpp-formats]
       python -m specviz.bench.formats --render [--out ...]   the Markdown again from the JSON, no model
"""

from __future__ import annotations

import gc
import hashlib
import json
import math
import sys
import time
from pathlib import Path

import torch

import specviz
from specviz import files
from specviz.argparsing import Parser
from specviz.bench import engines
from specviz.errors import InputError, run_command
from specviz.runtime.llamacpp import server as llamacpp_server
from specviz.runtime.llamacpp.runner import GGUF_TYPES

FORMATS = ("q4_k_m", "q4_k_m-q8_0", "q4_k", "q4_0", "q8_0")
COST_TOKENS = (1, 2, 3, 4, 5, 6, 8, 12, 16)
PASS_MS = (1, 4, 8)  # passes the report also shows in milliseconds: the unit, what k = 3 verifies, a long pass
K = 3  # every speculative lane drafts 3 tokens a step: a 4-row verification, one block of the 4-row kernels
LANES = {"ar": {"method": "ar"}, "spec": {"method": "spec", "k": K}, "eagle3": {"method": "eagle3", "k": K},
         "dflash": {"method": "dflash", "k": K}}
PILOT = (  # code prompts for the pilot run only (alpha, the heads' cost): not the report's
    "def fibonacci(n: int) -> int:\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "def flatten(items):\n    \"\"\"Flatten a nested list of lists into one list.\"\"\"\n",
)
NUMBERS = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six"}
TEXT_TOKENS = 1024  # of the perplexity text
CHUNK = 256  # tokens a perplexity pass feeds


def say(text: str) -> None:
    print(f"[formats] {text}", file=sys.stderr, flush=True)


def perplexity_text() -> tuple:
    """(text, sha256) of the fixed text: the standard library's textwrap.py, as this Python ships it."""
    import textwrap

    text = Path(textwrap.__file__).read_text()
    return text, hashlib.sha256(text.encode()).hexdigest()


def perplexity(pair, text: str, tokens: int = TEXT_TOKENS) -> float:
    """exp(mean cross-entropy) of the target's next-token predictions over the text's first tokens."""
    ids = pair.encode(text)[:tokens]
    runner = pair.target.make_runner()
    total, count = 0.0, 0
    for start in range(0, len(ids) - 1, CHUNK):
        piece = ids[start:start + CHUNK]
        logits = runner.forward(piece, keep=len(piece))  # (n, V): row i predicts piece[i + 1]
        nxt = ids[start + 1:start + 1 + len(piece)]
        rows = logits[:len(nxt)]
        total += float(torch.nn.functional.cross_entropy(rows, torch.tensor(nxt), reduction="sum"))
        count += len(nxt)
    return math.exp(total / count)


def pilot(pair, cost: dict, tokens: int) -> dict:
    """engines.pilot_lanes on the pilot prompts."""
    return engines.pilot_lanes(pair, LANES, PILOT, cost, tokens)


def predictions(cost: dict, pilots: dict, lanes: dict) -> dict:
    """engines.pilot_predictions over this format's AR, with the verify pass of k drafts beside."""
    verify = engines.verify_curve(cost)(K + 1)
    return {name: {**p, "verify_cost": verify} for name, p in engines.pilot_predictions(cost, pilots, LANES, lanes).items()}


def own_greedy(tokens: int, repeats: int) -> dict:
    """llama-server's own greedy decoding of the shipped Q4_K_M file on the report's prompts."""
    with llamacpp_server.Server(gguf="q4_k_m") as server:
        per = engines.server_runs(server, tokens, repeats)
    return {"decode_tokens_per_s": engines._harmonic([r["tokens_per_s"] for r in per.values()]),
            "token_ids": [per[i]["token_ids"] for i in sorted(per)]}


def summary(report: dict) -> dict:
    """Every lane's tok/s over llama.cpp's own greedy decoding of the shipped file, and whether
    each type's quality is not below the shipped file's (its perplexity at most Q4_K_M's)."""
    base = report["own_greedy"]["decode_tokens_per_s"] if report.get("own_greedy") else None
    shipped_ppl = report["formats"]["q4_k_m"]["perplexity"]
    out = {}
    for fmt, rep in report["formats"].items():
        quality_ok = rep["perplexity"] <= shipped_ppl * 1.0005  # rounding of the same weights
        for name, lane in rep["lanes"].items():
            out[f"{fmt}/{name}"] = {"tokens_per_s": lane["decode_tokens_per_s"],
                                    "over_own_greedy": lane["decode_tokens_per_s"] / base if base else None,
                                    "quality_not_below_q4_k_m": quality_ok}
    counted = {k: v for k, v in out.items() if v["quality_not_below_q4_k_m"] and v["over_own_greedy"]}
    best = max(counted, key=lambda k: counted[k]["over_own_greedy"]) if counted else None
    return {"per_lane": out, "fastest_counted": best,
            "fastest_counted_over_own_greedy": counted[best]["over_own_greedy"] if best else None}


def main(argv=None) -> int:
    return run_command(lambda: _main(argv), "interrupted before the report was written")


def _main(argv) -> int:
    parser = Parser(prog="python -m specviz.bench.formats", description=__doc__.splitlines()[0])
    parser.add_argument("--formats", nargs="+", default=list(FORMATS), choices=list(FORMATS))
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", default="docs/benchmarks/llamacpp-formats", help="report path without extension")
    parser.add_argument("--render", action="store_true",
                        help="runs nothing: rewrites the report's Markdown from its JSON")
    args = parser.parse_args(argv)
    if args.render:
        return render(Path(args.out))
    text, digest = perplexity_text()
    report = {"machine": engines._machine(), "tokens": args.tokens, "repeats": args.repeats, "k": K,
              "prompts": list(engines.PROMPTS), "pilot_prompts": list(PILOT),
              "perplexity_text": {"file": "textwrap.py (this Python's standard library)", "sha256": digest,
                                  "tokens": TEXT_TOKENS, "python": sys.version.split()[0]},
              "formats": {}}
    started = time.time()
    for i, fmt in enumerate(args.formats):
        say(f"{fmt} ({i + 1}/{len(args.formats)}, {time.time() - started:.0f} s so far): loading")
        pair = specviz.load_pair("qwen-coder", backend="llama.cpp", gguf=fmt, progress=lambda _f, m: None)
        cost = engines.cost_section(pair, COST_TOKENS)
        ppl = perplexity(pair, text)
        say(f"{fmt}: V(4) = {cost['curve']['4']:.2f}, c = {cost['c']:.2f}, perplexity {ppl:.3f}; pilot")
        pilots = pilot(pair, cost, args.tokens)
        say(f"{fmt}: lanes ({time.time() - started:.0f} s so far)")
        lanes = engines.lanes_section(pair, args.tokens, args.repeats, LANES)
        # measured again after the lanes: each pass keeps its best of the two sittings
        cost = engines.best_cost([cost, engines.cost_section(pair, COST_TOKENS)])
        pilots = engines.price_pilots(pilots, LANES, cost)
        report["formats"][fmt] = {"desc": pair.target.desc, "what": GGUF_TYPES[fmt][2], "bytes": pair.target.bytes,
                                  "cost": cost,
                                  "perplexity": ppl, "pilot": pilots, "lanes": lanes,
                                  "predictions": predictions(cost, pilots, lanes)}
        del pair
        gc.collect()
    if llamacpp_server.missing() is None:
        say("llama-server's own greedy decoding of the shipped file")
        report["own_greedy"] = own_greedy(args.tokens, args.repeats)
    report["summary"] = summary(report) if "q4_k_m" in report["formats"] else {}
    report["seconds"] = time.time() - started
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps(report, indent=1))
    return write_markdown(out, report)


def render(out: Path) -> int:
    """The Markdown from the report's measurements (no model runs)."""
    path = out.with_suffix(".json")
    if not path.exists():
        raise InputError(f"no report at {path}: run python -m specviz.bench.formats first.")
    return write_markdown(out, json.loads(path.read_text(encoding="utf-8")))


def write_markdown(out: Path, report: dict) -> int:
    """The report's Markdown beside its JSON, and on stdout: after a run, and for --render."""
    text = markdown(report)
    files.write_text(out.with_suffix(".md"), text)
    print(text)
    return 0


def markdown(report: dict) -> str:
    m = report["machine"]
    count = len(report["formats"])
    lines = [f"# The verify cost as a choice: qwen-coder's target in {NUMBERS.get(count, count)} GGUF types, greedy code, "
             f"{report['tokens']} tokens",
             "", f"Machine: {engines.machine_named(m)}, {m.get('threads', '?')} threads, {m.get('date_utc', '')} UTC. "
             f"Command: `python -m specviz.bench.formats`. Every lane in one process, one after another; tok/s count "
             f"decoding after the prompt's pass; speculative lanes draft k = {report['k']}.", "",
             "| type | size | perplexity | V(2) | V(4) | V(5) | V(8) | c (0.5B) | AR | spec | eagle3 | dflash |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for fmt, rep in report["formats"].items():
        cv, lanes = rep["cost"]["curve"], rep["lanes"]
        lines.append(f"| {fmt.upper()} | {rep['bytes'] / 1e9:.2f} GB | {rep['perplexity']:.3f} | {cv['2']:.2f} | "
                     f"{cv['4']:.2f} | {cv['5']:.2f} | {cv['8']:.2f} | {rep['cost']['c']:.2f} | "
                     + " | ".join(engines._tps(lanes, name) for name in LANES) + " |")
    whats = [f"- {fmt.upper()}: {rep['what']}." for fmt, rep in report["formats"].items() if rep.get("what")]
    if whats:
        lines += ["", "The types:", "", *whats]
    own = report.get("own_greedy")
    if own:
        lines += ["", f"llama-server's own greedy decoding of the shipped Q4_K_M file: "
                      f"{own['decode_tokens_per_s']:.1f} tok/s."]
    lines += ["", "Predicted (pilot alpha, costs measured apart) against measured speedup over each type's AR:", "",
              "| type | lane | alpha (pilot) | alpha | c per forward | V(k+1) | predicted | measured | error |",
              "|---|---|---|---|---|---|---|---|---|"]
    for fmt, rep in report["formats"].items():
        for name, p in rep["predictions"].items():
            lines.append(f"| {fmt.upper()} | {name} | {p['alpha_pilot']:.2f} | {engines._f(p['alpha'])} | {p['c']:.2f} | "
                         f"{p['verify_cost']:.2f} | {engines._x(p['predicted'])} | {engines._x(p['measured'])} | "
                         f"{p['error']:+.0%} |")
    lines += ["", "Cost curves (a pass over n tokens / a one-token pass):", "",
              "| type | " + " | ".join(str(n) for n in COST_TOKENS) + " |", "|---|" + "---|" * len(COST_TOKENS)]
    for fmt, rep in report["formats"].items():
        lines.append(f"| {fmt.upper()} | " + " | ".join(f"{rep['cost']['curve'][str(n)]:.2f}" for n in COST_TOKENS) + " |")
    # the curves' unit differs by type: the same passes in milliseconds, and the AR lane's time a
    # token beside its one-token pass (the lane adds the engine's step and the prompts' contexts)
    lines += ["", "The same passes in milliseconds (each the best of its sittings), and the AR lane's time a token:", "",
              "| type | " + " | ".join(f"{n} token{'s' if n > 1 else ''}" for n in PASS_MS) + " | AR lane, a token |",
              "|---|" + "---|" * (len(PASS_MS) + 1)]
    for fmt, rep in report["formats"].items():
        ar = rep["lanes"].get("ar", {}).get("decode_tokens_per_s")
        lines.append(f"| {fmt.upper()} | " + " | ".join(f"{1000 * rep['cost']['target_s'][str(n)]:.1f}" for n in PASS_MS)
                     + f" | {f'{1000 / ar:.1f}' if ar else '—'} |")
    s = report.get("summary") or {}
    if s.get("per_lane"):
        lines += ["", "Over llama.cpp's own greedy decoding of the shipped file (a type counts where its perplexity "
                      "is not above Q4_K_M's):", "", "| lane | tok/s | over llama.cpp's greedy | counts |", "|---|---|---|---|"]
        for key, v in s["per_lane"].items():
            lines.append(f"| {key} | {v['tokens_per_s']:.1f} | {engines._x(v['over_own_greedy'])} | "
                         f"{'yes' if v['quality_not_below_q4_k_m'] else 'no'} |")
        if s.get("fastest_counted"):
            lines += ["", f"Fastest lane that counts: {s['fastest_counted']}, "
                          f"{s['fastest_counted_over_own_greedy']:.2f}x llama.cpp's own greedy decoding."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
