"""llama.cpp under specviz's engine: the same GGUF files, run by the kernels laptops use.

On a laptop these models run in llama.cpp (directly, or through Ollama and LM Studio). This
module loads GGUF files into llama.cpp through its C API (the `llama_cpp` ctypes binding of
llama-cpp-python) and gives each model the runner interface of `specviz.runtime.lm.CachedLM`; which
files (the pair's own packaged ones, no second download) is `specviz.runtime.models`'s business
(`load_pair(..., backend="llama.cpp")`, `gguf_file`):

    forward(ids, keep=n)  one llama_decode over `ids` after the cache, logits at the last n rows
    crop(length)          llama_memory_seq_rm: rejected positions leave the KV cache
    reset()               an empty cache

so `specviz.generate` runs its exact algorithm (draft, one verification pass over k + 1 tokens,
the rejection rule, the residual, the bonus) over llama.cpp's forward passes, with the same
events as every other run. Chains only (the methods with `llamacpp=True` in specviz.methods).

The drafters that read the target's own states (Medusa, EAGLE, EAGLE-3, P-EAGLE, DFlash) get
them from the same verification pass, as on PyTorch: forward(..., hidden=...) also returns the
inputs of the asked layers (llama.cpp's `llama_get_embeddings_layer_inp`, which the binding does
not bind: `LayerInputs` binds it beside the binding's own calls) and the last hidden state after
the final norm (`llama_get_embeddings`). Qwen2's graph hands out its layer inputs only with
specviz's patch (build.py applies it; `states_problem` says when the llama.cpp here lacks it),
and the heads read the target's token embeddings and output head, de-quantised from the GGUF
(`TableRows`).

llama.cpp is optional. `python -m specviz llamacpp install` (or `make llamacpp`) builds it
from the llama-cpp-python source package on PyPI (no downloaded binaries) into
`<environment>/llama.cpp/` (its libraries and llama-server) and installs the binding without a
second build; a llama-cpp-python installed some other way works too (then its own library).
"""

from __future__ import annotations

import ctypes
import logging
import os
import re
import shutil
import sys
import threading
import weakref
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from specviz import methods
from specviz.errors import InputError, PairError

VERSION = "0.3.36"  # llama-cpp-python, and the llama.cpp it vendors
INSTALL_HINT = "`python -m specviz llamacpp install` (or `make llamacpp`)"  # as a message says it
N_CTX = 4096  # tokens one context holds: the app's prompt and output caps fit
N_BATCH = 512  # tokens one llama_decode takes; a longer prompt is fed in slices


class LlamaCppMissing(PairError):
    """llama.cpp (the binding or its library) is not installed."""


def home() -> Path:
    """Where `python -m specviz llamacpp install` puts llama.cpp's shared libraries and
    llama-server, side by side: $SPECVIZ_LLAMACPP, else <this Python environment>/llama.cpp."""
    return Path(os.environ.get("SPECVIZ_LLAMACPP") or Path(sys.prefix) / "llama.cpp")


_LIB = None


def binding():
    """The `llama_cpp` module, its backend started and its log quiet; pointed at specviz's own
    build of llama.cpp when there is one (LLAMA_CPP_LIB_PATH)."""
    global _LIB
    if _LIB is not None:
        return _LIB
    if "LLAMA_CPP_LIB_PATH" not in os.environ and any(home().glob("*llama.*")):
        os.environ["LLAMA_CPP_LIB_PATH"] = str(home())
    try:
        import llama_cpp
    except (ImportError, OSError, RuntimeError, FileNotFoundError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise LlamaCppMissing(f"llama.cpp is not installed ({first}): run {INSTALL_HINT}, "
                              "which builds it from source in a few minutes.") from None
    llama_cpp.llama_backend_init()
    # the binding prints llama.cpp's log to stderr, every load's warnings among them (its table of log
    # levels predates ggml's current one and files warnings as errors); failures reach specviz as
    # return codes, each turned into a sentence, so the log stays quiet
    logging.getLogger("llama-cpp-python").setLevel(logging.CRITICAL)
    _LIB = llama_cpp
    return _LIB


def available() -> Optional[str]:
    """None when llama.cpp can run here, else why not (one sentence)."""
    try:
        binding()
    except LlamaCppMissing as exc:
        return str(exc)
    return None


def server_binary() -> Optional[Path]:
    """llama.cpp's own server (for its own speculation and the watcher), if built or on PATH."""
    built = home() / ("llama-server.exe" if os.name == "nt" else "llama-server")
    if built.exists():
        return built
    found = shutil.which("llama-server")
    return Path(found) if found else None


def default_threads() -> int:
    """One thread per core this process may use (llama.cpp's own default), or $OMP_NUM_THREADS
    where it is set (as PyTorch's kernels would: two test workers share the cores)."""
    omp = os.environ.get("OMP_NUM_THREADS", "")
    if omp.isdigit() and int(omp) > 0:
        return int(omp)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS, Windows
        return max(1, os.cpu_count() or 1)


STAMP = "specviz-build.txt"  # in home(), written by build.py: what was built, from what, with which patches


def patched(name: str, where: Optional[Path] = None) -> bool:
    """Whether the llama.cpp built in `where` (default: home()) has the patch `name` applied, by its
    build record; False for a llama.cpp built some other way (no record)."""
    record = (where or home()) / STAMP
    if not record.exists():
        return False
    return any(line.startswith(f"patch {name} ") for line in record.read_text().splitlines())


def states_problem() -> Optional[str]:
    """None when this llama.cpp hands out a Qwen2 target's layer inputs, else why not (one
    sentence). Without specviz's patch, llama.cpp aborts the whole process when asked for them."""
    if not patched(LAYER_INPUTS_PATCH):
        return (f"the llama.cpp here was not built with specviz's {LAYER_INPUTS_PATCH} (Qwen2 targets then cannot "
                f"hand out their layer inputs): build it again with {INSTALL_HINT}")
    return None


LAYER_INPUTS_PATCH = "0001-qwen2-layer-inputs.patch"


class LayerInputs:
    """llama.cpp's extended calls for a target's layer inputs, which llama-cpp-python does not
    bind (they are exported by libllama, declared in its src/llama-ext.h):

        void    llama_set_embeddings_layer_inp(llama_context *, uint32_t layer, bool on)
        float * llama_get_embeddings_layer_inp(llama_context *, uint32_t layer)

    The getter returns the inputs of that layer (the residual stream before its norm:
    transformers' hidden_states[layer]) for every token of the last decode, in batch order.
    llama-ext.h declares them without extern "C", so the library exports C++ names: looked up as
    C, then as GCC/Clang (Itanium) and MSVC mangle them."""

    NAMES = {"set": ("llama_set_embeddings_layer_inp", "_Z30llama_set_embeddings_layer_inpP13llama_contextjb",
                     "?llama_set_embeddings_layer_inp@@YAXPEAUllama_context@@I_N@Z"),
             "get": ("llama_get_embeddings_layer_inp", "_Z30llama_get_embeddings_layer_inpP13llama_contextj",
                     "?llama_get_embeddings_layer_inp@@YAPEAMPEAUllama_context@@I@Z")}

    def __init__(self, lib):
        cdll = lib.llama_cpp._lib
        self.set = self._find(cdll, "set")
        self.set.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_bool]
        self.set.restype = None
        self.get = self._find(cdll, "get")
        self.get.argtypes = [ctypes.c_void_p, ctypes.c_uint32]
        self.get.restype = ctypes.POINTER(ctypes.c_float)

    def _find(self, cdll, which: str):
        for name in self.NAMES[which]:
            try:
                return getattr(cdll, name)
            except AttributeError:
                continue
        raise LlamaCppMissing(f"This llama.cpp library has no {self.NAMES[which][0]} (it is older than "
                              f"llama-cpp-python {VERSION}'s): build it with {INSTALL_HINT}.")


_LAYER_INPUTS = None


def layer_inputs() -> LayerInputs:
    global _LAYER_INPUTS
    if _LAYER_INPUTS is None:
        _LAYER_INPUTS = LayerInputs(binding())
    return _LAYER_INPUTS


class TableRows(torch.nn.Module):
    """A (rows, d) table of the GGUF file (the token embeddings, or the output head), de-quantised
    once and kept in bfloat16 (half the float32 size); `weight` is the table, calling it with ids
    gives their rows in float32. The heads read the target's embedding and output head through it,
    as they read the PyTorch target's `get_input_embeddings()` and `get_output_embeddings()`."""

    def __init__(self, weight: torch.Tensor):
        super().__init__()
        self.weight = torch.nn.Parameter(weight, requires_grad=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.weight.index_select(0, ids.reshape(-1)).reshape(*ids.shape, -1).float()


def gguf_reader(path, mode: str = "r"):
    """gguf's reader of the file at `path`, over a plain ndarray view of its memory map (no copy):
    slicing a np.memmap builds a memmap object per field part, millions of them for Qwen's 151k-token
    vocabulary and merges, which made parsing the metadata cost more than de-quantising the weights."""
    import numpy as np
    from gguf.gguf_reader import GGUFReader  # the class itself (_gguf_parsed_once swaps gguf.GGUFReader)

    class PlainViewReader(GGUFReader):
        @property
        def data(self):
            return self._plain

        @data.setter
        def data(self, value):
            self._plain = value.view(np.ndarray) if isinstance(value, np.memmap) else value

    return PlainViewReader(path, mode)


def gguf_tables(path: Path, names: tuple) -> dict:
    """The tensors `names` of the GGUF at `path` that it has, de-quantised to bfloat16 (rows,
    columns), by name (one without an output head ties it to the token embeddings)."""
    from gguf.quants import dequantize

    found = {}
    for tensor in gguf_reader(path).tensors:
        if tensor.name in names:
            rows = dequantize(tensor.data, tensor.tensor_type)
            found[tensor.name] = torch.from_numpy(rows.reshape(-1, rows.shape[-1])).to(torch.bfloat16)
    return found


class LlamaCppModel:
    """One GGUF file loaded by llama.cpp (CPU), in the role of a Pair's target or draft.

    Contexts (each with its own KV cache) are lent to runners and come back when a runner is
    dropped, so consecutive runs reuse them and concurrent ones (a race) get their own."""

    device = torch.device("cpu")
    dtype = torch.float32  # of the logits handed to the engine; the weights are the file's type
    generation_config = None  # specviz.runtime.weights.eos_ids reads the tokenizer's and llama.cpp's EOS

    def __init__(self, path: Path, threads: Optional[int] = None, n_ctx: int = N_CTX):
        lib = binding()
        params = lib.llama_model_default_params()
        params.n_gpu_layers = 0
        self._ptr = lib.llama_model_load_from_file(str(path).encode(), params)
        if not self._ptr:
            raise PairError(f"llama.cpp could not load {path}: is it a whole GGUF file?")
        weakref.finalize(self, lib.llama_model_free, self._ptr)  # contexts' finalizers, made later, run first
        self.path, self.threads, self.n_ctx = Path(path), threads or default_threads(), n_ctx
        self._vocab = lib.llama_model_get_vocab(self._ptr)
        self.vocab_size = lib.llama_vocab_n_tokens(self._vocab)
        buf = ctypes.create_string_buffer(256)
        lib.llama_model_desc(self._ptr, buf, len(buf))
        self.desc = buf.value.decode(errors="replace")  # e.g. "qwen2 1.5B Q4_K - Medium"
        self.bytes = int(lib.llama_model_size(self._ptr))
        self.n_layers = lib.llama_model_n_layer(self._ptr)
        self.hidden_size = lib.llama_model_n_embd(self._ptr)
        self._contexts: list = []
        self._lock = threading.Lock()
        self._tables: dict = {}
        self._tables_lock = threading.Lock()

    # the heads (specviz.runtime.head_nets) read these as they read a transformers model's
    def get_input_embeddings(self) -> TableRows:
        return self._tables_of()["token_embd.weight"]

    def get_output_embeddings(self) -> TableRows:
        """The output head: its own tensor, or the token embeddings where the file ties them."""
        tables = self._tables_of()
        return tables.get("output.weight", tables["token_embd.weight"])

    def _tables_of(self) -> dict:
        """The token embeddings and the output head, de-quantised from the file once (seconds)."""
        with self._tables_lock:
            if not self._tables:
                found = gguf_tables(self.path, ("token_embd.weight", "output.weight"))
                if "token_embd.weight" not in found:
                    raise PairError(f"{self.path.name} has no token embeddings (token_embd.weight).")
                self._tables = {name: TableRows(weight) for name, weight in found.items()}
            return self._tables

    @property
    def eog_ids(self) -> list:
        lib = binding()
        return [t for t in (lib.llama_vocab_eos(self._vocab), lib.llama_vocab_eot(self._vocab)) if t >= 0]

    def make_runner(self) -> "LlamaCppRunner":
        return LlamaCppRunner(self)

    def _lend(self, states: tuple = ()):
        """A context that is not in use, made to hand out `states` (layer indices, then "last" for
        the last hidden state) with every decode, or none when empty: what a context extracts is
        fixed when it is made (switching reserves llama.cpp's compute buffers again)."""
        with self._lock:  # two sessions of the app may start runs at once
            for entry in self._contexts:
                if not entry["busy"] and entry["states"] == states:
                    entry["busy"] = True
                    return entry
            return self._new_context(states)

    def _new_context(self, states: tuple = ()) -> dict:
        lib = binding()
        params = lib.llama_context_default_params()
        params.n_ctx, params.n_batch, params.n_ubatch = self.n_ctx, N_BATCH, N_BATCH
        params.n_threads = params.n_threads_batch = self.threads
        params.no_perf = True
        ctx = lib.llama_init_from_model(self._ptr, params)
        if not ctx:
            raise PairError(f"llama.cpp could not make a {self.n_ctx}-token context for {self.path.name} "
                            "(out of memory?).")
        entry = {"ctx": ctx, "busy": True, "batch": lib.llama_batch_init(N_BATCH, 0, 1), "states": states}
        for layer in states:
            if layer == "last":
                lib.llama_set_embeddings(ctx, True)  # the last hidden state (after the final norm) of each output row
            else:
                layer_inputs().set(ctx, int(layer), True)
        entry["free"] = weakref.finalize(self, _free_context, lib, ctx, entry["batch"])
        self._contexts.append(entry)
        return entry

    def __repr__(self) -> str:
        return f"LlamaCppModel({self.path.name!r}, {self.desc!r}, threads={self.threads})"


def _free_context(lib, ctx, batch) -> None:
    lib.llama_batch_free(batch)
    lib.llama_free(ctx)


def _give_back(entry: dict) -> None:
    entry["busy"] = False


class LlamaCppRunner:
    """`specviz.runtime.lm.CachedLM`'s interface over one llama.cpp context: the KV cache holds
    positions 0..length-1 of sequence 0."""

    def __init__(self, model: LlamaCppModel, states: tuple = ()):
        self.model, self.device = model, model.device
        self._lib = binding()
        self._take(states)
        self.reset()

    def _take(self, states: tuple) -> None:
        self._entry = self.model._lend(states)
        self._give_back = weakref.finalize(self, _give_back, self._entry)  # once: at the runner's end or a switch
        self._ctx, self._batch = self._entry["ctx"], self._entry["batch"]
        self._mem = self._lib.llama_get_memory(self._ctx)

    def _with_states(self, states: tuple) -> None:
        """Change to a context that hands out `states`, on the first pass that asks (an empty cache
        only: a run's first pass is its prefill)."""
        if states == self._entry["states"]:
            return
        if self.length:
            raise InputError("A llama.cpp runner's states are chosen on its first pass, not mid-run.")
        layers = [layer for layer in states if layer != "last"]
        if any(not 0 <= int(layer) < self.model.n_layers for layer in layers):  # llama.cpp would abort
            raise InputError(f"{self.model.path.name} has layers 0..{self.model.n_layers - 1}; "
                             f"the drafter asked for the inputs of {layers}.")
        if layers:
            why = states_problem()
            if why:
                raise LlamaCppMissing(f"This drafter reads the target's layer inputs, but {why}.")
        self._give_back()  # the context goes back now, and not again when this runner ends
        self._take(states)
        self.reset()

    def reset(self) -> None:
        # the cells only (data=False): a cleared cell is masked out until a new token is written
        # into it, so zeroing the whole KV buffer (9 ms for the target's) bought nothing
        self._lib.llama_memory_clear(self._mem, False)
        self.length = 0

    def forward(self, ids: list, last_only: bool = False, attend=None, positions=None,
                keep: int = 0, hidden=False):
        """Feed `ids` after the cache; float32 logits (rows, V) of the last `keep` fed tokens
        (all if 0; one if last_only), as CachedLM.forward. Causal chains only.

        hidden=True returns (logits, states) with the last hidden state (after the final norm) of
        every fed token, (T, d); hidden=a tuple of layer indices, states (T, len + 1, d): the
        inputs of those layers (transformers' hidden_states numbering), then the last hidden
        state, as specviz.runtime.lm.forward_with_states. Every fed token is then an output row
        of llama.cpp's pass (its last state comes with its logits)."""
        if attend is not None:
            raise InputError("llama.cpp runs chains of tokens: tree attention is PyTorch's; on llama.cpp use one "
                             f"of {', '.join(methods.names(llamacpp=True))}.")
        layers = tuple(hidden) if isinstance(hidden, (tuple, list)) else ()
        states = (*layers, "last") if hidden is not False and hidden is not None else ()
        self._with_states(states)
        n = len(ids)
        if self.length + n > self.model.n_ctx:
            raise InputError(f"This llama.cpp context holds {self.model.n_ctx} tokens; the run needs more: "
                             "use a shorter prompt or fewer new tokens.")
        rows = 1 if last_only else (keep or n)
        first_out = 0 if states else n - min(rows, n)
        out, got = [], []
        for start in range(0, n, N_BATCH):  # a prompt over N_BATCH tokens goes in slices
            piece = ids[start:start + N_BATCH]
            wanted = [start + i >= first_out for i in range(len(piece))]
            self._decode(piece, wanted)
            if any(wanted):
                out.append(self._logits(sum(wanted)))
            if states:
                got.append(self._states(layers, len(piece)))
        logits = torch.from_numpy(np.concatenate(out)[-min(rows, n):])  # (rows, V)
        if not states:
            return logits
        stacked = torch.from_numpy(np.concatenate(got))  # (T, len(layers) + 1, d)
        return logits, (stacked[:, 0] if hidden is True else stacked)

    def _states(self, layers: tuple, n: int) -> np.ndarray:
        """(n, len(layers) + 1, d): the last decode's inputs of `layers`, then its last hidden states
        (every token of it was an output row, in order)."""
        d, lib, get = self.model.hidden_size, self._lib, layer_inputs().get
        parts = [np.ctypeslib.as_array(get(self._ctx, int(layer)), shape=(n, d)) for layer in layers]
        parts.append(np.ctypeslib.as_array(lib.llama_get_embeddings(self._ctx), shape=(n, d)))
        return np.stack(parts, axis=1).copy()

    def _decode(self, piece: list, wanted: list) -> None:
        lib, batch = self._lib, self._batch
        batch.n_tokens = len(piece)
        for i, token in enumerate(piece):
            batch.token[i] = int(token)
            batch.pos[i] = self.length + i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = wanted[i]
        code = lib.llama_decode(self._ctx, batch)
        if code != 0:
            raise InputError(f"llama.cpp could not decode {len(piece)} tokens at position {self.length} "
                             f"(llama_decode returned {code}).")
        self.length += len(piece)

    def _logits(self, rows: int) -> np.ndarray:
        ptr = self._lib.llama_get_logits(self._ctx)
        return np.ctypeslib.as_array(ptr, shape=(rows, self.model.vocab_size)).copy()  # (rows, V)

    def crop(self, length: int) -> None:
        """Keep the first `length` cached tokens: the rejected positions leave the KV cache."""
        if length < self.length:
            self._lib.llama_memory_seq_rm(self._mem, 0, length, -1)
            self.length = length

    def keep(self, linear: int, slots: list) -> None:
        raise InputError("llama.cpp runs chains of tokens: a tree step's path cannot be kept.")


def parting(model, prompt: list, ar: list, other: list) -> Optional[dict]:
    """Where `other` first parts from `ar`, two greedy continuations of `prompt` on `model` (a
    LlamaCppModel): {"at", "ar_token", "token", "margin", "gap"}, or None where they agree. margin:
    AR's token's logit minus the other's, on AR's own path (the prompt's pass, then one token a
    pass); gap: the largest difference at that position between those logits and one pass over the
    prompt and every token before it. A margin within the gap is a near tie that a pass over several
    tokens may flip (the 4-bit files' multi-row kernels round differently); beyond it, a bug."""
    at = next((j for j, (a, b) in enumerate(zip(ar, other)) if a != b), None)
    if at is None:
        return None
    one = model.make_runner()
    single = one.forward(prompt, last_only=True)[-1]
    for token in ar[:at]:
        single = one.forward([token], last_only=True)[-1]
    whole = model.make_runner().forward(prompt + ar[:at], last_only=True)[-1]
    return {"at": at, "ar_token": ar[at], "token": other[at],
            "margin": float(single[ar[at]] - single[other[at]]), "gap": float((single - whole).abs().max())}


# ---------------------------------------------------------------------------------------------
# GGUF types: the shipped one, and copies llama.cpp makes from it

GGUF_TYPES = {  # name -> (llama_ftype, bits a weight, what it is); "q4_k_m" is the file the packages ship
    "q4_k_m": (15, 5.0, "the shipped file, the type laptops run (Q4_K with Q6_K parts)"),
    "q4_k_m-q8_0": (15, 5.5, "the shipped file with its Q6_K tensors in Q8_0 (its Q4_K tensors byte for byte): "
                             "as good, and multiplied by llama.cpp's tiled Q8_0 kernel instead of Q6_K's row by row"),
    "q4_k": (15, 4.5, "the shipped file with its Q6_K tensors re-quantised to Q4_K (the rest byte for byte): "
                      "the 4-bit K kernel alone, repacked for several rows at once, at some loss"),
    "q4_0": (2, 4.5, "re-quantised here from the shipped file; llama.cpp repacks it for its multi-row CPU kernels"),
    "q8_0": (7, 8.5, "re-quantised here from the shipped file"),
    "f16": (1, 16.0, "the shipped weights de-quantised here"),
}
# copies that keep the shipped file's tensors and change only those of one type: ggml type names
# (the file's -> the copy's); every other quantised tensor is pinned to its own type, which
# llama.cpp's quantizer then copies as it is
RETYPED = {"q4_k_m-q8_0": {"Q6_K": "Q8_0"}, "q4_k": {"Q6_K": "Q4_K"}}


def gguf_bytes(params: int, gguf_type: str) -> int:
    """About how large a GGUF of `params` weights in `gguf_type` is (its tensors; metadata aside)."""
    return int(params * GGUF_TYPES[check_gguf_type(gguf_type)][1] / 8)


def check_gguf_type(name) -> str:
    key = str(name or "q4_k_m").lower()
    if key not in GGUF_TYPES:
        raise InputError(f"Unknown GGUF type {name!r}: choose one of {', '.join(GGUF_TYPES)}.")
    return key


def quantize(src: Path, dest: Path, gguf_type: str) -> None:
    """Write `src` as a GGUF of `gguf_type` (llama.cpp's own quantizer; re-quantising allowed)."""
    lib = binding()
    key = check_gguf_type(gguf_type)
    params = lib.llama_model_quantize_default_params()
    params.ftype = GGUF_TYPES[key][0]
    params.allow_requantize, params.nthread = True, default_threads()
    overrides = None
    if key in RETYPED:  # one pattern per type, naming each tensor: the recipe chooses nothing
        from gguf import GGMLQuantizationType

        wanted = retyped_tensors(src, RETYPED[key])
        overrides = (lib.llama_model_tensor_override * (len(wanted) + 1))()  # the last: NULL, the end
        for slot, (type_name, names) in zip(overrides, wanted.items()):
            slot.pattern = ("^(" + "|".join(re.escape(n) for n in names) + ")$").encode()
            slot.type = int(GGMLQuantizationType[type_name])
        params.tt_overrides = ctypes.cast(overrides, ctypes.POINTER(lib.llama_model_tensor_override))
    code = lib.llama_model_quantize(str(src).encode(), str(dest).encode(), ctypes.byref(params))
    if code != 0 or not dest.exists():
        raise PairError(f"llama.cpp could not write {dest.name} (llama_model_quantize returned {code}).")


def retyped_tensors(src: Path, change: dict) -> dict:
    """{ggml type name: [tensor names]}: every tensor of the GGUF at `src`, each under its own
    type, or under change[its type] where `change` names it (the quantizer leaves norms and biases
    as they are whatever it is asked)."""
    wanted: dict = {}
    for tensor in gguf_reader(src).tensors:
        name = tensor.tensor_type.name
        wanted.setdefault(change.get(name, name), []).append(tensor.name)
    return wanted
