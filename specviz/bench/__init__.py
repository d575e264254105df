"""Benchmarks: measured in one run, reported as ratios. See docs/benchmarks/suite.md.

`python -m specviz.bench` runs the suite (specviz.bench.suite). Two scripts time one part of it
alone: forward.py the verify-cost curve (specviz.runtime.costs, also used by the notebooks), assisted.py the same-k
lanes against transformers' assisted generation.
"""

from __future__ import annotations

import sys
from typing import Callable

from specviz.errors import run_command


def run_resumable(args, run: Callable, interrupted: str) -> int:
    """A resumable benchmark's command (heldout, repeated, ssd): `run(args, say)` with progress on
    stderr (none under --quiet); a report folder that cannot be written is one line naming it,
    status 2; the rest as every command (specviz.errors.run_command)."""
    say = (lambda *_: None) if args.quiet else (lambda msg: print(msg, file=sys.stderr, flush=True))

    def body() -> int:
        try:
            return run(args, say)
        except OSError as exc:  # the report's folder cannot be written
            print(f"error: {exc.strerror or exc}: {exc.filename or args.out}", file=sys.stderr)
            return 2

    return run_command(body, interrupted)
