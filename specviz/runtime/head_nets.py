"""Drafting networks that read the target's hidden states, and their files.

Medusa (Cai et al. 2024, Medusa-1: the target frozen). The target's output head reads token
t+1 from f_t, the last hidden state at position t; Medusa head k reads token t+1+k from the same
f_t: a residual SiLU block, f_t + SiLU(W_k f_t + b_k), then the target's own output head. All K
heads run at once on one feature, so a whole draft costs one small forward.

EAGLE (Li et al. 2024, EAGLE-1/2). Drafting happens at the feature level: from the pair
(f_t, embedding of x_{t+1}) a one-layer decoder (fc -> attention -> SiLU-gated MLP, with its own
KV cache over the committed positions) predicts f_{t+1}, and the target's output head reads
x_{t+2} from it. The next draft step feeds (predicted f_{t+1}, drafted x_{t+2}), and so on: one
small forward per depth. Its layer is narrower than the target's (`width`) so the shipped file
stays small; the fc maps the target's width in and `out` maps back.

DFlash (block diffusion drafting; arXiv 2602.06036, 2026). A block of B positions, the last committed
token then B - 1 mask tokens, goes through a few decoder layers in ONE forward with
bidirectional attention inside the block; every layer's attention also reads the target's
context (its fused low, middle, high and last states of every committed position, projected to
keys and values at each layer: "KV injection"), so what the block knows of the text comes from
the target, not from a draft model's own reading of it. Position j of the block is its guess of
the token j ahead; all B - 1 guesses come out of the same forward (DFlashNet).

All of them read tokens through the target's frozen output head, restricted to a draft vocabulary: the
`vocab` most frequent target argmaxes of the training data (FR-Spec, EAGLE-3). That is most of
the saving: the full head (151,936 x 1,536 for the 1.5B target) costs about a sixth of a target
forward on a CPU, the top 16k rows a tenth of that. Tokens outside get q = 0; when the target
wants one, the rejection rule rejects and resamples exactly, so nothing is lost but acceptance.

Files: `<kind>.safetensors` (the network, the draft vocabulary, the architecture in its metadata)
beside a `manifest.json` that records how they were made and the sha256 of each file. Loading
checks the hash and that the heads fit the pair (hidden size, vocabulary size and a fingerprint
of the target's output head); anything wrong is one `HeadsError` naming the command that retrains.
"""

from __future__ import annotations

import copy
import json
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from specviz import files
from specviz.errors import SpecvizError
from specviz.runtime.quant import fill_int8

KINDS = ("medusa", "eagle", "eagle3", "peagle", "dflash")
PACKAGED = Path(__file__).resolve().parents[1] / "data" / "heads"  # <pair>/manifest.json + <kind>.safetensors


class HeadsError(SpecvizError):
    """Heads that are missing, corrupt or made for another target."""


def retrain_hint(kind: str, pair_name: str, folder: Optional[Path] = None) -> str:
    """The command that (re)makes the heads where they are looked for: the pair's default folder
    needs no --out (the shipped one is named, for a source checkout)."""
    command = f"python -m specviz train {kind} --pair {pair_name}"
    if folder is not None and Path(folder) != heads_folder(pair_name) or _packaged(pair_name):
        command += f" --out {Path(folder) if folder is not None else heads_folder(pair_name)}"
    return command


# ---------------------------------------------------------------------------------------------
# the networks

class RMSNorm(nn.Module):
    def __init__(self, width: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        return (x.float() * scale).to(x.dtype) * self.weight


class MedusaHeads(nn.Module):
    """K residual SiLU blocks on one feature: (..., d) -> (..., K, d), head k's guess of the
    feature the output head should read for token t+1+k."""

    def __init__(self, hidden: int, heads: int = 4):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Linear(hidden, hidden) for _ in range(heads))
        for block in self.blocks:  # start as the identity: every head first guesses token t+1
            nn.init.zeros_(block.weight)
            nn.init.zeros_(block.bias)

    @property
    def heads(self) -> int:
        return len(self.blocks)

    def forward(self, f: torch.Tensor) -> torch.Tensor:
        return torch.stack([f + F.silu(block(f)) for block in self.blocks], dim=-2)


def _rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotary position embedding of (heads, T, dh) at `positions` (T,)."""
    dh = x.shape[-1]
    inv = 1.0 / theta ** (torch.arange(0, dh, 2, device=x.device, dtype=torch.float32) / dh)
    angles = positions.to(torch.float32)[:, None] * inv[None]  # (T, dh/2)
    cos, sin = torch.cat([angles.cos()] * 2, -1).to(x.dtype), torch.cat([angles.sin()] * 2, -1).to(x.dtype)
    half = dh // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


def _grouped_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Optional[torch.Tensor]) -> torch.Tensor:
    """Attention of (heads, T, dh) queries over (kv_heads, S, dh) keys and values, each key/value
    head shared by heads / kv_heads query heads; mask (T, S) True where a query may look (None: all)."""
    group = q.shape[0] // k.shape[0]
    return F.scaled_dot_product_attention(q[None], k.repeat_interleave(group, 0)[None], v.repeat_interleave(group, 0)[None],
                                          attn_mask=None if mask is None else mask[None, None])[0]


class EagleNet(nn.Module):
    """fc over [f_t ; e(x_{t+1})] -> one pre-norm decoder layer -> predicted f_{t+1}."""

    def __init__(self, hidden: int, width: int = 512, heads: int = 8, mlp: int = 1536, theta: float = 10000.0):
        super().__init__()
        self.width, self.n_heads, self.theta = width, heads, theta
        self.norm_f, self.norm_e = RMSNorm(hidden), RMSNorm(hidden)
        self.fc = nn.Linear(2 * hidden, width)
        self.norm_attn, self.norm_mlp, self.norm_out = RMSNorm(width), RMSNorm(width), RMSNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.o = nn.Linear(width, width, bias=False)
        self.gate_up = nn.Linear(width, 2 * mlp, bias=False)
        self.down = nn.Linear(mlp, width, bias=False)
        self.out = nn.Linear(width, hidden)

    def forward(self, f: torch.Tensor, e: torch.Tensor, positions: torch.Tensor, cache=None,
                mask: Optional[torch.Tensor] = None) -> tuple:
        """f, e: (T, d) features and token embeddings of T fed pairs at `positions`.
        cache: (keys, values) of earlier pairs, (heads, S, dh) each, or None. mask: (T, S + T)
        bool (None: causal). Returns (predicted features (T, d), (keys, values) with these added)."""
        x = self.fc(torch.cat([self.norm_f(f), self.norm_e(e)], dim=-1))
        t, dh = x.shape[0], self.width // self.n_heads
        q, k, v = self.qkv(self.norm_attn(x)).view(t, 3, self.n_heads, dh).permute(1, 2, 0, 3)
        q, k = _rope(q, positions, self.theta), _rope(k, positions, self.theta)
        if cache is not None:
            k, v = torch.cat([cache[0], k], dim=1), torch.cat([cache[1], v], dim=1)
        if mask is None:
            s = k.shape[1]
            mask = torch.ones(t, s, dtype=torch.bool, device=x.device).tril(s - t)
        attn = F.scaled_dot_product_attention(q[None], k[None], v[None], attn_mask=mask[None, None])[0]
        x = x + self.o(attn.transpose(0, 1).reshape(t, self.width))
        gate, up = self.gate_up(self.norm_mlp(x)).chunk(2, dim=-1)
        x = x + self.down(F.silu(gate) * up)
        return self.out(self.norm_out(x)), (k, v)


class Eagle3Net(EagleNet):
    """EAGLE-3 (Li et al. 2025): the layer of EagleNet, fed at depth 1 with a fusion of the
    target's states at several depths instead of its last one, and trained on its own outputs
    at every further depth (training-time test) with no regression onto the target's features.

    Depth 1 reads `slots` target states of x_t (low, middle and high layers: specviz.training.selfgen.
    feature_layers), each RMS-normed (their scales differ by orders of magnitude across depth),
    concatenated and mapped to the target's width by `fuse`; with e(x_{t+1}) the layer predicts
    a vector the target's output head reads x_{t+2} from. Depth s + 1 feeds that vector back
    (the layer's own output, not a guess of a target feature) with the token drafted at depth s.

    parallel=True is P-EAGLE-style parallel drafting: depths 2..K are fed placeholders at their
    positions instead of the previous depth's output and token, so one forward over [the new
    target pairs ; K - 1 placeholders] drafts all K tokens. A placeholder is the last real pair's
    fused feature (the anchor: what the target knows at the draft's base, as Medusa's heads read
    it) with a learnt embedding of its depth (`mask_embed`, one row per depth) in place of the
    token. It attends to the real pairs and the placeholders before it; what a depth drafts cannot
    depend on the tokens drafted before it (as Medusa's heads), the price of drafting K tokens for
    the cost of one small forward. Why not one learnt placeholder feature for all (as P-EAGLE's
    reference does with a deeper drafter): with one layer, the placeholder's query is then the
    same at every position, its attention over the real pairs one fixed profile of distance, and
    the anchor's state reaches it only through that blur (measured on the real pair: depths 2-5
    at 0.05-0.09 held-out top-1 after 150 steps where EAGLE-3's reached 0.27-0.28)."""

    def __init__(self, hidden: int, width: int = 512, heads: int = 8, mlp: int = 1536, theta: float = 10000.0,
                 slots: int = 3, parallel: bool = False, depths: int = 32):
        super().__init__(hidden, width, heads, mlp, theta)
        self.slots, self.parallel = slots, parallel
        self.norm_slots = nn.ModuleList(RMSNorm(hidden) for _ in range(slots))
        self.fuse = nn.Linear(slots * hidden, hidden, bias=False)
        if parallel:  # depths 2..`depths` have a placeholder embedding each
            self.mask_embed = nn.Parameter(torch.randn(depths - 1, hidden))

    def features(self, f: torch.Tensor) -> torch.Tensor:
        """(T, S, d) target states (the first `slots` are fused) -> (T, d); (T, d) passes as it is
        (the layer's own output, fed back at deeper depths)."""
        if f.dim() == 2:
            return f
        return self.fuse(torch.cat([norm(f[:, i]) for i, norm in enumerate(self.norm_slots)], dim=-1))

    @property
    def depths(self) -> int:
        """The deepest depth parallel drafting can draft (1 + its placeholder embeddings)."""
        return 1 + self.mask_embed.shape[0] if self.parallel else 0

    def placeholders(self, depths, anchors: torch.Tensor) -> tuple:
        """(features, embeddings) of parallel-drafting positions at `depths` (each 2..self.depths),
        (len(depths), d) each: `anchors`, the fused features of each one's last real pair ((d,)
        for all, or one row each), and the depths' embeddings."""
        index = torch.as_tensor(depths, device=self.mask_embed.device).long() - 2
        if len(index) and (int(index.min()) < 0 or int(index.max()) >= self.mask_embed.shape[0]):
            raise ValueError(f"placeholder depths must be 2..{self.depths}, got {list(map(int, index + 2))}")
        return anchors.expand(len(index), -1), self.mask_embed[index]

    def forward(self, f: torch.Tensor, e: torch.Tensor, positions: torch.Tensor, cache=None,
                mask: Optional[torch.Tensor] = None) -> tuple:
        return super().forward(self.features(f), e, positions, cache, mask)


class Eagle3LlamaNet(nn.Module):
    """EAGLE-3 in SpecForge's layout (`LlamaForCausalLMEagle3`), the function llama.cpp's
    `draft-eagle3` computes (src/models/eagle3.cpp), so one trained network runs in specviz's
    engine and, exported to GGUF (specviz.runtime.llamacpp.drafter), in llama-server's own loop.

    It differs from Eagle3Net where llama.cpp fixes the function: the target's three states are
    concatenated raw and mapped by `fc` (no per-layer norm) to g, of the target's width (the
    decoder reads the target's own token embeddings, so it cannot be narrower); the layer's input
    is [norm(e) ; norm(g)] (2 x width), projected to queries, keys and values without bias
    (grouped: `kv_heads` key/value heads); the residual starts from g itself; the layer's output
    h (before the final norm) is what deeper depths feed back, and `readout(h)` = norm(h) is what
    the output rows read. Rotary positions rotate halves here (NEOX order); the GGUF export
    permutes the query and key rows for llama.cpp's pairwise (NORM) rotation, as llama.cpp's own
    converter does for LLaMA checkpoints."""

    layout = "llama"

    def __init__(self, hidden: int, heads: int = 12, kv_heads: int = 2, mlp: int = 1536, theta: float = 10000.0,
                 eps: float = 1e-6, slots: int = 3):
        super().__init__()
        if hidden % heads or heads % kv_heads:
            raise ValueError(f"width {hidden} must split into {heads} heads, and those into {kv_heads} groups")
        self.width, self.n_heads, self.kv_heads, self.theta, self.slots = hidden, heads, kv_heads, theta, slots
        self.head_dim = hidden // heads
        self.fc = nn.Linear(slots * hidden, hidden, bias=False)
        self.norm_e, self.norm_g = RMSNorm(hidden, eps), RMSNorm(hidden, eps)
        self.q = nn.Linear(2 * hidden, heads * self.head_dim, bias=False)
        self.k = nn.Linear(2 * hidden, kv_heads * self.head_dim, bias=False)
        self.v = nn.Linear(2 * hidden, kv_heads * self.head_dim, bias=False)
        self.o = nn.Linear(heads * self.head_dim, hidden, bias=False)
        self.norm_mlp = RMSNorm(hidden, eps)
        self.gate = nn.Linear(hidden, mlp, bias=False)
        self.up = nn.Linear(hidden, mlp, bias=False)
        self.down = nn.Linear(mlp, hidden, bias=False)
        self.norm_out = RMSNorm(hidden, eps)

    def features(self, f: torch.Tensor) -> torch.Tensor:
        """(T, S, d) target states (the first `slots`, concatenated in order) -> g (T, d); (T, d)
        passes as it is (the layer's own output h, fed back at deeper depths)."""
        if f.dim() == 2:
            return f
        return self.fc(f[:, :self.slots].reshape(f.shape[0], -1))

    def readout(self, h: torch.Tensor) -> torch.Tensor:
        """What the output rows read: the final norm of the layer's output."""
        return self.norm_out(h)

    def forward(self, f: torch.Tensor, e: torch.Tensor, positions: torch.Tensor, cache=None,
                mask: Optional[torch.Tensor] = None) -> tuple:
        """As EagleNet.forward, but returns the layer's output h (feed it back; `readout` before
        the output rows) and keys/values of the `kv_heads` groups."""
        g = self.features(f)
        x = torch.cat([self.norm_e(e.to(g.dtype)), self.norm_g(g)], dim=-1)
        t, dh = x.shape[0], self.head_dim
        q = _rope(self.q(x).view(t, self.n_heads, dh).transpose(0, 1), positions, self.theta)
        k = _rope(self.k(x).view(t, self.kv_heads, dh).transpose(0, 1), positions, self.theta)
        v = self.v(x).view(t, self.kv_heads, dh).transpose(0, 1)
        if cache is not None:
            k, v = torch.cat([cache[0], k], dim=1), torch.cat([cache[1], v], dim=1)
        if mask is None:
            s = k.shape[1]
            mask = torch.ones(t, s, dtype=torch.bool, device=x.device).tril(s - t)
        attn = _grouped_attention(q, k, v, mask)
        r = g + self.o(attn.transpose(0, 1).reshape(t, self.n_heads * dh))
        m = self.norm_mlp(r)
        return r + self.down(F.silu(self.gate(m)) * self.up(m)), (k, v)


class DFlashLayer(nn.Module):
    """One pre-norm decoder layer of DFlashNet: its queries are the block's positions, its keys and
    values the target's context (projected by this layer's own key/value map) and then the
    block's. Per-head RMS norms on queries and keys (Qwen3's), rotary positions on both."""

    def __init__(self, width: int, heads: int, mlp: int, theta: float):
        super().__init__()
        self.width, self.n_heads, self.theta = width, heads, theta
        dh = width // heads
        self.norm_attn, self.norm_mlp = RMSNorm(width), RMSNorm(width)
        self.q = nn.Linear(width, width, bias=False)
        self.kv = nn.Linear(width, 2 * width, bias=False)
        self.norm_q, self.norm_k = RMSNorm(dh), RMSNorm(dh)
        self.o = nn.Linear(width, width, bias=False)
        self.gate_up = nn.Linear(width, 2 * mlp, bias=False)
        self.down = nn.Linear(mlp, width, bias=False)

    def keys_values(self, x: torch.Tensor, positions: torch.Tensor) -> tuple:
        """(T, width) normed inputs -> (keys, values), (heads, T, dh) each, keys rotated to `positions`."""
        t, dh = x.shape[0], self.width // self.n_heads
        k, v = self.kv(x).view(t, 2, self.n_heads, dh).permute(1, 2, 0, 3)
        return _rope(self.norm_k(k), positions, self.theta), v

    def forward(self, x: torch.Tensor, positions: torch.Tensor, context: tuple,
                mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        t, dh = x.shape[0], self.width // self.n_heads
        h = self.norm_attn(x)
        q = _rope(self.norm_q(self.q(h).view(t, self.n_heads, dh).transpose(0, 1)), positions, self.theta)
        k, v = self.keys_values(h, positions)
        k, v = torch.cat([context[0], k], dim=1), torch.cat([context[1], v], dim=1)
        attn = F.scaled_dot_product_attention(q[None], k[None], v[None],
                                              attn_mask=None if mask is None else mask[None, None])[0]
        x = x + self.o(attn.transpose(0, 1).reshape(t, self.width))
        gate, up = self.gate_up(self.norm_mlp(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


class DFlashNet(nn.Module):
    """DFlash's block drafter: `n_layers` DFlashLayers of `width`, reading `slots` target states
    per context position (EAGLE-3's low, middle and high layers and the last hidden state: all of
    them come with the verification pass, so the context costs no extra target forward).

    context(f): (T, slots, d) target states -> (T, width), each state RMS-normed, concatenated,
    mapped and normed (DFlash's fc + hidden norm). context_kv(ctx, positions): each layer's keys
    and values of those positions, a list of (keys, values); a drafter keeps them as its cache
    of the committed text. block(anchors, size): the input rows of blocks, each the anchor token's
    embedding (the target's own, mapped to `width`) and then size - 1 copies of the learnt mask
    row. forward(x, positions, kv, mask): the block rows through the layers, every row seeing all
    of `kv` and the whole block (mask None: one block; a training batch of several gives each
    block its context and itself) -> (T, d) vectors the target's output head reads; row j of a
    block is the guess of the token j positions after the anchor (row 0 is the anchor itself).

    anchor_state=True adds the context row before the anchor (the target's fused state of the last
    token it read: what EAGLE's and P-EAGLE's rows start from) to every row of the block. Without
    it (DFlash's own design) the block learns of the text through attention alone; with it the
    block starts from what the target knows at its base (docs/heads.md measures both)."""

    def __init__(self, hidden: int, width: int = 512, heads: int = 8, mlp: int = 1536, theta: float = 10000.0,
                 slots: int = 4, n_layers: int = 2, block: int = 16, anchor_state: bool = False):
        super().__init__()
        self.anchor_state = anchor_state
        if block < 2:
            raise ValueError(f"a DFlash block holds the anchor and at least one mask: block >= 2, got {block}")
        self.width, self.slots, self.block_size = width, slots, block
        self.norm_slots = nn.ModuleList(RMSNorm(hidden) for _ in range(slots))
        self.fuse = nn.Linear(slots * hidden, width, bias=False)
        self.norm_ctx = RMSNorm(width)
        self.norm_e = RMSNorm(hidden)
        self.embed_in = nn.Linear(hidden, width, bias=False)
        self.mask = nn.Parameter(torch.randn(width) * 0.02)
        self.layers = nn.ModuleList(DFlashLayer(width, heads, mlp, theta) for _ in range(n_layers))
        self.norm_out = RMSNorm(width)
        self.out = nn.Linear(width, hidden)

    @property
    def depths(self) -> int:
        """The most tokens one block drafts."""
        return self.block_size - 1

    def context(self, f: torch.Tensor) -> torch.Tensor:
        if f.dim() == 2:  # one state per position (a toy table's logits row): it fills every slot
            f = f[:, None].expand(-1, self.slots, -1)
        return self.norm_ctx(self.fuse(torch.cat([norm(f[:, i]) for i, norm in enumerate(self.norm_slots)], dim=-1)))

    def context_kv(self, ctx: torch.Tensor, positions: torch.Tensor) -> list:
        return [layer.keys_values(ctx, positions) for layer in self.layers]

    def block(self, anchors: torch.Tensor, size: Optional[int] = None, states: Optional[torch.Tensor] = None) -> torch.Tensor:
        """(n, d) anchor-token embeddings -> (n * size, width) rows: each anchor, then size - 1 masks.
        With anchor_state, `states` (n, width) are the context rows just before each anchor (the
        target's fused state of the last token it has read), added to every row of its block."""
        size = size or self.block_size
        first = self.embed_in(self.norm_e(anchors))
        masks = self.mask.to(first.dtype).expand(first.shape[0], size - 1, -1)
        rows = torch.cat([first[:, None], masks], dim=1)
        if self.anchor_state:
            rows = rows + states[:, None].to(rows.dtype)
        return rows.reshape(-1, self.width)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, kv: list,
                mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        for layer, context in zip(self.layers, kv):
            x = layer(x, positions, context, mask)
        return self.out(self.norm_out(x))


class DFlashLlamaLayer(nn.Module):
    """One decoder layer of DFlashLlamaNet, as llama.cpp's dflash graph computes it: RMS norm, queries
    (heads of `head_dim`) and grouped keys/values without bias, per-head RMS norms on queries and
    keys, rotary positions (halves), attention over the injected context and the whole block, the
    output projection, residual; RMS norm, SwiGLU, residual. The context's keys and values are
    this layer's key/value maps of the fused target states, with the key norm and rotation (no
    input norm: the fused states are normed already)."""

    def __init__(self, width: int, heads: int, kv_heads: int, head_dim: int, mlp: int, theta: float, eps: float):
        super().__init__()
        self.n_heads, self.kv_heads, self.head_dim, self.theta = heads, kv_heads, head_dim, theta
        self.norm_attn, self.norm_mlp = RMSNorm(width, eps), RMSNorm(width, eps)
        self.q = nn.Linear(width, heads * head_dim, bias=False)
        self.k = nn.Linear(width, kv_heads * head_dim, bias=False)
        self.v = nn.Linear(width, kv_heads * head_dim, bias=False)
        self.norm_q, self.norm_k = RMSNorm(head_dim, eps), RMSNorm(head_dim, eps)
        self.o = nn.Linear(heads * head_dim, width, bias=False)
        self.gate = nn.Linear(width, mlp, bias=False)
        self.up = nn.Linear(width, mlp, bias=False)
        self.down = nn.Linear(mlp, width, bias=False)

    def keys_values(self, x: torch.Tensor, positions: torch.Tensor) -> tuple:
        """(T, width) -> (keys, values), (kv_heads, T, head_dim) each, keys normed and rotated."""
        t = x.shape[0]
        k = self.norm_k(self.k(x).view(t, self.kv_heads, self.head_dim).transpose(0, 1))
        return _rope(k, positions, self.theta), self.v(x).view(t, self.kv_heads, self.head_dim).transpose(0, 1)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, context: tuple,
                mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        t = x.shape[0]
        h = self.norm_attn(x)
        q = _rope(self.norm_q(self.q(h).view(t, self.n_heads, self.head_dim).transpose(0, 1)), positions, self.theta)
        k, v = self.keys_values(h, positions)
        k, v = torch.cat([context[0], k], dim=1), torch.cat([context[1], v], dim=1)
        attn = _grouped_attention(q, k, v, mask)
        x = x + self.o(attn.transpose(0, 1).reshape(t, self.n_heads * self.head_dim))
        m = self.norm_mlp(x)
        return x + self.down(F.silu(self.gate(m)) * self.up(m))


class DFlashLlamaNet(nn.Module):
    """DFlash in the layout llama.cpp's `draft-dflash` runs (src/models/dflash.cpp, z-lab's DFlash),
    so one trained network drafts in specviz's engine and, exported to GGUF
    (specviz.runtime.llamacpp.drafter), in llama-server's own loop. The same interface as
    DFlashNet (context, context_kv, block, forward), a different function where llama.cpp fixes it:

    - the context is fc over the target's `slots` layer inputs concatenated raw, then an RMS norm
      (llama.cpp's encoder: no norm per state, no last state, no anchor state);
    - the decoder runs at the target's width, on the target's own token embeddings: a block's rows
      are the anchor token's embedding and then the embedding of the target's `mask_token` (a
      token of its vocabulary, whose row `set_mask` copies from the target: llama.cpp reads it
      from the target too), with no map in between;
    - each layer is a DFlashLlamaLayer (grouped keys/values, heads of 128 at the target's width);
    - the output is the final norm of the last layer, which the output rows read (no map back).

    A block runs whole in llama.cpp too, as the anchor and `--draft-max` masks: train `block` =
    the draft length + 1 that llama-server will be given, the GGUF says so (dflash.block_size)."""

    layout = "llama"
    anchor_state = False

    def __init__(self, hidden: int, heads: int = 12, kv_heads: int = 2, mlp: int = 1536, theta: float = 10000.0,
                 eps: float = 1e-6, slots: int = 3, n_layers: int = 1, block: int = 4, mask_token: int = 0):
        super().__init__()
        if hidden % heads or heads % kv_heads:
            raise ValueError(f"width {hidden} must split into {heads} heads, and those into {kv_heads} groups")
        if block < 2:
            raise ValueError(f"a DFlash block holds the anchor and at least one mask: block >= 2, got {block}")
        self.width, self.slots, self.block_size, self.mask_token = hidden, slots, block, mask_token
        self.n_heads, self.kv_heads, self.head_dim, self.theta = heads, kv_heads, hidden // heads, theta
        self.fc = nn.Linear(slots * hidden, hidden, bias=False)
        self.norm_ctx = RMSNorm(hidden, eps)
        # the target's embedding of mask_token, set where the target is at hand (set_mask: the trainer,
        # BoundHeads); not in the file, so it stays the target's row exactly, as in llama.cpp
        self.register_buffer("mask", torch.zeros(hidden), persistent=False)
        self.layers = nn.ModuleList(DFlashLlamaLayer(hidden, heads, kv_heads, hidden // heads, mlp, theta, eps)
                                    for _ in range(n_layers))
        self.norm_out = RMSNorm(hidden, eps)

    @property
    def depths(self) -> int:
        return self.block_size - 1

    def set_mask(self, row: torch.Tensor) -> None:
        """The target's embedding of mask_token: the masks' rows (a fixed input, not learnt)."""
        self.mask.copy_(row.detach().reshape(-1).to(self.mask))

    def context(self, f: torch.Tensor) -> torch.Tensor:
        """(T, S, d) target states (the first `slots`, concatenated in order) -> (T, d)."""
        if f.dim() == 2:  # one state per position (a toy table's logits row): it fills every slot
            f = f[:, None].expand(-1, self.slots, -1)
        return self.norm_ctx(self.fc(f[:, :self.slots].reshape(f.shape[0], -1)))

    def context_kv(self, ctx: torch.Tensor, positions: torch.Tensor) -> list:
        return [layer.keys_values(ctx, positions) for layer in self.layers]

    def block(self, anchors: torch.Tensor, size: Optional[int] = None, states: Optional[torch.Tensor] = None) -> torch.Tensor:
        """(n, d) anchor-token embeddings -> (n * size, d) rows: each anchor, then size - 1 mask rows."""
        size = size or self.block_size
        masks = self.mask.to(anchors.dtype).expand(anchors.shape[0], size - 1, -1)
        return torch.cat([anchors[:, None], masks], dim=1).reshape(-1, self.width)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, kv: list,
                mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        for layer, context in zip(self.layers, kv):
            x = layer(x, positions, context, mask)
        return self.norm_out(x)


NETS = {"medusa": MedusaHeads, "eagle": EagleNet, "eagle3": Eagle3Net, "peagle": Eagle3Net, "dflash": DFlashNet}


# ---------------------------------------------------------------------------------------------
# a trained set, bound to a target

def output_rows(target, ids: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Rows `ids` (default: all) of the target's output head as float weights (V', d); an int8
    head (memory="low", specviz.runtime.quant) is de-quantised, only the rows asked for."""
    head = target.get_output_embeddings()
    weight = getattr(head, "weight", None)
    with torch.no_grad():
        if weight is not None:
            weight = weight.detach()
            return weight if ids is None else weight.index_select(0, ids.to(weight.device))
        q, scale = head.qweight, head.scale
        if ids is not None:
            q, scale = q.index_select(0, ids.to(q.device)), scale.index_select(0, ids.to(q.device))
        return q.float() * scale.float()[:, None]


def head_fingerprint(target) -> list:
    """A few entries of the target's output head (8 rows spread over the vocabulary, 16 columns):
    enough to tell a different model from the same one in another dtype or quantisation."""
    _, vocab = hidden_and_vocab(target)
    rows = output_rows(target, torch.linspace(0, vocab - 1, 8).long())
    return [round(float(x), 5) for x in rows[:, :16].float().flatten().tolist()]


def fingerprint_matches(a: list, b: list) -> bool:
    if len(a) != len(b):
        return False
    x, y = torch.tensor(a), torch.tensor(b)
    return float(F.cosine_similarity(x, y, dim=0)) > 0.9  # GGUF Q4_K_M vs bf16 of one model: > 0.99


@dataclass
class HeadSet:
    """A trained drafting network, the draft vocabulary it reads, and where it came from."""

    kind: str
    net: nn.Module
    vocab_ids: Optional[torch.Tensor]  # (N,) target token ids the heads can propose; None: all
    config: dict  # the network's constructor arguments, plus hidden and vocab_size
    manifest: dict = field(default_factory=dict)  # how it was made (data, steps, held-out accuracy...)
    _bound: Optional[tuple] = field(default=None, init=False, repr=False, compare=False)  # bind()'s last copy

    @property
    def depth(self) -> int:
        """How many tokens one draft may hold: Medusa's heads, DFlash's masks (block - 1), P-EAGLE's
        placeholders plus one; EAGLE is limited by its caller."""
        if self.kind == "medusa":
            return self.net.heads
        if self.kind == "dflash":
            return self.net.depths
        return self.net.depths if getattr(self.net, "parallel", False) else 32

    @property
    def feature_layers(self) -> Optional[tuple]:
        """EAGLE-3: the target layers whose states the network reads (None: the last hidden state)."""
        layers = self.config.get("layers")
        return tuple(layers) if layers else None

    def bind(self, target) -> "BoundHeads":
        """A copy of the network on the target's device and dtype, with the target's output head
        (cut to the draft vocabulary) and input embeddings. Runs only read it, so the copy is
        kept for the next run on the same target, and made again once the network's weights
        changed (trained further, or loaded into: any in-place write bumps a tensor's version)."""
        key = self._version_of(target)
        kept = self._bound
        if kept is not None and kept[0] == key and kept[1]() is target:
            return kept[2]
        bound = BoundHeads(self, target)
        self._bound = (key, weakref.ref(target), bound)
        return bound

    def _version_of(self, target) -> tuple:
        """What the bound copy was made from: the network's tensors, the draft vocabulary and the
        target's output head (where, in which version: an in-place write bumps `_version`)."""
        head = target.get_output_embeddings()
        tensors = (*self.net.parameters(), *self.net.buffers(), *head.parameters(), *head.buffers(),
                   *(() if self.vocab_ids is None else (self.vocab_ids,)))
        return tuple((t.data_ptr(), t._version) for t in tensors)


class BoundHeads:
    def __init__(self, heads: HeadSet, target):
        self.device, self.dtype = torch.device(target.device), target.dtype
        self.kind, (_, self.vocab_size) = heads.kind, hidden_and_vocab(target)
        self.feature_layers = heads.feature_layers
        # a copy: the HeadSet's own network stays as it was (a notebook may train it further)
        self.net = copy.deepcopy(heads.net).to(device=self.device, dtype=self.dtype).eval()
        ids = heads.vocab_ids
        self.ids = None if ids is None else ids.to(self.device)
        self.head = output_rows(target, self.ids).to(self.dtype)  # a copy of the rows (a view when all)
        self.embed = target.get_input_embeddings()
        self.draft_vocab = self.vocab_size if ids is None else int(ids.numel())
        if hasattr(self.net, "set_mask"):  # DFlash in llama.cpp's layout: its masks are the target's mask token
            with torch.no_grad():
                self.net.set_mask(self.embed(torch.tensor([self.net.mask_token], device=self.device)))

    def logits(self, feats: torch.Tensor) -> torch.Tensor:
        """(..., d) features -> float32 logits (..., V) over the target's vocabulary; tokens outside
        the draft vocabulary get -inf (q = 0)."""
        readout = getattr(self.net, "readout", None)  # EAGLE-3 in llama.cpp's layout: its final norm first
        if readout is not None:
            feats = readout(feats.to(self.dtype))
        small = F.linear(feats.to(self.dtype), self.head).float()
        if self.ids is None:
            return small
        out = torch.full((*small.shape[:-1], self.vocab_size), float("-inf"), device=small.device)
        out[..., self.ids] = small
        return out


# ---------------------------------------------------------------------------------------------
# files

INT8_SCALE = ".int8_scale"  # suffix of a stored int8 matrix's per-row scales


def _stored(net: nn.Module, storage: str) -> dict:
    """`net`'s weights as the file keeps them: bf16, or (storage "int8", matrices only) int8 rows
    with a bf16 scale each (specviz.runtime.quant's symmetric per-row rule, as for the int8 draft model)."""

    out = {}
    for name, t in net.state_dict().items():
        t = t.detach().to("cpu", torch.float32)
        if storage != "int8" or t.dim() != 2:
            out[name] = t.to(torch.bfloat16).contiguous()
            continue
        q, scale = torch.empty(t.shape, dtype=torch.int8), torch.empty(t.shape[0])
        fill_int8(q, scale, lambda a, b: t[a:b])
        out[name], out[name + INT8_SCALE] = q, scale[:, None].to(torch.bfloat16).contiguous()
    return out


def _loaded(tensors: dict) -> dict:
    """The float weights of a file _stored wrote (int8 matrices de-quantised)."""
    out = {}
    for name, t in tensors.items():
        if name.endswith(INT8_SCALE):
            continue
        scale = tensors.get(name + INT8_SCALE)
        out[name] = t.float() * scale.float() if scale is not None else t.float()
    return out


def as_stored(net: nn.Module, storage: str) -> dict:
    """`net`'s weights as a file of that storage gives them back (to measure what int8 costs)."""
    return _loaded(_stored(net, storage))


def save_heads(heads: HeadSet, folder: Path, fingerprint: list, storage: str = "bf16") -> Path:
    """Write `<kind>.safetensors` and record it in the folder's manifest.json. `storage`: "bf16",
    or "int8" (matrices as int8 rows with a scale each, half the bytes: what lets every shipped
    drafter fit the package's budget; the held-out accuracy it costs is measured in the report)."""
    from safetensors.torch import save_file

    if storage not in ("bf16", "int8"):
        raise ValueError(f"storage must be bf16 or int8, got {storage!r}")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{heads.kind}.safetensors"
    tensors = _stored(heads.net, storage)
    if heads.vocab_ids is not None:
        tensors["vocab_ids"] = heads.vocab_ids.to("cpu", torch.int32).contiguous()
    manifest_path = folder / "manifest.json"
    with files.lock(manifest_path, f"writing {heads.kind} heads into {folder}"):  # one manifest, several kinds
        with files.new_file(path, f"saving {path.name}") as tmp:
            save_file(tensors, str(tmp), metadata={"kind": heads.kind, "config": json.dumps(heads.config),
                                                   "storage": storage})
        manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
        manifest[heads.kind] = {**heads.manifest, "file": path.name, "sha256": files.sha256_of(path), "storage": storage,
                                "bytes": path.stat().st_size, "config": heads.config, "fingerprint": fingerprint}
        files.write_json(manifest_path, manifest)
    return path


def _packaged(pair_name: str) -> bool:
    return (PACKAGED / pair_name).is_dir()


def heads_folder(pair_name: str) -> Path:
    """Where a pair's heads are looked for by default: the ones shipped with specviz for it, else
    the ones `python -m specviz train` wrote for it ($SPECVIZ_CACHE/train/<pair>/heads)."""
    if _packaged(pair_name):
        return PACKAGED / pair_name
    return files.train_dir(pair_name) / "heads"


def check_heads_file(kind: str, pair_name: str, folder: Optional[Path] = None) -> tuple:
    """(manifest entry, file path) of the `kind` heads for `pair_name`, the file checked against
    its sha256: no model needed, so the CLI and the app can refuse before loading weights."""
    if kind not in KINDS:
        raise HeadsError(f"Unknown heads {kind!r}: choose one of {', '.join(KINDS)}.")
    folder = Path(folder) if folder is not None else heads_folder(pair_name)
    hint = retrain_hint(kind, pair_name, folder)
    manifest_path = folder / "manifest.json"
    try:
        entry = json.loads(manifest_path.read_text())[kind]
    except FileNotFoundError:
        raise HeadsError(f"No {kind} heads for the pair {pair_name!r} ({manifest_path} is missing): "
                         f"train them with `{hint}`.") from None
    except (KeyError, ValueError, TypeError, OSError):
        raise HeadsError(f"{manifest_path} has no readable entry for {kind} heads: retrain them with `{hint}`.") from None
    fields = ("file", "sha256", "config", "fingerprint")
    if (not isinstance(entry, dict) or any(key not in entry for key in fields)
            or not isinstance(entry["config"], dict) or Path(str(entry["file"])).name != entry["file"]):
        raise HeadsError(f"{manifest_path}'s entry for {kind} heads is malformed (it needs {', '.join(fields)}, "
                         f"the file in the same folder): retrain them with `{hint}`.")
    path = folder / entry["file"]
    if not path.is_file():
        raise HeadsError(f"The {kind} heads file {path} is missing: retrain it with `{hint}` "
                         "or reinstall specviz.")
    if files.sha256_of(path) != entry.get("sha256"):
        raise HeadsError(f"The {kind} heads file {path} is corrupt (its sha256 differs from manifest.json): "
                         f"retrain it with `{hint}` or reinstall specviz.")
    return entry, path


def load_heads(kind: str, pair, folder: Optional[Path] = None) -> HeadSet:
    """The `kind` heads for `pair` from `folder` (default: the ones shipped for the pair), checked
    against their manifest and against the pair's target."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    name = pair.family or pair.name  # llama.cpp's run of qwen-coder reads qwen-coder's heads
    entry, path = check_heads_file(kind, name, folder)
    hint = retrain_hint(kind, name, folder)
    try:
        tensors = load_file(str(path))
    except (SafetensorError, OSError, ValueError) as exc:
        raise HeadsError(f"The {kind} heads file {path} cannot be read ({exc}): retrain it with `{hint}`.") from None
    config = dict(entry["config"])
    hidden, vocab = hidden_and_vocab(pair.target)
    if config.get("hidden") != hidden or config.get("vocab_size") != vocab:
        raise HeadsError(f"These {kind} heads were trained for a target with hidden size {config.get('hidden')} and "
                         f"{config.get('vocab_size')} tokens; {name}'s target has {hidden} and {vocab}: "
                         f"train heads for it with `{hint}`.")
    if not fingerprint_matches(entry.get("fingerprint", []), head_fingerprint(pair.target)):
        raise HeadsError(f"These {kind} heads were trained for another target (its output head differs from "
                         f"{name}'s): train heads for it with `{hint}`.")
    vocab_ids = tensors.pop("vocab_ids", None)
    try:
        net = make_net(kind, config)
        net.load_state_dict(_loaded(tensors))
    except (RuntimeError, TypeError, KeyError, ValueError):
        raise HeadsError(f"The {kind} heads file {path} does not match its manifest's architecture: "
                         f"retrain it with `{hint}`.") from None
    return HeadSet(kind, net.eval(), None if vocab_ids is None else vocab_ids.long(), config, entry)


LLAMA_NETS = {"eagle3": Eagle3LlamaNet, "dflash": DFlashLlamaNet}  # the kinds llama.cpp's own loop runs


def make_net(kind: str, config: dict) -> nn.Module:
    args = {k: v for k, v in config.items() if k not in ("hidden", "vocab_size", "draft_vocab", "layers", "layout")}
    if config.get("layout") == "llama":
        if kind not in LLAMA_NETS:
            raise ValueError(f"the llama.cpp layout is {' and '.join(LLAMA_NETS)}'s, not {kind}'s")
        return LLAMA_NETS[kind](config["hidden"], **args)
    return NETS[kind](config["hidden"], **args)


def hidden_and_vocab(target) -> tuple:
    """(hidden size, vocabulary size) as the target's output head sees them."""
    head = target.get_output_embeddings()
    if hasattr(head, "in_features"):
        return int(head.in_features), int(head.out_features)
    return int(head.weight.shape[1]), int(head.weight.shape[0])


def heads_for(pair, kind: str, folder: Optional[Path] = None) -> HeadSet:
    """The pair's `kind` heads: ones attached with `attach_heads`, else loaded once (and kept on
    the pair) from `folder` or the shipped files."""
    cache = pair.__dict__.setdefault("_heads", {})
    key = (kind, str(folder) if folder else None)
    if key not in cache:
        cache[key] = load_heads(kind, pair, folder)
    return cache[key]


def attach_heads(pair, heads: HeadSet) -> None:
    """Use `heads` for the pair's `heads.kind` method from now on (e.g. heads trained in a notebook)."""
    pair.__dict__.setdefault("_heads", {})[(heads.kind, None)] = heads


def param_count(net: nn.Module) -> int:
    return sum(p.numel() for p in net.parameters())


def fmt_params(n: int) -> str:
    return f"{n / 1e6:.1f}M" if n >= 1e6 else f"{n / 1e3:.0f}k"

