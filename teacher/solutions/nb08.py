"""Notebook 8 · The landscape: solutions."""

__all__ = ["my_speedup", "my_ssd_speedup"]

# tau / (c k + 1) = 3.5 / (0.05 * 5 + 1) = 2.8x at best; on a CPU where a 6-token forward costs
# more than a 1-token one, less.
my_speedup = 3.5 / (0.05 * 5 + 1)

# SSD: (c k + 1) / (s + w + (1 - h) c k + h c (k - r) + o) with s = 1, w = 0, r = k, o = 0:
# (0.3 + 1) / (1 + 0.2 * 0.3) = 1.23x over plain speculation
my_ssd_speedup = (0.05 * 6 + 1) / (1 + 0.2 * 0.05 * 6)
