"""Benchmarks: measured in one run, reported as ratios. See docs/benchmarks/."""
