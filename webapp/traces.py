"""Reading a trace a visitor uploads: a public Space gets hostile files, so every problem is one
sentence (gr.Error, its markup escaped: Gradio shows an error's message as HTML), nothing is read
past the size limit, and every event is held to the schema (specviz.events.check_trace) before a
view sees it."""

from __future__ import annotations

import gzip
import html
import io
import json
import os
import zlib

import gradio as gr

from specviz import events as ev
from specviz.errors import NewerSchemaError

MAX_TRACE_BYTES = 20_000_000  # also the most a gzipped trace may unpack to
GZIP_MAGIC = b"\x1f\x8b"
STARTS = ("run_started", "batch_started")  # a run, or a batched run (every row's events carry `row`)


def read_trace(path: str) -> list:
    """The events of an uploaded trace as dicts, each checked against the schema."""
    size = os.path.getsize(path)
    if size == 0:
        raise _refuse("The file is empty: a saved trace has one JSON event per line.")
    if size > MAX_TRACE_BYTES:
        raise _refuse(f"The file is {_mb(size)}; this app opens traces up to {_mb(MAX_TRACE_BYTES)}.")
    with open(path, "rb") as fh:
        data = fh.read()
    if data[:2] == GZIP_MAGIC:
        data = _gunzip(data)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _refuse(f"The file is not UTF-8 text (byte {exc.start} is 0x{data[exc.start]:02x}): a saved trace "
                       "is JSON Lines, from `python -m specviz generate --jsonl`.") from None
    # split on "\n" only: str.splitlines() also splits inside a token's text at U+2028 or U+0085,
    # which JSON written with ensure_ascii=False keeps raw
    numbered = [(number, line) for number, line in enumerate(text.split("\n"), 1) if line.strip()]
    events = [_trace_event(line, number) for number, line in numbered]
    if not events:
        raise _refuse("The trace has no events: a saved trace has one JSON event per line.")
    if events[0]["kind"] not in STARTS:
        raise _refuse(f"The trace starts with a {events[0]['kind']!r} event; a specviz run starts with run_started "
                      "(a batched run with batch_started).")
    version = events[0].get("schema_version", ev.SCHEMA_VERSION)
    if not isinstance(version, int) or version > ev.SCHEMA_VERSION:
        raise _refuse(f"The trace has event schema {version!r}; this app reads up to {ev.SCHEMA_VERSION}: "
                      "update specviz.")
    try:
        ev.check_trace(events)
    except ev.TraceError as exc:
        number = numbered[exc.at][0]
        raise _refuse(f"Line {number} of the trace is not a valid {events[exc.at]['kind']} event: {exc}.") from None
    return events


def _refuse(message: str) -> gr.Error:
    """The one sentence a visitor sees; it may quote the file, so its markup is escaped."""
    return gr.Error(html.escape(message, quote=False))


def _gunzip(data: bytes) -> bytes:
    """A gzipped trace (as the presets are shipped), read no further than the size limit: a small
    file can unpack to gigabytes."""
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as gz:
            out = gz.read(MAX_TRACE_BYTES + 1)
    except (OSError, EOFError, zlib.error) as exc:
        raise _refuse(f"The file starts like gzip but does not decompress ({exc}).") from None
    if len(out) > MAX_TRACE_BYTES:
        raise _refuse(f"The file unpacks to more than {_mb(MAX_TRACE_BYTES)}, the most this app opens.")
    return out


def _mb(size: int) -> str:
    return f"{size / 1e6:.3g} MB"


def _trace_event(line: str, number: int) -> dict:
    """A known event kind is checked against the schema; an unknown one (newer engine) is kept."""
    try:
        data = json.loads(line)
    except (ValueError, RecursionError) as exc:  # RecursionError: "[[[[..." nested past the stack
        raise _refuse(f"Line {number} of the trace is not JSON ({exc}): a saved trace has one JSON event "
                       "per line.") from None
    if not isinstance(data, dict) or not isinstance(data.get("kind"), str):
        raise _refuse(f"Line {number} of the trace is not a specviz event: a JSON object with a \"kind\" is expected.")
    if data["kind"] not in ev.EVENT_TYPES:
        return data
    try:
        return ev.from_dict(data).to_dict()
    except NewerSchemaError as exc:  # said as it is: its unknown fields are not the problem
        raise gr.Error(str(exc)) from None
    except (ValueError, TypeError) as exc:
        raise _refuse(f"Line {number} of the trace is not a valid {data['kind']} event: {exc}.") from None
