"""int8 weight-only draft weights: a cheaper drafter on CPU, and still a lossless method.

Speculative decoding is exact for *any* draft distribution q: verification compares q with the
target's p and resamples from the residual, so whatever the drafter computes only changes how
often drafts are accepted, never what the output follows. That makes the drafter the place to
spend approximations: here its linear layers keep their weights as int8 with one scale per output
channel (symmetric, round to nearest: w ~= scale * int8), and one-row products run through
PyTorch's int8 weight-only GEMV kernel (`torch._weight_int8pack_mm`, the kernel gpt-fast's int8
mode uses), which reads half the bytes of bf16. Decoding one token is bound by reading weights,
so the draft forward gets about 2x cheaper and c (draft cost / target cost) halves. The target is
never touched: AR and the verifier see the same bf16 target as before.

The kernel is a matrix-vector kernel: its cost grows with every row, so products over more than
`ROWS_INT8` rows (the prefill, long catch-ups) use the original floating-point weights, which the
module keeps (shared with the model it was built from, not copied). The draft's KV cache then
mixes both, which is fine: q is whatever the drafter computes, and the events carry that q.

Measured on 2 CPU cores (Qwen2.5-Coder-0.5B draft, bf16): one-token draft forward 89 ms -> 48 ms;
acceptance on the suite's prompts within a few points of the bf16 draft (docs/benchmarks).
"""

from __future__ import annotations

import copy

import torch

from specviz import kernels

MODES = ("none", "int8")
ROWS_INT8 = 4  # up to this many rows the int8 GEMV beats the bf16 matmul (measured, 2 cores)


class Int8Linear(torch.nn.Module):
    """A linear layer with int8 weights and one scale per output channel (weight-only)."""

    def __init__(self, linear: torch.nn.Linear):
        super().__init__()
        weight = linear.weight.detach()
        w = weight.float()
        scale = w.abs().amax(dim=1).clamp(min=1e-12) / 127.0
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.register_buffer("qweight", torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8))
        # the kernel's activations: bf16 for float32 models too (in float32 it is ~15x slower on
        # an AVX2 CPU; the draft's q is whatever it computes, so this stays lossless)
        self.compute = torch.bfloat16 if weight.dtype == torch.float32 else weight.dtype
        self.register_buffer("scale", scale.to(self.compute))
        self.weight = linear.weight  # the float weights, shared: used for many-row products
        self.bias = linear.bias
        self.gemv = isinstance(linear, kernels.GemvLinear)  # many-row products: the same kernel as before

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // self.in_features
        if rows > ROWS_INT8 or x.dtype != self.weight.dtype:
            return (kernels.linear if self.gemv else torch.nn.functional.linear)(x, self.weight, self.bias)
        flat = x.reshape(rows, self.in_features).to(self.compute).contiguous()
        y = torch._weight_int8pack_mm(flat, self.qweight, self.scale).to(x.dtype)
        y = y.reshape(*x.shape[:-1], self.out_features)
        return y if self.bias is None else y + self.bias

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 weight-only"


def supported(linear: torch.nn.Linear) -> bool:
    """The CPU kernel needs the input width to be a multiple of 16 (other widths crash it)."""
    return (linear.weight.device.type == "cpu" and linear.in_features % 16 == 0
            and linear.weight.dtype in (torch.bfloat16, torch.float16, torch.float32))


def quantize_int8(model: torch.nn.Module) -> int:
    """Replace the model's linear layers (output head included) by `Int8Linear`, in place.
    Returns how many were replaced; layers the kernel cannot take keep their float weights."""
    replaced = 0
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, torch.nn.Linear) and supported(child):
                setattr(module, name, Int8Linear(child))
                replaced += 1
    return replaced


def check_mode(mode) -> str:
    from specviz.errors import InputError

    mode = "none" if mode in (None, "", "none", False) else str(mode).lower()
    if mode not in MODES:
        raise InputError(f"draft_quant must be one of {', '.join(MODES)}, not {mode!r}.")
    return mode


def quantize_draft(pair, mode="int8"):
    """The same pair with its draft model's weights in `mode` ("int8"): a new Pair sharing the
    target, the tokenizer and the draft's float weights (only the int8 copies are new memory),
    built once per pair and mode, so every caller (app, bench, notebooks) gets the same one.
    CPU only: on CUDA the bf16 draft is already cheap relative to the target."""
    import dataclasses

    from specviz.errors import InputError

    mode = check_mode(mode)
    if mode == getattr(pair, "draft_quant", "none"):
        return pair
    if mode in pair._variants:
        return pair._variants[mode]
    if mode == "none":
        raise InputError("This pair's draft is already quantised; load the pair again for float draft weights.")
    if torch.device(pair.device).type != "cpu":
        raise InputError(f"draft_quant='int8' is a CPU option (its kernel is a CPU kernel); this pair is on "
                         f"{pair.device}: use draft_quant='none' there.")
    draft = _shallow_tree(pair.draft)  # parameters shared, module tree (and hooks) its own
    if quantize_int8(draft) == 0:
        raise InputError("draft_quant='int8': none of this draft model's linear layers can be quantised "
                         "(the kernel needs input widths that are multiples of 16).")
    pair._variants[mode] = dataclasses.replace(pair, draft=draft, draft_quant=mode, _texts=pair._texts,
                                               _variants={})
    return pair._variants[mode]


def _shallow_tree(module: torch.nn.Module) -> torch.nn.Module:
    """A copy of the module tree whose leaves share their parameters with the original: its own
    child, parameter, buffer and hook tables, so replacing a layer or adding a hook in the copy
    leaves the original as it was."""
    clone = copy.copy(module)
    for name, value in module.__dict__.items():
        if name.startswith("_") and isinstance(value, dict) and (
                name in ("_parameters", "_buffers") or "hook" in name):
            setattr(clone, name, type(value)(value))
    clone._modules = {name: None if child is None else _shallow_tree(child)
                      for name, child in module._modules.items()}
    return clone
