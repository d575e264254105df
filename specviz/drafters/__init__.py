"""Drafters propose the next k tokens; the target verifies them in one pass.

Protocol (two methods plus a start, as in transformers' candidate generators):
    start(prompt_ids)                         reset state for a new run
    propose(committed, k, warp, generator)    -> Proposal (tokens, their draft distributions q)
    observe(committed, accepted)              learn what the target kept (crop caches, adapt)
A drafter that samples must draw each token from the q it reports: that is what makes the
rejection rule lossless.
"""

from specviz.drafters.base import Proposal
from specviz.drafters.lookup import CascadeDrafter, PromptLookupDrafter
from specviz.drafters.model import ModelDrafter
from specviz.drafters.scripted import ScriptedDrafter

__all__ = ["CascadeDrafter", "ModelDrafter", "PromptLookupDrafter", "Proposal", "ScriptedDrafter"]
