"""The lossy lesson measured over seeds: typical acceptance against the exact rule, beside AR.

The app's LOSSY preset and its exact twin ("Chat, T = 0.7, typical acceptance: LOSSY" and "Chat,
T = 0.7: a hard text to draft", specviz.bench.recordings.PRESETS) are one sampled run each, and one
sampled run says little: a different seed draws different text. Here that workload (spec, k = 4,
T = 0.7, a chat prompt, every lane running to the preset's count whatever end of text says) runs
with the exact rule and with typical acceptance (specviz.verifiers.typical, Medusa's rule and
defaults) over --seeds seeds, on the preset's prompt and, with --prompts 2, one held-out chat
prompt of the self-generation bank. AR runs with the same prompt, sampling and seed, timed inside
the same rotation as the two rules (specviz.bench.heldout.rotation), so each rule's speedup is over
an AR run taken beside it. Per rule, over the runs (one per prompt and seed):

  alpha     accepted / decided drafts (metrics.alpha_empirical)
  tau       tokens per step: new tokens / target passes (metrics.tau)
  speedup   the rule's tokens/s over AR's in the same prompt and seed
each as a mean with its 95% interval (Student's t over the runs); and typical minus exact, paired
by prompt and seed, with its interval and a verdict: "faster" or "slower" where the whole interval
is on one side of 0, else "no measurable difference". Lossy is not the same as faster: this is
the number that says whether it was.

Progress and an ETA go to stderr; every finished run is saved in OUT.partial.json, and a rerun
with the same settings resumes after it. Nothing else may share the cores while it runs.

Usage: python -m specviz.bench.typical [--pair qwen-coder] [--seeds 8] [--prompts 2] [--tokens 48]
       [--out docs/benchmarks/typical-qwen-coder]
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

from specviz import files
from specviz.argparsing import Parser
from specviz.bench import run_resumable
from specviz.bench.heldout import bank_prompts, rotation
from specviz.bench.recordings import PRESETS
from specviz.errors import InputError

LOSSY = "Chat, T = 0.7, typical acceptance: LOSSY"
EXACT = "Chat, T = 0.7: a hard text to draft"  # the LOSSY preset's exact twin
RULES = ("exact", "typical")
MEASURES = ("alpha", "tau", "tokens_per_s", "speedup")
DEFAULT_SEEDS = 8
MACHINE_KEYS = ("device_name", "dtype", "threads", "cpu_linear")  # a resumed sitting must match the first's


def presets() -> dict:
    """{rule: the preset that runs it}: the LOSSY preset and its twin, which differ in the rule alone."""
    by_label = {p.label: p for p in PRESETS}
    return {"exact": by_label[EXACT], "typical": by_label[LOSSY]}


# ---------------------------------------------------------------------------------------------
# the numbers

def interval(values: list) -> dict:
    """The mean of `values` and its 95% Student's t interval ({"mean", "lo", "hi"}; lo and hi
    None for a single value: no spread to measure)."""
    from scipy import stats  # only where a report is summarised

    mean = statistics.fmean(values)
    if len(values) < 2:
        return {"mean": mean, "lo": None, "hi": None}
    half = stats.t.ppf(0.975, len(values) - 1) * statistics.stdev(values) / len(values) ** 0.5
    return {"mean": mean, "lo": mean - half, "hi": mean + half}


def summarise(runs: list) -> dict:
    """Per rule, each measure over `runs` (records {"ar", "exact", "typical"}); typical minus
    exact paired by run, and its verdict on the speedup."""
    out = {rule: {m: interval([r[rule][m] for r in runs]) for m in MEASURES} for rule in RULES}
    diff = {m: interval([r["typical"][m] - r["exact"][m] for r in runs]) for m in ("alpha", "speedup")}
    lo, hi = diff["speedup"]["lo"], diff["speedup"]["hi"]
    verdict = ("no measurable difference" if lo is None or lo <= 0 <= hi else ("faster" if lo > 0 else "slower"))
    out["typical_minus_exact"] = {**diff, "verdict": verdict}
    out["runs"] = len(runs)
    return out


# ---------------------------------------------------------------------------------------------
# the runs

def prompt_texts(count: int) -> list:
    """The preset's prompt, then (count 2) the first held-out chat prompt of the bank."""
    texts = [presets()["typical"].prompt]
    return texts + [p.text for p in bank_prompts("chat", 1)][: count - 1]


def measure(pair, prompt: str, seed: int, turn: int, tokens: int) -> dict:
    """AR and both rules on one prompt and seed, in the rotation's order for `turn`: each lane's
    tokens, seconds, alpha and tau, and each rule's speedup over this AR run."""
    from specviz.bench.suite import run_specviz  # torch: reading and drawing a report need none

    chosen = presets()
    ids = pair.encode(prompt, chat=chosen["typical"].chat)
    lanes = {rule: chosen[rule].race_options() for rule in RULES}
    lanes["ar"] = chosen["exact"].ar_options()
    record = {"prompt": prompt, "seed": seed, "order": []}
    for _, name in rotation(list(RULES), turn):
        cfg = lanes[name].replace(record_topk=0)
        run = run_specviz(pair, cfg, ids, cfg.temperature, tokens, seed)
        record["order"].append(name)
        record[name] = {"tokens": run["new_tokens"], "seconds": run["seconds"], "tokens_per_s": run["tokens_per_s"],
                        "alpha": run["alpha_empirical"], "tau": run["tau"]}
    for rule in RULES:
        record[rule]["speedup"] = record[rule]["tokens_per_s"] / record["ar"]["tokens_per_s"]
    return record


def run(pair, settings: dict, partial: Path, say) -> dict:
    """Every (prompt, seed) not already in `partial` (same settings): the report."""
    from specviz.bench.suite import run_specviz
    from specviz.runtime.machine import environment

    report = files.read_partial(partial, settings, say)
    if report is None:
        report = {"settings": settings, "runs": [], "sittings": 0, "environments": []}
    else:
        say(f"resuming: {len(report['runs'])} run(s) already measured in {partial}")
    report["sittings"] += 1
    report["environments"].append(environment(pair, False))
    first, here = report["environments"][0], report["environments"][-1]
    changed = [key for key in MACHINE_KEYS if first.get(key) != here.get(key)]
    if changed:
        say("this sitting runs on another machine or setting than the first (" + ", ".join(changed)
            + "): its timings mix with theirs")
    done = {(r["prompt"], r["seed"]) for r in report["runs"]}
    todo = [(text, seed) for text in settings["prompts"] for seed in range(settings["seeds"])
            if (text, seed) not in done]
    if todo:
        say(f"{len(todo)} prompt-and-seed run(s) to measure: AR, exact and typical each; warming up")
        for cfg in (p.race_options() for p in presets().values()):  # off the clock: first calls pay one-off costs
            run_specviz(pair, cfg.replace(record_topk=0), pair.encode("warm up"), cfg.temperature, 4, 0)
    started = time.perf_counter()
    for i, (text, seed) in enumerate(todo):
        report["runs"].append(measure(pair, text, seed, len(report["runs"]), settings["tokens"]))
        files.write_json(partial, report, indent=None)  # whole or not at all: an interrupt keeps the last
        spent = time.perf_counter() - started
        say(f"{len(report['runs'])}/{len(report['runs']) + len(todo) - i - 1} runs (seed {seed}); "
            f"{spent:.0f} s so far, about {spent / (i + 1) * (len(todo) - i - 1):.0f} s left")
    report["summary"] = summarise(report["runs"])
    report["date_utc"] = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    return report


# ---------------------------------------------------------------------------------------------
# the report

def _cell(entry: dict, fmt: str = "{:.2f}") -> str:
    if entry["lo"] is None:
        return fmt.format(entry["mean"])
    return f"{fmt.format(entry['mean'])} ({fmt.format(entry['lo'])} to {fmt.format(entry['hi'])})"


def markdown(report: dict) -> str:
    s, env, summary = report["settings"], report["environments"][0], report["summary"]
    diff = summary["typical_minus_exact"]
    lines = [f"# Typical acceptance against the exact rule: `{s['pair']}`", "",
             f"{env.get('device_name', '?')}, {env.get('dtype', '?')}, {env.get('threads', '?')} torch threads, "
             f"torch {env.get('torch', '?')}; {report.get('date_utc', '?')} UTC; {report.get('sittings', 1)} "
             "sitting(s).", "",
             f"The LOSSY preset's workload (spec, k = {s['k']}, T = {s['temperature']:g}, {s['tokens']} new tokens, "
             f"end of text ignored) with the exact rule and with typical acceptance (posterior_threshold "
             f"{s['posterior_threshold']:g}, posterior_alpha {s['posterior_alpha']:g}), over {s['seeds']} seeds on "
             f"{len(s['prompts'])} chat prompt(s): {summary['runs']} runs per rule. AR ran with the same prompt, "
             "sampling and seed, timed in the same rotation as the two rules; a rule's speedup is over the AR run "
             "beside it. Each cell: the mean over runs and its 95% interval (Student's t). τ is tokens per step "
             "(one target pass each).", "",
             "Prompts: " + "; ".join(f"{i} {text!r}" for i, text in enumerate(s["prompts"], 1)) + ".", "",
             "| rule | α | τ (tokens per step) | tokens/s | speedup over AR |", "|---|---|---|---|---|"]
    for rule in RULES:
        row = summary[rule]
        lines.append(f"| {rule}{' (LOSSY)' if rule == 'typical' else ''} | {_cell(row['alpha'])} | "
                     f"{_cell(row['tau'])} | {_cell(row['tokens_per_s'], '{:.1f}')} | {_cell(row['speedup'])} |")
    lines += ["", f"Typical minus exact, paired by prompt and seed: α {_cell(diff['alpha'], '{:+.2f}')}, speedup "
              f"{_cell(diff['speedup'], '{:+.2f}')}: typical acceptance was **{diff['verdict']}** "
              + ("than the exact rule." if diff["verdict"] in ("faster", "slower") else "from the exact rule."), "",
              "| prompt | seed | α exact | α typical | speedup exact | speedup typical |", "|---|---|---|---|---|---|"]
    for r in report["runs"]:
        lines.append(f"| {s['prompts'].index(r['prompt']) + 1} | {r['seed']} | {r['exact']['alpha']:.2f} | "
                     f"{r['typical']['alpha']:.2f} | {r['exact']['speedup']:.2f} | {r['typical']['speedup']:.2f} |")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------
# command line

def main(argv=None) -> int:
    parser = Parser(prog="python -m specviz.bench.typical", description=__doc__.splitlines()[0])
    parser.add_argument("--pair", default="qwen-coder")
    parser.add_argument("--seeds", type=int, default=DEFAULT_SEEDS, help=f"seeds per prompt (default {DEFAULT_SEEDS})")
    parser.add_argument("--prompts", type=int, default=2, choices=(1, 2),
                        help="1: the preset's prompt; 2 (default): and one held-out chat prompt")
    parser.add_argument("--tokens", type=int, default=None,
                        help=f"new tokens per run (default: the preset's {presets()['typical'].max_new_tokens})")
    parser.add_argument("--out", default=None, help="OUT.json and OUT.md (default docs/benchmarks/typical-<pair>)")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    return run_resumable(args, _run, "interrupted; the runs measured so far are kept in the .partial.json "
                         "beside --out, and the same command resumes there")


def _run(args, say) -> int:
    from specviz.bench.suite import file_name, load, write_reports
    from specviz.verifiers.typical import POSTERIOR_ALPHA, POSTERIOR_THRESHOLD

    if args.seeds < 2:
        raise InputError("--seeds must be at least 2: the interval is over the runs of several seeds")
    if args.tokens is not None and args.tokens < 1:
        raise InputError("--tokens must be at least 1")
    texts = prompt_texts(args.prompts)  # the bank's prompt, before anything loads
    pair = load(args.pair)
    typical = presets()["typical"]
    prefix = Path(args.out or f"docs/benchmarks/typical-{file_name(pair.name)}")
    prefix.parent.mkdir(parents=True, exist_ok=True)
    settings = {"pair": pair.name, "seeds": args.seeds, "prompts": texts, "k": typical.k,
                "temperature": typical.temperature, "tokens": args.tokens or typical.max_new_tokens,
                "posterior_threshold": POSTERIOR_THRESHOLD, "posterior_alpha": POSTERIOR_ALPHA}
    partial = prefix.with_name(prefix.name + ".partial.json")
    report = run(pair, settings, partial, say)
    write_reports(prefix, report, markdown(report), partial, say)
    return 0


if __name__ == "__main__":
    sys.exit(main())
