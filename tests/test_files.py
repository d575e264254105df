"""specviz.files: writes that are whole or absent, one writer at a time, a full disk in words."""

import errno
import json
import os
import subprocess
import sys

import pytest

from specviz import files
from specviz.analysis import trace
from specviz.files import DiskFullError, LockTimeoutError


def test_a_failed_write_keeps_the_old_file_and_leaves_nothing(tmp_path):
    path = tmp_path / "report.json"
    files.write_text(path, "old")
    with pytest.raises(RuntimeError, match="writer failed"):
        with files.new_file(path) as tmp:
            tmp.write_text("half of the new")
            raise RuntimeError("writer failed")
    assert path.read_text() == "old" and files.temporaries(path) == []
    files.write_json(path, {"new": 1})
    assert json.loads(path.read_text()) == {"new": 1} and sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]


def test_a_folder_is_replaced_whole_or_not_at_all(tmp_path):
    dest = tmp_path / "model"
    with files.new_folder(dest) as tmp:
        (tmp / "a").write_text("1")
    with pytest.raises(KeyboardInterrupt):  # a Ctrl-C mid-write: the old folder stays as it was
        with files.new_folder(dest) as tmp:
            (tmp / "a").write_text("2")
            raise KeyboardInterrupt
    assert (dest / "a").read_text() == "1"
    with files.new_folder(dest) as tmp:
        (tmp / "b").write_text("3")
    assert sorted(p.name for p in dest.iterdir()) == ["b"] and [p.name for p in tmp_path.iterdir()] == ["model"]


def test_temporaries_are_unique_per_writer(tmp_path):
    names = {files.temporary_name(tmp_path / "x.gguf") for _ in range(100)}
    assert len(names) == 100 and all(n.name.startswith(f".x.gguf.{os.getpid()}-") for n in names)


def test_a_trace_of_a_run_that_fails_midway_is_not_written(tmp_path):
    def events():
        yield {"kind": "run_started"}
        raise RuntimeError("the run failed")

    path = tmp_path / "run.jsonl"
    with pytest.raises(RuntimeError):
        trace.save(events(), path)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("error, full", [
    (OSError(errno.ENOSPC, "No space left on device"), True),
    (RuntimeError("Error while serializing: I/O error: No space left on device (os error 28)"), True),  # safetensors
    (RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534"), False),  # torch.save
    (ValueError("a bug"), False),
])
def test_a_full_disk_is_recognised_in_each_writers_words(tmp_path, monkeypatch, error, full):
    assert files.is_disk_full(error, tmp_path) is full
    # torch.save names no cause: a filesystem left with (almost) no room says it
    monkeypatch.setattr(files, "free_bytes", lambda folder: 4096)
    assert files.is_disk_full(error, tmp_path) is True


def test_a_full_disk_is_one_sentence_and_no_partial_file(tmp_path):
    path = tmp_path / "weights.safetensors"
    with pytest.raises(DiskFullError) as caught:
        with files.new_file(path, "saving the weights") as tmp:
            tmp.write_bytes(b"x" * 10)
            raise OSError(errno.ENOSPC, "No space left on device")
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"No space left on the disk holding {tmp_path} while saving the "
                                                      "weights: ")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(DiskFullError, match=r"for converting x: it needs about 10000\.0 GB free and "):
        files.check_space(tmp_path, 10**13, "converting x")


HOLDER = r'''
import sys
from specviz import files
with files.lock(sys.argv[1], "converting the test model"):
    print("HELD", flush=True)
    sys.stdin.readline()
'''


@pytest.fixture
def holder(tmp_path, monkeypatch):
    """Another process holding the lock of tmp_path/target."""
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path / "cache"))
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path / "target")], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "HELD"
    yield proc
    proc.kill()
    proc.wait()


def test_a_killed_holder_never_leaves_a_stale_lock(tmp_path, holder):
    said = []
    with pytest.raises(LockTimeoutError, match=rf"Another specviz process \(pid {holder.pid}, converting the test "
                                               r"model since \d\d:\d\d:\d\d\) has held .* let it finish, or stop it"):
        with files.lock(tmp_path / "target", "checking", said.append, timeout=0.2):
            pass
    assert said == [f"waiting for another process (pid {holder.pid}, converting the test model since "
                    f"{said[0].split(' since ')[1].split(')')[0]}) to finish; this one reuses its result"]
    holder.kill()  # SIGKILL: no cleanup code runs in the holder
    holder.wait()
    with files.lock(tmp_path / "target", "checking", said.append, timeout=5) as waited:
        assert waited is False  # free at once: the OS released the dead holder's lock
    assert not any(p.suffix == ".lock" for p in tmp_path.iterdir())  # locks live in the cache's locks/
    assert files.lock_file(tmp_path / "target").parent == tmp_path / "cache" / "locks"


def test_a_waiter_is_told_and_proceeds_when_the_holder_finishes(tmp_path, holder):
    said = []
    holder.stdin.write("\n")
    holder.stdin.flush()  # the holder finishes its work and releases
    with files.lock(tmp_path / "target", "checking", said.append, timeout=60):
        pass
    assert holder.wait(timeout=60) == 0
    assert len(said) <= 1 and all(line.startswith("waiting for another process") for line in said)
