"""Verifiers decide which drafted tokens the target keeps, and what it emits next.

One walk over the drafted tree (`Verifier.verify(tree, dists, target_probs, generator, eos)`
-> `Verdict`) serves chains and trees; a rule says how one node's children are judged. The
lossless rules are greedy and rejection sampling (multi-draft in a tree); typical acceptance is
lossy and says so (`lossless = False`, which the engine copies into every run it makes).
"""


def __getattr__(name):  # what 0.1.0's __init__ re-exported, with a warning, until 0.3.0
    from specviz import deprecated

    return deprecated.package_name(__name__, name)
