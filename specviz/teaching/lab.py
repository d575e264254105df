"""The lab switch: where a notebook's part of the class's lab ends.

The class's lab runs a few sections of notebooks 2, 4 and 9 (docs/teaching.md, "The lab"). A
student presses Run All; without a stop, the kernel goes on into the homework sections (a
temperature sweep, batched timings) and the lab's exercise checks wait behind them. So the last
cell of each notebook's lab sections calls `lab_ends_here()`:

- in class (SPECVIZ_LAB unset, or 1) it raises `LabEnd`. Jupyter stops Run All at a cell that
  raises, and IPython shows what the exception's `_render_traceback_` returns instead of a
  traceback: the message alone.
- with SPECVIZ_LAB=0 (the executed copies, the notebook tests, the lab's timing) it prints one
  line and the notebook runs on, as a whole notebook must there.

specviz.bench.lab finds the cell that calls it to know where a notebook's lab ends.
"""

from __future__ import annotations

import os

ENV = "SPECVIZ_LAB"
MESSAGE = ("The lab ends here. The sections below are homework: click the next cell and use "
           "Run > Run Selected Cell and All Below.",
           "In class: shut this notebook's kernel down (Kernel > Shut Down Kernel) before you open the next one.")
GOING_ON = f"(The lab ends here; {ENV}=0, so this run goes on into the homework sections.)"


class LabEnd(Exception):
    """Stops Run All at the lab's end; shown as its message only, without a traceback."""

    def __init__(self, lines: tuple = MESSAGE):
        super().__init__("\n".join(lines))
        self.lines = list(lines)

    def _render_traceback_(self) -> list:
        return self.lines  # IPython prints these lines in place of the traceback


def lab_ends_here() -> None:
    """Stop a student's Run All here, or (SPECVIZ_LAB=0) say so in one line and go on."""
    value = os.environ.get(ENV, "").strip()
    if value == "0":
        print(GOING_ON)
        return
    if value not in ("", "1"):  # a mistyped setting stops, as in class, and says how to go on
        raise LabEnd((*MESSAGE[:1], f"({ENV} is {value!r}: set it to 0 to run on past the lab's end, "
                                    "or to 1 (or leave it unset) to stop here.)"))
    raise LabEnd()
