"""The `alone` mark (tests/conftest.py): a test that asserts a time runs with the cores to itself,
the other test worker waiting for it. Checked on a nested two-worker run of this suite's conftest:
the marked test's interval overlaps no other test's; unmarked, it does (so the check can fail)."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("xdist")
pytest.importorskip("fcntl", reason="the lock is POSIX flock; on Windows the workers share the cores")

SIDE = '''
import json, time, pytest

def log(name, seconds):
    began = time.time()
    time.sleep(seconds)  # an interval to compare, not an assertion on time
    with open("intervals.jsonl", "a") as f:
        f.write(json.dumps([name, began, time.time()]) + "\\n")

@pytest.mark.parametrize("i", range(10))
def test_side(i):
    log(f"side{i}", 0.5)
'''
TIMED = '''
import pytest
from test_side import log

def test_before():
    log("before", 0.5)

MARK
def test_timed():
    log("timed", 1.0)
'''


def _overlapping(tmp_path: Path, mark: str) -> list:
    shutil.copy(Path(__file__).with_name("conftest.py"), tmp_path / "conftest.py")
    (tmp_path / "test_side.py").write_text(SIDE)
    (tmp_path / "test_timed.py").write_text(TIMED.replace("MARK", mark))
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    alone: runs alone\n")
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadfile", "-p", "no:cacheprovider",
                          "--basetemp", str(tmp_path / "tmp")], cwd=tmp_path, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    rows = [json.loads(line) for line in (tmp_path / "intervals.jsonl").read_text().splitlines()]
    assert len(rows) == 12
    _, began, ended = next(row for row in rows if row[0] == "timed")
    return [name for name, b, e in rows if name != "timed" and b < ended and e > began]


def test_a_test_marked_alone_shares_the_cores_with_no_other(tmp_path):
    assert _overlapping(tmp_path, "@pytest.mark.alone") == []


def test_unmarked_the_same_test_runs_beside_the_other_worker(tmp_path):
    assert _overlapping(tmp_path, "") != []
