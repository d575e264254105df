"""Notebook 1's exercises: the memory wall's cost ratio, and a speedup by hand.
"""

from __future__ import annotations

from typing import Optional

from specviz.teaching.exercises.checking import check_answer


def check_cost_ratio(answer, costs: dict) -> Optional[bool]:
    """Notebook 1: t(4) / t(1) of the target, from this session's measured `costs`."""
    return check_answer(answer, costs["target"][4] / costs["target"][1], tol=0.05,
                   hint="Divide the 4-token time by the 1-token time in the table.")


def check_speedup_by_hand(answer) -> Optional[bool]:
    """Notebook 1: τ = 3, c = 0.4, k = 4, verify = one forward."""
    tau, c, k = 3.0, 0.4, 4
    return check_answer(answer, tau / (c * k + 1), tol=0.02,
                   hint="Per step: k draft forwards at c each, plus one target forward, for τ tokens.")
