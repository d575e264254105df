"""Run configuration: the methods, their options, and the checks that turn bad input into one
clear `InputError` before the first event. No torch and no model code: the app and the CLI build
and check a RunConfig before any model loads.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, fields
from functools import partial
from typing import Union

from specviz import methods
from specviz.errors import InputError

AUTO_RULES = ("heuristic", "confidence", "cost")  # k="auto"'s rules (specviz.engine.adaptive)


@dataclass(frozen=True)
class Warp:
    """How logits become a distribution. temperature 0 means greedy (argmax) decisions."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def parse_shape(shape) -> list:
    """'3,2,1' or [3, 2, 1] -> [3, 2, 1]: the number of children per node at each depth."""
    if isinstance(shape, str):
        shape = [part for part in shape.replace(" ", "").split(",") if part]
    return [int(b) for b in shape]


MAX_BATCH = 64
MAX_SEED = 2**63 - 1  # torch.Generator takes 64 bits; a batch's rows take seed + row
ACCEPTANCE = ("exact", "typical")
MAX_K = 32
MAX_NEW_TOKENS = 4096
MAX_TOPK = 100
MAX_FANOUT = 16  # SSD: outcomes prepared a step (each is one more row in every preparing forward)
SSD_PREPARE = ("overlap", "full")


@dataclass(frozen=True)
class RunConfig:
    """Everything one run is asked for. It checks itself when made: a RunConfig that exists is
    valid, and a bad value raises one `InputError` that says what to change.

        RunConfig(method="tree", tree="dynamic")        the defaults for everything else
        cfg.replace(temperature=1.0)                    a checked copy with some fields changed

    `generate(pair, prompt, cfg, **overrides)`, the CLI, the app and the benchmarks all build one.
    """

    method: str = "spec"
    k: Union[int, str] = 4  # draft length; "auto": chosen every step by AdaptiveK; "load": by LoadK (specviz.engine.batch)
    temperature: float = 0.0  # 0: greedy
    top_k: int = 0  # 0: off
    top_p: float = 1.0
    max_new_tokens: int = 64
    ignore_eos: bool = False  # run to max_new_tokens: end of text stops nothing (vLLM's ignore_eos), so two runs are one workload
    seed: int = 0
    chat: bool = False
    record_topk: int = 10  # top-k slices of p and q recorded in the events (0: none)
    acceptance: str = "exact"  # or "typical" (LOSSY)
    auto_rule: str = "cost"
    confidence: float = 0.4
    ngram: int = 3
    tree: str = "3,2,1"  # static shape (children per depth), or "dynamic"
    tree_budget: Union[int, str] = 16  # dynamic trees: nodes verified a step; "auto": sized to this machine (treesize)
    tree_depth: int = 6
    tree_width: int = 4
    lookahead_window: int = 5
    lookahead_pool: int = 5
    heads: str = ""  # medusa / eagle: a folder of trained heads (manifest.json); "": the ones shipped for the pair
    suffix_min_prob: float = 0.1  # suffix decoding: a drafted token's estimated chance of acceptance, at least
    suffix_session: str = ""  # suffix decoding: whose earlier outputs it drafts from (the app: one key per visitor)
    ssd_fanout: int = 4  # SSD: verification outcomes prepared while the target verifies
    ssd_prepare: str = "overlap"  # SSD: "overlap" stops preparing when the target's pass ends; "full" waits until all are k deep
    ssd_threads: Union[int, str] = "auto"  # SSD on a CPU: cores the preparing drafter takes ("auto": a third, at least one)
    batch: int = 1  # sequences decoded together (specviz.engine.batch); a list of prompts sets it to its length
    spec_off_batch: int = 0  # batched runs: at or above this many live rows, steps are plain AR (vLLM's switch; 0: never)
    warp: Warp = field(init=False, repr=False, compare=False)  # temperature, top_k, top_p together

    def __post_init__(self):
        _check(self)
        fix = partial(object.__setattr__, self)
        fix("temperature", float(self.temperature))
        fix("top_p", float(self.top_p))
        fix("confidence", float(self.confidence))
        fix("suffix_min_prob", float(self.suffix_min_prob))
        fix("chat", bool(self.chat))
        fix("ignore_eos", bool(self.ignore_eos))
        if "static" in methods.get(self.method).tree_forms and self.tree != "dynamic":
            fix("tree", ",".join(map(str, parse_shape(self.tree))))
        fix("warp", Warp(self.temperature, self.top_k, self.top_p))

    @classmethod
    def of(cls, **options) -> "RunConfig":
        """RunConfig(**options), with a misspelt option an InputError like any other bad value."""
        unknown = sorted(set(options) - FIELDS)
        if unknown:
            raise InputError(f"Unknown option {unknown[0]!r}: the options are {', '.join(sorted(FIELDS))}.")
        return cls(**options)

    def replace(self, **overrides) -> "RunConfig":
        """A checked copy with `overrides` applied."""
        return RunConfig.of(**{**self.to_dict(), **overrides}) if overrides else self

    def to_dict(self) -> dict:
        """The fields as keyword arguments: RunConfig(**cfg.to_dict()) == cfg."""
        return {name: getattr(self, name) for name in FIELDS}

    @property
    def draft_k(self):
        """The k a run records: 0 for autoregressive, None for tree methods (no single k)."""
        return 0 if self.method == "ar" else (None if methods.get(self.method).tree else self.k)

    def options(self) -> dict:
        """Method options as recorded in run_started."""
        method = methods.get(self.method)
        out = {"acceptance": self.acceptance}
        if self.k == "auto" and method.auto_k:
            out.update(auto_rule=self.auto_rule, confidence=self.confidence)
        out.update((name, getattr(self, field_name)) for name, field_name in method.options)
        if "static" in method.tree_forms:
            out["tree"] = self.tree
        if "dynamic" in method.tree_forms and (self.tree == "dynamic" or "static" not in method.tree_forms):
            out.update(tree_budget=self.tree_budget, tree_depth=self.tree_depth, tree_width=self.tree_width)
        if method.heads and self.heads:
            out["heads"] = self.heads
        if self.ignore_eos:
            out["ignore_eos"] = True
        if self.batch > 1:
            out["batch"] = self.batch
        if self.spec_off_batch:
            out["spec_off_batch"] = self.spec_off_batch
        return out


MAX_TREE_NODES = 64


# ---------------------------------------------------------------------------------------------
# how a message names an option: as the Python argument (generate(pair, prompt, tree_depth=8)), or,
# while a command checks its input, as the command line's flag (generate --tree-depth 8)

LOAD_OPTIONS = ("device", "dtype", "draft_quant", "cpu_linear", "memory", "backend", "gguf")  # load_pair's
# flags named after the option a method records (specviz.methods) rather than the field
_FLAG_NAMES = {"suffix_min_prob": "--min-prob", "ssd_fanout": "--fanout", "ssd_prepare": "--prepare",
               "ssd_threads": "--draft-threads", "lookahead_window": "--window", "lookahead_pool": "--pool"}
NO_FLAG = frozenset({"suffix_session"})  # the app's key per visitor; a script passes it to generate()
_AS_FLAGS = ContextVar("specviz_options_as_flags", default=False)
_NO_VALUE = object()


def flag(name: str):
    """The `python -m specviz generate` flag of a RunConfig field or load_pair option (None: none)."""
    return None if name in NO_FLAG else _FLAG_NAMES.get(name, "--" + name.replace("_", "-"))


def option(name: str, value=_NO_VALUE) -> str:
    """An option as a message names it, with a value if one is given: "tree_depth", "k=5" for
    Python; "--tree-depth", "--k 5" inside `as_flags()` (an option with no flag keeps its name)."""
    flag_name = flag(name) if _AS_FLAGS.get() else None
    if flag_name is None:
        return name if value is _NO_VALUE else f"{name}={value!r}"
    return flag_name if value is _NO_VALUE else f"{flag_name} {value}"


@contextmanager
def as_flags():
    """Inside, messages name options by their command-line flags (the CLI runs its commands so)."""
    token = _AS_FLAGS.set(True)
    try:
        yield
    finally:
        _AS_FLAGS.reset(token)


# ---------------------------------------------------------------------------------------------
# input checks, in the order a user reads the options

def _check(cfg: RunConfig) -> None:
    method, k = cfg.method, cfg.k
    if not methods.known(method):
        raise InputError(f"Unknown method {method!r}: choose one of {', '.join(methods.names())}.")
    for word in ("auto", "load"):
        able = methods.names(**{f"{word}_k": True})
        if k == word and method not in able:
            raise InputError(f"{option('k', word)} works with {', '.join(able)}; give {method} a number.")
    if k not in ("auto", "load") and (not _is_int(k) or not 1 <= k <= MAX_K):
        raise InputError(f"{option('k')} (draft length) must be a whole number from 1 to {MAX_K}, 'auto' or 'load', "
                         f"got {k!r}.")
    _check_batch(cfg)
    if cfg.acceptance not in ACCEPTANCE:
        raise InputError(f"{option('acceptance')} must be one of {', '.join(ACCEPTANCE)}, got {cfg.acceptance!r}.")
    if cfg.auto_rule not in AUTO_RULES:
        raise InputError(f"{option('auto_rule')} must be one of {', '.join(AUTO_RULES)}, got {cfg.auto_rule!r}.")
    if not _is_number(cfg.confidence) or not 0.0 < cfg.confidence < 1.0:
        raise InputError(f"{option('confidence')} must be between 0 and 1, got {cfg.confidence!r}.")
    if not _is_int(cfg.ngram) or not 1 <= cfg.ngram <= 8:
        raise InputError(f"{option('ngram')} must be a whole number from 1 to 8, got {cfg.ngram!r}.")
    _check_sampling(cfg)
    if methods.get(method).tree_forms:
        _check_tree(cfg)
    if not isinstance(cfg.heads, str):
        raise InputError(f"{option('heads')} must be a folder path (or '' for the shipped heads), got {cfg.heads!r}.")
    if method == "lookahead":
        _check_lookahead(cfg)
    _check_suffix_and_ssd(cfg)
    if methods.get(method).shape == "candidate tree" and cfg.acceptance != "exact":
        raise InputError(f"{method} verifies its tree exactly; typical acceptance is for chains: "
                         f"use {option('acceptance', 'exact')}.")


def _check_batch(cfg: RunConfig) -> None:
    if not _is_int(cfg.batch) or not 1 <= cfg.batch <= MAX_BATCH:
        raise InputError(f"{option('batch')} must be a whole number from 1 to {MAX_BATCH}, got {cfg.batch!r}.")
    if (cfg.batch > 1 or cfg.k == "load") and not methods.get(cfg.method).batch:
        raise InputError(f"Batched runs take the chain methods {', '.join(methods.names(batch=True))}; "
                         f"{cfg.method} decodes one sequence at a time.")
    if not _is_int(cfg.spec_off_batch) or cfg.spec_off_batch < 0:
        raise InputError(f"{option('spec_off_batch')} must be 0 (never) or a whole number of rows, "
                         f"got {cfg.spec_off_batch!r}.")


def _check_sampling(cfg: RunConfig) -> None:
    t = cfg.temperature
    if not _is_number(t) or not math.isfinite(t) or t < 0:
        raise InputError(f"{option('temperature')} must be 0 (greedy) or a positive number, got {t!r}.")
    if not _is_int(cfg.top_k) or cfg.top_k < 0:
        raise InputError(f"{option('top_k')} must be 0 (off) or a positive whole number, got {cfg.top_k!r}.")
    if not _is_number(cfg.top_p) or not 0.0 < cfg.top_p <= 1.0:
        raise InputError(f"{option('top_p')} must be in (0, 1], got {cfg.top_p!r}.")
    if not _is_int(cfg.max_new_tokens) or not 1 <= cfg.max_new_tokens <= MAX_NEW_TOKENS:
        raise InputError(f"{option('max_new_tokens')} must be from 1 to {MAX_NEW_TOKENS}, got {cfg.max_new_tokens!r}.")
    if not _is_int(cfg.seed) or not 0 <= cfg.seed <= MAX_SEED:
        raise InputError(f"{option('seed')} must be a whole number from 0 to 2**63 - 1, got {cfg.seed!r}.")
    if not _is_int(cfg.record_topk) or not 0 <= cfg.record_topk <= MAX_TOPK:
        raise InputError(f"{option('record_topk')} must be from 0 to {MAX_TOPK}, got {cfg.record_topk!r}.")


def _check_suffix_and_ssd(cfg: RunConfig) -> None:
    if not _is_number(cfg.suffix_min_prob) or not 0.0 < cfg.suffix_min_prob <= 1.0:
        raise InputError(f"{option('suffix_min_prob')} must be in (0, 1], got {cfg.suffix_min_prob!r}.")
    if not isinstance(cfg.suffix_session, str) or len(cfg.suffix_session) > 128:
        raise InputError(f"{option('suffix_session')} must be a string of at most 128 characters.")
    if not _is_int(cfg.ssd_fanout) or not 1 <= cfg.ssd_fanout <= MAX_FANOUT:
        raise InputError(f"{option('ssd_fanout')} must be a whole number from 1 to {MAX_FANOUT}, "
                         f"got {cfg.ssd_fanout!r}.")
    if cfg.ssd_prepare not in SSD_PREPARE:
        raise InputError(f"{option('ssd_prepare')} must be one of {', '.join(SSD_PREPARE)}, got {cfg.ssd_prepare!r}.")
    if cfg.ssd_threads != "auto" and (not _is_int(cfg.ssd_threads) or not 1 <= cfg.ssd_threads <= 256):
        raise InputError(f"{option('ssd_threads')} must be 'auto' or a whole number of cores from 1 to 256, "
                         f"got {cfg.ssd_threads!r}.")


def _check_lookahead(cfg: RunConfig) -> None:
    if not cfg.temperature == 0:
        raise InputError(f"lookahead decoding is greedy-only here: set {option('temperature', 0)}.")
    if cfg.acceptance != "exact":
        raise InputError("lookahead verifies exactly; typical acceptance is for chains: "
                         f"use {option('acceptance', 'exact')}.")
    if not 2 <= cfg.ngram <= 8:
        raise InputError(f"lookahead needs an n-gram size from 2 to 8 ({option('ngram')}), got {cfg.ngram}.")
    window, pool = cfg.lookahead_window, cfg.lookahead_pool
    for name, value, top in (("lookahead_window", window, 16), ("lookahead_pool", pool, 16)):
        if not _is_int(value) or not 1 <= value <= top:
            raise InputError(f"{option(name)} must be a whole number from 1 to {top}, got {value!r}.")
    if window + pool * (cfg.ngram - 1) > MAX_TREE_NODES:
        raise InputError(f"lookahead's {option('lookahead_window')} plus {option('lookahead_pool')} times "
                         f"({option('ngram')} - 1) candidates exceed {MAX_TREE_NODES} tokens per pass: "
                         "make them smaller.")


def _check_tree(cfg: RunConfig) -> None:
    if cfg.acceptance != "exact":
        raise InputError(f"The {cfg.method} method verifies exactly; typical acceptance is for chains: "
                         f"use {option('acceptance', 'exact')}.")
    tree, forms = cfg.tree, methods.get(cfg.method).tree_forms
    if "dynamic" not in forms and tree == "dynamic":
        raise InputError(f"{cfg.method}'s trees are static ({option('tree')}: children per depth like '3,2,1'); "
                         f"{', '.join(methods.names(tree_forms=('dynamic',)))} grow dynamic ones.")
    if "static" in forms and tree != "dynamic" and not _static_shape_fits(tree):
        either = "'dynamic' or " if "dynamic" in forms else ""
        raise InputError(f"{option('tree')} must be {either}children per depth like '3,2,1' with at most "
                         f"{MAX_TREE_NODES} nodes in all, got {tree!r}.")
    if cfg.tree_budget != "auto" and (not _is_int(cfg.tree_budget) or not 1 <= cfg.tree_budget <= MAX_TREE_NODES):
        raise InputError(f"{option('tree_budget')} must be a whole number from 1 to {MAX_TREE_NODES}, or 'auto' "
                         f"(sized each step to this machine), got {cfg.tree_budget!r}.")
    for name, value, top in (("tree_depth", cfg.tree_depth, MAX_K), ("tree_width", cfg.tree_width, 16)):
        if not _is_int(value) or not 1 <= value <= top:
            raise InputError(f"{option(name)} must be a whole number from 1 to {top}, got {value!r}.")


def _static_shape_fits(tree) -> bool:
    try:
        shape = parse_shape(tree)
    except (TypeError, ValueError):
        return False
    nodes, level = 0, 1
    for b in shape:
        level *= b
        nodes += level
    return bool(shape) and min(shape) >= 1 and nodes <= MAX_TREE_NODES


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_prompt_text(prompt) -> None:
    if isinstance(prompt, str) and not prompt.strip():
        raise InputError("The prompt is empty: type some text to continue.")


def prompt_to_ids(pair, prompt, chat: bool) -> list:
    check_prompt_text(prompt)
    if isinstance(prompt, str):
        ids = pair.encode(prompt, chat=chat)
    else:
        ids = [int(t) for t in prompt]
        vocab = vocab_size(pair)
        if any(not 0 <= t < vocab for t in ids):
            raise InputError(f"Prompt token ids must be in [0, {vocab}).")
    if not ids:
        raise InputError("The prompt has no tokens: type some text to continue.")
    return ids


def vocab_size(pair) -> int:
    return model_vocab_size(pair.target)


def model_vocab_size(model) -> int:
    """A model's vocabulary: its config's (transformers), else its own attribute (toy models)."""
    return getattr(getattr(model, "config", None), "vocab_size", None) or model.vocab_size


def check_context(pair, n_prompt: int, cfg: RunConfig) -> None:
    k = cfg.draft_k
    lookahead = MAX_TREE_NODES if k is None else (MAX_K if k in ("auto", "load") else k)
    need = n_prompt + cfg.max_new_tokens + lookahead + 1
    if need > pair.context_length:
        raise InputError(f"The prompt ({n_prompt} tokens) plus {option('max_new_tokens')} ({cfg.max_new_tokens}) "
                         f"does not fit the {pair.context_length}-token context of {pair.name}: "
                         "shorten the prompt or ask for fewer tokens.")


FIELDS = frozenset(f.name for f in fields(RunConfig) if f.init)
