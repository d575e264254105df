"""Benchmarks: measured in one run, reported as ratios. See docs/benchmarks/suite.md.

`python -m specviz.bench` runs the suite (specviz.bench.suite); forward.py, assisted.py and
methods.py are the single-purpose scripts it grew from.
"""
