"""The machine a measurement ran on: device, dtype, threads, library versions, the load average.

Every benchmark and recording writes it into its report (bench.suite, bench.batched,
bench.assisted, bench.recordings), so it lives apart from any one of them. Naming the machine
loads no torch (bench.lab names it for the notebooks' timings); describing a pair's run does,
and the caller has it loaded already.
"""

from __future__ import annotations

import os
import platform
import time


def dtype_name(pair) -> str:
    return str(pair.dtype).replace("torch.", "")


def environment(pair, static_cache: bool) -> dict:
    import torch
    import transformers

    from specviz.runtime.lm import cuda_graphs_on

    device = torch.device(pair.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name()
    return {"pair": pair.name, "pair_source": getattr(pair, "source", ""), "device": str(device),
            "device_name": name, "dtype": dtype_name(pair), "threads": torch.get_num_threads(),
            "cpu_count": cpu_count(), "machine": platform.machine(), "python": platform.python_version(),
            "torch": torch.__version__, "transformers": transformers.__version__,
            "static_cache_transformers": static_cache, "cuda_synchronised": device.type == "cuda",
            # specviz's linear kernels (specviz.runtime.kernels); transformers' lanes run the stock
            # nn.Linear except hf-assisted-gemv
            "cpu_linear": getattr(pair, "cpu_linear", "aten"), "transformers_linear": "aten",
            # why this dtype and kernel when none was asked for (specviz.runtime.cpu), else None
            "cpu_choice": getattr(pair, "cpu_choice", None),
            # specviz's forwards replay CUDA graphs over a static cache (--cuda-graphs; specviz.runtime.lm.GraphLM)
            "cuda_graphs": cuda_graphs_on(pair.target),
            "loadavg_start": loadavg(),
            "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime())}


def _cpuinfo(field: str, cpuinfo: str = "/proc/cpuinfo"):
    """The first `field` line's value in /proc/cpuinfo (Linux), or None."""
    try:
        with open(cpuinfo) as fh:
            for line in fh:
                if line.startswith(field):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def cpu_name() -> str:
    return _cpuinfo("model name") or platform.processor() or "cpu"


# the vector and matrix extensions that decide a CPU's kernels (llama.cpp's repacked ones, native
# bf16, AMX), as /proc/cpuinfo names them, in the order a report lists them
CPU_FEATURES = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_int8")


def cpu_features(cpuinfo: str = "/proc/cpuinfo") -> list:
    """The CPU_FEATURES this CPU has ([] where /proc/cpuinfo is not, as on Windows and macOS)."""
    have = set((_cpuinfo("flags", cpuinfo) or "").split())
    return [name for name in CPU_FEATURES if name in have]


def loadavg():
    """The machine's 1-minute load average: other work sharing the cores skews timings."""
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else None


def cpu_count() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
