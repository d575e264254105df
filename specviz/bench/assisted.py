"""specviz's engine against transformers' own generate on the same pair, prompts and k.

Measures, interleaved and repeated (best of the repeats, medians kept), greedy, fixed number of
new tokens:
  ar            specviz autoregressive (events on)
  spec          specviz chain speculative decoding, k drafts, events with top-10 slices
  spec-bare     the same with record_topk=0 (the cheapest event stream)
  hf            transformers generate(), plain greedy
  hf-assisted   generate(assistant_model=draft, num_assistant_tokens=k) with a constant schedule
                and no confidence early-stop: the same algorithm at the same k
  hf-assisted-default   the same with transformers' default adaptive schedule
transformers runs PyTorch's stock nn.Linear layers, as its users do; specviz its own CPU kernels
(specviz.kernels, cpu_linear="gemv", opt-in elsewhere). Two more lanes separate the loop from the kernels:
  spec-aten          specviz spec on the stock nn.Linear layers
  hf-assisted-gemv   transformers' assisted generation on specviz's kernels
and the event overhead: the share of spec's wall time spent outside the draft and target
forwards (sampling, the rule, events, cache crops), read from the events themselves.

Usage: python -m specviz.bench.assisted [--pair qwen-coder] [--tokens 64] [--repeats 3] [--out F]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import statistics
import time

import torch

from specviz import generate, kernels
from specviz.models import load_pair

PROMPTS = {
    "code": ("def fibonacci(n):", False),
    "chat": ("Explain in a short paragraph why the sky is blue.", True),
}


def _linears(pair, kernel):
    return contextlib.nullcontext() if kernel == "gemv" else kernels.aten_linears(pair.target, pair.draft)


def run_specviz(pair, prompt, chat, tokens, k, method, record_topk, kernel="gemv"):
    start = time.perf_counter()
    with _linears(pair, kernel):
        events = list(generate(pair, prompt, method=method, k=k, max_new_tokens=tokens, chat=chat,
                               record_topk=record_topk))
    seconds = time.perf_counter() - start
    m = events[-1].metrics
    outside = 1.0 - (m["draft_time"] + m["verify_time"]) / m["wall_time"]
    return {"seconds": seconds, "new_tokens": m["new_tokens"], "tau": m["tau"],
            "outside_forwards": outside, "token_ids": events[-1].token_ids}


@torch.inference_mode()
def run_hf(pair, prompt, chat, tokens, k, assisted, constant=True, kernel="aten"):
    ids = torch.tensor([pair.encode(prompt, chat=chat)], device=pair.device)
    kwargs = dict(max_new_tokens=tokens, do_sample=False, attention_mask=torch.ones_like(ids),
                  pad_token_id=pair.tokenizer.pad_token_id or pair.eos_token_ids[0],
                  eos_token_id=pair.eos_token_ids)
    saved = None
    if assisted:
        kwargs.update(assistant_model=pair.draft)
        if constant:
            # transformers 5.23 reads the draft length, its schedule and the confidence stop from
            # the assistant's generation_config, not from generate()'s arguments
            config = pair.draft.generation_config
            saved = {name: getattr(config, name, None) for name in _ASSISTANT_SETTINGS}
            config.num_assistant_tokens, config.num_assistant_tokens_schedule = k, "constant"
            config.assistant_confidence_threshold = 0.0
    start = time.perf_counter()
    try:
        with _linears(pair, kernel):
            out = pair.target.generate(ids, **kwargs)
    finally:
        for name, value in (saved or {}).items():
            setattr(pair.draft.generation_config, name, value)
    seconds = time.perf_counter() - start
    new = out[0, ids.shape[1]:].tolist()
    return {"seconds": seconds, "new_tokens": len(new), "token_ids": new}


_ASSISTANT_SETTINGS = ("num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold")


def methods(k):
    return {
        "ar": lambda p, s, c, n: run_specviz(p, s, c, n, k, "ar", 10),
        "spec": lambda p, s, c, n: run_specviz(p, s, c, n, k, "spec", 10),
        "spec-bare": lambda p, s, c, n: run_specviz(p, s, c, n, k, "spec", 0),
        "spec-aten": lambda p, s, c, n: run_specviz(p, s, c, n, k, "spec", 10, kernel="aten"),
        "hf": lambda p, s, c, n: run_hf(p, s, c, n, k, assisted=False),
        "hf-assisted": lambda p, s, c, n: run_hf(p, s, c, n, k, assisted=True),
        "hf-assisted-gemv": lambda p, s, c, n: run_hf(p, s, c, n, k, assisted=True, kernel="gemv"),
        "hf-assisted-default": lambda p, s, c, n: run_hf(p, s, c, n, k, assisted=True, constant=False),
    }


def bench(pair, tokens: int, k: int, repeats: int, lanes=None) -> dict:
    table = methods(k)
    if lanes:
        table = {name: run for name, run in table.items() if name in {"ar", *lanes}}
    results = {cat: {name: [] for name in table} for cat in PROMPTS}
    for cat, (prompt, chat) in PROMPTS.items():  # warm-up: first calls pay one-off costs
        run_specviz(pair, prompt, chat, 4, k, "spec", 10)
        run_hf(pair, prompt, chat, 4, k, assisted=True)
    for r in range(repeats):
        for cat, (prompt, chat) in PROMPTS.items():
            names = list(table) if r % 2 == 0 else list(reversed(table))  # alternate the order
            for name in names:
                results[cat][name].append(table[name](pair, prompt, chat, tokens))
    return summarise(results)


def summarise(results: dict) -> dict:
    out = {}
    for cat, per in results.items():
        row = {}
        for name, runs in per.items():
            # best of the interleaved repeats: another process on a 2-core machine only ever
            # slows a run down (OpenMP threads wait for each other), it never speeds one up
            rates = [r["new_tokens"] / r["seconds"] for r in runs]
            tps = max(rates)
            row[name] = {"tokens_per_s": tps, "tokens_per_s_median": statistics.median(rates),
                         "new_tokens": runs[0]["new_tokens"]}
            if "tau" in runs[0]:
                row[name]["tau"] = runs[0]["tau"]
                row[name]["outside_forwards"] = statistics.median(r["outside_forwards"] for r in runs)
        ar = row["ar"]["tokens_per_s"]
        for name in row:
            row[name]["speedup_vs_ar"] = row[name]["tokens_per_s"] / ar
        ratios = {
            "spec_vs_hf_assisted": ("spec", "hf-assisted"),
            "spec_vs_hf_assisted_default": ("spec", "hf-assisted-default"),
            # the loops alone: both engines on the same kernels
            "spec_vs_hf_assisted_same_kernels_gemv": ("spec", "hf-assisted-gemv"),
            "spec_vs_hf_assisted_same_kernels_aten": ("spec-aten", "hf-assisted"),
            "spec_topk10_vs_bare": ("spec", "spec-bare"),
            "ar_vs_hf": ("ar", "hf"),
        }
        row["ratios"] = {name: row[a]["tokens_per_s"] / row[b]["tokens_per_s"]
                         for name, (a, b) in ratios.items() if a in row and b in row}  # of the lanes run
        hf_lane = next((name for name in ("hf-assisted", "hf-assisted-gemv") if name in per), None)
        if "spec" in per and hf_lane:
            same = per["spec"][0]["token_ids"] == per[hf_lane][0]["token_ids"]
            row[f"same_tokens_as_{hf_lane.replace('-', '_')}"] = same
        out[cat] = row
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="specviz vs transformers assisted generation")
    parser.add_argument("--pair", default="qwen-coder")
    parser.add_argument("--dtype", default=None)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--lanes", nargs="+", default=None, metavar="LANE",
                        help="run only these lanes (ar always runs): " + ", ".join(methods(4)))
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    unknown = set(args.lanes or ()) - set(methods(args.k))
    if unknown:
        parser.error(f"unknown lane(s) {', '.join(sorted(unknown))}")
    pair = load_pair(args.pair, dtype=args.dtype)
    if torch.device(pair.device).type == "cpu":  # the lanes compare specviz's kernels with nn.Linear
        load_pair(pair, cpu_linear="gemv")
    report = {"pair": pair.name, "device": str(pair.device), "dtype": str(pair.dtype),
              "cpu_linear": pair.cpu_linear,
              "threads": torch.get_num_threads(), "machine": platform.machine(),
              "tokens": args.tokens, "k": args.k, "repeats": args.repeats,
              "results": bench(pair, args.tokens, args.k, args.repeats, args.lanes)}
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
