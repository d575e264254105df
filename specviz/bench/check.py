"""Is this machine ready for the class's lab? `python -m specviz check`, run by a student the day before.

It does what the lab will do, once, and measures it:

  pair     loads the default pair as a notebook does (converting it on first use), and says the
           dtype it chose and why: bfloat16 where the CPU multiplies it natively, float32 where it
           does not, int8 weights when float ones do not fit (the int8 target is another model,
           whose numbers are not the class's: a red flag)
  memory   total and available RAM, this process's peak (the load and the race) and what it holds
           after, and the headroom left beside a browser and Jupyter (BESIDE_BYTES)
  race     speculative decoding (k = 4) against autoregressive on the suite's greedy code prompt,
           both timed in one rotation (specviz.bench.heldout.rotation); the speed verdict is
           withheld when the decoding thread shared its cores (specviz.analysis.metrics.judge_timing)
  lab      the lab reports' minutes (specviz.bench.lab) with their compute scaled by this machine's
           autoregressive time per token over the report machine's, plus reading and exercises
  needs    Python, Jupyter, the widget libraries, plotly, and free disk in the cache

`run` returns one JSON-safe dict; specviz.render.check draws it on one screen. `problems` lists
what makes the machine not ready, each with what to do.
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import shutil
import sys
import time
from pathlib import Path
from typing import Callable, Optional

from specviz import files
from specviz.analysis.metrics import fold, timing_check
from specviz.bench.heldout import rotation
from specviz.bench.lab import replay
from specviz.errors import PairError, SpecvizError
from specviz.prompts import PROMPTS
from specviz.runtime.machine import cpu_count

GiB = 2**30
REPORTS = Path(__file__).resolve().parents[2] / "docs" / "benchmarks"
LAB_REPORTS = ("lab-qwen-coder-native", "lab-qwen-coder-avx2")  # python -m specviz.bench.lab [--cpu avx2]
# each lab report's machine also ran the suite; its AR figure stands in while the lab report has none
SUITE_OF = {"lab-qwen-coder-native": "suite-qwen-coder-full", "lab-qwen-coder-avx2": "suite-qwen-coder-full-avx2"}
LAB_MINUTES = 35
EXERCISE_MIN = 4.0  # minutes a required exercise takes, where a lab report states none (one per notebook)
# a browser with the notebook open and the Jupyter server beside the kernel: ~1.5-2 GiB for the browser
# (tests/test_low_memory.py), a few hundred MiB for the server
BESIDE_BYTES = 2 * GiB
DISK_MIN_BYTES = GiB // 2  # the lab writes traces and figures into the cache, not weights
TOKENS, K, REPEATS = 32, 4, 2  # the race: as the suite's, AR and speculative twice each
WARMUP = 2  # tokens of an AR run off the clock before the race
PYTHON_MIN = (3, 11)  # the pinned requirements need 3.11
# Colab is its own Jupyter: its runtime has google.colab, and a `!python -m specviz check` cell sees it
NEEDS = (("Jupyter", ("jupyterlab", "notebook", "google.colab")), ("ipywidgets", ("ipywidgets",)), ("anywidget", ("anywidget",)),
         ("plotly", ("plotly",)))
OPTIONAL = (("kaleido", ("kaleido",)),)  # static images of figures: the lab runs without it

Say = Callable[[str], None]


def run(pair_name: Optional[str] = None, say: Optional[Say] = None, reports: Optional[Path] = None) -> dict:
    """Every check, in the order a student meets them: the one dict the renderer and --json show.
    `reports`: the folder of the lab reports (default REPORTS, docs/benchmarks beside the package)."""
    say = say or (lambda line: print(line, file=sys.stderr, flush=True))
    check_pair_name(pair_name)
    before = memory_now()
    pair, loaded = load(pair_name, say)
    result = {"pair": loaded, "race": race(pair, say)}
    # after the race: weights read from a memory-mapped file count once a forward has touched them
    result["memory"] = memory_after(before, *rss())
    result["lab"] = lab_prediction(result["race"], loaded["dtype"], reports or REPORTS)
    result["needs"] = needs()
    result["problems"] = problems(result)
    result["ready"] = not result["problems"]
    return result


# ---------------------------------------------------------------------------------------------
# the pair and the memory it takes

def check_pair_name(pair_name: Optional[str]) -> None:
    """A name that is no preset and no 'target=...,draft=...' spec is refused before anything loads."""
    from specviz.runtime.models import PRESETS, default_pair_name

    name = pair_name or default_pair_name()
    if name not in PRESETS and "=" not in name:
        raise PairError(f"Unknown pair {name!r}: choose one of {', '.join(PRESETS)}, "
                        "or give 'target=<hub id or path>,draft=<hub id or path>'.")


def load(pair_name: Optional[str], say: Say) -> tuple:
    """(pair, facts): the pair loaded as a notebook loads it, its dtype and why, and the clocks."""
    import torch

    from specviz.runtime.models import load_pair

    started, converted = time.perf_counter(), []

    def progress(_fraction: float, message: str) -> None:
        converted.append("de-quantising" in message)
        say(f"[{time.perf_counter() - started:4.0f} s] {message}")

    say("loading the pair (the first time it converts the weights: a few minutes, once) ...")
    pair = load_pair(pair_name, progress=progress)
    say(f"[{time.perf_counter() - started:4.0f} s] loaded")
    return pair, {"name": pair.name, "device": str(pair.device), "dtype": str(pair.dtype).replace("torch.", ""),
                  "int8": pair.target_quant == "int8", "why": dtype_reason(pair), "threads": torch.get_num_threads(),
                  "cores": cpu_count(), "load_s": round(time.perf_counter() - started, 1),
                  "converted_now": any(converted), "last_load": pair.last_load}


def dtype_reason(pair) -> str:
    """Why the pair holds the dtype it does, in one phrase."""
    if pair.target_quant == "int8":
        why = (pair.memory_choice or {}).get("reason", "asked for")
        return f"int8 weights ({why}): another target model, with other numbers than the class's"
    if pair.cpu_choice:
        return pair.cpu_choice["note"]
    if pair.name == "tiny":
        return "the tiny pair's default (random weights: it checks the install, not this machine)"
    return "the default on this device"


def memory_now() -> dict:
    """Total and available RAM now, and this process's resident memory."""
    total = available = None
    try:
        with open("/proc/meminfo") as fh:
            info = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in fh}
        total, available = info.get("MemTotal"), info.get("MemAvailable")
    except (OSError, ValueError, IndexError):
        if hasattr(os, "sysconf") and "SC_PHYS_PAGES" in os.sysconf_names:
            total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return {"total_bytes": total, "available_bytes": available, "resident_bytes": rss()[1]}


def rss() -> tuple:
    """(peak, current) resident bytes of this process: VmHWM and VmRSS where /proc has them, else
    getrusage's peak (KiB on Linux, bytes on macOS) and no current figure; None where neither is."""
    try:
        with open("/proc/self/status") as fh:
            status = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in fh if line.startswith("Vm")}
        return status.get("VmHWM"), status.get("VmRSS")
    except (OSError, ValueError, IndexError):
        pass
    try:
        import resource
    except ImportError:  # Windows
        return None, None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak * (1 if platform.system() == "Darwin" else 1024), None


def memory_after(before: dict, peak: Optional[int], resident: Optional[int]) -> dict:
    """The headroom a notebook kernel would leave: what was available to this process before the
    load (its own memory then included, as a fresh kernel starts from nothing) less this process's
    peak with the pair loaded and run, and less the browser's and Jupyter server's share."""
    out = {**before, "peak_bytes": peak, "resident_after_bytes": resident, "beside_bytes": BESIDE_BYTES,
           "headroom_bytes": None}
    if before["available_bytes"] is not None and peak is not None:
        out["headroom_bytes"] = before["available_bytes"] + (before["resident_bytes"] or 0) - peak - BESIDE_BYTES
    return out


# ---------------------------------------------------------------------------------------------
# the race

def race(pair, say: Say) -> dict:
    """Speculative (k = K) against AR on the greedy code prompt, TOKENS tokens, REPEATS runs each,
    in one rotation; the speedup pools each lane's tokens over its seconds."""
    from specviz.engine.sequence import generate

    prompt = PROMPTS["code"]
    ids = pair.encode(prompt.text, chat=prompt.chat)
    t0 = time.perf_counter()
    list(generate(pair, ids, method="ar", max_new_tokens=WARMUP))  # first-call costs off the clock
    lanes = {"ar": [], "spec": []}
    order = list(rotation(["spec"], 0, REPEATS))
    guess = (time.perf_counter() - t0) / WARMUP * TOKENS * len(order)  # AR's pace for every run: an upper bound
    say(f"race: {len(order)} runs of {TOKENS} tokens; ETA {guess:.0f} s or less")
    started = time.perf_counter()
    for i, (_, name) in enumerate(order):
        t0 = time.perf_counter()
        events = list(generate(pair, ids, method=name, k=K, max_new_tokens=TOKENS, ignore_eos=True))
        lanes[name].append({"seconds": time.perf_counter() - t0, "events": events})
        left = (time.perf_counter() - started) / (i + 1) * (len(order) - i - 1)
        say(f"race {i + 1}/{len(order)}: {name} {TOKENS} tokens in {time.perf_counter() - t0:.1f} s; ETA {left:.0f} s")
    return race_summary(lanes)


def race_summary(lanes: dict) -> dict:
    """Tokens/s per lane (pooled), the speedup, the decoding thread's lowest CPU share, and the
    busy-machine note of the first run that had one (then there is no verdict on speed)."""
    def rate(runs):
        return sum(len(r["events"][-1].token_ids) for r in runs) / sum(r["seconds"] for r in runs)

    runs = [r for name in ("ar", "spec") for r in lanes[name]]
    checks = [timing_check(r["events"]) for r in runs]
    shares = [c.cpu_share for c in checks if c.cpu_share is not None]
    ar_rate, spec_rate = rate(lanes["ar"]), rate(lanes["spec"])
    texts = {name: {tuple(r["events"][-1].token_ids) for r in lanes[name]} for name in lanes}
    return {"tokens": TOKENS, "k": K, "repeats": REPEATS, "ar_tokens_per_s": ar_rate, "spec_tokens_per_s": spec_rate,
            "ar_s_per_token": 1 / ar_rate, "speedup": spec_rate / ar_rate,
            "tau": fold(lanes["spec"][0]["events"]).tau, "same_text": texts["ar"] == texts["spec"],
            "cpu_share": min(shares) if shares else None,
            "busy": next((c.note for c in checks if c.reliable is False), None)}


# ---------------------------------------------------------------------------------------------
# will the lab fit?

def lab_prediction(race_result: dict, dtype: str, folder: Path = REPORTS) -> dict:
    """The lab's minutes on this machine from the report measured in this dtype (else the other):
    its compute scaled by AR seconds per token here over there; {"skipped": why} without a report."""
    usable, why_not = [], []
    for name in LAB_REPORTS:
        try:
            usable.append((name, *lab_report(name, folder)))
        except SpecvizError as exc:
            why_not.append(str(exc))
    if not usable:
        return {"skipped": "; ".join(why_not)}
    name, rep, reference = next((u for u in usable if dtype in _loaded_as(u[1])), usable[0])
    scale = race_result["ar_s_per_token"] / reference["ar_s_per_token"]
    notebooks = [predict_notebook(entry, scale) for entry in rep["notebooks"].values()]
    minutes = sum(n["minutes"] for n in notebooks)
    slot = rep.get("slot_minutes", LAB_MINUTES)
    return {"report": name, "reference": reference, "scale": scale, "notebooks": notebooks,
            "compute_min": sum(n["compute_min"] for n in notebooks), "reading_min": sum(n["reading_min"] for n in notebooks),
            "exercise_min": sum(n["exercise_min"] for n in notebooks),
            "exercises_assumed": any(n["exercise_assumed"] for n in notebooks),
            "minutes": minutes, "slot_minutes": slot, "fits": minutes <= slot, "busy": race_result["busy"] is not None}


def lab_report(name: str, folder: Path) -> tuple:
    """(report, reference): a lab report and its machine's AR seconds per token: the report's own
    `ar_s_per_token` (in its environment), else its suite report's code-prompt AR run."""
    rep = _read(Path(folder) / f"{name}.json")
    if not isinstance(rep.get("notebooks"), dict) or not rep["notebooks"]:
        raise SpecvizError(f"{name}.json lists no notebooks")
    own = rep.get("environment", {}).get("ar_s_per_token")
    if own:
        return rep, {"ar_s_per_token": float(own), "source": f"{name}.json"}
    suite_name = SUITE_OF[name]
    suite = _read(Path(folder) / f"{suite_name}.json")
    env = suite.get("environment", {})
    if env.get("device_name") != rep.get("environment", {}).get("device_name") or \
            env.get("dtype", "?") not in _loaded_as(rep):
        raise SpecvizError(f"{name}.json has no ar_s_per_token and {suite_name}.json ran on another machine")
    ar = suite.get("results", {}).get("code@greedy", {}).get("ar", {})
    if not ar.get("tokens_per_s"):
        raise SpecvizError(f"{suite_name}.json has no AR run on the code prompt")
    return rep, {"ar_s_per_token": 1 / ar["tokens_per_s"], "source": f"{suite_name}.json"}


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise SpecvizError(f"{path.name} could not be read ({type(exc).__name__})") from None
    if not isinstance(data, dict):
        raise SpecvizError(f"{path.name} is not a report")
    return data


def _loaded_as(rep: dict) -> str:
    return " ".join(str(e.get("loaded_as", "")) for e in rep.get("notebooks", {}).values())


def predict_notebook(entry: dict, scale: float) -> dict:
    """One notebook's minutes here: its compute to the lab's end scaled, its reading as it is, and
    its exercise (the report's, else EXERCISE_MIN): the report's cell timeline replayed with the
    compute scaled (specviz.bench.lab.replay), or, for a report without one, combined as it combined them."""
    compute, reading = entry["compute_to_lab_end_s"] / 60, entry["reading_min"]
    exercise = entry.get("exercise_min")
    assumed = exercise is None
    exercise = EXERCISE_MIN if assumed else float(exercise)
    here = compute * scale
    if entry.get("lab_cells"):  # the report's timeline: replay the reader beside this machine's compute
        time_ = replay(entry["lab_cells"], entry.get("kernel_start_s", 0.0), scale)
    else:
        adds_up = combines_by_sum(entry, compute, reading, 0.0 if assumed else exercise)
        time_ = (here + reading) if adds_up else max(here, reading)
    return {"notebook": entry.get("notebook", "?"), "compute_min": here, "reading_min": reading,
            "exercise_min": exercise, "exercise_assumed": assumed, "minutes": time_ + exercise}


def combines_by_sum(entry: dict, compute: float, reading: float, exercise: float) -> bool:
    """Whether the report counts a notebook's compute and reading one after the other (a sum)
    rather than overlapped (the longer of the two, a student reading while Run All computes):
    whichever rule gives the report's own `student_min`; overlapped when neither or both do."""
    student = entry.get("student_min")
    if student is None:
        return False
    by_sum = abs(compute + reading + exercise - student) < 0.06
    by_max = abs(max(compute, reading) + exercise - student) < 0.06
    return by_sum and not by_max


# ---------------------------------------------------------------------------------------------
# what the lab needs besides the model

def needs() -> dict:
    """Python's version, the libraries the notebooks import (found, not imported: no start-up cost)
    and the free disk where the cache lives."""
    found = {label: any(map(importable, modules)) for label, modules in NEEDS}
    optional = {label: any(map(importable, modules)) for label, modules in OPTIONAL}
    cache = files.cache_dir()
    where = next((p for p in (cache, *cache.parents) if p.exists()), Path.cwd())
    return {"python": platform.python_version(), "python_ok": sys.version_info[:2] >= PYTHON_MIN,
            "libraries": found, "optional": optional, "cache": str(cache),
            "disk_free_bytes": shutil.disk_usage(where).free}


def importable(module: str) -> bool:
    """Whether `module` could be imported, without importing it (a dotted name whose parent
    package is missing is simply not importable)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


# ---------------------------------------------------------------------------------------------
# the verdict

def problems(result: dict) -> list:
    """What keeps this machine from the lab, each as a short reason and what to do."""
    pair, mem, lab, need = result["pair"], result["memory"], result["lab"], result["needs"]
    out = []
    if pair["int8"]:
        out.append("the pair fell back to int8 weights (another target model): close other programs "
                   "and run the check again, or follow the lab from the executed copies")
    headroom = mem["headroom_bytes"]
    if headroom is not None and headroom < 0:
        again = " (this run included the one-time conversion: run the check again)" if pair["converted_now"] else ""
        out.append(f"memory: {-headroom / GiB:.1f} GiB short for the pair beside a browser and Jupyter{again}; "
                   "close other programs")
    if "minutes" in lab and not lab["fits"]:
        out.append(_lab_problem(lab))
    missing = [label for label, ok in need["libraries"].items() if not ok]
    if missing:
        out.append(f"missing {', '.join(missing)}: pip install -r requirements.txt")
    if not need["python_ok"]:
        out.append(f"Python {need['python']} is older than {'.'.join(map(str, PYTHON_MIN))}")
    if need["disk_free_bytes"] < DISK_MIN_BYTES:
        out.append(f"only {need['disk_free_bytes'] / GiB:.1f} GiB free in the cache's disk: free some space")
    return out


def _lab_problem(lab: dict) -> str:
    """A lab over its slot; timed on busy cores the prediction is too long by an unknown amount,
    so the reason is then to measure again, not that the machine is too slow."""
    if lab["busy"]:
        return (f"the cores were busy during the race, so the lab's {lab['minutes']:.0f} min cannot be trusted: "
                "close other programs and run the check again")
    return f"the lab would take about {lab['minutes']:.0f} min, {lab['minutes'] - lab['slot_minutes']:.0f} over its {lab['slot_minutes']}"
