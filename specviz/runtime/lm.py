"""A model plus its KV cache, behind the calls the engine needs (`Runner`): forward, crop, keep, reset.

The cache always holds a prefix of the committed sequence. After each step the engine crops
it back to the accepted prefix by position (no copying, no re-running the prefix), as in
gpt-fast. Hugging Face models run as `CachedLM` (or `GraphLM` under CUDA graphs); any other
model brings its own runner through `make_runner()`, as llama.cpp's (specviz.runtime.llamacpp.runner)
and the exact toy tables (specviz.teaching.toy) do.
"""

from __future__ import annotations

import time
from typing import Protocol

import torch

from specviz.errors import InputError


class Runner(Protocol):
    """What the engine asks of a model's runner (`runner_for(model)`); `CachedLM` documents each call."""

    length: int  # tokens held in the cache: always a prefix of the committed sequence (plus, mid-step, the fed tree)
    device: object

    def forward(self, ids: list, last_only: bool = False, attend=None, positions=None, keep: int = 0,
                hidden=False):
        """Feed `ids` after the cache: float32 logits (T, V) (the last `keep` rows, or (1, V) if
        `last_only`); with `hidden`, (logits, states) as well; `attend`/`positions`: a tree's mask."""

    def crop(self, length: int) -> None:
        """Keep the first `length` cached tokens."""

    def keep(self, linear: int, slots: list) -> None:
        """Keep the first `linear` cached tokens and the entries at `slots`, in order (a tree step's path)."""

    def reset(self) -> None:
        """Empty the cache."""


class CachedLM:
    """A Hugging Face causal LM with a DynamicCache; `length` = tokens held in the cache."""

    def __init__(self, model):
        self.model = model
        self.device = model.device
        self.reset()

    def reset(self) -> None:
        from transformers import DynamicCache

        self.cache = DynamicCache(config=self.model.config)
        self.length = 0

    @torch.inference_mode()
    def forward(self, ids: list, last_only: bool = False, attend=None, positions=None,
                keep: int = 0, hidden=False):
        """Feed `ids` after the cache; return float32 logits (T, V), only the last `keep` rows
        if keep > 0 (the output head is then applied to those rows only), (1, V) if last_only.

        For tree attention, `attend` is the (T, length + T) bool mask of what each fed token may
        see and `positions` their position ids (see specviz.verifiers.draft_tree.attention).

        hidden=True returns (logits, states): also the last hidden state of every fed token (T, d),
        what the output head reads, in the model's dtype. Drafters that read the target's
        features (Medusa heads, EAGLE) get them from the verification pass this way. hidden=a
        tuple of layer indices (EAGLE-3) returns states (T, len + 1, d): the inputs of those
        decoder layers (transformers' hidden_states numbering), then the last hidden state.
        """
        input_ids = torch.tensor([ids], dtype=torch.long, device=self.device)  # (1, T)
        extra = {}
        if attend is not None:
            extra["attention_mask"] = attend.to(self.device)[None, None]  # (1, 1, T, length + T)
            extra["position_ids"] = torch.tensor([positions], dtype=torch.long, device=self.device)
        rows = 1 if last_only else keep
        if hidden:
            self.length += len(ids)
            return forward_with_states(self.model, input_ids, self.cache, rows, extra, hidden)
        out = self.model(input_ids=input_ids, past_key_values=self.cache, use_cache=True,
                         logits_to_keep=rows, **extra)
        self.length += len(ids)
        return out.logits[0].float()  # (T, V)

    def crop(self, length: int) -> None:
        """Keep the first `length` cached tokens."""
        if length < self.length:
            self.cache.crop(length - self.length)  # this transformers takes a negative count
            self.length = length

    def keep(self, linear: int, slots: list) -> None:
        """Keep the first `linear` cached tokens and the tree nodes at cache columns `slots`
        (in order): after a tree step, only the accepted path stays."""
        index = torch.tensor(list(range(linear)) + list(slots), dtype=torch.long, device=self.device)
        for layer in self.cache.layers:
            if getattr(layer, "keys", None) is not None and layer.keys.numel():
                layer.keys = layer.keys.index_select(-2, index)
                layer.values = layer.values.index_select(-2, index)
        self.length = len(index)


def forward_with_states(model, input_ids, cache, rows: int, extra: dict, layers=True) -> tuple:
    """The model's forward split in two, as the model itself runs it: the decoder over the cache,
    then the output head on the last `rows` rows (all if 0). Returns (float32 logits, the decoder's
    last hidden state of every fed token (T, d)); with `layers` a tuple of layer indices, the states
    are (T, len(layers) + 1, d): the inputs of those layers, then the last hidden state."""
    out = model.get_decoder()(input_ids=input_ids, past_key_values=cache, use_cache=True,
                              output_hidden_states=isinstance(layers, tuple), **extra)
    states = out.last_hidden_state[0]
    logits = model.get_output_embeddings()(states[-rows:] if rows else states).float()
    if isinstance(layers, tuple):
        states = torch.stack([out.hidden_states[i][0] for i in layers] + [states], dim=1)
    return logits, states


GRAPH_MAX_TOKENS = 16  # feeds of more tokens (a prefill, a catch-up after a long accept) run eagerly


class _GraphState:
    """A static KV cache and the CUDA graphs captured over it: one graph per (tokens fed, rows
    kept) shape, all in one memory pool. Held by one run at a time (see `GraphLM`)."""

    def __init__(self, model, max_len: int):
        from transformers import StaticCache

        self.cache = StaticCache(config=model.config, max_cache_len=max_len)
        self.max_len = max_len
        self.graphs: dict = {}
        self.pool = torch.cuda.graph_pool_handle()
        self.busy = False


class GraphLM:
    """CachedLM's interface over a static KV cache whose few-token forwards replay CUDA graphs.

    At batch 1 a GPU forward of a 0.5B-7B model is bound by launching its few hundred kernels
    from Python, not by the GPU: the 0.5B draft then costs nearly what a 1.5B or 7B target does
    (docs/benchmarks/suite.md, GPU mode), and speculation cannot pay. A CUDA graph replays the
    recorded kernels in one launch. The cache is transformers' StaticCache,
    whose fill level is a device tensor (`cumulative_length`) that the graphs read and advance,
    so crop() is one `fill_` per layer and nothing leaves the GPU.

    Graphs are captured lazily, per (tokens fed, rows kept), the first time a shape is seen
    (two warm-up passes on a side stream, then the capture); feeds over GRAPH_MAX_TOKENS tokens
    and tree-attention passes run eagerly over the same static cache. The state (cache and
    graphs) belongs to the model and is lent to one runner at a time; a runner gives it back
    when it is dropped, so a second concurrent run (the app's race) gets a state of its own.
    """

    def __init__(self, model, max_len: int):
        import weakref

        self.model, self.device = model, model.device
        states = model.__dict__.setdefault("_specviz_graph_states", [])
        state = next((s for s in states if not s.busy), None)
        if state is None:
            state = _GraphState(model, max_len)
            states.append(state)
        state.busy = True
        weakref.finalize(self, _release, state)
        self.state, self.cache = state, state.cache
        self.reset()

    def reset(self) -> None:
        self._set_length(0)

    @torch.inference_mode()  # the cache's tensors were made in inference mode
    def _set_length(self, n: int) -> None:
        for layer in self.cache.layers:
            if getattr(layer, "is_initialized", False):
                layer.cumulative_length.fill_(n)  # on the device: no sync
            else:
                layer.cumulative_length = torch.tensor(n, dtype=torch.long)
        self.length = n

    @torch.inference_mode()
    def forward(self, ids: list, last_only: bool = False, attend=None, positions=None,
                keep: int = 0, hidden=False):
        """As CachedLM.forward. A pass that returns hidden states (for Medusa / EAGLE drafters)
        runs eagerly over the static cache: the graphs capture the logits only."""
        n, rows = len(ids), 1 if last_only else keep
        if self.length + n > self.state.max_len:
            raise InputError(f"The CUDA-graph runner holds {self.state.max_len} tokens; this run needs more: "
                             "use a shorter prompt or fewer new tokens, or run without CUDA graphs.")
        input_ids = torch.tensor([ids], dtype=torch.long, device=self.device)  # (1, T)
        if hidden or attend is not None or n > GRAPH_MAX_TOKENS or not self._initialized():
            extra = {}
            if attend is not None:  # tree attention: the mask covers the whole static cache
                mask = torch.zeros((n, self.state.max_len), dtype=torch.bool, device=self.device)
                mask[:, :self.length + n] = attend.to(self.device)
                extra = {"attention_mask": mask[None, None],
                         "position_ids": torch.tensor([positions], dtype=torch.long, device=self.device)}
            if hidden:
                self.length += n
                return forward_with_states(self.model, input_ids, self.cache, rows, extra, hidden)
            out = self.model(input_ids=input_ids, past_key_values=self.cache, use_cache=True,
                             logits_to_keep=rows, **extra).logits
        else:
            graph, static_ids, out = self._graph(n, rows, input_ids)
            static_ids.copy_(input_ids)
            graph.replay()
        self.length += n
        return out[0].to(torch.float32, copy=True)  # (T, V); the graph's output is overwritten next replay

    def _initialized(self) -> bool:
        return all(getattr(layer, "is_initialized", False) for layer in self.cache.layers)

    def _graph(self, n: int, rows: int, input_ids):
        key = (n, rows)
        if key not in self.state.graphs:
            static_ids = input_ids.clone()
            length = self.length
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):
                for _ in range(2):  # warm-up: lazy allocations and kernel choices happen outside the capture
                    self.model(input_ids=static_ids, past_key_values=self.cache, use_cache=True,
                               logits_to_keep=rows)
                    self._set_length(length)
            torch.cuda.current_stream(self.device).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            # thread_local: another thread's CUDA work (SSD's drafter on its own stream) does not
            # break this capture
            with torch.cuda.graph(graph, pool=self.state.pool, capture_error_mode="thread_local"):
                out = self.model(input_ids=static_ids, past_key_values=self.cache, use_cache=True,
                                 logits_to_keep=rows).logits
            self._set_length(length)  # the capture recorded the update without running it
            self.state.graphs[key] = (graph, static_ids, out)
        return self.state.graphs[key]

    def crop(self, length: int) -> None:
        if length < self.length:
            self._set_length(length)

    @torch.inference_mode()
    def keep(self, linear: int, slots: list) -> None:
        """As CachedLM.keep: move the accepted path's entries to follow the first `linear`."""
        index = torch.tensor(list(slots), dtype=torch.long, device=self.device)
        for layer in self.cache.layers:
            if getattr(layer, "is_initialized", False) and len(slots):
                layer.keys[:, :, linear:linear + len(slots)] = layer.keys.index_select(2, index)
                layer.values[:, :, linear:linear + len(slots)] = layer.values.index_select(2, index)
        self._set_length(linear + len(slots))


def _release(state: _GraphState) -> None:
    state.busy = False


def use_cuda_graphs(model, max_len: int = 1024) -> None:
    """From now on `runner_for(model)` gives a GraphLM holding up to `max_len` tokens (CUDA only)."""
    if torch.device(model.device).type != "cuda":
        raise InputError(f"CUDA graphs need a CUDA device; this model is on {model.device}.")
    model._specviz_graph_len = int(max_len)


def cuda_graphs_on(model) -> bool:
    """Whether `use_cuda_graphs(model)` was called: its runs replay CUDA graphs."""
    return getattr(model, "_specviz_graph_len", None) is not None


def runner_for(model) -> Runner:
    """The cached runner of a model: a model with `make_runner()` brings its own (llama.cpp's, the
    toy tables), HF models get a CachedLM, or a GraphLM after `use_cuda_graphs(model)`."""
    make = getattr(model, "make_runner", None)
    if make is not None:
        return make()
    graph_len = getattr(model, "_specviz_graph_len", None)
    return GraphLM(model, graph_len) if graph_len else CachedLM(model)


def synchronize(device) -> None:
    """Wait for the calling thread's queued GPU work (its current stream) so wall-clock timings
    measure compute, not launches; work another thread queued on another stream (SSD's drafter,
    specviz.drafters.ssd) is not waited for."""
    if torch.device(device).type == "cuda":
        torch.cuda.current_stream(device).synchronize()


AUTO_GRAPH_LEN = 4096  # tokens a run may hold when graphs were chosen automatically (the app's prompt and output caps fit)


@torch.inference_mode()
def choose_cuda_graphs(model, max_len: int = AUTO_GRAPH_LEN, repeats: int = 5) -> str:
    """On CUDA, time a one-token forward launched eagerly and replayed as a CUDA graph (best of
    `repeats`, after a warm-up and the capture) and keep graphs on for `model` when they were
    faster. Returns one line saying what was measured and chosen.

    Whether graphs pay depends on the GPU, the model and the host: where launching from Python
    is the bottleneck (small models at batch 1) they do, by a wide margin; a measurement rather
    than a rule keeps a GPU where they would not from paying for their fixed cache."""
    ids = list(range(10, 42))
    costs = {}
    for name in ("eager", "graph"):
        runner = CachedLM(model) if name == "eager" else GraphLM(model, max_len)
        runner.forward(ids[:16], last_only=True)
        best = float("inf")
        for r in range(repeats + 2):  # rounds 0-1: first forwards and the graph's capture
            synchronize(runner.device)
            start = time.perf_counter()
            runner.forward(ids[16:17], last_only=True)
            synchronize(runner.device)
            if r >= 2:
                best = min(best, time.perf_counter() - start)
            runner.crop(16)
        costs[name] = best * 1e3
        del runner  # a GraphLM gives its cache and graphs back to the model for later runs
    chosen = costs["graph"] < costs["eager"]
    if chosen:
        use_cuda_graphs(model, max_len)
    return (f"CUDA graphs {'on' if chosen else 'off'}: a one-token forward took {costs['graph']:.1f} ms "
            f"replayed as a graph vs {costs['eager']:.1f} ms launched eagerly")
