"""The memory-bandwidth limit of autoregressive decoding on this machine.

At batch 1 each decoded token reads every weight of the target once (the input embedding table
excepted: one row of it is gathered), so tokens/s cannot exceed
    bandwidth / weight bytes read per token.
Bandwidth is measured with a large tensor copy (read + write of `megabytes` each way), best of
several tries, CUDA-synchronised on GPU. The KV cache read is left out: at the suite's context
lengths it is well under 1% of the weights.
"""

from __future__ import annotations

import time

import torch

from specviz.runtime.lm import synchronize


def copy_bandwidth(device="cpu", megabytes: int = 256, repeats: int = 5) -> dict:
    """Bytes per second moved by `dst.copy_(src)` of a `megabytes` tensor (read + write)."""
    n = megabytes * 2**20 // 4
    src = torch.ones(n, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)  # first touch: page faults are not bandwidth
    best = float("inf")
    for _ in range(repeats):
        synchronize(device)
        start = time.perf_counter()
        dst.copy_(src)
        synchronize(device)
        best = min(best, time.perf_counter() - start)
    moved = 2 * src.numel() * src.element_size()
    return {"bytes_per_s": moved / best, "megabytes": megabytes, "seconds": best,
            "method": "best of %d tensor copies, read + write" % repeats}


def weight_bytes_per_token(model) -> int:
    """Bytes of weights one decoding step reads: all parameters and weight buffers (an int8
    model's `qweight` and `scale`, specviz.runtime.quant) but the input embedding table (unless it is
    tied to the output head, which reads all of it)."""
    def size(tensors) -> int:
        return sum(t.numel() * t.element_size() for t in {id(t): t for t in tensors}.values())

    def tensors(module) -> list:
        return [] if module is None else list(module.parameters()) + list(module.buffers())

    total = size(tensors(model))
    embed = tensors(model.get_input_embeddings())
    head = {id(t) for t in tensors(model.get_output_embeddings())}
    if not any(id(t) in head for t in embed):  # untied: a step reads one row of the table
        total -= size(embed)
    return total


def limit(bandwidth_bytes_per_s: float, weight_bytes: int) -> float:
    """The tokens/s ceiling of batch-1 decoding."""
    return bandwidth_bytes_per_s / weight_bytes
