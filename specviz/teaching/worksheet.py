"""The worksheet's measured answers: printed where the student reads them, collected for the key.

A lab notebook's cell that computes a worksheet answer calls

    answer(7, "measured speedup at k = 4", speedup, "{:.2f}×")

which prints one line, "Worksheet 7: measured speedup at k = 4 = 1.62×", so that a student knows
which number the question asks for. Where the environment names a file in SPECVIZ_WORKSHEET (the
lab benchmark, specviz.bench.lab, and the executed copies, notebooks/execute.py, set it), the
answer is also appended to that file as one JSON line: the teacher's answer key
(specviz.bench.guide) reads those files, so the key quotes what the lab's notebooks printed on
each reference machine, not a figure typed beside them.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Optional, Union

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


def read(path: Path) -> dict:
    """{(question, what): record} from a file written by `answer` (the last record of a pair wins:
    a cell run twice answers twice). A missing file reads as no answers."""
    out: dict = {}
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return out
    for line in lines:
        if line.strip():
            record = json.loads(line)
            out[(record["question"], record["what"])] = record
    return out


def shown(answers: dict, question: Union[int, str]) -> Optional[str]:
    """The answers to one question as printed, joined ("a = x; b = y"), or None if it has none."""
    parts = [f"{r['what']} {r['shown']}" for (q, _), r in answers.items() if q == str(question)]
    return "; ".join(parts) if parts else None
