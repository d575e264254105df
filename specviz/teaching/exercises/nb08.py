"""Notebook 8's exercises: a paper's speedup from its own numbers; SSD's speed over plain
speculation from the hit rate and the costs.
"""

from __future__ import annotations

from typing import Optional

from specviz.teaching.exercises.checking import check_answer


def check_paper_speedup(answer) -> Optional[bool]:
    """Notebook 8: τ = 3.5, k = 5, c = 0.05, verify = one forward."""
    return check_answer(answer, 3.5 / (0.05 * 5 + 1), tol=0.02, hint="τ / (c·k + 1)")


def check_ssd_speedup(answer) -> Optional[bool]:
    """Notebook 8, section 7: c = 0.05, k = 6, o = 0, s = 1, w = 0, r = k, h = 0.8."""
    return check_answer(answer, (0.05 * 6 + 1) / (1 + 0.2 * 0.05 * 6), tol=0.02,
                        hint="(c·k + 1) / (1 + (1 − h)·c·k): only a miss drafts on the critical path")
