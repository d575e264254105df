"""A throwaway method's one drafter module, as a contributor would write it: "echo" proposes the
last committed token k times (a one-hot q, like prompt lookup's). tests/test_method_registry.py
registers it with one record and runs it everywhere a method runs."""

import time

from specviz.config import vocab_size
from specviz.drafters.base import Drafter, Proposal, one_hot_rows


class EchoDrafter(Drafter):
    name = "echo"

    def __init__(self, vocab: int, device):
        self.vocab, self.device = vocab, device

    def propose(self, committed, k, warp, generator) -> Proposal:
        start = time.perf_counter()
        tokens = [committed[-1]] * max(k, 0)
        return Proposal.chain(tokens, one_hot_rows(tokens, self.vocab, self.device), 0, time.perf_counter() - start)


def build(pair, cfg, stop, policy=None) -> EchoDrafter:
    return EchoDrafter(vocab_size(pair), pair.device)
