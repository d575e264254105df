"""Verifiers decide which drafted tokens the target keeps, and what it emits next.

A verifier is a small object with `name`, `lossless` and
`verify(draft_tokens, draft_probs, target_probs, generator, allow_bonus) -> Verdict`.
The chain verifiers here implement the two lossless rules of speculative decoding; a lossy
verifier must set `lossless = False`, which the engine copies into every run it makes.
"""

from specviz.verifiers.chain import Decision, GreedyVerifier, RejectionVerifier, Verdict, default_verifier
from specviz.verifiers.typical import TypicalVerifier

__all__ = ["Decision", "GreedyVerifier", "RejectionVerifier", "TypicalVerifier", "Verdict",
           "default_verifier"]
