"""Where a pair runs and in how much memory: the device, the dtype, and whether full float weights fit.

`memory="low"` holds both models as int8 weights (specviz.runtime.quant); "full" holds float
weights; "auto" (the default, or $SPECVIZ_MEMORY) takes full weights when they fit in the memory
available with headroom, else low. Peak RSS of each mode, measured: docs/models.md.
"""

from __future__ import annotations

import os

import torch

from specviz.config import option
from specviz.errors import InputError, PairError
from specviz.runtime import cpu

# ---------------------------------------------------------------------------------------------
# device, dtype, memory

_DTYPES = {"bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp32": torch.float32,
           "float32": torch.float32, "fp16": torch.float16, "float16": torch.float16}


DEVICE_TYPES = ("cpu", "cuda", "mps", "meta")  # meta: PyTorch's device without data, for tests of the checks


def resolve_device(device) -> torch.device:
    """`device` ("cpu", "cuda", "cuda:1", "mps" or a torch.device), else CUDA where PyTorch sees a
    GPU and the CPU otherwise. A device that is none, or that this machine lacks, is an InputError."""
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        resolved = None
    if resolved is None or resolved.type not in DEVICE_TYPES:
        raise InputError(f"{option('device')} must be cpu, cuda (cuda:0, cuda:1, ...) or mps, got {device!r}.")
    missing = _missing(resolved)
    if missing:
        raise InputError(f"{option('device', str(device))} asks for {missing}: "
                         f"use {option('device', 'cpu')}, or leave {option('device')} out to take what there is.")
    return resolved


def _missing(device: torch.device) -> str:
    """What `device` needs that this machine lacks, in words ("" when it has it)."""
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            built = "" if torch.version.cuda else " (this PyTorch is built without CUDA)"
            return f"a CUDA GPU, and PyTorch sees none here{built}"
        if device.index is not None and device.index >= count:
            return f"GPU {device.index}, and PyTorch sees {count} here (cuda:0 to cuda:{count - 1})"
    if device.type == "mps" and not torch.backends.mps.is_available():
        return "Apple's Metal (mps), which this machine's PyTorch cannot use"
    return ""


def resolve_dtype(dtype, device: torch.device, cpu_default_bytes: int) -> torch.dtype:
    """Explicit dtype wins; CUDA defaults to bf16; CPU to bf16 for real pairs (`load_pair` first
    asks specviz.runtime.cpu for the real pair: float32 where bf16 is not native) and fp32 for the tiny
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
# kernel takes bf16 activations either way (specviz.runtime.quant)
LOW_FLOAT_DTYPE = torch.float32


def check_memory_mode(memory) -> str:
    """"auto", "full" or "low"; None takes $SPECVIZ_MEMORY (so the app and notebooks can be
    told), else "auto". Anything else is refused before a model is loaded."""
    named = option("memory") if memory else "$SPECVIZ_MEMORY"
    memory = memory or os.environ.get("SPECVIZ_MEMORY") or "auto"
    if str(memory).lower() not in MEMORY_MODES:
        raise InputError(f"{named} must be one of {', '.join(MEMORY_MODES)}, not {memory!r}.")
    return str(memory).lower()


def asked_low() -> dict:
    return {"mode": "low", "reason": "asked for: memory='low' or SPECVIZ_MEMORY=low"}


def need_bytes(params: int, dtype) -> int:
    """Memory a pair of `params` weights held as `dtype` (or "int8") needs: weights + runtime."""
    if dtype == "int8":
        return int(params * INT8_BYTES) + RUNTIME_BYTES
    return params * torch.tensor([], dtype=dtype).element_size() + RUNTIME_BYTES


def plan_memory(device, dtype, memory: str, params: int) -> tuple:
    """(float dtype, specviz.runtime.cpu choice or None, memory choice or None) for a real pair of
    `params` weights. With no dtype named, a CPU takes what specviz.runtime.cpu measures fastest there;
    int8 weights (a memory choice) when asked for, or when memory is "auto", no dtype is named
    and that float pair would not fit in the memory available."""
    if memory == "low":
        return resolve_dtype(dtype or LOW_FLOAT_DTYPE, device, 4), None, asked_low()
    if device.type != "cpu" or dtype is not None:
        return resolve_dtype(dtype, device, 2), None, None

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
