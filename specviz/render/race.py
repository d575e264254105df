"""The race: autoregressive and speculative decoding on the same prompt, each on its own clock.

Fairness on a small CPU: the two engines never compute at the same time. `race()` holds both
event iterators and always advances the lane whose own clock is behind, one step at a time, so
the lanes never compete for cores and each is shown at its own measured time. A lane's clock
(`Lane.busy`) is the time spent inside its iterator's `next()`: that engine's own compute
(prefill, draft, verify, sampling), and nothing of the other lane or of the page. Nothing is
simulated or replayed: the tokens appear as they are computed.

`Lane` and `race` drive iterators (they are the only code here that is not a pure function of
events); `lane_html` and `verdict` render.

A lane also shows its stream as its reader sees it (`gap_strip`): a speculative step delivers
several tokens at one `step_finished`, then nothing until the next. `stream_latency` gives the
numbers behind it from the events alone (specviz.analysis.metrics.stream_stats, plus arrivals):

    ttft          elapsed at the first update (prefill plus the first step)
    gap_*         wait between consecutive visible updates (after the first)
    itl_*         per token, amortised: an update's gap divided by the tokens it delivered
    arrival_*     per token, as a reader sees them: the first token of an update waited the
                  update's gap, the others arrived with it (0)
    burst         tokens per update after the first; jitter: mean |difference of consecutive gaps|
"""

from __future__ import annotations

import time
from typing import Callable, Iterable, Iterator, Optional

from specviz.analysis import metrics
from specviz.analysis.metrics import percentile
from specviz.render import steps as st
from specviz.render.chips import chip
from specviz.render.html import Rendered, attr, num, quoted, text


class Lane:
    """One run's event iterator, advanced one step at a time and timed on its own clock."""

    def __init__(self, name: str, events: Iterable, clock: Callable[[], float] = time.perf_counter):
        self.name = name
        self.events: list = []
        self.busy = 0.0
        self.done = False
        self._it = iter(events)
        self._clock = clock

    def _pull(self) -> Optional[dict]:
        start = self._clock()
        try:
            event = next(self._it)
        except StopIteration:
            self.done = True
            return None
        finally:
            self.busy += self._clock() - start
        data = st.as_dict(event)
        self.events.append(data)
        return data

    def advance(self) -> list:
        """Pull the events of the next step (through its step_finished); when that step ends the
        run, pull run_finished too, so one call is one update on screen."""
        first = len(self.events)
        closing = False
        while not self.done:
            data = self._pull()
            if data is None or data["kind"] == "run_finished":
                self.done = True
                break
            if data["kind"] == "step_finished":
                closing = data.get("finish_reason") is not None
                if not closing:
                    break
        return self.events[first:]


def race(*lanes: Lane) -> Iterator[tuple]:
    """Advance the unfinished lane with the smallest clock by one step and yield (lane, its new
    events), until every lane has finished. Only one lane computes at a time."""
    while True:
        waiting = [lane for lane in lanes if not lane.done]
        if not waiting:
            return
        lane = min(waiting, key=lambda lane: lane.busy)
        yield lane, lane.advance()


def lane_html(events: list, seconds: float, title: str, subtitle: str = "", done: bool = False,
              gap_scale_s: Optional[float] = None) -> Rendered:
    """One lane: counters (tokens, seconds on its own clock, tokens/s, target forwards), a
    progress bar, the stream's waits (`gap_strip`; give both lanes the same `gap_scale_s`,
    e.g. `gap_scale(ar_events, spec_events)`, so their bars compare) and the emitted text as
    chips. A finished lane timed on a busy machine labels its speed unreliable
    (specviz.analysis.metrics.judge_timing)."""
    run = st.build(events)
    m = st.run_metrics(events)
    tokens = m.get("new_tokens", 0)
    limit = (run.started or {}).get("max_new_tokens") or 1
    busy = done and metrics.judge_timing(m.get("cpu_share"), m.get("verify_spread"),
                                         (run.started or {}).get("device"), m.get("wall_time")).reliable is False
    speed = "tokens / s (unreliable: machine busy)" if busy else "tokens / s"
    counters = [(str(tokens), "tokens"), (num(seconds, 2), "seconds (own clock)"),
                (num(tokens / seconds if seconds else None, 1), speed),
                (str(m.get("target_forwards", 0)), "target forwards")]
    cells = "".join(f'<div class="sv-counter"><b>{text(v)}</b><span>{text(k)}</span></div>' for v, k in counters)
    chips = []
    for token in (t for s in run.steps for t in s.emitted):
        chips.append(chip(token, run.greedy))
        if "\n" in token.text:
            chips.append("<br>")
    state = f"done ({text(run.finished['finish_reason'])})" if done and run.finished else "running…"
    name = attr(title.split()[0].lower())
    lossy = (f'<div class="sv-warn" data-lossy="1">LOSSY: {text(run.rule)}, the output does not follow the '
             "target's distribution</div>" if run.started and not run.lossless else "")
    return Rendered(
        f'<div class="sv-lane{" sv-done" if done else ""}" data-lane="{attr(name)}" data-tokens="{attr(tokens)}" '
        f'data-done="{int(done)}" data-busy="{int(busy)}"><h3>{text(title)} '
        f'<span class="sv-muted">· {state}</span></h3>'
        f'<div class="sv-muted">{text(subtitle)}</div>{lossy}<div class="sv-counters">{cells}</div>'
        f'<div class="sv-bar"><div style="width:{min(100.0, 100.0 * tokens / limit):.1f}%"></div></div>'
        f'{gap_strip(events, gap_scale_s).html}<div class="sv-text">{"".join(chips)}</div></div>')


def verdict(ar: dict, spec: dict, same_text: Optional[bool] = None) -> Rendered:
    """'Speculative was X.XX× faster/slower', from the two lanes' tokens/s on their own clocks.

    `same_text`: whether the two outputs are identical, given for temperature-0 runs (where a
    lossless method must reproduce autoregressive decoding). A record with `lossless: False` (typical
    acceptance) is marked LOSSY in the headline and explained. When either record has a
    `timing_note` (charts.summarize: the machine was busy), that note replaces the headline and the
    numbers are shown greyed and marked unreliable: a busy machine can turn a win into a loss."""
    if not ar.get("tokens_per_s") or not spec.get("tokens_per_s"):
        return Rendered('<div class="sv-verdict sv-muted">No verdict: a lane produced no tokens.</div>')
    lossy = spec.get("lossless") is False
    ratio = spec["tokens_per_s"] / ar["tokens_per_s"]
    detail = _detail(ar, spec) + _text_note(same_text, lossy)
    warning = ""
    if lossy:
        warning = ('<div class="sv-lossy" data-lossy="1">LOSSY: the speculative lane used typical acceptance, '
                   "so its speedup buys a different output distribution; it is not comparable with a lossless "
                   "method's.</div>")
    mark = " · LOSSY" if lossy else ""
    busy = busy_note(ar, spec)
    if busy:  # no headline: the numbers stay, greyed, for the record
        return Rendered(f'<div class="sv-verdict sv-muted" data-busy="1" data-ratio="{ratio:.4f}" '
                        f'data-lossy="{int(lossy)}">No verdict: the timings are unreliable{mark}</div>'
                        f'<div class="sv-warn">{text(busy)}</div>{warning}'
                        f'<div class="sv-muted" style="opacity:0.6">Unreliable, for the record only: speculative ÷ '
                        f'autoregressive tokens/s = {ratio:.2f}. {text(detail)}</div>')
    word, css = ("faster", "sv-win") if ratio >= 1 else ("slower", "sv-lose")
    factor = ratio if ratio >= 1 else 1 / ratio
    return Rendered(f'<div class="sv-verdict {css}" data-busy="0" data-ratio="{ratio:.4f}" '
                    f'data-lossy="{int(lossy)}">Speculative was {factor:.2f}× {word}{mark}</div>{warning}'
                    f'<div class="sv-muted">{text(detail)}</div>')


def busy_note(ar: dict, spec: dict) -> Optional[str]:
    """None when both lanes (charts.summarize records) were timed on a quiet machine, else their
    busy-machine notes, each lane named: what to show instead of a speed verdict."""
    notes = [(name, record.get("timing_note")) for name, record in
             (("Autoregressive lane", ar), ("Speculative lane", spec))]
    return " ".join(f"{name}: {note[0].lower()}{note[1:]}" for name, note in notes if note) or None


def _detail(ar: dict, spec: dict) -> str:
    """The numbers behind the verdict: speeds, forwards, alpha, tau, c, method and device."""
    method = spec.get("method")
    setting = f"{method}, k = {spec.get('k_setting', spec.get('k'))}" if method and method != "tree" else method
    detail = (f"{spec['tokens_per_s']:.1f} vs {ar['tokens_per_s']:.1f} tokens/s, each on its own compute clock; "
              f"target forwards {spec['target_forwards']} vs {ar['target_forwards']}; "
              f"α {num(spec.get('alpha'), 2)}, τ {num(spec.get('tau'), 2)}, c {num(spec.get('c'), 2)}.")
    if setting:
        detail = f"Method {setting}: " + detail
    if spec.get("device") and spec.get("dtype"):  # the precision decides whether verifying is cheap
        kernels = ", W @ x.T kernels" if spec.get("cpu_linear") == "gemv" else ""
        detail += f" Both on {spec['device']}, {spec['dtype']}{kernels}."
    return detail


def _text_note(same_text: Optional[bool], lossy: bool) -> str:
    """What the two outputs say about the rule: identical under greedy lossless decoding."""
    if same_text is True and lossy:
        return " Same text as autoregressive here, but a lossy rule gives no such guarantee."
    if same_text is True:
        return " Same text as autoregressive: yes (greedy speculative decoding is lossless)."
    if same_text is False and lossy:
        return " The texts differ: typical acceptance is lossy, it keeps drafts the target would not have chosen."
    if same_text is False:
        return (" The texts differ although decoding is greedy: look for a near-tie in p where they part "
                "(low-precision arithmetic can flip an argmax).")
    if lossy:
        return " Sampling with a lossy rule: the speculative text does not follow the target's distribution."
    return " Sampling: the texts differ by chance, both follow the target's distribution."


def race_status(ar_seconds: float, spec_seconds: float) -> Rendered:
    """The line under a race in progress: where each lane's own clock stands."""
    return Rendered(f'<div class="sv-verdict sv-muted">Racing… autoregressive at {ar_seconds:.2f} s, '
                    f'speculative at {spec_seconds:.2f} s of its own compute</div>')


# ---------------------------------------------------------------------------------------------
# the stream as its reader sees it: time to first token, waits between updates, bursts


def stream_updates(events: Iterable) -> list:
    """(elapsed seconds, tokens delivered, their texts) of each visible update of a run: one per
    step_finished that emitted tokens, on the engine's run clock (consumer pauses left out).
    A step without a clock (hand-built events) is not an update."""
    updates = []
    for event in events:
        data = st.as_dict(event)
        if data.get("kind") == "step_finished" and data.get("emitted_ids") and data.get("elapsed") is not None:
            texts = data.get("emitted_texts") or [""] * len(data["emitted_ids"])
            updates.append((float(data["elapsed"]), len(data["emitted_ids"]), list(texts)))
    return updates


def arrival_gaps(events: Iterable) -> list:
    """Per token after the first update, seconds since the previous token became visible: the
    first token of an update waited the whole gap, the rest arrived with it (0). AR gives one
    gap per token; speculation a long gap, then zeros. Their sum is the decode time."""
    return _arrivals(stream_updates(events))


def _arrivals(updates: list) -> list:
    return [g for gap, (_, n, _) in zip(_gaps(updates), updates[1:]) for g in [gap] + [0.0] * (n - 1)]


def stream_latency(events: Iterable) -> dict:
    """Latency of a run's stream from its events (seconds; None where there is too little):
    metrics.stream_stats of its visible updates, plus how many updates and tokens, and the
    arrival percentiles (module docstring)."""
    updates = stream_updates(events)
    arrivals = _arrivals(updates)
    return {**metrics.stream_stats([t for t, _, _ in updates], [n for _, n, _ in updates]),
            "updates": len(updates), "tokens": sum(n for _, n, _ in updates),
            "arrival_p50": percentile(arrivals, 50), "arrival_p95": percentile(arrivals, 95)}


def gap_scale(*runs: Iterable) -> Optional[float]:
    """The longest wait between updates over several runs' events: one bar scale for both lanes."""
    gaps = [_gaps(stream_updates(events)) for events in runs]
    return max((g for lane in gaps for g in lane), default=None)


def _gaps(updates: list) -> list:
    return [t1 - t0 for (t0, _, _), (t1, _, _) in zip(updates, updates[1:])]


STRIP_HEIGHT = 34  # px: the tallest bar


def gap_strip(events: list, scale_s: Optional[float] = None) -> Rendered:
    """A lane's stream as its reader sees it, from its events: one bar per visible update, as
    wide as the tokens it delivered (the whole strip is max_new_tokens wide, like the progress
    bar) and as tall as the wait before it (the tallest bar is `scale_s`, default this lane's
    longest wait between updates; the first update, pale, waited the time to first token and is
    cut at the top when that is longer), with the time to first token and the wait's p50 / p95
    under it. Empty until a lane has two updates. Token texts (the bars' tooltips) are escaped."""
    events = [st.as_dict(e) for e in events]
    updates = stream_updates(events)
    if len(updates) < 2:
        return Rendered("")
    lat = stream_latency(events)
    started = next((e for e in events if e.get("kind") == "run_started"), {})
    width = max(started.get("max_new_tokens") or 0, lat["tokens"], 1)
    scale = scale_s if scale_s and scale_s > 0 else max(_gaps(updates))
    first_n, ttft = updates[0][1], updates[0][0]
    cut = "; its bar is cut at the strip's height" if ttft > scale else ""
    first_tip = (f"first update: {first_n} token{'s' * (first_n != 1)} at {ttft * 1000:.0f} ms, the time to first "
                 f"token (prefill included){cut}")
    bars = [f'<rect x="0" y="{STRIP_HEIGHT - _height(ttft, scale):.2f}" width="{max(first_n - 0.15, 0.3):.3f}" '
            f'height="{_height(ttft, scale):.2f}" fill="#cbd5e1"><title>{text(first_tip)}</title></rect>']
    x = first_n
    for i, ((t0, _, _), (t1, n, texts)) in enumerate(zip(updates, updates[1:]), 1):
        gap = t1 - t0
        h = _height(gap, scale)
        shown = " ".join(quoted(t) for t in texts[:8]) + (" …" if len(texts) > 8 else "")
        tip = f"update {i}: {n} token{'s' * (n != 1)} after a {gap * 1000:.0f} ms wait: {shown}"
        bars.append(f'<rect x="{x:.3f}" y="{STRIP_HEIGHT - h:.2f}" width="{max(n - 0.15, 0.3):.3f}" height="{h:.2f}" '
                    f'fill="{"#7c3aed" if n > 1 else "#64748b"}"><title>{text(tip)}</title></rect>')
        x += n
    line = (f'time to first token {_ms(lat["ttft"])} · wait between updates p50 {_ms(lat["gap_p50"])}, '
            f'p95 {_ms(lat["gap_p95"])} · {num(lat["burst"], 1)} tokens per update · '
            f'bar height: wait, the tallest {_ms(scale)}')
    data = " ".join(f'data-{key.replace("_", "-")}="{lat[key]:.6f}"' for key in ("ttft", "gap_p50", "gap_p95", "burst")
                    if lat[key] is not None)
    return Rendered(
        f'<div class="sv-gaps" {data} style="margin:2px 0 6px 0">'
        f'<svg viewBox="0 0 {width} {STRIP_HEIGHT}" preserveAspectRatio="none" width="100%" height="{STRIP_HEIGHT}" '
        f'role="img" aria-label="waits between visible updates" style="display:block;background:rgba(148,163,184,.12);'
        f'border-radius:4px">{"".join(bars)}</svg>'
        f'<div class="sv-muted" style="font-size:13px">{text(line)}</div></div>')


def _height(seconds: float, scale: float) -> float:
    """A bar's height in px: `seconds` on a scale whose tallest bar is `scale` (cut there), 1 px at least."""
    return max(1.0, min(1.0, seconds / scale) * STRIP_HEIGHT) if scale > 0 else 1.0


def _ms(seconds: Optional[float]) -> str:
    return "—" if seconds is None else f"{seconds * 1000:.0f} ms"


def engine_lanes_html(rows: list, note: str = "") -> Rendered:
    """llama.cpp's own programs beside the race (records like charts.summarize's): one line
    each, with its tok/s, the drafted and accepted counts it reported, and its speed over its own AR."""
    if not rows:
        return Rendered("")
    body = "".join(_engine_row(r) for r in rows)
    return Rendered('<div class="sv-engine-lanes"><div class="sv-muted">llama.cpp\'s own program on the same '
                    'GGUF file, run after the race (llama-server: its own loop, its own speculation)</div>'
                    '<table class="sv-table"><tr><th>lane</th><th>tokens</th><th>tok/s</th><th>drafted</th>'
                    f'<th>accepted</th><th>acceptance</th><th>tokens/step</th><th>vs its AR</th></tr>{body}</table>'
                    f'<div class="sv-muted">{text(note)}</div></div>')


def _engine_row(r: dict) -> str:
    speedup = "—" if r.get("speedup") is None else f"{r['speedup']:.2f}×"
    return (f'<tr data-lane="{attr(r["label"])}"><td>{text(r["label"])}</td><td>{r["tokens"]}</td>'
            f'<td>{num(r["tokens_per_s"], 1)}</td><td>{r.get("drafted", 0)}</td><td>{r.get("accepted", 0)}</td>'
            f'<td>{num(r.get("alpha"), 2)}</td><td>{num(r.get("tau"), 2)}</td><td>{speedup}</td></tr>')
