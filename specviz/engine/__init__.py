"""The engine: one step, repeated, streamed as events (specviz.events).

    sequence  one sequence: draft -> one target pass -> verify -> commit (`generate`)
    batch     B sequences, one target pass a step for all rows (`generate_batch`)
    commit    what both do after verification: emit, crop caches, let the drafter observe, finish
    setup     what both share before the first step: the checked config, the method's drafter
              and verifier (from specviz.methods), the clock, run_started
    record    one step as a plain record, and the events built from it in one place
    adaptive  k="auto": the draft length chosen each step
    load      k="load": one k a step for a whole batch, from the measured cost of a pass

The engine never prints and imports no UI library; everything it shows goes out as events.
"""


def __getattr__(name):  # what 0.1.0's __init__ re-exported, with a warning, until 0.3.0
    from specviz import deprecated

    return deprecated.package_name(__name__, name)
