"""transformers' own generate() on the same pair and prompt ids, timed like a specviz run.

Kinds:
  plain      generate(), the target alone
  assisted   generate(assistant_model=draft) drafting k tokens per step, constant schedule, no
             confidence early stop: the same algorithm as specviz's spec at the same k
  assisted-default   generate(assistant_model=draft) with the assistant's defaults (in transformers
             5.23: up to 20 drafts per step, cut when the draft's confidence falls below 0.4, the
             threshold re-fitted as it goes): transformers' own adaptive draft length
  pld        generate(prompt_lookup_num_tokens=k, max_matching_ngram_size=ngram): prompt lookup,
             as specviz's pld (longest suffix n-gram first, down to 1)

transformers 5.23 reads num_assistant_tokens, num_assistant_tokens_schedule and
assistant_confidence_threshold from the *assistant model's* generation_config, not from the
arguments of generate() (which it accepts and ignores): `assistant_settings` sets them on the
draft model for the duration of one call and restores them after.

`static_cache=True` gives plain generate() a StaticCache (transformers refuses one in assisted and
prompt-lookup generation, which crop the cache). Sampling runs pass top_k=0 and top_p=1.0
explicitly (generate() would otherwise apply its own top_k=50) and seed torch's global generator,
the only source transformers reads. A streamer records when each batch of tokens is handed out:
the first put() is the prompt itself and is skipped; every later put() is one update (one target
forward; assisted steps put several tokens at once), so latency is measured as for specviz's
step_finished events.
"""

from __future__ import annotations

import time
from contextlib import contextmanager

import torch

from specviz.runtime.lm import synchronize

KINDS = ("plain", "assisted", "assisted-default", "pld")
ASSISTANT_FIELDS = ("num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold")


class _Clock:
    """A transformers streamer that timestamps each put()."""

    def __init__(self, device, start: float):
        self.device, self.start = device, start
        self.times, self.counts = [], []
        self.prompt_seen = False

    def put(self, value) -> None:
        if not self.prompt_seen:  # generate() first puts the prompt
            self.prompt_seen = True
            return
        synchronize(self.device)
        self.times.append(time.perf_counter() - self.start)
        self.counts.append(int(value.numel()))

    def end(self) -> None:
        pass


def generate_kwargs(pair, kind: str, k: int, temperature: float, ngram: int = 3) -> dict:
    """The generate() arguments of one kind (without ids, max_new_tokens and streamer)."""
    if kind not in KINDS:
        raise ValueError(f"unknown transformers kind {kind!r}: one of {', '.join(KINDS)}")
    tok = pair.tokenizer
    pad = tok.pad_token_id if tok.pad_token_id is not None else pair.eos_token_ids[0]
    kwargs = dict(pad_token_id=pad, eos_token_id=list(pair.eos_token_ids), repetition_penalty=1.0)
    if temperature > 0:
        kwargs.update(do_sample=True, temperature=temperature, top_k=0, top_p=1.0)
    else:
        kwargs.update(do_sample=False)
    if kind in ("assisted", "assisted-default"):
        kwargs.update(assistant_model=pair.draft)
    elif kind == "pld":
        kwargs.update(prompt_lookup_num_tokens=k, max_matching_ngram_size=ngram)
    return kwargs


@contextmanager
def assistant_settings(draft, kind: str, k: int):
    """Draft k tokens per step, constant, without the confidence stop, for one assisted call."""
    config = draft.generation_config
    saved = {name: getattr(config, name, None) for name in ASSISTANT_FIELDS}
    if kind == "assisted":
        config.num_assistant_tokens = k
        config.num_assistant_tokens_schedule = "constant"
        config.assistant_confidence_threshold = 0.0  # 0 turns the confidence stop off
    try:
        yield
    finally:
        for name, value in saved.items():  # the "heuristic" schedule would also write back its k
            setattr(config, name, value)


@torch.inference_mode()
def run(pair, prompt_ids: list, kind: str, *, k: int = 4, temperature: float = 0.0,
        max_new_tokens: int = 64, seed: int = 0, ngram: int = 3, static_cache: bool = False) -> dict:
    """One timed generate(): seconds, new token ids and the streamer's update times."""
    ids = torch.tensor([prompt_ids], dtype=torch.long, device=pair.device)  # (1, T)
    kwargs = generate_kwargs(pair, kind, k, temperature, ngram)
    if static_cache and kind == "plain":  # transformers refuses a static cache in assisted generate()
        kwargs["cache_implementation"] = "static"
    torch.manual_seed(seed)
    synchronize(pair.device)
    start = time.perf_counter()
    clock = _Clock(pair.device, start)
    with assistant_settings(pair.draft, kind, k):
        out = pair.target.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                                   streamer=clock, **kwargs)
    synchronize(pair.device)
    seconds = time.perf_counter() - start
    new = out[0, ids.shape[1]:].tolist()
    eos = set(pair.eos_token_ids)
    if eos & set(new):  # generate() pads after EOS only in batches; keep the stream up to EOS
        new = new[:next(i for i, t in enumerate(new) if t in eos) + 1]
    return {"seconds": seconds, "token_ids": new, "times": clock.times, "counts": clock.counts}
