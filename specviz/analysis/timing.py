"""Was the machine quiet while a block of code was timed? The engine's busy check, for lessons
that time forwards themselves (notebook 1's forward costs) instead of reading events.

The engine keeps its decoding thread's CPU time beside its wall clock in every step
(`StepFinished.cpu_elapsed`); `measure()` keeps the same two clocks around any block run on the
calling thread, and `specviz.analysis.metrics.judge_timing` judges both the same way:

    with timing.measure(pair.device) as block:
        costs = forward_cost(pair.target, [1, 2, 4])
    if block.note:
        print(block.note)
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, Optional

from specviz.analysis.metrics import TimingCheck, judge_timing


@dataclass
class Block:
    """The clocks of one timed block: wall seconds and the calling thread's CPU seconds."""

    device: str = "cpu"
    seconds: float = 0.0
    cpu_seconds: float = 0.0

    @property
    def cpu_share(self) -> Optional[float]:
        return self.cpu_seconds / self.seconds if self.seconds > 0 else None

    @property
    def check(self) -> TimingCheck:
        return judge_timing(self.cpu_share, None, self.device, self.seconds)

    @property
    def note(self) -> Optional[str]:
        """None when the block's timings can be trusted (or not judged), else why not."""
        return self.check.note


@contextmanager
def measure(device="cpu") -> Iterator[Block]:
    """Time the block on the wall clock and on this thread's CPU clock (filled in when it ends)."""
    block = Block(str(device))
    wall, cpu = time.perf_counter(), time.thread_time()
    try:
        yield block
    finally:
        block.seconds = time.perf_counter() - wall
        block.cpu_seconds = time.thread_time() - cpu
