"""What both engines share: the checked config of a run, the method's drafter and verifier, the
decoding clock and a sequence's run_started event. The single-sequence engine (`specviz.engine`)
and the batched one (`specviz.batch`) import these from here, so neither imports the other's
internals (engine dispatches to batch; batch never imports engine).
"""

from __future__ import annotations

import time
from typing import Optional

from specviz import events as ev
from specviz.config import HEAD_METHODS, LLAMACPP_METHODS, MAX_TREE_NODES, TREE_METHODS, RunConfig, vocab_size
from specviz.drafters import (CascadeDrafter, LookaheadDrafter, ModelDrafter, NoDrafter, PromptLookupDrafter,
                              TreeDrafter)
from specviz.errors import InputError
from specviz.lm import cuda_graphs_on
from specviz.tree import parse_shape
from specviz.verifiers import TypicalVerifier, default_verifier


def is_batch(prompt) -> bool:
    """A list of prompts (texts, or token-id lists) rather than one prompt (a text or token ids)."""
    return isinstance(prompt, (list, tuple)) and len(prompt) > 0 and all(
        isinstance(p, (str, list, tuple)) for p in prompt)


def config_of(config, overrides: dict) -> RunConfig:
    if config is None:
        return RunConfig.of(**overrides)
    if not isinstance(config, RunConfig):
        raise InputError(f"config must be a specviz.config.RunConfig, got {type(config).__name__}.")
    return config.replace(**overrides)


def check_backend_method(backend: str, cfg: RunConfig, batch: bool = False) -> None:
    """A pair run by llama.cpp (specviz.llamacpp) runs chains, one sequence at a time: tree
    attention, the target's hidden states (Medusa, EAGLE) and batched rows are PyTorch's."""
    if backend != "llama.cpp":
        return
    if cfg.method not in LLAMACPP_METHODS:
        raise InputError(f"method={cfg.method!r} needs PyTorch (tree attention or the target's hidden states); "
                         f"on llama.cpp choose one of {', '.join(LLAMACPP_METHODS)}.")
    if batch or cfg.batch > 1 or cfg.k == "load":
        raise InputError("Batched runs are PyTorch's; on llama.cpp decode one prompt at a time.")


def stop_tokens(pair, cfg: RunConfig) -> tuple:
    """The tokens that end a run: the pair's end of text, or none with ignore_eos (the run then
    always emits max_new_tokens, as a race of two sampled lanes needs to time one workload)."""
    return () if cfg.ignore_eos else tuple(pair.eos_token_ids)


def make_drafter(pair, cfg: RunConfig, policy=None):
    eos = stop_tokens(pair, cfg)
    if cfg.method == "spec":
        return ModelDrafter(pair.draft, eos, policy.stop_below if policy else None)
    if cfg.method == "pld":
        return PromptLookupDrafter(vocab_size(pair), pair.device, cfg.ngram)
    if cfg.method == "cascade":
        return CascadeDrafter(pair.draft, eos, cfg.ngram)
    if cfg.method == "lookahead":
        return LookaheadDrafter(cfg.lookahead_window, cfg.ngram, cfg.lookahead_pool)
    if cfg.method == "tree":
        dynamic = cfg.tree == "dynamic"
        return TreeDrafter(pair.draft, eos, () if dynamic else parse_shape(cfg.tree), dynamic,
                           cfg.tree_budget, cfg.tree_depth, cfg.tree_width, _sizer(pair, cfg) if dynamic else None)
    if cfg.method in HEAD_METHODS:
        return _heads_drafter(pair, cfg, eos)
    return NoDrafter()


def _heads_drafter(pair, cfg: RunConfig, eos):
    from specviz.drafters.heads import EagleDrafter, MedusaDrafter, ParallelEagleDrafter
    from specviz.heads import heads_for

    kind = HEAD_METHODS[cfg.method]
    heads = heads_for(pair, kind, cfg.heads or None)
    bound = heads.bind(pair.target)
    if kind in ("eagle", "eagle3"):
        if cfg.method in ("eagle", "eagle3"):
            return EagleDrafter(bound, eos, chain_k=cfg.k)
        return EagleDrafter(bound, eos, dynamic=True, budget=cfg.tree_budget, depth=cfg.tree_depth,
                            width=cfg.tree_width, sizer=_sizer(pair, cfg))
    if kind == "peagle":
        return ParallelEagleDrafter(bound, eos, chain_k=cfg.k)
    shape = [1] * cfg.k if cfg.method == "medusa" else parse_shape(cfg.tree)
    if len(shape) > heads.depth:
        what = f"k={cfg.k}" if cfg.method == "medusa" else f"a tree {len(shape)} deep"
        raise InputError(f"These Medusa heads draft at most {heads.depth} tokens deep (one per head), "
                         f"so {what} is too deep: use at most {heads.depth}.")
    if cfg.method == "medusa":
        return MedusaDrafter(bound, eos, chain_k=cfg.k)
    return MedusaDrafter(bound, eos, shape=shape)


def _sizer(pair, cfg: RunConfig):
    """tree_budget="auto": a dynamic tree sized each step to this machine's pass costs, measured
    here on a model's first such run (seconds on a CPU), before the run's clock starts."""
    if cfg.tree_budget != "auto":
        return None
    from specviz.treesize import TreeSizer

    sizer = TreeSizer(pair.target, MAX_TREE_NODES)
    sizer.curve()
    return sizer


def make_verifier(cfg: RunConfig):
    if cfg.acceptance == "typical":
        return TypicalVerifier()
    if cfg.method in TREE_METHODS:
        return default_verifier(cfg.warp, "greedy tree" if cfg.warp.greedy else "multi-draft rejection")
    return default_verifier(cfg.warp)


class Clock:
    """Wall and CPU seconds of the decoding thread since `start()`. Time a consumer spends
    holding an event (rendering, sending, another engine's turn in a race) is left out."""

    def start(self) -> None:
        self.t0, self.cpu0 = time.perf_counter(), time.thread_time()

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def cpu(self) -> float:
        return time.thread_time() - self.cpu0

    def pause(self) -> tuple:
        return time.perf_counter(), self.cpu()

    def resume(self, paused: tuple) -> None:
        wall, cpu = paused
        self.t0 += time.perf_counter() - wall
        self.cpu0 = time.thread_time() - cpu  # a server may resume the run on another thread


def started_event(pair, cfg: RunConfig, prompt: str, prompt_ids: list, verifier, drafter: str,
                  seed: Optional[int] = None, row: Optional[int] = None) -> ev.RunStarted:
    """The run_started of one sequence (a batched run has one per row, with the row's seed)."""
    return ev.RunStarted(
        pair=pair.name, method=cfg.method, k=cfg.draft_k, temperature=cfg.warp.temperature,
        top_k=cfg.warp.top_k, top_p=cfg.warp.top_p, max_new_tokens=cfg.max_new_tokens,
        seed=cfg.seed if seed is None else seed, chat=cfg.chat, prompt=prompt, prompt_ids=list(prompt_ids),
        prompt_texts=[pair.token_text(t) for t in prompt_ids], device=str(pair.device),
        dtype=pair.weights or str(pair.dtype).replace("torch.", ""), rule=verifier.name,
        lossless=bool(verifier.lossless), eos_token_ids=sorted(set(stop_tokens(pair, cfg))),
        drafter=drafter, options=cfg.options(),
        draft_quant=pair.draft_quant, cpu_linear=pair.cpu_linear, target_quant=pair.target_quant,
        cuda_graphs=cuda_graphs_on(pair.target), backend=pair.backend, row=row)
