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
    def forward(self, ids: list, last_only: bool = False) -> torch.Tensor:
        """Feed `ids` after the cached prefix; return float32 logits (T, V), or (1, V) if last_only."""
        input_ids = torch.tensor([ids], dtype=torch.long, device=self.device)  # (1, T)
        out = self.model(input_ids=input_ids, past_key_values=self.cache, use_cache=True,
                         logits_to_keep=1 if last_only else 0)
        self.length += len(ids)
        return out.logits[0].float()  # (T, V)

    def crop(self, length: int) -> None:
        """Keep the first `length` cached tokens."""
        if length < self.length:
            self.cache.crop(length - self.length)  # this transformers takes a negative count
            self.length = length


def runner_for(model):
    """The cached runner of a model: toy models bring their own, HF models get a CachedLM."""
    make = getattr(model, "make_runner", None)
    return make() if make is not None else CachedLM(model)


def synchronize(device) -> None:
    """Wait for queued GPU work so wall-clock timings measure compute, not launches."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)
