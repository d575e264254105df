"""Analysis: what a run's events mean, in plain Python (no torch, no models).

    metrics   fold an event stream into a run's numbers (tau, alpha, tokens/s, latencies)
    theory    closed forms: expected tokens per step, speedup, the break-even acceptance
    trace     an event stream saved as JSON Lines, loaded and replayed
    timing    was the machine quiet while a block was timed (notebook 1's forward costs)

Renderers, the app, the benchmarks and the notebooks read these; none of them re-runs a model.
"""
