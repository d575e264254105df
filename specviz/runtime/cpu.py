"""Which dtype and linear kernel give this CPU a memory wall: measured on one layer as the pair loads.

Speculative decoding pays because, at batch 1, a forward over k + 1 tokens costs about as much
as over one: reading the weights dominates, and the few extra rows of arithmetic ride along.
That holds in bf16 only on CPUs that multiply bf16 natively (AVX-512 BF16, AMX: recent server
parts, Zen 4 and later). Elsewhere (AVX2 laptops and servers: most Intel consumer parts and
AMD Zen 2/3) PyTorch converts bf16 element by element for products over more than one row, so
a few-row product is bound by arithmetic and its cost grows with the rows: a k = 4 verify pass
costs several one-token forwards, so in bf16 on such a CPU speculation cannot pay off, whatever
the drafter, while in fp32 (twice the bytes, but native products) the wall is back and it does.
What it costs and buys on an AVX2 AMD EPYC: docs/models.md ("float32 or bfloat16 on CPU") and
docs/benchmarks/suite-qwen-coder-full-avx2.md.

So when a real pair is loaded on a CPU with no dtype given, `choose` picks: bf16 with
nn.Linear (half the bytes of fp32) where a 5-row bf16 product costs at most `WALL` one-row
products, else fp32 with the cheaper of nn.Linear and W @ x.T at 5 rows (specviz.runtime.kernels).
When that float pair would not fit in the memory available, specviz.runtime.models loads int8 weights
instead (memory="auto" -> "low"); bf16 for want of room (`fp32_fits=False`) is left for
memory="full". The measurement is one linear layer of the 1.5B target's MLP shape;
the reason is kept on the pair (`Pair.cpu_choice`) and printed when it loads. An explicit dtype
or cpu_linear always wins. `python -m specviz.runtime.cpu` prints the measurement.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field

import torch

from specviz.runtime import kernels

ROWS = 5  # a k=4 verify pass
WALL = 2.0  # a bf16 5-row product dearer than this many 1-row products: no memory wall in bf16
SHAPE = (8960, 1536)  # Qwen2.5-1.5B's MLP up/gate projection (out, in)


@dataclass(frozen=True)
class CpuChoice:
    dtype: torch.dtype
    kernel: str  # "aten" | "gemv"
    note: str  # one line: what was measured and why this choice
    costs: dict = field(default_factory=dict)  # "bf16/aten/1" -> ms, ...

    def to_dict(self) -> dict:
        return {"dtype": str(self.dtype).replace("torch.", ""), "kernel": self.kernel,
                "note": self.note, "costs_ms": dict(self.costs)}


def _best_ms(fn, repeats: int) -> float:
    fn()  # warm-up: first calls pick kernels and fault pages in
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best * 1e3


@torch.inference_mode()
def measure(shape=SHAPE, rows: int = ROWS, repeats: int = 10) -> dict:
    """ms of one linear layer of `shape` at 1 and `rows` rows: bf16 with nn.Linear, fp32 with
    nn.Linear and with W @ x.T. Best of `repeats` (other work on the machine only adds time)."""

    gen = torch.Generator().manual_seed(0)
    weight = torch.randn(*shape, generator=gen) / shape[1] ** 0.5
    costs = {}
    for dtype, name in ((torch.bfloat16, "bf16"), (torch.float32, "fp32")):
        w = weight.to(dtype)
        for n in (1, rows):
            x = torch.randn(n, shape[1], generator=gen).to(dtype)
            costs[f"{name}/aten/{n}"] = _best_ms(lambda: torch.nn.functional.linear(x, w), repeats)
            if name == "fp32":
                costs[f"{name}/gemv/{n}"] = _best_ms(lambda: kernels.linear(x, w), repeats)
    return costs


def choose(costs: dict, fp32_fits: bool = True, rows: int = ROWS) -> CpuChoice:
    """The dtype and kernel for a CPU with these `measure` costs (see the module docstring)."""
    ratio = costs[f"bf16/aten/{rows}"] / costs["bf16/aten/1"]
    seen = f"a {rows}-row bf16 product costs {ratio:.1f}x a 1-row one"
    if ratio <= WALL:
        return CpuChoice(torch.bfloat16, "aten", f"bf16: {seen} on this CPU (native bf16)", costs)
    kernel = float32_kernel(costs, rows)
    fp32_ratio = costs[f"fp32/{kernel}/{rows}"] / costs[f"fp32/{kernel}/1"]
    if not fp32_fits:
        return CpuChoice(torch.bfloat16, "aten",
                         f"bf16, although {seen} on this CPU (no native bf16, so speculation can "
                         f"hardly pay off): float32 would not fit in memory", costs)
    name = "W @ x.T" if kernel == "gemv" else "nn.Linear"
    return CpuChoice(torch.float32, kernel,
                     f"float32 with {name}: {seen} on this CPU (no native bf16), a float32 one "
                     f"{fp32_ratio:.1f}x", costs)


def float32_kernel(costs=None, rows: int = ROWS) -> str:
    """The cheaper float32 kernel at `rows` rows on this CPU ("aten" or "gemv"), e.g. for a
    float32 pair loaded with an explicit dtype (the exactness tests)."""
    costs = costs or measured()
    return min(("aten", "gemv"), key=lambda k: costs[f"fp32/{k}/{rows}"])


@functools.lru_cache(maxsize=1)
def measured() -> dict:
    """`measure()` once per process."""
    return measure()


def main() -> None:
    import json

    costs = measure()
    print(json.dumps(choose(costs).to_dict(), indent=1))


if __name__ == "__main__":
    main()
