"""Faster CPU products for few-row linear layers: the same weights, the same dtype, other kernels.

Decoding and verification multiply a handful of rows (1 for a decode step, k+1 for a verify pass)
by every weight matrix, so on a CPU they are bound by reading the weights. With bf16 weights,
PyTorch's `F.linear` (x @ W.T through the addmm/mm path) reads them well below this machine's
memory bandwidth; the same product written the other way round, `W @ x.T` (`torch.mm`, or
`torch.mv` for one row), reaches much closer to it; it beat `F.linear` at every row count up
to ROWS_GEMV on the CPU where it was measured (`python -m specviz.bench.forward --kernels gemv
aten` measures both on yours; docs/models.md, "Faster CPU kernels").

Loaded weights also need to start on a 64-byte boundary for the vector loads to run at full
speed: weights read from a safetensors file sit at arbitrary offsets inside it, so `use_gemv`
copies those into freshly allocated (aligned) memory once. Together they make both the one-token
forwards and the few-token verify passes of the real pair faster there.

Opt-in for bf16 (`load_pair(..., cpu_linear="gemv")`), not the default: it was measured on one
CPU (an AMX / AVX-512 bf16 server part); on other CPUs (laptops, ARM) PyTorch routes mv and mm to
other kernels and the gain may differ or reverse. `python -m specviz.bench.forward --kernels gemv
aten` measures it on yours. On a CPU without native bf16, where the real pair loads in float32,
`specviz.runtime.cpu` measures both kernels when the pair loads and takes the cheaper (W @ x.T on the
AVX2 AMD EPYC of docs/benchmarks/suite-qwen-coder-full-avx2.md).

This changes no number the method depends on beyond rounding: both kernels take bf16 inputs and
accumulate in fp32, only the order of the additions differs, so logits move by bf16 steps (about
as much as between a one-token and a five-token forward with either kernel, which differ through
attention already). Lossless still means "exactly the target as specviz runs it": AR and every
method run through the same layers.

`use_gemv` swaps the class of each `nn.Linear` in place (parameters, hooks and state-dict
unchanged; `isinstance(m, nn.Linear)` still holds). `aten_linears` swaps them back for a while:
the benchmark runs transformers' own generate() on the stock layers, as its users would.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F

from specviz.config import option
from specviz.errors import InputError

MODES = ("aten", "gemv")
ROWS_GEMV = 128  # W @ x.T beat F.linear for bf16 at every row count measured up to this one
ALIGN = 64  # bytes


def linear(x: torch.Tensor, weight: torch.Tensor, bias=None) -> torch.Tensor:
    """F.linear(x, weight, bias), as W @ x.T (torch.mv for one row) up to ROWS_GEMV rows."""
    width = weight.shape[1]
    rows = x.numel() // width if width else 0
    if not 0 < rows <= ROWS_GEMV or x.dtype != weight.dtype:
        return F.linear(x, weight, bias)
    flat = x.reshape(rows, width)
    if rows == 1:
        y = torch.mv(weight, flat[0]) if bias is None else torch.addmv(bias, weight, flat[0])
    else:
        y = (torch.mm(weight, flat.t()) if bias is None else torch.addmm(bias[:, None], weight, flat.t()))
        y = y.t().contiguous()  # row-major, as F.linear returns it: later ops see the same layouts
    return y.reshape(*x.shape[:-1], weight.shape[0])


class GemvLinear(torch.nn.Linear):
    """`nn.Linear` whose few-row products run as W @ x.T (torch.mv for one row)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return super().extra_repr() + ", kernel=W@x.T"


def check_mode(mode) -> str:
    """"aten" or "gemv" (None -> "aten"); anything else is refused before a model is loaded."""

    mode = "aten" if mode in (None, "") else str(mode).lower()
    if mode not in MODES:
        raise InputError(f"{option('cpu_linear')} must be one of {', '.join(MODES)}, not {mode!r}.")
    return mode


def resolve(mode, device, dtype=None) -> str:
    """The kernel asked for: "aten" (the default: PyTorch's nn.Linear) or "gemv" (CPU only)."""

    mode = check_mode(mode)
    if mode == "gemv" and torch.device(device).type != "cpu":
        raise InputError(f"cpu_linear='gemv' is a CPU option; this pair is on {device}: use 'aten'.")
    return mode


def use_gemv(model: torch.nn.Module) -> int:
    """In place: re-home misaligned weights and make every plain `nn.Linear` a `GemvLinear`.
    Returns how many layers changed class."""
    with torch.no_grad():
        for param in model.parameters():  # shared (tied) parameters come once
            if param.data_ptr() % ALIGN:
                param.data = param.data.clone()
    swapped = 0
    for module in model.modules():
        if type(module) is torch.nn.Linear:
            module.__class__ = GemvLinear
            swapped += 1
        elif getattr(module, "gemv", None) is False:  # layers with a float fallback (quant.Int8Linear)
            module.gemv = True
    return swapped


def use_aten(model: torch.nn.Module) -> int:
    """In place: the model's `GemvLinear` layers become plain `nn.Linear` again."""
    swapped = [m for m in model.modules() if type(m) is GemvLinear]
    for module in swapped:
        module.__class__ = torch.nn.Linear
    for module in model.modules():
        if getattr(module, "gemv", None) is True:
            module.gemv = False
    return len(swapped)


@contextlib.contextmanager
def aten_linears(*models):
    """Within the block, the models' `GemvLinear` layers run PyTorch's stock `nn.Linear.forward`
    (and layers that fall back to their float weights, like specviz.runtime.quant.Int8Linear, use F.linear)."""
    modules = [m for model in models if model is not None for m in model.modules()]
    swapped = [m for m in modules if type(m) is GemvLinear]
    flagged = [m for m in modules if getattr(m, "gemv", None) is True]
    for module in swapped:
        module.__class__ = torch.nn.Linear
    for module in flagged:
        module.gemv = False
    try:
        yield
    finally:
        for module in swapped:
            module.__class__ = GemvLinear
        for module in flagged:
            module.gemv = True


def kernel_of(model) -> str:
    """"gemv" when the model's linear layers use GemvLinear, else "aten"."""
    return "gemv" if any(type(m) is GemvLinear for m in getattr(model, "modules", lambda: [])()) else "aten"
