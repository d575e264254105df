"""Fold an event stream into run metrics. Pure: no torch, no models; events or their dicts in.

Definitions (k = draft length, a step = one target forward):
    tau                   new tokens / target forwards (bonus included): mean accepted length + 1
    alpha_empirical       accepted / evaluated: of the drafted tokens the rule decided on, the
                          share it accepted. Unbiased for the acceptance rate alpha.
    alpha_analytic        mean of beta = sum_x min(p(x), q(x)) over the same evaluated positions:
                          the exact acceptance probability the rule had there.
    accepted_per_drafted  accepted / drafted. NOT alpha: drafts after the first rejection are
                          thrown away undecided, so this is a(1-a^k)/(k(1-a)) < a for iid
                          acceptance (theory.accepted_per_drafted).
    position_acceptance   for each draft index i, accepted at i / evaluated at i (conditional);
                          for trees, per depth: a child accepted at depth i / depth i reached.
    c                     mean draft forward time / mean target forward time, measured.
    cpu_share             seconds the decoding thread was on a core / seconds of the run (both on
                          the engine's clock, consumer pauses left out). Near 1 alone on a CPU.
                          None for a method that drafts on threads of its own (THREADED: SSD),
                          whose decoding thread waits for them by design.
    verify_spread         interquartile range / median of the per-forward verify time over the
                          decode steps of the commonest shape: how much same-shape forwards varied.

`stream_stats` gives the latency of the token stream (time to first token, waits between
updates, per-token latency, jitter), defined in its section below.

`judge_timing` turns the last two into a verdict on whether the run's timings can be trusted
(`timing_note(events)`: None or the sentence to show instead of a speed verdict).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Iterable, Optional, Sequence


@dataclass
class RunStats:
    method: str = ""
    k: object = 0
    new_tokens: int = 0
    steps: int = 0
    target_forwards: int = 0
    draft_forwards: int = 0
    drafted: int = 0
    evaluated: int = 0
    accepted: int = 0
    tau: float = 0.0
    alpha_empirical: Optional[float] = None
    alpha_analytic: Optional[float] = None
    accepted_per_drafted: Optional[float] = None
    position_acceptance: list = field(default_factory=list)
    accepted_histogram: list = field(default_factory=list)  # steps with 0, 1, ..., k accepted
    wall_time: float = 0.0
    tokens_per_s: float = 0.0
    ttft: Optional[float] = None
    draft_time: float = 0.0
    verify_time: float = 0.0
    # target passes of steps without the prompt's prefill in them: what one verification costs
    decode_verify_time: float = 0.0
    decode_target_forwards: int = 0
    decode_draft_time: float = 0.0
    decode_draft_forwards: int = 0
    # seconds per target (verification) and per draft forward, from those steps where there are any
    verify_s_per_forward: Optional[float] = None
    draft_s_per_forward: Optional[float] = None
    c: Optional[float] = None
    cpu_share: Optional[float] = None  # None: the events carry no CPU clock (older traces)
    verify_spread: Optional[float] = None  # None: fewer than SPREAD_MIN_STEPS same-shape decode steps
    finish_reason: Optional[str] = None
    lossless: bool = True  # False for a lossy acceptance rule (typical): output != target's law
    counters: dict = field(default_factory=dict)  # method-specific sums (cascade n-gram hits, ...)
    k_chosen: list = field(default_factory=list)  # k="auto": the k of each step

    def to_dict(self) -> dict:
        return asdict(self)

    def line(self) -> str:
        """One human line, as the CLI prints it."""
        parts = [f"{self.new_tokens} tokens in {self.wall_time:.2f}s ({self.tokens_per_s:.1f} tok/s)",
                 f"target forwards {self.target_forwards}", f"tau {self.tau:.2f}"]
        if self.alpha_empirical is not None:
            parts.append(f"alpha {self.alpha_empirical:.2f} (analytic {self.alpha_analytic:.2f})")
        if self.c is not None:
            parts.append(f"c {self.c:.2f}")
        if not self.lossless:
            parts.append("LOSSY (typical acceptance)")
        return ", ".join(parts)


def _get(event, name):
    return event[name] if isinstance(event, dict) else getattr(event, name)


def _get_default(event, name, default):
    return event.get(name, default) if isinstance(event, dict) else getattr(event, name, default)


def _kind(event) -> str:
    return _get(event, "kind")


# methods whose decoding thread hands drafting to threads of their own and waits (SSD prepares the next
# step's drafts while the target verifies): its CPU share is below 1 on a quiet machine
THREADED = frozenset({"ssd"})


def fold(events: Iterable) -> RunStats:
    """Metrics of one run from its events (run_started and step_finished are enough)."""
    stats = RunStats()
    beta_sum = 0.0
    pos_eval, pos_acc = [], []
    per_forward = defaultdict(list)  # drafted -> verify seconds per forward of decode steps
    for event in events:
        kind = _kind(event)
        if kind == "run_started":
            stats.method, stats.k = _get(event, "method"), _get(event, "k")
            stats.lossless = _get(event, "lossless")
        elif kind == "step_finished":
            beta_sum += _fold_step(stats, event, pos_eval, pos_acc)
            _fold_clocks(stats, event, per_forward)
    _finish(stats, beta_sum, pos_eval, pos_acc)
    stats.verify_spread = _spread(max(per_forward.values(), key=len, default=[]))
    if stats.method in THREADED:  # its drafts run on threads of their own while the decoding thread waits
        stats.cpu_share = None  # for them, so that thread's share says nothing of other work: the spread judges
    return stats


def _fold_clocks(stats: RunStats, step, per_forward: dict) -> None:
    cpu, elapsed = _get_default(step, "cpu_elapsed", None), _get(step, "elapsed")
    stats.cpu_share = cpu / elapsed if cpu is not None and elapsed > 0 else None
    if not _get_default(step, "prefill", 0) and _get(step, "target_forwards"):
        per_forward[_get(step, "drafted")].append(_get(step, "verify_time") / _get(step, "target_forwards"))


def _spread(seconds: list) -> Optional[float]:
    """Interquartile range over median: robust to the odd slow step, which the quietest machine has."""
    if len(seconds) < SPREAD_MIN_STEPS:
        return None
    low, median, high = statistics.quantiles(seconds, n=4)
    return (high - low) / median if median > 0 else None


def _fold_step(stats: RunStats, step, pos_eval: list, pos_acc: list) -> float:
    accepted, evaluated = _get(step, "accepted"), _get(step, "evaluated")
    stats.steps += 1
    stats.new_tokens += len(_get(step, "emitted_ids"))
    stats.target_forwards += _get(step, "target_forwards")
    stats.draft_forwards += _get(step, "draft_forwards")
    stats.drafted += _get(step, "drafted")
    stats.evaluated += evaluated
    stats.accepted += accepted
    stats.draft_time += _get(step, "draft_time")
    stats.verify_time += _get(step, "verify_time")
    if not _get_default(step, "prefill", 0):
        stats.decode_verify_time += _get(step, "verify_time")
        stats.decode_target_forwards += _get(step, "target_forwards")
        stats.decode_draft_time += _get(step, "draft_time")
        stats.decode_draft_forwards += _get(step, "draft_forwards")
    stats.wall_time = _get(step, "elapsed")
    stats.finish_reason = _get(step, "finish_reason")
    if stats.ttft is None and _get(step, "emitted_ids"):
        stats.ttft = _get(step, "elapsed")
    info = _get(step, "info") or {}
    # depth i (draft index i - 1) was reached when every depth before it accepted; a chain's depth
    # is its length (for a chain this is its evaluated count)
    reached = min(accepted + 1, info.get("depth", _get(step, "drafted")))
    while len(pos_eval) < reached:
        pos_eval.append(0)
        pos_acc.append(0)
    for i in range(reached):
        pos_eval[i] += 1
        pos_acc[i] += i < accepted
    for name, value in info.get("counters", {}).items():
        stats.counters[name] = stats.counters.get(name, 0) + value
    if "k_chosen" in info:
        stats.k_chosen.append(info["k_chosen"])
    if _get(step, "drafted"):
        while len(stats.accepted_histogram) <= accepted:
            stats.accepted_histogram.append(0)
        stats.accepted_histogram[accepted] += 1
    return sum(_get(step, "beta")[:evaluated])


def _finish(stats: RunStats, beta_sum: float, pos_eval: list, pos_acc: list) -> None:
    if stats.target_forwards:
        stats.tau = stats.new_tokens / stats.target_forwards
    if stats.wall_time > 0:
        stats.tokens_per_s = stats.new_tokens / stats.wall_time
    if stats.evaluated:
        stats.alpha_empirical = stats.accepted / stats.evaluated
        stats.alpha_analytic = beta_sum / stats.evaluated
    if stats.drafted:
        stats.accepted_per_drafted = stats.accepted / stats.drafted
    stats.position_acceptance = [a / e for a, e in zip(pos_acc, pos_eval)]
    stats.verify_s_per_forward = _per_forward(stats.decode_verify_time, stats.decode_target_forwards,
                                              stats.verify_time, stats.target_forwards)
    stats.draft_s_per_forward = _per_forward(stats.decode_draft_time, stats.decode_draft_forwards,
                                             stats.draft_time, stats.draft_forwards)
    # c: a draft forward over a verification pass; steps whose passes carry the prefill are left out
    # (unless there is nothing else: a one-step run)
    decode = stats.decode_target_forwards and stats.decode_draft_forwards
    verify, forwards = ((stats.decode_verify_time, stats.decode_target_forwards)
                        if decode else (stats.verify_time, stats.target_forwards))
    draft, drafts = ((stats.decode_draft_time, stats.decode_draft_forwards)
                     if decode else (stats.draft_time, stats.draft_forwards))
    if drafts and forwards and verify > 0:
        stats.c = (draft / drafts) / (verify / forwards)


def _per_forward(decode_time: float, decode_n: int, time: float, n: int) -> Optional[float]:
    """Seconds per forward over the steps without the prefill, or over all steps if none is."""
    if decode_n:
        return decode_time / decode_n
    return time / n if n else None


def fold_runs(runs: Iterable[Iterable]) -> list:
    """RunStats for each run of a list of event lists."""
    return [fold(run) for run in runs]


# ---------------------------------------------------------------------------------------------
# can the timings be trusted?

BUSY_SHARE = 0.9
BUSY_SPREAD = 1.0
SPREAD_MIN_STEPS = 8  # fewer same-shape forwards give no meaningful quartiles
MIN_SECONDS = 0.2  # Windows advances thread clocks in 15.6 ms ticks: shorter runs are not judged
ADVICE = "so these timings are unreliable; close other programs and run again"


@dataclass(frozen=True)
class TimingCheck:
    reliable: Optional[bool]  # None: nothing to judge by (too short, or too few steps off a CPU)
    note: Optional[str]  # the sentence to show instead of a speed verdict; None when reliable
    cpu_share: Optional[float] = None
    verify_spread: Optional[float] = None


def judge_timing(cpu_share: Optional[float], verify_spread: Optional[float], device: Optional[str] = "cpu",
                 seconds: Optional[float] = None) -> TimingCheck:
    """Whether timings taken with this CPU share and forward-time spread can be trusted.

    On a CPU the share decides: the decoding thread's CPU time over the wall time it was timed.
    Alone it computes all the time (it spins at OpenMP barriers rather than sleep); when other work
    wants the cores, the scheduler takes it off them and the share drops. BUSY_SHARE sits in the
    gap between the lowest share of runs alone and the highest share at which other work had
    already slowed a run, both measured on a 2-core CPU beside processes spinning a core (the
    calibration runs are in the commit that set it: `git log -S BUSY_SHARE specviz/analysis/metrics.py`).
    Runs shorter than MIN_SECONDS are not judged by it: Windows' thread clock ticks every 15.6 ms,
    more than the margin over a short run.

    The spread (IQR / median of same-shape forward times) does not separate a steady competitor
    from a quiet machine (every forward slowed alike gives a small one), so it is used only where
    the share says nothing: on a GPU (the CPU thread's share there depends on how it waits for the
    device, not on contention) and on traces recorded without a CPU clock. BUSY_SPREAD flags only
    bursts, well above any spread measured alone. Without either figure nothing is judged
    (reliable is None).
    """
    if str(device or "").startswith("cpu") and cpu_share is not None:
        if seconds is not None and seconds < MIN_SECONDS:
            return TimingCheck(None, None, cpu_share, verify_spread)
        if cpu_share < BUSY_SHARE:
            return TimingCheck(False, f"The machine was busy: the decoding thread ran only {cpu_share:.0%} of "
                                      f"the time it was timed (the cores were shared with other work), {ADVICE}.",
                               cpu_share, verify_spread)
        return TimingCheck(True, None, cpu_share, verify_spread)
    if verify_spread is None:
        return TimingCheck(None, None, cpu_share, verify_spread)
    if verify_spread > BUSY_SPREAD:
        return TimingCheck(False, f"The machine was busy: forward passes of the same size varied by "
                                  f"±{verify_spread / 2:.0%} around their median, {ADVICE}.",
                           cpu_share, verify_spread)
    return TimingCheck(True, None, cpu_share, verify_spread)


def timing_check(events: Iterable) -> TimingCheck:
    """judge_timing on a run's events (or their dicts): its device and folded clocks."""
    events = list(events)
    started = next((e for e in events if _kind(e) == "run_started"), None)
    stats = fold(events)
    device = _get(started, "device") if started is not None else None
    return judge_timing(stats.cpu_share, stats.verify_spread, device, stats.wall_time)


def timing_note(events: Iterable) -> Optional[str]:
    """None when a run's timings can be trusted (or cannot be judged), else the sentence saying
    the machine was busy: what a timing lesson prints instead of its conclusion."""
    return timing_check(events).note


# ---------------------------------------------------------------------------------------------
# latency of a token stream, from the times its updates became visible
#
# A speculative step emits several tokens at once, so a stream is a list of updates
# (time since the run started, tokens in the update). From it:
#
#   ttft          time of the first update (prefill plus the first step)
#   gap_p50/p95   per-update gaps: time between consecutive visible updates, what a reader of a
#                 streaming UI waits for; the first update is excluded (it is ttft)
#   itl_p50/p95   inter-token latency per emitted token: each token of an update gets the update's
#                 gap divided by the tokens it emitted (so a 250 ms step emitting 5 tokens counts
#                 5 tokens of 50 ms); percentiles over tokens
#   jitter        mean absolute difference of consecutive gaps (RFC 3550's interarrival jitter,
#                 unsmoothed): how uneven the stream looks
#   burst         mean tokens per update after the first
#   decode_tokens_per_s   tokens after the first update / time after it
#
# For specviz runs the updates are step_finished events (their `elapsed`: the run clock, which
# excludes consumer pauses); for transformers' generate they are streamer.put() calls.

def percentile(values: Sequence, q: float) -> Optional[float]:
    """The q-th percentile (0..100) with linear interpolation between closest ranks (numpy's
    default); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def stream_stats(times: Sequence, counts: Sequence) -> dict:
    """Latency statistics of updates at `times` (seconds from the start, increasing) that
    emitted `counts` tokens each."""
    updates = [(t, n) for t, n in zip(times, counts) if n > 0]
    if not updates:
        return {"ttft": None, "gap_p50": None, "gap_p95": None, "itl_p50": None, "itl_p95": None,
                "jitter": None, "burst": None, "decode_tokens_per_s": None}
    gaps = [t1 - t0 for (t0, _), (t1, _) in zip(updates, updates[1:])]
    per_token = [gap / n for gap, (_, n) in zip(gaps, updates[1:]) for _ in range(n)]
    later_tokens = sum(n for _, n in updates[1:])
    decode_time = updates[-1][0] - updates[0][0]
    return {
        "ttft": updates[0][0],
        "gap_p50": percentile(gaps, 50), "gap_p95": percentile(gaps, 95),
        "itl_p50": percentile(per_token, 50), "itl_p95": percentile(per_token, 95),
        "jitter": (sum(abs(b - a) for a, b in zip(gaps, gaps[1:])) / (len(gaps) - 1)
                   if len(gaps) > 1 else None),
        "burst": later_tokens / len(gaps) if gaps else None,
        "decode_tokens_per_s": later_tokens / decode_time if decode_time > 0 else None,
    }


def updates_from_events(events: Iterable) -> tuple:
    """(times, counts) of a specviz run: one update per step_finished (events or their dicts)."""
    steps = [event for event in events if _kind(event) == "step_finished"]
    return [_get(step, "elapsed") for step in steps], [len(_get(step, "emitted_ids")) for step in steps]
