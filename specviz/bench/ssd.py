"""Speculative speculative decoding against plain speculation and AR, with the theory beside it.

On held-out prompts of each kind (code, chat), greedy, every lane held to AR's text
(specviz.bench.held): AR, plain speculation (`spec`) at each k of --spec-k, and SSD (`ssd`,
specviz.drafters.ssd) at each k of --ssd-k, lanes interleaved and rotated. Per kind:

  lanes       tokens/s and speedup over AR; spec's and ssd's best k
  ssd at k    the hit rate (verdicts whose outcome was prepared for), the hidden share (drafting
              that ran while the target verified), drafts ready on a hit; SSD over spec at the
              same k, measured (decoding steps: the prompt's pass left out of both) and predicted
              by specviz.analysis.theory.ssd_speedup from the costs the runs measured (a draft
              forward, the target's pass alone and beside the preparing drafter, the wait, the
              rest of a step); and the prediction for a draft with hardware of its own
              (the pass not slowed, preparation waited for where it outlasts the pass)
  the split   the target's pass with every core, with its share alone, and with its share while
              the draft model works on the other (what sharing the cores costs the target)

Progress and an ETA go to stderr; every finished prompt is saved in OUT.partial.json and a rerun
with the same settings resumes after it. Nothing else may share the cores while it runs.

Usage: python -m specviz.bench.ssd [--pair qwen-coder] [--kinds code chat] [--prompts 6]
       [--tokens 64] [--spec-k 2 3 4 5] [--ssd-k 1 2 3 4] [--fanout 4] [--out docs/benchmarks/ssd-qwen-coder]
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

from specviz import files
from specviz.argparsing import Parser
from specviz.bench import run_resumable
from specviz.errors import InputError

SPLIT_CONTEXT = 128  # tokens of context behind the timed passes


def _lanes(settings: dict) -> list:
    return ([f"spec-k{k}" for k in settings["spec_k"]] + [f"ssd-k{k}" for k in settings["ssd_k"]])


def _config(lane: str, settings: dict):
    from specviz.config import RunConfig

    method, k = lane.split("-k")
    extra = {"ssd_fanout": settings["fanout"]} if method == "ssd" else {}
    return RunConfig(method=method, k=int(k), record_topk=0, **extra)


def timed_run(pair, cfg, ids: list, tokens: int, script=None) -> dict:
    """One greedy run held to `script` (AR's tokens): its clock, and what the theory reads of its steps."""
    from specviz.analysis import overlap
    from specviz.bench.held import HeldVerifier
    from specviz.engine.sequence import generate

    held = HeldVerifier(script) if script is not None and cfg.method != "ar" else None
    start = time.perf_counter()
    events = list(generate(pair, ids, cfg.replace(max_new_tokens=tokens, temperature=0.0), verifier=held))
    seconds = time.perf_counter() - start
    out = {"tokens": len(events[-1].token_ids), "seconds": seconds, "token_ids": events[-1].token_ids,
           "forced": held.forced if held else 0,
           "costs": overlap.decode_costs(events)}  # the first step's pass also reads the prompt: left out
    if cfg.method == "ssd":
        out["ssd"] = overlap.ssd_summary(events)
    return out


def split_cost(pair, k: int, threads: int, repeats: int = 6) -> dict:
    """The target's pass over k + 1 tokens with every core, with its share (every core but the
    draft's `threads`) alone, and with its share while the draft model runs forwards on a thread
    with `threads` cores; a draft forward alone and beside the pass. Seconds, medians of `repeats`."""
    import torch

    from specviz.runtime.lm import runner_for

    cores = torch.get_num_threads()
    target, draft = runner_for(pair.target), runner_for(pair.draft)
    text = pair.encode("def parse(line):\n    return [int(x) for x in line.split(',') if x.strip()]\n")
    context = (text * SPLIT_CONTEXT)[:SPLIT_CONTEXT]

    def passes(runner, n, reps):
        runner.reset()
        runner.forward(context)
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            runner.forward(context[:n])
            times.append(time.perf_counter() - start)
            runner.crop(len(context))
        return sorted(times)[len(times) // 2]

    out = {"cores": cores, "draft_threads": threads, "target_threads": max(1, cores - threads)}
    try:
        out["target_all"] = passes(target, k + 1, repeats)
        torch.set_num_threads(out["target_threads"])
        out["target_share"] = passes(target, k + 1, repeats)
        out["draft_share_alone"] = _draft_beside(draft, context, threads, None)
        stop, beside = threading.Event(), {}
        worker = threading.Thread(target=lambda: beside.update(d=_draft_beside(draft, context, threads, stop)))
        worker.start()
        try:
            out["target_beside_draft"] = passes(target, k + 1, repeats)
        finally:
            stop.set()
            worker.join()
        out["draft_beside_target"] = beside.get("d")
    finally:
        torch.set_num_threads(cores)
    return out


def _draft_beside(draft, context: list, threads: int, stop) -> float:
    """Median seconds of a one-token draft forward on this thread with `threads` cores, until
    `stop` is set, at least one (or 6 forwards when there is none). The thread has its own count back after:
    timed alone, on the caller's thread, the target's passes that follow run on the target's share."""
    import torch

    own = torch.get_num_threads()  # (also initialises a new thread's count now, not over the share later)
    torch.set_num_threads(threads)
    try:
        draft.reset()
        draft.forward(context)
        times = []
        # beside a pass, at least one forward: a small model's pass can end before the first one starts
        while (stop is None and len(times) < 6) or (stop is not None and (not times or not stop.is_set())):
            start = time.perf_counter()
            draft.forward(context[:1])
            times.append(time.perf_counter() - start)
            draft.crop(len(context))
    finally:
        torch.set_num_threads(own)
    return sorted(times)[len(times) // 2]


def measure_prompt(pair, settings: dict, prompt, turn: int) -> dict:
    """AR once off the clock (the text every lane is held to), then AR and every lane, the order
    rotated by `turn` (the baseline inside the rotation, never always first); last, off the clock,
    where each of the text's tokens ranks among the draft's candidates (the prediction's outcomes)."""
    ids = pair.encode(prompt.text, chat=prompt.chat)
    script = timed_run(pair, _ar(), ids, settings["tokens"])["token_ids"]
    from specviz.bench.heldout import rotation

    record = {"kind": prompt.kind, "text": prompt.text, "ar_in_rotation": True, "lanes": {}}
    for _, lane in rotation(_lanes(settings), turn):
        if lane == "ar":
            run = timed_run(pair, _ar(), ids, settings["tokens"])
            record["ar"] = {k: run[k] for k in ("tokens", "seconds")}
            continue
        run = timed_run(pair, _config(lane, settings), ids, settings["tokens"], script=script)
        run.pop("token_ids")
        record["lanes"][lane] = run
    record["ranks"] = draft_ranks(pair, ids, script)
    return record


def draft_ranks(pair, ids: list, script: list) -> list:
    """Where each token of `script` ranks among the draft model's candidates at its position (0: its
    top token; None: below RANKS), the draft reading the prompt and the script itself in one
    forward, off every clock. Greedy plain speculation's verdicts follow from these alone
    (specviz.analysis.ssd_model.spec_outcomes): an accepted draft's prefix is the script's."""
    import torch

    from specviz.analysis.ssd_model import RANKS
    from specviz.runtime.lm import runner_for

    draft = runner_for(pair.draft)
    draft.reset()
    with torch.no_grad():
        logits = draft.forward(list(ids) + list(script[:-1]), keep=len(script))  # (len(script), V)
    draft.reset()
    top = torch.topk(logits, RANKS + 1, dim=-1).indices.tolist()  # +1: a residual's rank drops the rejected draft
    return [row.index(token) if token in row else None for row, token in zip(top, script)]


def _ar():
    from specviz.config import RunConfig

    return RunConfig(method="ar", k=1, record_topk=0)


def run(pair, settings: dict, partial: Path, say) -> dict:
    from specviz.bench.heldout import bank_prompts
    from specviz.runtime.machine import environment

    report = files.read_partial(partial, settings, say)
    if report is None:
        report = {"settings": settings, "prompts": [], "sittings": 0, "environments": []}
    else:
        say(f"resuming: {len(report['prompts'])} prompt(s) already measured in {partial}")
    report["sittings"] += 1
    report["environments"].append(environment(pair, False))
    todo = [p for kind in settings["kinds"] for p in bank_prompts(kind, settings["prompts"])]
    done = {(p["kind"], p["text"]) for p in report["prompts"]}
    todo = [p for p in todo if (p.kind, p.text) not in done]
    if "split" not in report:
        say("timing the target's pass with every core, with its share, and beside the preparing drafter")
        from specviz.drafters.ssd import draft_threads

        report["split"] = {str(k): split_cost(pair, k, draft_threads()) for k in settings["ssd_k"]}
        files.write_json(partial, report, indent=None)
    if todo:
        say(f"{len(todo)} prompt(s) to measure: AR, then {len(_lanes(settings))} lanes; warming up")
        warm = pair.encode("warm up")
        for lane in ["ar", *_lanes(settings)]:
            timed_run(pair, _ar() if lane == "ar" else _config(lane, settings), warm, 4)
    started = time.perf_counter()
    for i, prompt in enumerate(todo):
        report["prompts"].append(measure_prompt(pair, settings, prompt, turn=len(report["prompts"])))
        files.write_json(partial, report, indent=None)
        spent = time.perf_counter() - started
        say(f"{len(report['prompts'])}/{len(report['prompts']) + len(todo) - i - 1} prompts ({prompt.kind}); "
            f"{spent:.0f} s so far, about {spent / (i + 1) * (len(todo) - i - 1):.0f} s left")
    report["analysis"] = analyse(report)
    report["date_utc"] = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    return report


# ---------------------------------------------------------------------------------------------
# the analysis: pooled over a kind's prompts

def _sum(runs: list, key: str) -> float:
    return sum(r[key] for r in runs)


def analyse(report: dict) -> dict:
    from specviz.analysis import overlap, theory

    s = report["settings"]
    out = {}
    for kind in s["kinds"]:
        prompts = [p for p in report["prompts"] if p["kind"] == kind]
        if not prompts:
            continue
        ar_rate = _sum([p["ar"] for p in prompts], "tokens") / _sum([p["ar"] for p in prompts], "seconds")
        lanes = {}
        for lane in _lanes(s):
            runs = [p["lanes"][lane] for p in prompts]
            rate = _sum(runs, "tokens") / _sum(runs, "seconds")
            lanes[lane] = {"tokens_per_s": rate, "vs_ar": rate / ar_rate,
                           "decode_rate": _sum([r["costs"] for r in runs], "tokens")
                           / _sum([r["costs"] for r in runs], "seconds"),
                           "forced": _sum(runs, "forced")}
        best = {m: max((lane for lane in lanes if lane.startswith(m + "-")), key=lambda n: lanes[n]["tokens_per_s"])
                for m in ("spec", "ssd")}
        ssd = {}
        for k in s["ssd_k"]:
            runs, spec_lane = [p["lanes"][f"ssd-k{k}"] for p in prompts], f"spec-k{k}"
            summaries, costs = [r["ssd"] for r in runs], [r["costs"] for r in runs]
            verdicts = sum(x["verdicts"] for x in summaries)
            draft_s = sum(x["draft_s"] for x in summaries)
            row = {"hit_rate": sum(x["hits"] for x in summaries) / verdicts if verdicts else None,
                   "hidden_share": sum(x["hidden_s"] for x in summaries) / draft_s if draft_s else None,
                   "ready_on_hit": _sum(costs, "ready_drafts") / _sum(costs, "ready_steps")
                   if _sum(costs, "ready_steps") else 0.0,
                   "vs_ar": lanes[f"ssd-k{k}"]["vs_ar"]}
            row.update(_predicted(report, prompts, k, lanes))
            inputs = overlap.theory_inputs([p["lanes"][spec_lane]["costs"] for p in prompts],
                                           costs) if spec_lane in lanes else None
            if inputs is not None:  # the formula on SSD's own measured parts: it adds them back up
                measured = inputs.pop("measured")
                decomposed = theory.ssd_speedup(inputs["hit"], k, inputs["c"], inputs["slowdown"],
                                                inputs["ready"] or float(k), inputs["wait"], inputs["overhead"],
                                                ssd_overhead=inputs["ssd_overhead"])
                own = theory.ssd_speedup(inputs["hit"], k, inputs["c"], overhead=inputs["overhead"],
                                         ssd_overhead=inputs["ssd_overhead"])
                row.update(inputs=inputs, vs_spec_measured=measured, vs_spec_decomposed=decomposed,
                           vs_spec_own_hardware=own,
                           vs_spec_best=lanes[f"ssd-k{k}"]["tokens_per_s"] / lanes[best["spec"]]["tokens_per_s"])
                if "vs_spec_predicted" in row:
                    row["error"] = row["vs_spec_predicted"] / measured - 1.0
            ssd[str(k)] = row
        out[kind] = {"prompts": len(prompts), "ar_tokens_per_s": ar_rate, "lanes": lanes, "best": best, "ssd": ssd}
    return out


def _predicted(report: dict, prompts: list, k: int, lanes: dict) -> dict:
    """SSD over spec at k predicted apart from the SSD run (specviz.analysis.ssd_model.predict): the
    outcomes from the draft's ranks on the held text, the split table, spec's own c and rest of a
    step. Empty where the report lacks any of them (reports from before the prediction)."""
    from specviz.analysis import ssd_model

    s, split, spec_lane = report["settings"], (report.get("split") or {}).get(str(k)), f"spec-k{k}"
    if split is None or spec_lane not in lanes or any("ranks" not in p for p in prompts):
        return {}
    costs = [p["lanes"][spec_lane]["costs"] for p in prompts]
    steps, forwards = _sum(costs, "steps"), _sum(costs, "draft_forwards")
    if not steps or not forwards:
        return {}
    v = _sum(costs, "verify_s") / steps
    c, overhead = _sum(costs, "draft_s") / forwards / v, _sum(costs, "other_s") / steps / v
    out = ssd_model.predict(k, s["fanout"], [p["ranks"] for p in prompts], split, c, overhead)
    return {"predicted_inputs": out["inputs"], "vs_spec_predicted": out["vs_spec"]}


def _x(value) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _pct(value) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def markdown(report: dict) -> str:
    from specviz.bench.heldout import ar_timing

    s, env, a = report["settings"], (report.get("environments") or [{}])[0], report["analysis"]
    lines = [f"# Speculative speculative decoding: `{s['pair']}`", "",
             f"{env.get('device_name', '?')}, {env.get('dtype', '?')}, {env.get('threads', '?')} torch threads, "
             f"torch {env.get('torch', '?')}; {report.get('date_utc', '?')} UTC; {report.get('sittings', 1)} sitting(s).",
             "", f"{s['prompts']} held-out prompts per kind, up to {s['tokens']} greedy tokens, every lane held to AR's "
             f"text, lanes rotated, AR " + ar_timing(report["prompts"]) + f"; SSD prepares {s['fanout']} outcomes a step. Speedups are tokens/s over AR's on the "
             "same prompts; SSD over spec compares decoding steps (the prompt's pass left out of both).", ""]
    split = report.get("split") or {}
    if split:
        k0 = next(iter(split))
        sp = split[k0]
        lines += ["## Sharing the cores", "",
                  f"SSD's drafter prepares on {sp['draft_threads']} of the {sp['cores']} cores while the target's pass "
                  f"runs on {sp['target_threads']}. The target's pass over k + 1 tokens ({SPLIT_CONTEXT} tokens of "
                  "context), medians:", "",
                  "| k + 1 tokens | every core | its share alone | its share, the draft working beside it | "
                  "a draft forward alone | beside the pass |", "|---|---|---|---|---|---|"]
        for k, sp in split.items():
            lines.append(f"| {int(k) + 1} | {1000 * sp['target_all']:.0f} ms | {1000 * sp['target_share']:.0f} ms | "
                         f"{1000 * sp['target_beside_draft']:.0f} ms | {1000 * (sp['draft_share_alone'] or 0):.0f} ms | "
                         f"{1000 * (sp['draft_beside_target'] or 0):.0f} ms |")
        lines.append("")
    lines += _reading(a) + [PREDICTION, ""]
    stem = report.get("stem") or f"ssd-{s['pair']}"
    lines += [f"![Who works when: spec and ssd on one held-out prompt]({stem}-timeline.png)", "",
              f"![SSD over plain speculation: theory and measurement]({stem}-theory.png)", ""]
    for kind, x in a.items():
        lines += [f"## {kind} ({x['prompts']} prompts; AR {x['ar_tokens_per_s']:.2f} tok/s)", "",
                  "| lane | tok/s | vs AR |", "|---|---|---|"]
        for lane, y in x["lanes"].items():
            mark = " (best)" if lane in x["best"].values() else ""
            lines.append(f"| {lane}{mark} | {y['tokens_per_s']:.2f} | {_x(y['vs_ar'])} |")
        lines += ["", "| ssd k | hit rate | hidden share of drafting | drafts ready on a hit | ssd / spec, measured | "
                  "predicted apart | how far apart | the run's own parts added up | ssd / spec at its best k | "
                  "predicted, draft on its own hardware |", "|---|---|---|---|---|---|---|---|---|---|"]
        for k, y in x["ssd"].items():
            err = "-" if "error" not in y else f"{100 * y['error']:+.0f}%"
            lines.append(f"| {k} | {_pct(y['hit_rate'])} | {_pct(y['hidden_share'])} | {y['ready_on_hit']:.2f} | "
                         f"{_x(y.get('vs_spec_measured'))} | {_x(y.get('vs_spec_predicted'))} | {err} | "
                         f"{_x(y.get('vs_spec_decomposed'))} | "
                         f"{_x(y.get('vs_spec_best'))} | {_x(y.get('vs_spec_own_hardware'))} |")
        lines += [""] + _prediction_inputs(x["ssd"])
    return "\n".join(lines)


def figures(pair, report: dict, prefix: Path, say) -> list:
    """PREFIX-timeline.png (one held-out code prompt, spec and ssd at SSD's best k there: who works
    when) and PREFIX-theory.png (theory.ssd_speedup with the report's measured points)."""
    from specviz.analysis import overlap
    from specviz.bench.heldout import bank_prompts
    from specviz.engine.sequence import generate
    from specviz.render.timeline import ssd_theory_figure, theory_points, timeline_figure

    s, a = report["settings"], report["analysis"]
    kind = "code" if "code" in a else next(iter(a))
    k = int(a[kind]["best"]["ssd"].split("-k")[1])
    prompt = bank_prompts(kind, 1)[0]
    ids = pair.encode(prompt.text, chat=prompt.chat)
    say(f"drawing the timeline: spec and ssd at k = {k} on the first held-out {kind} prompt")
    runs = {m: list(generate(pair, ids, _config(f"{m}-k{k}", s).replace(max_new_tokens=s["tokens"])))
            for m in ("ssd", "spec")}
    env = (report.get("environments") or [{}])[0]
    where = f"{s['pair']} on {env.get('device_name', '?')}, {env.get('dtype', '?')}"
    timeline = timeline_figure([(f"{m} k={k}", overlap.timeline(runs[m])) for m in ("ssd", "spec")],
                               title=f"Who works when: {where}, a held-out {kind} prompt")
    theory = ssd_theory_figure(theory_points(a), title=f"SSD over plain speculation: theory and measurement ({where})")
    out = [prefix.with_name(prefix.name + "-timeline.png"), prefix.with_name(prefix.name + "-theory.png")]
    timeline.write_image(str(out[0]), width=1300, height=440)
    theory.write_image(str(out[1]), width=1100, height=520)
    return out


PREDICTION = ("**Predicted apart** is the formula (`specviz.analysis.theory.ssd_speedup`) given only quantities "
              "measured apart from the SSD runs (`specviz.analysis.ssd_model`): c and the rest of a step from plain "
              "speculation's runs at the same k; the pass beside the drafter (s) and a draft forward beside the pass "
              "from the split table above, timed before any lane; the draft ready on a hit and the wait for the "
              "forward under way, modelled from how many draft forwards fit in that pass; and the hit rate, SSD's own "
              "outcome model replayed on plain speculation's verdicts (where each token of AR's text ranks among the "
              "draft's candidates, one draft forward off the clock). SSD's own rest of a step (o', its planning and "
              "keeping outcomes) is not measured apart: the prediction takes spec's. **How far apart**: predicted over measured, less "
              "1. **The run's own parts added up** feeds the formula SSD's own measured costs and hits: a "
              "decomposition of the measurement, equal to it by construction, not a test of the formula.")


def _prediction_inputs(rows: dict) -> list:
    """The predicted-apart column's inputs, per k."""
    shown = {k: y["predicted_inputs"] for k, y in rows.items() if "predicted_inputs" in y}
    if not shown:
        return ["No prediction apart from the SSD runs: this report predates the draft's ranks (run the "
                "benchmark again).", ""]
    lines = ["| ssd k | modelled hit rate | draft forwards in a pass | drafts ready on a hit | wait (passes) | "
             "s (split table) | c (spec) |", "|---|---|---|---|---|---|---|"]
    for k, i in shown.items():
        lines.append(f"| {k} | {_pct(i['hit'])} | {i['forwards_in_pass']:.2f} | {i['ready']:.0f} | "
                     f"{i['wait']:.2f} | {i['slowdown']:.2f} | {i['c']:.2f} |")
    return lines + [""]


def _reading(a: dict) -> list:
    """What the tables say, in words, every number from them."""
    lines = ["## Reading it", ""]
    for kind, x in a.items():
        rows = {k: y for k, y in x["ssd"].items() if "inputs" in y}
        if not rows:
            continue
        k, y = max(rows.items(), key=lambda kv: kv[1]["vs_spec_measured"])
        own_k, own = max(rows.items(), key=lambda kv: kv[1]["vs_spec_own_hardware"])
        spec, ssd = x["lanes"][x["best"]["spec"]], x["lanes"][x["best"]["ssd"]]
        lines.append(
            f"- **{kind}**: at k = {k} SSD's drafter had prepared the outcome of {_pct(y['hit_rate'])} of the checks "
            f"and ran {_pct(y['hidden_share'])} of its drafting while the target verified, yet the target's pass, on its "
            f"share of the cores beside the working drafter, took {y['inputs']['slowdown']:.2f}x as long as spec's with every core: SSD ran at "
            f"{_x(y['vs_spec_measured'])} spec's speed at the same k (predicted apart from the SSD runs: {_x(y.get('vs_spec_predicted'))}). "
            f"At their best k, spec reached {_x(spec['vs_ar'])} AR and SSD {_x(ssd['vs_ar'])}. With the drafter on "
            f"hardware of its own (the pass not slowed) the formula gives SSD {_x(own['vs_spec_own_hardware'])} spec's "
            f"speed at k = {own_k}: here a draft forward costs {own['inputs']['c']:.2f} of a target pass, so k + 1 "
            "forwards of preparation outlast the pass as k grows.")
    return lines + [""]


def main(argv=None) -> int:
    parser = Parser(prog="python -m specviz.bench.ssd", description=__doc__.splitlines()[0])
    parser.add_argument("--pair", default="qwen-coder")
    parser.add_argument("--kinds", nargs="+", default=["code", "chat"])
    parser.add_argument("--prompts", type=int, default=6, help="held-out prompts per kind (default 6)")
    parser.add_argument("--tokens", type=int, default=64, help="greedy new tokens per run (default 64)")
    parser.add_argument("--spec-k", type=int, nargs="+", default=[2, 3, 4, 5])
    parser.add_argument("--ssd-k", type=int, nargs="+", default=[1, 2, 3, 4])
    parser.add_argument("--fanout", type=int, default=4)
    parser.add_argument("--out", default=None, help="OUT.json and OUT.md (default docs/benchmarks/ssd-<pair>)")
    parser.add_argument("--figures", action="store_true", help="only draw OUT-timeline.png and OUT-theory.png "
                        "from a finished OUT.json (one more spec and ssd run on the pair)")
    parser.add_argument("--outcomes", action="store_true", help="add the draft's ranks on each prompt's held text "
                        "(off the clock) to a finished OUT.json that lacks them, and rewrite its analysis, Markdown "
                        "and theory figure: the prediction apart from the SSD runs, without timing anything again")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    return run_resumable(args, _outcomes if args.outcomes else (_figures if args.figures else _run), "interrupted; the prompts measured so far are kept in the .partial.json "
                         "beside --out, and the same command resumes there")


def _run(args, say) -> int:
    from specviz.bench.suite import file_name, load, write_reports
    from specviz.config import RunConfig

    if args.tokens < 1 or args.prompts < 1:
        raise InputError("--tokens and --prompts must be at least 1")
    if set(args.kinds) - {"code", "chat"}:
        raise InputError("--kinds takes code and/or chat")
    for k in args.spec_k + args.ssd_k:
        RunConfig.of(method="ssd", k=k, ssd_fanout=args.fanout)  # the same checks as a run's, before loading
    pair = load(args.pair)
    prefix = Path(args.out or f"docs/benchmarks/ssd-{file_name(pair.name)}")
    prefix.parent.mkdir(parents=True, exist_ok=True)
    settings = {"pair": pair.name, "kinds": list(args.kinds), "prompts": args.prompts, "tokens": args.tokens,
                "spec_k": list(args.spec_k), "ssd_k": list(args.ssd_k), "fanout": args.fanout}
    partial = prefix.with_name(prefix.name + ".partial.json")
    report = run(pair, settings, partial, say)
    report["stem"] = prefix.name  # the figures' names, for the Markdown's links
    write_reports(prefix, report, markdown(report), partial, say)
    for path in figures(pair, report, prefix, say):
        say(f"wrote {path}")
    return 0


def _outcomes(args, say) -> int:
    """--outcomes: the ranks a finished report lacks, off the clock (AR again for each held text: greedy,
    so the same text; a different one is refused), then its analysis, Markdown and theory figure."""
    import json

    from specviz.bench.heldout import bank_prompts
    from specviz.bench.suite import file_name, load
    from specviz.render.timeline import ssd_theory_figure, theory_points

    pair = load(args.pair)
    prefix = Path(args.out or f"docs/benchmarks/ssd-{file_name(pair.name)}")
    path = prefix.with_name(prefix.name + ".json")
    if not path.exists():
        raise InputError(f"no finished report at {path}: run the benchmark first (without --outcomes)")
    report = json.loads(path.read_text(encoding="utf-8"))
    s, started = report["settings"], time.perf_counter()
    chat = {p.text: p.chat for kind in s["kinds"] for p in bank_prompts(kind, s["prompts"])}
    todo = [p for p in report["prompts"] if "ranks" not in p]
    for i, record in enumerate(todo):
        ids = pair.encode(record["text"], chat=chat[record["text"]])
        script = timed_run(pair, _ar(), ids, s["tokens"])["token_ids"]
        if len(script) != record["ar"]["tokens"]:
            raise InputError(f"AR wrote {len(script)} tokens for a prompt where the report's AR wrote "
                             f"{record['ar']['tokens']}: another machine or dtype; run the benchmark again")
        record["ranks"] = draft_ranks(pair, ids, script)
        spent = time.perf_counter() - started
        say(f"{i + 1}/{len(todo)} prompts ranked; about {spent / (i + 1) * (len(todo) - i - 1):.0f} s left")
    report["analysis"] = analyse(report)
    files.write_json(path, report)
    files.write_text(prefix.with_name(prefix.name + ".md"), markdown(report))
    env = (report.get("environments") or [{}])[0]
    where = f"{s['pair']} on {env.get('device_name', '?')}, {env.get('dtype', '?')}"
    figure = prefix.with_name(prefix.name + "-theory.png")
    ssd_theory_figure(theory_points(report["analysis"]),
                      title=f"SSD over plain speculation: theory and measurement ({where})").write_image(
        str(figure), width=1100, height=520)
    say(f"wrote {path}, its Markdown and {figure}")
    return 0


def _figures(args, say) -> int:
    import json

    from specviz.bench.suite import file_name, load

    pair = load(args.pair)
    prefix = Path(args.out or f"docs/benchmarks/ssd-{file_name(pair.name)}")
    path = prefix.with_name(prefix.name + ".json")
    if not path.exists():
        raise InputError(f"no finished report at {path}: run the benchmark first (without --figures)")
    for out in figures(pair, json.loads(path.read_text(encoding="utf-8")), prefix, say):
        say(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
