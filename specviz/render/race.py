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
    progress bar and the emitted text as chips."""
    run = st.build(events)
    m = st.run_metrics(events)
    tokens = m.get("new_tokens", 0)
    limit = (run.started or {}).get("max_new_tokens") or 1
    counters = [(str(tokens), "tokens"), (num(seconds, 2), "seconds (own clock)"),
                (num(tokens / seconds if seconds else None, 1), "tokens / s"),
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
        f'data-done="{int(done)}"><h3>{text(title)} <span class="sv-muted">· {state}</span></h3>'
        f'<div class="sv-muted">{text(subtitle)}</div>{lossy}<div class="sv-counters">{cells}</div>'
        f'<div class="sv-bar"><div style="width:{min(100.0, 100.0 * tokens / limit):.1f}%"></div></div>'
        f'<div class="sv-text">{"".join(chips)}</div></div>')


def verdict(ar: dict, spec: dict, same_text: Optional[bool] = None) -> Rendered:
    """'Speculative was X.XX× faster/slower', from the two lanes' tokens/s on their own clocks.

    `same_text`: whether the two outputs are identical, given for temperature-0 runs (where a
    lossless method must reproduce autoregressive decoding). A record with `lossless: False` (typical
    acceptance) is marked LOSSY in the headline and explained."""
    if not ar.get("tokens_per_s") or not spec.get("tokens_per_s"):
        return Rendered('<div class="sv-verdict sv-muted">No verdict: a lane produced no tokens.</div>')
    lossy = spec.get("lossless") is False
    ratio = spec["tokens_per_s"] / ar["tokens_per_s"]
    word, css = ("faster", "sv-win") if ratio >= 1 else ("slower", "sv-lose")
    factor = ratio if ratio >= 1 else 1 / ratio
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
    if same_text is True and lossy:
        detail += " Same text as autoregressive here, but a lossy rule gives no such guarantee."
    elif same_text is True:
        detail += " Same text as autoregressive: yes (greedy speculative decoding is lossless)."
    elif same_text is False and lossy:
        detail += " The texts differ: typical acceptance is lossy, it keeps drafts the target would not have chosen."
    elif same_text is False:
        detail += (" The texts differ although decoding is greedy: look for a near-tie in p where they part "
                   "(low-precision arithmetic can flip an argmax).")
    elif lossy:
        detail += " Sampling with a lossy rule: the speculative text does not follow the target's distribution."
    else:
        detail += " Sampling: the texts differ by chance, both follow the target's distribution."
    warning = ""
    if lossy:
        warning = ('<div class="sv-lossy" data-lossy="1">LOSSY: the speculative lane used typical acceptance, '
                   "so its speedup buys a different output distribution; it is not comparable with a lossless "
                   "method's.</div>")
    mark = " · LOSSY" if lossy else ""
    return Rendered(f'<div class="sv-verdict {css}" data-ratio="{ratio:.4f}" data-lossy="{int(lossy)}">Speculative '
                    f'was {factor:.2f}× {word}{mark}</div>{warning}<div class="sv-muted">{text(detail)}</div>')


def race_status(ar_seconds: float, spec_seconds: float) -> Rendered:
    """The line under a race in progress: where each lane's own clock stands."""
    return Rendered(f'<div class="sv-verdict sv-muted">Racing… autoregressive at {ar_seconds:.2f} s, '
                    f'speculative at {spec_seconds:.2f} s of its own compute</div>')
