"""Which code decided a recording: a short hash of the engine, the method's drafter and the k policy.

A recording shown in the app or the course claims to be what specviz does. Once the code that
makes its decisions changes, the recording shows what an earlier specviz did. So each recording
stores `code_version(...)` of the code that decided it, and the app and the tests compare it with
the code now: the app says when a recording was made by earlier code, and tests/test_presets.py
and tests/test_serving.py fail until it is recorded again.

The hash is of the code's meaning, not its text: each file is parsed and written back without its
comments, docstrings and layout (ast.unparse), so a comment or a reworded docstring leaves it
unchanged and a changed rule does not. No torch: the app reads it before any model loads.
"""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path

from specviz import methods

PACKAGE = Path(__file__).resolve().parents[1]
# the step every method shares: one target pass, the rules, commit and crop, the events it writes
ENGINE = ("config.py", "engine/sequence.py", "engine/commit.py", "engine/record.py",
          "engine/setup.py", "verifiers/base.py", "verifiers/exact.py", "verifiers/sampling.py",
          "verifiers/draft_tree.py", "verifiers/typical.py", "drafters/base.py")
BATCH = ("engine/batch.py",)  # the batched engine (the serving recordings)
POLICIES = {"load": ("engine/load.py",), "auto": ("engine/adaptive.py",)}  # k = "load", k = "auto"


def _meaning(path: Path) -> str:
    """The file's code without comments, docstrings or layout."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            node.body = body[1:] or [ast.Pass()]
    return ast.unparse(tree)


def drafter_files(method: str) -> tuple:
    """The module that builds `method`'s drafter (and its batched drafter), as package paths."""
    record = methods.get(method)
    modules = {record.build.partition(":")[0]} | ({record.batch_build.partition(":")[0]} if record.batch_build else set())
    return tuple(sorted(m.removeprefix("specviz.").replace(".", "/") + ".py" for m in modules if m))


def files_for(method: str, k=None, batched: bool = False) -> tuple:
    """Every file whose code decides a run of `method` at draft length `k`."""
    policy = POLICIES.get(k, ()) if isinstance(k, str) else ()
    return tuple(sorted(set(ENGINE) | set(drafter_files(method)) | set(policy) | (set(BATCH) if batched else set())))


def code_version(method: str, k=None, batched: bool = False, root: Path = PACKAGE) -> str:
    """Twelve hex digits naming the code that decides such a run (`files_for`)."""
    digest = hashlib.sha256()
    for name in files_for(method, k, batched):
        digest.update(name.encode() + b"\0" + _meaning(Path(root) / name).encode() + b"\0")
    return digest.hexdigest()[:12]
