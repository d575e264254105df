"""A model plus its KV cache, behind the three calls the engine needs: forward, crop, reset.

The cache always holds a prefix of the committed sequence. After each step the engine crops
it back to the accepted prefix by position (no copying, no re-running the prefix), as in
gpt-fast. Exact toy models (`specviz.toy`) provide the same interface.
"""

from __future__ import annotations

import torch


class CachedLM:
    """A Hugging Face causal LM with a DynamicCache; `length` = tokens held in the cache."""

    def __init__(self, model):
        self.model = model
        self.device = model.device
        self.reset()

    def reset(self) -> None:
        from transformers import DynamicCache

        self.cache = DynamicCache(config=self.model.config)
        self.length = 0

    @torch.inference_mode()
    def forward(self, ids: list, last_only: bool = False, attend=None, positions=None,
                keep: int = 0) -> torch.Tensor:
        """Feed `ids` after the cache; return float32 logits (T, V), only the last `keep` rows
        if keep > 0 (the output head is then applied to those rows only), (1, V) if last_only.

        For tree attention, `attend` is the (T, length + T) bool mask of what each fed token may
        see and `positions` their position ids (see specviz.tree.attention).
        """
        input_ids = torch.tensor([ids], dtype=torch.long, device=self.device)  # (1, T)
        extra = {}
        if attend is not None:
            extra["attention_mask"] = attend.to(self.device)[None, None]  # (1, 1, T, length + T)
            extra["position_ids"] = torch.tensor([positions], dtype=torch.long, device=self.device)
        out = self.model(input_ids=input_ids, past_key_values=self.cache, use_cache=True,
                         logits_to_keep=1 if last_only else keep, **extra)
        self.length += len(ids)
        return out.logits[0].float()  # (T, V)

    def crop(self, length: int) -> None:
        """Keep the first `length` cached tokens."""
        if length < self.length:
            self.cache.crop(length - self.length)  # this transformers takes a negative count
            self.length = length


    def keep(self, linear: int, slots: list) -> None:
        """Keep the first `linear` cached tokens and the tree nodes at cache columns `slots`
        (in order): after a tree step, only the accepted path stays."""
        index = torch.tensor(list(range(linear)) + list(slots), dtype=torch.long, device=self.device)
        for layer in self.cache.layers:
            if getattr(layer, "keys", None) is not None and layer.keys.numel():
                layer.keys = layer.keys.index_select(-2, index)
                layer.values = layer.values.index_select(-2, index)
        self.length = len(index)


def runner_for(model):
    """The cached runner of a model: toy models bring their own, HF models get a CachedLM."""
    make = getattr(model, "make_runner", None)
    return make() if make is not None else CachedLM(model)


def synchronize(device) -> None:
    """Wait for queued GPU work so wall-clock timings measure compute, not launches."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)
