"""The worksheet's measured answers: printed where the student reads them, collected for the key.

A lab notebook's cell that computes a worksheet answer calls

    answer(7, "measured speedup at k = 4", speedup, "{:.2f}×")

which prints one line, "Worksheet 7: measured speedup at k = 4 = 1.62×", so that a student knows
which number the question asks for. Where the environment names a file in SPECVIZ_WORKSHEET (the
lab benchmark, specviz.bench.lab, and the executed copies, notebooks/execute.py, set it), the
answer is also appended to that file as one JSON line (specviz.files.read_json_lines reads it
back): the teacher's answer key (specviz.bench.guide) reads those records, so the key quotes what the lab's notebooks printed on
each reference machine, not a figure typed beside them.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Union

ENV = "SPECVIZ_WORKSHEET"
Value = Union[int, float, str, None]


def answer(question: Union[int, str], what: str, value: Value, fmt: str = "{}", note: str = "") -> Value:
    """Print the answer to worksheet question `question` and record it where SPECVIZ_WORKSHEET says."""
    if isinstance(value, float) and not math.isfinite(value):
        value = None  # nothing measured (e.g. no verdict on a busy machine): JSON has no NaN
    shown = "not measured" if value is None else fmt.format(value)
    print(f"Worksheet {question}: {what} = {shown}" + (f" ({note})" if note else ""))
    target = os.environ.get(ENV)
    if target:
        record = {"question": str(question), "what": what, "value": value, "shown": shown, "note": note}
        with Path(target).open("a", encoding="utf-8") as out:
            out.write(json.dumps(record) + "\n")
    return value

