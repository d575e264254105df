"""The command line: text and a metrics line, JSONL events, one-line errors with exit status 2.

`python -m specviz` runs in processes of its own, forked from one that imported torch and
transformers once (tests/forkserver.py: specviz itself is imported afresh in each); the first
test runs it as a plain new Python process.
"""

import json
import os
import subprocess
import sys

import pytest
from forkserver import ForkServer

from specviz import events as ev

ENV = {"SPECVIZ_PAIR": "tiny", "HF_HUB_OFFLINE": "1"}
_FORKS = {}  # "server": the module's ForkServer


@pytest.fixture(scope="module", autouse=True)
def forks(tmp_path_factory):
    with ForkServer(tmp_path_factory.mktemp("forkserver"), {**os.environ, **ENV},
                    ["torch", "transformers.modeling_utils"]) as server:
        _FORKS["server"] = server
        yield
    _FORKS.clear()


def cli(*args):
    return _FORKS["server"].run("specviz", list(args), ENV, kind="module", timeout=120)


def test_pairs_lists_presets():
    out = subprocess.run([sys.executable, "-m", "specviz", "pairs"], capture_output=True, text=True,
                         env={**os.environ, **ENV}, timeout=120)
    assert out.returncode == 0
    lines = out.stdout.splitlines()
    assert lines[0].startswith("qwen-coder") and lines[1].startswith("tiny") and "(default)" in lines[1]


def test_generate_prints_text_and_metrics(tiny):
    from specviz import generate

    out = cli("generate", "--pair", "tiny", "--prompt", "def f(x):", "--max-new-tokens", "20", "--k", "3")
    assert out.returncode == 0, out.stderr
    expected = list(generate(tiny, "def f(x):", k=3, max_new_tokens=20))[-1]
    text, metrics_line = out.stdout.rsplit("\n", 2)[:2]
    assert text == expected.text
    assert metrics_line.startswith("20 tokens in ") and "tau" in metrics_line and "alpha" in metrics_line


def test_generate_jsonl_is_only_events():
    out = cli("generate", "--pair", "tiny", "--prompt", "x", "--max-new-tokens", "9", "--jsonl",
              "--method", "spec", "--temperature", "1", "--seed", "3")
    assert out.returncode == 0, out.stderr
    events = [ev.from_dict(json.loads(line)) for line in out.stdout.splitlines()]
    assert events[0].kind == "run_started" and events[-1].kind == "run_finished"
    assert len(events[-1].token_ids) == 9


@pytest.mark.parametrize("args, message", [
    (["--prompt", ""], "error: The prompt is empty"),
    (["--prompt", "x", "--k", "0"], "error: --k (draft length)"),
    (["--prompt", "x", "--top-p", "2"], "error: --top-p must be in (0, 1]"),
    (["--prompt", "x", "--pair", "gpt5"], "error: Unknown pair 'gpt5'"),
    (["--prompt", "x", "--k", "2.5"], "error: argument --k: k must be a whole number, 'auto' or 'load'"),
    (["--prompt", "x", "--method", "lookahead", "--temperature", "1"], "error: lookahead decoding is greedy-only"),
    (["--max-new-tokens", "5"], "error: the following arguments are required: --prompt"),
    (["--prompt", "x", "--draft-quant", "int4"], "error: --draft-quant must be one of none, int8"),
    (["--prompt", "x", "--cpu-linear", "fast"], "error: --cpu-linear must be one of aten, gemv"),
    (["--prompt", "x", "--method", "eagle-tree", "--tree-depth", "40"], "error: --tree-depth must be a whole number"),
    (["--prompt", "x", "--method", "lookahead", "--window", "30"], "error: --window must be a whole number"),
    (["--prompt", "x", "--method", "ssd", "--draft-threads", "0"], "error: --draft-threads must be 'auto' or a whole number"),
    (["--prompt", "x", "--device", "gpu"], "error: --device must be cpu, cuda (cuda:0, cuda:1, ...) or mps, got 'gpu'."),
    (["--prompt", "x", "--seed", str(2**64)], "error: --seed must be a whole number from 0 to 2**63 - 1, got 1844"),
    (["--prompt", "x", "--seed", "-1"], "error: --seed must be a whole number from 0 to 2**63 - 1, got -1."),
    (["--prompt", "x", "--seed", "1e3"], "error: argument --seed: invalid int value: '1e3'"),
])
def test_errors_are_one_line(args, message):
    out = cli("generate", *args)
    assert out.returncode == 2
    assert out.stderr.startswith(message) and out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
    assert out.stdout == ""


def test_methods_from_the_command_line(tiny):
    from specviz import generate

    out = cli("generate", "--pair", "tiny", "--prompt", "def f(x):", "--max-new-tokens", "12",
              "--method", "tree", "--tree", "dynamic")
    assert out.returncode == 0, out.stderr
    expected = list(generate(tiny, "def f(x):", method="ar", max_new_tokens=12))[-1].text
    assert out.stdout.startswith(expected)
    lossy = cli("generate", "--pair", "tiny", "--prompt", "x", "--max-new-tokens", "5", "--acceptance", "typical")
    assert "LOSSY" in lossy.stdout


def test_bench_is_a_subcommand():
    out = cli("bench", "--help")
    assert out.returncode == 0 and "--quick" in out.stdout and "--check-against" in out.stdout
    bad = cli("bench", "--methods", "nonsense")
    assert bad.returncode == 2 and bad.stderr.startswith("error: unknown method(s) nonsense")


@pytest.mark.parametrize("args, options", [
    (["--prompt", "x", "--k", "0"], dict(k=0)),
    (["--prompt", "  "], {}),
    (["--prompt", "x", "--method", "tree", "--tree", "3,x"], dict(method="tree", tree="3,x")),
    (["--prompt", "x", "--method", "lookahead", "--temperature", "0.5"], dict(method="lookahead", temperature=0.5)),
])
def test_bad_options_fail_before_any_weights_load(monkeypatch, capsys, args, options):
    from specviz import cli as cli_module
    from specviz.config import as_flags
    from specviz.engine.sequence import check_options
    from specviz.errors import InputError
    from specviz.runtime import models

    def refuse(*a, **kw):
        raise AssertionError("weights loaded before the options were checked")

    monkeypatch.setattr(models, "load_pair", refuse)
    assert cli_module.main(["generate", "--pair", "qwen-coder", *args]) == 2
    with pytest.raises(InputError) as exc, as_flags():  # generate()'s message, naming the flags
        check_options(args[1], **options)
    assert capsys.readouterr().err == f"error: {exc.value}\n"


def test_train_refuses_a_seed_torch_cannot_take_in_one_line():
    out = cli("train", "medusa", "--pair", "tiny", "--seed", str(2**64))
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr == f"error: --seed must be a whole number from 0 to 2**63 - 1, got {2**64}.\n"


def test_a_cuda_device_without_a_gpu_is_one_line():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: cuda is a device it has")
    out = cli("generate", "--prompt", "x", "--device", "cuda")
    assert out.returncode == 2 and out.stdout == "" and "Traceback" not in out.stderr
    assert out.stderr.startswith("error: --device cuda asks for a CUDA GPU, and PyTorch sees none here")
    assert out.stderr.endswith("use --device cpu, or leave --device out to take what there is.\n")


# (a malformed environment variable, the command that reads it, how its one line starts); each
# fails before any model loads or any server starts
BAD_ENVIRONMENTS = [
    ({"SPECVIZ_PAIR": "gpt5"}, ["generate", "--prompt", "x"], "error: $SPECVIZ_PAIR is 'gpt5', which names no pair"),
    ({"SPECVIZ_PAIR": "gpt5"}, ["pairs"], "error: $SPECVIZ_PAIR is 'gpt5', which names no pair"),
    ({"SPECVIZ_MEMORY": "lots"}, ["generate", "--prompt", "x"], "error: $SPECVIZ_MEMORY must be one of auto, full, low"),
    ({"SPECVIZ_MAX_TOKENS": "many"}, ["app"], "error: $SPECVIZ_MAX_TOKENS must be a whole number from 1 to 4096"),
    ({"SPECVIZ_MAX_WAITING": "0"}, ["app"], "error: $SPECVIZ_MAX_WAITING must be a whole number of at least 1"),
    ({"SPECVIZ_MAX_LIVE_BATCH": "8.5"}, ["app"], "error: $SPECVIZ_MAX_LIVE_BATCH must be a whole number from 1 to 32"),
    ({"PORT": "http"}, ["app"], "error: $PORT must be a whole number from 1 to 65535, got 'http'."),
]


@pytest.mark.parametrize("env, argv, says", BAD_ENVIRONMENTS, ids=[next(iter(e)) + "-" + a[0] for e, a, _ in BAD_ENVIRONMENTS])
def test_a_malformed_environment_variable_is_one_line(env, argv, says):
    out = _FORKS["server"].run("specviz", argv, {**ENV, **env}, kind="module", timeout=120)
    assert out.returncode == 2 and out.stdout == "", out.stderr
    assert out.stderr.startswith(says) and out.stderr.count("\n") == 1 and "Traceback" not in out.stderr


def test_a_cache_that_is_a_file_is_one_line(tmp_path):
    cache = tmp_path / "cache"
    cache.write_text("not a folder")
    env = {**ENV, "SPECVIZ_CACHE": str(cache)}
    out = _FORKS["server"].run("specviz", ["generate", "--method", "medusa", "--prompt", "x"], env, kind="module",
                               timeout=120)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr == f"error: $SPECVIZ_CACHE is {str(cache)!r}, a file: point it at a folder (made if missing).\n"


@pytest.mark.parametrize("text, value", [("", 5), ("  ", 5), ("7", 7), (" 3 ", 3)])
def test_env_number_reads_a_whole_number_or_the_default(monkeypatch, text, value):
    from specviz.errors import env_number

    monkeypatch.setenv("SPECVIZ_TEST_NUMBER", text)
    assert env_number("SPECVIZ_TEST_NUMBER", 5, low=1, high=9) == value


@pytest.mark.parametrize("text, kind, message", [
    ("abc", int, "$SPECVIZ_TEST_NUMBER must be a whole number from 1 to 9, got 'abc'."),
    ("10", int, "$SPECVIZ_TEST_NUMBER must be a whole number from 1 to 9, got '10'."),
    ("2.5", int, "$SPECVIZ_TEST_NUMBER must be a whole number from 1 to 9, got '2.5'."),
    ("inf", float, "$SPECVIZ_TEST_NUMBER must be a number from 1 to 9, got 'inf'."),
    ("nan", float, "$SPECVIZ_TEST_NUMBER must be a number from 1 to 9, got 'nan'."),
])
def test_env_number_refuses_anything_else_naming_the_variable(monkeypatch, text, kind, message):
    from specviz.errors import SpecvizError, env_number

    monkeypatch.setenv("SPECVIZ_TEST_NUMBER", text)
    with pytest.raises(SpecvizError) as exc:
        env_number("SPECVIZ_TEST_NUMBER", 5, kind, low=1, high=9)
    assert str(exc.value) == message


def test_app_command_serves_the_page_from_any_folder(tmp_path):
    """`python -m specviz app`, the make-free way (Windows, plain pip), run from an unrelated
    folder: the installed package finds its app and serves it."""
    import socket
    import time
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": ""}
    proc = subprocess.Popen([sys.executable, "-m", "specviz", "app", "--pair", "tiny", "--port", str(port)],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline, page = time.monotonic() + 120, None
        while page is None and proc.poll() is None and time.monotonic() < deadline:
            try:
                page = urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5).read().decode()
            except OSError:
                time.sleep(0.5)  # polling for the server to come up, not an assertion
        assert proc.poll() is None, proc.stdout.read()
        assert page is not None and "specviz" in page
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_app_command_refuses_an_unknown_option_in_one_line():
    out = cli("app", "--colour", "red")
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "unrecognized arguments" in out.stderr


def _interrupt(*args, **kwargs):
    raise KeyboardInterrupt


# (module, the function main runs its work in, main's arguments, what the line must say)
ENTRY_POINTS = [
    ("specviz.cli", "cmd_generate", ["generate", "--prompt", "x"], "interrupted"),
    ("specviz.cli", "cmd_train", ["train", "eagle3", "--pair", "tiny"], "resumes from its last checkpoint"),
    ("specviz.bench.suite", "_run", ["--quick"], "keeps no partial results"),
    ("specviz.bench.heldout", "_run", ["--pair", "tiny"], "the same command resumes there"),
    ("specviz.bench.batched", "_run", ["--pair", "tiny"], "--resume goes on after them"),
    ("specviz.bench.engines", "_main", [], "before the report was written"),
    ("specviz.bench.forward", "_main", [], "interrupted"),
    ("specviz.bench.assisted", "_main", [], "before the report was written"),
    ("specviz.bench.recordings", "_record", ["record", "--pair", "tiny"], "restore the folder with git checkout"),
    ("specviz.bench.classroom", "_run", ["--pair", "tiny"], "the app was stopped and the logs are in"),
    ("specviz.runtime.llamacpp.build", "install", ["install"], "a build is used only once whole"),
]


@pytest.mark.parametrize("module, work, argv, says", ENTRY_POINTS, ids=[f"{m}.{w}" for m, w, _, _ in ENTRY_POINTS])
def test_ctrl_c_is_one_line_and_status_130_in_every_command(monkeypatch, capsys, tmp_path, module, work, argv, says):
    """Ctrl-C in a long command (a benchmark, a recording, training, a build): one line on stderr
    saying what is kept, status 130, no traceback; the same for `python -m specviz bench`."""
    import importlib

    from specviz import cli as cli_module

    def status(main, args):
        try:
            return main(args)
        except KeyboardInterrupt:  # caught here: escaping, it would stop pytest itself
            pytest.fail(f"Ctrl-C escaped {module}.main as a traceback")

    mod = importlib.import_module(module)
    monkeypatch.setattr(mod, work, _interrupt)
    if module == "specviz.bench.classroom":  # its logs' folder, kept on an interrupt: the test's own
        monkeypatch.setattr(mod.tempfile, "mkdtemp", lambda **kw: str(tmp_path))
    assert status(mod.main, argv) == 130
    err = capsys.readouterr().err
    assert err.startswith("error: interrupted") and says in err and err.count("\n") == 1, err
    if module == "specviz.bench.suite":  # the same through the command line's dispatch
        assert status(cli_module.main, ["bench", *argv]) == 130
        assert capsys.readouterr().err == err


def test_run_command_turns_user_errors_into_one_line_and_passes_the_rest_on(capsys):
    from specviz.errors import InputError, run_command

    def bad():
        raise InputError("--k must be at least 1")

    def broken():
        raise RuntimeError("a bug")

    assert run_command(lambda: 0) == 0 and run_command(lambda: 3) == 3
    assert run_command(bad) == 2 and capsys.readouterr().err == "error: --k must be at least 1\n"
    with pytest.raises(RuntimeError):  # a bug is not a user's error: its traceback is wanted
        run_command(broken)


def test_batched_bench_refuses_batches_that_are_not_numbers_in_one_line(capsys):
    from specviz.bench import batched

    assert batched.main(["--batches", "x", "--pair", "tiny"]) == 2  # refused before any weights load
    assert capsys.readouterr().err.startswith("error: lanes are ")
