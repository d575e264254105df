"""Training a drafter network on cached features: the run's settings (`TrainConfig`), its batches,
the loop with its held-out evaluations and checkpoints (`train_heads`), and the measurements
that explain a trained set (held-out hits per depth, the token ablation, layer probes).
"""

from __future__ import annotations

import copy
import inspect
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from specviz import files
from specviz.errors import InputError
from specviz.runtime.head_nets import HeadSet, MedusaHeads, RMSNorm, hidden_and_vocab, make_net, output_rows
from specviz.training.data import Features
from specviz.training.progress import progress_bar as _progress

# ---------------------------------------------------------------------------------------------
# phase 4: training

EVALUATIONS = 20  # held-out evaluations in a run (eval_every=0): its learning curve's points


def eval_interval(steps: int, eval_every: int = 0) -> int:
    """Steps between held-out evaluations (and checkpoints): `eval_every`, or for 0 about
    EVALUATIONS a run and at least 50 steps apart. A run on more data has more held-out positions
    to score as well as more steps, so a fixed interval would spend ever more of it evaluating."""
    return eval_every or max(50, math.ceil(steps / EVALUATIONS))


@dataclass
class TrainConfig:
    kind: str  # "medusa" | "eagle" | "eagle3" | "peagle" | "dflash"
    epochs: float = 3.0
    batch: int = 1024  # positions per step (EAGLE: windows x window length)
    window: int = 256  # EAGLE: positions per training sequence
    lr: float = 1e-3
    draft_vocab: int = 16384  # the most frequent target argmaxes (0 or >= vocabulary: all tokens)
    heads: int = 4  # medusa
    width: int = 512  # eagle
    attn_heads: int = 8
    mlp: int = 1536
    unroll: int = 3  # eagle: training-time test, the depths trained on the layer's own predictions
    feature_loss: float = 0.1  # eagle: weight of the regression onto the next true feature
    noise: float = 0.05  # eagle: uniform noise on input features, in units of their RMS (EAGLE-1)
    targets: str = "answers"  # eagle kinds, selfgen data: train on the answers' labels, or on "all" (prompts too;
    #                           held-out scores stay on answers either way)
    labels: str = "hard"  # eagle kinds: "hard", the target's argmax; "soft", its whole distribution over the
    #                       draft vocabulary (EAGLE's and EAGLE-3's loss: -sum p log q, p from the target's head)
    eval_every: int = 0  # steps between held-out evaluations (the learning curve) and checkpoints; 0: about
    #                      EVALUATIONS a run, at least every 50 steps (held-out data grows with the run's data)
    depths: int = 5  # depths evaluated on held-out data
    seed: int = 0
    train_tokens: int = 0  # train on the first this many tokens of the training split only (0: all): the data curve
    block: int = 16  # dflash: positions per block (the anchor and block - 1 masks: up to block - 1 drafts)
    draft_layers: int = 2  # dflash: decoder layers of the block drafter
    decay: float = 7.0  # dflash: block position j's loss weighs exp(-(j - 1) / decay) (DFlash's, for 16-blocks)
    eval_stride: int = 8  # dflash: held-out blocks start at every this-many-th position (each scores every depth)
    anchor_state: bool = False  # dflash: add the target's fused state before the anchor to every block row
    anchors: int = 0  # dflash: blocks anchored in each training window (0: window // block, one a block's length)
    layout: str = "specviz"  # eagle3, dflash: "llama" is the layer llama.cpp's own loop runs (draft-eagle3:
    #                          head_nets.Eagle3LlamaNet; draft-dflash: head_nets.DFlashLlamaNet), at the
    #                          target's width, heads of 128, 2 key/value groups

    def net_config(self, hidden: int, vocab: int, draft_vocab: int, layers: Optional[list] = None,
                   mask_token: Optional[int] = None) -> dict:
        base = {"hidden": hidden, "vocab_size": vocab, "draft_vocab": draft_vocab}
        if self.kind == "medusa":
            return {**base, "heads": self.heads}
        if self.layout == "llama":
            if self.kind not in LLAMA_KINDS:
                raise InputError(f"--layout llama is the layer of {' and '.join(LLAMA_KINDS)} (llama.cpp's "
                                 f"draft-eagle3 and draft-dflash), not {self.kind}'s.")
            heads = max(1, hidden // 128)  # heads of 128, as llama.cpp's drafters for Qwen2.5 have them
            net = {**base, "layout": "llama", "heads": heads, "kv_heads": 2 if heads % 2 == 0 else 1, "mlp": self.mlp,
                   "slots": len(layers), "layers": list(layers)}
            if self.kind == "dflash":  # the layer inputs only; the block as llama-server will run it
                if mask_token is None:
                    raise InputError("DFlash in llama.cpp's layout needs a mask token of the target's vocabulary.")
                net.update(n_layers=self.draft_layers, block=self.block, mask_token=int(mask_token))
            return net
        net = {**base, "width": self.width, "heads": self.attn_heads, "mlp": self.mlp}
        if self.kind == "dflash":  # every state selfgen keeps: the three layers and the last one
            net.update(slots=len(layers) + 1, n_layers=self.draft_layers, block=self.block, layers=list(layers),
                       anchor_state=self.anchor_state)
        elif self.kind in FUSED:
            net.update(slots=len(layers), parallel=self.kind == "peagle", layers=list(layers))
        return net


FUSED = ("eagle3", "peagle", "dflash")  # kinds that read several target layers (selfgen data)
LLAMA_KINDS = ("eagle3", "dflash")  # kinds with a layer in llama.cpp's layout (--layout llama)
MASK_TOKEN = "<|fim_pad|>"  # DFlash in llama.cpp's layout: the target's token whose embedding the masks are
#                            (Qwen2.5's padding token for fill-in-the-middle, never in an answer)


def mask_token_of(pair) -> int:
    """The id of MASK_TOKEN in the pair's vocabulary, or one sentence why there is none."""
    tok = getattr(pair, "tokenizer", None)
    found = tok.convert_tokens_to_ids(MASK_TOKEN) if tok is not None else None
    if found is None or found == getattr(tok, "unk_token_id", None) or found < 0:
        raise InputError(f"DFlash in llama.cpp's layout uses {MASK_TOKEN} as its mask token, which {pair.name}'s "
                         "vocabulary lacks.")
    return int(found)


def set_mask(net, trainer: "_Trainer") -> None:
    """DFlash in llama.cpp's layout: its masks are the target's embedding of its mask token."""
    if hasattr(net, "set_mask"):
        with torch.no_grad():
            net.set_mask(trainer.embeddings(torch.tensor([net.mask_token])))


class _Data:
    """Training and held-out positions of the cached features, as torch tensors on `device`.
    `slots`: which of the stored states a row's feature is, where feats holds several per
    position (selfgen data): None, all of them (EAGLE-3), or -1, the last hidden state (Medusa, EAGLE)."""

    def __init__(self, features: Features, device, dtype, train_tokens: int = 0, slots=None):
        self.f = features
        self.slots = slots if features.feats.ndim == 3 else None
        self.device, self.dtype = device, dtype
        self.train_segments = [s for s in features.segments if not s[2]]
        if train_tokens:  # a prefix of the training split; the held-out split stays whole
            ends = np.cumsum([n for _, n, _ in self.train_segments])
            self.train_segments = self.train_segments[:max(1, int(np.searchsorted(ends, train_tokens, "right")))]
        self.held_segments = [s for s in features.segments if s[2]]
        self.scored = features.scored  # None: every position
        sample = features.feats[:min(len(features.feats), 20000)]
        if self.slots is not None:
            sample = sample[:, self.slots]
        self.rms = float(np.sqrt(np.mean(np.square(sample.astype(np.float32)))))

    def rows(self, index: np.ndarray):
        """Features, tokens, labels at `index` (global positions)."""
        feats = self.f.feats[index]
        if self.slots is not None:
            feats = feats[:, self.slots]
        f = torch.from_numpy(feats.astype(np.float32)).to(self.device)
        tokens = torch.from_numpy(self.f.tokens[index].astype(np.int64)).to(self.device)
        labels = torch.from_numpy(self.f.labels[index].astype(np.int64)).to(self.device)
        return f, tokens, labels

    def labels(self, index: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(self.f.labels[index].astype(np.int64)).to(self.device)

    def positions(self, segments: list, reach: int) -> np.ndarray:
        """Every scored position t (Features.scored) with t + reach still inside its segment."""
        out = np.concatenate([np.arange(s, s + n - reach) for s, n, _ in segments if n > reach] or [np.zeros(0, int)])
        return out if self.scored is None else out[self.scored[out]]

    def keep(self, index: np.ndarray) -> Optional[torch.Tensor]:
        """Which of `index`'s labels are scored (None: all of them)."""
        return None if self.scored is None else torch.from_numpy(self.scored[index]).to(self.device)

    def windows(self, segments: list, length: int, rng: np.random.Generator, count: int) -> list:
        """`count` random windows of `length` positions (shorter segments whole)."""
        out = []
        for _ in range(count):
            s, n, _ = segments[rng.integers(len(segments))]
            start = s + int(rng.integers(max(1, n - length + 1)))
            out.append(np.arange(start, start + min(length, n)))
        return out


def draft_vocabulary(features: Features, size: int, vocab: int, eos_ids=()) -> Optional[torch.Tensor]:
    """The `size` most frequent target argmaxes of the training split (end-of-text tokens always
    in), sorted; None when that is every token."""
    if not size or size >= vocab:
        return None
    train = np.concatenate([features.labels[s:s + n] for s, n, held in features.segments if not held])
    counts = np.bincount(train, minlength=vocab).astype(np.float64)
    counts[list(eos_ids)] = np.inf
    top = np.argsort(-counts, kind="stable")[:size]
    return torch.from_numpy(np.sort(top)).long()


class _Trainer:
    """Loss and held-out evaluation of one kind of heads on the cached features."""

    def __init__(self, cfg: TrainConfig, pair, data: _Data, vocab_ids, readout=None):
        self.cfg, self.data = cfg, data
        self.readout = readout  # the network's last step before the output rows (EAGLE-3 in llama.cpp's layout)
        device = data.device

        _, self.vocab = hidden_and_vocab(pair.target)
        self.ids = vocab_ids
        self.head = output_rows(pair.target, vocab_ids).to(device, torch.float32)  # frozen: the target's own rows
        self.embed = pair.target.get_input_embeddings()
        remap = torch.full((self.vocab,), -100, dtype=torch.long)  # target id -> draft-vocab index
        if self.ids is None:
            remap = torch.arange(self.vocab)
        else:
            remap[self.ids.cpu()] = torch.arange(len(self.ids))
        self.remap = remap.to(device)

    def embeddings(self, tokens: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return self.embed(tokens.to(self.embed.weight.device)).to(self.data.device, torch.float32)

    def logits(self, feats: torch.Tensor, raw: bool = False) -> torch.Tensor:
        """The draft-vocabulary logits of the network's outputs `feats` (raw: of vectors the output
        rows read as they are, the target's own last states)."""
        if self.readout is not None and not raw:
            feats = self.readout(feats)
        if torch.is_autocast_enabled(feats.device.type):
            # the frozen rows in the autocast dtype, cast once: autocast re-casts a tensor that
            # needs no gradient at every product (a 16k x 1.5k copy per depth per step)
            dtype = torch.get_autocast_dtype(feats.device.type)
            if getattr(self, "_head_cast", None) is None or self._head_cast.dtype != dtype:
                self._head_cast = self.head.to(dtype)
            return feats.to(dtype) @ self._head_cast.T
        return feats @ self.head.T

    def ce(self, feats: torch.Tensor, labels: torch.Tensor, keep: Optional[torch.Tensor] = None,
           soft: Optional[torch.Tensor] = None, logits: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Mean cross-entropy over the labels inside the draft vocabulary (and `keep`); 0 if none.
        `soft`: the target's distribution p at the labels' positions (`soft_targets`, one row
        each): the loss is then the cross-entropy from it, -sum p log q, on the same positions.
        `logits`: self.logits(feats) when the caller has them already (hard labels only)."""
        target = self.remap[labels]
        if keep is not None:
            target = target.masked_fill(~keep, -100)
        used = target.ge(0)
        if not bool(used.any()):
            return feats.sum() * 0.0
        if soft is None:
            logits = self.logits(feats) if logits is None else logits
            return torch.nn.functional.cross_entropy(logits.float(), target, ignore_index=-100)
        return -(soft[used] * torch.log_softmax(self.logits(feats[used]).float(), dim=-1)).sum(-1).mean()

    @torch.no_grad()
    def soft_targets(self, f: torch.Tensor) -> Optional[torch.Tensor]:
        """The target's distribution over the draft vocabulary after each of rows `f` (its own
        head on its last hidden state, restricted as EAGLE-3 does), once a window for all the
        depths that learn from it, when the config trains on soft labels; None for hard labels."""
        if self.cfg.labels != "soft":
            return None
        return torch.softmax(self.logits((f[:, -1] if f.dim() == 3 else f).float(), raw=True), dim=-1)

    def hits(self, feats: torch.Tensor, labels: torch.Tensor, logits: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Top-1 of the draft (restricted vocabulary) equals the target's argmax."""
        logits = self.logits(feats) if logits is None else logits
        return self.remap[labels].eq(logits.argmax(-1)) & self.remap[labels].ge(0)

    def scores(self, feats: torch.Tensor, labels: torch.Tensor, keep: Optional[torch.Tensor] = None) -> tuple:
        """(hits, mean cross-entropy) of an evaluation: the logits computed once for both."""
        logits = self.logits(feats)
        return self.hits(feats, labels, logits), self.ce(feats, labels, keep, logits=logits)

    # -- Medusa: head k at position t reads the target's argmax at t + k
    def medusa_loss(self, net, rng) -> torch.Tensor:
        k = net.heads
        positions = self.train_positions
        index = rng.choice(positions, size=self.cfg.batch, replace=len(positions) < self.cfg.batch)
        f, _, _ = self.data.rows(index)
        out = net(f)  # (B, K, d)
        return sum(self.ce(out[:, j], self.data.labels(index + j + 1)) for j in range(k)) / k

    def medusa_depths(self, net, index: np.ndarray) -> tuple:
        """(B, K) hits of head k (depth k) at `index`, and the summed cross-entropy per head."""
        f, _, _ = self.data.rows(index)
        out = net(f)
        scores = [self.scores(out[:, j], self.data.labels(index + j + 1)) for j in range(net.heads)]
        return torch.stack([h for h, _ in scores], 1), [float(c) * len(index) for _, c in scores]

    # -- EAGLE: one pass per depth, each on the layer's own predictions (training-time test)
    def eagle_unroll(self, net, window: np.ndarray, steps: int, noise: float = 0.0,
                     rows: Optional[tuple] = None) -> list:
        """Predicted features at every depth 1..steps for the pairs (f_i, x_{i+1}) of a window:
        out[s - 1][i] is depth s's guess of f_{i+1}, drafted from real features up to pair
        i - s + 1 and the layer's own predictions after it, exactly as the drafter runs. `rows`:
        self.data.rows(window), when the caller has read them already."""
        f, tokens, _ = rows if rows is not None else self.data.rows(window)
        if noise:
            f = f + (torch.rand_like(f) * 2 - 1) * noise * self.data.rms
        fused = getattr(net, "features", None)
        if fused is not None:  # EAGLE-3: the target's layers fused once, depth 1's input
            f = fused(f)
        e = self.embeddings(tokens[1:])
        n = len(window) - 1
        positions = torch.arange(1, n + 1, device=f.device)
        out, cache = net(f[:-1], e, positions)
        outs = [out]
        i = torch.arange(n, device=f.device)[:, None]
        parallel = getattr(net, "parallel", False)
        for s in range(2, steps + 1):
            # pair i's input at depth s: depth s - 1's output at pair i - 1 (EAGLE-1: its guess of f_i;
            # EAGLE-3: the layer's own vector) with the token x_{i+1}; P-EAGLE: a placeholder
            if parallel:  # P-EAGLE: depth s feeds its placeholder (the anchor: pair i - s + 1's feature)
                anchors = torch.cat([f[:1].expand(s - 1, -1), f[:n - s + 1]])  # rows i < s - 1: no draft
                mask_f, mask_e = net.placeholders([s] * n, anchors)
            prev = mask_f if parallel else torch.cat([f[:1], outs[-1][:-1]])
            cols = torch.arange(n, device=f.device)[None]
            real = cols <= i - s + 1
            own = [cols == i - s + j for j in range(2, s + 1)]  # keys of depths 2..s at their pairs
            mask = torch.cat([real, *own], dim=1)  # every row sees at least its own key
            out, cache = net(prev, mask_e if parallel else e, positions, cache, mask)
            outs.append(out)
        return outs

    def eagle_loss(self, net, rng) -> torch.Tensor:
        cfg = self.cfg
        windows = self.data.windows(self.data.train_segments, cfg.window, rng, max(1, cfg.batch // cfg.window))
        total = 0.0
        for window in windows:
            rows = self.data.rows(window)
            outs = self.eagle_unroll(net, window, cfg.unroll, cfg.noise, rows)
            f, _, labels = rows
            # answer positions only (prompts are context), unless the prompts are targets too
            keep = None if cfg.targets == "all" else self.data.keep(window[1:])
            soft = self.soft_targets(f[1:])
            for s, out in enumerate(outs, start=1):
                valid = slice(s - 1, None)  # pairs with at least one real feature before the draft
                total = total + (0.8 ** (s - 1)) * self.ce(out[valid], labels[1:][valid],
                                                           None if keep is None else keep[valid],
                                                           None if soft is None else soft[valid])
            if cfg.feature_loss and cfg.kind == "eagle":  # EAGLE-3 drops the regression onto the target's features
                true = f[1:] / self.data.rms
                total = total + cfg.feature_loss * torch.nn.functional.smooth_l1_loss(outs[0] / self.data.rms, true)
        return total / len(windows)

    def eagle_depths(self, net, windows: list, depths: int) -> tuple:
        """(B, depths) hits: row = a draft from a base pair b, column s - 1 = depth s (at pair
        b + s - 1); and the summed cross-entropy per depth."""
        rows, ce = [], [0.0] * depths
        for window in windows:
            n = len(window) - 1
            bases = n - depths + 1
            if bases <= 0:
                continue
            outs = self.eagle_unroll(net, window, depths)
            labels = self.data.labels(window)[1:]
            cut = [slice(s - 1, s - 1 + bases) for s in range(1, depths + 1)]
            keep = self.data.keep(window[1:1 + bases])  # drafts from a base in an answer (None: all)
            kept = bases if keep is None else int(keep.sum())
            if not kept:
                continue
            scores = [self.scores(outs[s][cut[s]], labels[cut[s]], keep) for s in range(depths)]
            hits = torch.stack([h for h, _ in scores], 1)
            rows.append(hits if keep is None else hits[keep])
            for s in range(depths):
                ce[s] += float(scores[s][1]) * kept
        return (torch.cat(rows) if rows else torch.zeros(0, depths, dtype=torch.bool)), ce

    # -- DFlash: blocks anchored in a window, each a forward of [anchor ; masks] over the context before it
    def dflash_blocks(self, net, window: np.ndarray, anchors: np.ndarray, rows: Optional[tuple] = None) -> tuple:
        """Block outputs for anchors `anchors` (indices into `window`, each >= 1 with a whole block
        inside it): (n, block, d), row j of block i the guess of the token at anchors[i] + j, made
        from the target's states of the window's positions before the anchor and the anchor token,
        exactly as the drafter runs (one forward, every block its own context and itself). `rows`:
        self.data.rows(window), when the caller has read them already."""
        f, tokens, _ = rows if rows is not None else self.data.rows(window)
        b, n, t = net.block_size, len(anchors), len(window)
        positions = torch.arange(t, device=f.device)
        ctx = net.context(f)
        kv = net.context_kv(ctx, positions)
        at = torch.as_tensor(anchors, device=f.device)
        x = net.block(self.embeddings(tokens[at]), b, ctx[at - 1])
        block_pos = (at[:, None] + torch.arange(b, device=f.device)[None]).reshape(-1)
        owner = torch.arange(n, device=f.device).repeat_interleave(b)
        mask = torch.cat([positions[None] < at[owner][:, None], owner[:, None] == owner[None]], dim=1)
        return net(x, block_pos, kv, mask).view(n, b, -1)

    def dflash_anchors(self, window_len: int, rng, count: int) -> np.ndarray:
        hi = window_len - self.cfg.block  # anchor a needs positions a .. a + block - 1 inside the window
        return np.sort(rng.choice(np.arange(1, hi + 1), size=min(count, hi), replace=False)) if hi >= 1 else np.zeros(0, int)

    def dflash_loss(self, net, rng) -> torch.Tensor:
        cfg = self.cfg
        windows = self.data.windows(self.data.train_segments, cfg.window, rng, max(1, cfg.batch // cfg.window))
        weights = torch.exp(-torch.arange(cfg.block - 1, dtype=torch.float32) / cfg.decay)
        total, used = 0.0, 0
        for window in windows:
            anchors = self.dflash_anchors(len(window), rng, cfg.anchors or max(1, cfg.window // cfg.block))
            if not len(anchors):
                continue
            rows = self.data.rows(window)
            out = self.dflash_blocks(net, window, anchors, rows)
            f, _, labels = rows
            keep = None if cfg.targets == "all" else self.data.keep(window)
            soft = self.soft_targets(f)
            loss = 0.0
            for j in range(1, cfg.block):  # block row j guesses the target's choice after position a + j - 1
                at = anchors + j - 1
                loss = loss + weights[j - 1] * self.ce(out[:, j], labels[at], None if keep is None else keep[at],
                                                      None if soft is None else soft[at])
            total, used = total + loss / weights.sum(), used + 1
        return total / used if used else sum(p.sum() for p in net.parameters()) * 0.0  # no whole block: nothing to learn

    def dflash_depths(self, net, windows: list, depths: int) -> tuple:
        """(B, depths) held-out hits of blocks anchored at every cfg.eval_stride-th position of each
        window (block row j, depth j), and the summed cross-entropy per depth."""
        rows, ce = [], [0.0] * depths
        for window in windows:
            anchors = np.arange(1, len(window) - net.block_size + 1, self.cfg.eval_stride)
            keep = self.data.keep(window[anchors]) if len(anchors) else None
            if not len(anchors) or (keep is not None and not bool(keep.any())):
                continue
            if keep is not None:  # blocks anchored in an answer only
                anchors = anchors[keep.cpu().numpy()]
            out = self.dflash_blocks(net, window, anchors)
            labels = self.data.labels(window)
            scores = [self.scores(out[:, j], labels[anchors + j - 1]) for j in range(1, depths + 1)]
            rows.append(torch.stack([h for h, _ in scores], 1))
            for j in range(depths):
                ce[j] += float(scores[j][1]) * len(anchors)
        return (torch.cat(rows) if rows else torch.zeros(0, depths, dtype=torch.bool)), ce

    def evaluate(self, net) -> dict:
        """Held-out top-1 per depth, and the expected tokens a chain of that many accepts."""
        net.eval()
        with torch.no_grad():
            if self.cfg.kind == "dflash":
                hits, ce = self.dflash_depths(net, self.held_windows, min(self.cfg.depths, net.depths))
            elif self.cfg.kind == "medusa":
                parts = [self.medusa_depths(net, chunk) for chunk in np.array_split(
                    self.held_positions, max(1, len(self.held_positions) // 2048))]
                hits = torch.cat([h for h, _ in parts])
                ce = [sum(c[j] for _, c in parts) for j in range(net.heads)]
            else:
                hits, ce = self.eagle_depths(net, self.held_windows, self.cfg.depths)
        net.train()
        return summarise_hits(hits, ce)


def summarise_hits(hits: torch.Tensor, ce_sums: list) -> dict:
    """Per depth: held-out cross-entropy and top-1 accuracy, and the chance that every depth up
    to it was right (a greedy chain accepts exactly those), whose sum is the expected accepted
    tokens of a full chain."""
    n = int(hits.shape[0])
    if not n:
        return {"loss": [], "accuracy": [], "survival": [], "accepted": 0.0, "positions": 0}
    survival = torch.cumprod(hits.float(), dim=1).mean(0).tolist()
    return {"loss": [round(c / n, 4) for c in ce_sums],
            "accuracy": [round(x, 4) for x in hits.float().mean(0).tolist()],
            "survival": [round(x, 4) for x in survival], "accepted": round(sum(survival), 4), "positions": n}


def _held_out_trainer(pair, heads, features: Features, depths: int) -> tuple:
    """(a _Trainer over the held-out split of `features`, a float copy of `heads`' network)."""
    cfg = TrainConfig(heads.kind, depths=depths)
    data = _Data(features, torch.device("cpu"), torch.float32, slots=None if heads.kind in FUSED else -1)
    net = copy.deepcopy(heads.net).float()
    trainer = _Trainer(cfg, pair, data, heads.vocab_ids, getattr(net, "readout", None))
    set_mask(net, trainer)
    reach = net.heads + 1 if heads.kind == "medusa" else 1
    trainer.held_positions = data.positions(data.held_segments, reach)
    trainer.held_windows = [np.arange(s, s + n) for s, n, _ in data.held_segments if n > depths + 1]
    return trainer, net


def evaluate_heads(pair, heads, features: Features, depths: int = 5) -> dict:
    """Held-out accuracy per depth (head) of any trained `heads` on the held-out split of
    `features`: heads trained on different corpora compared on the same positions."""
    trainer, net = _held_out_trainer(pair, heads, features, depths)
    return trainer.evaluate(net)


def token_ablation(pair, heads, features: Features, depths: int = 3, seed: int = 0) -> dict:
    """Does an EAGLE layer use the token it is given? Held-out top-1 per depth with the tokens as
    they are, shuffled within each window, and zeroed: a layer that ignored its token input (a
    defect that would leave it no better than a Medusa head) would score alike in all three."""
    if heads.kind not in ("eagle", *FUSED):
        raise InputError(f"token_ablation reads EAGLE layers (eagle, eagle3, peagle), not {heads.kind!r}.")
    trainer, net = _held_out_trainer(pair, heads, features, depths)
    plain = trainer.embeddings
    generator = torch.Generator().manual_seed(seed)
    out = {"as_is": trainer.evaluate(net)["accuracy"]}
    trainer.embeddings = lambda t: plain(t[torch.randperm(len(t), generator=generator)])
    out["shuffled"] = trainer.evaluate(net)["accuracy"]
    trainer.embeddings = lambda t: plain(t) * 0
    out["zeroed"] = trainer.evaluate(net)["accuracy"]
    return out


class _Probe(torch.nn.Module):
    """Reads token t + j from one target state at t, for j = 1..offsets: per offset an RMSNorm
    and a residual SiLU block (Medusa's head) in front of the target's own output rows."""

    def __init__(self, hidden: int, offsets: int):
        super().__init__()

        self.norms = torch.nn.ModuleList(RMSNorm(hidden) for _ in range(offsets))
        self.blocks = MedusaHeads(hidden, offsets).blocks

    def forward(self, f: torch.Tensor) -> list:
        out = []
        for norm, block in zip(self.norms, self.blocks):
            x = norm(f)
            out.append(x + torch.nn.functional.silu(block(x)))
        return out


def layer_probes(pair, features: Features, offsets: int = 4, steps: int = 150, batch: int = 512,
                 lr: float = 2e-3, seed: int = 0, draft_vocab: int = 16384, progress: bool = True) -> dict:
    """Which of the target's layers predicts how far ahead? For every state selfgen kept (its
    layers and the last one), a probe (_Probe: one small block per offset, the target's output
    rows frozen) trained for `steps` on the training split to read the target's token t + j
    (j = 1..offsets) from the state at t alone; held-out top-1 and cross-entropy per (layer,
    offset), on the positions whose labels are answer tokens (Features.scored). The last
    state at offset 1 is the target's own next-token choice (the draft vocabulary's ceiling).
    (On qwen-coder no earlier layer alone beats the last state; EAGLE-3 fuses them as
    complements: docs/heads.md.)"""
    if not features.layers:
        raise InputError("layer_probes reads several target layers: give it specviz.training.selfgen data.")

    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    names = [*features.layers, "last"]
    vocab = hidden_and_vocab(pair.target)[1]
    ids = draft_vocabulary(features, draft_vocab, vocab, pair.eos_token_ids)
    out = {"layers": names, "offsets": list(range(1, offsets + 1)), "steps": steps, "batch": batch,
           "accuracy": [], "loss": [], "train_positions": 0, "held_out_positions": 0}
    bar = _progress(steps * len(names), "layer probes", "step") if progress else None
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=pair.dtype == torch.bfloat16)
    for slot in range(len(names)):
        data = _Data(features, torch.device("cpu"), torch.float32, slots=slot)
        trainer = _Trainer(TrainConfig("medusa"), pair, data, ids)
        train_at = data.positions(data.train_segments, offsets)
        held_at = data.positions(data.held_segments, offsets)
        out["train_positions"], out["held_out_positions"] = int(len(train_at)), int(len(held_at))
        probe = _Probe(features.hidden_size, offsets)
        optim = torch.optim.AdamW(probe.parameters(), lr=lr, weight_decay=0.0)
        for _ in range(steps):
            index = rng.choice(train_at, size=batch, replace=len(train_at) < batch)
            with autocast:
                guesses = probe(data.rows(index)[0])
                loss = sum(trainer.ce(g, data.labels(index + j)) for j, g in enumerate(guesses)) / offsets
            optim.zero_grad(set_to_none=True)
            loss.backward()
            optim.step()
            if bar is not None:
                bar.update(1)
        hits, ce = torch.zeros(offsets), torch.zeros(offsets)
        with torch.no_grad(), autocast:
            for chunk in np.array_split(held_at, max(1, len(held_at) // 2048)):
                guesses = probe(data.rows(chunk)[0])
                scores = [trainer.scores(g, data.labels(chunk + j)) for j, g in enumerate(guesses)]
                hits += torch.tensor([float(h.sum()) for h, _ in scores])
                ce += torch.tensor([float(c) * len(chunk) for _, c in scores])
        out["accuracy"].append([round(float(h) / max(1, len(held_at)), 4) for h in hits])
        out["loss"].append([round(float(c) / max(1, len(held_at)), 4) for c in ce])
    if bar is not None:
        bar.close()
    return out


def cached_layer_probes(pair, features: Features, **options) -> dict:
    """layer_probes(pair, features, **options), kept in the data's folder for the next run (the
    cache is keyed by every setting, layer_probes' own defaults filled in)."""
    defaults = {name: p.default for name, p in inspect.signature(layer_probes).parameters.items()
                if p.default is not inspect.Parameter.empty and name != "progress"}
    args = {**defaults, **options}
    path = Path(features.folder) / f"layer-probes-{features.meta['tokens']}.json"
    if path.exists():
        cached = json.loads(path.read_text())
        if cached.get("args") == args:
            return cached
    out = {"args": args, **layer_probes(pair, features, **args)}
    files.write_json(path, out)
    return out


def train_heads(pair, features: Features, cfg: TrainConfig, folder: Optional[Path] = None,
                progress: bool = True, on_eval=None):
    """Train `cfg.kind` heads on `features` (checkpointed in `folder`, resumed from it).
    Returns (HeadSet, report dict). `on_eval(report_so_far)` is called after each evaluation."""

    torch.manual_seed(cfg.seed)
    device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    fused = cfg.kind in FUSED
    if fused and not features.layers:
        raise InputError(f"{cfg.kind} reads several target layers: train it on specviz.training.selfgen data "
                         "(`python -m specviz train` does), not on last-hidden-state features.")
    data = _Data(features, device, torch.float32, cfg.train_tokens, slots=None if fused else -1)
    hidden, vocab = features.hidden_size, hidden_and_vocab(pair.target)[1]
    vocab_ids = draft_vocabulary(features, cfg.draft_vocab, vocab, pair.eos_token_ids)
    mask = mask_token_of(pair) if cfg.kind == "dflash" and cfg.layout == "llama" else None
    net_config = cfg.net_config(hidden, vocab, vocab if vocab_ids is None else len(vocab_ids), features.layers, mask)
    net = make_net(cfg.kind, net_config).to(device)
    trainer = _Trainer(cfg, pair, data, vocab_ids, getattr(net, "readout", None))
    set_mask(net, trainer)
    reach = net.heads + 1 if cfg.kind == "medusa" else 1
    trainer.train_positions = data.positions(data.train_segments, reach)
    trainer.held_positions = data.positions(data.held_segments, reach)
    trainer.held_windows = [np.arange(s, s + n) for s, n, _ in data.held_segments if n > cfg.depths + 1]
    per_step = cfg.batch if cfg.kind == "medusa" else max(1, cfg.batch // cfg.window) * cfg.window
    train_tokens = int(sum(n for _, n, _ in data.train_segments))
    steps = max(1, int(math.ceil(cfg.epochs * train_tokens / per_step)))
    every = eval_interval(steps, cfg.eval_every)
    optim = torch.optim.AdamW(net.parameters(), lr=cfg.lr, weight_decay=0.0)
    warmup = max(1, steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        optim, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / steps))))
    report = {"kind": cfg.kind, "config": asdict(cfg), "net": net_config, "steps": steps, "eval_every": every,
              "tokens_per_step": per_step, "train_tokens": train_tokens,
              "held_out_tokens": int(sum(n for _, n, _ in data.held_segments)),
              "data": {k: features.meta.get(k) for k in ("pair", "dtype", "seed", "python", "response_tokens",
                                                          "prompts", "tokens", "batch")},
              "loss": [], "curve": [], "device": str(device)}
    folder = Path(folder) if folder is not None else features.folder  # beside its data: one checkpoint per corpus
    folder.mkdir(parents=True, exist_ok=True)
    ckpt = folder / f"{cfg.kind}-checkpoint.pt"
    step = 0
    rng = np.random.default_rng(cfg.seed + 1000)  # which positions each step trains on
    if ckpt.exists():  # resume: weights, optimiser, schedule and both random streams, exactly where they were
        state = torch.load(ckpt, map_location=device, weights_only=False)
        if state["config"] == asdict(cfg) and state["net"] == net_config and state["data"] == report["data"]:
            net.load_state_dict(state["weights"])
            optim.load_state_dict(state["optim"])
            sched.load_state_dict(state["sched"])
            rng.bit_generator.state = state["rng"]
            torch.set_rng_state(state["torch_rng"])
            if state.get("cuda_rng") is not None and torch.cuda.is_available():
                torch.cuda.set_rng_state_all(state["cuda_rng"])
            step, report = state["step"], state["report"]
    autocast = torch.autocast(device.type, dtype=torch.bfloat16,
                              enabled=device.type == "cuda" or pair.dtype == torch.bfloat16)
    if step == 0:
        report["curve"].append({"step": 0, "tokens": 0, **trainer.evaluate(net)})
    bar = _progress(steps, f"train {cfg.kind}", "step", initial=step) if progress else None
    net.train()
    while step < steps:
        with autocast:
            loss = (trainer.medusa_loss(net, rng) if cfg.kind == "medusa" else
                    trainer.dflash_loss(net, rng) if cfg.kind == "dflash" else trainer.eagle_loss(net, rng))
        optim.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        optim.step()
        sched.step()
        step += 1
        report["loss"].append([step, round(loss.item(), 5)])
        if bar is not None:
            bar.set_postfix(loss=f"{loss.item():.3f}", refresh=False)
            bar.update(1)
        if step % every == 0 or step == steps:
            with autocast:
                report["curve"].append({"step": step, "tokens": step * per_step, **trainer.evaluate(net)})
            state = {"config": asdict(cfg), "net": net_config, "data": report["data"], "step": step,
                     "weights": net.state_dict(), "optim": optim.state_dict(), "sched": sched.state_dict(),
                     "rng": rng.bit_generator.state, "torch_rng": torch.get_rng_state(),
                     "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
                     "report": report}
            with files.new_file(ckpt, f"saving the {cfg.kind} checkpoint") as tmp:  # an interrupted save
                torch.save(state, tmp)  # leaves the previous checkpoint whole
            if on_eval is not None:
                on_eval(report)
    if bar is not None:
        bar.close()
    report["held_out"] = report["curve"][-1]
    manifest = {"data": report["data"], "train_tokens": train_tokens, "steps": steps, "seed": cfg.seed,
                "epochs": cfg.epochs, "held_out": report["held_out"]}
    return HeadSet(cfg.kind, net.cpu().eval(), vocab_ids, net_config, manifest), report
