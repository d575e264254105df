"""Notebook 2 · Draft and verify, greedy: solutions."""

__all__ = ["cascade", "my_max_tokens", "my_emitted"]


# Lab exercise (section 3).
def cascade(drafts: list, target_top: list, eos=()) -> list:
    """Tokens one greedy verification step emits: the agreed prefix, then the target's token."""
    out = []
    for draft, top in zip(drafts, target_top):
        if draft != top:  # first disagreement: the target's own token replaces the draft, stop
            return out + [top]
        out.append(draft)
        if draft in eos:  # an accepted end-of-text token ends the run: no bonus after it
            return out
    return out + [target_top[len(drafts)]]  # every draft agreed: the bonus token


# Homework exercise 1 (section 6). With k = 4: four accepted drafts plus the bonus token from the same forward.
my_max_tokens = 5

# Homework exercise 2 (section 6). 'x' and '=' agree; '1' is replaced by the target's '2' and the step stops. ';' agrees with the
# target too, but it is never judged: after '2' the draft's context is wrong.
my_emitted = ["x", "=", "2"]
