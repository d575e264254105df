"""Every decoding method side by side on one pair, in one run: tokens/s, tau and speedup vs AR.

Prompts cover three categories: code completion, a chat answer, and a code rewrite (a prompt
whose answer repeats much of its input, where copying drafters shine). Runs are greedy, with a
fixed number of new tokens, interleaved (each repeat walks the methods in a rotated order so
slow drift of the machine hits every method alike), and reported as the best of the repeats
(another process on a small machine only ever slows a run down; medians are kept too). Each greedy output
is checked against the autoregressive one.

Usage: python -m specviz.bench.methods [--pair qwen-coder] [--tokens 64] [--repeats 3]
                                        [--out docs/benchmarks/methods]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch

from specviz import generate
from specviz.models import load_pair

PROMPTS = {
    "code": ("def fibonacci(n):", False),
    "chat": ("Explain in a short paragraph why the sky is blue.", True),
    "rewrite": ("Rename the variable `total` to `acc` in this function and return only the code:\n\n"
                "def mean(values):\n    total = 0\n    for v in values:\n        total += v\n"
                "    if not values:\n        return 0.0\n    return total / len(values)\n", True),
}

METHODS = {
    "ar": dict(method="ar"),
    "spec k=4": dict(method="spec", k=4),
    "spec k=auto": dict(method="spec", k="auto"),
    "tree 3,2,1": dict(method="tree", tree="3,2,1"),
    "tree dynamic": dict(method="tree", tree="dynamic"),
    "pld": dict(method="pld", k=8),
    "lookahead": dict(method="lookahead"),
    "cascade": dict(method="cascade", k=4),
}


def run(pair, prompt: str, chat: bool, tokens: int, kw: dict) -> dict:
    start = time.perf_counter()
    events = list(generate(pair, prompt, max_new_tokens=tokens, chat=chat, record_topk=10, **kw))
    seconds = time.perf_counter() - start
    m = events[-1].metrics
    return {"seconds": seconds, "tokens_per_s": m["new_tokens"] / seconds, "tau": m["tau"],
            "alpha": m["alpha_empirical"], "new_tokens": m["new_tokens"], "c": m["c"],
            "target_forwards": m["target_forwards"], "token_ids": events[-1].token_ids}


def bench(pair, tokens: int, repeats: int, methods=METHODS, prompts=PROMPTS) -> dict:
    for prompt, chat in prompts.values():  # warm-up: one-off costs of the first calls
        run(pair, prompt, chat, 4, dict(method="spec"))
    raw = {cat: {name: [] for name in methods} for cat in prompts}
    names = list(methods)
    for r in range(repeats):
        order = names[r % len(names):] + names[:r % len(names)]
        for cat, (prompt, chat) in prompts.items():
            for name in order:
                raw[cat][name].append(run(pair, prompt, chat, tokens, methods[name]))
    return summarise(raw)


def summarise(raw: dict) -> dict:
    out = {}
    for cat, per in raw.items():
        ar_tps = max(r["tokens_per_s"] for r in per["ar"])
        ar_ids = per["ar"][0]["token_ids"]
        out[cat] = {}
        for name, runs in per.items():
            tps = max(r["tokens_per_s"] for r in runs)
            out[cat][name] = {
                "tokens_per_s": round(tps, 3), "speedup": round(tps / ar_tps, 3),
                "tokens_per_s_median": round(statistics.median(r["tokens_per_s"] for r in runs), 3),
                "speedups": [round(r["tokens_per_s"] / ar_tps, 3) for r in runs],
                "tau": round(runs[0]["tau"], 3),
                "alpha": None if runs[0]["alpha"] is None else round(runs[0]["alpha"], 3),
                "c": None if runs[0]["c"] is None else round(runs[0]["c"], 3),
                "target_forwards": runs[0]["target_forwards"], "new_tokens": runs[0]["new_tokens"],
                "same_as_ar": runs[0]["token_ids"] == ar_ids}
    return out


def markdown(report: dict) -> str:
    res = report["results"]
    cats = list(res)
    lines = [f"Pair `{report['pair']}` on {report['device']} ({report['dtype']}, {report['threads']} threads), "
             f"greedy, {report['tokens']} new tokens, best of {report['repeats']} interleaved repeats. "
             "Speedup = tokens/s over autoregressive tokens/s in the same run; tau = tokens per target "
             "forward; `=AR` = output identical to autoregressive.", "",
             "| method | " + " | ".join(f"{c} tok/s | {c} speedup | {c} tau" for c in cats) + " |",
             "|---|" + "---|---|---|" * len(cats)]
    for name in res[cats[0]]:
        cells = []
        for c in cats:
            r = res[c][name]
            same = "" if r["same_as_ar"] else " (differs from AR)"
            cells += [f"{r['tokens_per_s']:.2f}", f"{r['speedup']:.2f}x{same}", f"{r['tau']:.2f}"]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="all methods side by side")
    parser.add_argument("--pair", default="qwen-coder")
    parser.add_argument("--dtype", default=None)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=None, help="write OUT.json and OUT.md")
    args = parser.parse_args(argv)
    pair = load_pair(args.pair, dtype=args.dtype)
    report = {"pair": pair.name, "device": str(pair.device), "dtype": str(pair.dtype).replace("torch.", ""),
              "threads": torch.get_num_threads(), "machine": platform.machine(), "tokens": args.tokens,
              "repeats": args.repeats, "results": bench(pair, args.tokens, args.repeats)}
    print(markdown(report))
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
        out.with_suffix(".md").write_text(markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
