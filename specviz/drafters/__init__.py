"""Drafters propose what the target should check next; the target verifies it in one pass.

Every drafter is a `Drafter` (see specviz.drafters.base): one `propose` that returns a
`Proposal` (a token tree, a chain being a one-path tree, with the q each node's children were
drawn from), and one `observe` that learns what the target kept. A drafter that samples must
draw each token from the q it reports: that is what makes the rejection rule lossless.
"""

from specviz.drafters.base import Drafter, NoDrafter, Proposal
from specviz.drafters.lookahead import LookaheadDrafter
from specviz.drafters.lookup import CascadeDrafter, PromptLookupDrafter
from specviz.drafters.model import ModelDrafter
from specviz.drafters.scripted import ScriptedDrafter
from specviz.drafters.tree import TreeDrafter

__all__ = ["CascadeDrafter", "Drafter", "LookaheadDrafter", "ModelDrafter", "NoDrafter", "PromptLookupDrafter",
           "Proposal", "ScriptedDrafter", "TreeDrafter"]
