"""llama.cpp's own program on the pair's GGUF files: llama-server, started and stopped here.

Its greedy decoding without a draft is llama.cpp's own AR; with `--model-draft` it runs its own
speculative decoding (draft-simple, up to `draft_max` tokens a step), and `/completion` answers
with its tok/s and its drafted and accepted counts (`timings.draft_n`, `draft_n_accepted`), and
`/metrics` with the Prometheus counters that `python -m specviz watch` reads. The server listens
on 127.0.0.1 on a free port and is stopped when the `with` block ends.
"""

from __future__ import annotations

import atexit
import json
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from typing import Optional

from specviz.errors import InputError, PairError
from specviz.runtime.packaged import gguf_file
from specviz.runtime.llamacpp import runner as llamacpp
from specviz.runtime.pair import QWEN_DRAFT, QWEN_TARGET

START_TIMEOUT_S = 120.0
NGRAM_TYPES = ("ngram-mod", "ngram-simple")  # llama-server's --spec-type lookup drafters specviz starts
SPECVIZ_DRAFTERS = ("eagle3", "dflash")  # specviz's drafters exported to GGUF (llamacpp.drafter): draft-<name>


def missing() -> Optional[str]:
    """None when llama-server can run here, else why not."""
    if llamacpp.server_binary() is None:
        return f"llama-server is not built: run {llamacpp.INSTALL_HINT}"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """llama-server on the pair's GGUF files (`gguf` as in load_pair(..., backend="llama.cpp", gguf=...))."""

    def __init__(self, gguf: str = "q4_k_m", draft_max: Optional[int] = None, threads: Optional[int] = None,
                 n_ctx: int = llamacpp.N_CTX, metrics: bool = True, drafter: Optional[str] = None,
                 draft_model=None, p_min: Optional[float] = None, port: Optional[int] = None):
        """draft_max: tokens drafted a step (None: no drafting, llama.cpp's greedy). drafter:
        "draft-model" (the default with draft_max: the pair's 0.5B, draft-simple), "eagle3" or "dflash"
        (specviz's EAGLE-3 or DFlash exported to GGUF, draft-eagle3 / draft-dflash; `draft_model`: that file, from
        specviz.runtime.llamacpp.drafter.drafter_gguf), or one of NGRAM_TYPES (llama.cpp's lookup drafters, with its own
        settings: draft_max only switches them on). p_min: llama.cpp's confidence cut of a draft
        model's tokens (None: its default)."""
        why = missing()
        if why:
            raise PairError(why + ".")
        key = llamacpp.check_gguf_type(gguf)
        quiet = lambda _f, _m: None  # noqa: E731
        target = gguf_file(QWEN_TARGET, key, quiet)
        threads = threads or llamacpp.default_threads()
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.draft_max = draft_max
        self.args = [str(llamacpp.server_binary()), "--model", str(target), "--host", "127.0.0.1",
                     "--port", str(self.port), "--threads", str(threads), "--threads-batch", str(threads),
                     "--ctx-size", str(n_ctx), "--parallel", "1", "--no-webui",
                     "-lv", "1"]  # its log: errors and warnings, not a line per request for a long-lived server
        if metrics:
            self.args.append("--metrics")
        if draft_max:
            if drafter in (None, "draft-model"):
                spec, draft = "draft-simple", gguf_file(QWEN_DRAFT, key, quiet)
            elif drafter in SPECVIZ_DRAFTERS:
                if draft_model is None:
                    raise InputError(f"draft-{drafter} needs the drafter's GGUF (draft_model=): "
                                     f"python -m specviz llamacpp drafter {drafter} writes it.")
                spec, draft = f"draft-{drafter}", draft_model
            elif drafter in NGRAM_TYPES:  # llama.cpp's own lookup drafters: no draft model
                spec, draft = drafter, None
            else:
                raise InputError(f"llama-server drafts with the draft model, {', '.join(SPECVIZ_DRAFTERS)} or "
                                 f"{', '.join(NGRAM_TYPES)}, not {drafter!r}.")
            self.args += ["--spec-type", spec]
            if draft is not None:  # a lookup drafter keeps llama.cpp's own settings (its n-gram lengths, its n-max)
                self.args += ["--model-draft", str(draft), "--spec-draft-n-max", str(draft_max), "--spec-draft-n-min",
                              "0", "--threads-draft", str(threads), "--threads-batch-draft", str(threads)]
            if p_min is not None:
                self.args += ["--spec-draft-p-min", f"{p_min:g}"]
        self.proc: Optional[subprocess.Popen] = None
        self.log = tempfile.TemporaryFile()  # its log: read back only if it fails to start (a pipe could fill and stall it)

    def __enter__(self) -> "Server":
        self.proc = subprocess.Popen(self.args, stdout=subprocess.DEVNULL, stderr=self.log)
        deadline = time.time() + START_TIMEOUT_S
        while time.time() < deadline:
            if self.proc.poll() is not None:
                self.log.seek(0)
                tail = self.log.read().decode(errors="replace").strip().splitlines()[-5:]
                raise PairError(f"llama-server stopped while starting (exit {self.proc.returncode}): "
                                + " | ".join(tail))
            try:
                if json.loads(_get(self.url + "/health", 2.0)).get("status") == "ok":
                    return self
            except (OSError, ValueError):
                pass
            time.sleep(0.2)
        self.__exit__()
        raise PairError(f"llama-server did not answer on {self.url} within {START_TIMEOUT_S:.0f} s.")

    def __exit__(self, *exc) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()

    def complete(self, prompt, n_predict: int, temperature: float = 0.0, top_p: float = 1.0, seed: int = 0,
                 ignore_eos: bool = False) -> dict:
        """`n_predict` tokens after `prompt` (a text, or token ids), greedy at temperature 0, else
        sampled by llama.cpp's own sampler (no top-k, `top_p`, `seed`): the token ids, decoding
        tok/s and the draft counts of this request; `ignore_eos` runs to `n_predict` (llama-server's
        own option of that name), as a race's sampled lanes do. (This llama-server takes its draft length
        from its command line only: a request's `speculative.n_max` changed nothing, measured.)"""
        body = {"prompt": prompt, "n_predict": n_predict, "temperature": temperature, "top_k": 1 if temperature <= 0 else 0,
                "top_p": top_p, "min_p": 0.0, "seed": seed, "cache_prompt": False, "return_tokens": True,
                "ignore_eos": bool(ignore_eos)}
        reply = json.loads(_post(self.url + "/completion", body, 600.0))
        timings = reply.get("timings", {})
        return {"token_ids": list(reply.get("tokens", [])), "text": reply.get("content", ""),
                "tokens_per_s": timings.get("predicted_per_second"), "predicted_n": timings.get("predicted_n"),
                "draft_n": timings.get("draft_n", 0), "draft_accepted": timings.get("draft_n_accepted", 0)}

    def metrics_text(self) -> str:
        return _get(self.url + "/metrics", 10.0)


def _get(url: str, timeout: float) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as reply:
        return reply.read().decode()


def _post(url: str, body: dict, timeout: float) -> str:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            return reply.read().decode()
    except urllib.error.HTTPError as exc:
        raise PairError(f"llama-server refused the request ({exc.code}): {exc.read().decode(errors='replace')[:200]}")


_SHARED: dict = {}
_SHARED_LOCK = threading.Lock()


def shared(gguf: str = "q4_k_m", draft_max: Optional[int] = None) -> Server:
    """One llama-server per (GGUF type, draft length) for this process (the app's race; None:
    no draft, llama.cpp's own AR), started on first use and stopped when the process exits."""
    key = (llamacpp.check_gguf_type(gguf), draft_max or None)
    with _SHARED_LOCK:
        server = _SHARED.get(key)
        if server is None or server.proc is None or server.proc.poll() is not None:
            server = Server(gguf=key[0], draft_max=key[1]).__enter__()
            atexit.register(server.__exit__)
            _SHARED[key] = server
        return server
