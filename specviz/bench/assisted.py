"""specviz's loop against transformers' assisted generation at the same k, and nothing else: a
short rerun of the suite's same-k lanes (specviz.bench.suite) with more repeats, on the suite's
code and chat prompts, greedy, interleaved, best of the repeats. On a CPU the pair runs
specviz's gemv kernels (specviz.runtime.kernels) and transformers its users' stock nn.Linear; the lanes
separate what that ratio mixes:

  ar, spec, hf, hf-assisted, hf-assisted-default   as in the suite
  hf-assisted-gemv   transformers' assisted generation on specviz's kernels: the loops alone
  spec-aten          spec on the stock nn.Linear layers: the loops alone, on transformers' kernels
  spec-bare          spec with record_topk=0: what the events' top-10 slices cost

and `outside_forwards`, the share of spec's run clock outside the draft and target forwards
(sampling, the rule, events, cache crops), read from its metrics.

Usage: python -m specviz.bench.assisted [--pair qwen-coder] [--tokens 64] [--k 4] [--repeats 3]
                                        [--lanes NAME ...] [--out F]
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from functools import partial

import torch

from specviz import files
from specviz.argparsing import Parser
from specviz.bench import ratios, suite
from specviz.errors import run_command
from specviz.runtime import machine
from specviz.runtime.models import load_pair

LANES = ("ar", "spec", "spec-bare", "spec-aten", "hf", "hf-assisted", "hf-assisted-gemv", "hf-assisted-default")
RATIOS = {
    "spec_vs_hf_assisted": ("spec", "hf-assisted"),
    "spec_vs_hf_assisted_default": ("spec", "hf-assisted-default"),
    # the loops alone: both engines on the same kernels
    "spec_vs_hf_assisted_same_kernels_gemv": ("spec", "hf-assisted-gemv"),
    "spec_vs_hf_assisted_same_kernels_aten": ("spec-aten", "hf-assisted"),
    "spec_topk10_vs_bare": ("spec", "spec-bare"),
    "ar_vs_hf": ("ar", "hf"),
}


def lanes(k: int) -> dict:
    table = suite.method_table(k, pld_k=8)
    spec = table["spec"]
    table.update({"spec-bare": replace(spec, config=spec.config.replace(record_topk=0)),
                  "spec-aten": replace(spec, kernel="aten")})
    return {name: table[name] for name in LANES}


def bench(pair, tokens: int, k: int, repeats: int, names=None, say=lambda *_: None) -> dict:
    """{group: {lane: summary, "ratios": {...}, "same_tokens_as_<hf lane>": bool}}."""
    table = lanes(k)
    plan = replace(suite.QUICK, prompts=("code", "chat"), temperatures=(), tokens=tokens, repeats=repeats, k=k,
                   methods=tuple(name for name in table if not names or name in {"ar", *names}))
    raw = suite.measure_methods(pair, plan, say, table=table)
    return {group: summarise(per) for group, per in raw.items()}


def summarise(per: dict) -> dict:
    row = ratios.summarise_group(per)
    for name, runs in per.items():
        if row[name]["engine"] == "specviz":
            row[name]["outside_forwards"] = ratios.median(r["outside_forwards"] for r in runs)
    row["ratios"] = {name: row[a]["tokens_per_s"] / row[b]["tokens_per_s"]
                     for name, (a, b) in RATIOS.items() if a in row and b in row}  # of the lanes run
    hf_lane = next((name for name in ("hf-assisted", "hf-assisted-gemv") if name in per), None)
    if "spec" in per and hf_lane:
        same = per["spec"][0]["token_ids"] == per[hf_lane][0]["token_ids"]
        row[f"same_tokens_as_{hf_lane.replace('-', '_')}"] = same
    return row


def main(argv=None) -> int:
    return run_command(lambda: _main(argv), "interrupted before the report was written")


def _main(argv) -> int:
    parser = Parser(prog="python -m specviz.bench.assisted", description=__doc__.splitlines()[0])
    parser.add_argument("--pair", default="qwen-coder")
    parser.add_argument("--dtype", default=None)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--lanes", nargs="+", default=None, metavar="LANE", choices=LANES,
                        help="run only these lanes (ar always runs): " + ", ".join(LANES))
    parser.add_argument("--out", default=None, help="write the JSON report there too")
    args = parser.parse_args(argv)
    pair = suite.load(args.pair, dtype=args.dtype)
    if torch.device(pair.device).type == "cpu":  # the lanes compare specviz's kernels with nn.Linear
        load_pair(pair, cpu_linear="gemv")
    results = bench(pair, args.tokens, args.k, args.repeats, args.lanes, partial(print, file=sys.stderr, flush=True))
    report = {**machine.environment(pair, static_cache=False), "tokens": args.tokens, "k": args.k,
              "repeats": args.repeats, "results": results}
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        files.write_text(args.out, text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
