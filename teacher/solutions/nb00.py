"""Notebook 0 · How speculation works: solutions."""

__all__ = ["caches_after"]


def caches_after(committed_before: int, drafted: int, accepted: int) -> tuple:
    """Exercise: (target cache, draft cache) lengths after a step's crop. Both caches keep every
    committed token but the last; the draft model never read its last guess."""
    committed_after = committed_before + accepted + 1  # accepted guesses, then one token of the target's
    draft_read = committed_before + drafted - 1  # what the draft model read while guessing
    return committed_after - 1, min(draft_read, committed_after - 1)
