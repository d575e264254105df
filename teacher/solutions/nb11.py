"""Notebook 11 · When batching kills speculation: solutions."""

__all__ = ["crossover", "my_ratio"]


def crossover(alpha: float, k: int, costs: dict, draft: dict, batches: list):
    """Exercise 2: the first batch size (in increasing order) at which speculation with k drafts
    per row stops paying; None when it pays at every batch size."""
    expected = k + 1 if alpha >= 1 else (1 - alpha ** (k + 1)) / (1 - alpha)  # tokens per row per step
    for b in sorted(batches):
        plain = costs[(b, 1)]  # one token per row
        speculative = costs[(b, k + 1)] + k * draft[b]
        if expected * plain / speculative < 1:  # tokens per second, relative to plain decoding
            return b
    return None


# Exercise 1: a speculative step at B = 32, k = 4 verifies 32 × 5 = 160 tokens; a plain step 32.
# Once the pass is compute-bound its cost grows with its tokens, so the ratio approaches 5.
my_ratio = 5
