"""The teacher's guide's figures (and README's one sentence of them), generated from the committed
reports and recordings.

docs/teaching.md quotes measured numbers in tables: what each kind of machine shows (from the
suite and batched reports in docs/benchmarks/) and what each preset recorded (from the presets'
manifest). Typed by hand, the same quantity drifted apart between files; here each table is
written from its sources between markers in the guide,

    <!-- generated: machines (python -m specviz.bench.guide) -->  ...  <!-- end generated -->

and tests/test_guide.py fails when the committed guide and its sources part:

    python -m specviz.bench.guide            rewrite the tables in docs/teaching.md and README.md
    python -m specviz.bench.guide --check    exit 1, saying which table, if they differ

No torch: it reads JSON.
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
from specviz.bench import provenance
from specviz.bench import recordings as recorded
from specviz.errors import SpecvizError, run_command

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "teaching.md"
README = ROOT / "README.md"
ANSWER_KEY = ROOT / "teacher" / "answer-key.md"
PAGES = (GUIDE, README, ANSWER_KEY)  # the pages with generated blocks
REPORTS = ROOT / "docs" / "benchmarks"
# the reports each column of "what each kind of machine will show" is read from
NATIVE, AVX2 = "suite-qwen-coder-full", "suite-qwen-coder-full-avx2"
GPU_SMALL, GPU_7B = "suite-random-1.5b-0.5b-quick-cuda-graphs-fp32", "suite-random-7b-0.5b-quick-cuda-graphs-fp32"
BATCHED = {NATIVE: "batched-qwen-coder-bf16", AVX2: "batched-qwen-coder-fp32"}
BATCHES_SHOWN = (1, 2, 16)
# llama.cpp on the shipped Q4_K_M target, per CPU column: its cost curve and the fastest lane over its
# own greedy decoding (python -m specviz.bench.formats on the native-bf16 CPU, .side_by_side on AVX2)
LLAMACPP = {NATIVE: "llamacpp-formats", AVX2: "llamacpp-side-by-side"}
LLAMACPP_PASSES = (2, 4, 5, 8)
GREEDY = ("code", "rewrite", "chat", "summary", "creative")
BLOCK = re.compile(r"(<!-- generated: (\w+) \(python -m specviz\.bench\.guide\) -->\n)(.*?)(<!-- end generated -->)",
                   re.S)


def report(name: str, folder: Path = REPORTS) -> dict:
    path = Path(folder) / f"{name}.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise SpecvizError(f"The guide's figures need {path}, which could not be read ({exc}).") from exc


def _span(values: list, fmt: str = "{:.2f}", unit: str = "") -> str:
    """'4.6–5.1' for a range, one number when all round alike."""
    low, high = fmt.format(min(values)), fmt.format(max(values))
    return (low if low == high else f"{low}–{high}") + unit


def _x(value: Optional[float]) -> str:
    return "—" if value is None else f"{value:.2f}×"


def _greedy(rep: dict, method: str, key: str) -> list:
    return [rep["results"][f"{p}@greedy"][method][key] for p in GREEDY
            if f"{p}@greedy" in rep["results"] and method in rep["results"][f"{p}@greedy"]
            and rep["results"][f"{p}@greedy"][method].get(key) is not None]


def _speed(rep: dict, prompt: str, method: str) -> Optional[float]:
    return rep["results"].get(f"{prompt}@greedy", {}).get(method, {}).get("speedup")


def _ms(rep: dict, prompt: str, key: str) -> str:
    lanes = rep["results"][f"{prompt}@greedy"]
    return f"{lanes['ar'][key] * 1e3:.0f} vs {lanes['spec'][key] * 1e3:.0f} ms"


def _where(rep: dict) -> str:
    env = rep["environment"]
    return f"{env['device_name']}, {env.get('threads', env.get('cpu_count', '?'))} threads, {env['dtype']}"


def _batched(name: str, folder: Path) -> str:
    """Spec over AR at the batch sizes shown: paired rounds with their range and the verdict against
    the run's own noise floor where the report has them; else the unpaired ratios, called so, and no
    crossover claimed from them."""
    rep = report(name, folder)
    where = f"{rep['environment']['device_name']}, {rep['environment']['dtype']}"
    found = paired(rep)
    if found is None:
        rows = {row["batch"]: row["measured_speedup"] for row in rep["analysis"]["rows"]}
        shown = ", ".join(_x(rows.get(b)) for b in BATCHES_SHOWN)
        return (f"{shown}, unpaired (each lane's fastest repeat, minutes apart; no noise floor measured, so no "
                f"crossover claimed) ([{name}](benchmarks/{name}.md): {where})")
    rows = {r["batch"]: r for r in found["rows"]}
    shown = ", ".join("—" if b not in rows else
                      f"{rows[b]['median']:.2f}× ({rows[b]['low']:.2f}–{rows[b]['high']:.2f})" for b in BATCHES_SHOWN)
    floor = found["noise_floor"]
    tail = (f"; slower than AR beyond the noise floor ({100 * floor:.0f}%) from B = {found['stops_paying_at']}"
            if found["stops_paying_at"] and floor is not None else "; no batch size measurably slower than AR")
    return f"{shown}, paired rounds ([{name}](benchmarks/{name}.md): {where}{tail})"


def _cpu_column(name: str, folder: Path) -> dict:
    rep = report(name, folder)
    curve = rep["cost_curve"]["target"]
    best = rep["ranking"]["code@greedy"][0]
    return {
        "report": f"[{name}.md](benchmarks/{name}.md), {rep['environment']['date_utc'][:10]}",
        "machine": _where(rep),
        "autoregressive": _span(_greedy(rep, "ar", "tokens_per_s"), "{:.1f}", " tokens/s"),
        "verify": f"{curve['5'] / curve['1']:.2f}",
        "c": f"{_span(_greedy(rep, 'spec', 'c_vs_ar'))} (int8 draft {_span(_greedy(rep, 'spec-int8', 'c_vs_ar'))})",
        "spec_code": f"{_x(_speed(rep, 'code', 'spec'))}, {_x(_speed(rep, 'rewrite', 'spec'))}",
        "spec_chat": f"{_x(_speed(rep, 'chat', 'spec'))}, {_x(_speed(rep, 'creative', 'spec'))}",
        "best": f"{_x(_speed(rep, 'code', best))} ({best})",
        "pld": _x(_speed(rep, "rewrite", "pld")),
        "ttft": _ms(rep, "code", "ttft"),
        "gap": _ms(rep, "code", "gap_p50"),
        "batch": _batched(BATCHED[name], folder),
        "held_out": _held_out(name, folder),
        **_llamacpp_cells(name, folder),
    }


def _llamacpp_cells(name: str, folder: Path) -> dict:
    """llama.cpp's cost curve on the shipped file and the fastest lane over its own greedy decoding."""
    source = LLAMACPP[name]
    rep = report(source, folder)
    s = rep["summary"]
    if "formats" in rep:  # specviz.bench.formats: code prompts only
        curve = rep["formats"]["q4_k_m"]["cost"]["curve"]
        best = f"code {_x(s['fastest_counted_over_own_greedy'])} ({s['fastest_counted']}); chat not measured"
    else:  # specviz.bench.side_by_side: code and chat
        curve = rep["cost"]["curve"]
        best = (f"code {_x(s['code']['fastest_over_greedy'])} ({s['code']['fastest']}), "
                f"chat {_x(s['chat']['fastest_over_greedy'])} ({s['chat']['fastest']})")
    passes = ", ".join(f"{curve[str(n)]:.2f}" for n in LLAMACPP_PASSES)
    return {"llamacpp_verify": f"{passes} ([{source}](benchmarks/{source}.md))", "llamacpp_best": best}


def _held_out(name: str, folder: Path) -> str:
    """The typical gain on held-out prompts, where a held-out report measured this kind of CPU."""
    rep = report(HELDOUT, folder)
    env = rep["environments"][0]
    if (env["dtype"] == "bfloat16") != (name == NATIVE):
        return "not measured on held-out prompts"
    return (f"code {_typical('code', folder)}, chat {_typical('chat', folder)} "
            f"({rep['settings']['prompts_per_kind']} prompts each; [{HELDOUT}](benchmarks/{HELDOUT}.md): "
            f"{env['device_name']}, {env['dtype']})")


def verify_costs(folder: Path = REPORTS) -> list:
    """(machine, V(5)): a target pass over 5 tokens in one-token passes, per reference report."""
    out = []
    for name in (NATIVE, AVX2, GPU_7B):
        rep = report(name, folder)
        curve = rep["cost_curve"]["target"]
        out.append((f"{_where(rep)} ({name})", round(curve["5"] / curve["1"], 2)))
    return out


def _at_alpha_one(rep: dict) -> Optional[float]:
    return next((p["speedup"] for p in rep.get("controlled", {}).get("points", []) if p["a_set"] == 1.0), None)


def _gpu_column(folder: Path) -> dict:
    small, big = report(GPU_SMALL, folder), report(GPU_7B, folder)
    curve = big["cost_curve"]["target"]
    ar = [lanes["ar"]["decode_tokens_per_s"] for lanes in big["results"].values() if "ar" in lanes]
    return {
        "report": f"[1.5B/0.5B](benchmarks/{GPU_SMALL}.md), [7B/0.5B](benchmarks/{GPU_7B}.md), "
                  f"{big['environment']['date_utc'][:10]}",
        "machine": f"{big['environment']['device_name']}, random weights of the real shapes, "
                   f"{big['environment']['dtype']}, CUDA graphs",
        "autoregressive": f"7B: {_span(ar, '{:.0f}', ' tokens/s')} after the first token",
        "verify": f"{curve['5'] / curve['1']:.2f} (7B)",
        "c": f"{_span(_greedy(small, 'spec', 'c_vs_ar'))} (0.5B vs 1.5B)",
        "spec_code": f"at α = 1: 1.5B target {_x(_at_alpha_one(small))}, 7B {_x(_at_alpha_one(big))}",
        "spec_chat": "(random weights: no real α)",
        "best": "—", "pld": "—", "ttft": "—", "gap": "—", "batch": "—", "held_out": "—",
        "llamacpp_verify": "—", "llamacpp_best": "—",
    }


ROWS = (("report", "report"), ("machine", "machine"), ("autoregressive", "autoregressive"),
        ("verify", "one forward over 5 new tokens ÷ over 1 (V(5))"),
        ("c", "c (draft forward ÷ target forward)"),
        ("held_out", "spec k = 4 over AR on held-out prompts: the typical gain, with its 95% interval"),
        ("spec_code", "spec k = 4, one prompt each: code, rewrite"),
        ("spec_chat", "spec k = 4, one prompt each: chat, creative"), ("best", "best on code completion (one prompt: a best case)"),
        ("pld", "prompt lookup on the rewrite"), ("ttft", "time to first token, code: AR vs spec (specviz drafts before its first token; serving engines do not)"),
        ("gap", "median wait between updates, code: AR vs spec"),
        ("batch", f"batches of users, spec k = 4 against plain at B = {', '.join(map(str, BATCHES_SHOWN))} "
                   "(median of paired rounds, their range)"),
        ("llamacpp_verify", "llama.cpp on the shipped Q4_K_M file: one pass over "
                            f"{', '.join(map(str, LLAMACPP_PASSES))} new tokens ÷ over 1"),
        ("llamacpp_best", "llama.cpp: the fastest lossless lane over llama.cpp's own greedy decoding, "
                          "held-out prompts (k = 3)"))


def machines_table(folder: Path = REPORTS) -> str:
    """What each kind of machine shows: one column per kind, every cell read from its report."""
    columns = [_cpu_column(NATIVE, folder), _cpu_column(AVX2, folder), _gpu_column(folder)]
    lines = ["| | **CPU with native bf16** | **CPU without it: AVX2 only** (float32; most laptops) | **GPU** |",
             "|---|---|---|---|"]
    lines += [f"| {title} | " + " | ".join(col[key] for col in columns) + " |" for key, title in ROWS]
    return "\n".join(lines) + "\n"


def preset_rows(folder: Path = recorded.DATA) -> list:
    """Each preset's recorded race: tokens per lane, each lane's compute clock, the speedup, and
    the spread of the speedup over every run of the race (the recorded one and its repeats)."""
    rows = []
    for preset in recorded.PRESETS:
        try:
            rec = recorded.recording(preset.label, folder)
        except (KeyError, ValueError, OSError) as exc:  # not recorded, recorded with other settings, unreadable
            raise SpecvizError(f"The presets' table needs the recording of {preset.label!r} ({exc}): "
                               "run python -m specviz.bench.recordings record") from exc
        if not rec.speedups:
            raise SpecvizError(f"The presets' table needs {preset.label!r} timed over repeats, and its recording "
                               "predates them: run python -m specviz.bench.recordings record")
        tokens = (len(rec.run[-1]["token_ids"]), len(rec.ar[-1]["token_ids"]))
        rows.append({"label": preset.label, "method": preset.method, "k": preset.k, "T": preset.temperature,
                     "tokens": tokens, "run_s": rec.run_busy, "ar_s": rec.ar_busy,
                     "steps": sum(e["kind"] == "step_finished" for e in rec.run),
                     "speedup": (tokens[0] / rec.run_busy) / (tokens[1] / rec.ar_busy),
                     "speedup_median": statistics.median(rec.speedups), "speedup_lo": min(rec.speedups),
                     "speedup_hi": max(rec.speedups), "repeats": len(rec.speedups), "claim": preset.claim,
                     "alpha": rec.run[-1]["metrics"].get("alpha_empirical"), "lossless": rec.run[0]["lossless"],
                     "note": rec.note})  # where and how it was recorded
    return rows


def presets_table(folder: Path = recorded.DATA) -> str:
    rows = preset_rows(folder)
    note = rows[0]["note"]
    lines = [f"The presets as {note} (each lane's own compute clock; both lanes emit the same number of tokens). "
             "Each race was run again after its recording, the same text each time, so the spread of its speedup "
             "is the machine's: a preset wins or loses only where every run says so, else it is break-even. "
             f"They are raced as the app races them: the lanes take turns step by step, and every position "
             f"records the top {recorded.RECORD_TOPK} probabilities the inspector shows, which the speculative "
             "lane pays at k + 1 positions a step: the benchmarks, which time the engine without them, measure "
             "the same workloads a few per cent faster for speculation.",
             "", "| preset | method | tokens per lane | autoregressive | speculative | speedup, this recording | "
             "speedup over runs: median (range) | α |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        method = f"{r['method']}" + (f", k = {r['k']}" if r["method"] in ("spec", "pld") else "") + f", T = {r['T']:g}"
        alpha = "—" if r["alpha"] is None else f"{r['alpha']:.2f}"
        spread = (f"**{r['speedup_median']:.2f}×** ({r['speedup_lo']:.2f}–{r['speedup_hi']:.2f}, "
                  f"{r['repeats']} runs)")
        lines.append(f"| {r['label']} | {method} | {r['tokens'][0]} | {r['ar_s']:.1f} s | {r['run_s']:.1f} s | "
                     f"{r['speedup']:.2f}× | {spread} | {alpha} |")
    return "\n".join(lines) + "\n"


HELDOUT = "heldout-qwen-coder-64"  # the held-out report README's headline quotes
HEADLINE_LANE = "spec"  # the default method, the one the presets' best case ran


def _typical(kind: str, folder: Path) -> str:
    """'**1.50×** (95% interval 1.45–1.55)': the held-out mean of the default method over AR, with its spread."""
    row = report(HELDOUT, folder)["analysis"][kind][HEADLINE_LANE]
    low, high = row["vs_ar_ci95"]
    return f"**{row['vs_ar']:.2f}×** (95% interval over prompts {low:.2f}–{high:.2f})"


def headline(folder: Path = recorded.DATA, reports: Path = REPORTS) -> str:
    """README's first screen, in one sentence a newcomer reads before any table: the typical gain
    (the held-out mean with its interval) first, then the presets the app opens on, each one prompt
    raced a few times (the median and range), the best of them called a best case."""
    listed = preset_rows(folder)
    rows, note = {r["label"]: r for r in listed}, listed[0]["note"]
    rep = report(HELDOUT, reports)
    env, prompts = rep["environments"][0], rep["settings"]["prompts_per_kind"]

    def gain(label_start: str) -> str:
        row = next(r for label, r in rows.items() if label.startswith(label_start))
        return (f"{row['speedup_median']:.2f}× (median of {row['repeats']} runs, "
                f"{row['speedup_lo']:.2f}–{row['speedup_hi']:.2f})")

    return (f"How much it saves depends on how often the guesses are right. On {prompts} held-out code prompts the "
            f"draft model made decoding {_typical('code', reports)} as fast as the big model alone, and on {prompts} "
            f"chat prompts {_typical('chat', reports)} ({env['device_name']}, {env['dtype']}, greedy, one run a prompt; "
            f"[report](docs/benchmarks/{HELDOUT}.md)). The app's presets are single prompts, {note}, each raced "
            f"again a few times: the best of them, greedy code completion, {gain('Code, greedy')} (a best case), and "
            f"a chat answer sampled at temperature 0.7, {gain('Chat, T = 0.7: ')}, where too many guesses miss "
            "([every machine](docs/teaching.md#what-each-kind-of-machine-will-show)).\n")


EXECUTED_ANSWERS = ROOT / "docs" / "notebooks" / "answers.json"  # notebooks/execute.py: each copy's worksheet answers
# what moves each measured answer, and the signs that a student's number is not the lesson's
RED_FLAGS = {
    "5": "a check that fails names the step where the rule parted from the engine",
    "6": "int8 fallback (another target: another α); the tiny pair (α means nothing)",
    "7": "a busy machine (the cell says so: close other programs, run again); int8 fallback; a GPU runtime "
         "(speculation with this pair loses there); the tiny pair",
    "8": "a busy machine; a GPU runtime; TTFT is specviz's design (it drafts before the first token), "
         "serving engines show the first token as fast as plain decoding",
    "9": "a few dozen steps leave most depths 'too few to tell' (the cell says how many steps each verdict rests "
         "on): that is the expected answer, not a failure; under 20 steps there is no verdict at all",
    "10": "a busy machine widens the interval; the tiny pair",
    "11": "the price and batch size set in the cell",
}


def _lab_exercise(question: str) -> str:
    """The lab exercise a worksheet question asks for: its value where it is one number."""
    if question == "6":  # notebook 4: accepted / drafted with independent acceptance, alpha(1 - alpha^k) / (k(1 - alpha))
        alpha, k = 0.8, 4
        return f"Lab exercise: α(1 − α^k) / (k(1 − α)) = {alpha * (1 - alpha ** k) / (k * (1 - alpha)):.2f} at α = {alpha}, k = {k}. "
    if question == "10":  # notebook 9: the check cell recomputes it from the student's own runs
        return ("Lab exercise: half of the t-interval's width in τ's row of the intervals table (the student's own "
                "runs: the check cell recomputes it). ")
    return ""


def _worksheet(records: list, question: str) -> str:
    found = {}
    for r in records:  # the last answer to (question, what) wins, as in a notebook run twice
        if r["question"] == question:
            found[r["what"]] = r["shown"]
    return "; ".join(f"{what} {shown}" for what, shown in found.items()) or "—"


def _lab_records(rep: Optional[dict]) -> list:
    return [r for entry in (rep or {}).get("notebooks", {}).values() for r in entry.get("worksheet", [])]


def _read_optional(path: Path) -> Optional[dict]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None


def answers_table(reports: Path = REPORTS, presets: Path = recorded.DATA,
                  executed: Path = EXECUTED_ANSWERS) -> str:
    """The worksheet's expected answers: the recorded ones exactly; the measured ones as the lab's
    notebooks printed them (specviz.teaching.worksheet) in the executed copies and in the two lab
    runs (native bf16, and kernels held to AVX2), so the key quotes the very cells the students run,
    on machines the teacher can compare with; then what moves each answer and its red flags."""
    native, avx2 = report(NATIVE, reports), report(AVX2, reports)
    labs = [_read_optional(reports / f"{name}.json") for name in LAB_REPORTS]
    copies = _read_optional(executed) or {}
    copy_records = [r for records in copies.get("notebooks", {}).values() for r in records]
    rows = preset_rows(presets)
    hook = rows[0]  # its target passes: one per token autoregressive, one per step speculative
    chat = next(r for r in rows if r["label"].startswith("Chat, T = 0.7: "))
    hot = next(r for r in rows if r["label"].startswith("Hot sampling"))

    def spread(row: dict) -> str:
        return f"median {row['speedup_median']:.2f}× over {row['repeats']} runs, {row['speedup_lo']:.2f}–{row['speedup_hi']:.2f}"

    def v5(rep) -> str:
        return f"{rep['cost_curve']['target']['5'] / rep['cost_curve']['target']['1']:.2f}"

    fixed = {"1": f"{hook['speedup']:.2f}× as recorded ({spread(hook)}: the recording is a best case); {hook['tokens'][1]} target passes "
                  f"autoregressive, {hook['steps']} speculative (one per step, each yielding up to k + 1 = 5 tokens)",
             "2": "k + 1: 7 on the slide (the code rewrite, k = 6: 6 accepted guesses and the bonus), 5 in the app's "
                  "hook (k = 4)",
             "3": "the residual norm(max(p − q, 0)); β is the value the inspector shows (it varies by position)",
             "4": f"5 tokens read, 5 positions scored, differences of rounding only; V(5): native bf16 {v5(native)}, "
                  f"AVX2 float32 {v5(avx2)}",
             "5": "every step the engine took (the check prints how many); in section 5 the greedy texts are identical "
                  "in float32, and in bfloat16 identical or parting at a near-tie",
             "12": f"hot sampling, T = 1.5 ({spread(hot)}); chat at T = 0.7 ({spread(chat)}, "
                   f"{'below 1 in every run' if chat['speedup_hi'] < 1 else 'break-even: its runs fall on both sides of 1'}); "
                   "batches of users (the lecture's batching slide). specviz's later first token (question 8) is its "
                   "design, not speculation's cost: a serving engine shows the first token as fast as plain decoding"}
    lines = [f"| question | {_copies_heading(executed, copies.get('notebooks', {}))} | lab run, native bf16 | "
             "lab run, AVX2 float32 | red flags, and what moves it |", "|---|---|---|---|---|"]
    for q in map(str, range(1, 13)):
        if q in fixed:
            lines.append(f"| {q} | {fixed[q]} | | | {RED_FLAGS.get(q, '')} |")
            continue
        cells = [_worksheet(copy_records, q)] + [_worksheet(_lab_records(rep), q) for rep in labs]
        lines.append(f"| {q} | " + " | ".join(cells) + f" | {_lab_exercise(q)}{RED_FLAGS.get(q, '')} |")
    return "\n".join(lines) + "\n"


def _copies_heading(executed: Path, numbers) -> str:
    """The copies' column heading: the machine (CPU, cores, device and dtype) each copy that gave
    answers says it ran on, read from the copy itself, so the heading cannot outlive a rebuild elsewhere."""
    where = {}
    for number in numbers:
        for page in sorted(executed.parent.glob(f"{number}_*.html")):
            where[number] = provenance.copy_machine(page.read_text(encoding="utf-8")) or "where it ran not recorded"
    if not where:
        return "the executed copy"
    if len(set(where.values())) == 1:
        return f"the executed copies ({next(iter(where.values()))})"
    return "the executed copies (" + "; ".join(f"notebook {n}: {w}" for n, w in where.items()) + ")"


LAB_REPORTS = ("lab-qwen-coder-native", "lab-qwen-coder-avx2")  # python -m specviz.bench.lab [--cpu avx2]


def lab_table(folder: Path = REPORTS) -> str:
    """The lab's time on each kind of CPU, notebook by notebook, from the lab reports: compute to
    the lab's end, reading and the allowance for its lab exercise, and whether the lab fits."""
    reports = [report(name, folder) for name in LAB_REPORTS]
    allowance = reports[0]["settings"]["exercise_minutes"]
    lines = [f"| notebook, sections | lab exercises ({allowance} min each) | " + " | ".join(
                 f"[{name}](benchmarks/{name}.md): {rep['environment']['device_name']}, "
                 f"{_lab_loaded(rep)}{' (kernels held to AVX2)' if rep['environment']['cpu_env'] else ''}"
                 for name, rep in zip(LAB_REPORTS, reports)) + " |",
             "|---|---|" + "---|" * len(reports)]
    for number in reports[0]["notebooks"]:
        first = reports[0]["notebooks"][number]
        cells = [f"{e['student_min']:.0f} min (compute {e['compute_to_lab_end_s'] / 60:.1f}, reading "
                 f"{e['reading_min']:.1f}, both together {e['reading_with_compute_min']:.1f}; exercises "
                 f"{e['exercise_min']:.0f})"
                 for e in (rep["notebooks"][number] for rep in reports)]
        sections = ", ".join(map(str, first["lab_sections"]))
        lines.append(f"| {first['notebook'][:2]}, sections {sections} | {first['lab_exercises']} | " + " | ".join(cells) + " |")
    lines.append("| **the lab** | | " + " | ".join(f"**{rep['lab_minutes']:.1f} min** ({_lab_verdict(rep)})"
                                                  for rep in reports) + " |")
    wpm = reports[0]["settings"]["reading_wpm"]
    lines += ["", f"A notebook's time: the student presses Run All and reads from the top at {wpm} words a minute "
                  "while the kernel computes, waiting at a code cell until its output is there, down to the lab-end "
                  f"cell (where Run All stops); then {allowance} minutes for each lab exercise."]
    return "\n".join(lines) + "\n"


def _lab_verdict(rep: dict) -> str:
    if rep["fits"]:
        return f"fits {rep['slot_minutes']}, {rep['margin_min']:.1f} min to spare"
    return f"does not fit {rep['slot_minutes']}: {-rep['margin_min']:.1f} min over"


def _lab_loaded(rep: dict) -> str:
    kinds = {e["loaded_as"] for e in rep["notebooks"].values()}
    return ", ".join(sorted(kinds))


# The worksheet's questions the static site (python -m specviz site) answers from its recordings and
# executed copies: (question, page of the site, what the link says, what to read there). The site's
# lab page lists them and the guide's "site-lab" block marks them; question 5 (write the cascade
# rule) needs a notebook run.
WORKSHEET_URL = "https://github.com/specviz/specviz/blob/main/docs/worksheet.md"
NB4, NB9 = "notebooks/04_speedup_vs_acceptance.html", "notebooks/09_latency_and_serving.html"
SITE_LAB = (
    (1, "gallery.html#k=preset-01&view=race", "the preset's race",
     "The speedup as recorded is the race's verdict; each lane's target forwards are in its counters, and the "
     "range of the preset's repeated races is under its title."),
    (2, "gallery.html#k=preset-01", "the same preset, step view",
     "Step (→) to a blue bonus chip: the step panel says how many tokens that one target pass produced, and k."),
    (3, "gallery.html#k=preset-02", "the chat preset at T = 0.7",
     "Step to an orange chip: the panel says it was drawn from the residual norm(max(p − q, 0)); the inspector "
     "below gives β at that position."),
    (4, "slides/lecture.slides.html", "the slides \"One pass, k + 1 answers\" and \"So a pass over 5 tokens costs about one\"",
     "Both numbers are on the slides (and in notebook 0, section 2)."),
    (6, NB4 + "#3.-accepted-/-drafted-is-not-%CE%B1", "notebook 4, section 3",
     "α and accepted / drafted as the notebook measured them; the exercise's expected accepted / drafted at "
     "α = 0.8, k = 4 is a line of arithmetic."),
    (7, NB4 + "#2.-Measured-runs-for-several-k,-on-the-theory-curves", "notebook 4, section 2",
     "The table's measured speedup and both theories; the speedup explorer draws τ/(c·k + V) for any α, k, c and V."),
    (8, NB9 + "#1.-Time-to-first-token,-and-the-gaps-between-tokens", "notebook 9, section 1",
     "The time-to-first-token table and the arrival gaps, as the notebook measured them."),
    (9, NB9 + "#2.-Acceptance-decays-with-depth", "notebook 9, section 2", "The depth table and its verdict."),
    (10, NB9 + "#3.-One-run-is-not-the-truth:-repeats-and-error-bars", "notebook 9, section 3",
     "The speedup with its bootstrap interval and the repeated runs' range."),
    (11, NB9 + "#4.-Serving-cost:-what-a-million-tokens-cost", "notebook 9, section 4 (homework)",
     "The cost table at the notebook's price; the Batches page shows where speculation stops paying."),
    (12, "gallery.html#k=preset-03&view=race", "the hot-sampling preset",
     "A race speculation loses, with its range; the Batches page has the other situation."),
)


def worksheet_questions(path: Path = ROOT / "docs" / "worksheet.md") -> int:
    """How many numbered questions the student worksheet has."""
    return len(re.findall(r"^\d+\. ", path.read_text(encoding="utf-8"), re.M))


def site_lab_table() -> str:
    """The guide's marks of the worksheet questions the static site answers (SITE_LAB)."""
    rows = "".join(f"| {q} | {link}: `{href}` | {what} |\n" for q, href, link, what in SITE_LAB)
    others = sorted(set(range(1, worksheet_questions() + 1)) - {q for q, *_ in SITE_LAB})
    return ("| question | where the site answers it | what to read there |\n|---|---|---|\n" + rows
            + f"\nQuestion{'s' * (len(others) != 1)} {', '.join(map(str, others))} need{'s' * (len(others) == 1)} a "
            f"notebook run (writing a rule or timing a laptop); the other {len(SITE_LAB)} are read off the site.\n")


TABLES: dict = {"machines": machines_table, "presets": presets_table, "answers": answers_table, "lab": lab_table,
                "headline": headline, "site_lab": site_lab_table}


def _made(name: str, make: Callable[[], str]) -> str:
    """A table, or one sentence when a report lacks what it reads (an older or partial report)."""
    try:
        return make()
    except (KeyError, ValueError, TypeError, IndexError) as exc:
        raise SpecvizError(f"The guide's {name} table could not be written: its report lacks {exc!s} (or has it "
                           "in another form); regenerate that report with the command it names.") from exc


def render(text: str, tables: Optional[dict] = None) -> str:
    """The guide with every generated block rewritten from its sources."""
    tables = tables or {name: _made(name, make) for name, make in TABLES.items()}

    def fill(match) -> str:
        if match[2] not in tables:
            raise SpecvizError(f"a page asks for a generated table {match[2]!r}; "
                               f"the tables are {', '.join(TABLES)}.")
        return match[1] + tables[match[2]] + match[4]

    return BLOCK.sub(fill, text)


def stale(text: str) -> list:
    """The names of the generated blocks whose text differs from their sources."""
    fresh = {m[2]: m[3] for m in BLOCK.finditer(render(text))}
    return [m[2] for m in BLOCK.finditer(text) if fresh[m[2]] != m[3]]


def main(argv=None, say: Callable[[str], None] = print) -> int:
    parser = argparse.ArgumentParser(prog="python -m specviz.bench.guide", description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a page and its sources differ")
    args = parser.parse_args(argv)

    def run() -> int:
        parted = []
        for page in PAGES:
            text, name = page.read_text(encoding="utf-8"), page.relative_to(ROOT)
            if args.check:
                stale_here = stale(text)
                if stale_here:
                    parted.append(name)
                    say(f"{name}: the {', '.join(stale_here)} table(s) differ from their sources; "
                        "run python -m specviz.bench.guide")
                continue
            files.write_text(page, render(text))
            say(f"wrote the {', '.join(m[2] for m in BLOCK.finditer(text))} table(s) of {name}")
        return 1 if parted else 0

    return run_command(run, "interrupted; each page is written whole or not at all")


if __name__ == "__main__":
    sys.exit(main())
