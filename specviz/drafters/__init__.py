"""Drafters propose what the target should check next; the target verifies it in one pass.

Every drafter is a `Drafter` (see specviz.drafters.base): one `propose` that returns a
`Proposal` (a token tree, a chain being a one-path tree, with the q each node's children were
drawn from), and one `observe` that learns what the target kept. A drafter that samples must
draw each token from the q it reports: that is what makes the rejection rule lossless.
"""


def __getattr__(name):  # what 0.1.0's __init__ re-exported, with a warning, until 0.3.0
    from specviz import deprecated

    return deprecated.package_name(__name__, name)
