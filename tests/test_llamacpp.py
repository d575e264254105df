"""llama.cpp under specviz's engine (specviz.runtime.llamacpp.runner): the pair's own GGUF files run by
llama.cpp's kernels, with specviz's exact algorithm and events; llama.cpp's own server beside it.

Everything that needs llama.cpp skips, naming why, where it is not built
(`python -m specviz llamacpp install`; CI builds it). The refusals and the missing-build message
are checked everywhere.
"""

import dataclasses
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

import specviz
from specviz.config import Warp
from specviz.errors import InputError
from specviz.runtime.packaged import gguf_copy_path, gguf_file, gguf_path
from specviz.runtime.llamacpp import runner as llamacpp, server as llamacpp_server
from specviz.runtime.pair import QWEN_DRAFT, QWEN_TARGET
from specviz.verifiers import sampling
from specviz.verifiers.exact import RejectionVerifier

MISSING = llamacpp.available()
needs_llamacpp = pytest.mark.skipif(MISSING is not None, reason=str(MISSING))
needs_server = pytest.mark.skipif(MISSING is not None or llamacpp_server.missing() is not None,
                                  reason=str(MISSING or llamacpp_server.missing()))
needs_states = pytest.mark.skipif(MISSING is not None or llamacpp.states_problem() is not None,
                                  reason=str(MISSING or llamacpp.states_problem()))
PROMPTS = ("def is_prime(n):\n", "# Sort a list of words by length, then alphabetically\nwords = [")
N = 16  # tokens a run compares (CI's budget)


@pytest.fixture(scope="module")
def pair():
    """The shipped Q4_K_M files, as laptops run them."""
    return specviz.load_pair("qwen-coder", backend="llama.cpp")


@pytest.fixture(scope="module", autouse=True)
def copies_leave_with_the_module():
    """The GGUF copies this module makes (Q8_0, several GB with the draft's) leave the cache when
    it ends, so that a test run does not keep gigabytes nobody asked for, and a small disk (CI's)
    holds the converted pair, the shipped files and one set of copies at a time. A copy that was
    there before (a user's) stays."""

    copies = [gguf_copy_path(spec, key) for spec in (QWEN_TARGET, QWEN_DRAFT)
              for key in llamacpp.GGUF_TYPES if key != "q4_k_m"]
    there = {path for path in copies if path.exists()}
    yield
    for path in copies:
        if path not in there:
            path.unlink(missing_ok=True)


@pytest.fixture(scope="module")
def q8_0():
    """Q8_0 copies of the same weights, made by llama.cpp's quantizer: there a pass over several
    tokens and one-token decoding agree to rounding (as float32 does in PyTorch), where on the
    shipped Q4_K_M they differ by tenths of a logit. (F16 agrees as well, at twice the disk.)"""
    return specviz.load_pair("qwen-coder", backend="llama.cpp", gguf="q8_0")


def _ids(pair, method, prompt, n=N, **kw):
    events = list(specviz.generate(pair, prompt, method=method, max_new_tokens=n, temperature=0.0, **kw))
    return events, events[-1].token_ids


@needs_server
def test_ar_equals_llama_servers_own_greedy_decoding(pair):
    """specviz's AR loop over llama.cpp's passes emits what llama.cpp's own server emits, greedy,
    on the same file, token for token."""
    with llamacpp_server.Server() as server:
        for prompt in PROMPTS:
            ids = pair.encode(prompt)
            own = server.complete(ids, N)["token_ids"]
            _, ours = _ids(pair, "ar", prompt)
            assert len(own) == N and ours == own, prompt


@pytest.fixture(scope="module")
def q8_0_ar(q8_0):
    """AR's tokens on the Q8_0 files, once per prompt for every method compared with them."""
    return {prompt: _ids(q8_0, "ar", prompt)[1] for prompt in PROMPTS}


@needs_llamacpp
@pytest.mark.parametrize("method,k", [("spec", 4), ("spec", 2), ("pld", 4), ("cascade", 4), ("suffix", 8),
                                      pytest.param("eagle3", 4, marks=needs_states),
                                      pytest.param("medusa", 3, marks=needs_states),
                                      pytest.param("dflash", 4, marks=needs_states)])
def test_speculative_greedy_equals_ar_token_for_token(q8_0, q8_0_ar, method, k):
    drafted = accepted = 0
    for prompt in PROMPTS:
        events, ours = _ids(q8_0, method, prompt, k=k)
        assert ours == q8_0_ar[prompt], (method, prompt)
        assert events[-1].metrics["tau"] > 1.0
        drafted, accepted = drafted + events[-1].metrics["drafted"], accepted + events[-1].metrics["accepted"]
    if method == "spec":  # a real speculation: several tokens per target pass, and rejections too
        assert accepted > len(PROMPTS) * N / 3 and drafted > accepted


@needs_llamacpp
def test_on_q4_k_m_a_verification_pass_flips_only_near_ties(pair):
    """On the Q4_K_M file llama.cpp's kernels for a pass over several tokens and for one token
    round differently (logits differ by tenths), so greedy speculation may part from one-token
    greedy decoding, as bf16 does in PyTorch. Where it does, the two tokens were a near tie: the
    one-token path's margin between them is smaller than the two paths' largest difference in
    logits at that position (a bug would part them at a clear winner)."""
    prompt = "def fibonacci(n):"
    _, ar = _ids(pair, "ar", prompt, n=48)
    _, spec = _ids(pair, "spec", prompt, n=48, k=4)
    if spec == ar:
        return
    parted = llamacpp.parting(pair.target, pair.encode(prompt), ar, spec)  # the side-by-side report's mark
    assert 0.0 <= parted["margin"] <= parted["gap"]


@needs_llamacpp
def test_events_say_llamacpp_and_the_files_type(pair):
    events, _ = _ids(pair, "spec", PROMPTS[0], n=8, k=3)
    started = events[0]
    assert started.backend == "llama.cpp" and started.dtype == "Q4_K_M" and started.lossless
    decided = [e for e in events if e.kind in ("token_accepted", "token_rejected")]
    assert decided and all(0.0 <= e.p <= 1.0 and 0.0 < e.q <= 1.0 for e in decided)
    json.dumps([e.to_dict() for e in events])  # the same JSON-safe events as every run


@needs_llamacpp
def test_rejected_positions_leave_the_kv_cache(pair):
    """crop() removes positions from llama.cpp's cache: after feeding a wrong tail and cropping
    it, the next pass sees exactly what a fresh context sees."""
    ids = pair.encode(PROMPTS[0])
    runner = pair.target.make_runner()
    runner.forward(ids[:-1], last_only=True)
    runner.forward([11, 12, 13, 14])  # a rejected draft
    runner.crop(len(ids) - 1)
    after = runner.forward(ids[-1:], last_only=True)
    fresh = pair.target.make_runner()
    fresh.forward(ids[:-1], last_only=True)
    again = fresh.forward(ids[-1:], last_only=True)
    assert runner.length == fresh.length == len(ids)
    assert torch.equal(after, again)


@needs_llamacpp
def test_a_pass_gives_logits_at_every_fed_position(q8_0, pair):
    """One pass over several tokens: its rows are the logits of each prefix (a verification
    pass). On the Q8_0 file they match one-token decoding to rounding; on Q4_K_M the two kernels
    differ by far more (here over a tenth of a logit), the same argmax on this prompt."""
    ids = q8_0.encode(PROMPTS[1])
    gaps = {}
    for name, p in (("q8_0", q8_0), ("q4_k_m", pair)):
        rows = p.target.make_runner().forward(ids)  # (T, V)
        single = p.target.make_runner()
        one = torch.cat([single.forward([t], last_only=True) for t in ids])
        assert rows.shape == one.shape == (len(ids), p.target.vocab_size)
        assert torch.equal(rows.argmax(-1), one.argmax(-1))
        gaps[name] = float((rows.softmax(-1) - one.softmax(-1)).abs().max())
    assert gaps["q8_0"] < 2e-3 < 1e-2 < gaps["q4_k_m"]


class ResampleFromTarget(RejectionVerifier):
    """Broken: after a rejection, draws from p instead of the residual norm(max(p - q, 0))."""

    def residual(self, p, q):
        return p, 0.0


SAMPLE_PROMPT = "import "  # the draft and the target disagree here (sum of min(p, q) is 0.32 over the top 6)
RUNS = 150  # the broken rule's chi-square noncentrality is about 0.22 a run: 33 here


class _Passes:
    """llama.cpp's passes, recorded while `recording`, else replayed: keyed by everything a
    runner was fed before and in the pass. The broken rule's runs use the same seeds as the law's,
    so they draft the same tokens and need exactly the passes llama.cpp already computed for the
    law's runs: replaying them tests the same rule on the same p and q without 150 more runs'
    worth of llama.cpp passes. A pass that was never recorded fails the test."""

    def __init__(self):
        self.seen, self.recording = {}, True

    def pair(self, pair):
        return dataclasses.replace(pair, target=_PassesModel(pair.target, self), draft=_PassesModel(pair.draft, self))


class _PassesModel:
    def __init__(self, model, passes):
        self._model, self._passes = model, passes

    def __getattr__(self, name):
        return getattr(self._model, name)

    def make_runner(self):
        return _PassesRunner(self._model, self._passes)


class _PassesRunner:
    def __init__(self, model, passes):
        self.model, self.device, self._passes, self._fed = model, model.device, passes, []
        self._real = model.make_runner() if passes.recording else None

    @property
    def length(self):
        return len(self._fed)

    def reset(self):
        self._fed = []
        if self._real is not None:
            self._real.reset()

    def crop(self, length):
        del self._fed[length:]
        if self._real is not None:
            self._real.crop(length)

    def forward(self, ids, last_only=False, keep=0, **kw):
        key = (self.model.path.name, tuple(self._fed), tuple(ids), last_only, keep, tuple(sorted(kw.items())))
        if self._real is not None:
            self._passes.seen[key] = self._real.forward(ids, last_only=last_only, keep=keep, **kw)
        assert key in self._passes.seen, f"a pass the law's runs never made: {key[:4]}"
        self._fed += list(ids)
        return self._passes.seen[key].clone()


def _first_token_law(pair, verifier=None):
    counts = {}
    for seed in range(RUNS):
        # max_new_tokens=2 lets the first step draft (k=1); the run is closed after that step,
        # whose first emitted token is the one whose law is tested (a second step decides nothing)
        run = specviz.generate(pair, SAMPLE_PROMPT, method="spec", k=1, temperature=1.0, top_k=6,
                               max_new_tokens=2, seed=seed, record_topk=0, verifier=verifier)
        step = next(e for e in run if e.kind == "step_finished")
        run.close()
        assert step.drafted == 1
        first = step.emitted_ids[0]
        counts[first] = counts.get(first, 0) + 1
    return counts


def _p_value(pair, counts):
    runner = pair.target.make_runner()
    p = sampling.warp(runner.forward(pair.encode(SAMPLE_PROMPT), last_only=True)[-1],
                      Warp(temperature=1.0, top_k=6))
    support = torch.nonzero(p).flatten().tolist()
    assert set(counts) <= set(support)
    observed = [counts.get(t, 0) for t in support]
    expected = [float(p[t]) * RUNS for t in support]
    return chisquare(observed, [e * sum(observed) / sum(expected) for e in expected]).pvalue


@needs_llamacpp
def test_sampled_first_token_follows_the_targets_law(pair):
    """Speculative sampling over llama.cpp: the first token's law is llama.cpp's target p
    (chi-square); resampling from p instead of the residual fails the same test (on the law
    runs' own llama.cpp passes, replayed)."""
    passes = _Passes()
    assert _p_value(pair, _first_token_law(passes.pair(pair))) > 1e-3
    passes.recording = False
    assert _p_value(pair, _first_token_law(passes.pair(pair), ResampleFromTarget())) < 1e-3


@needs_llamacpp
@pytest.mark.parametrize("method", ["tree", "medusa-tree", "eagle3-tree", "lookahead"])
def test_methods_that_need_pytorch_are_refused_in_one_sentence(pair, method):
    with pytest.raises(InputError, match="needs PyTorch"):
        specviz.generate(pair, "x", method=method)


@needs_llamacpp
def test_batches_are_refused(pair):
    with pytest.raises(InputError, match="one prompt at a time"):
        specviz.generate(pair, ["a", "b"], method="ar")


def test_pytorch_options_are_refused_with_llamacpp_before_anything_loads():
    with pytest.raises(InputError, match="dtype is PyTorch's"):
        specviz.load_pair("qwen-coder", backend="llama.cpp", dtype="float32")
    with pytest.raises(InputError, match="runs the packaged GGUF files of qwen-coder"):
        specviz.load_pair("tiny", backend="llama.cpp")
    with pytest.raises(InputError, match="Unknown backend"):
        specviz.load_pair("tiny", backend="vllm")
    with pytest.raises(InputError, match="with backend='llama.cpp'"):
        specviz.load_pair("tiny", gguf="q8_0")


def test_cli_refuses_a_tree_on_llamacpp_before_loading(capsys):
    from specviz.cli import main

    assert main(["generate", "--backend", "llama.cpp", "--method", "tree", "--prompt", "x"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --method tree needs PyTorch")


def test_a_missing_build_is_one_sentence_that_says_how_to_build_it(tmp_path):
    """With llama.cpp absent (its library path pointing nowhere), loading says how to build it."""
    code = ("import specviz\n"
            "try:\n    specviz.load_pair('qwen-coder', backend='llama.cpp')\n"
            "except specviz.errors.SpecvizError as e:\n    print(e)\n")
    env = dict(os.environ, LLAMA_CPP_LIB_PATH=str(tmp_path), SPECVIZ_LLAMACPP=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.stdout.startswith("llama.cpp is not installed (")
    assert "python -m specviz llamacpp install" in out.stdout and "Traceback" not in out.stderr


@needs_server
def test_a_q8_0_copy_is_made_once_and_decodes_as_its_server_does(q8_0):
    """gguf='q8_0': llama.cpp's quantizer makes the copy once (whole, under a lock), the pair
    runs it, and its AR is what llama-server emits on that file."""

    pair = q8_0
    assert pair.weights == "Q8_0" and "Q8_0" in pair.target.desc
    copy = gguf_copy_path(QWEN_TARGET, "q8_0")
    made = copy.stat().st_mtime_ns
    assert gguf_file(QWEN_TARGET, "q8_0", lambda f, m: None) == copy
    assert copy.stat().st_mtime_ns == made  # asked again: the same file, not made again
    _, ar = _ids(pair, "ar", PROMPTS[0], n=24)
    with llamacpp_server.Server(gguf="q8_0") as server:
        assert server.complete(pair.encode(PROMPTS[0]), 24)["token_ids"] == ar


@needs_llamacpp
def test_a_retyped_copy_changes_only_the_tensors_of_one_type():
    """gguf='q4_k_m-q8_0' and 'q4_k' keep every tensor of the shipped file byte for byte but those
    of one type (Q6_K), which become Q8_0 (the same values to Q8_0's rounding) or Q4_K; the
    quantizer's own recipe, which would move other tensors between types, chooses nothing. On the
    0.5B's file (seconds; the target's takes a minute the same way)."""
    from gguf.quants import dequantize

    shipped = {t.name: t for t in llamacpp.gguf_reader(gguf_file(QWEN_DRAFT, "q4_k_m", lambda f, m: None)).tensors}
    assert sum(t.tensor_type.name == "Q6_K" for t in shipped.values()) > 0
    for key, new in (("q4_k_m-q8_0", "Q8_0"), ("q4_k", "Q4_K")):
        copy = {t.name: t for t in llamacpp.gguf_reader(gguf_file(QWEN_DRAFT, key, lambda f, m: None)).tensors}
        assert copy.keys() == shipped.keys()
        for name, was in shipped.items():
            now = copy[name]
            if was.tensor_type.name != "Q6_K":
                assert now.tensor_type == was.tensor_type, (key, name)
                assert np.array_equal(np.asarray(now.data).view(np.uint8), np.asarray(was.data).view(np.uint8)), (key, name)
                continue
            assert now.tensor_type.name == new, (key, name)
            before, after = (dequantize(t.data, t.tensor_type).astype(np.float32) for t in (was, now))
            scale = float(np.abs(before).max())
            # Q8_0 rounds each value to a step of its block's largest / 127, kept as float16: half a step
            # and 127 steps' float16 rounding, under 0.6 of a step of the tensor's largest value;
            # Q4_K's steps are about sixteen times coarser
            bound = 0.6 * scale / 127 if new == "Q8_0" else scale / 8
            assert float(np.abs(after - before).max()) <= bound, (key, name)


@needs_server
def test_the_apps_race_adds_llamacpps_own_lanes_on_the_same_file():
    """Racing the llama.cpp pair in the app: afterwards llama-server runs the same prompt on the
    same file without a draft (no drafts counted) and with its own speculation (drafts and
    accepted counts from its answer, tokens per step from its /metrics), as chart records."""
    pytest.importorskip("gradio")
    from specviz.config import RunConfig
    from webapp.race import own_lanes

    cfg = RunConfig.of(method="spec", k=3, max_new_tokens=24)
    ar, spec = own_lanes("qwen-coder-llamacpp", PROMPTS[0], cfg)
    assert ar["drafted"] == 0 and ar["tokens"] == 24 and ar["tokens_per_s"] > 0 and ar["speedup"] is None
    assert spec["drafted"] > 0 and 0 < spec["alpha"] <= 1 and 1 < spec["tau"] <= 4
    assert spec["speedup"] == pytest.approx(spec["tokens_per_s"] / ar["tokens_per_s"])
    assert spec["label"] == "llama.cpp's own spec (k = 3)"


def test_a_copy_that_would_not_fit_is_refused_before_the_quantizer_writes(tmp_path, monkeypatch):
    """gguf='q8_0' or 'f16' on a disk too small for the copy: one sentence with the room it needs
    and the shipped file as the way out, before llama.cpp writes a byte (it would fill the disk
    and then fail)."""
    from specviz import files
    from specviz.runtime import packaged

    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    shipped = gguf_path(QWEN_TARGET)
    shipped.parent.mkdir(parents=True)
    shipped.write_bytes(b"GGUF")
    monkeypatch.setattr(packaged, "ensure_gguf", lambda spec, say: shipped)
    monkeypatch.setattr(llamacpp, "quantize", lambda *a: pytest.fail("the quantizer ran"))
    monkeypatch.setattr(files, "free_bytes", lambda folder: 1_500_000_000)
    need = {"q8_0": "2.0 GB", "f16": "3.6 GB"}
    for key in need:
        with pytest.raises(files.DiskFullError) as err:
            gguf_file(QWEN_TARGET, key, lambda f, m: None)
        message = str(err.value)
        assert f"it needs about {need[key]} free and 1.5 GB is free" in message, message
        assert "shipped Q4_K_M file" in message and "\n" not in message
    assert sorted(p.name for p in shipped.parent.iterdir()) == [shipped.name]


# ---------------------------------------------------------------------------------------------
# the target's own states, handed out by llama.cpp (specviz's patch for Qwen2's graph)

@needs_states
def test_a_pass_hands_out_the_layer_inputs_and_last_states_of_every_fed_token(pair, q8_0):
    """forward(hidden=layers): the inputs of the asked layers and the last hidden state of every
    fed token, as PyTorch's runner gives them. Layer 0's input is the token's embedding row (the
    GGUF's table, de-quantised here: the same rows llama.cpp looked up); the last state read
    through the output head gives the pass's own logits; on the Q8_0 copy (whose kernels do not
    depend on how many rows a pass has) a prompt fed in two pieces gives the very states of one
    pass over it: each token's rows are its own, in order, whatever the cache held before."""
    ids = pair.encode(PROMPTS[1])
    runner = pair.target.make_runner()
    logits, states = runner.forward(ids, keep=len(ids), hidden=(0, 2, 14, 25))
    d = pair.target.hidden_size
    assert states.shape == (len(ids), 5, d) and logits.shape == (len(ids), pair.target.vocab_size)
    embed = pair.target.get_input_embeddings()(torch.tensor(ids))
    assert torch.allclose(states[:, 0], embed, rtol=1e-2, atol=1e-3)  # bf16 table against llama.cpp's float32 rows
    norms = states.norm(dim=-1)
    assert bool((norms[:, 1] < norms[:, 3]).all())  # the residual stream grows with depth
    head = pair.target.get_output_embeddings().weight.float()
    again = states[:, 4] @ head.T
    assert torch.equal(again.argmax(-1), logits.argmax(-1))
    # the Q6_K head's own kernel (its inputs rounded to 8 bits) against a float product of the bf16 table
    cosine = torch.nn.functional.cosine_similarity(again, logits, dim=-1)
    assert float(cosine.min()) > 0.995 and float(cosine.median()) > 0.9998
    whole = q8_0.target.make_runner().forward(ids, hidden=(0, 2, 14, 25))[1]
    halves = q8_0.target.make_runner()
    first = halves.forward(ids[:5], hidden=(0, 2, 14, 25))[1]
    second = halves.forward(ids[5:], hidden=(0, 2, 14, 25))[1]
    assert torch.equal(torch.cat([first, second]), whole)
    last = pair.target.make_runner().forward(ids, hidden=True)[1]
    assert torch.allclose(last, states[:, 4], rtol=1e-4, atol=1e-4)
    with pytest.raises(InputError, match="has layers 0..27; the drafter asked for the inputs of \\[28\\]"):
        pair.target.make_runner().forward(ids, hidden=(28,))  # llama.cpp itself would abort the process


def test_without_the_patch_a_states_lane_is_one_sentence_not_an_abort(monkeypatch):
    """llama.cpp aborts the whole process when a Qwen2 graph is asked for layer inputs it does not
    hand out: without specviz's patch the runner refuses first, saying how to build it."""
    monkeypatch.setattr(llamacpp, "patched", lambda name, where=None: False)
    assert "build it again with `python -m specviz llamacpp install`" in llamacpp.states_problem()
    if MISSING is None:
        pair = specviz.load_pair("qwen-coder", backend="llama.cpp")
        with pytest.raises(llamacpp.LlamaCppMissing, match="reads the target's layer inputs, but the llama.cpp here was not built"):
            pair.target.make_runner().forward(pair.encode("x"), hidden=(2, 14, 25))


def test_the_patch_applies_where_its_context_is_and_nowhere_else(tmp_path):
    """build.apply_patch (no `patch` or `git` program needed): the hunk goes in where its context
    is, even a line off; a file already patched, or another file, is refused in one sentence;
    the build record names the patch and its digest."""
    from specviz.runtime.llamacpp import build

    [patch] = build.patches()
    text = patch.read_text()
    head, _, body = text.split("\n@@ ", 1)[1].partition("\n")
    lines = [line for line in body.split("\n") if line[:1] in (" ", "+", "-")]
    old = [line[1:] for line in lines if line[0] in " -"]
    new = [line[1:] for line in lines if line[0] in " +"]
    start = int(head.split()[0].lstrip("-").split(",")[0])
    target = tmp_path / "src" / "models" / "qwen2.cpp"
    target.parent.mkdir(parents=True)
    before = [f"// line {i}" for i in range(start)]  # one line more than the hunk says
    target.write_text("\n".join(before + old + ["}"]))
    build.apply_patch(patch, tmp_path)
    assert target.read_text().split("\n") == before + new + ["}"]
    assert "res->t_layer_inp[il] = inpL;" in target.read_text()
    with pytest.raises(build.BuildError, match="does not apply to src/models/qwen2.cpp"):
        build.apply_patch(patch, tmp_path)
    record = build._record_head()
    assert f"patch {patch.name} sha256 " in record
    (tmp_path / llamacpp.STAMP).write_text(record + "built now\n")
    assert llamacpp.patched(patch.name, tmp_path) and not llamacpp.patched(patch.name, tmp_path / "elsewhere")


def _llama_heads():
    """The EAGLE-3 heads in llama.cpp's layout (shipped, else trained here), or None."""
    from specviz.runtime.llamacpp.drafter import llama_heads_folder

    folder = llama_heads_folder("qwen-coder")
    return folder if (folder / "manifest.json").exists() else None


needs_llama_heads = pytest.mark.skipif(_llama_heads() is None, reason="no EAGLE-3 heads in llama.cpp's layout "
                                       "(python -m specviz train eagle3 --layout llama --pair qwen-coder-llamacpp)")


@needs_server
@needs_states
@needs_llama_heads
def test_specviz_eagle3_drafts_in_llama_servers_own_loop_as_in_specviz(pair):
    """The exported drafter loads in llama-server (draft-eagle3), leaves its greedy text as it is
    without a draft, and accepts about as often as the same network in specviz's engine on the
    same file: a wrong tensor, row order or norm in the GGUF would collapse llama.cpp's share."""
    heads, n = _llama_heads(), 32
    ours_drafted = ours_accepted = 0
    ours = {}
    for prompt in PROMPTS:
        events, ours[prompt] = _ids(pair, "eagle3", prompt, n=n, k=3, heads=str(heads))
        ours_drafted += events[-1].metrics["drafted"]
        ours_accepted += events[-1].metrics["accepted"]
    with llamacpp_server.Server() as server:
        greedy = {prompt: server.complete(pair.encode(prompt), n)["token_ids"] for prompt in PROMPTS}
    from specviz.runtime.llamacpp.drafter import drafter_gguf

    model = drafter_gguf(pair, "eagle3", heads)
    with llamacpp_server.Server(drafter="eagle3", draft_max=3, p_min=0.0, draft_model=model) as server:
        answers = {prompt: server.complete(pair.encode(prompt), n) for prompt in PROMPTS}
    drafted = sum(a["draft_n"] for a in answers.values())
    accepted = sum(a["draft_accepted"] for a in answers.values())
    for prompt in PROMPTS:
        assert answers[prompt]["token_ids"] == greedy[prompt], prompt
    # the shipped network accepts some (an untrained one of this shape: none), and llama.cpp's loop
    # as often as specviz's, within rounding of a Q8_0 copy (a broken export accepts nothing there)
    ours_rate = ours_accepted / ours_drafted
    assert drafted > 0 and ours_accepted >= 10, (ours_accepted, ours_drafted)
    assert abs(accepted / drafted - ours_rate) <= 0.35 * ours_rate + 0.02, (accepted, drafted, ours_accepted, ours_drafted)


@needs_llamacpp
@pytest.mark.parametrize("argv,kind", [(["drafter"], "eagle3"), (["drafter", "dflash"], "dflash"),
                                       (["serve", "--drafter", "dflash"], "dflash")])
def test_a_drafter_without_llama_layout_heads_is_one_sentence(tmp_path, capsys, argv, kind):
    """`python -m specviz llamacpp drafter [KIND] --heads FOLDER` (or `serve --drafter KIND`) with no
    such heads there: one line naming the command that trains them, a non-zero exit, no traceback,
    before any model loads."""
    from specviz.cli import main

    assert main(["llamacpp", *argv, "--heads", str(tmp_path)]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"train {kind} --layout llama" in err[0] and "Traceback" not in err[0]


def _random_dflash(pair, tmp_path, mlp=256):
    """A DFlash drafter in llama.cpp's layout with random weights (norms away from 1), its
    draft vocabulary a random quarter of the target's, exported beside the shipped target."""
    from specviz.runtime.head_nets import HeadSet, make_net
    from specviz.runtime.llamacpp.drafter import export_drafter
    from specviz.training.trainer import mask_token_of

    torch.manual_seed(0)
    d, vocab = pair.target.hidden_size, pair.target.vocab_size
    net = make_net("dflash", {"hidden": d, "vocab_size": vocab, "layout": "llama", "heads": d // 128, "kv_heads": 2,
                              "mlp": mlp, "slots": 3, "layers": [2, 14, 25], "n_layers": 1, "block": 4,
                              "mask_token": mask_token_of(pair)}).eval()
    for p in net.parameters():
        if p.dim() == 1:
            p.data.add_(torch.randn_like(p) * 0.2)
    ids = torch.tensor(sorted(np.random.default_rng(0).choice(vocab, vocab // 4, replace=False)))
    heads = HeadSet("dflash", net, ids, {"hidden": d, "vocab_size": vocab, "layers": [2, 14, 25], "layout": "llama"},
                    {"sha256": "cd" * 32})
    rows = pair.target.get_output_embeddings().weight
    return heads, export_drafter(heads, pair.target.path, tmp_path / "dflash.gguf", rows), rows


@needs_states
def test_specviz_dflash_is_the_function_llama_cpps_dflash_graph_computes(pair, tmp_path):
    """The exported DFlash drafter, run by llama.cpp itself (src/models/dflash.cpp: the target's
    layer inputs injected into every layer's keys and values, then the block [anchor, mask x 3]
    with non-causal attention), gives the logits specviz's network gives on the same states: the
    fusion, norms, grouped attention, rotation, mask token and output rows all as llama.cpp reads
    them. A variant with one wrong piece (a causal block, a block one position off, one context
    position less) is clearly further away, so the bound has the power to see one."""
    from specviz.runtime.llamacpp.drafter import dflash_block_logits

    heads, path, rows = _random_dflash(pair, tmp_path)
    net, ids = heads.net, heads.vocab_ids
    prompt = pair.encode("def fibonacci(n):\n    ")
    runner = pair.target.make_runner()
    _, states = runner.forward(prompt, hidden=(2, 14, 25))
    states, t, anchor = states[:, :3].float(), len(prompt) - 1, int(prompt[-1])
    got = dflash_block_logits(path, pair.target, states[:t].numpy(), anchor, 4)
    assert np.isneginf(np.delete(got[1], ids.numpy())).all()  # d2t: nothing outside the draft vocabulary
    got = torch.from_numpy(got[:, ids.numpy()])[1:]  # the mask rows: the drafts
    embed = pair.target.get_input_embeddings()
    net.set_mask(embed(torch.tensor([net.mask_token])))
    with torch.no_grad():
        ctx = net.context(states[:t])
        x = net.block(embed(torch.tensor([anchor])).float(), 4)

        def cos(positions, kv, mask=None):
            want = (net(x, positions, kv, mask) @ rows[ids].float().T)[1:]
            return torch.nn.functional.cosine_similarity(got, want, dim=-1).min().item()

        right = cos(torch.arange(t, t + 4), net.context_kv(ctx, torch.arange(t)))
        causal = torch.cat([torch.ones(4, t, dtype=torch.bool), torch.ones(4, 4, dtype=torch.bool).tril()], 1)
        wrong = [cos(torch.arange(t, t + 4), net.context_kv(ctx, torch.arange(t)), causal),
                 cos(torch.arange(t + 1, t + 5), net.context_kv(ctx, torch.arange(t))),
                 cos(torch.arange(t, t + 4), net.context_kv(ctx[:-1], torch.arange(t - 1)))]
    assert right > 0.9993, right  # Q8_0 weights, the same function
    assert max(wrong) < 0.998, wrong


@needs_server
@needs_states
def test_llama_server_drafts_with_specviz_dflash_and_keeps_its_greedy_text(pair, tmp_path):
    """The exported DFlash drafter loads in llama-server (draft-dflash: target layers, block size,
    mask token all read from the file), drafts every step, and llama-server's text is its greedy
    text without a draft, token for token."""
    _, path, _ = _random_dflash(pair, tmp_path)
    with llamacpp_server.Server() as server:
        greedy = {prompt: server.complete(pair.encode(prompt), N)["token_ids"] for prompt in PROMPTS}
    with llamacpp_server.Server(drafter="dflash", draft_max=3, p_min=0.0, draft_model=path) as server:
        answers = {prompt: server.complete(pair.encode(prompt), N) for prompt in PROMPTS}
    for prompt in PROMPTS:
        assert answers[prompt]["token_ids"] == greedy[prompt], prompt
    assert sum(a["draft_n"] for a in answers.values()) >= N  # it drafted (3 a step)
