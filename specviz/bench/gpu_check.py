"""The GPU check: every path only a CUDA device runs, in one command, first whenever a GPU is at hand.

The test suite on a CPU skips every CUDA path, so those paths can break unseen. `make gpu-check`
(`python -m specviz.bench.gpu_check`) runs, on one CUDA device:

  tests    every CUDA-only test of the suite (CUDA_TESTS; tests/test_gpu_check.py fails when a
           test that skips without CUDA is missing here); on a GPU a skip counts as a failure;
  greedy   greedy decoding equals AR token for token for ssd, dflash-tree and eagle3-tree (and
           AR itself) with CUDA graphs, on a prompt that fills the graphs' static cache: the run's
           last pass reaches the cache's end, and SSD's preparation meets its guard (a level that
           would overflow the draft's cache is not run).

The greedy checks run the tiny pair (float32): they check code paths, not speed, and it needs no
weights on the machine; its EAGLE-3 and DFlash heads are trained in seconds on its own
generations, as the tests train them. The whole check is sized to finish in well under 8 minutes
on one H100 or H200. The report (the GPU, torch and CUDA versions, the commit, each check with
its result and time) goes to docs/benchmarks/gpu-check.json and .md; the exit status is 1 when
a check failed. Without a CUDA device it refuses in one line.

Usage: python -m specviz.bench.gpu_check [--out docs/benchmarks/gpu-check]
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from specviz import files
from specviz.argparsing import Parser
from specviz.errors import InputError, run_command

ROOT = Path(__file__).resolve().parents[2]  # the checkout: its tests/ are run from here
CUDA_TESTS = ("tests/test_cuda_graphs.py",
              "tests/test_ssd.py::test_on_cuda_the_preparation_runs_on_a_second_stream_and_stays_exact")
TESTS_TIMEOUT = 300  # seconds for the CUDA tests together
GRAPH_LEN = 384  # tokens the greedy checks' static caches hold; each check's prompt fills it
NEW_TOKENS = 48
DFLASH_BLOCK = 8
# method: its settings, and how far past the prompt and the new tokens a step may fill the
# target's cache: a chain not at all (its length is cut to the tokens left), a tree by up to its
# budget of nodes. The prompt is the cache less both, so the last steps reach the cache's end.
GREEDY = {"ar": (dict(method="ar"), 0),
          "ssd": (dict(method="ssd", k=4, ssd_fanout=8, ssd_prepare="full"), 0),
          "dflash-tree": (dict(method="dflash-tree", tree_budget=10, tree_depth=DFLASH_BLOCK - 1, tree_width=3), 10),
          "eagle3-tree": (dict(method="eagle3-tree", tree_budget=12, tree_depth=4, tree_width=3), 12)}


def plan() -> list:
    """The checks, in the order they run: (name, what it runs)."""
    return ([("CUDA-only tests", " ".join(CUDA_TESTS))]
            + [(f"greedy = AR: {name}", f"{name} with CUDA graphs, a {GRAPH_LEN}-token cache filled")
               for name in GREEDY])


def run_tests(root: Path = ROOT) -> tuple:
    """Every CUDA-only test in a pytest of its own: (passed, what happened)."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "cuda.xml"
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}",
                   *CUDA_TESTS]
        try:
            proc = subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=TESTS_TIMEOUT)
        except subprocess.TimeoutExpired:
            return False, f"ran past {TESTS_TIMEOUT} s"
        if not report.exists():
            return False, f"pytest exited {proc.returncode}: {_tail(proc.stdout + proc.stderr)}"
        suite = ET.parse(report).getroot()
        suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
        n = {key: int(suite.get(key, 0)) for key in ("tests", "failures", "errors", "skipped")}
    passed = n["tests"] - n["failures"] - n["errors"] - n["skipped"]
    note = f"{passed} of {n['tests']} passed, {n['failures'] + n['errors']} failed, {n['skipped']} skipped"
    ok = proc.returncode == 0 and n["tests"] > 0 and passed == n["tests"]
    return ok, note if ok else f"{note}: {_tail(proc.stdout)}"


def _tail(text: str, lines: int = 15) -> str:
    return " / ".join(line for line in text.strip().splitlines()[-lines:] if line.strip())


def tiny_pairs() -> tuple:
    """The tiny pair twice on CUDA (float32): eager, and with CUDA graphs over GRAPH_LEN tokens,
    the graph pair with EAGLE-3 and DFlash heads trained on the pair's own generations."""
    from specviz.runtime.head_nets import attach_heads
    from specviz.runtime.lm import use_cuda_graphs
    from specviz.runtime.tiny_pair import build_tiny_pair
    from specviz.training.data import selfgen_features
    from specviz.training.selfgen import selfgen
    from specviz.training.trainer import TrainConfig, train_heads

    eager, graphs = (build_tiny_pair(device="cuda", dtype="float32") for _ in range(2))
    with tempfile.TemporaryDirectory() as work:
        data = selfgen(eager, Path(work) / "selfgen", 3000, batch=8, max_new_tokens=48, progress=False)
        features = selfgen_features(data)
        net = dict(epochs=3, batch=256, window=64, eval_every=10_000, draft_vocab=60, lr=3e-3, width=32,
                   attn_heads=4, mlp=64)
        for cfg in (TrainConfig("eagle3", noise=0.0, unroll=4, **net),
                    TrainConfig("dflash", block=DFLASH_BLOCK, depths=DFLASH_BLOCK - 1, eval_stride=1, **net)):
            attach_heads(graphs, train_heads(graphs, features, cfg, Path(work) / cfg.kind, progress=False)[0])
    for model in (graphs.target, graphs.draft):
        use_cuda_graphs(model, max_len=GRAPH_LEN)
    return eager, graphs


def filling_prompt(pair, tokens: int) -> list:
    """`tokens` ids of code text."""
    text = "def parse(line):\n    return [int(x) for x in line.split(',') if x.strip()]\n"
    ids = pair.encode(text)
    return (ids * (tokens // len(ids) + 1))[:tokens]


def greedy_check(eager, graphs, name: str) -> tuple:
    """`name` with CUDA graphs against AR without, on a prompt whose run fills the static cache."""
    from specviz.engine.sequence import generate

    settings, extra = GREEDY[name]
    ids = filling_prompt(graphs, GRAPH_LEN - NEW_TOKENS - extra)
    ar = list(generate(eager, ids, method="ar", max_new_tokens=NEW_TOKENS, ignore_eos=True))[-1].token_ids
    events = list(generate(graphs, ids, max_new_tokens=NEW_TOKENS, ignore_eos=True, **settings))
    out = events[-1].token_ids
    problems = [] if events[0].cuda_graphs else ["the run did not replay CUDA graphs"]
    if out != ar:
        at = next((i for i, (a, b) in enumerate(zip(out, ar)) if a != b), min(len(out), len(ar)))
        problems.append(f"differs from AR at new token {at}")
    if name == "ssd" and not any(e.info["ssd"].get("ahead", {}).get("stopped") == "cache full"
                                 for e in events if e.kind == "step_finished"):
        problems.append("SSD's preparation never met the end of the draft's cache")
    note = f"{len(ids)}-token prompt and {len(out)} new tokens in a {GRAPH_LEN}-token cache, equal to AR"
    return not problems, "; ".join(problems) or note


def run_checks(say) -> list:
    """Every check of plan(), each timed: [{"check", "ok", "seconds", "note"}]."""
    results = []

    def timed(check: str, fn, *args):
        say(f"{check} ...")
        start = time.perf_counter()
        try:
            ok, note = fn(*args)
        except Exception as exc:  # a failing check is reported, and the others still run
            ok, note = False, f"{type(exc).__name__}: {exc}"
        results.append({"check": check, "ok": ok, "seconds": round(time.perf_counter() - start, 1), "note": note})
        say(f"{check}: {'pass' if ok else 'FAIL'} ({note})")

    timed(plan()[0][0], run_tests)
    start = time.perf_counter()
    eager, graphs = tiny_pairs()
    say(f"tiny pair and its heads ready in {time.perf_counter() - start:.0f} s")
    for check, _ in plan()[1:]:
        timed(check, greedy_check, eager, graphs, check.split(": ", 1)[1])
    return results


def machine() -> dict:
    import torch

    return {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "cuda": torch.version.cuda,
            "commit": _commit(), "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime())}


def _commit() -> str:
    def git(*args) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()

    try:
        head = git("rev-parse", "--short", "HEAD") or "unknown"
        return head + (" with uncommitted changes" if git("status", "--porcelain", "--untracked-files=no") else "")
    except OSError:  # no git on the machine
        return "unknown"


def markdown(report: dict) -> str:
    m, results = report["machine"], report["results"]
    passed = sum(r["ok"] for r in results)
    lines = ["# GPU check", "",
             f"{m['gpu']}, torch {m['torch']} (CUDA {m['cuda']}), commit {m['commit']}, {m['date_utc']} UTC: "
             f"{passed} of {len(results)} checks passed in {report['seconds']:.0f} s "
             "(`make gpu-check`, specviz.bench.gpu_check).", "",
             "| check | result | seconds | what happened |", "|---|---|---|---|"]
    lines += [f"| {r['check']} | {'pass' if r['ok'] else 'FAIL'} | {r['seconds']:.1f} | {r['note'].replace('|', '/')} |"
              for r in results]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = Parser(prog="python -m specviz.bench.gpu_check", description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks" / "gpu-check"),
                        help="OUT.json and OUT.md (default docs/benchmarks/gpu-check)")
    args = parser.parse_args(argv)
    return run_command(lambda: _run(Path(args.out)))


def _run(out: Path) -> int:
    import torch

    if not torch.cuda.is_available():
        raise InputError("the GPU check needs a CUDA device, and PyTorch sees none here.")
    if not (ROOT / "tests").is_dir():
        raise InputError(f"the GPU check runs the tests of a checkout, and {ROOT} has no tests/ folder.")
    start = time.perf_counter()
    results = run_checks(lambda msg: print(msg, file=sys.stderr, flush=True))
    report = {"machine": machine(), "plan": plan(), "results": results,
              "seconds": round(time.perf_counter() - start, 1)}
    out.parent.mkdir(parents=True, exist_ok=True)
    files.write_json(out.with_name(out.name + ".json"), report)
    files.write_text(out.with_name(out.name + ".md"), markdown(report))
    print(f"{sum(r['ok'] for r in results)} of {len(results)} checks passed; report in {out}.md", file=sys.stderr)
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
