"""Notebook 6 · Drafting without a draft model: solutions."""

__all__ = ["my_proposal", "my_lookup"]

# Exercise 1: the suffix 'a b' occurs earlier at position 0; what followed it, up to k = 3 tokens.
my_proposal = ["c", "d", "a"]


def my_lookup(tokens: list, k: int, max_ngram: int = 3, min_ngram: int = 1) -> list:
    """The continuation (at most k tokens) of the earliest earlier occurrence of the longest
    suffix n-gram, n from max_ngram down to min_ngram; [] when there is none."""
    if k <= 0:
        return []
    size = len(tokens)
    for n in range(min(max_ngram, size - 1), min_ngram - 1, -1):
        suffix = tokens[size - n:]
        for start in range(size - n):  # earlier starts only: the suffix itself has no continuation
            if tokens[start:start + n] == suffix:
                return tokens[start + n:start + n + k]
    return []
