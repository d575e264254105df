"""int8 weight-only weights: a cheaper drafter on CPU, and a pair that fits in 8 GB.

Weights are int8 with one scale per output channel (symmetric, round to nearest:
w ~= scale * int8), and products run through PyTorch's int8 weight-only kernel
(`torch._weight_int8pack_mm`, the kernel gpt-fast's int8 mode uses), which reads half the bytes
of bf16 and a quarter of float32. Decoding one token is bound by reading weights, so a forward
gets about that much cheaper. Two uses:

`draft_quant="int8"` (`quantize_draft`): only the draft. Speculative decoding is exact for *any*
draft distribution q: verification compares q with the target's p and resamples from the
residual, so the drafter is the place to spend approximations. The draft's float weights are
kept (shared with the float draft, not copied) for products over more than `ROWS_INT8` rows,
where the kernel is slower than a float matrix product; the target is untouched (what it does
to the draft's cost ratio c: docs/models.md, "An int8 draft").

`memory="low"` (`int8_model`, used by specviz.runtime.models): both models, with no float weights at
all, so the pair fits in an 8 GB laptop (docs/models.md: measured peak RSS). Then the *int8
target is the model being decoded*: AR decodes it, and speculative output must follow it token
for token. It does because the forward computes every row of a pass (verify, tree, prefill)
exactly as the AR step of that token computes it, bit for bit, so even exact ties in the logits
break the same way: every product runs on the int8 kernel, which computes each row alone in
one order of additions whatever the other rows, and attention runs one query row at a time
through transformers' one-token path (`rowwise_attention`), since its many-row path rounds
differently (both checked bit for bit in tests/test_quant.py). Without the second, greedy
`pld` on "def fibonacci(n):" left AR at token 42, where two logits tied at bf16's resolution.
Dynamic activation quantisation (torch.ao `quantize_dynamic`) was tried and rejected: its
scale is taken over the whole pass, so a token's output depends on the tokens verified beside
it (most next to an outlier token), and a verify pass no longer computes what the AR step does.
The input embedding is int8 by rows too (a lookup de-quantises the rows it gathers), the output
head an `Int8Linear`: the largest matrices, a quarter of float32's bytes and the cheapest
products; norms and biases keep the pair's float dtype.

The kernel takes bf16 activations: its float32 path is scalar code (several times slower),
while its bf16 path shifts bf16 into float32 and multiplies in float32, so it needs
no native bf16 (an AVX2 and an AVX-512 version ship). Its cost: it multiplies at most
`ROWS_INT8` rows per pass over the weights and hands blocks of rows to threads first, so a
5-row product reads the weights twice: verifying k = 4 is not nearly free on this kernel,
k = 3 nearly is.
"""

from __future__ import annotations

import copy

import torch

from specviz.config import option
from specviz.errors import InputError
from specviz.runtime import kernels

MODES = ("none", "int8")
ROWS_INT8 = 4  # the kernel's block of rows: up to this many it reads the weights once and beats the bf16 matmul
BLOCK_ELEMENTS = 1 << 22  # quantise this many weights at a time: float32 temporaries stay ~16 MB


def fill_int8(qweight: torch.Tensor, scale: torch.Tensor, rows) -> None:
    """Quantise the float rows `rows(start, stop)` into `qweight` (int8) and `scale`, symmetric
    per row, round to nearest: rows ~= scale[:, None] * qweight. A block of rows at a time in
    one reused float32 buffer: a whole float copy of a large matrix (the 1.5B's output head:
    0.9 GB in float32) never exists, and no fresh temporaries fault pages in block after block."""
    step = max(1, BLOCK_ELEMENTS // qweight.shape[1])
    work = torch.empty(min(step, qweight.shape[0]), qweight.shape[1])  # (rows, in) float32
    for start in range(0, qweight.shape[0], step):
        block = rows(start, min(start + step, qweight.shape[0]))
        n = len(block)
        s = torch.maximum(block.amax(dim=1), -block.amin(dim=1)).float().clamp_(min=1e-12) / 127.0
        w = torch.div(block, s[:, None], out=work[:n]).round_().clamp_(-127, 127)
        qweight[start:start + n] = w  # integral already: the cast is exact
        scale[start:start + n] = s


class Int8Linear(torch.nn.Module):
    """A linear layer with int8 weights and one scale per output channel (weight-only).

    keep_float=True (the int8 draft): the float weights stay, shared with `linear`, for products
    over more than ROWS_INT8 rows. keep_float=False (memory="low"): no float weights; every
    product runs on the int8 kernel. `rows(start, stop)` reads the float weights a block of rows
    at a time (default: from `linear`; the low-memory loader reads them from the file instead)."""

    def __init__(self, linear: torch.nn.Linear, keep_float: bool = True, rows=None):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        # the kernel's activations: bf16 for float32 models too (its float32 path is scalar code,
        # several times slower; the bf16 one needs no native bf16: it converts with a shift)
        self.compute = torch.float16 if linear.weight.dtype == torch.float16 else torch.bfloat16
        self.register_buffer("qweight", torch.empty(self.out_features, self.in_features, dtype=torch.int8))
        self.register_buffer("scale", torch.empty(self.out_features, dtype=self.compute))
        fill_int8(self.qweight, self.scale, rows or (lambda a, b: linear.weight.detach()[a:b]))
        self.weight = linear.weight if keep_float else None  # shared with `linear`, not copied
        self.bias = linear.bias
        self.gemv = isinstance(linear, kernels.GemvLinear)  # many-row products: the same kernel as before

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // self.in_features
        if self.weight is not None and (rows > ROWS_INT8 or x.dtype != self.weight.dtype):
            return (kernels.linear if self.gemv else torch.nn.functional.linear)(x, self.weight, self.bias)
        flat = x.reshape(rows, self.in_features).to(self.compute).contiguous()
        y = torch._weight_int8pack_mm(flat, self.qweight, self.scale).to(x.dtype)  # (rows, out)
        y = y.reshape(*x.shape[:-1], self.out_features)
        return y if self.bias is None else y + self.bias

    def extra_repr(self) -> str:
        fallback = "" if self.weight is None else f", float weights for > {ROWS_INT8} rows"
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 weight-only{fallback}"


class Int8Embedding(torch.nn.Module):
    """An input embedding table as int8 rows with one scale each: a lookup de-quantises only the
    rows it gathers (one per token), so it costs nothing measurable and a quarter of float32's bytes."""

    def __init__(self, embedding: torch.nn.Embedding, dtype: torch.dtype, rows=None):
        super().__init__()
        self.num_embeddings, self.embedding_dim = embedding.num_embeddings, embedding.embedding_dim
        self.padding_idx, self.dtype = embedding.padding_idx, dtype
        self.register_buffer("qweight", torch.empty(self.num_embeddings, self.embedding_dim, dtype=torch.int8))
        self.register_buffer("scale", torch.empty(self.num_embeddings, dtype=torch.bfloat16))
        fill_int8(self.qweight, self.scale, rows or (lambda a, b: embedding.weight.detach()[a:b]))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        gathered = self.qweight[ids].float() * self.scale[ids].float()[..., None]  # (..., dim)
        return gathered.to(self.dtype)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}, int8 rows"


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


def int8_model(model: torch.nn.Module, source, dtype: torch.dtype) -> torch.nn.Module:
    """In place, for memory="low": every linear layer (output head included) becomes an
    `Int8Linear` without float weights, the input embedding an `Int8Embedding`, all filled from
    `source(name, start, stop)` (rows start:stop of the named float tensor, None, None: all of
    it, possibly in a buffer its next call reuses); the other parameters (norms, biases) are
    read from `source` in `dtype`. The model's own float tensors are never read, so a model
    loaded lazily (mapped, not yet read) never holds its float weights in memory. A tied output
    head shares the embedding's int8 rows. Attention becomes `rowwise_attention`."""
    embed = model.get_input_embeddings()
    names = {id(m): name for name, m in model.named_modules()}
    for module in list(model.modules()):
        for child_name, child in list(module.named_children()):
            tied = child is not embed and getattr(child, "weight", None) is embed.weight
            key = f"{names[id(embed if tied else child)]}.weight"
            rows = lambda a, b, key=key: source(key, a, b)  # noqa: E731
            if child is embed:
                setattr(module, child_name, Int8Embedding(child, dtype, rows))
            elif isinstance(child, torch.nn.Linear) and supported(child):
                setattr(module, child_name, Int8Linear(child, keep_float=False, rows=rows))
    _share_tied_head(model)
    _rowwise(model)
    for name, param in list(model.named_parameters()):
        owner_name, _, leaf = name.rpartition(".")
        owner = model.get_submodule(owner_name)
        value = source(name, None, None).to(dtype, copy=True)  # copy: a source may reuse its buffer
        setattr(owner, leaf, torch.nn.Parameter(value, requires_grad=False))
    return model


ROWWISE = "specviz_rowwise"  # the attention implementation int8_model installs


def rowwise_attention(module, query, key, value, attention_mask, **kwargs):
    """Attention one query row at a time, each over exactly the keys it may see, through
    transformers' own SDPA path for one token. transformers runs a one-token pass (an AR step)
    and a many-token pass (a verify pass) on different paths (grouped heads packed vs repeated,
    no mask vs a mask), which round differently; with this, a row of a verify pass or a prefill
    is computed as its AR step computes it, bit for bit, the int8 kernel doing the same for the
    products. query (B, H, T, D); key, value (B, KVH, L, D); a 4-D mask (tree attention) says
    which keys each row sees, else row i sees the first L - T + i + 1 (causal)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    rows, length = query.shape[2], key.shape[2]
    kwargs.pop("is_causal", None)
    out = []
    for i in range(rows):
        if attention_mask is None:
            k, v = key[:, :, :length - rows + i + 1], value[:, :, :length - rows + i + 1]
        else:
            row = attention_mask[0, 0, i]  # (L,) bool, or additive float (0: seen); trees are batch 1
            seen = (row if row.dtype == torch.bool else row == 0).nonzero().flatten()
            k, v = key.index_select(2, seen), value.index_select(2, seen)
        out.append(sdpa_attention_forward(module, query[:, :, i:i + 1], k, v, None, **kwargs)[0])
    return torch.cat(out, dim=1), None  # (B, T, H, D)


def _rowwise(model: torch.nn.Module) -> None:
    from transformers import AttentionInterface

    AttentionInterface.register(ROWWISE, rowwise_attention)
    model.set_attn_implementation(ROWWISE)


def _share_tied_head(model: torch.nn.Module) -> None:
    """An output head tied to the embedding (per-output-channel = per-row scales) keeps one int8 copy."""
    embed, head = model.get_input_embeddings(), model.get_output_embeddings()
    if getattr(model.config, "tie_word_embeddings", False) and isinstance(head, Int8Linear) \
            and isinstance(embed, Int8Embedding):
        head.qweight, head.scale = embed.qweight, embed.scale


def check_mode(mode) -> str:
    mode = "none" if mode in (None, "", "none", False) else str(mode).lower()
    if mode not in MODES:
        raise InputError(f"{option('draft_quant')} must be one of {', '.join(MODES)}, not {mode!r}.")
    return mode


def quantize_draft(pair, mode="int8"):
    """The same pair with its draft model's weights in `mode` ("int8"): a new Pair sharing the
    target, the tokenizer and the draft's float weights (only the int8 copies are new memory),
    built once per pair and mode, so every caller (app, bench, notebooks) gets the same one.
    CPU only: on CUDA the bf16 draft is already cheap relative to the target."""
    import dataclasses

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
