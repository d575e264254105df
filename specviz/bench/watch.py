"""`python -m specviz watch URL`: a serving engine's speculative counters, read live.

Serving engines export speculation as Prometheus counters; llama.cpp's server (`--metrics`) and
vLLM share the names, under their own prefixes (`llamacpp:`, `vllm:`):

    spec_decode_num_drafts_total                 verification steps that had a draft
    spec_decode_num_draft_tokens_total           drafted tokens
    spec_decode_num_accepted_tokens_total        drafted tokens the target accepted
    spec_decode_num_accepted_tokens_per_pos_total{position="i"}   accepted at draft position i

Every interval the watcher reads them (summed over other labels: models, engines) and prints,
over the tokens since its last read: the acceptance rate (accepted / drafted), the mean accepted
length per step (1 + accepted / drafts: the drafts kept plus the target's own token, specviz's
tau), the acceptance at each draft position, and the speedup those imply when verifying k + 1
tokens costs `verify` one-token passes and a draft token `c` of one (theory.speedup's form with
the measured tau): tau / (verify + k c). With the defaults (verify 1, c 0) it is the most that
acceptance allows; give your engine's measured costs (python -m specviz.bench.engines) for its own.
"""

from __future__ import annotations

import json
import re
import sys
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from typing import Optional

from specviz.argparsing import Parser

SUFFIXES = {"drafts": "spec_decode_num_drafts_total", "draft_tokens": "spec_decode_num_draft_tokens_total",
            "accepted": "spec_decode_num_accepted_tokens_total"}
PER_POS = "spec_decode_num_accepted_tokens_per_pos_total"
LINE = re.compile(r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)")
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
BARS = " ▁▂▃▄▅▆▇█"


@dataclass
class Counters:
    """One read of the counters (cumulative since the server started)."""

    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted: float = 0.0
    per_position: list = field(default_factory=list)  # accepted at draft position 0, 1, ...
    prefix: str = ""  # "llamacpp", "vllm", ...

    def minus(self, other: "Counters") -> "Counters":
        n = max(len(self.per_position), len(other.per_position))
        pad = lambda xs: list(xs) + [0.0] * (n - len(xs))  # noqa: E731
        return Counters(self.drafts - other.drafts, self.draft_tokens - other.draft_tokens,
                        self.accepted - other.accepted,
                        [a - b for a, b in zip(pad(self.per_position), pad(other.per_position))], self.prefix)


def parse(text: str) -> Counters:
    """The speculative counters in a Prometheus text exposition; refuses text without them."""
    out, per, prefixes = Counters(), {}, set()
    for line in text.splitlines():
        match = LINE.match(line.strip())
        if not match or line.startswith("#"):
            continue
        prefix, _, name = match["name"].rpartition(":")
        value = float(match["value"])
        for key, suffix in SUFFIXES.items():
            if name == suffix:
                setattr(out, key, getattr(out, key) + value)
                prefixes.add(prefix)
        if name == PER_POS:
            labels = dict(LABEL.findall(match["labels"] or ""))
            position = int(labels.get("position", 0))
            per[position] = per.get(position, 0.0) + value
            prefixes.add(prefix)
    if not prefixes:
        raise ValueError("no speculative decoding counters (spec_decode_num_drafts_total and its kin) in this "
                         "metrics text: is speculation on, and (llama.cpp) was the server started with --metrics?")
    out.per_position = [per.get(i, 0.0) for i in range(max(per) + 1)] if per else []
    out.prefix = ",".join(sorted(p for p in prefixes if p))
    return out


@dataclass
class Reading:
    """What a stretch of counters says about speculation."""

    drafts: float
    draft_tokens: float
    accepted: float
    acceptance_rate: Optional[float]  # accepted / drafted
    mean_accepted_length: Optional[float]  # 1 + accepted / drafts: tokens per verification step
    mean_draft_length: Optional[float]  # k: drafted / drafts
    position_acceptance: list  # accepted at position i / drafts
    implied_speedup: Optional[float]  # tau / (verify + k c)


def read(delta: Counters, c: float = 0.0, verify: float = 1.0) -> Reading:
    d = delta.drafts
    rate = delta.accepted / delta.draft_tokens if delta.draft_tokens else None
    tau = 1.0 + delta.accepted / d if d else None
    k = delta.draft_tokens / d if d else None
    implied = tau / (verify + k * c) if d else None
    return Reading(delta.drafts, delta.draft_tokens, delta.accepted, rate, tau, k,
                   [a / d for a in delta.per_position] if d else [], implied)


def fetch(url: str, timeout: float = 5.0) -> str:
    url = url if url.rstrip("/").endswith("/metrics") else url.rstrip("/") + "/metrics"
    with urllib.request.urlopen(url, timeout=timeout) as reply:
        return reply.read().decode()


def line(reading: Reading, when: str) -> str:
    if not reading.drafts:
        return f"{when}  no drafts since the last read"
    bars = "".join(BARS[min(len(BARS) - 1, round(p * (len(BARS) - 1)))] for p in reading.position_acceptance)
    per = " ".join(f"{p:.2f}" for p in reading.position_acceptance)
    return (f"{when}  drafts {reading.drafts:.0f}  acceptance {reading.acceptance_rate:.2f}  "
            f"tokens/step {reading.mean_accepted_length:.2f} (k {reading.mean_draft_length:.1f})  "
            f"by position {bars} [{per}]  implied speedup {reading.implied_speedup:.2f}x")


def watch(url: str, interval: float, count: int, c: float, verify: float, jsonl: bool, out=None) -> int:
    """Print one reading per interval (`count` of them; 0: until interrupted). The first covers
    everything since the server started; each later one the tokens since the read before."""
    last = Counters()
    n = 0
    while True:
        now = parse(fetch(url))
        reading = read(now.minus(last), c, verify)
        last, n = now, n + 1
        when = time.strftime("%H:%M:%S")
        print(json.dumps({"time": when, "engine": now.prefix, **asdict(reading)}) if jsonl else line(reading, when),
              file=out or sys.stdout, flush=True)
        if count and n >= count:
            return 0
        time.sleep(interval)


def main(argv=None) -> int:
    parser = Parser(prog="python -m specviz watch", description=__doc__.splitlines()[0])
    parser.add_argument("url", help="the server, e.g. http://127.0.0.1:8080 (its /metrics is read)")
    parser.add_argument("--interval", type=float, default=2.0, help="seconds between reads")
    parser.add_argument("--count", type=int, default=0, help="stop after this many reads (0: never)")
    parser.add_argument("--c", type=float, default=0.0, help="a draft token's cost / a target token's (default 0)")
    parser.add_argument("--verify", type=float, default=1.0,
                        help="a verification pass's cost / a one-token pass's (default 1: the memory wall)")
    parser.add_argument("--jsonl", action="store_true", help="one JSON object per read")
    args = parser.parse_args(argv)
    if args.interval <= 0 or args.c < 0 or args.verify <= 0:
        print("error: --interval and --verify must be positive and --c not negative.", file=sys.stderr)
        return 2
    try:
        return watch(args.url, args.interval, args.count, args.c, args.verify, args.jsonl)
    except ValueError as exc:
        print(f"error: {args.url}: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"error: cannot read {args.url}: {getattr(exc, 'reason', exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 0
