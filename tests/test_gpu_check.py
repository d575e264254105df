"""The GPU check (specviz.bench.gpu_check, `make gpu-check`): its plan runs every CUDA-only test of
the suite, so a new one cannot be left out, and without a CUDA device it refuses in one line."""

import ast
import os
import subprocess
import sys
from pathlib import Path

from specviz.bench import gpu_check

TESTS = Path(__file__).resolve().parent


SKIPS_WITHOUT_CUDA = "not torch.cuda.is_available()"  # how a test says it needs a GPU


def _needs_cuda(source: str, node) -> bool:
    """A skip on CUDA's absence: a skipif mark, or a test body that skips when
    `not torch.cuda.is_available()` (a test that skips where a GPU *is* present, to check the
    no-GPU message, is not CUDA-only)."""
    marks = " ".join(ast.get_source_segment(source, d) for d in getattr(node, "decorator_list", []))
    body = ast.get_source_segment(source, node) or ""
    return ("skipif" in marks and SKIPS_WITHOUT_CUDA in marks) or f"if {SKIPS_WITHOUT_CUDA}" in body


def cuda_only_tests() -> set:
    """Every test file (a module-level pytestmark on CUDA) or test that skips without CUDA, read
    from the test files themselves."""
    found = set()
    for path in sorted(TESTS.glob("test_*.py")):
        source = path.read_text(encoding="utf-8")
        for node in ast.parse(source).body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "pytestmark" for t in node.targets):
                if SKIPS_WITHOUT_CUDA in ast.get_source_segment(source, node.value):
                    found.add(f"tests/{path.name}")
            elif isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name.lower().startswith("test"):
                if _needs_cuda(source, node):
                    found.add(f"tests/{path.name}::{node.name}")
    return found


def test_the_plan_runs_every_cuda_only_test():
    found = cuda_only_tests()
    assert "tests/test_cuda_graphs.py" in found  # the scan sees both kinds of skip
    assert "tests/test_ssd.py::test_on_cuda_the_preparation_runs_on_a_second_stream_and_stays_exact" in found
    planned = set(gpu_check.CUDA_TESTS)
    missing = {t for t in found if t not in planned and t.split("::")[0] not in planned}
    assert not missing, f"add these to specviz.bench.gpu_check.CUDA_TESTS: {sorted(missing)}"
    for entry in planned:  # and nothing planned is stale
        file, _, name = entry.partition("::")
        assert (TESTS.parent / file).is_file() and (not name or f"def {name}(" in (TESTS.parent / file).read_text())
    assert gpu_check.plan()[0] == ("CUDA-only tests", " ".join(gpu_check.CUDA_TESTS))
    assert [name for name, _ in gpu_check.plan()[1:]] == [f"greedy = AR: {m}" for m in
                                                          ("ar", "ssd", "dflash-tree", "eagle3-tree")]


def test_each_greedy_prompt_fills_the_graphs_cache():
    """A chain's prompt and new tokens are the static cache's length; a tree's leave room for its
    budget of nodes past the new tokens."""
    from specviz import methods
    from specviz.config import RunConfig

    for name, (settings, extra) in gpu_check.GREEDY.items():
        tree = name in methods.names(tree=True)
        assert extra == (RunConfig.of(**settings).tree_budget if tree else 0), name
        assert gpu_check.GRAPH_LEN - gpu_check.NEW_TOKENS - extra > gpu_check.GRAPH_LEN // 2


def test_without_cuda_it_refuses_in_one_line(tmp_path):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run([sys.executable, "-m", "specviz.bench.gpu_check", "--out", str(tmp_path / "gpu-check")],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == "error: the GPU check needs a CUDA device, and PyTorch sees none here.\n"
    assert list(tmp_path.iterdir()) == []  # no report of a check that did not run


def test_the_report_says_what_failed():
    report = {"machine": {"gpu": "NVIDIA H200", "torch": "2.13.0", "cuda": "12.8", "commit": "abc1234",
                          "date_utc": "2027-01-02 03:04"}, "seconds": 201.4,
              "results": [{"check": "CUDA-only tests", "ok": True, "seconds": 95.04, "note": "12 of 12 passed"},
                          {"check": "greedy = AR: ssd", "ok": False, "seconds": 3.0, "note": "differs | at 4"}]}
    assert gpu_check.markdown(report).splitlines()[2:] == [
        "NVIDIA H200, torch 2.13.0 (CUDA 12.8), commit abc1234, 2027-01-02 03:04 UTC: 1 of 2 checks passed in "
        "201 s (`make gpu-check`, specviz.bench.gpu_check).", "",
        "| check | result | seconds | what happened |", "|---|---|---|---|",
        "| CUDA-only tests | pass | 95.0 | 12 of 12 passed |",
        "| greedy = AR: ssd | FAIL | 3.0 | differs / at 4 |"]
