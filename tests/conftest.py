"""Shared fixtures. Tests never touch the network: the hub is forced offline."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TQDM_DISABLE", "1")
# the app, its views and the notebooks under test start on the tiny pair, whatever the shell says:
# webapp.common reads SPECVIZ_PAIR once, at its first import, and a worker imports it from several
# test files (with it unset, `make test` in a fresh shell failed test_browser's setup). Tests of the
# default itself set and unset it with monkeypatch; tests of the real pair name it.
os.environ["SPECVIZ_PAIR"] = "tiny"
# the loads a test makes (some of them faked) are not the user's: the record of the last default
# load, which a notebook's banner compares with, goes to a folder of this run's (kernels and CLIs
# started by the tests inherit it), not to the user's cache
import tempfile  # noqa: E402

os.environ["SPECVIZ_LAST_LOADS"] = tempfile.mkdtemp(prefix="specviz-last-loads-")
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    # each worker (and the kernels and CLIs it starts) gets its share of the cores: two workers
    # whose OpenMP threads outnumber the cores spin against each other and run 3-4x slower
    _cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, _cores // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))))

import pytest  # noqa: E402

# `make test` runs two pytest-xdist workers that take whole files (--dist loadfile) in this order
# (--no-loadscope-reorder): the real pair's file, the longest (five to eight minutes, 8 GB in
# float32) and the only one that loads that pair in-process, starts at once on one worker (on an
# empty cache it converts the pair first, under the conversion lock) while the other works through
# the rest longest first: the tiny pair's notebooks and distribution tests, then the low-memory
# file (the same pair in int8, in a subprocess, under 3.75 GiB: both fit together), by then
# converted or waiting on that lock rather than converting beside it; a worker is handed its next
# file only as its current one runs out, so the two end close together. The static site's two
# files come early too: each builds the site first (about a minute on two cores).
FIRST = ("test_real_pair.py", "test_notebooks.py", "test_llamacpp.py", "test_site.py", "test_site_browser.py",
         "test_distribution.py", "test_low_memory.py",
         "test_tree.py", "test_cli.py",
         "test_jupyter_browser.py", "test_browser.py", "test_cache_faults.py", "test_methods.py", "test_app_api.py")


def pytest_collection_modifyitems(items):
    def rank(item):
        name = item.path.name
        return FIRST.index(name) if name in FIRST else len(FIRST)

    items.sort(key=rank)  # stable: tests keep their order within a file


# A test marked `alone` asserts a time (a class of 30 answered within 5 s): it runs with the
# cores to itself. Every test of a worker holds a shared lock from its setup to its teardown (the
# module fixtures it starts, model loads included); an `alone` test takes it exclusively, so it
# waits for the other worker's current test to end and the other worker waits for it. A turnstile
# in front keeps a waiting `alone` test from being overtaken by the other worker's next tests.
# POSIX flock; where there is none (Windows) or one process runs the tests, nothing is locked.
try:
    import fcntl
except ImportError:  # Windows
    fcntl = None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    worker_count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
    if fcntl is None or worker_count < 2:
        yield
        return
    folder = item.config._tmp_path_factory.getbasetemp().parent  # shared by the run's workers
    with open(folder / "specviz-cores.lock", "a") as cores:
        with open(folder / "specviz-turnstile.lock", "a") as turnstile:
            fcntl.flock(turnstile, fcntl.LOCK_EX)
            try:
                fcntl.flock(cores, fcntl.LOCK_EX if item.get_closest_marker("alone") else fcntl.LOCK_SH)
            finally:
                fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(cores, fcntl.LOCK_UN)


@pytest.fixture(scope="session")
def site_built(tmp_path_factory):
    """(folder, manifest) of the static site, built once for the whole run: test_site.py and
    test_site_browser.py read it (none writes into it; a test that plants a fault copies it first),
    and with two workers the first to ask builds it under a lock while the other waits, rather than
    building its own beside it. The build is whole or absent (it writes a new folder, then moves it)."""
    import json

    from specviz import files
    from specviz.site import build as site

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # shared by the run's workers
    out, manifest = root / "specviz-site" / "site", root / "specviz-site" / "built.json"
    with files.lock(out, "building the static site for the tests"):  # specviz's cross-process lock
        if not manifest.exists():
            manifest.parent.mkdir(parents=True, exist_ok=True)
            info = site.build(out, say=lambda line: None)
            manifest.write_text(json.dumps(info))
    return out, json.loads(manifest.read_text())


@pytest.fixture(scope="session")
def tiny():
    from specviz import load_pair

    return load_pair("tiny")


@pytest.fixture
def with_cpu_share():
    """A trace as if its decoding thread had run `share` of the time it was timed (the engine's
    cpu_elapsed beside elapsed), and for long enough to be judged: busy-machine tests."""
    from specviz.analysis import metrics

    def make(events: list, share: float) -> list:
        out = []
        for e in events:
            if e["kind"] == "step_finished":
                e = {**e, "elapsed": e["elapsed"] + 1.0, "cpu_elapsed": share * (e["elapsed"] + 1.0)}
            elif e["kind"] == "run_finished":
                e = {**e, "metrics": metrics.fold(out).to_dict()}
            out.append(e)
        return out

    return make
