"""The race: autoregressive and speculative decoding on the same prompt, each on its own clock.

Fairness on a small CPU: the two engines never compute at the same time. `race()` holds both
event iterators and always advances the lane whose own clock is behind, one step at a time, so
the lanes never compete for cores and each is shown at its own measured time. A lane's clock
(`Lane.busy`) is the time spent inside its iterator's `next()`: that engine's own compute
(prefill, draft, verify, sampling), and nothing of the other lane or of the page. Nothing is
simulated or replayed: the tokens appear as they are computed.

`Lane` and `race` drive iterators (they are the only code here that is not a pure function of
events); `lane_html` and `verdict` render.
"""

from __future__ import annotations

import time
from typing import Callable, Iterable, Iterator, Optional

from specviz import metrics
from specviz.render import steps as st
from specviz.render.chips import chip
from specviz.render.html import Rendered, attr, num, text


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


def lane_html(events: list, seconds: float, title: str, subtitle: str = "", done: bool = False) -> Rendered:
    """One lane: counters (tokens, seconds on its own clock, tokens/s, target forwards), a
    progress bar and the emitted text as chips. A finished lane timed on a busy machine labels
    its speed unreliable (specviz.metrics.judge_timing)."""
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
        f'<div class="sv-lane{" sv-done" if done else ""}" data-lane="{name}" data-tokens="{tokens}" '
        f'data-done="{int(done)}" data-busy="{int(busy)}"><h3>{text(title)} '
        f'<span class="sv-muted">· {state}</span></h3>'
        f'<div class="sv-muted">{text(subtitle)}</div>{lossy}<div class="sv-counters">{cells}</div>'
        f'<div class="sv-bar"><div style="width:{min(100.0, 100.0 * tokens / limit):.1f}%"></div></div>'
        f'<div class="sv-text">{"".join(chips)}</div></div>')


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
