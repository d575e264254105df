"""The app's presets, recorded once on the real pair and replayed from memory.

A class on one Space clicks presets all at once, and the engine computes one run at a time. So
each preset is run once on the real pair, the chosen method and the autoregressive run with the
same prompt and sampling (the race's two lanes), and shipped as gzip-compressed JSON Lines traces
(`specviz.analysis.trace` format, one event per line) in specviz/data/presets/, with a manifest that says
where and when: device, CPU, dtype, date, specviz version, and each lane's compute clock. One race
is an anecdote: after its recording each preset's race is run again `--repeats` times (events
dropped: the same seed writes the same text, only the clock differs), and the manifest keeps the
speedup of every run, the recorded one first. A label's claim ("wins", "loses", "break-even")
must hold over that whole range (`claim_problem`; tests/test_presets.py).

    python -m specviz.bench.recordings list
    python -m specviz.bench.recordings record [--pair qwen-coder] [--dtype bfloat16] [--repeats 5]
        # about 15 minutes on a CPU at 5 repeats; nothing else should run on the cores

The serving view's presets are batched runs (specviz.engine.batch): B users of the serving bank decoded
together, plain and speculative, at B = 1 .. 32, in specviz/data/serving/, with the measured
sweep of `python -m specviz.bench.batched` (speedup against batch, theory, crossover) beside them:
    python -m specviz.bench.recordings record-serving --sweep docs/benchmarks/batched-qwen-coder-fp32.json
    python -m specviz.bench.recordings record-serving --sweep <report.json> --traces <dir>   # the bench's own runs
      (python -m specviz.bench.batched --traces <dir> keeps each lane's kept run)

No torch at import (the app imports this module); only `record` loads models.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Optional

import specviz
from specviz import __version__, files
from specviz.analysis.metrics import timing_note
from specviz.analysis.trace import dumps
from specviz.bench import provenance
from specviz.config import RunConfig
from specviz.errors import run_command
from specviz.events import check_trace, from_dict
from specviz.prompts import SERVING_BANK
from specviz.render.race import Lane, race

DATA = Path(__file__).resolve().parents[1] / "data" / "presets"
SERVING = Path(__file__).resolve().parents[1] / "data" / "serving"
MANIFEST = "manifest.json"
RECORD_TOPK = 10  # the top-k slices the app records per position: the inspector's bars
LANES = ("run", "ar")  # the preset's method, and autoregressive decoding with the same sampling
REPEATS = 5  # the race run again after its recording, so each claim is held to a range, not one run
CLAIMS = ("wins", "loses", "break-even")


@dataclass(frozen=True)
class Preset:
    """One preset: what gr.Examples fills in the sidebar, plus the app's defaults for the rest."""

    label: str
    prompt: str
    method: str
    k: int
    temperature: float
    chat: bool
    acceptance: str = "exact"
    top_p: float = 1.0
    max_new_tokens: int = 64
    seed: int = 0
    ngram: int = 3
    tree: str = "3,2,1"
    claim: str = ""  # what the label claims of the race over its repeats: one of CLAIMS, or "" (none)

    def example(self) -> list:
        """The sidebar values gr.Examples fills: prompt, method, k, temperature, chat, acceptance."""
        return [self.prompt, self.method, self.k, self.temperature, self.chat, self.acceptance]

    def options(self) -> RunConfig:
        """The run, exactly as the app builds it from these sidebar values."""
        return RunConfig(method=self.method, k=self.k, temperature=self.temperature, top_p=self.top_p,
                         max_new_tokens=self.max_new_tokens, seed=self.seed, chat=self.chat, record_topk=RECORD_TOPK,
                         acceptance="exact" if self.method in ("ar", "tree") else self.acceptance, auto_rule="cost",
                         confidence=0.4, ngram=self.ngram, tree=self.tree, tree_budget=16)

    def race_options(self) -> RunConfig:
        """The recorded method lane: the sidebar's run, held to the race's rule (race_options)."""
        return race_options(self.options())

    def ar_options(self) -> RunConfig:
        return ar_options(self.options())


def race_options(cfg: RunConfig) -> RunConfig:
    """A race times one workload twice, so both lanes emit max_new_tokens: sampled lanes write two
    different texts that would end at different places, so end of text stops neither
    (ignore_eos). Greedy lanes write the same text and stop together (the app's live race and
    the recorded presets both take it from here)."""
    return cfg if cfg.warp.greedy else cfg.replace(ignore_eos=True)


def ar_options(cfg: RunConfig) -> RunConfig:
    """The race's baseline: plain autoregressive decoding with the same prompt and sampling, held
    to the same rule as the method's lane (race_options)."""
    return race_options(cfg).replace(method="ar", k=1, acceptance="exact")


CODE = 'def quicksort(arr):\n    """Sort a list with quicksort."""\n'
# notebooks 2, 4 and 7's code prompt: less predictable than quicksort, so hot sampling costs it more
DURATION = 'def parse_duration(text):\n    """Parse strings like \'1h30m\' into seconds."""\n'
# the target's greedy answer runs past the preset's count: both lanes stop at the count, not at its end
REWRITE = ("Rename x to count in this code and return only the code:\n\nx = 0\nfor item in items:\n"
           "    if item.ok:\n        x += 1\n    elif item.retry:\n        x += 2\nprint(x)\nreturn x\n")
POEM = "Write a short poem about the sea, in three stanzas."  # long enough that 48 tokens rarely reach its end
# Each label says what its recordings measured (tests/test_presets.py holds every label to them:
# `claim` "wins" needs every run's speedup above 1, "loses" every run's below 1, and "break-even" a
# range that reaches both sides of 1; see claim_problem).
PRESETS = (
    Preset("Code, greedy: speculation wins", CODE, "spec", 4, 0.0, False, claim="wins"),
    # no claim: its repeats have fallen on both sides of 1 (the table gives their range)
    Preset("Chat, T = 0.7: a hard text to draft", POEM, "spec", 4, 0.7, True, max_new_tokens=48),
    Preset("Hot sampling, T = 1.5: speculation loses", DURATION, "spec", 4, 1.5, False, claim="loses"),
    Preset("Code rewrite, k = 6: easy to draft", REWRITE, "spec", 6, 0.0, True, max_new_tokens=56, claim="wins"),
    Preset("Code, draft tree 3,2,1", CODE, "tree", 4, 0.0, False, claim="wins"),
    Preset("Code rewrite, prompt lookup: no draft model", REWRITE, "pld", 6, 0.0, True, max_new_tokens=56,
           claim="wins"),
    Preset("Chat, T = 0.7, typical acceptance: LOSSY", POEM, "spec", 4, 0.7, True, "typical", max_new_tokens=48),
)
LABELS = [preset.label for preset in PRESETS]


# ---------------------------------------------------------------------------------------------
# replay


@dataclass(frozen=True)
class Recording:
    """A preset's two recorded runs (event dicts) and each lane's compute clock, in seconds."""

    preset: Preset
    run: list
    ar: list
    run_busy: float
    ar_busy: float
    where: dict  # pair, device, device_name, dtype, date, specviz version, ...
    code: Optional[str] = None  # provenance.code_version of the code that decided the method's lane
    speedups: Optional[tuple] = None  # the race's speedup in every run, the recorded one first

    @property
    def earlier_code(self) -> str:
        """A sentence when the method's lane was decided by other code than specviz's now, else ""."""
        return earlier_code(self.code, self.preset.method, self.preset.k)

    @property
    def note(self) -> str:
        """Where and when, e.g. 'recorded on AMD EPYC (cpu, 1 thread), bfloat16, 2026-11-23': the
        thread count too, as a CPU's speed depends on it."""
        return where_note(self.where)


def where_note(where: dict) -> str:
    """A recording's machine in words, from its manifest's "recorded" (or a Recording's `where`)."""
    threads = where.get("threads")
    device = where["device"] + (f", {threads} thread{'s' * (threads != 1)}" if threads else "")
    return f"recorded on {where['device_name']} ({device}), {where['dtype']}, {where['date']}"


_CACHE: dict = {}
_CACHE_LOCK = threading.Lock()


def recording(label: str, folder: Path = DATA) -> Recording:
    """The recorded runs of the preset `label`, decoded once per process (KeyError: no such preset)."""
    with _CACHE_LOCK:
        key = (label, str(folder))
        if key not in _CACHE:
            _CACHE[key] = _read(label, folder)
        return _CACHE[key]


def manifest(folder: Path = DATA) -> dict:
    return json.loads((Path(folder) / MANIFEST).read_text(encoding="utf-8"))


def _read(label: str, folder: Path) -> Recording:
    preset = PRESETS[LABELS.index(label)] if label in LABELS else None
    info = manifest(folder)
    entry = next((e for e in info["presets"] if e["label"] == label), None)
    if preset is None or entry is None:
        raise KeyError(label)
    if entry["settings"] != asdict(preset):  # a changed preset must be re-recorded, not mislabelled
        raise ValueError(f"the recording of {label!r} has other settings: run `python -m specviz.bench.recordings record`")
    lanes = {lane: read_trace(Path(folder) / entry[lane]["file"]) for lane in LANES}
    speedups = tuple(entry["speedups"]) if "speedups" in entry else None  # None: recorded before repeats
    return Recording(preset, lanes["run"], lanes["ar"], entry["run"]["busy"], entry["ar"]["busy"], info["recorded"],
                     entry.get("code"), speedups)


def verdict(speedups) -> str:
    """What a race's speedups over its runs say: "wins" when every run is above 1, "loses" when
    every run is below 1, "break-even" when the range reaches 1 (or runs land on both sides)."""
    if min(speedups) > 1:
        return "wins"
    return "loses" if max(speedups) < 1 else "break-even"


def claim_problem(preset: Preset, speedups) -> str:
    """One sentence when the preset's label or claim says other than its runs' range, else ""."""
    said = [word for word in CLAIMS if word in preset.label]
    if said and said != [preset.claim]:
        return f"{preset.label!r} says {' and '.join(said)} but its claim is {preset.claim!r}"
    if preset.claim == "":
        return ""
    found = verdict(speedups)
    if found == preset.claim:
        return ""
    span = f"{min(speedups):.2f}–{max(speedups):.2f}x over {len(speedups)} runs"
    return (f"{preset.label!r} claims {preset.claim!r} but its runs ({span}) say {found!r}: change its label and "
            f"claim in specviz.bench.recordings.PRESETS to {found!r}")


def earlier_code(code: Optional[str], method: str, k, batched: bool = False, command: str = "record") -> str:
    """One sentence when `code` (a recording's provenance.code_version) is not the code that would
    decide the same run now, else ""."""
    now = provenance.code_version(method, k, batched)
    if code == now:
        return ""
    made = "before recordings carried their code's version" if code is None else f"by earlier code ({code})"
    return (f"Recorded {made}: specviz's {method} now runs code {now}, so this replay may differ from what it does "
            f"today (python -m specviz.bench.recordings {command} records it again).")


def read_trace(path: Path) -> list:
    """A gzip-compressed trace's events as dicts, checked against the schema (check_trace)."""
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        events = [from_dict(json.loads(line)).to_dict() for line in fh if line.strip()]
    check_trace(events)
    return events


# ---------------------------------------------------------------------------------------------
# recording


def record(pair_name: str = "qwen-coder", dtype: Optional[str] = None, folder: Path = DATA,
           say: Callable[[str], None] = print, tries: int = 3, presets: tuple = PRESETS,
           repeats: int = REPEATS) -> dict:
    """Run every preset's two lanes on `pair_name` and write the traces and the manifest; a
    preset timed while other programs held the cores is recorded again, up to `tries` times;
    then its race is timed `repeats` more times (time_again)."""
    from specviz.runtime.machine import environment, loadavg  # torch: the app imports this module only to replay

    pair = specviz.load_pair(pair_name, dtype=dtype, progress=lambda f, message: say(f"  {message}"))
    say(f"loaded {pair!r}; warming up")
    warm_up(pair, {preset.method for preset in presets})
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    env = environment(pair, static_cache=False)
    where = {**env, "date": env["date_utc"][:10], "specviz": __version__, "record_topk": RECORD_TOPK}
    entries = []
    for number, preset in enumerate(presets, 1):
        entry = _record_reliably(pair, number, preset, folder, say, tries)
        entry["speedups"] += time_again(pair, preset, repeats)
        say(f"  speedup over {len(entry['speedups'])} runs: " + ", ".join(f"{x:.2f}" for x in entry["speedups"])
            + f" ({verdict(entry['speedups'])})")
        entries.append(entry)
    # other work sharing the cores slows both lanes: the load at the end goes beside the start's
    info = {"recorded": {**where, "loadavg_end": loadavg()}, "presets": entries}
    files.write_json(folder / MANIFEST, info)
    say(f"wrote {len(entries)} presets to {folder} ({_size(folder) / 1e3:.0f} kB)")
    return info


def _record_reliably(pair, number: int, preset: Preset, folder: Path, say, tries: int) -> dict:
    """The views show no speed verdict for lanes timed on a busy machine (metrics.judge_timing),
    so such a preset is recorded again a minute later; the last try is kept whatever it says."""
    for attempt in range(1, tries + 1):
        entry = _record_preset(pair, number, preset, folder, say)
        busy = [lane for lane in LANES if entry[lane]["timing_note"]]
        if not busy or attempt == tries:
            return entry
        say(f"  {' and '.join(busy)} timed on a busy machine ({entry[busy[0]]['timing_note']}); again in a minute "
            f"({attempt}/{tries})")
        time.sleep(60)


def _record_preset(pair, number: int, preset: Preset, folder: Path, say) -> dict:
    """Both lanes as the app's race runs them: one step at a time, always the lane whose own
    clock is behind, so other work on a shared machine slows both alike."""

    lanes = {"run": Lane("run", specviz.generate(pair, preset.prompt, preset.race_options())),
             "ar": Lane("ar", specviz.generate(pair, preset.prompt, preset.ar_options()))}
    try:
        for _ in race(lanes["ar"], lanes["run"]):
            _progress(number, lanes)
    finally:  # the progress line ends, so what follows (the summary, or an interrupt's message) has its own
        print(file=sys.stderr)
    entry = {"label": preset.label, "settings": asdict(preset), "code": provenance.code_version(preset.method, preset.k),
             "speedups": [_speedup(lanes["run"], lanes["ar"])]}
    for name, lane in lanes.items():
        file = f"{number:02d}-{name}.jsonl.gz"
        write_trace(lane.events, folder / file)
        entry[name] = {"file": file, "busy": round(lane.busy, 4), "tokens": len(lane.events[-1]["token_ids"]),
                       "timing_note": timing_note(lane.events)}
    say(f"[{number}/{len(PRESETS)}] {preset.label}: {preset.method} {entry['run']['tokens']} tokens in "
        f"{entry['run']['busy']:.1f} s, ar {entry['ar']['tokens']} in {entry['ar']['busy']:.1f} s")
    return entry


def time_again(pair, preset: Preset, repeats: int) -> list:
    """The preset's race run `repeats` more times as it was recorded, its events dropped: the
    speedup of each run. Which lane takes the first step alternates (the recording's AR did)."""
    speedups = []
    for turn in range(repeats):
        run = Lane("run", specviz.generate(pair, preset.prompt, preset.race_options()))
        ar = Lane("ar", specviz.generate(pair, preset.prompt, preset.ar_options()))
        for _ in race(*((run, ar) if turn % 2 == 0 else (ar, run))):
            pass
        speedups.append(_speedup(run, ar))
    return speedups


def _speedup(run: Lane, ar: Lane) -> float:
    """The method's tokens per second of its own compute over AR's, to 4 decimals."""
    tokens = [len(lane.events[-1]["token_ids"]) for lane in (run, ar)]
    return round((tokens[0] / run.busy) / (tokens[1] / ar.busy), 4)


def _progress(number: int, lanes: dict) -> None:
    """Steps done per lane, on one line of stderr rewritten in place (a preset takes minutes)."""
    done = ", ".join(f"{name} {sum(e['kind'] == 'step_finished' for e in lane.events)} steps"
                     for name, lane in lanes.items())
    print(f"\r[{number}/{len(PRESETS)}] {done}", end="", file=sys.stderr, flush=True)


def write_trace(events: list, path: Path) -> None:
    """Events (dicts) as a gzip-compressed JSONL trace, written whole."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    # mtime=0: re-recording the same events gives the same bytes (no spurious diffs in git)
    with files.new_file(path) as tmp, open(tmp, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
        gz.write("".join(dumps(e) + "\n" for e in events).encode("utf-8"))


def warm_up(pair, names) -> None:
    """One short run of each method named (and AR), off every clock: a fresh model's first passes
    are slow, and a trained drafter's heads load on their first use."""
    for method in sorted(set(names) | {"ar"}):
        for _ in specviz.generate(pair, "warm up", method=method, k=2, max_new_tokens=3, record_topk=0):
            pass


def _size(folder: Path) -> int:
    return sum(path.stat().st_size for path in Path(folder).iterdir())


# ---------------------------------------------------------------------------------------------
# the serving view's presets: batched runs at B = 1 .. 32 (a visitor needs no live batch of 32)

SERVING_BATCHES = (1, 2, 4, 8, 16, 32)
SERVING_LANES = {"ar": {"method": "ar"}, "spec": {"method": "spec", "k": 4}, "load": {"method": "spec", "k": "load"}}
SERVING_TOKENS = 32  # new tokens per user
SWEEP_KEYS = ("environment", "plan", "analysis", "cost")  # what the app keeps of the bench's report


def serving_code(lane: str) -> str:
    """provenance.code_version of the code that decides a serving lane now (the batched engine, the
    lane's drafter, and for k = "load" the load policy)."""
    options = SERVING_LANES[lane]
    return provenance.code_version(options["method"], options.get("k"), batched=True)


def serving_earlier_code(batch: int, lane: str, folder: Optional[Path] = None) -> str:
    """One sentence when the recorded `lane` at `batch` was decided by other code than now, else ""."""
    entry = serving_manifest(folder)["runs"][f"{batch}-{lane}"]
    options = SERVING_LANES[lane]
    return earlier_code(entry.get("code"), options["method"], options.get("k"), batched=True, command="record-serving")


def serving_manifest(folder: Optional[Path] = None) -> dict:
    """The serving recordings' manifest (folder: SERVING, read when called)."""
    return json.loads((Path(folder or SERVING) / MANIFEST).read_text(encoding="utf-8"))


def serving_recording(batch: int, lane: str, folder: Optional[Path] = None) -> list:
    """The recorded events (dicts) of `lane` ("ar", "spec" or "load") at `batch` users, decoded
    once per process (KeyError: not recorded)."""
    with _CACHE_LOCK:
        folder = Path(folder or SERVING)
        key = ("serving", batch, lane, str(folder))
        if key not in _CACHE:
            entry = serving_manifest(folder)["runs"][f"{batch}-{lane}"]
            _CACHE[key] = read_trace(folder / entry["file"])
        return _CACHE[key]


def serving_from_bench(report_path: Path, traces: Path, folder: Path = SERVING,
                       say: Callable[[str], None] = print) -> dict:
    """The serving presets from a `python -m specviz.bench.batched --traces DIR` run: the lanes
    it kept (the fastest of its repeats) are the recorded runs, so the app's recorded points and
    the shipped sweep are the same measurement."""
    report = json.loads(Path(report_path).read_text(encoding="utf-8"))
    env, plan = report["environment"], report["plan"]
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    runs = {}
    for b in plan["batches"]:
        for lane in SERVING_LANES:
            source = Path(traces) / f"B{b:02d}-{lane}.jsonl.gz"
            events = read_trace(source)  # checked against the schema on the way
            if events[0]["kind"] != "batch_started" or events[0]["rows"] != b:
                raise ValueError(f"{source} is not a batched run of {b} rows")
            file = f"B{b:02d}-{lane}.jsonl.gz"
            write_trace(events, folder / file)
            runs[f"{b}-{lane}"] = {"file": file, "batch": b, "lane": lane, "options": SERVING_LANES[lane],
                                   "tokens_per_s": events[-1]["metrics"]["tokens_per_s"],
                                   "code": (report.get("code") or {}).get(lane)}  # the code that ran the bench's lane
    info = {"recorded": {**env, "date": env["date_utc"][:10], "specviz": __version__},
            "tokens": plan["tokens"], "batches": list(plan["batches"]), "lanes": SERVING_LANES, "runs": runs,
            "sweep": {**{key: report.get(key) for key in SWEEP_KEYS}, "source": Path(report_path).name}}
    files.write_json(folder / MANIFEST, info)
    say(f"wrote {len(runs)} batched runs from {report_path} to {folder} ({_size(folder) / 1e3:.0f} kB)")
    return info


def record_serving(pair_name: str = "qwen-coder", dtype: Optional[str] = None, folder: Path = SERVING,
                   sweep: Optional[Path] = None, say: Callable[[str], None] = print,
                   batches: tuple = SERVING_BATCHES, tokens: int = SERVING_TOKENS) -> dict:
    """Each lane at each batch size on the first B prompts of the serving bank, greedy, one after
    another (nothing else should run on the cores), with an ETA; the traces and a manifest that
    keeps the bench's sweep (`sweep`, a bench.batched report) for the app's chart."""
    from specviz.engine.batch import generate_batch  # torch: the app imports this module only to replay
    from specviz.runtime.machine import environment, loadavg

    pair = specviz.load_pair(pair_name, dtype=dtype, progress=lambda f, message: say(f"  {message}"))
    say(f"loaded {pair!r}; warming up")
    for lane in SERVING_LANES.values():  # off the clock: a fresh model's first passes are slow, and the
        for _ in generate_batch(pair, SERVING_BANK[:2], max_new_tokens=3, record_topk=0, **lane):  # policy calibrates
            pass
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    env = environment(pair, static_cache=False)
    runs, work = {}, [(b, lane) for b in batches for lane in SERVING_LANES]
    started, weight_done, weight_all = time.perf_counter(), 0, sum(b for b, _ in work)
    for b, lane in work:
        events = [e.to_dict() for e in generate_batch(pair, SERVING_BANK[:b], max_new_tokens=tokens, record_topk=0,
                                                      **SERVING_LANES[lane])]
        file = f"B{b:02d}-{lane}.jsonl.gz"
        write_trace(events, folder / file)
        runs[f"{b}-{lane}"] = {"file": file, "batch": b, "lane": lane, "options": SERVING_LANES[lane],
                               "tokens_per_s": events[-1]["metrics"]["tokens_per_s"], "code": serving_code(lane)}
        weight_done += b
        spent = time.perf_counter() - started
        say(f"B={b:>2} {lane:5s} {events[-1]['metrics']['tokens_per_s']:.2f} tok/s  "
            f"[ETA {spent / weight_done * (weight_all - weight_done) / 60:.1f} min]")
    info = {"recorded": {**env, "date": env["date_utc"][:10], "specviz": __version__, "loadavg_end": loadavg()},
            "tokens": tokens, "batches": list(batches), "lanes": SERVING_LANES, "runs": runs}
    if sweep is not None:
        report = json.loads(Path(sweep).read_text(encoding="utf-8"))
        info["sweep"] = {key: report.get(key) for key in SWEEP_KEYS}
        info["sweep"]["source"] = Path(sweep).name
    files.write_json(folder / MANIFEST, info)
    say(f"wrote {len(runs)} batched runs to {folder} ({_size(folder) / 1e3:.0f} kB)")
    return info


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specviz.bench.recordings", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="the presets and where their recordings come from")
    rec = sub.add_parser("record", help="record every preset on a real pair (minutes)")
    rec.add_argument("--pair", default="qwen-coder")
    rec.add_argument("--dtype", default=None, help="default: what specviz.runtime.cpu measures best on this machine")
    rec.add_argument("--out", type=Path, default=DATA)
    rec.add_argument("--tries", type=int, default=3, help="recordings of a preset timed on a busy machine")
    rec.add_argument("--repeats", type=int, default=REPEATS,
                     help=f"times each preset's race is run again after its recording (default {REPEATS})")
    serve = sub.add_parser("record-serving", help="record the serving view's batched runs, B = 1 .. 32 (minutes)")
    serve.add_argument("--pair", default="qwen-coder")
    serve.add_argument("--dtype", default=None)
    serve.add_argument("--out", type=Path, default=SERVING)
    serve.add_argument("--sweep", type=Path, default=None, help="a python -m specviz.bench.batched report to ship")
    serve.add_argument("--tokens", type=int, default=SERVING_TOKENS)
    serve.add_argument("--traces", type=Path, default=None,
                       help="take the runs from a bench.batched --traces folder (with --sweep, its report) instead "
                            "of running them")
    args = parser.parse_args(argv)
    if args.command == "list":
        for label in LABELS:
            print(f"{label}: {recording(label).note}")
        return 0
    # the traces are written one by one and the manifest last: a cut-short recording can leave a mix
    return run_command(lambda: _record(args, parser), f"interrupted; any trace written in {args.out} is this run's, "
                       "its manifest (written last) is not: record again, or restore the folder with "
                       f"git checkout -- {args.out}")


def _record(args, parser) -> int:
    if args.command == "record-serving":
        say = lambda line: print(line, flush=True)  # noqa: E731
        if args.traces:
            if args.sweep is None:
                parser.error("--traces needs --sweep, the bench report that made them")
            serving_from_bench(args.sweep, args.traces, args.out, say)
        else:
            record_serving(args.pair, args.dtype, args.out, args.sweep, say=say, tokens=args.tokens)
        return 0
    if args.repeats < 1:
        parser.error("--repeats must be at least 1: a claim is held to the range of several runs")
    record(args.pair, args.dtype, args.out, say=lambda line: print(line, flush=True), tries=args.tries,
           repeats=args.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
