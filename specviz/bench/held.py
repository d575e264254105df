"""Greedy verification held to a given text: judging drafters on the very text AR writes.

In exact arithmetic greedy speculative output is AR's, token for token. In bf16 on a CPU it is
not always: the verify pass scores k + 1 positions in one forward, whose sums run in another
order than AR's one-token passes, and where the target's two best tokens are nearly tied the
argmax can flip (docs/benchmarks: `≠AR`). From there the run goes on along another text, with
its own acceptance: one drafter is then timed on code that goes one way, another on code that
goes another, and a 32-token comparison of the two says as much about the flip as about them.

`HeldVerifier` is the greedy rule with one change: wherever the committed text is still AR's
(`script`, AR's own greedy answer), the target's choice at the next position is AR's token, not
the verify pass's argmax. Every forward, every draft and every acceptance test runs as in a real
run, so the run's clock is a real run's; only at a near-tie flip is the token AR's. `forced`
counts those positions: 0 means the run was the real one, token for token. A near-tie flips one
position now and then; an engine that kept a wrong cache would disagree with AR at many, so the
count is read as `≠AR` is (the exactness itself is tested in float32, where no flip happens). At a
held position the step's events show AR's token with p = 1 (the greedy p is one-hot either way),
and the chain's analytic acceptance still comes from the verify pass's own p.
It is a measuring instrument of the benchmark (`--hold-to-ar`), never a method: the engine and
the app never use it, and it holds only the exact greedy rule (a lossy rule runs as it is).
"""

from __future__ import annotations

from typing import Optional

import torch

from specviz.verifiers import sampling
from specviz.verifiers.exact import GreedyVerifier


class HeldVerifier(GreedyVerifier):
    name = "greedy, held to AR's text"

    def __init__(self, script: list):
        super().__init__()
        self.script = list(script)
        self.at = 0  # new tokens committed so far (the run's position in the script)
        self.forced = 0  # committed positions where the verify pass's argmax was not AR's token

    def verify(self, tree, dists, target_probs, generator, eos=()):
        verdict = super().verify(tree, dists, target_probs, generator, eos)
        self.at += verdict.accepted + (verdict.next_token is not None)
        return verdict

    def judge(self, tree, node, children, p, q, generator, out) -> Optional[int]:
        # the verifier walks only the accepted path, so every call here commits one position
        at = self.at + tree.depth(node)
        if at < len(self.script):
            want = self.script[at]
            if int(torch.argmax(p)) != want:
                self.forced += 1
                p = sampling.one_hot(want, p)
        return super().judge(tree, node, children, p, q, generator, out)
