"""Traces: an event stream saved as JSON Lines, one event per line, loadable and replayable."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable, Iterator, Union

from specviz import files
from specviz.events import Event, check_trace, from_dict


def dumps(event: Union[Event, dict]) -> str:
    data = event.to_dict() if isinstance(event, Event) else event
    return json.dumps(data, ensure_ascii=False, allow_nan=False)


def save(events: Iterable, path) -> int:
    """Write events to `path` (whole or not at all: a run that fails midway leaves no half trace
    where a whole one is expected); returns how many were written."""
    n = 0
    with files.new_file(path) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        for event in events:
            fh.write(dumps(event) + "\n")
            n += 1
    return n


def replay(path) -> Iterator[Event]:
    """Events of a saved trace, in order, as event objects (each held to the schema's types and
    ranges; `load` checks the whole trace)."""
    with open(Path(path), encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                yield from_dict(json.loads(line))


def load(path) -> list:
    """A saved trace's events, checked as a whole against the schema (specviz.events.check_trace)."""
    events = list(replay(path))
    check_trace([event.to_dict() for event in events])
    return events
