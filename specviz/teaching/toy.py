"""Exact toy language models: conditional probability tables over a tiny vocabulary.

Used where the truth must be known exactly: the distribution tests (the joint law of the first
tokens under speculative sampling must equal the target's), and the notebooks' proofs by
experiment. A TableLM of order n conditions on the last n-1 tokens (order 1: a fixed
distribution; order 2: a bigram table), so every joint probability is a product of table entries.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch

from specviz.runtime.pair import Pair


class TableLM:
    """Logits looked up from a table indexed by the last `order - 1` tokens.

    `table` has shape (V,) * (order - 1) + (V,): table[a, b, :] are the next-token logits after
    the context (..., a, b). Contexts shorter than order - 1 are left-padded with token 0.
    """

    def __init__(self, table: torch.Tensor, order: int, name: str = "table"):
        assert table.dim() == order, "table needs one axis per context token plus one"
        self.table = table.float()
        self.order = order
        self.vocab_size = table.shape[-1]
        self.device = torch.device("cpu")
        self.dtype = torch.float32
        self.name = name

    def make_runner(self) -> "TableRunner":
        return TableRunner(self)

    # Drafters that read the target's hidden states (specviz.drafters.heads) see a table's logits
    # row as its "hidden state": its output head is the identity and its embedding one-hot.
    @property
    def hidden_size(self) -> int:
        return self.vocab_size

    def get_output_embeddings(self) -> torch.nn.Linear:
        if getattr(self, "_head", None) is None:  # one module, as a real model's (heads.bind keys on it)
            self._head = torch.nn.Linear(self.vocab_size, self.vocab_size, bias=False)
            self._head.weight.data = torch.eye(self.vocab_size)
        return self._head

    def get_input_embeddings(self) -> torch.nn.Embedding:
        if getattr(self, "_embed", None) is None:
            self._embed = torch.nn.Embedding.from_pretrained(torch.eye(self.vocab_size))
        return self._embed

    def logits_after(self, context: list) -> torch.Tensor:
        need = self.order - 1
        ctx = ([0] * need + list(context))[len(context):] if need else []
        return self.table[tuple(ctx)] if need else self.table

    def next_probs(self, context: list, temperature: float = 1.0) -> torch.Tensor:
        return torch.softmax(self.logits_after(context) / temperature, dim=-1)


class TableRunner:
    """Same interface as `specviz.runtime.lm.CachedLM`: the 'cache' is the token history."""

    def __init__(self, model: TableLM):
        self.model = model
        self.device = model.device
        self.reset()

    def reset(self) -> None:
        self.history = []

    @property
    def length(self) -> int:
        return len(self.history)

    def forward(self, ids: list, last_only: bool = False, attend=None, positions=None,
                keep: int = 0, hidden: bool = False):
        start = len(self.history)
        self.history.extend(int(t) for t in ids)
        rows = []
        for r in range(len(ids)):
            if attend is None:
                context = self.history[:start + r + 1]
            else:  # tree attention: the context is exactly what this row may see
                context = [self.history[j] for j in torch.nonzero(attend[r]).flatten().tolist()]
            rows.append(self.model.logits_after(context))
        out = torch.stack(rows)  # (T, V)
        logits = out[-1:] if last_only else out[-keep:] if keep else out
        return (logits, out) if hidden else logits

    def crop(self, length: int) -> None:
        del self.history[length:]

    def keep(self, linear: int, slots: list) -> None:
        self.history = self.history[:linear] + [self.history[j] for j in slots]


def exact_joint(model: TableLM, prompt: list, n: int, probs_fn=None) -> dict:
    """P(first n emitted tokens = t) for every t in V^n, by enumeration (no EOS)."""
    probs_fn = probs_fn or (lambda ctx: model.next_probs(ctx))
    joint = {}
    for seq in itertools.product(range(model.vocab_size), repeat=n):
        prob, ctx = 1.0, list(prompt)
        for token in seq:
            prob *= float(probs_fn(ctx)[token])
            ctx.append(token)
        joint[seq] = prob
    return joint


@dataclass
class ToyTokenizer:
    """Names tokens 'a', 'b', ... so toy runs render like real ones."""

    vocab_size: int
    eos_token_id: int = -1  # toy runs never end early unless a test sets one

    def decode(self, ids, **_) -> str:
        return "".join(chr(ord("a") + int(i)) for i in ids)

    def encode(self, text: str, **_) -> list:
        return [ord(c) - ord("a") for c in text]

    def get_vocab(self) -> dict:
        return {chr(ord("a") + i): i for i in range(self.vocab_size)}


def random_table(vocab: int, order: int, seed: int, sharpness: float = 2.0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn((vocab,) * order, generator=gen) * sharpness


def toy_pair(target: TableLM, draft: TableLM, eos_token_ids=()):
    """A `Pair` of two exact table models, runnable by `specviz.generate` like any real pair."""

    return Pair("toy", target, draft, ToyTokenizer(target.vocab_size), torch.device("cpu"),
                torch.float32, source="exact table models", context_length=10_000,
                eos_token_ids=list(eos_token_ids))
