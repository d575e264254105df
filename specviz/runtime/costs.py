"""What a forward costs here: seconds of one target forward over n new tokens after a fixed prefix
(`forward_cost`), and the same at batch B (`batch_cost`).

The "memory wall" behind speculative decoding: at batch 1 a forward over a few tokens costs about
as much as over one, because reading the weights dominates; as B grows, forwards become
compute-bound and verifying k + 1 tokens stops being nearly free. Trees sized to the machine
(specviz.drafters.tree_budget), the notebooks and the bench's curve (specviz.bench.forward) read it.
"""

from __future__ import annotations

import time

import torch

from specviz.runtime.lm import runner_for, synchronize


def forward_cost(model, n_tokens: list, prefix: int = 64, repeats: int = 5, vocab: int = 1000) -> dict:
    """{n: seconds} of a forward over n tokens on top of a cached `prefix`-token context: the best
    of `repeats` rounds, each round timing every n once (interleaved), after one warm-up round.

    Best of, because on a shared machine other work only ever adds time; interleaved, so that a
    burst of it cannot bias one n against the others.
    """
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(10, vocab, (prefix + max(n_tokens),), generator=gen).tolist()
    runner = runner_for(model)
    runner.reset()
    runner.forward(ids[:prefix], last_only=True)
    best = {n: float("inf") for n in n_tokens}
    for r in range(repeats + 1):  # round 0 warms up every shape
        for n in n_tokens:
            synchronize(runner.device)
            start = time.perf_counter()
            runner.forward(ids[prefix:prefix + n])
            synchronize(runner.device)
            if r:
                best[n] = min(best[n], time.perf_counter() - start)
            runner.crop(prefix)
    return best


@torch.inference_mode()
def batch_cost(model, batches: list, n_tokens: list, prefix: int = 64, repeats: int = 3,
               vocab: int = 1000) -> dict:
    """{batch: {n: seconds}} of one forward over n new tokens per row, on top of a cached
    `prefix`-token context in each of `batch` rows: best of `repeats` interleaved rounds, as
    forward_cost."""
    from transformers import DynamicCache

    gen = torch.Generator().manual_seed(0)
    caches, ids = {}, {}
    for b in batches:
        ids[b] = torch.randint(10, vocab, (b, prefix + max(n_tokens)), generator=gen).to(model.device)  # (B, T)
        caches[b] = DynamicCache(config=model.config)
        model(input_ids=ids[b][:, :prefix], past_key_values=caches[b], use_cache=True, logits_to_keep=1)
    best = {b: {n: float("inf") for n in n_tokens} for b in batches}
    for r in range(repeats + 1):  # round 0 warms up every shape
        for b in batches:
            for n in n_tokens:
                synchronize(model.device)
                start = time.perf_counter()
                model(input_ids=ids[b][:, prefix:prefix + n], past_key_values=caches[b], use_cache=True)
                synchronize(model.device)
                if r:
                    best[b][n] = min(best[b][n], time.perf_counter() - start)
                caches[b].crop(-n)  # this transformers takes a negative count of tokens to drop
    return best
