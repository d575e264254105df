"""The batching crossover to trust, read from the paired report, for the notebooks that show their own.

Notebooks 7, 9 and 11 each find a batch size where speculation stops paying, on the student's
machine, in one run: a model fed with pass costs (7 and 9) or real batches timed once, one lane
after the other (11). Each is an estimate with no noise floor. The one to trust is the batched
benchmark's paired measurement (specviz.bench.batched, scored by specviz.analysis.paired): spec
and plain decoding back to back in rotating rounds, a verdict only beyond the noise floor the same
run measured. This module reads that report so the notebooks quote it from the file, never typed.

No torch: it reads JSON.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from specviz.analysis.paired import paired
from specviz.bench import figures
from specviz.errors import SpecvizError

REFERENCE = "batched-qwen-coder-bf16"  # the machines table's "batches of users" row


def _folder(folder: Optional[Path]) -> Path:
    """The reports' folder: the package's checkout, else docs/benchmarks beside the notebooks' folder."""
    if folder is not None:
        return Path(folder)
    beside = Path.cwd().parent / "docs" / "benchmarks"
    return figures.REPORTS if figures.REPORTS.is_dir() or not beside.is_dir() else beside


def reference(name: str = REFERENCE, folder: Optional[Path] = None) -> dict:
    """The paired crossover of report `name`: where it was measured, k, tokens per user, the
    noise floor, one row per batch size (median spec / plain of the rounds, their range, the
    verdict) and `stops_paying_at`, the first batch size measurably slower than plain decoding."""
    report = figures.report(name, _folder(folder))
    found = paired(report)
    if found is None:
        raise SpecvizError(f"the report {name} has no paired rounds (a policy section): it cannot say where "
                           "speculation stops paying; run `python -m specviz.bench.batched` with the load lane.")
    env, plan = report["environment"], report["plan"]
    return {"name": name, "page": f"docs/benchmarks/{name}.md",
            "machine": f"{env['device_name']}, {env['dtype']}, {env.get('threads', '?')} threads",
            "k": plan["lane_options"]["spec"]["k"], "tokens": plan["tokens"], **found}


def summary(ref: dict) -> str:
    """One sentence: where speculation stops paying in the paired report, with its noise floor."""
    rows = ref["rows"]
    first = rows[0]
    where = (f"slower than plain decoding beyond the noise floor ({ref['noise_floor']:.0%}) from "
             f"B = {ref['stops_paying_at']}" if ref["stops_paying_at"] else
             f"not measurably slower than plain decoding at any B up to {rows[-1]['batch']}")
    return (f"paired rounds on {ref['machine']} (spec k = {ref['k']} over plain decoding, {ref['tokens']} tokens "
            f"per user, {len(first['ratios'])} rounds per batch size): {first['median']:.2f}× at B = {first['batch']}, "
            f"{where} ({ref['page']})")


def beside(own: Optional[int], largest: int, what: str, ref: dict) -> str:
    """This notebook's crossover said as what it is (`what`: machine, run, model or unpaired),
    then the paired report's, the one to trust."""
    found = f"B = {own}" if own else f"none up to B = {largest}"
    return f"{what}: {found}.\nThe crossover to trust: {summary(ref)}."


def rows(ref: dict) -> list:
    """The report's paired rows for a table: B, the rounds, their median and range, the verdict."""
    return [{"batch": r["batch"], "rounds": ", ".join(f"{x:.2f}×" for x in r["ratios"]), "median": r["median"],
             "range": f"{r['low']:.2f}–{r['high']:.2f}", "verdict": r["verdict"]} for r in ref["rows"]]


COLUMNS = [("batch", "users B"), ("rounds", "rounds: spec ÷ plain"), ("median", "median"), ("range", "range"),
           ("verdict", "verdict")]
