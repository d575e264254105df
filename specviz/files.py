"""Files specviz writes: whole or not at all, and one writer at a time.

Every file specviz writes into its cache or beside its data is written under a unique temporary
name in the destination's folder, then renamed into place with `os.replace` (atomic within one
filesystem, on POSIX and Windows). A reader sees the old file or the new one, never half of one,
and a process killed mid-write leaves only a temporary (`.NAME.PID-HEX.tmp`) that no reader opens.

Work that two processes could both start (converting the real pair's weights, extracting
training features, training heads) runs under a cross-process lock (the `filelock` library:
`flock` on POSIX, `msvcrt.locking` on Windows). The operating system releases such a lock when
its holder dies, SIGKILL included, so a killed process never leaves a stale lock behind. The
process that waited says so in one line, then finds the other's result and reuses it.

A full disk is one sentence (`DiskFullError`), whichever writer hit it: Python's OSError 28,
safetensors' "I/O error: No space left on device (os error 28)", or torch.save's "unexpected
pos" (which names no cause; the filesystem's free space does).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import secrets
import shutil
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Optional

from specviz.errors import SpecvizError, env_number

Say = Callable[[str], None]

# how long a process waits for another one's lock before it gives up with a message: converting
# the real pair takes minutes on a slow laptop, never an hour; SPECVIZ_LOCK_TIMEOUT overrides
LOCK_TIMEOUT_S = 3600.0
# after a failed write, a filesystem with less free space than this was full
FULL_BELOW_BYTES = 1 << 20


class DiskFullError(SpecvizError):
    """A write ran out of disk space; nothing half-written was left in place."""


class LockTimeoutError(SpecvizError):
    """Another process held a lock for longer than LOCK_TIMEOUT_S."""


def temporary_name(path: Path) -> Path:
    """A name beside `path` that no other writer uses: `.NAME.PID-HEX.tmp`."""
    path = Path(path)
    return path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")


def temporaries(path: Path) -> list:
    """The temporaries that writers of `path` left behind (killed before they could rename)."""
    path = Path(path)
    return sorted(path.parent.glob(f".{path.name}.*.tmp")) if path.parent.is_dir() else []


def remove(path: Path) -> None:
    """Delete a file or a folder if it is there."""
    path = Path(path)
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def sweep(path: Path) -> int:
    """Delete the temporaries of `path`. Call it only under `lock(path)` (or where no other
    process writes `path`): a temporary may otherwise belong to a writer still at work."""
    found = temporaries(path)
    for tmp in found:
        remove(tmp)
    return len(found)


@contextmanager
def new_file(path: Path, what: str = "") -> Iterator[Path]:
    """Yield a temporary path to write `path` through (any writer that takes a file name:
    torch.save, safetensors, PIL, Plotly); on success it is synced and renamed into place, on
    failure deleted. A full disk is re-raised as DiskFullError."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_name(path)
    try:
        yield tmp
        _fsync(tmp)
        os.replace(tmp, path)
    except BaseException as exc:
        _failed(exc, tmp, path, what)
        raise


def _failed(exc: BaseException, tmp: Path, path: Path, what: str) -> None:
    """A write into `tmp` failed: the half-written file or folder goes, and a full disk is said
    as one sentence (disk_full) instead of the raw OSError."""
    full = isinstance(exc, Exception) and is_disk_full(exc, path.parent)
    remove(tmp)
    if full:
        raise disk_full(path.parent, what or path.name) from exc


@contextmanager
def new_folder(path: Path, what: str = "") -> Iterator[Path]:
    """Yield a temporary folder to fill; on success it replaces `path` (an old folder there is
    moved aside first, then deleted), on failure it is deleted. Replacing a folder takes two
    renames, so a writer calls this under `lock(path)` and readers check what they find."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_name(path)
    tmp.mkdir()
    try:
        yield tmp
        for file in tmp.rglob("*"):
            if file.is_file():
                _fsync(file)
        old = None
        if path.exists():
            old = temporary_name(path)
            os.replace(path, old)
        os.replace(tmp, path)
        if old is not None:
            remove(old)
    except BaseException as exc:
        _failed(exc, tmp, path, what)
        raise


def write_text(path: Path, text: str, encoding: str = "utf-8") -> Path:
    """`path.write_text(text)`, but whole or not at all."""
    return write_bytes(path, text.encode(encoding))


def write_bytes(path: Path, data: bytes) -> Path:
    with new_file(path) as tmp:
        with open(tmp, "wb") as fh:
            fh.write(data)
    return Path(path)


def write_json(path: Path, data, indent: Optional[int] = 1) -> Path:
    return write_text(path, json.dumps(data, indent=indent, ensure_ascii=False) + "\n")


def read_json_lines(path: Path) -> list:
    """The JSON objects of a file written one a line (blank lines skipped), in order; a missing
    file reads as none (e.g. the worksheet answers of specviz.teaching.worksheet)."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in lines if line.strip()]


def read_partial(path: Path, settings: dict, say: Callable[[str], None]) -> Optional[dict]:
    """A long command's saved progress (`path`, JSON with its "settings"), or None, saying why,
    when there is none to resume: unreadable (a write cut short) or made with other settings."""
    if not Path(path).exists():
        return None
    try:
        saved = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        say(f"{path} cannot be read (a write cut short?): starting over (it will be replaced)")
        return None
    if not isinstance(saved, dict) or saved.get("settings") != settings:
        say(f"{path} was measured with other settings: starting over (it will be replaced)")
        return None
    return saved


def _fsync(path: Path) -> None:
    """Flush a file's data to the disk before it is renamed into place: after a power cut the
    new name then never points at a file whose blocks were not yet written."""
    if os.name == "nt":  # os.replace after close is as far as Windows goes without a handle dance
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------------------------
# a full disk

def is_disk_full(exc: BaseException, folder: Path) -> bool:
    """Whether `exc`, raised while writing into `folder`, was a full disk."""
    seen = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", -1)):
            return True
        if "No space left on device" in str(seen) or "os error 28" in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return free_bytes(folder) < FULL_BELOW_BYTES


def free_bytes(folder: Path) -> int:
    """Free bytes on the filesystem holding `folder` (its nearest existing parent)."""
    folder = Path(folder).absolute()
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return 1 << 62  # cannot tell: assume room, the write itself will say otherwise


def disk_full(folder: Path, what: str) -> DiskFullError:
    return DiskFullError(f"No space left on the disk holding {folder} while {what}: {_gb(free_bytes(folder))} is "
                         "free. Nothing half-written was kept; free some space (or point SPECVIZ_CACHE at a larger "
                         "disk) and start again.")


def check_space(folder: Path, need: int, what: str, instead: str = "") -> None:
    """Refuse before starting work that would fill the disk; `instead`: what else the caller could
    ask for (a smaller job), said after the advice to free space."""
    free = free_bytes(folder)
    if free < need:
        raise DiskFullError(f"Not enough space on the disk holding {folder} for {what}: it needs about {_gb(need)} "
                            f"free and {_gb(free)} is free. Free some space (or point SPECVIZ_CACHE at a larger disk) "
                            "and start again." + (f" Or {instead}." if instead else ""))


def _gb(n: int) -> str:
    return f"{n / 1e9:.1f} GB" if n >= 1e8 else f"{n / 1e6:.1f} MB"


# ---------------------------------------------------------------------------------------------
# one writer at a time

def cache_dir() -> Path:
    """$SPECVIZ_CACHE, else $XDG_CACHE_HOME/specviz, else ~/.cache/specviz."""
    root = os.environ.get("SPECVIZ_CACHE")
    if root:
        path = Path(root).expanduser()
        if path.exists() and not path.is_dir():
            raise SpecvizError(f"$SPECVIZ_CACHE is {root!r}, a file: point it at a folder (made if missing).")
        return path
    xdg = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(xdg) / "specviz"


def train_dir(pair_name: str, root: Optional[Path] = None) -> Path:
    """Where a pair's training data, checkpoints and trained heads live: $SPECVIZ_CACHE/train/<pair>/
    (or `root`). Here rather than in specviz.training.train, so that loading heads needs no training code."""
    return Path(root) if root is not None else cache_dir() / "train" / pair_name


def lock_file(path: Path) -> Path:
    """The lock of `path`: in the cache's locks/ folder rather than beside `path`, so that a
    folder of shipped files (heads in the package) never holds lock files; named after `path`
    and the hash of its absolute form."""
    path = Path(path).absolute()
    folder = cache_dir() / "locks"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{path.name}-{hashlib.sha1(str(path).encode()).hexdigest()[:12]}.lock"


@contextmanager
def lock(path: Path, doing: str, say: Optional[Say] = None, timeout: Optional[float] = None) -> Iterator[bool]:
    """Hold the cross-process lock of `path` (`lock_file(path)`) while `doing`.
    Yields whether this process had to wait for another holder, in which case the caller looks
    for that holder's result before doing the work again. A waiting process says once who it
    waits for."""
    from filelock import FileLock, Timeout

    lock_path = lock_file(path)
    holder = lock_path.with_name(lock_path.name + ".holder")
    file_lock = FileLock(str(lock_path))
    waited = False
    try:
        file_lock.acquire(timeout=0)
    except Timeout:
        waited = True
        limit = timeout if timeout is not None else env_number("SPECVIZ_LOCK_TIMEOUT", LOCK_TIMEOUT_S, float, low=0)
        if say is not None:
            say(f"waiting for another process ({_holder_text(holder)}) to finish; this one reuses its result")
        try:
            file_lock.acquire(timeout=limit)
        except Timeout:
            raise LockTimeoutError(
                f"Another specviz process ({_holder_text(holder)}) has held {lock_path} for over "
                f"{limit / 60:.0f} min. A lock is released when its process ends, so that process is still "
                "running: let it finish, or stop it, then start again.") from None
    try:
        try:
            write_json(holder, {"pid": os.getpid(), "doing": doing, "since": time.time()}, indent=None)
        except OSError:  # who holds it is a courtesy to waiters, not a reason to fail
            pass
        yield waited
    finally:
        file_lock.release()


def _holder_text(holder: Path) -> str:
    try:
        info = json.loads(holder.read_text())
        since = time.strftime("%H:%M:%S", time.localtime(info["since"]))
        return f"pid {info['pid']}, {info['doing']} since {since}"
    except (OSError, ValueError, KeyError, TypeError):
        return "its description not yet written"


def sha256_of(path: Path) -> str:
    """The sha256 of a file, read in 16 MiB blocks (the packaged weights, the trained heads)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 24), b""):
            h.update(chunk)
    return h.hexdigest()
