"""What both engines share: the checked config of a run, the method's drafter and verifier, the
decoding clock and a sequence's run_started event. The single-sequence engine (`specviz.engine.sequence`)
and the batched one (`specviz.engine.batch`) import these from here, so neither imports the other's
internals (engine dispatches to batch; batch never imports engine).
"""

from __future__ import annotations

import time
from typing import Optional

from specviz import events as ev, methods
from specviz.config import RunConfig, option
from specviz.errors import InputError
from specviz.runtime.lm import cuda_graphs_on
from specviz.verifiers.exact import default_verifier
from specviz.verifiers.typical import TypicalVerifier


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
    """A pair run by llama.cpp (specviz.runtime.llamacpp.runner) runs chains, one sequence at a time: tree
    attention, the target's hidden states (Medusa, EAGLE) and batched rows are PyTorch's."""
    if backend != "llama.cpp":
        return
    if not methods.get(cfg.method).llamacpp:
        raise InputError(f"{option('method', cfg.method)} needs PyTorch (tree attention or the target's hidden states); "
                         f"on llama.cpp choose one of {', '.join(methods.names(llamacpp=True))}.")
    if batch or cfg.batch > 1 or cfg.k == "load":
        raise InputError("Batched runs are PyTorch's; on llama.cpp decode one prompt at a time.")


def stop_tokens(pair, cfg: RunConfig) -> tuple:
    """The tokens that end a run: the pair's end of text, or none with ignore_eos (the run then
    always emits max_new_tokens, as a race of two sampled lanes needs to time one workload)."""
    return () if cfg.ignore_eos else tuple(pair.eos_token_ids)


def make_drafter(pair, cfg: RunConfig, policy=None):
    """The method's drafter, as its record in specviz.methods builds it."""
    return methods.get(cfg.method).drafter(pair, cfg, stop_tokens(pair, cfg), policy)


def make_verifier(cfg: RunConfig):
    if cfg.acceptance == "typical":
        return TypicalVerifier()
    if methods.get(cfg.method).tree:
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
