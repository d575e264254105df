"""How long the class's lab takes: the core path run as a student runs it, timed section by section.

The teacher's guide gives the lab 35 minutes for notebooks 2, 4 and 9, a few sections each
(LAB_PATH). Each of those notebooks closes its lab sections with a lab-end cell
(specviz.teaching.lab.lab_ends_here(): a student's Run All stops there) and holds one required
exercise above it, headed "Lab exercise". A student presses Run All and reads from the
top while the kernel computes, in order: the prose at READING_WPM words a minute, and a code
cell's output once the kernel has finished that cell (a student who reads faster than the kernel
computes waits). A notebook's part of the lab is the time the reader reaches its lab-end cell
that way (`reading_with_compute`: at least the longer of the compute and the reading, at most
their sum) plus EXERCISE_MINUTES per lab exercise: the check cells say "not written yet" without
stopping Run All, so the exercise is written after the reading, and its cells run again in seconds. This runs each notebook top to bottom on the real pair, in a fresh kernel, one
after another (as the guide says: one kernel at a time), with SPECVIZ_LAB=0 so that the homework
sections run too and the whole notebook is timed beside its lab part, reads each cell's time
from nbclient's timing record, and writes a report:

    python -m specviz.bench.lab                 this CPU as it is (bf16 where it multiplies bf16 natively)
    python -m specviz.bench.lab --cpu avx2      PyTorch's and oneDNN's kernels held to AVX2, as on most
                                                laptops (the pair then loads in float32, chosen by specviz.runtime.cpu)

Writes docs/benchmarks/lab-<pair>-<cpu>.{json,md}; the guide's lab table is written from them
(python -m specviz.bench.guide). Progress and an ETA on stderr; a notebook already timed in
OUT.partial.json (same settings) is not run again, so an interrupted run resumes.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Callable, Optional

from nbclient.exceptions import CellExecutionError

from specviz import files
from specviz.errors import SpecvizError, run_command
from specviz.render.notebook import loaded_as
from specviz.runtime.machine import cpu_count, cpu_name, loadavg

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
REPORTS = ROOT / "docs" / "benchmarks"
# the lab of docs/teaching.md: (notebook number, its sections), in the order the class runs them
LAB_PATH = (("02", (1, 2, 3, 4)), ("04", (1, 2, 3)), ("09", (1, 2, 3)))
LAB_MINUTES = 35
READING_WPM = 150  # a student reading technical prose closely, with formulas and tables: slower than prose
# writing a lab exercise (a few lines of code or one answer) until its check cell says it is right,
# the check's hints included; the lab's sections are read before it, so reading is not counted twice
EXERCISE_MINUTES = 4
# the lab-end cell calls specviz.teaching.lab's switch (named, not imported: bench sits beside teaching)
LAB_END_CALL = "lab_ends_here("
LAB_EXERCISE = re.compile(r"^#{2,4} Lab exercise\b", re.M)
CPUS = {"native": {}, "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}}
HEADING = re.compile(r"^## (\d+)\.", re.M)
CELL_TIMEOUT_S = 1800
WORKSHEET_ENV = "SPECVIZ_WORKSHEET"  # specviz.teaching.worksheet.ENV (bench does not import teaching)


def sections(nb) -> list:
    """The section number of each cell: 0 before the first numbered heading ("## 1."), a heading's
    number from it to the next level-2 heading, None after an unnumbered one (take-aways)."""
    out, current = [], 0
    for cell in nb.cells:
        if cell.cell_type == "markdown" and cell.source.startswith("## "):
            found = HEADING.match(cell.source)
            current = int(found[1]) if found else None
        out.append(current)
    return out


def cell_seconds(cell) -> float:
    """The cell's time as the student waits it: the wall clock around its execution (kept by
    run_notebook), else nbclient's record of the kernel's own execution."""
    if "specviz_wall_s" in cell.metadata:
        return float(cell.metadata["specviz_wall_s"])
    timing = cell.metadata.get("execution", {})
    if "iopub.execute_input" not in timing or "shell.execute_reply" not in timing:
        return 0.0
    start, end = (datetime.datetime.fromisoformat(timing[key].replace("Z", "+00:00"))
                  for key in ("iopub.execute_input", "shell.execute_reply"))
    return (end - start).total_seconds()


def words(text: str) -> int:
    """The words a reader reads: a link's text, not its address; no HTML comments (figure markers)."""
    text = re.sub(r"<!--.*?-->", " ", re.sub(r"\]\([^)]*\)", "]", text), flags=re.S)
    return len(re.findall(r"[A-Za-zÀ-ÿα-ωΑ-Ω0-9]+", text))


def lab_end(nb, wanted: tuple) -> int:
    """The index of the notebook's lab-end cell, checked to close exactly its lab sections: the
    setup and sections `wanted` above it, nothing of theirs below it."""
    marks = sections(nb)
    if not any(s in wanted for s in marks):
        raise SpecvizError(f"the notebook has none of the lab's sections {list(wanted)} (numbered headings "
                           "'## N.'): update LAB_PATH in specviz/bench/lab.py and the guide's lab table")
    ends = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and LAB_END_CALL in c.source]
    if len(ends) != 1:
        raise SpecvizError(f"the notebook has {len(ends)} lab-end cells (a code cell calling "
                           f"specviz.teaching.lab.lab_ends_here()); it needs one, as the last cell of its section {wanted[-1]}")
    end = ends[0]
    after = nb.cells[end + 1] if end + 1 < len(nb.cells) else None
    if set(marks[:end + 1]) != {0, *wanted} or not (after is None or after.cell_type == "markdown"
                                                  and after.source.startswith("## ")):
        raise SpecvizError(f"the notebook's lab-end cell must be the last cell of its section {wanted[-1]}, with "
                           f"the lab's sections {list(wanted)} above it and the next '## ' heading right below it")
    return end


def lab_exercises(nb, end: int) -> int:
    """The required exercises of a notebook's lab part: headings 'Lab exercise' above its end."""
    return sum(len(LAB_EXERCISE.findall(c.source)) for c in nb.cells[:end] if c.cell_type == "markdown")


def summarise(nb, wanted: tuple, kernel_start_s: float = 0.0) -> dict:
    """Per section and for the lab part of one executed notebook: compute seconds, reading minutes,
    the compute until its lab-end cell has run, its lab exercises, and the student's minutes."""
    marks, end = sections(nb), lab_end(nb, wanted)
    per = {}
    for cell, section in zip(nb.cells, marks):
        if section is None:
            continue
        entry = per.setdefault(section, {"compute_s": 0.0, "words": 0})
        if cell.cell_type == "code":
            entry["compute_s"] += cell_seconds(cell)
        else:
            entry["words"] += words(cell.source)
    read = sum(words(c.source) for c in nb.cells[:end] if c.cell_type == "markdown") / READING_WPM
    to_end = kernel_start_s + sum(cell_seconds(c) for c in nb.cells[:end + 1] if c.cell_type == "code")
    exercises = lab_exercises(nb, end)
    reached = reading_with_compute(nb.cells[:end + 1], kernel_start_s)
    return {"sections": {str(s): {"compute_s": round(v["compute_s"], 2), "words": v["words"]} for s, v in per.items()},
            "lab_sections": list(wanted), "compute_to_lab_end_s": round(to_end, 2),
            "whole_notebook_s": round(kernel_start_s + sum(cell_seconds(c) for c in nb.cells if c.cell_type == "code"), 2),
            "reading_min": round(read, 2), "lab_exercises": exercises, "exercise_min": exercises * EXERCISE_MINUTES,
            "reading_with_compute_min": round(reached, 2), "kernel_start_s": round(kernel_start_s, 2),
            "lab_cells": timeline(nb.cells[:end + 1]),
            "student_min": round(reached + exercises * EXERCISE_MINUTES, 2)}


def timeline(cells) -> list:
    """The lab part as the reader meets it: ["code", seconds] or ["prose", words] per cell, so that
    a machine of another speed can replay it with its compute scaled (specviz.bench.check)."""
    return [["code", round(cell_seconds(c), 2)] if c.cell_type == "code" else ["prose", words(c.source)]
            for c in cells]


def replay(cells: list, kernel_start_s: float = 0.0, scale: float = 1.0) -> float:
    """Minutes until the reader of `timeline` cells reaches the last, each cell's compute times `scale`."""
    done = reader = kernel_start_s * scale
    for kind, amount in cells:
        if kind == "code":
            done += amount * scale
            reader = max(reader, done)
        else:
            reader += amount / READING_WPM * 60
    return reader / 60


def reading_with_compute(cells, kernel_start_s: float = 0.0) -> float:
    """Minutes until a student who pressed Run All has read down to the last of `cells`: the
    reading advances at READING_WPM and stops at a code cell until the kernel, running the cells
    in order once it has started (kernel_start_s), has finished that cell."""
    return replay(timeline(cells), kernel_start_s)


def run_notebook(path: Path, pair: str, env: dict, answers: Optional[Path] = None):
    """The notebook top to bottom in a fresh kernel with `env`, as Run All does; (nb, kernel start s).
    The worksheet answers its cells print are also written to `answers` (specviz.teaching.worksheet)."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    if answers is not None:
        env = {**env, WORKSHEET_ENV: str(answers)}
        files.remove(answers)
    os.environ.update({"SPECVIZ_PAIR": pair, "SPECVIZ_SMOKE": "0", "SPECVIZ_STATIC_IMAGES": "0", "HF_HUB_OFFLINE": "1",
                       "TQDM_DISABLE": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1", "SPECVIZ_LAB": "0", **env})
    client = NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOKS)}})
    start = time.perf_counter()
    with client.setup_kernel():
        started = time.perf_counter() - start
        for index, cell in enumerate(nb.cells):
            before = time.perf_counter()
            client.execute_cell(cell, index)
            if cell.cell_type == "code":
                cell.metadata["specviz_wall_s"] = time.perf_counter() - before
    return nb, started


def read_answers(path: Path) -> list:
    """The worksheet answers a notebook's cells recorded (one JSON object a line), in their order."""
    return files.read_json_lines(path)


def pace(pair: str, cpu: str, say: Callable[[str], None]) -> dict:
    """This machine's AR seconds per token as `python -m specviz check` measures it (its short
    greedy race), run in a child process with the CPU's kernel settings: what the check on a
    student's laptop divides by to scale this report's compute to that laptop."""
    import subprocess

    say(f"pace: python -m specviz check --pair {pair} (the race a student's check runs) ...")
    done = subprocess.run([sys.executable, "-m", "specviz", "check", "--pair", pair, "--json"], capture_output=True,
                          text=True, env={**os.environ, "HF_HUB_OFFLINE": "1", **CPUS[cpu]})
    try:
        race = json.loads(done.stdout)["race"]
    except (ValueError, KeyError, TypeError):
        raise SpecvizError(f"the check's race failed ({(done.stderr.strip().splitlines() or ['no output'])[-1][:200]})") from None
    if race.get("busy"):
        raise SpecvizError(f"the cores were busy while the pace was timed ({race['busy']}): run again on a quiet machine")
    return {"ar_s_per_token": race["ar_s_per_token"], "check_speedup": race["speedup"]}


def machine(cpu: str) -> dict:
    """Where it ran: the notebooks' kernels measured, this process only names the machine."""

    return {"device_name": cpu_name(), "cpu_count": cpu_count(), "loadavg_end": loadavg(), "cpu_setting": cpu,
            "cpu_env": CPUS[cpu]}


def measure(pair: str, cpu: str, out: Path, say: Callable[[str], None]) -> dict:
    partial = out.with_suffix(".partial.json")
    settings = {"pair": pair, "cpu": cpu, "lab_path": [list(map(str, (n, list(s)))) for n, s in LAB_PATH],
                "reading_wpm": READING_WPM, "exercise_minutes": EXERCISE_MINUTES}
    done = _resume(partial, settings, say)
    started, ran = time.perf_counter(), 0
    for i, (number, wanted) in enumerate(LAB_PATH):
        if number in done:
            continue
        path = next(NOTEBOOKS.glob(f"{number}_*.ipynb"), None)
        if path is None:
            raise SpecvizError(f"the lab's notebook {number} is not in {NOTEBOOKS}")
        say(f"[{i + 1}/{len(LAB_PATH)}] {path.name} on {pair}, cpu {cpu} ...")
        answers = out.with_name(f"{out.name}.answers-{number}.jsonl")
        try:
            nb, kernel_s = run_notebook(path, pair, CPUS[cpu], answers)
        except CellExecutionError as exc:
            last = str(exc).strip().splitlines()[-1][:200]
            raise SpecvizError(f"{path.name} failed while the lab was timed ({last}); run it in Jupyter to see "
                               "the cell") from exc
        done[number] = {"notebook": path.name, "loaded_as": loaded_as(nb) or "unknown", **summarise(nb, wanted, kernel_s),
                        "worksheet": read_answers(answers)}
        files.remove(answers)
        files.write_json(partial, {"settings": settings, "notebooks": done})
        ran += 1  # the ETA from the notebooks this sitting ran, not the ones a partial file kept
        left = sum(1 for n, _ in LAB_PATH if n not in done)
        say(f"    compute to the lab's end {done[number]['compute_to_lab_end_s'] / 60:.1f} min, reading "
            f"{done[number]['reading_min']:.1f} min, {done[number]['lab_exercises']} lab exercise(s); ETA {(time.perf_counter() - started) / ran * left / 60:.0f} min")
    report = {"settings": settings, "environment": {**machine(cpu), **pace(pair, cpu, say)}, "date_utc": _now(),
              "notebooks": done,
              **verdict(done)}
    files.write_json(out.with_suffix(".json"), report)
    files.write_text(out.with_suffix(".md"), markdown(report))
    files.remove(partial)
    return report


def verdict(notebooks: dict) -> dict:
    """The lab's minutes against its slot: whether it fits, and by how much it does or does not."""
    total = round(sum(entry["student_min"] for entry in notebooks.values()), 1)
    return {"lab_minutes": total, "fits": total <= LAB_MINUTES, "slot_minutes": LAB_MINUTES,
            "margin_min": round(LAB_MINUTES - total, 1)}


def verdict_words(report: dict) -> str:
    """'fits its 35-minute slot, 3.2 min to spare' or 'does NOT fit its 35-minute slot: 2.1 min over'."""
    slot = f"its {report['slot_minutes']}-minute slot"
    if report["fits"]:
        return f"fits {slot}, {report['margin_min']:.1f} min to spare"
    return f"does NOT fit {slot}: {-report['margin_min']:.1f} min over"


def _resume(partial: Path, settings: dict, say) -> dict:
    """The notebooks a partial file with these settings already timed ({} when none)."""
    kept = files.read_partial(partial, settings, say)
    if kept is None:
        return {}
    say(f"resuming: {', '.join(kept['notebooks'])} already timed")
    return kept["notebooks"]


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M")


def markdown(report: dict) -> str:
    env, s = report["environment"], report["settings"]
    lines = [f"# The lab's time: {s['pair']} pair, cpu {s['cpu']}", "",
             f"Machine: {env.get('device_name', '?')}, {env.get('cpu_count', '?')} cores; kernels: "
             f"{'as the CPU is' if not env['cpu_env'] else ', '.join(f'{k}={v}' for k, v in env['cpu_env'].items())}; "
             f"{report['date_utc']} UTC. Command: `python -m specviz.bench.lab --cpu {s['cpu']}`.", "",
             "Each notebook run top to bottom in a fresh kernel, with SPECVIZ_LAB=0 so that it runs past its lab-end "
             "cell (a student's Run All stops there) and the whole notebook is timed too. A student presses Run "
             f"All and reads from the top at {s['reading_wpm']} words a minute while the kernel computes, waiting at "
             "a code cell until its output is there; a notebook's time is when that reader reaches the lab-end cell "
             "(at least the longer of compute and reading, at most their sum), plus "
             f"{s['exercise_minutes']} minutes for each lab exercise (the required one; the others are homework).", "",
             "| notebook | loaded as | lab sections | compute to the lab's end | reading | read beside the compute "
             "| lab exercises | student | whole notebook (homework included) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for entry in report["notebooks"].values():
        lines.append(f"| {entry['notebook']} | {entry['loaded_as']} | {', '.join(map(str, entry['lab_sections']))} | "
                     f"{entry['compute_to_lab_end_s'] / 60:.1f} min | {entry['reading_min']:.1f} min | "
                     f"{entry['reading_with_compute_min']:.1f} min | {entry['lab_exercises']} × {s['exercise_minutes']} min | {entry['student_min']:.1f} min | "
                     f"{entry['whole_notebook_s'] / 60:.1f} min |")
    lines += ["", f"The lab: **{report['lab_minutes']:.1f} min**, which {verdict_words(report)}."]
    return "\n".join(lines) + "\n"


def main(argv=None, say: Optional[Callable[[str], None]] = None) -> int:
    say = say or (lambda line: print(line, file=sys.stderr, flush=True))
    parser = argparse.ArgumentParser(prog="python -m specviz.bench.lab", description=__doc__.split("\n")[0])
    parser.add_argument("--cpu", choices=sorted(CPUS), default="native")
    parser.add_argument("--pair", default="qwen-coder")
    parser.add_argument("--out", type=Path, default=None, help="report path without suffix "
                        "(default docs/benchmarks/lab-<pair>-<cpu>)")
    args = parser.parse_args(argv)
    out = args.out or REPORTS / f"lab-{args.pair}-{args.cpu}"

    def run() -> int:
        if args.pair == "tiny" and args.out is None:
            raise SpecvizError("the tiny pair's timings mean nothing: give --out to time it anyway")
        report = measure(args.pair, args.cpu, out, say)
        say(f"the lab: {report['lab_minutes']:.1f} min, which {verdict_words(report)}; wrote {out}.md")
        return 0

    return run_command(run, f"interrupted; the notebooks timed so far are kept in {out}.partial.json and the same "
                       "command resumes there")


if __name__ == "__main__":
    sys.exit(main())
