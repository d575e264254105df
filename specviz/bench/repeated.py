"""Repeated work: suffix decoding against prompt lookup, the draft model and AR on tasks asked again.

Suffix decoding (specviz.drafters.suffix) drafts from the session's earlier outputs, so it is
measured where those exist: the tasks of specviz.prompts.REPEATED, each asked three times in a
row as new requests ("again": the same request with a small change; "edit": each turn pasting
the previous answer and asking for one more change). The turns run in order, greedy, every lane
held to AR's text (specviz.bench.held). Each lane's repeat has its own session, which holds that
lane's earlier turns of the task and nothing else (a suffix lane never drafts from another lane's
run, nor from another task); the other methods keep nothing between requests. Per lane:

  vs AR        tokens / seconds over all its turns, over AR's (timed once a turn, first)
  first turns  the same over the tasks' first turns only (nothing asked before: the floor)
  repeats      over their later turns (what suffix decoding is for)
  per task     each task's ratio over AR, all its turns

Progress and an ETA go to stderr; every finished turn is saved in OUT.partial.json and a rerun
with the same settings resumes after it. Nothing else may share the cores while it runs.

Usage: python -m specviz.bench.repeated [--pair qwen-coder] [--tokens 128] [--repeats 2]
       [--methods pld suffix suffix-tree spec-int8] [--out docs/benchmarks/repeated-qwen-coder]
"""

from __future__ import annotations

import dataclasses
import sys
import time
import uuid
from pathlib import Path

from specviz import files
from specviz.argparsing import Parser
from specviz.bench import run_resumable
from specviz.errors import InputError
from specviz.prompts import REPEATED, turn_text
from specviz.runtime.machine import environment

DEFAULT_METHODS = ("pld", "suffix", "suffix-tree", "spec-int8")


def _rate(runs: list) -> float:
    seconds = sum(r["seconds"] for r in runs)
    return sum(r["tokens"] for r in runs) / seconds if seconds else 0.0


def summarise(turns: list, lane: str) -> dict:
    """A lane over `turns` (records with "ar" and "lanes"): its ratios over AR, all turns, first
    turns and later ones, per task; its mean tau."""
    def vs_ar(chosen):
        if not chosen:
            return None
        return _rate([r for t in chosen for r in t["lanes"][lane]]) / _rate([t["ar"] for t in chosen])

    runs = [r for t in turns for r in t["lanes"][lane]]
    taus = [r["tau"] for r in runs if r.get("tau") is not None]
    tasks = list(dict.fromkeys(t["task"] for t in turns))
    return {"tokens_per_s": _rate(runs), "vs_ar": vs_ar(turns),
            "first": vs_ar([t for t in turns if t["turn"] == 0]),
            "repeats": vs_ar([t for t in turns if t["turn"] > 0]),
            "per_task": {task: vs_ar([t for t in turns if t["task"] == task]) for task in tasks},
            "tau": sum(taus) / len(taus) if taus else None,
            "forced": max((r.get("forced", 0) for r in runs), default=0)}


def analyse(report: dict) -> dict:
    return {lane: summarise(report["turns"], lane) for lane in report["settings"]["methods"]}


def measure_turn(pair, table: dict, methods: list, task, turn: int, previous: str, tokens: int, repeats: int,
                 rotate: int, sitting: str = "") -> dict:
    """AR (timed: its text is the one every lane is held to), then every lane `repeats` times, the
    order rotated; a lane's repeat r runs in the session ("repeated:<sitting>:<task>:<lane>:<r>")
    that holds its own earlier turns of this task (`sitting`: unique to the run() measuring it)."""
    from specviz.bench.suite import run_method  # torch: reading and drawing a report need none

    text = turn_text(task, turn, previous)
    ids = pair.encode(text, chat=task.chat)
    ar = run_method(pair, table, "ar", ids, 0.0, tokens, 0)
    record = {"task": task.name, "kind": task.kind, "turn": turn, "prompt_tokens": len(ids),
              "ar": {"tokens": ar["new_tokens"], "seconds": ar["seconds"]}, "lanes": {m: [] for m in methods},
              "answer": pair.decode(ar["token_ids"])}
    for r in range(repeats):
        start = (rotate + r) % len(methods)
        for name in methods[start:] + methods[:start]:
            lane = table[name]
            own = {**table, name: dataclasses.replace(
                lane, config=lane.config.replace(suffix_session=f"repeated:{sitting}:{task.name}:{name}:{r}"))}
            run = run_method(pair, own, name, ids, 0.0, tokens, 0, script=ar["token_ids"])
            record["lanes"][name].append({"tokens": run["new_tokens"], "seconds": run["seconds"],
                                          "tau": run.get("tau"), "forced": run.get("forced", 0)})
    return record


def run(pair, table: dict, settings: dict, partial: Path, say, tasks=REPEATED) -> dict:
    """Every task's turns in order, those not already in `partial` (same settings): the report."""
    from specviz.bench.suite import run_method  # torch, as above

    report = files.read_partial(partial, settings, say)
    if report is None:
        report = {"settings": settings, "turns": [], "sittings": 0, "environments": []}
    else:
        say(f"resuming: {len(report['turns'])} turn(s) already measured in {partial}")
    report["sittings"] += 1
    report["environments"].append(environment(pair, False))
    methods = list(settings["methods"])
    done = {(t["task"], t["turn"]) for t in report["turns"]}
    # a sitting's suffix sessions are its own: a task left half done is measured again from its
    # first turn, so that every turn runs after its own earlier ones
    half = {task.name for task in tasks if 0 < sum((task.name, t) in done for t in range(len(task.turns)))
            < len(task.turns)}
    if half:
        say(f"measuring {', '.join(sorted(half))} again from the first turn (a session cannot be resumed)")
        report["turns"] = [t for t in report["turns"] if t["task"] not in half]
        done = {(t["task"], t["turn"]) for t in report["turns"]}
    total = sum(len(task.turns) for task in tasks)
    left = total - len(done)
    if left:
        say(f"{left} turn(s) to measure: AR once, then {len(methods)} lanes x {settings['repeats']} repeat(s); "
            "warming up")
        for name in ["ar", *methods]:
            run_method(pair, table, name, pair.encode("warm up"), 0.0, 4, 0)
    sitting = uuid.uuid4().hex  # this sitting's sessions: none of an earlier run() in the process
    started, measured = time.perf_counter(), 0
    for task in tasks:
        previous = ""
        for turn in range(len(task.turns)):
            if (task.name, turn) in done:
                previous = next(t["answer"] for t in report["turns"] if (t["task"], t["turn"]) == (task.name, turn))
                continue
            record = measure_turn(pair, table, methods, task, turn, previous, settings["tokens"],
                                  settings["repeats"], rotate=len(report["turns"]), sitting=sitting)
            report["turns"].append(record)
            previous = record["answer"]
            files.write_json(partial, report, indent=None)
            measured += 1
            spent = time.perf_counter() - started
            say(f"{len(report['turns'])}/{total} turns ({task.name}, turn {turn + 1}); {spent:.0f} s so far, "
                f"about {spent / measured * (left - measured):.0f} s left")
    report["analysis"] = analyse(report)
    report["date_utc"] = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    return report


def _x(value) -> str:
    return "-" if value is None else f"{value:.2f}x"


def markdown(report: dict) -> str:
    from specviz.bench.heldout import ar_timing

    s, env = report["settings"], (report.get("environments") or [{}])[0]
    a = report["analysis"]
    tasks = list(dict.fromkeys(t["task"] for t in report["turns"]))
    lines = [f"# Repeated work: `{s['pair']}`", "",
             f"{env.get('device_name', '?')}, {env.get('dtype', '?')}, {env.get('threads', '?')} torch threads, "
             f"torch {env.get('torch', '?')}; {report.get('date_utc', '?')} UTC; {report.get('sittings', 1)} sitting(s).",
             "",
             f"{len(tasks)} tasks of `specviz.prompts.REPEATED`, each asked {len(report['turns']) // max(1, len(tasks))} "
             f"times in a row as new requests, up to {s['tokens']} greedy tokens a turn, every lane held to AR's text, "
             f"{s['repeats']} repeat(s), lanes interleaved and rotated, AR " + ar_timing(report["turns"]) + ". A suffix "
             "lane's session holds its own earlier "
             "turns of the task only. Ratios: tokens/s over AR's on the same turns.", "",
             "| lane | tok/s | vs AR, all turns | first turns | later turns | tau | " + " | ".join(tasks) + " |",
             "|---|---|---|---|---|---|" + "---|" * len(tasks)]
    for name, x in sorted(a.items(), key=lambda kv: -(kv[1]["vs_ar"] or 0)):
        tau = "-" if x["tau"] is None else f"{x['tau']:.2f}"
        lines.append(f"| {name} | {x['tokens_per_s']:.2f} | {_x(x['vs_ar'])} | {_x(x['first'])} | {_x(x['repeats'])} | "
                     f"{tau} | " + " | ".join(_x(x["per_task"].get(t)) for t in tasks) + " |")
    if "pld" in a and a["pld"]["vs_ar"]:
        lines += ["", "Speedup over AR, as a multiple of prompt lookup's (pld): "
                  + ", ".join(f"{name} {x['vs_ar'] / a['pld']['vs_ar']:.2f}" for name, x in a.items()
                              if name != "pld" and x["vs_ar"]) + "."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = Parser(prog="python -m specviz.bench.repeated", description=__doc__.splitlines()[0])
    parser.add_argument("--pair", default="qwen-coder")
    parser.add_argument("--tokens", type=int, default=128, help="greedy new tokens per turn (default 128)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--methods", nargs="+", default=list(DEFAULT_METHODS), metavar="NAME",
                        help="specviz lanes of the benchmark suite (default: " + " ".join(DEFAULT_METHODS) + ")")
    parser.add_argument("--out", default=None, help="OUT.json and OUT.md (default docs/benchmarks/repeated-<pair>)")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    return run_resumable(args, _run, "interrupted; the turns measured so far are kept in the .partial.json "
                         "beside --out, and the same command resumes there")


def _run(args, say) -> int:
    from specviz.bench.suite import file_name, load, method_table, refuse_missing_heads, write_reports

    lanes = method_table(4, 8)
    methods = list(dict.fromkeys(args.methods))
    bad = [m for m in methods if m not in lanes or lanes[m].config is None or m == "ar"]
    if bad:
        raise InputError(f"unknown or unheld lane(s) {', '.join(bad)}: choose specviz lanes of the suite other than "
                         f"ar ({', '.join(m for m, lane in lanes.items() if lane.config is not None and m != 'ar')})")
    if args.tokens < 1 or args.repeats < 1:
        raise InputError("--tokens and --repeats must be at least 1")
    pair = load(args.pair)
    refuse_missing_heads(pair.name, methods)
    prefix = Path(args.out or f"docs/benchmarks/repeated-{file_name(pair.name)}")
    prefix.parent.mkdir(parents=True, exist_ok=True)
    settings = {"pair": pair.name, "tokens": args.tokens, "repeats": args.repeats, "methods": methods,
                "tasks": [t.name for t in REPEATED]}
    partial = prefix.with_name(prefix.name + ".partial.json")
    report = run(pair, lanes, settings, partial, say)
    write_reports(prefix, report, markdown(report), partial, say)
    return 0


if __name__ == "__main__":
    sys.exit(main())
