"""Drafters across held-out prompts: which one leads, with the spread over prompts beside the ratio.

The suite times each method on one prompt of a kind, 32 tokens: a handful of steps. A drafter
that leads there can trail on the next prompt, so a lead on one prompt is an anecdote. Here the
lanes run on many prompts of each kind, taken from the self-generation bank's held-out share
(specviz.training.prompt_bank.held_out: no shipped head trained on their answers, and no suite prompt is in
the bank), greedy and held to AR's text (specviz.bench.held: every lane is timed on the same
text), the lanes interleaved and their order rotated per prompt and repeat. Per kind and lane:

  ratio        tokens / seconds over all its runs, over the baseline lane's
  95% CI       of that ratio, bootstrap over prompts (a prompt's runs are drawn together), seeded
  per prompt   the lane's tokens/s over the baseline's on each prompt: the median, and the wins
  verdict      leads where the whole interval is above 1, trails where it is below, else a tie
  vs AR        over AR, timed inside the rotation like any lane (the run that gives the held text
               runs first, off the clock), with its own bootstrap interval over prompts
  draft/step   the drafter's seconds per decoding step (its forwards, or its lookups), mean over runs

Progress and an ETA go to stderr; every finished prompt is saved in OUT.partial.json, and a rerun
with the same settings resumes after it (the report counts the sittings and says where a sitting
ran on another machine). Nothing else may share the cores while it runs.

Usage: python -m specviz.bench.heldout [--pair qwen-coder] [--kinds code chat] [--prompts 12]
       [--tokens 64] [--repeats 2] [--baseline spec-int8] [--methods spec-int8 medusa eagle3-tree ...]
       [--out docs/benchmarks/heldout-qwen-coder]
"""

from __future__ import annotations

import functools
import json
import random
import statistics
import sys
import time
from pathlib import Path

from specviz import files
from specviz.argparsing import Parser
from specviz.bench import run_resumable
from specviz.errors import InputError
from specviz.runtime.machine import environment
from specviz.training.prompt_bank import held_out, prompt_bank

KINDS = ("code", "rewrite", "chat", "general")  # the bank's kinds (specviz.training.prompt_bank.prompt_bank)
DEFAULT_METHODS = ("spec-int8", "medusa", "eagle3", "eagle3-tree", "eagle3-tree-auto")
DRAWS = 2000  # bootstrap resamples
MACHINE_KEYS = ("device_name", "dtype", "threads", "cpu_linear")  # a resumed sitting must match the first's


# ---------------------------------------------------------------------------------------------
# the numbers

def _changed(first: dict, env: dict) -> list:
    """The machine settings (MACHINE_KEYS) in which a sitting's environment differs from the first's."""
    return [key for key in MACHINE_KEYS if first.get(key) != env.get(key)]


def _rate(runs: list) -> float:
    return sum(r["tokens"] for r in runs) / sum(r["seconds"] for r in runs)


def summarise(prompts: list, lane: str, baseline: str, seed: int = 0, draws: int = DRAWS) -> dict:
    """One lane against the baseline over `prompts` (records with "ar" and "lanes": {name: [runs]},
    a run {"tokens", "seconds", ...}): the pooled ratio, its bootstrap interval over prompts, the
    per-prompt ratios' median and wins, the verdict."""
    def rates(sample):  # the lane's, the baseline's and AR's tokens/s, each pooled over the sample
        return (_rate([r for p in sample for r in p["lanes"][lane]]),
                _rate([r for p in sample for r in p["lanes"][baseline]]), _rate([p["ar"] for p in sample]))

    def middle95(values):
        ordered = sorted(values)
        return [ordered[int(0.025 * draws)], ordered[int(0.975 * draws) - 1]]

    rate, base, ar = rates(prompts)
    per = [_rate(p["lanes"][lane]) / _rate(p["lanes"][baseline]) for p in prompts]
    rng = random.Random(seed)
    boot = [rates([rng.choice(prompts) for _ in prompts]) for _ in range(draws)]  # one draw serves both intervals
    low, high = middle95(x / b for x, b, _ in boot)
    runs = [r for p in prompts for r in p["lanes"][lane]]
    taus = [r["tau"] for r in runs if r.get("tau") is not None]
    drafts = [r["draft_s_per_step"] for r in runs if r.get("draft_s_per_step") is not None]
    return {"tokens_per_s": rate, "ratio": rate / base, "ci95": [low, high],
            "per_prompt_median": statistics.median(per), "wins": sum(x > 1 for x in per), "prompts": len(per),
            "verdict": "leads" if low > 1 else ("trails" if high < 1 else "tie"),
            "vs_ar": rate / ar, "vs_ar_ci95": middle95(x / a for x, _, a in boot),
            "draft_s_per_step": statistics.mean(drafts) if drafts else None,
            "tau": statistics.mean(taus) if taus else None,
            "forced": max((r.get("forced", 0) for r in runs), default=0)}


def analyse(report: dict) -> dict:
    """{kind: {lane: summarise(...)}} over the prompts measured so far."""
    out = {}
    for kind in report["settings"]["kinds"]:
        prompts = [p for p in report["prompts"] if p["kind"] == kind]
        if prompts:
            out[kind] = {lane: summarise(prompts, lane, report["settings"]["baseline"])
                         for lane in report["settings"]["methods"]}
    return out


# ---------------------------------------------------------------------------------------------
# the runs

@functools.lru_cache(maxsize=1)
def _held_out_bank() -> tuple:
    return tuple(p for p in prompt_bank(0) if held_out(p))


def bank_prompts(kind: str, count: int) -> list:
    """The first `count` held-out prompts of `kind` in the bank's own order (seed 0)."""
    chosen = [p for p in _held_out_bank() if p.kind == kind][:count]
    if len(chosen) < count:
        raise InputError(f"the bank holds {len(chosen)} held-out {kind} prompts; ask for at most that many")
    return chosen


def measure_prompt(pair, table: dict, methods: list, prompt, tokens: int, repeats: int, turn: int) -> dict:
    """AR once off the clock (its text is the one every lane is held to), then AR and every lane
    `repeats` times, the order rotated by `turn` and again each repeat: the baseline is timed
    inside the rotation, as the lanes are, never always first."""
    from specviz.bench.suite import run_method  # torch: reading and drawing a report need none

    ids = pair.encode(prompt.text, chat=prompt.chat)
    script = run_method(pair, table, "ar", ids, 0.0, tokens, 0)["token_ids"]
    record = {"kind": prompt.kind, "chat": prompt.chat, "text": prompt.text, "ar_in_rotation": True,
              "lanes": {m: [] for m in methods}}
    timed_ar = []
    for _, name in rotation(methods, turn, repeats):
        if name == "ar":
            run = run_method(pair, table, "ar", ids, 0.0, tokens, 0)
            timed_ar.append({"tokens": run["new_tokens"], "seconds": run["seconds"]})
            continue
        run = run_method(pair, table, name, ids, 0.0, tokens, 0, script=script)
        record["lanes"][name].append({"tokens": run["new_tokens"], "seconds": run["seconds"],
                                      "tau": run.get("tau"), "forced": run.get("forced", 0),
                                      "draft_s_per_step": run.get("draft_s_per_step")})
    record["ar"] = pooled(timed_ar)
    return record


def rotation(lanes: list, turn: int, repeats: int = 1):
    """(repeat, lane) in the order a prompt's runs are timed: AR and `lanes`, rotated by `turn` and
    again each repeat, so the baseline is timed inside the rotation like any lane, never always
    first (the held-out, repeated-work and SSD benchmarks)."""
    order = ["ar", *lanes]
    for r in range(repeats):
        start = (turn + r) % len(order)
        for name in order[start:] + order[:start]:
            yield r, name


def pooled(runs: list) -> dict:
    """Runs ({"tokens", "seconds"}) pooled into one."""
    return {"tokens": sum(r["tokens"] for r in runs), "seconds": sum(r["seconds"] for r in runs)}


def run(pair, table: dict, settings: dict, partial: Path, say) -> dict:
    """Every prompt of every kind not already in `partial` (same settings), its lanes from `table`
    (the suite's method_table, the one the lanes were checked against): the report."""
    from specviz.bench.suite import run_method  # torch, as above

    report = files.read_partial(partial, settings, say)
    if report is None:
        report = {"settings": settings, "prompts": [], "sittings": 0, "environments": []}
    else:
        say(f"resuming: {len(report['prompts'])} prompt(s) already measured in {partial}")
    report["sittings"] += 1
    here = environment(pair, False)
    report.setdefault("environments", []).append(here)
    first = report["environments"][0]
    changed = _changed(first, here)
    if changed:
        say("this sitting runs on another machine or setting than the first ("
            + ", ".join(f"{key} {first.get(key)} -> {here.get(key)}" for key in changed)
            + "): its timings mix with theirs")
    todo = [p for kind in settings["kinds"] for p in bank_prompts(kind, settings["prompts_per_kind"])]
    done = {(p["kind"], p["text"]) for p in report["prompts"]}
    todo = [p for p in todo if (p.kind, p.text) not in done]
    methods = list(settings["methods"])
    if todo:
        say(f"{len(todo)} prompt(s) to measure: AR once, then {len(methods)} lanes x {settings['repeats']} "
            "repeat(s) each; warming up")
        for name in ["ar", *methods]:  # warm-up: first calls pay one-off costs
            run_method(pair, table, name, pair.encode("warm up"), 0.0, 4, 0)
    started = time.perf_counter()
    for i, prompt in enumerate(todo):
        record = measure_prompt(pair, table, methods, prompt, settings["tokens"], settings["repeats"],
                                turn=len(report["prompts"]))
        report["prompts"].append(record)
        files.write_json(partial, report, indent=None)  # whole or not at all: an interrupt keeps the last
        spent = time.perf_counter() - started
        eta = spent / (i + 1) * (len(todo) - i - 1)
        say(f"{len(report['prompts'])}/{len(report['prompts']) + len(todo) - i - 1} prompts "
            f"({prompt.kind}); {spent:.0f} s so far, about {eta:.0f} s left")
    report["analysis"] = analyse(report)
    report["date_utc"] = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    return report


# ---------------------------------------------------------------------------------------------
# the report

def _interval(a: dict) -> str:
    ci = a.get("vs_ar_ci95")  # reports from before it was kept have none
    return f" ({ci[0]:.2f} to {ci[1]:.2f})" if ci else ""


def _ms(seconds) -> str:
    return "-" if seconds is None else f"{1e3 * seconds:.1f}"


def ar_timing(prompts: list) -> str:
    """How the report's AR was timed: reports from before the baseline joined the rotation timed it
    first on every prompt, and say so."""
    if prompts and all(p.get("ar_in_rotation") for p in prompts):
        return "timed inside the rotation as the lanes are"
    return "timed once per prompt, always first (before the baseline joined the rotation)"


def markdown(report: dict) -> str:
    s, envs = report["settings"], report.get("environments") or [{}]
    env = envs[0]
    mixed = [e for e in envs[1:] if _changed(env, e)]
    lines = [f"# Drafters across held-out prompts: `{s['pair']}`", "",
             f"{env.get('device_name', '?')}, {env.get('dtype', '?')}, {env.get('threads', '?')} torch threads, "
             f"torch {env.get('torch', '?')}; {report.get('date_utc', '?')} UTC; {report.get('sittings', 1)} "
             "sitting(s)" + (f", {len(mixed)} of them on another machine or setting: the timings mix" if mixed
                             else "") + ".", "",
             f"{s['prompts_per_kind']} held-out prompts of each kind from the self-generation bank "
             "(`specviz.training.prompt_bank.held_out`: no shipped head trained on their answers), "
             f"up to {s['tokens']} greedy tokens each (fewer where AR's answer ends), every lane held to AR's text (`specviz.bench.held`), "
             f"{s['repeats']} repeats, lanes interleaved and rotated. Ratio: tokens/s over all runs over "
             f"{s['baseline']}'s; 95% CI: bootstrap over prompts; per prompt: each prompt's ratio, their "
             "median and how many are above 1; verdict: leads / trails where the whole interval is above / "
             "below 1, else tie. vs AR: over AR, " + ar_timing(report["prompts"]) + ", with its 95% CI (bootstrap over prompts). "
             "Draft ms/step: the drafter's time per decoding step, mean over runs.", ""]
    for kind, lanes in report["analysis"].items():
        lines += [f"## {kind}", "", f"| lane | tok/s | / {s['baseline']} | 95% CI | per-prompt median | wins | "
                  "verdict | vs AR (95% CI) | draft ms/step | tau | forced (most in a run) |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for name, a in sorted(lanes.items(), key=lambda kv: -kv[1]["ratio"]):
            tau = "-" if a["tau"] is None else f"{a['tau']:.2f}"
            base = name == s["baseline"]
            wins = "-" if base else f"{a['wins']}/{a['prompts']}"
            lines.append(f"| {name} | {a['tokens_per_s']:.2f} | {a['ratio']:.3f} | {a['ci95'][0]:.3f} to "
                         f"{a['ci95'][1]:.3f} | {a['per_prompt_median']:.3f} | {wins} | "
                         f"{'(baseline)' if base else a['verdict']} | {a['vs_ar']:.2f}x{_interval(a)} | "
                         f"{_ms(a.get('draft_s_per_step'))} | {tau} | {a['forced']} |")
        lines.append("")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# command line

def main(argv=None) -> int:
    parser = Parser(prog="python -m specviz.bench.heldout", description=__doc__.splitlines()[0])
    parser.add_argument("--pair", default="qwen-coder")
    parser.add_argument("--kinds", nargs="+", default=["code", "chat"], choices=KINDS)
    parser.add_argument("--prompts", type=int, default=12, help="held-out prompts per kind (default 12)")
    parser.add_argument("--tokens", type=int, default=64, help="greedy new tokens per run (default 64)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--methods", nargs="+", default=list(DEFAULT_METHODS), metavar="NAME",
                        help="specviz lanes of the benchmark suite (default: " + " ".join(DEFAULT_METHODS) + ")")
    parser.add_argument("--baseline", default="spec-int8", help="the lane the others are divided by")
    parser.add_argument("--out", default=None, help="OUT.json and OUT.md (default docs/benchmarks/heldout-<pair>)")
    parser.add_argument("--redraw", metavar="REPORT.json", default=None,
                        help="re-analyse a finished report (intervals, verdicts) and rewrite its JSON and Markdown; "
                             "runs no model")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    if args.redraw:
        return run_resumable(args, _redraw, "interrupted; each file is written whole or not at all")
    return run_resumable(args, _run, "interrupted; the prompts measured so far are kept in the .partial.json "
                         "beside --out, and the same command resumes there")


def _redraw(args, say) -> int:
    """--redraw: the analysis and Markdown of a finished report, from its measured prompts alone."""
    path = Path(args.redraw)
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
        report["analysis"] = analyse(report)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InputError(f"{path} is not a finished held-out report ({exc!s})") from exc
    files.write_json(path, report)
    files.write_text(path.with_suffix(".md"), markdown(report))
    say(f"rewrote {path} and {path.with_suffix('.md')}")
    return 0


def _run(args, say) -> int:
    import torch

    from specviz.bench.suite import INT8_METHODS, file_name, load, method_table, refuse_missing_heads, write_reports

    lanes = method_table(4, 8)
    methods = list(dict.fromkeys(args.methods + [args.baseline]))
    bad = [m for m in methods if m not in lanes or lanes[m].config is None or m == "ar"]
    if bad:
        raise InputError(f"unknown or unheld lane(s) {', '.join(bad)}: choose specviz lanes of the suite other than "
                         f"ar ({', '.join(m for m, lane in lanes.items() if lane.config is not None and m != 'ar')})")
    if args.prompts < 1 or args.tokens < 1 or args.repeats < 1:
        raise InputError("--prompts, --tokens and --repeats must be at least 1")
    for kind in args.kinds:
        bank_prompts(kind, args.prompts)  # enough prompts, before anything loads
    pair = load(args.pair)
    device = torch.device(pair.device).type
    int8 = [m for m in methods if m in INT8_METHODS]
    if int8 and device != "cpu":
        raise InputError(f"{', '.join(int8)} run the int8 draft, a CPU kernel; on {device} choose other lanes "
                         "(e.g. --baseline spec)")
    refuse_missing_heads(pair.name, methods)
    prefix = Path(args.out or f"docs/benchmarks/heldout-{file_name(pair.name)}")
    prefix.parent.mkdir(parents=True, exist_ok=True)
    settings = {"pair": pair.name, "kinds": list(args.kinds), "prompts_per_kind": args.prompts,
                "tokens": args.tokens, "repeats": args.repeats, "methods": methods, "baseline": args.baseline}
    partial = prefix.with_name(prefix.name + ".partial.json")
    report = run(pair, lanes, settings, partial, say)
    write_reports(prefix, report, markdown(report), partial, say)
    return 0


if __name__ == "__main__":
    sys.exit(main())
