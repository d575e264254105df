"""How the site carries rendered frames: each frame as an edit of the one before, gzip, base64.

A step view's frame c is the renderers' HTML for step c: the text up to step c, the step's
panel, the counters so far. Frame c + 1 repeats most of frame c, so storing every frame whole
grows with the square of the run's length. `delta` stores each frame as copies of runs of the
previous frame's pieces plus the new pieces, where a piece is the text from one '<', '{', '[' or
',' to the next (a tag, a JSON member): the page rebuilds every frame exactly (player.js,
`undelta`; `undelta` here is the same walk, for tests). Then the whole of a recording's data is
gzip-compressed (mtime 0: the same data gives the same bytes) and written as base64, which a page
decodes with the browser's DecompressionStream, so it opens from file:// (no fetch) and from any
static host.
"""

from __future__ import annotations

import base64
import difflib
import gzip
import json
import re

PIECE = re.compile(r"(?=[<{\[,])")  # player.js splits with the same expression


def pieces(text: str) -> list:
    return [p for p in PIECE.split(text) if p]


def delta(frames: list) -> list:
    """Each string of `frames` as [[start, end] (a copy of the previous frame's pieces) or a
    string (new text), ...]; the first frame is one string."""
    out, before = [], []
    for frame in frames:
        now = pieces(frame)
        ops = []
        matcher = difflib.SequenceMatcher(None, before, now, autojunk=False)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            if tag == "equal" and i2 - i1 > 1:
                ops.append([i1, i2])
            elif j2 > j1:
                text = "".join(now[j1:j2])
                if ops and isinstance(ops[-1], str):
                    ops[-1] += text
                else:
                    ops.append(text)
        out.append(ops)
        before = now
    return out


def undelta(encoded: list) -> list:
    frames, before = [], []
    for ops in encoded:
        frame = "".join(op if isinstance(op, str) else "".join(before[op[0]:op[1]]) for op in ops)
        frames.append(frame)
        before = pieces(frame)
    return frames


def pack(data) -> str:
    """JSON, gzip (deterministic), base64: what a page's script decodes."""
    raw = json.dumps(data, ensure_ascii=False, separators=(",", ":"), sort_keys=True).encode("utf-8")
    return base64.b64encode(gzip.compress(raw, compresslevel=9, mtime=0)).decode("ascii")


def pack_text(text: str) -> str:
    """A text (a script) gzip-compressed and base64-encoded, as `pack` does JSON."""
    return base64.b64encode(gzip.compress(text.encode("utf-8"), compresslevel=9, mtime=0)).decode("ascii")


def unpack(text: str):
    return json.loads(gzip.decompress(base64.b64decode(text)).decode("utf-8"))
