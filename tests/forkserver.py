"""Processes of their own, without paying torch's and transformers' imports each time.

`python tests/forkserver.py SOCKET MODULE...` imports the MODULEs once, then forks one process per
request on the Unix socket SOCKET, as a server's workers are forked. A request names a script or a
module to run as `__main__` (runpy), its argv, environment, working folder and stdin, stdout and
stderr (file descriptors sent with the request). Each child is a process of its own: its own pid,
file descriptors and locks; SIGKILL kills it alone; its exit status is reported as subprocess
reports it. What it runs imports its own code afresh (only the preloaded MODULEs are shared).

`ForkServer` starts one for a test module; `ForkServer.start` returns a `Forked` child with the
part of subprocess.Popen's interface the tests use, `ForkServer.run` a CompletedProcess.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path


def serve(path: str, preload: list) -> None:
    """Serve fork requests on `path` until killed. Single-threaded (children are reaped between
    accepts), so every fork happens in a process with one thread."""
    import importlib
    import selectors

    for name in preload:
        importlib.import_module(name)
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
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                _child(json.loads(message), fds, (server, conn))
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
    import runpy

    code = 1
    try:
        for sock in sockets:
            sock.close()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        if "torch" in sys.modules:  # its thread count was read at import: set it from this child's environment
            sys.modules["torch"].set_num_threads(int(os.environ.get("OMP_NUM_THREADS") or os.cpu_count() or 1))
        target = request["target"]
        sys.argv = [target, *request["argv"]]
        if request["kind"] == "module":
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            sys.path.insert(0, str(Path(target).parent))
            runpy.run_path(target, run_name="__main__")
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if not isinstance(exc.code, (int, type(None))):
            print(exc.code, file=sys.stderr)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


class Forked:
    """One child: `stdout`/`stderr` (text pipes), `stdin` (a pipe when asked for, else closed),
    `pid`, `kill()`, `communicate(timeout)`, `returncode` (negative: the signal that killed it)."""

    def __init__(self, path: str, request: dict, stdin: bool = False):
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.connect(path)
        socket.send_fds(self._sock, [json.dumps(request).encode()], [in_r, out_w, err_w])
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
        got = {}
        readers = [threading.Thread(target=lambda name=name: got.__setitem__(name, getattr(self, name).read()),
                                    daemon=True) for name in ("stdout", "stderr")]
        for reader in readers:
            reader.start()
        self._sock.settimeout(timeout)
        try:
            self.returncode = int(self._replies.readline())
        except TimeoutError:
            self.kill()
            raise subprocess.TimeoutExpired(f"forked pid {self.pid}", timeout) from None
        for reader in readers:
            reader.join(timeout)
        for stream in (self.stdin, self.stdout, self.stderr, self._replies, self._sock):
            if stream is not None:
                stream.close()
        return got.get("stdout", ""), got.get("stderr", "")


class ForkServer:
    """A fork server for one test module: `with ForkServer(folder, env, preload) as forks:`.
    `env` is the server's environment (what the preloaded modules read when imported); each
    child's environment is that, updated with what its request adds."""

    def __init__(self, folder: Path, env: dict, preload: list):
        self.path, log = str(folder / "fork.sock"), folder / "forkserver.log"
        self.env = env
        with open(log, "w") as err:
            self._proc = subprocess.Popen([sys.executable, __file__, self.path, *preload], env=env,
                                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err, text=True)
        ready = self._proc.stdout.readline()
        if ready != "READY\n":
            self.close()
            raise RuntimeError(f"the fork server did not start: {log.read_text()[-1500:]}")

    def start(self, target: str, argv: list, env: dict = None, cwd=None, kind: str = "path",
              stdin: bool = False) -> Forked:
        request = {"kind": kind, "target": str(target), "argv": [str(a) for a in argv], "env": env or {},
                   "cwd": str(cwd or os.getcwd())}
        return Forked(self.path, request, stdin=stdin)

    def run(self, target: str, argv: list, env: dict = None, cwd=None, kind: str = "path",
            timeout: float = 120) -> subprocess.CompletedProcess:
        child = self.start(target, argv, env, cwd, kind)
        out, err = child.communicate(timeout)
        return subprocess.CompletedProcess([target, *argv], child.returncode, out, err)

    def close(self) -> None:
        self._proc.kill()
        self._proc.wait(timeout=60)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2:])
