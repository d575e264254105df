"""Benchmarks: measured in one run, reported as ratios. See docs/benchmarks/suite.md.

`python -m specviz.bench` runs the suite (specviz.bench.suite). Two scripts time one part of it
alone: forward.py the verify-cost curve (specviz.runtime.costs, also used by the notebooks), assisted.py the same-k
lanes against transformers' assisted generation.
"""
