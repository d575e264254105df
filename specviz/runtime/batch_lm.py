"""B sequences of different lengths in one forward: the batched KV cache (`RowCache`) and its runner (`BatchLM`).

The batched counterpart of specviz.runtime.lm: each row holds its own tokens and its own write
position, so a row cropped back after a rejection is a number set, not a copy. Models that bring
their own single-sequence runner (the exact toy tables) run a runner per row (`LoopBatchLM`).
"""

from __future__ import annotations

import torch

# ---------------------------------------------------------------------------------------------
# the batched KV cache and runners

class RowCache:
    """A KV cache for B rows of different lengths: one (B, heads, capacity, dim) buffer per layer
    and `lengths[b]`, the tokens row b holds. A forward feeding T columns per row writes row b's
    at columns lengths[b] .. lengths[b] + T - 1 (a padded column writes too, past the row's
    length, where nothing reads it and the next write overwrites it). Cropping a row is setting
    its length: nothing is copied. transformers' attention layers call `update` as they would on
    their own caches; the runner passes the per-row causal mask and positions itself."""

    def __init__(self, n_layers: int, rows: int, device):
        self.keys: list = [None] * n_layers
        self.values: list = [None] * n_layers
        self.device = device
        self.lengths = [0] * rows  # a Python list: cropping a row is one assignment
        self._index = None
        self._width = 0

    def begin(self, width: int) -> None:
        """Before a forward that feeds `width` columns per row."""
        self._index = (torch.tensor(self.lengths)[:, None] + torch.arange(width)).to(self.device)  # (B, T)
        self._width = max(self.lengths) + width

    def _buffers(self, layer_idx: int, width: int, key, value) -> tuple:
        """Layer `layer_idx`'s key and value buffers, holding at least `width` columns for every
        row (grown to at least twice their size, what was in them kept; shaped like `key`/`value`)."""
        buf_k, buf_v = self.keys[layer_idx], self.values[layer_idx]
        if buf_k is None or buf_k.shape[2] < width:
            capacity = max(width, 2 * (0 if buf_k is None else buf_k.shape[2]), 64)
            rows, (_, heads, _, dim) = len(self.lengths), key.shape
            new_k = key.new_zeros((rows, heads, capacity, dim))
            new_v = value.new_zeros((rows, heads, capacity, dim))
            if buf_k is not None:
                new_k[:, :, :buf_k.shape[2]] = buf_k
                new_v[:, :, :buf_v.shape[2]] = buf_v
            buf_k, buf_v = self.keys[layer_idx], self.values[layer_idx] = new_k, new_v
        return buf_k, buf_v

    def update(self, key, value, layer_idx: int, *args, **kwargs):
        buf_k, buf_v = self._buffers(layer_idx, self._width, key, value)
        rows = key.shape[0]
        row = torch.arange(rows, device=key.device)[:, None]
        buf_k[row, :, self._index] = key.transpose(1, 2)  # (B, T, heads, dim) at each row's own columns
        buf_v[row, :, self._index] = value.transpose(1, 2)
        return buf_k[:, :, :self._width], buf_v[:, :, :self._width]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return max(self.lengths, default=0)

    def place(self, row: int, other: "RowCache") -> None:
        """Row `row` (empty) takes the one row `other` holds: its keys and values, its length."""
        if self.lengths[row]:
            raise ValueError(f"row {row} already holds {self.lengths[row]} tokens; place fills empty rows")
        n = other.lengths[0]
        for i, (key, value) in enumerate(zip(other.keys, other.values)):
            if key is not None and n:
                buf_k, buf_v = self._buffers(i, n, key, value)
                buf_k[row, :, :n] = key[0, :, :n]
                buf_v[row, :, :n] = value[0, :, :n]
        self.lengths[row] = n

    def keep_rows(self, rows: list) -> None:
        """Keep only these rows (batch indices, in order): finished rows stop costing."""
        self.lengths = [self.lengths[i] for i in rows]
        dev = torch.tensor(rows, dtype=torch.long, device=self.device)
        for store in (self.keys, self.values):
            for i, buf in enumerate(store):
                if buf is not None:
                    store[i] = buf.index_select(0, dev)

    def nbytes(self) -> int:
        return sum(b.numel() * b.element_size() for store in (self.keys, self.values) for b in store if b is not None)


class BatchLM:
    """A Hugging Face causal LM over a RowCache: `forward(feeds, keep)` runs one pass for every
    row at once, each row feeding its own tokens (ragged: padded to the longest) at its own
    positions, and returns each row's last `keep[b]` logits rows (the output head reads only
    those). The batched counterpart of specviz.runtime.lm.CachedLM."""

    def __init__(self, model, rows: int):
        self.model, self.device = model, model.device
        self.n_layers = model.config.num_hidden_layers
        self.reset(rows)

    def reset(self, rows: int) -> None:
        self.cache = RowCache(self.n_layers, rows, self.device)

    @property
    def lengths(self) -> list:
        return list(self.cache.lengths)

    CHUNK_TOKENS = 2048  # a pass feeding more (a batch's prompts) runs in chunks of columns

    def forward(self, feeds: list, keep: list, hidden=False):
        """feeds[b]: the tokens row b feeds (may be empty: that row rides along, unchanged);
        keep[b]: how many of its last rows of logits to return. Returns [logits (keep[b], V)],
        or with hidden=True ([logits], [states (len(feeds[b]), d)]) (hidden=a tuple of layer
        indices: states (len(feeds[b]), len + 1, d), as specviz.runtime.lm.forward_with_states).

        Chunked prefill, as serving engines do it: a pass of more than CHUNK_TOKENS tokens (B
        rows x the longest feed) runs as several passes of fewer columns each, every row feeding
        its next slice, so the activations of a batch's prompts stay bounded (32 prompts of 224
        tokens in one pass would hold gigabytes of MLP activations); the cache and the logits
        are those of one pass."""
        rows, width = len(feeds), max(1, max(len(f) for f in feeds))
        step = max(1, self.CHUNK_TOKENS // max(1, rows))
        if width <= step:
            return self._forward(feeds, keep, hidden)
        logits, states = [[] for _ in range(rows)], [[] for _ in range(rows)]
        for start in range(0, width, step):
            part = [f[start:start + step] for f in feeds]
            # the row's kept positions (its last keep[b]) that fall in this slice
            wanted = [max(0, min(len(f), start + step) - max(start, len(f) - n)) if start < len(f) else 0
                      for f, n in zip(feeds, keep)]
            out = self._forward(part, wanted, hidden)
            got, hid = out if hidden else (out, None)
            for b in range(rows):
                logits[b].append(got[b])
                if hid is not None:
                    states[b].append(hid[b])
        logits = [torch.cat(parts) for parts in logits]
        if hidden:
            return logits, [torch.cat(parts) for parts in states]
        return logits

    @torch.inference_mode()
    def _forward(self, feeds: list, keep: list, hidden=False):
        rows, width = len(feeds), max(1, max(len(f) for f in feeds))
        ids = torch.tensor([list(f) + [f[-1] if f else 0] * (width - len(f)) for f in feeds],
                           dtype=torch.long, device=self.device)
        lengths = self.cache.lengths
        positions = torch.tensor(lengths)[:, None] + torch.arange(width)  # (B, T): each row's own positions
        columns = torch.arange(max(lengths) + width)
        mask = columns[None, None, :] <= positions[:, :, None]  # (B, T, W): causal over the row's own cache
        self.cache.begin(width)
        layers = hidden if isinstance(hidden, tuple) else None
        decoded = self.model.get_decoder()(
            input_ids=ids, attention_mask=mask[:, None].to(self.device), position_ids=positions.to(self.device),
            past_key_values=self.cache, use_cache=True, output_hidden_states=layers is not None)
        states = decoded.last_hidden_state  # (B, T, d)
        fed = [len(f) for f in feeds]
        self.cache.lengths = [n + f for n, f in zip(lengths, fed)]
        flat = [b * width + t for b in range(rows) for t in range(fed[b] - keep[b], fed[b])]
        out = self.model.get_output_embeddings()(
            states.reshape(rows * width, -1)[torch.tensor(flat, dtype=torch.long, device=self.device)]).float()
        logits = list(torch.split(out, list(keep)))
        if layers is not None:  # EAGLE-3: (B, T, len(layers) + 1, d), the chosen layers' inputs then the last
            states = torch.stack([decoded.hidden_states[i] for i in layers] + [states], dim=2)
        if hidden:
            return logits, [states[b, :fed[b]] for b in range(rows)]
        return logits

    def prefill(self, feeds: list, hidden=False):
        """forward(feeds, [len(f) for f in feeds], hidden) for a batch whose rows are all empty,
        without the padding: each row runs on its own (a one-row pass, chunked as forward chunks)
        and its keys and values are placed in this batch's cache. A bank of prompts of 13 to 300
        tokens padded to the longest is mostly padding, and a padded column costs a decoder pass
        as a real one does; a one-row pass costs only the row's own tokens. Returns what forward
        returns: every fed position's logits (and states)."""
        logits, states = [], []
        for b, feed in enumerate(feeds):
            one = BatchLM(self.model, 1)
            out = one.forward([list(feed)], [len(feed)], hidden)
            got, hid = out if hidden else (out, None)
            logits.append(got[0])
            if hid is not None:
                states.append(hid[0])
            self.cache.place(b, one.cache)
        return (logits, states) if hidden else logits

    def crop(self, row: int, length: int) -> None:
        """Row `row` keeps its first `length` cached tokens."""
        if length < self.cache.lengths[row]:
            self.cache.lengths[row] = length

    def keep_rows(self, rows: list) -> None:
        self.cache.keep_rows(rows)

    def kv_bytes(self) -> int:
        return self.cache.nbytes()


class LoopBatchLM:
    """BatchLM's interface over models that bring their own single-sequence runner (the exact
    toy tables of specviz.teaching.toy): one runner per row, run in turn. Exact, not fast."""

    def __init__(self, model, rows: int):
        self.model, self.device = model, model.device
        self.reset(rows)

    def reset(self, rows: int) -> None:
        self.runners = [self.model.make_runner() for _ in range(rows)]

    @property
    def lengths(self) -> list:
        return [r.length for r in self.runners]

    def forward(self, feeds: list, keep: list, hidden=False):
        logits, states = [], []
        for runner, feed, n in zip(self.runners, feeds, keep):
            if not feed:
                logits.append(torch.zeros((0, 1)))
                states.append(None)
                continue
            out = runner.forward(list(feed), hidden=True)
            rows_logits, rows_states = out
            logits.append(rows_logits[len(rows_logits) - n:])
            states.append(rows_states)
        return (logits, states) if hidden else logits

    def crop(self, row: int, length: int) -> None:
        self.runners[row].crop(length)

    def keep_rows(self, rows: list) -> None:
        self.runners = [self.runners[i] for i in rows]

    def kv_bytes(self) -> int:
        return 0


def batch_runner_for(model, rows: int):
    """The batched runner of a model: toy models run a runner per row, HF models a BatchLM.
    (CUDA graphs are a batch-1 device: batched passes run eagerly.)"""
    if getattr(model, "make_runner", None) is not None:
        return LoopBatchLM(model, rows)
    return BatchLM(model, rows)
