"""Run configuration: the methods, their options, and the checks that turn bad input into one
clear `InputError` before the first event. No model code here but what the checks need.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Union

from specviz.adaptive import RULES
from specviz.errors import InputError
from specviz.sampling import Warp
from specviz.tree import parse_shape

METHODS = ("ar", "spec", "tree", "pld", "lookahead", "cascade")
METHOD_HELP = {
    "ar": "autoregressive: one target forward per token (the baseline)",
    "spec": "draft model proposes k tokens, the target verifies them in one pass",
    "tree": "draft model proposes a tree of continuations, verified in one pass with tree attention",
    "pld": "prompt lookup: copy the continuation of an earlier n-gram, no draft model",
    "lookahead": "lookahead (greedy): Jacobi window + n-gram pool verified in one pass, no draft model",
    "cascade": "n-gram -> draft model -> target: prompt lookup speeds up the draft model",
}
AUTO_METHODS = ("spec", "cascade")
ACCEPTANCE = ("exact", "typical")
MAX_K = 32
MAX_NEW_TOKENS = 4096
MAX_TOPK = 100


@dataclass(frozen=True)
class RunConfig:
    method: str
    k: Union[int, str]  # "auto": chosen every step by AdaptiveK
    warp: Warp
    max_new_tokens: int
    seed: int
    chat: bool
    record_topk: int
    acceptance: str = "exact"
    auto_rule: str = "cost"
    confidence: float = 0.4
    ngram: int = 3
    tree: str = "3,2,1"  # static shape, or "dynamic"
    tree_budget: int = 16
    tree_depth: int = 6
    tree_width: int = 4
    lookahead_window: int = 5
    lookahead_pool: int = 5

    def options(self) -> dict:
        """Method options as recorded in run_started."""
        out = {"acceptance": self.acceptance}
        if self.k == "auto":
            out.update(auto_rule=self.auto_rule, confidence=self.confidence)
        if self.method in ("pld", "cascade", "lookahead"):
            out["ngram"] = self.ngram
        if self.method == "lookahead":
            out.update(window=self.lookahead_window, pool=self.lookahead_pool)
        if self.method == "tree":
            out["tree"] = self.tree
            if self.tree == "dynamic":
                out.update(tree_budget=self.tree_budget, tree_depth=self.tree_depth,
                           tree_width=self.tree_width)
        return out


MAX_TREE_NODES = 64
TREE_METHODS = ("tree", "lookahead")


def validate_lookahead(cfg: RunConfig, window, pool) -> dict:
    if cfg.method != "lookahead":
        return {}
    if not cfg.warp.greedy:
        raise InputError("lookahead decoding is greedy-only here: set temperature to 0.")
    if cfg.acceptance != "exact":
        raise InputError("lookahead verifies exactly; typical acceptance is for chains.")
    if not 2 <= cfg.ngram <= 8:
        raise InputError(f"lookahead needs an n-gram size from 2 to 8, got {cfg.ngram}.")
    for name, value, top in (("lookahead_window", window, 16), ("lookahead_pool", pool, 16)):
        if not _is_int(value) or not 1 <= value <= top:
            raise InputError(f"{name} must be a whole number from 1 to {top}, got {value!r}.")
    if window + pool * (cfg.ngram - 1) > MAX_TREE_NODES:
        raise InputError(f"lookahead's window plus pool candidates exceed {MAX_TREE_NODES} tokens per pass.")
    return dict(lookahead_window=window, lookahead_pool=pool)


def validate_tree(cfg: RunConfig, tree, budget, depth, width) -> dict:
    if cfg.method != "tree":
        return {}
    if cfg.acceptance != "exact":
        raise InputError("The tree method verifies exactly; typical acceptance is for chains.")
    if tree != "dynamic":
        try:
            shape = parse_shape(tree)
        except (TypeError, ValueError):
            shape = []
        nodes, level = 0, 1
        for b in shape:
            level *= b
            nodes += level
        if not shape or min(shape) < 1 or nodes > MAX_TREE_NODES:
            raise InputError(f"tree must be 'dynamic' or children per depth like '3,2,1' with at most "
                             f"{MAX_TREE_NODES} nodes in all, got {tree!r}.")
        tree = ",".join(map(str, shape))
    for name, value, top in (("tree_budget", budget, MAX_TREE_NODES), ("tree_depth", depth, MAX_K),
                             ("tree_width", width, 16)):
        if not _is_int(value) or not 1 <= value <= top:
            raise InputError(f"{name} must be a whole number from 1 to {top}, got {value!r}.")
    return dict(tree=tree, tree_budget=budget, tree_depth=depth, tree_width=width)


# ---------------------------------------------------------------------------------------------
# input checks

def validate(method, k, temperature, top_k, top_p, max_new_tokens, seed, record_topk, chat,
             acceptance="exact", auto_rule="cost", confidence=0.4, ngram=3) -> RunConfig:
    if method not in METHODS:
        raise InputError(f"Unknown method {method!r}: choose one of {', '.join(METHODS)}.")
    if k == "auto" and method not in AUTO_METHODS:
        raise InputError(f"k='auto' works with {', '.join(AUTO_METHODS)}; give {method} a number.")
    if k != "auto" and (not _is_int(k) or not 1 <= k <= MAX_K):
        raise InputError(f"k (draft length) must be a whole number from 1 to {MAX_K} or 'auto', got {k!r}.")
    if acceptance not in ACCEPTANCE:
        raise InputError(f"acceptance must be one of {', '.join(ACCEPTANCE)}, got {acceptance!r}.")
    if auto_rule not in RULES:
        raise InputError(f"auto_rule must be one of {', '.join(RULES)}, got {auto_rule!r}.")
    if not isinstance(confidence, (int, float)) or not 0.0 < confidence < 1.0:
        raise InputError(f"confidence must be between 0 and 1, got {confidence!r}.")
    if not _is_int(ngram) or not 1 <= ngram <= 8:
        raise InputError(f"ngram must be a whole number from 1 to 8, got {ngram!r}.")
    if not isinstance(temperature, (int, float)) or not math.isfinite(temperature) or temperature < 0:
        raise InputError(f"temperature must be 0 (greedy) or a positive number, got {temperature!r}.")
    if not _is_int(top_k) or top_k < 0:
        raise InputError(f"top_k must be 0 (off) or a positive whole number, got {top_k!r}.")
    if not isinstance(top_p, (int, float)) or not 0.0 < top_p <= 1.0:
        raise InputError(f"top_p must be in (0, 1], got {top_p!r}.")
    if not _is_int(max_new_tokens) or not 1 <= max_new_tokens <= MAX_NEW_TOKENS:
        raise InputError(f"max_new_tokens must be from 1 to {MAX_NEW_TOKENS}, got {max_new_tokens!r}.")
    if not _is_int(seed) or seed < 0:
        raise InputError(f"seed must be a non-negative whole number, got {seed!r}.")
    if not _is_int(record_topk) or not 0 <= record_topk <= MAX_TOPK:
        raise InputError(f"record_topk must be from 0 to {MAX_TOPK}, got {record_topk!r}.")
    k = 0 if method == "ar" else (None if method in TREE_METHODS else k)  # trees have no single k
    return RunConfig(method, k, Warp(float(temperature), int(top_k), float(top_p)),
                     int(max_new_tokens), int(seed), bool(chat), int(record_topk), acceptance,
                     auto_rule, float(confidence), int(ngram))


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
    config = getattr(pair.target, "config", None)
    return getattr(config, "vocab_size", None) or pair.target.vocab_size


def check_context(pair, n_prompt: int, cfg: RunConfig) -> None:
    lookahead = MAX_TREE_NODES if cfg.method in TREE_METHODS else (MAX_K if cfg.k == "auto" else cfg.k)
    need = n_prompt + cfg.max_new_tokens + lookahead + 1
    if need > pair.context_length:
        raise InputError(f"The prompt ({n_prompt} tokens) plus max_new_tokens ({cfg.max_new_tokens}) "
                         f"does not fit the {pair.context_length}-token context of {pair.name}: "
                         "shorten the prompt or ask for fewer tokens.")
