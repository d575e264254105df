"""The morning of the class, on one machine: `python -m specviz.bench.classroom`.

Everything a class starts at once, started at the same moment on an empty cache (a folder of its
own, unless --cache names one): the app (which loads the pair behind its page), a notebook kernel
and the CLI each load the pair, so all three reach the pair's conversion together; once the app's
pair is up, one visitor starts a live run and, while it computes, 30 others ask for recorded
presets at the same moment. Then it checks that nothing was lost or crossed:

- every process ends well, and each model of the pair was converted exactly once, the other
  processes saying they reused that result (on an empty cache);
- the live run, the CLI and the notebook each decoded a prompt of their own greedily, and each
  text is token for token its own autoregressive reference (run afterwards by the same process
  kind on the same weights): lossless, and no output went to another's request;
- every visitor got the preset it asked for, the same answer as every other visitor asking for it.

The CLI and the notebook load the pair in the 8 GB mode (--memory low, int8) beside the app's full
weights, as students' laptops would, and so that the three fit in one machine's memory together.
It writes a JSON report (--out) and prints one line per phase. Exit status 1 if any check failed.
"""

from __future__ import annotations

import argparse
import html
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import specviz.errors
from specviz import files

# a prompt of its own for each of the three that decode, so an answer delivered to the wrong
# request is a text that does not continue its prompt's reference
PROMPTS = {"app": "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
           "cli": "def is_prime(n: int) -> bool:\n",
           "notebook": "def flatten(nested):\n    \"\"\"Flatten a list of lists.\"\"\"\n"}
CONVERTED = "de-quantising the GGUF"  # the line convert_packaged says once per model it converts
REUSED = "another process converted it while this one waited; using its result"
CHIP = re.compile(r'class="sv-chip sv-(accepted|residual|bonus|target)"[^>]*data-text="([^"]*)"')


def say(message: str) -> None:
    print(f"[classroom {time.strftime('%H:%M:%S')}] {message}", flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def shown_text(markup: str) -> str:
    """The text a visitor sees committed in the step view (its chips, in order)."""
    return "".join(html.unescape(text) for _, text in CHIP.findall(markup))


def notebook_source(pair: str, memory: str, prompt: str, max_new_tokens: int) -> str:
    return f"""import json, specviz
pair = specviz.load_pair({pair!r}, memory={memory!r})
def decode(method):
    events = list(specviz.generate(pair, {prompt!r}, method=method, k=4, temperature=0.0,
                                   max_new_tokens={max_new_tokens}, record_topk=0))
    return events[-1].text
print("RESULT " + json.dumps({{"spec": decode("spec"), "ar": decode("ar")}}))"""


def run_notebook(source: str, env: dict, log: Path) -> dict:
    """Execute a one-cell notebook in a real kernel (nbclient), as a student's Jupyter would."""
    import nbformat
    from jupyter_client import KernelManager
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook()
    nb.cells.append(nbformat.v4.new_code_cell(source))
    km = KernelManager(kernel_name="python3", transport="ipc", connection_file=str(log.with_suffix(".kernel.json")))
    saved = dict(os.environ)
    os.environ.update(env)  # the kernel process inherits this environment
    try:
        NotebookClient(nb, km=km, timeout=3600, kernel_name="python3").execute()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    streams = "".join(out.get("text", "") for out in nb.cells[0].outputs if out.get("output_type") == "stream")
    log.write_text(streams, encoding="utf-8")
    line = next(line for line in streams.splitlines() if line.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def cli(pair: str, memory: str, method: str, prompt: str, max_new_tokens: int, env: dict, log: Path) -> str:
    """One `python -m specviz generate --jsonl`; the run's text."""
    argv = [sys.executable, "-m", "specviz", "generate", "--pair", pair, "--memory", memory, "--method", method,
            "--k", "4", "--temperature", "0", "--max-new-tokens", str(max_new_tokens), "--prompt", prompt,
            "--jsonl", "--record-topk", "0"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=3600)
    with open(log, "a", encoding="utf-8") as fh:
        fh.write(done.stderr)
    if done.returncode != 0:
        raise RuntimeError(f"the CLI ({method}) exited {done.returncode}: {done.stderr.strip().splitlines()[-1:]}")
    last = json.loads(done.stdout.strip().splitlines()[-1])
    assert last["kind"] == "run_finished", last
    return last["text"]


def wait_for_page(url: str, app: subprocess.Popen, seconds: float) -> None:
    import httpx

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if app.poll() is not None:
            raise RuntimeError(f"the app exited {app.returncode} before its page was up")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)  # polling a server that is starting
    raise RuntimeError(f"the app's page was not up within {seconds:.0f} s")


def live_run(url: str, pair: str, method: str, max_new_tokens: int, on_first_step=None) -> str:
    """A visitor's live run through the app's API; the committed text its step view shows."""
    from gradio_client import Client

    client = Client(url, verbose=False)
    try:
        job = client.submit(prompt=PROMPTS["app"], pair_name=pair, method=method, k=4, temperature=0.0, top_p=1.0,
                            max_new_tokens=max_new_tokens, seed=0, chat=False, api_name="/run")
        if on_first_step is not None:
            while not job.outputs() and not job.done():
                time.sleep(0.05)  # waiting for the first step (the pair loads first)
            on_first_step(job)
        final = job.result(timeout=3600)
    finally:
        client.close()
    return shown_text(final[0])


def crowd(url: str, n: int) -> list:
    """n visitors, each with a session of its own and the page's list of presets, ask for a preset
    at the same moment: (label asked, seconds waited, answer) each."""
    from gradio_client import Client

    clients = [Client(url, verbose=False) for _ in range(n)]
    labels = clients[0].predict(api_name="/presets")
    start = threading.Barrier(n)

    def visit(i: int):
        label = labels[i % len(labels)]
        start.wait()
        began = time.perf_counter()
        answer = clients[i].predict(label, api_name="/preset")
        return label, time.perf_counter() - began, answer

    try:
        with ThreadPoolExecutor(n) as pool:
            return list(pool.map(visit, range(n)))
    finally:
        with ThreadPoolExecutor(n) as pool:
            list(pool.map(lambda client: client.close(), clients))


def count(logs: dict, text: str) -> dict:
    return {who: sum(text in line for line in log.read_text(encoding="utf-8").splitlines())
            for who, log in logs.items() if log.exists()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specviz.bench.classroom", description=__doc__.split("\n\n")[0])
    parser.add_argument("--pair", default="qwen-coder")
    parser.add_argument("--cache", default=None, help="the cache to start from (default: a new, empty folder)")
    parser.add_argument("--visitors", type=int, default=30)
    parser.add_argument("--max-new-tokens", type=int, default=96, help="the live run's length: long enough "
                        "to be still computing when the visitors ask")
    parser.add_argument("--memory", default="low", help="the CLI's and the notebook's memory mode (default low)")
    parser.add_argument("--out", default=None, help="where to write the JSON report")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="specviz-classroom-"))
    return specviz.errors.run_command(lambda: _run(args, work),
                                      f"interrupted; the app was stopped and the logs are in {work}")


def _run(args, work: Path) -> int:
    cache = Path(args.cache) if args.cache else work / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    empty = not any(cache.iterdir())
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    env = {**os.environ, "SPECVIZ_CACHE": str(cache), "SPECVIZ_NO_HF_CACHE": "1", "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False", "TQDM_DISABLE": "1",
           "OMP_NUM_THREADS": str(max(1, cores // 3))}  # three processes decode at once: a share each
    logs = {who: work / f"{who}.log" for who in ("app", "cli", "notebook")}
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    report = {"pair": args.pair, "empty_cache": empty, "visitors": args.visitors, "cores": cores,
              "machine": platform.processor() or platform.machine(), "python": platform.python_version(),
              "date": time.strftime("%Y-%m-%d"), "checks": {}}
    checks = report["checks"]
    say(f"cache {cache} ({'empty' if empty else 'not empty'}); logs in {work}")

    t0 = time.perf_counter()
    app_log = open(logs["app"], "w", encoding="utf-8")
    app = subprocess.Popen([sys.executable, "-m", "specviz", "app", "--pair", args.pair, "--port", str(port)],
                           env=env, stdout=app_log, stderr=subprocess.STDOUT)
    results: dict = {}
    errors: dict = {}
    times: dict = {}

    def side(who, work_fn):
        began = time.perf_counter()
        try:
            results[who] = work_fn()
        except Exception as exc:  # reported as a failed check, with the process's log
            errors[who] = f"{type(exc).__name__}: {exc}"
        times[who] = time.perf_counter() - began

    cli_prompt, nb_prompt = PROMPTS["cli"], PROMPTS["notebook"]
    threads = [threading.Thread(target=side, args=("cli", lambda: cli(args.pair, args.memory, "spec", cli_prompt,
                                                                      args.max_new_tokens, env, logs["cli"]))),
               threading.Thread(target=side, args=("notebook", lambda: run_notebook(
                   notebook_source(args.pair, args.memory, nb_prompt, args.max_new_tokens), env, logs["notebook"])))]
    for thread in threads:
        thread.start()
    say("started at once: the app, the CLI and a notebook kernel, each loading the pair")
    served: dict = {}
    live_text = live_ar = cli_ar = None
    try:
        wait_for_page(url, app, 600)
        report["page_up_s"] = round(time.perf_counter() - t0, 1)
        say(f"the app's page is up after {report['page_up_s']} s; a visitor starts a live run")

        def serve_crowd(job):
            served["first_step_s"] = round(time.perf_counter() - t0, 1)
            say(f"the live run's first step after {served['first_step_s']} s; {args.visitors} visitors ask for presets")
            served["answers"] = crowd(url, args.visitors)
            served["live_still_computing"] = not job.done()

        live_text = live_run(url, args.pair, "spec", args.max_new_tokens, serve_crowd)
        say("the live run ended; waiting for the CLI and the notebook")
        for thread in threads:
            thread.join()
        say("references: autoregressive runs of the same prompts, one at a time")
        live_ar = live_run(url, args.pair, "ar", args.max_new_tokens)
        cli_ar = cli(args.pair, args.memory, "ar", cli_prompt, args.max_new_tokens, env, logs["cli"])
    except Exception as exc:  # the app's side failed: reported with its log, after the others end
        errors["app"] = f"{type(exc).__name__}: {exc}"
        for thread in threads:
            thread.join()
    finally:
        app.terminate()
        try:
            app.wait(30)
        except subprocess.TimeoutExpired:
            app.kill()
        app_log.close()

    answers = served.get("answers", [])
    waits = sorted(wait for _, wait, _ in answers)
    first = {}
    for label, _, answer in answers:
        first.setdefault(label, answer)
    checks["the app, the cli and the notebook ended well"] = not errors
    checks["live run == its autoregressive reference"] = bool(live_text) and live_text == live_ar
    checks["cli spec == cli ar"] = "cli" in results and results["cli"] == cli_ar
    checks["notebook spec == notebook ar"] = "notebook" in results and results["notebook"]["spec"] == results["notebook"]["ar"]
    checks["every visitor answered"] = len(answers) == args.visitors
    checks["every visitor got the preset it asked for"] = all(answer["label"] == label and answer == first[label]
                                                              for label, _, answer in answers)
    checks["the live run was still computing while the visitors were served"] = served.get("live_still_computing", False)
    converted, reused = count(logs, CONVERTED), count(logs, REUSED)
    report["conversions"], report["reused"] = converted, reused
    if empty and args.pair == "qwen-coder":
        checks["each model converted exactly once"] = sum(converted.values()) == 2
    report.update(errors=errors, seconds={who: round(s, 1) for who, s in times.items()},
                  first_step_s=served.get("first_step_s"), wait_slowest_s=round(waits[-1], 2) if waits else None,
                  wait_median_s=round(waits[len(waits) // 2], 2) if waits else None,
                  texts={"app": live_text, "cli": results.get("cli"), "notebook": (results.get("notebook") or {}).get("spec")})
    for name, ok in checks.items():
        say(f"{'ok  ' if ok else 'FAIL'} {name}")
    say(f"conversions by process: {converted}; reused another's: {reused}")
    if waits:
        say(f"{len(waits)} preset answers: slowest {waits[-1]:.2f} s, median {waits[len(waits) // 2]:.2f} s")
    for who, error in errors.items():
        say(f"{who}: {error} (log: {logs[who]})")
    if args.out:
        files.write_json(Path(args.out), report)
        say(f"report written to {args.out}")
    if all(checks.values()):  # else its logs stay, named above
        shutil.rmtree(work, ignore_errors=True)
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
