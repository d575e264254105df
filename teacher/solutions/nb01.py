"""Notebook 1 · The memory wall: solutions."""

__all__ = ["my_ratio", "my_speedup"]

# Exercise 2: per step we pay k draft forwards at c each plus one target forward (the flat part
# of the curve), and get tau tokens; autoregressive decoding pays one forward per token.
#     speedup = tau / (c * k + 1) = 3 / (0.4 * 4 + 1) = 1.15
# With the measured verify cost instead of one forward, divide by c * k + t(5) / t(1):
#     theory.speedup_with_cost(...) does that (notebook 4).
my_speedup = 3 / (0.4 * 4 + 1)


def ratio(costs: dict) -> float:
    """Exercise 1: the cost of a 4-token target forward relative to a 1-token one, t(4) / t(1).
    Verifying 3 drafts plus the next position costs that much more than generating one token."""
    return costs["target"][4] / costs["target"][1]


def __getattr__(name):
    # Exercise 1's answer depends on this session's measurement: read `costs` from the notebook.
    if name == "my_ratio":
        from IPython import get_ipython

        return ratio(get_ipython().user_ns["costs"])
    raise AttributeError(name)
