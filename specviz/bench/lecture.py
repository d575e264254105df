"""The lecture's numbers (docs/slides/lecture.ipynb) and the teacher's run sheet (docs/teaching.md),
read from the committed reports and the presets' recordings, so that the slide and the line the
teacher says beside it can never part.

The lecture follows the idea: why one token at a time is slow (the memory wall), one pass and its
k + 1 answers, the greedy rule and the bonus, both caches and the rollback, the sampling rule and
its proof, tau and the speedup curve (Leviathan et al. 2023, section 3), when it loses, the
variants, then the lab. `RUN_SHEET` holds one row per slide in that order (its title is the
slide's heading, checked by tests/test_slides.py); the number each row expects is computed here.

    python -m specviz.bench.lecture            rewrite the run sheet in docs/teaching.md
    python -m specviz.bench.lecture --check    exit 1 if it differs from its sources

No torch: it reads JSON (the recordings through specviz.bench.recordings).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path
from typing import Callable, Optional

from specviz import files
from specviz.analysis.paired import paired
from specviz.bench import guide
from specviz.bench import recordings as recorded
from specviz.errors import SpecvizError, run_command

BYTES_PER_WEIGHT = {"bfloat16": 2, "float16": 2, "float32": 4}
TYPICAL = "typical-qwen-coder"  # exact vs typical acceptance over seeds (specviz.bench, when measured)
HOT, CHAT, REWRITE = "Hot sampling, T = 1.5: ", "Chat, T = 0.7: a hard", "Code rewrite, k = 6: "
TREE, LOOKUP, LOSSY = "Code, draft tree", "Code rewrite, prompt lookup", "typical acceptance: LOSSY"


def preset(rows: list, start: str) -> dict:
    """The preset row whose label starts with (or, for LOSSY, holds) `start`."""
    found = next((r for r in rows if r["label"].startswith(start) or start in r["label"]), None)
    if found is None:
        raise SpecvizError(f"the lecture needs the preset {start!r}, which the presets no longer have.")
    return found


# --- 1. the memory wall ---------------------------------------------------------------------------

def machine(env: dict) -> str:
    """'Intel Xeon, bfloat16': a report's CPU and dtype, short enough for a column head."""
    name = env["device_name"].replace("(R)", "").replace(" Processor", "").strip()
    return f"{name}, {env['dtype']}"


def memory_wall(folder: Path = guide.REPORTS) -> list:
    """Per reference CPU: the target's weights read per token, the measured copy bandwidth, the
    fastest decoding that reading allows, the one-token pass measured, and the arithmetic (two
    operations, a multiply and an add, per weight) it spends against a long pass's."""
    out = []
    for name in (guide.NATIVE, guide.AVX2):
        rep = guide.report(name, folder)
        roof, curve, env = rep["ratios"]["roofline"], rep["cost_curve"]["target"], rep["environment"]
        weights, bandwidth = roof["target"]["weight_bytes_per_token"], roof["bandwidth_bytes_per_s"]
        flop = 2 * weights / BYTES_PER_WEIGHT[env["dtype"]]
        longest = max(curve, key=int)
        out.append({"report": name, "machine": machine(env),
                    "weights_gb": weights / 1e9, "bandwidth_gb_s": bandwidth / 1e9,
                    "read_ms": 1e3 * weights / bandwidth, "pass_ms": 1e3 * curve["1"],
                    "gflop": flop / 1e9, "gflop_s": flop / curve["1"] / 1e9, "long_n": int(longest),
                    "long_gflop_s": int(longest) * flop / curve[longest] / 1e9, "v5": curve["5"] / curve["1"]})
    return out


def memory_wall_rows(folder: Path = guide.REPORTS) -> list:
    """The memory wall as a table: one row per quantity, one column per reference CPU."""
    cpus = memory_wall(folder)
    lines = (("weights read per token", "{weights_gb:.2f} GB"),
             ("memory bandwidth (a copy test)", "{bandwidth_gb_s:.1f} GB/s"),
             ("so a token takes at least", "{read_ms:.0f} ms"),
             ("a token takes, measured", "{pass_ms:.0f} ms"),
             ("arithmetic per token (2 × weights)", "{gflop:.1f} GFLOP"),
             ("arithmetic per second: 1 token", "{gflop_s:.0f} GFLOP/s"),
             ("… a {long_n}-token pass", "{long_gflop_s:.0f} GFLOP/s"))
    rows = []
    for label, fmt in lines:
        row = {"": label.format(**cpus[0])}
        row.update({cpu["machine"]: fmt.format(**cpu) for cpu in cpus})
        rows.append(row)
    return rows


def verify_curves(folder: Path = guide.REPORTS) -> dict:
    """{machine: {n: seconds}}: the target's pass over n tokens, per reference CPU."""
    out = {}
    for name in (guide.NATIVE, guide.AVX2):
        rep = guide.report(name, folder)
        out[machine(rep["environment"])] = {
            int(n): s for n, s in rep["cost_curve"]["target"].items()}
    return out


# --- 2-5. the steps the rules are shown on --------------------------------------------------------

def _finished(events: list) -> list:
    return [e for e in events if e["kind"] == "step_finished"]


def rejection_step(events: list) -> int:
    """The step (0-based, as the events count) with a rejection after the most accepted guesses:
    a partial acceptance shows the rule's three outcomes at once."""
    rejected = [e for e in _finished(events) if e["accepted"] < e["drafted"]]
    if not rejected:
        raise SpecvizError("the greedy rule's slide needs a preset with a rejection; this one has none.")
    return max(rejected, key=lambda e: (e["accepted"], -e["step"]))["step"]


def full_step(events: list) -> int:
    """The first step (0-based) whose every guess was accepted, with a bonus token."""
    found = next((e for e in _finished(events) if e["drafted"] and e["accepted"] == e["drafted"]
                  and len(e["emitted_ids"]) == e["drafted"] + 1), None)
    if found is None:
        raise SpecvizError("the bonus slide needs a step with every guess accepted; this preset has none.")
    return found["step"]


def residual_step(events: list) -> int:
    """The first step (0-based) that drew a token from the residual."""
    found = next((e for e in events if e["kind"] == "residual_sampled"), None)
    if found is None:
        raise SpecvizError("the sampling slide needs a step with a residual draw; this preset has none.")
    return found["step"]


def proof_numbers(events: list, step: int) -> dict:
    """At the rejected position of `step`: the emitted token x, what accepting contributes to its
    probability (min(p(x), q(x))) and what a rejection does ((1 − β) · norm(max(p − q, 0))(x),
    β = 1 − the residual mass), their sum and the target's p(x)."""
    drawn = next(e for e in events if e["kind"] == "residual_sampled" and e["step"] == step)
    mass = drawn["residual_mass"]
    accept = min(drawn["p"], drawn["q"])
    reject = mass * drawn["residual_prob"]
    return {"token": drawn["token_text"], "draft": drawn["index"] + 1, "p": drawn["p"], "q": drawn["q"],
            "beta": 1 - mass, "residual": drawn["residual_prob"], "accept": accept, "reject": reject,
            "sum": accept + reject}


# --- 6. tau and the speedup curve ------------------------------------------------------------------

def curve_points(rows: list, folder: Path = recorded.DATA) -> list:
    """The exact chain presets (one draft model, k guesses) as points for the speedup curve: their
    α, k, measured speedup, c, and V(k + 1) as their own runs measured it (the speculative run's
    target time per pass over the autoregressive run's)."""
    points = []
    for row in rows:
        if row["method"] != "spec" or not row["lossless"] or row["alpha"] is None:
            continue
        rec = recorded.recording(row["label"], folder)
        spec, ar = rec.run[-1]["metrics"], rec.ar[-1]["metrics"]
        points.append({"label": row["label"], "k": row["k"], "alpha": row["alpha"], "speedup": row["speedup"],
                       "c": spec["c"], "v": spec["verify_s_per_forward"] / ar["verify_s_per_forward"]})
    return points


def curve_settings(points: list) -> dict:
    """{k: (c, V(k + 1))}: each k's median c and V over the presets that ran it."""
    ks = sorted({p["k"] for p in points})
    return {k: (statistics.median(p["c"] for p in points if p["k"] == k),
                statistics.median(p["v"] for p in points if p["k"] == k)) for k in ks}


# --- 7. when it loses -------------------------------------------------------------------------------

def spread(row: dict) -> str:
    """A preset's spread over repeats where its recording measured one, else 'one run'."""
    if row.get("repeats") and row.get("speedup_lo") is not None and row.get("speedup_hi") is not None:
        return f"{row['speedup_lo']:.2f}–{row['speedup_hi']:.2f}× over {row['repeats']} repeats"
    return "one run"


def verdict(row: dict) -> str:
    """'loses' only when every repeat lost; 'break-even' when the repeats straddle 1."""
    lo, hi = row.get("speedup_lo"), row.get("speedup_hi")
    if not row.get("repeats") or lo is None or hi is None:
        return "loses in this run" if row["speedup"] < 1 else "wins in this run"
    return "loses in every repeat" if hi < 1 else "wins in every repeat" if lo > 1 else "break-even: its repeats straddle 1"


def losses(rows: list) -> list:
    """The losing presets, the clearest loss first: α, the speedup, its spread and the verdict."""
    found = sorted((preset(rows, HOT), preset(rows, CHAT)), key=lambda r: r["speedup"])
    return [{"preset": r["label"], "alpha": r["alpha"], "speedup": r["speedup"], "spread": spread(r),
             "verdict": verdict(r)} for r in found]


def batching(folder: Path = guide.REPORTS) -> dict:
    """Spec k = 4 over plain decoding of the same batch at the batch sizes shown, from the paired
    rounds of the native-bf16 batched report, with its noise floor."""
    name = guide.BATCHED[guide.NATIVE]
    rep = guide.report(name, folder)
    found = paired(rep)
    if found is None:
        raise SpecvizError(f"the batching slide needs the paired rounds of {name}, which it lacks: "
                           "run python -m specviz.bench.batched with its policy section.")
    rows = {r["batch"]: r for r in found["rows"]}
    return {"report": name, "machine": machine(rep["environment"]),
            "floor": found["noise_floor"], "stops": found["stops_paying_at"],
            "rows": [{"batch": b, "median": rows[b]["median"], "low": rows[b]["low"], "high": rows[b]["high"],
                      "verdict": rows[b]["verdict"]} for b in guide.BATCHES_SHOWN if b in rows]}


# --- 8. the variants -------------------------------------------------------------------------------

def typical(rows: list, folder: Path = guide.REPORTS) -> dict:
    """Exact against typical acceptance: over seeds, with intervals, where the typical report was
    measured (docs/benchmarks/typical-qwen-coder.json); else the two chat presets, called single
    runs. `faster` is the report's paired verdict: typical minus exact, run by run, with its interval
    above 0 (two unpaired intervals that overlap can still differ, run by run)."""
    path = Path(folder) / f"{TYPICAL}.json"
    if path.is_file():
        summary = json.loads(path.read_text(encoding="utf-8"))["summary"]
        rules = [{"rule": "exact" if name == "exact" else "typical (LOSSY)",
                  **{key: summary[name][key]["mean"] for key in ("alpha", "tau", "speedup")},
                  "interval": f"{summary[name]['speedup']['lo']:.2f}–{summary[name]['speedup']['hi']:.2f}"}
                 for name in ("exact", "typical")]
        diff = summary["typical_minus_exact"]
        return {"source": f"{TYPICAL}.json: {summary['runs']} runs (seeds × chat prompts), the mean and the speedup's "
                          "95% interval", "rules": rules, "faster": diff["verdict"] == "faster",
                "verdict": diff["verdict"], "difference": diff["speedup"], "seeds": True}
    exact, lossy = preset(rows, CHAT), preset(rows, LOSSY)
    rules = [{"rule": "exact" if r["lossless"] else "typical (LOSSY)", "alpha": r["alpha"], "tau": None,
              "speedup": r["speedup"], "interval": "one run"} for r in (exact, lossy)]
    return {"source": "the two chat presets, T = 0.7: single runs", "rules": rules, "faster": None, "seeds": False}


def typical_sentence(found: dict) -> str:
    """What the numbers allow the slide to say about lossy and faster."""
    if not found["seeds"]:
        return ("Single runs, one sampled text each: which rule is faster needs repeats over seeds, "
                "with an interval; one run of each cannot say.")
    d = found["difference"]
    paired = f"paired by seed and prompt, typical minus exact: {d['mean']:+.2f} (95% interval {d['lo']:+.2f} to {d['hi']:+.2f})"
    if found["verdict"] == "faster":
        return f"Faster, {paired}: it buys speed with another distribution, not the target's."
    if found["verdict"] == "slower":
        return f"Slower, {paired}: lossy is not the same as faster."
    return f"Lossy is not the same as faster: {paired}, no measurable difference."


# --- the run sheet ---------------------------------------------------------------------------------

def _x(value: float) -> str:
    return f"{value:.2f}×"


def facts(presets: Path = recorded.DATA, reports: Path = guide.REPORTS) -> dict:
    """The number each slide shows, as the run sheet quotes it."""
    rows = guide.preset_rows(presets)
    hook, rewrite, chat = rows[0], preset(rows, REWRITE), preset(rows, CHAT)
    held = guide.report(guide.HELDOUT, reports)["analysis"]["code"][guide.HEADLINE_LANE]
    wall, batch, found = memory_wall(reports), batching(reports), typical(rows, reports)
    rec_rewrite, rec_chat = recorded.recording(rewrite["label"], presets), recorded.recording(chat["label"], presets)
    greedy = next(e for e in _finished(rec_rewrite.run) if e["step"] == rejection_step(rec_rewrite.run))
    bonus = next(e for e in _finished(rec_rewrite.run) if e["step"] == full_step(rec_rewrite.run))
    proof = proof_numbers(rec_chat.run, residual_step(rec_chat.run))
    settings = curve_settings(curve_points(rows, presets))
    lab = [guide.report(name, reports) for name in guide.LAB_REPORTS]
    return {
        "hook": f"{_x(hook['speedup'])} (a best case); held-out code {_x(held['vs_ar'])} "
                f"(95% interval {held['vs_ar_ci95'][0]:.2f}–{held['vs_ar_ci95'][1]:.2f})",
        "wall": "; ".join(f"{w['machine']}: {w['weights_gb']:.2f} GB ÷ {w['bandwidth_gb_s']:.1f} GB/s ≥ "
                          f"{w['read_ms']:.0f} ms a token, measured {w['pass_ms']:.0f} ms" for w in wall),
        "v5": "; ".join(f"V(5) = {w['v5']:.2f} ({w['machine']})" for w in wall),
        "one_pass": f"{hook['k'] + 1} distributions from 1 target pass (the hook's step 2)",
        "greedy": f"step {greedy['step'] + 1}: {greedy['accepted']} of {greedy['drafted']} guesses accepted, "
                  f"guess {greedy['accepted'] + 1} rejected",
        "bonus": f"step {bonus['step'] + 1}: {bonus['accepted']} of {bonus['drafted']} + the bonus = "
                 f"{len(bonus['emitted_ids'])} tokens from 1 pass",
        "caches": f"step {greedy['step'] + 1}: guesses {greedy['accepted'] + 1}–{greedy['drafted']} cut from the "
                  "caches",
        "sampling": f"step {residual_step(rec_chat.run) + 1}, guess {proof['draft']} rejected, "
                    f"{proof['token']!r} drawn from the residual",
        "proof": f"p({proof['token']!r}) = {proof['accept']:.3f} + {proof['reject']:.3f} = {proof['sum']:.3f}; "
                 f"β = {proof['beta']:.2f}",
        "inspector": f"β = {proof['beta']:.2f}, 1 − β = {1 - proof['beta']:.2f}",
        "curve": "; ".join(f"k = {k}: c = {c:.2f}, V({k + 1}) = {v:.2f}" for k, (c, v) in settings.items()),
        "presets": f"{_x(min(r['speedup'] for r in rows))} to {_x(max(r['speedup'] for r in rows))}",
        "losses": "; ".join(f"{r['preset'].split(':')[0]}: {_x(r['speedup'])} ({r['spread']})" for r in losses(rows)),
        "batching": ", ".join(f"B = {r['batch']}: {_x(r['median'])}" for r in batch["rows"])
                    + f" (noise floor {100 * batch['floor']:.0f}%)",
        "variants": f"tree {_x(preset(rows, TREE)['speedup'])}, prompt lookup {_x(preset(rows, LOOKUP)['speedup'])} "
                    "(single runs)",
        "typical": ", ".join(f"{r['rule']} {_x(r['speedup'])} ({r['interval']})" for r in found["rules"]),
        "lab": "; ".join(f"{rep['lab_minutes']:.0f} of {rep['slot_minutes']} min ({name.rsplit('-', 1)[1]})"
                         for name, rep in zip(guide.LAB_REPORTS, lab)),
    }


# (minute, slide heading, what to click or show, what to say, the fact it expects); the headings
# are the deck's, in its order (tests/test_slides.py)
RUN_SHEET = (
    (0, "Speculative decoding, step by step", "the title", "A small model guesses, the big one checks; the text is the big one's.", None),
    (1, "The race: a best case first", "the two lanes", "Same text, twice: this one is a best case; the typical gain is lower.", "hook"),
    (4, "The words first", "the four terms", "Target, draft model, k, step: say each before its symbol.", None),
    (6, "Why decoding is slow: the memory wall", "the table, top to bottom", "Each token reads every weight; the cores wait on memory.", "wall"),
    (10, "So a pass over 5 tokens costs about one", "the curves", "Extra tokens in one pass ride along nearly free: V(k + 1) near 1.", "v5"),
    (13, "One pass, k + 1 answers", "the table's rows", "Causal attention: each position predicts its next token in the same pass.", "one_pass"),
    (16, "The greedy rule", "the accepted, rejected and wasted chips", "Keep guesses while they are the target's top token; its top token replaces the first miss.", "greedy"),
    (19, "The bonus token", "the blue bonus chip", "All guesses kept: the same pass already scored one more token.", "bonus"),
    (21, "Both KV caches, and the rollback", "the red squares", "The caches keep what was read; a rejection cuts them back, nothing recomputed.", "caches"),
    (24, "The sampling rule", "u against min(1, p/q), the orange residual chip", "Accept with probability min(1, p/q); on a rejection, draw from the residual.", "sampling"),
    (27, "The inspector: p against q, and the residual", "the green overlap, the orange residual", "β is the overlap: the chance a guess is accepted here.", "inspector"),
    (29, "Why it is exact: the one-line proof", "the line min(p, q) + max(p − q, 0) = p", "Accepting gives min(p, q); rejecting gives exactly the rest.", "proof"),
    (32, "τ and the speedup curve", "the curves, then the points", "τ(α, k) tokens per pass, over c·k + V(k + 1) passes of cost.", "curve"),
    (35, "Every preset against the curve", "the table", "Each preset is one run; the held-out mean is the typical figure.", "presets"),
    (37, "When it loses: hot sampling and chat", "the two rows and their spread", "Low α: most guesses miss and their drafting is paid for nothing.", "losses"),
    (39, "When it loses: batches of users", "B = 1, 2, 16", "A full batch is no longer memory-bound: the extra tokens cost arithmetic.", "batching"),
    (41, "Variants: a draft tree, prompt lookup", "the two rows", "More guesses per pass (a tree) or free guesses (copied from the prompt).", "variants"),
    (43, "Typical acceptance (LOSSY)", "the two rules' rows", "A lossy rule changes the text's distribution; say what the numbers say about speed.", "typical"),
    (44, "Your turn: the lab", "the three notebooks", "One notebook at a time; the worksheet: docs/worksheet.md.", "lab"),
    (45, "(lab)", "students' notebooks", "Walk the room; the check cells say when an answer is right.", None),
    (80, "(wrap-up)", "three numbers from the room (worksheet 6, 7, 8)", "One run is one sample; machines differ; the algorithm does not.", None),
)


def run_sheet(presets: Path = recorded.DATA, reports: Path = guide.REPORTS) -> str:
    """The run sheet as a Markdown table, every number computed from its source."""
    found = facts(presets, reports)
    lines = ["| minute | slide: what to show | what to say | the number to expect |", "|---|---|---|---|"]
    for minute, title, click, say, key in RUN_SHEET:
        lines.append(f"| {minute} | **{title}**: {click} | {say} | {found[key] if key else '—'} |")
    return "\n".join(lines) + "\n"


BLOCK = re.compile(r"(<!-- generated: runsheet \(python -m specviz\.bench\.lecture\) -->\n)(.*?)(<!-- end generated -->)",
                   re.S)


def render(text: str, sheet: Optional[str] = None) -> str:
    """`text` with its run sheet block rewritten from the sources."""
    if not BLOCK.search(text):
        raise SpecvizError("the guide has no run sheet block (<!-- generated: runsheet (python -m "
                           "specviz.bench.lecture) -->); put one back under its intro.")
    sheet = run_sheet() if sheet is None else sheet
    return BLOCK.sub(lambda m: m[1] + sheet + m[3], text)


def main(argv=None, say: Callable[[str], None] = print) -> int:
    parser = argparse.ArgumentParser(prog="python -m specviz.bench.lecture", description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the guide's run sheet differs from its sources")
    args = parser.parse_args(argv)

    def run() -> int:
        text = guide.GUIDE.read_text(encoding="utf-8")
        fresh = render(text)
        if args.check:
            if fresh != text:
                say("docs/teaching.md: the run sheet differs from its sources; run python -m specviz.bench.lecture")
                return 1
            return 0
        files.write_text(guide.GUIDE, fresh)
        say("wrote the run sheet of docs/teaching.md")
        return 0

    return run_command(run, "interrupted; the guide is written whole or not at all")


if __name__ == "__main__":
    sys.exit(main())
