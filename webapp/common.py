"""What every view shares: the app's limits, the pairs (loaded once per process), the request
checks, the engine's line (one live run computes, a few wait, the next is told at once) and
`ui`, the page's components, which each view's build() fills and its handlers key updates by."""

from __future__ import annotations

import functools
import os
import threading
from types import SimpleNamespace

try:  # ZeroGPU on Hugging Face Spaces: `spaces` must be imported before torch
    import spaces
except ImportError:
    spaces = None

import gradio as gr

import specviz
from specviz import methods
from specviz.bench import recordings as recorded
from specviz.config import MAX_NEW_TOKENS, RunConfig
from specviz.errors import SpecvizError, env_number
from specviz.render.html import CSS
from specviz.runtime.llamacpp import runner as llamacpp
from specviz.runtime.models import LLAMACPP_PAIR, default_pair_name, list_pairs
from specviz.runtime.quant import MODES, quantize_draft

MAX_TOKENS = env_number("SPECVIZ_MAX_TOKENS", 256, low=1, high=MAX_NEW_TOKENS)
MAX_PROMPT_CHARS = 4000
ALLOW_CUSTOM = os.environ.get("SPECVIZ_ALLOW_CUSTOM") == "1"
DEFAULT_PAIR = default_pair_name()
PRESET_PAIRS = [name for name, _ in list_pairs() if name != LLAMACPP_PAIR or llamacpp.available() is None]
DRAFT_WEIGHTS = MODES  # specviz.runtime.quant: "none" or an int8 weight-only draft (CPU)
RECORD_TOPK = recorded.RECORD_TOPK
# Live runs allowed to wait for the engine slot; one more is told the engine is busy, at once. A
# default race (64 tokens) takes ~25-30 s on the real pair on a 2-core CPU, so the last of three
# waits about two minutes, which is what "try again in a minute" can honestly promise.
MAX_LIVE_WAITING = env_number("SPECVIZ_MAX_WAITING", 3, low=1)

# The page's components (gr.State, inputs, outputs), set by each view's build(): handlers return
# {ui.text_html: ..., ...}, and the views read each other's components from here.
ui = SimpleNamespace()

APP_CSS = CSS + """
.sv-title h1 { margin-bottom: 0; }
.sv-recorded { font-size: 0.85em; padding: 2px 8px; margin-bottom: 4px; border-left: 3px solid #7c3aed;
               background: rgba(124, 58, 237, 0.08); }
#sv-text { min-height: 120px; }
"""
CHIP_CLICK_JS = """
element.addEventListener('click', (e) => {
  const chip = e.target.closest('.sv-chip[data-step], .sv-node[data-step]');
  if (chip) trigger('click', {step: Number(chip.dataset.step), index: Number(chip.dataset.index)});
});
"""


# ---------------------------------------------------------------------------------------------
# model pairs: loaded once per process, lazily, shared read-only by every session

_PAIRS: dict = {}
_PAIRS_LOCK = threading.Lock()


def get_pair(name: str, progress=None, draft_quant: str = "none"):
    """The pair, loaded once per process; with draft_quant="int8", the same pair with an int8
    draft (built once, sharing the loaded target and the draft's float weights)."""
    with _PAIRS_LOCK:
        if name not in _PAIRS:
            say = (lambda fraction, message: progress(fraction, desc=message)) if progress else None
            pair = specviz.load_pair(name, progress=say)
            if spaces is None:
                warm_up(pair)
            _PAIRS[name] = pair
        if draft_quant in (None, "", "none"):
            return _PAIRS[name]
        key = (name, draft_quant)
        if key not in _PAIRS:
            pair = quantize_draft(_PAIRS[name], draft_quant)
            if spaces is None:
                warm_up(pair)
            _PAIRS[key] = pair
        return _PAIRS[key]


def warm_up(pair) -> None:
    """One short run of each method, off every clock: the first forward passes of a fresh model
    (and the first tree-attention pass) are slow, and whichever race lane ran first would
    otherwise pay for both."""
    for method in methods.names():
        extra = {"tree": "2,1"} if method == "tree" else {}
        try:
            for _ in specviz.generate(pair, "warm up", method=method, k=2, max_new_tokens=3, record_topk=0, **extra):
                pass
        except SpecvizError:  # a method that needs settings this warm-up does not know: it warms itself
            pass


def gpu(fn):
    """On a ZeroGPU Space the engine streams run under spaces.GPU (they yield plain data, as it
    requires); elsewhere they run as they are."""
    return spaces.GPU(duration=120)(fn) if spaces is not None else fn


def allowed_pair(pair_name, draft_quant="none") -> None:
    """A pair and draft weights a visitor may ask for on this server."""
    if draft_quant not in DRAFT_WEIGHTS:
        raise gr.Error(f"Draft weights must be one of {', '.join(DRAFT_WEIGHTS)}.")
    if pair_name not in PRESET_PAIRS and not ALLOW_CUSTOM and pair_name != DEFAULT_PAIR:
        raise gr.Error(f"Custom model pairs are disabled on this server: choose one of {', '.join(PRESET_PAIRS)}.")


def load(pair_name, progress=None, draft_quant="none"):
    """The pair, loaded once per process; a pair that cannot load is a gr.Error saying why."""
    try:
        return get_pair(pair_name, progress, draft_quant)
    except SpecvizError as exc:
        raise gr.Error(str(exc)) from exc


def check_request(pair_name, prompt, max_new_tokens, progress=None, draft_quant="none") -> None:
    """App-level limits (the engine checks the rest), then the pair, loaded once per process."""
    allowed_pair(pair_name, draft_quant)
    if not isinstance(prompt, str):
        raise gr.Error("The prompt must be text.")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise gr.Error(f"The prompt is {len(prompt)} characters; this app accepts at most {MAX_PROMPT_CHARS}.")
    if isinstance(max_new_tokens, (int, float)) and max_new_tokens > MAX_TOKENS:
        raise gr.Error(f"max tokens is capped at {MAX_TOKENS} in this app (asked for {int(max_new_tokens)}).")
    load(pair_name, progress, draft_quant)


def options(method, k, temperature, top_p, max_new_tokens, seed, chat, auto_k=False, auto_rule="cost",
            confidence=0.4, acceptance="exact", ngram=3, tree_shape="3,2,1", tree_dynamic=False,
            tree_budget=16, request=None) -> RunConfig:
    """The run the widgets ask for (whole numbers arrive as floats); a bad value is a gr.Error
    that says what is wrong. Controls hidden for the chosen method are not applied: "auto k"
    only where the engine offers it, the acceptance rule only for drafting chains (ar drafts
    nothing, trees verify exactly). `request` (Gradio's, for the visitor's session): suffix
    decoding drafts from this visitor's earlier outputs only, never another's."""
    record = methods.find(method)
    auto = bool(auto_k) and record is not None and record.auto_k
    try:
        return RunConfig.of(method=method, k="auto" if auto else whole(k), temperature=temperature, top_p=top_p,
                            max_new_tokens=whole(max_new_tokens), seed=whole(seed), chat=bool(chat),
                            record_topk=RECORD_TOPK,
                            acceptance="exact" if record is None or method == "ar" or record.tree else acceptance,
                            auto_rule=auto_rule, confidence=confidence, ngram=whole(ngram),
                            tree="dynamic" if tree_dynamic and method == "tree" else tree_shape,
                            tree_budget="auto" if whole(tree_budget) == 0 else whole(tree_budget),
                            suffix_session=visitor(request))
    except SpecvizError as exc:
        raise gr.Error(str(exc)) from exc


def visitor(request) -> str:
    """The visitor's session key (Gradio's session hash), or "" for a call without one (the
    process's own session, as for a script's runs)."""
    key = getattr(request, "session_hash", None)
    return f"app:{key}" if isinstance(key, str) and key else ""


def whole(value):
    """A whole number a slider sent as a float, as an int (anything else unchanged, for the checks)."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


# ---------------------------------------------------------------------------------------------
# the engine's line: one live run computes, a few wait in order, the next is told at once


class EngineLine:
    """Live runs take turns on the engine, first come first served. Gradio's own queue cannot
    refuse a run for waiting too long, only hold it; so the engine's listeners run unqueued
    (no concurrency limit) and wait here, where the one too many is refused at once."""

    def __init__(self):
        self._turns = threading.Condition()
        self._line: list = []  # tickets; the first one computes

    def join(self, most_waiting: int) -> object:
        with self._turns:
            if len(self._line) > most_waiting:
                raise gr.Error(busy_message(len(self._line) - 1))
            ticket = object()
            self._line.append(ticket)
            return ticket

    def wait(self, ticket, seconds: float) -> bool:
        """True once it is `ticket`'s turn; False after `seconds` (to show the wait)."""
        with self._turns:
            return self._turns.wait_for(lambda: self._line[0] is ticket, seconds)

    def ahead(self, ticket) -> int:
        with self._turns:
            return self._line.index(ticket)

    def leave(self, ticket) -> None:
        with self._turns:
            self._line.remove(ticket)
            self._turns.notify_all()

    def waiting(self) -> int:
        with self._turns:
            return max(0, len(self._line) - 1)


ENGINE_LINE = EngineLine()


def in_line(handler, status):
    """`handler` (a live-run generator) behind its turn on the engine; while it waits, `status`
    says how many runs are ahead. Gradio closes a cancelled generator between yields (Stop, a
    closed tab), so the ticket is given back then too: a wait yields at least twice a second."""
    @functools.wraps(handler)
    def live(*args, **kwargs):
        ticket = ENGINE_LINE.join(MAX_LIVE_WAITING)
        try:
            while not ENGINE_LINE.wait(ticket, 0.5):
                yield {status: waiting_note(ENGINE_LINE.ahead(ticket))}
            yield from handler(*args, **kwargs)
        finally:
            ENGINE_LINE.leave(ticket)
    return live


def busy_message(waiting: int) -> str:
    more = f"{waiting} more {'is' if waiting == 1 else 'are'}"
    return (f"The engine is busy: one live run is computing and {more} waiting for it; try again in a minute, "
            "or click a preset to see a recorded run.")


def waiting_note(ahead: int) -> str:
    runs = "run is" if ahead == 1 else "runs are"
    return (f'<div class="sv-muted" data-waiting="{ahead}">Waiting for the engine: {ahead} live {runs} ahead '
            'of you.</div>')


def live_waiting() -> int:
    """Live runs waiting for the engine, not computing yet."""
    return ENGINE_LINE.waiting()
