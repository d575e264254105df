"""Notebook 8's exercise: a paper's speedup from its own numbers.
"""

from __future__ import annotations

from typing import Optional

from specviz.teaching.exercises.checking import check_answer


def check_paper_speedup(answer) -> Optional[bool]:
    """Notebook 8: τ = 3.5, k = 5, c = 0.05, verify = one forward."""
    return check_answer(answer, 3.5 / (0.05 * 5 + 1), tol=0.02, hint="τ / (c·k + 1)")
