"""The gallery: every registered method on the same three prompts, recorded on the real pair in one sitting.

The static site (`python -m specviz site`) lets a student compare any two methods on the same
text. So each method of the registry (`specviz.methods`) runs on a code completion, a chat answer
and an edit, greedy, and (where its rule is lossless under sampling) at T = 0.7 too, each raced
against autoregressive decoding with the same prompt and sampling, the lanes stepped as the app's
race steps them (`specviz.render.race.race`: always the lane whose own clock is behind, so other
work on the cores slows both alike). Besides the registry's methods: k = "auto" (the cost rule
chooses k each step), typical acceptance (LOSSY, sampled only), suffix decoding a second time in
the same session (the repeated work it is built for), and k = "load" in a batch of the three
prompts decoded together (the serving view).

Every entry keeps its two traces (gzip JSON Lines, `specviz.analysis.trace` format; the method's
lane with the inspector's top-10 slices, AR's without) in specviz/data/gallery/, and the manifest
says where and when, the specviz version and, per entry, the `provenance.code_version` of the
code that decided it and each lane's own clock after every step (`clock`: [events so far,
seconds], what the site's race replays). The manifest is written after every entry, so a recording cut short goes on
where it stopped (same machine and settings; `--fresh` starts again):

    python -m specviz.bench.gallery list
    python -m specviz.bench.gallery record [--pair qwen-coder] [--fresh]   # half an hour to over an hour on 2 cores;
        # nothing else should run on the cores

One race per entry: its speedup is that race's, an anecdote beside the held-out benchmarks
(docs/benchmarks/); tokens per target pass and acceptance are properties of the text and the
seed, not of the clock. No torch at import (the site reads this module); only `record` loads models.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Callable, Optional

import specviz
from specviz import __version__, files, methods
from specviz.analysis.metrics import timing_note
from specviz.bench import provenance
from specviz.bench.recordings import CODE, RECORD_TOPK, REWRITE, read_trace, warm_up, write_trace
from specviz.config import RunConfig
from specviz.errors import InputError, run_command
from specviz.render.race import Lane, race

DATA = Path(__file__).resolve().parents[1] / "data" / "gallery"
MANIFEST = "manifest.json"
TOKENS = 48  # new tokens per run: long enough for several steps, short enough to step through in class
SAMPLED = 0.7
CHAT = "Explain what a Python list comprehension is, with one short example."
# name -> (what a student reads, the prompt, chat template): the same three texts for every method
PROMPTS = {
    "code": ("code completion", CODE, False),
    "chat": ("chat answer", CHAT, True),
    "edit": ("code edit", REWRITE, True),
}
BASE = dict(k=4, seed=0, record_topk=RECORD_TOPK, tree="3,2,1", tree_budget=16, auto_rule="cost",
            confidence=0.4, ngram=3)  # the app's defaults (specviz.bench.recordings.Preset.options)


@dataclass(frozen=True)
class Variant:
    """One way of decoding: a method with its options, shown as one row of the gallery."""

    name: str  # the gallery's key: a method's name, or e.g. "spec-auto"
    label: str
    options: dict  # RunConfig fields over BASE
    temperatures: tuple = (0.0, SAMPLED)
    again: bool = False  # recorded the second time in its suffix session (the first run unrecorded)
    batch: bool = False  # the three prompts decoded together (the serving view)
    note: str = ""

    @property
    def method(self) -> str:
        return self.options["method"]

    @property
    def lossy(self) -> bool:
        return self.options.get("acceptance", "exact") != "exact"


def variants() -> tuple:
    """The gallery's rows: every method in the registry (but AR, every row's baseline), then the
    variants a method's defaults do not show."""
    rows = [Variant(name, name, {"method": name}, (0.0,) if name == "lookahead" else (0.0, SAMPLED),
                    note=methods.help_of(name)) for name in methods.names() if name != "ar"]
    rows += [
        Variant("spec-auto", "spec, k = auto", {"method": "spec", "k": "auto"},
                note="the draft model, with k chosen each step by the cost rule (specviz.engine.adaptive)"),
        Variant("typical", "spec, typical acceptance: LOSSY", {"method": "spec", "acceptance": "typical"}, (SAMPLED,),
                note="Medusa's typical acceptance: faster, but the output does not follow the target's distribution"),
        Variant("suffix-again", "suffix, the same request again", {"method": "suffix"}, again=True,
                note="suffix decoding when the session has answered this prompt once before: repeated work"),
        Variant("suffix-tree-again", "suffix-tree, the same request again", {"method": "suffix-tree"}, again=True,
                note="suffix decoding's tree when the session has answered this prompt once before"),
        Variant("spec-load", "spec, k = load: the three prompts in one batch", {"method": "spec", "k": "load"},
                batch=True, note="a batch of three users: k chosen each step from the batch's load (specviz.engine.load)"),
    ]
    return tuple(rows)


@dataclass(frozen=True)
class Entry:
    """One recording: a variant on one prompt (a batch: on all three) at one temperature."""

    variant: Variant
    prompt: str  # a key of PROMPTS, or "all" for a batch
    temperature: float
    tokens: int = TOKENS
    extra: dict = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.variant.name}.{self.prompt}.t{self.temperature:g}"

    def config(self) -> RunConfig:
        """The method's lane as raced: sampled lanes write max_new_tokens (race_options)."""
        chat = PROMPTS[self.prompt][2] if self.prompt in PROMPTS else False
        cfg = RunConfig(**{**BASE, **self.variant.options, "temperature": self.temperature, "chat": chat,
                           "max_new_tokens": self.tokens, "suffix_session": f"gallery:{self.key}"})
        return cfg if cfg.warp.greedy else cfg.replace(ignore_eos=True)

    def ar_config(self) -> RunConfig:
        return self.config().replace(method="ar", k=1, acceptance="exact", record_topk=0, suffix_session="")


def entries(tokens: int = TOKENS) -> tuple:
    rows = []
    for variant in variants():
        for temperature in variant.temperatures:
            for prompt in (("all",) if variant.batch else PROMPTS):
                rows.append(Entry(variant, prompt, temperature, tokens))
    return tuple(rows)


# ---------------------------------------------------------------------------------------------
# reading


def manifest(folder: Path = DATA) -> dict:
    return json.loads((Path(folder) / MANIFEST).read_text(encoding="utf-8"))


def lanes(key: str, folder: Path = DATA) -> tuple:
    """(the method's events, AR's events) of the recorded entry `key` (KeyError: none such)."""
    entry = manifest(folder)["entries"][key]
    return tuple(read_trace(Path(folder) / entry[lane]["file"]) for lane in ("run", "ar"))


def missing(folder: Path = DATA, tokens: int = TOKENS) -> list:
    """The entries of `entries()` that the folder's manifest lacks (a new method: record again)."""
    have = manifest(folder)["entries"] if (Path(folder) / MANIFEST).exists() else {}
    return [e.key for e in entries(tokens) if e.key not in have]


# ---------------------------------------------------------------------------------------------
# recording


def record(pair_name: str = "qwen-coder", dtype: Optional[str] = None, folder: Path = DATA,
           tokens: int = TOKENS, fresh: bool = False, say: Callable[[str], None] = print,
           only: Optional[tuple] = None, again: bool = False) -> dict:
    """Record every entry not in the folder's manifest yet (all of them with `fresh`), writing the
    manifest after each, with progress and an ETA. `only`: the variants' names to record (default: all);
    `again`: record those again even where recorded (without `only`: the entries timed on a busy machine)."""
    from specviz.runtime.machine import environment, loadavg  # torch: the site reads this module only

    folder = Path(folder)
    pair = specviz.load_pair(pair_name, dtype=dtype, progress=lambda f, message: say(f"  {message}"))
    env = environment(pair, static_cache=False)
    where = {**env, "date": env["date_utc"][:10], "specviz": __version__, "pair": pair_name, "tokens": tokens}
    info = _resume(folder, where, fresh)
    work = [e for e in entries(tokens) if (not only or e.variant.name in only)
            and (e.key not in info["entries"] or again and (only or _busy(info["entries"][e.key])))]
    say(f"loaded {pair!r}; {len(work)} of {len(entries(tokens))} entries to record; warming up")
    warm_up(pair, {e.variant.method for e in work})
    started = time.perf_counter()
    for done, entry in enumerate(work, 1):
        info["entries"][entry.key] = _record_entry(pair, entry, folder)
        info["recorded"]["loadavg_end"] = loadavg()
        files.write_json(folder / MANIFEST, info)
        spent = time.perf_counter() - started
        say(f"[{done}/{len(work)}] {_summary(info['entries'][entry.key])}  "
            f"[ETA {spent / done * (len(work) - done) / 60:.1f} min]")
    return info


def _resume(folder: Path, where: dict, fresh: bool) -> dict:
    """The manifest to add to: the folder's, when it was recorded on this machine with these
    settings, else a new one (a gallery is one sitting: mixing machines would compare clocks)."""
    path = folder / MANIFEST
    if path.exists() and not fresh:
        info = json.loads(path.read_text(encoding="utf-8"))
        same = {key: info["recorded"].get(key) == where.get(key)
                for key in ("pair", "tokens", "dtype", "device_name", "threads", "torch", "specviz")}
        if all(same.values()):
            return info
        differs = ", ".join(key for key, ok in same.items() if not ok)
        raise InputError(f"{path} was recorded with another {differs}: add --fresh to record the gallery again "
                         "from the start (a gallery is one sitting on one machine).")
    if folder.exists():
        for old in folder.glob("*.jsonl.gz"):
            old.unlink()
    return {"recorded": where, "prompts": {k: {"label": v[0], "prompt": v[1], "chat": v[2]} for k, v in PROMPTS.items()},
            "variants": [], "entries": {}}


def _record_entry(pair, entry: Entry, folder: Path) -> dict:
    run, ar = (_record_batch if entry.variant.batch else _record_race)(pair, entry)
    out = {"variant": entry.variant.name, "prompt": entry.prompt, "temperature": entry.temperature,
           "settings": {key: value for key, value in entry.config().to_dict().items() if key != "suffix_session"},
           "code": provenance.code_version(entry.variant.method, entry.config().k, entry.variant.batch),
           "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime())}
    for name, lane in (("run", run), ("ar", ar)):
        file = f"{entry.key}.{name}.jsonl.gz"
        write_trace(lane.events, folder / file)
        out[name] = {"file": file, "busy": round(lane.busy, 4), "timing_note": timing_note(lane.events),
                     "tokens": _tokens(lane.events), "clock": lane.clock}
    out["speedup"] = round((out["run"]["tokens"] / run.busy) / (out["ar"]["tokens"] / ar.busy), 4)
    return out


def _record_race(pair, entry: Entry) -> tuple:
    prompt = PROMPTS[entry.prompt][1]
    if entry.variant.again:  # the session's first time, off the record: the recorded run is its second
        for _ in specviz.generate(pair, prompt, entry.config()):
            pass
    run = Lane("run", specviz.generate(pair, prompt, entry.config()))
    ar = Lane("ar", specviz.generate(pair, prompt, entry.ar_config()))
    run.clock, ar.clock = [], []
    for lane, _ in race(ar, run):  # the lane's own clock after each step: the site replays the race at this pace
        lane.clock.append([len(lane.events), round(lane.busy, 4)])
    return run, ar


def _record_batch(pair, entry: Entry) -> tuple:
    """The three prompts as one batch (each tokenized with its own chat template), AR then the
    method; a batch's lanes run one after the other, as the serving recordings do."""
    ids = [pair.encode(prompt, chat=chat) for _, prompt, chat in PROMPTS.values()]
    return _timed(pair, ids, entry.config()), _timed(pair, ids, entry.ar_config())


def _timed(pair, prompt, cfg: RunConfig) -> SimpleNamespace:
    """A whole run's events and the seconds it took (a batch's rows each end with their own
    run_finished, so a race's Lane, which stops at the first, does not time it)."""
    started, events, clock = time.perf_counter(), [], []
    for event in specviz.generate(pair, prompt, cfg):
        events.append(event.to_dict())
        if events[-1]["kind"] == "batch_step":  # the clock after each shared pass, as a race's lanes keep theirs
            clock.append([len(events), round(time.perf_counter() - started, 4)])
    return SimpleNamespace(events=events, busy=time.perf_counter() - started, clock=clock)


def _tokens(events: list) -> int:
    """New tokens of a run (a batch: of all its rows)."""
    if events[-1]["kind"] == "batch_finished":
        return events[-1]["metrics"]["tokens"]
    return len(events[-1]["token_ids"])


def _busy(entry: dict) -> bool:
    return bool(entry["run"]["timing_note"] or entry["ar"]["timing_note"])


def _summary(entry: dict) -> str:
    slow = [lane for lane in ("run", "ar") if entry[lane]["timing_note"]]
    return (f"{entry['variant']} on {entry['prompt']} at T = {entry['temperature']:g}: {entry['run']['tokens']} tokens "
            f"in {entry['run']['busy']:.1f} s, ar {entry['ar']['busy']:.1f} s, speedup {entry['speedup']:.2f}"
            + (f" (timed on a busy machine: {', '.join(slow)})" if slow else ""))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specviz.bench.gallery", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="the gallery's entries and which are recorded")
    rec = sub.add_parser("record", help="record the entries not recorded yet, on a real pair (about half an hour)")
    rec.add_argument("--pair", default="qwen-coder")
    rec.add_argument("--dtype", default=None, help="default: what specviz.runtime.cpu measures best on this machine")
    rec.add_argument("--out", type=Path, default=DATA)
    rec.add_argument("--tokens", type=int, default=TOKENS)
    rec.add_argument("--fresh", action="store_true", help="record every entry again (a new sitting)")
    rec.add_argument("--only", default="", help="comma-separated variants to record (default: every one not recorded)")
    rec.add_argument("--again", action="store_true", help="record again what is recorded already: the --only variants, "
                     "or without --only the entries timed while other programs held the cores")
    args = parser.parse_args(argv)
    if args.command == "list":
        return _list(args)
    say = lambda line: print(line, flush=True)  # noqa: E731
    return run_command(lambda: record(args.pair, args.dtype, args.out, args.tokens, args.fresh, say,
                                            _only(args.only, parser), args.again) and 0,
                       f"interrupted; the entries in {args.out}/{MANIFEST} are kept: run the same command to go on")


def _only(text: str, parser) -> tuple:
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = sorted(set(names) - {v.name for v in variants()})
    if unknown:
        parser.error(f"no gallery variant {', '.join(unknown)}; they are: {', '.join(v.name for v in variants())}")
    return names


def _list(args) -> int:
    have = manifest().get("entries", {}) if (DATA / MANIFEST).exists() else {}
    for entry in entries():
        got = have.get(entry.key)
        print(f"{entry.key:40s} " + (_summary(got) if got else "not recorded"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
