"""Latency of a token stream from the times its updates became visible. Pure: no torch.

A speculative step emits several tokens at once, so a stream is a list of updates
(time since the run started, tokens in the update). From it:

  ttft          time of the first update (prefill plus the first step)
  gap_p50/p95   per-update gaps: time between consecutive visible updates, what a reader of a
                streaming UI waits for; the first update is excluded (it is ttft)
  itl_p50/p95   inter-token latency per emitted token: each token of an update gets the update's
                gap divided by the tokens it emitted (so a 250 ms step emitting 5 tokens counts
                5 tokens of 50 ms); percentiles over tokens
  jitter        mean absolute difference of consecutive gaps (RFC 3550's interarrival jitter,
                unsmoothed): how uneven the stream looks
  burst         mean tokens per update after the first
  decode_tokens_per_s   tokens after the first update / time after it

For specviz runs the updates are step_finished events (their `elapsed`: the run clock, which
excludes consumer pauses); for transformers' generate they are streamer.put() calls.
"""

from __future__ import annotations

from typing import Iterable, Optional, Sequence


def percentile(values: Sequence[float], q: float) -> Optional[float]:
    """The q-th percentile (0..100) with linear interpolation between closest ranks (numpy's
    default); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def stream_stats(times: Sequence[float], counts: Sequence[int]) -> dict:
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
    times, counts = [], []
    for event in events:
        kind = event["kind"] if isinstance(event, dict) else event.kind
        if kind != "step_finished":
            continue
        get = event.get if isinstance(event, dict) else lambda name: getattr(event, name)
        times.append(get("elapsed"))
        counts.append(len(get("emitted_ids")))
    return times, counts
