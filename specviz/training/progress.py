"""What long training work says while it runs: one line on stderr, or a progress bar with an ETA.
"""

from __future__ import annotations

import os
import sys


def say(message: str) -> None:
    """One line on stderr (training's and generation's notes: a lock waited on, a run's end)."""
    print(f"[specviz] {message}", file=sys.stderr, flush=True)


def progress_bar(total: int, desc: str, unit: str = "tok", initial: int = 0, smoothing: float = 0.1):
    """A tqdm bar with an ETA for long work (SPECVIZ_QUIET=1 hides it)."""
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit=unit, initial=initial, unit_scale=True, smoothing=smoothing,
                dynamic_ncols=True, disable=os.environ.get("SPECVIZ_QUIET") == "1")
