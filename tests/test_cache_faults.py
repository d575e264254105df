"""The packaged-weights cache under faults: processes racing on an empty cache, conversions killed
at each stage, truncated and corrupted files, a full disk. Each case runs real processes
(tests/cache_child.py) through specviz's own assembly, lock, de-quantisation and record, on a
tiny real GGUF split into parts (tests/tiny_gguf.py), then checks what a normal start finds.
The processes are forked from one that imported torch and transformers once (tests/forkserver.py):
each is still a process of its own, without paying those imports two dozen times.
"""

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
import tiny_gguf
from forkserver import ForkServer

from specviz import files
from specviz.runtime import packaged
from specviz.runtime.pair import PackagedModel

CHILD = Path(__file__).parent / "cache_child.py"
KEY = "tiny-gguf"  # PackagedModel("specviz-test/tiny-gguf", ...).key
TIMEOUT = 120
_FORKS = {}  # "server": the module's ForkServer


@pytest.fixture(scope="module")
def parts_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny-gguf-parts")
    info = tiny_gguf.write(folder / "whole.gguf")
    info["parts"] = tiny_gguf.split(folder / "whole.gguf", folder, parts=3)
    (folder / "whole.gguf").unlink()
    (folder / "spec.json").write_text(json.dumps(info))
    return folder


def _env(cache: Path) -> dict:
    return {**os.environ, "SPECVIZ_CACHE": str(cache), "SPECVIZ_NO_HF_CACHE": "1", "HF_HUB_OFFLINE": "1",
            "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).parent)}


@pytest.fixture(scope="module", autouse=True)
def forks(tmp_path_factory):
    folder = tmp_path_factory.mktemp("forkserver")
    preload = ["torch", "transformers.modeling_utils", "tiny_gguf", "specviz.runtime.models"]
    with ForkServer(folder, _env(folder / "unused"), preload) as server:
        _FORKS["server"] = server
        yield
    _FORKS.clear()


def _start(parts_dir, cache, *flags, stdin=None):
    return _FORKS["server"].start(CHILD, [parts_dir, *flags], {"SPECVIZ_CACHE": str(cache)},
                                  stdin=stdin is not None)


def _run(parts_dir, cache, *flags) -> dict:
    return _finish(_start(parts_dir, cache, *flags))


def _finish(proc) -> dict:
    out, err = proc.communicate(timeout=TIMEOUT)
    return _parse(proc.returncode, out, err)


def _parse(code, out, err) -> dict:
    lines = out.splitlines()
    result = [json.loads(line[7:]) for line in lines if line.startswith("RESULT ")]
    return {"code": code, "says": [line[4:] for line in lines if line.startswith("SAY ")],
            "errors": [line[6:] for line in lines if line.startswith("ERROR ")],
            "result": result[0] if result else None, "stderr": err}


def _said(run, text) -> int:
    return sum(text in line for line in run["says"])


def _leftovers(cache: Path) -> list:
    """Temporaries and locks' scraps that a finished start should not leave: partial files
    and folders of killed writers."""
    return [p.name for p in cache.rglob(".*.tmp")]


@pytest.fixture(scope="module")
def reference(parts_dir, tmp_path_factory):
    """One clean start on an empty cache: what every other start must load."""
    run = _run(parts_dir, tmp_path_factory.mktemp("clean-cache"))
    assert run["code"] == 0, (run["errors"], run["stderr"][-2000:])
    assert _said(run, "de-quantising") == 1 and _said(run, "waiting") == 0
    return run["result"]["logits"]


def test_a_conversion_loads_the_ggufs_own_weights(parts_dir, reference, tmp_path):
    """The cached bf16 safetensors hold the GGUF's de-quantised weights: the logits of the model
    transformers builds straight from the GGUF (bf16, as the cache stores it) are the same."""
    import torch
    from transformers import AutoModelForCausalLM

    whole = tmp_path / "whole.gguf"
    whole.write_bytes(b"".join(Path(p).read_bytes() for p, _ in json.loads((parts_dir / "spec.json").read_text())["parts"]))
    direct = AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file=whole.name, dtype=torch.bfloat16).to(torch.float32)
    assert tiny_gguf.logits_of(direct) == reference


@pytest.mark.parametrize("n", [2, 4])
def test_processes_starting_together_on_an_empty_cache(parts_dir, reference, tmp_path, n):
    """n processes reach the empty cache at the same moment: one converts, the others wait for it
    and load its result; nobody fails, nothing is converted twice, nothing is left behind."""
    cache, barrier = tmp_path / "cache", tmp_path / "barrier"
    barrier.mkdir()
    procs = [_start(parts_dir, cache, "--barrier", str(barrier)) for _ in range(n)]
    deadline = time.time() + TIMEOUT
    while len(list(barrier.glob("ready-*"))) < n and time.time() < deadline:
        time.sleep(0.01)
    (barrier / "go").touch()
    runs = [_finish(p) for p in procs]
    assert [r["code"] for r in runs] == [0] * n, [r["stderr"][-1500:] for r in runs]
    assert all(r["result"]["logits"] == reference for r in runs)
    assert sum(_said(r, "de-quantising") for r in runs) == 1
    waiters = [r for r in runs if _said(r, "waiting for another process")]
    assert waiters, "no process waited: the starts did not overlap"
    for r in waiters:
        assert _said(r, "another process converted it while this one waited; using its result") == 1
    assert _leftovers(cache) == [] and not (cache / "gguf" / f"{KEY}.gguf").exists()


def test_a_waiter_takes_over_when_the_converter_is_killed(parts_dir, reference, tmp_path):
    """The converting process dies (SIGKILL) while another waits on its lock: the OS frees the
    lock, and the waiter converts on its own, sweeping the dead one's partial files."""
    cache = tmp_path / "cache"
    first = _start(parts_dir, cache, "--hold-at", "de-quantising", stdin=subprocess.PIPE)
    assert "HELD" in _read_until(first, "HELD")
    second = _start(parts_dir, cache)
    _read_until(second, "waiting for another process")
    first.kill()
    first.communicate(timeout=TIMEOUT)
    run = _finish(second)
    assert run["code"] == 0 and run["result"]["logits"] == reference, run["stderr"][-1500:]
    assert _said(run, "stopped before it finished; converting it here") == 1
    assert _leftovers(cache) == []


def _read_until(proc, text: str) -> str:
    seen = ""
    for line in proc.stdout:
        seen += line
        if text in line:
            return seen
    raise AssertionError(f"the process ended before printing {text!r}: {seen[-500:]} {proc.stderr.read()[-1500:]}")


KILL_POINTS = {
    "mid-assembly": ["--kill-at", "assembling part 2"],
    "after assembly": ["--kill-at", "de-quantising"],
    "inside the safetensors writer": ["--kill-in-save"],
    "before the record": ["--kill-at", "recording what the converted files came from"],
}


@pytest.mark.parametrize("point", KILL_POINTS)
def test_a_killed_conversion_never_poisons_the_cache(parts_dir, reference, tmp_path, point):
    cache = tmp_path / "cache"
    killed = _run(parts_dir, cache, *KILL_POINTS[point])
    assert killed["code"] == -9 and killed["result"] is None
    assert packaged.converted_problem(_spec(parts_dir), cache / "models" / KEY) == packaged.NOT_CONVERTED
    again = _run(parts_dir, cache)
    assert again["code"] == 0 and again["result"]["logits"] == reference, again["stderr"][-1500:]
    assert _said(again, "de-quantising") == 1 and _leftovers(cache) == []
    assert packaged.converted_problem(_spec(parts_dir), cache / "models" / KEY) is None


def _spec(parts_dir) -> PackagedModel:
    info = json.loads((parts_dir / "spec.json").read_text())
    return PackagedModel("specviz-test/tiny-gguf", "specviz-test-part{n}", len(info["parts"]),
                                info["size"], info["sha256"], info["params"])


@pytest.fixture
def converted(parts_dir, reference, tmp_path):
    cache = tmp_path / "cache"
    assert _run(parts_dir, cache)["code"] == 0
    return cache, cache / "models" / KEY / "model.safetensors"


def test_a_truncated_file_is_found_and_converted_again(parts_dir, reference, converted):
    cache, weights = converted
    size = weights.stat().st_size
    with open(weights, "r+b") as fh:
        fh.truncate(size // 2)
    run = _run(parts_dir, cache)
    assert run["code"] == 0 and run["result"]["logits"] == reference
    assert _said(run, f"cannot be used (model.safetensors is {size // 2:,} bytes where {size:,} were written "
                      "(truncated or overwritten)); converting them again") == 1


def test_a_corrupted_file_is_found_and_converted_again(parts_dir, reference, converted):
    cache, weights = converted
    with open(weights, "r+b") as fh:
        fh.seek(weights.stat().st_size // 2)
        fh.write(os.urandom(256))
    run = _run(parts_dir, cache)
    assert run["code"] == 0 and run["result"]["logits"] == reference
    assert _said(run, "model.safetensors does not match the sha256 recorded when it was written (corrupted)") == 1


def test_a_copied_cache_is_hashed_once_then_trusted(parts_dir, reference, converted):
    """Copying a cache (a teacher's USB stick) changes modification times, not contents: the
    first load hashes and keeps the files, and notes the new times so later loads need not."""
    cache, weights = converted
    os.utime(weights, ns=(1_000_000_000, 1_000_000_000))
    run = _run(parts_dir, cache)
    assert run["code"] == 0 and run["result"]["logits"] == reference and _said(run, "de-quantising") == 0
    record = json.loads((weights.parent / packaged.CONVERTED_RECORD).read_text())
    assert record["files"]["model.safetensors"]["mtime_ns"] == 1_000_000_000


def test_a_cache_without_a_record_is_converted_again(parts_dir, reference, converted):
    cache, weights = converted
    (weights.parent / packaged.CONVERTED_RECORD).unlink()
    run = _run(parts_dir, cache)
    assert run["code"] == 0 and run["result"]["logits"] == reference
    assert _said(run, "no record of what it was converted from") == 1 and _said(run, "de-quantising") == 1


def test_a_corrupt_kept_gguf_is_assembled_again(parts_dir, reference, tmp_path):
    cache = tmp_path / "cache"
    (cache / "gguf").mkdir(parents=True)
    (cache / "gguf" / f"{KEY}.gguf").write_bytes(b"GGUF" + os.urandom(1000))
    run = _run(parts_dir, cache)
    assert run["code"] == 0 and run["result"]["logits"] == reference
    assert _said(run, "does not match its published sha256; assembling it again") == 1


def test_a_full_disk_while_saving_is_one_sentence(parts_dir, reference, tmp_path):
    """The writer raises ENOSPC: one sentence, no traceback, no partial folder; the next start
    (with room again) converts and loads."""
    cache = tmp_path / "cache"
    run = _run(parts_dir, cache, "--enospc")
    assert run["code"] == 3 and "Traceback" not in run["stderr"]
    [message] = run["errors"]
    assert message.startswith(f"No space left on the disk holding {cache / 'models'} while saving the converted {KEY}: ")
    assert message.endswith("Nothing half-written was kept; free some space (or point SPECVIZ_CACHE at a larger disk) "
                            "and start again.")
    assert _leftovers(cache) == [] and not (cache / "models" / KEY).exists()
    again = _run(parts_dir, cache)
    assert again["code"] == 0 and again["result"]["logits"] == reference


@pytest.fixture
def small_disk(tmp_path):
    """A real filesystem of 80 MiB (tmpfs), where the machine lets this process mount one."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=80m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({done.stderr.decode().strip() or 'not root'}): the ENOSPC "
                    "test above covers the same path with an injected error")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_disk_that_fills_during_conversion(parts_dir, reference, small_disk):
    """A real full disk: other files fill it while the GGUF is de-quantised, so the safetensors
    writer itself fails (its own 'os error 28'); the message, the cleanup and the next start."""
    cache = small_disk / "cache"
    run = _run(parts_dir, cache, "--fill-at", "saving safetensors")
    assert run["code"] == 3 and "Traceback" not in run["stderr"], run["stderr"][-1500:]
    [message] = run["errors"]
    assert message.startswith(f"No space left on the disk holding {cache / 'models'} while saving the converted")
    assert _leftovers(cache) == []
    (cache / "filler").unlink()
    again = _run(parts_dir, cache)
    assert again["code"] == 0 and again["result"]["logits"] == reference


def test_a_disk_too_small_is_refused_before_any_work(parts_dir, small_disk):
    """Less room than the conversion needs (GGUF + bf16 weights + spare): refused up front."""
    cache = small_disk / "cache"
    cache.mkdir()
    with open(cache / "filler", "wb") as fh:
        fh.write(b"\0" * (files.free_bytes(cache) - (32 << 20)))
    run = _run(parts_dir, cache)
    assert run["code"] == 3 and run["says"] == []
    [message] = run["errors"]
    spec = _spec(parts_dir)
    need = spec.size + 2 * spec.params + packaged.CONVERT_SPARE_BYTES
    assert message.startswith(f"Not enough space on the disk holding {cache / 'models'} for converting {KEY}: "
                              f"it needs about {need / 1e6:.1f} MB free and ")
    assert not (cache / "gguf").exists() or not any((cache / "gguf").iterdir())
