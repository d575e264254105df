"""int8 weight-only weights (specviz.runtime.quant): a cheaper drafter that keeps the method exact, and the
low-memory pair (both models int8), whose int8 target is the model decoded: every method's
greedy output is its own AR output, because its forward computes every row as its AR step does."""

import json

import pytest
import torch

from specviz import events as ev, generate, load_pair
from specviz.errors import InputError
from specviz.runtime import tiny_pair
from specviz.runtime.lm import CachedLM
from specviz.runtime.quant import ROWS_INT8, Int8Embedding, Int8Linear, quantize_draft


def test_int8_linear_is_close_to_the_float_layer_and_exact_beyond_the_gemv_rows():
    torch.manual_seed(0)
    linear = torch.nn.Linear(64, 48, bias=True)
    q = Int8Linear(linear)
    assert q.qweight.dtype == torch.int8 and q.weight is linear.weight  # float weights shared
    for rows in range(1, ROWS_INT8 + 1):
        x = torch.randn(1, rows, 64)
        ref, out = linear(x), q(x)
        assert out.shape == ref.shape
        err = (out - ref).abs().max() / ref.abs().max()
        assert 0 < err < 0.02  # int8 rounding: close, and not the float path
    x = torch.randn(2, ROWS_INT8, 64)  # more rows: the float weights, bit for bit
    assert torch.equal(q(x), linear(x))


def test_quantize_draft_shares_weights_and_leaves_the_original_pair_alone(tiny):
    q = quantize_draft(tiny, "int8")
    assert q.draft_quant == "int8" and tiny.draft_quant == "none"
    assert q.target is tiny.target and q.tokenizer is tiny.tokenizer
    layers = [m for m in q.draft.modules() if isinstance(m, Int8Linear)]
    assert len(layers) == sum(isinstance(m, torch.nn.Linear) for m in tiny.draft.modules())
    assert not any(isinstance(m, Int8Linear) for m in tiny.draft.modules())
    assert q.draft.model.embed_tokens.weight is tiny.draft.model.embed_tokens.weight
    assert quantize_draft(q, "int8") is q
    assert quantize_draft(tiny, "int8") is q and quantize_draft(tiny, "none") is tiny  # built once per pair
    calls = []  # hooks are per copy: one on the original does not fire for the int8 draft
    handle = tiny.draft.register_forward_pre_hook(lambda *args: calls.append(1))
    try:
        list(generate(q, "abc", method="spec", k=2, max_new_tokens=4))
    finally:
        handle.remove()
    assert calls == []


@pytest.mark.parametrize("prompt", ["def f(x):", "hello world"])
def test_greedy_with_an_int8_draft_is_token_for_token_autoregressive(tiny, prompt):
    q = quantize_draft(tiny, "int8")
    ar = list(generate(tiny, prompt, method="ar", max_new_tokens=40))[-1].token_ids
    runs = [dict(method="spec", k=k) for k in (1, 2, 4, 8)] + [
        dict(method="spec", k="auto"), dict(method="tree", tree="3,2,1"), dict(method="tree", tree="dynamic"),
        dict(method="cascade", k=4)]
    for kw in runs:
        events = list(generate(q, prompt, max_new_tokens=40, **kw))
        assert events[-1].token_ids == ar, kw
        assert events[0].draft_quant == "int8"


def test_the_int8_draft_is_what_drafts(tiny):
    """The events' q comes from the int8 model: its first draft probabilities differ from the float
    draft's (while greedy output stays the same), and the run says which draft it was."""
    q = quantize_draft(tiny, "int8")
    first = {}
    for name, pair in (("float", tiny), ("int8", q)):
        events = list(generate(pair, "def f(x):", method="spec", k=4, max_new_tokens=8, temperature=1.0, seed=1))
        drafted = next(e for e in events if e.kind == "draft_proposed")
        first[name] = drafted.to_dict()
        started = events[0]
        assert started.draft_quant == ("none" if name == "float" else "int8")
        assert ev.from_dict(json.loads(json.dumps(started.to_dict()))) == started
    assert json.dumps(first["float"], sort_keys=True) != json.dumps(first["int8"], sort_keys=True)


def test_bad_modes_are_refused(tiny):
    with pytest.raises(InputError, match="draft_quant must be one of none, int8"):
        load_pair("tiny", draft_quant="int4")
    with pytest.raises(InputError, match="already quantised"):
        quantize_draft(quantize_draft(tiny, "int8"), "none")


def test_widths_the_kernel_cannot_take_stay_float():
    from specviz.runtime.quant import quantize_int8

    model = torch.nn.Sequential(torch.nn.Linear(100, 32), torch.nn.Linear(32, 8))
    assert quantize_int8(model) == 1  # 100 is not a multiple of 16 (the kernel crashes on it)
    assert isinstance(model[0], torch.nn.Linear) and isinstance(model[1], Int8Linear)


# --- memory="low": both models int8, no float weights; the int8 target is the model decoded --

def test_without_float_weights_every_row_count_runs_the_int8_kernel_row_by_row():
    """The kernel computes each row alone, in one order of additions, whatever the other rows:
    a row's output is the same bit for bit in a pass of 1, 4, 5 or 13 rows. That is what keeps
    an int8 target's speculative output equal to its own autoregressive output."""
    torch.manual_seed(0)
    layer = Int8Linear(torch.nn.Linear(64, 48, bias=True), keep_float=False)
    assert layer.weight is None and layer.qweight.dtype == torch.int8
    x = torch.randn(13, 64)
    alone = torch.cat([layer(x[i:i + 1]) for i in range(13)])
    for rows in (4, 5, 13):
        assert torch.equal(layer(x[:rows]), alone[:rows])
    ref = torch.nn.functional.linear(x, layer.qweight.float() * layer.scale.float()[:, None], layer.bias)
    assert 0 < (alone - ref).abs().max() <= 0.02 * ref.abs().max()  # bf16 activations: close, not equal


def test_int8_embedding_dequantises_the_rows_it_gathers():
    torch.manual_seed(0)
    table = torch.nn.Embedding(100, 32)
    emb = Int8Embedding(table, torch.float32)
    ids = torch.tensor([[3, 99, 3, 0]])
    out = emb(ids)
    assert out.shape == (1, 4, 32) and out.dtype == torch.float32 and torch.equal(out[0, 0], out[0, 2])
    assert (out - table(ids)).abs().max() <= table.weight.abs().max() / 127  # half a step of the largest row


def test_the_low_memory_tiny_pair_holds_no_float_weights(tiny):
    low = load_pair("tiny", memory="low")
    assert low.target_quant == low.draft_quant == "int8" and "asked for" in low.memory_choice["reason"]
    for model in (low.target, low.draft):
        assert not any(type(m) in (torch.nn.Linear, torch.nn.Embedding) for m in model.modules())
        assert all(m.weight is None for m in model.modules() if isinstance(m, Int8Linear))
        floats = {name.rsplit(".", 1)[-1] for name, _ in model.named_parameters()}
        assert floats == {"weight", "bias"} and all(
            "norm" in n or n.endswith(".bias") for n, _ in model.named_parameters())  # norms, q/k/v biases
    ids = torch.tensor([tiny.encode("def f(x):")])
    with torch.no_grad():
        p_float, p_int8 = tiny.target(ids).logits, low.target(ids).logits
    assert not torch.equal(p_float, p_int8) and (p_float - p_int8).abs().max() < 0.1 * p_float.abs().max()


LOW_RUNS = [dict(method="spec", k=k) for k in (1, 2, 4, 8)] + [
    dict(method="spec", k="auto"), dict(method="tree", tree="3,2,1"), dict(method="tree", tree="dynamic"),
    dict(method="pld"), dict(method="lookahead"), dict(method="cascade", k=4)]


@pytest.mark.parametrize("prompt", ["def f(x):", "hello world", "import numpy as np\n"])
def test_greedy_on_the_low_memory_pair_is_its_own_autoregressive_output(prompt):
    low = load_pair("tiny", memory="low")
    ar = list(generate(low, prompt, method="ar", max_new_tokens=40))
    assert ar[0].target_quant == ar[0].draft_quant == "int8"
    for kw in LOW_RUNS:
        assert list(generate(low, prompt, max_new_tokens=40, **kw))[-1].token_ids == ar[-1].token_ids, kw


def test_row_dependent_activation_scales_would_break_that(monkeypatch):
    """The test above has power: quantising activations with one scale over the whole pass (what
    torch.ao's dynamic quantisation does) makes a token's logits depend on the tokens verified
    beside it, and speculative output leaves the model's own AR output."""
    def per_tensor(self, x):
        s = x.abs().amax().clamp(min=1e-12) / 127  # one scale for every row of the pass
        w = self.qweight.float() * self.scale.float()[:, None]
        y = (torch.round(x / s).clamp(-127, 127) * s) @ w.T
        return y if self.bias is None else y + self.bias

    low = load_pair("tiny", memory="low")
    monkeypatch.setattr(Int8Linear, "forward", per_tensor)
    differs = []
    for prompt in ["def f(x):", "hello world", "import numpy as np\n"]:
        ar = list(generate(low, prompt, method="ar", max_new_tokens=40))[-1].token_ids
        differs += [list(generate(low, prompt, max_new_tokens=40, **kw))[-1].token_ids != ar for kw in LOW_RUNS[:4]]
    assert sum(differs) >= 6


def test_quantize_draft_of_a_low_memory_pair_is_the_pair():
    low = load_pair("tiny", memory="low")
    assert quantize_draft(low, "int8") is low and load_pair(low, draft_quant="int8") is low
    with pytest.raises(InputError, match="already quantised"):
        quantize_draft(low, "none")


def _last_logits_both_ways(pair, ids):
    """The last token's logits from a 5-row pass after the cache, and from a one-token AR step."""
    lm = CachedLM(pair.target)
    lm.forward(ids[:-5], last_only=True)
    multi = lm.forward(ids[-5:])[-1]
    lm.reset()
    lm.forward(ids[:-1], last_only=True)
    return multi, lm.forward(ids[-1:])[-1]


def test_a_verify_row_is_its_ar_step_bit_for_bit():
    """The int8 pair's forward computes a row as its AR step does, bit for bit: int8 products
    row by row, attention one row at a time (quant.rowwise_attention). transformers' own
    attention takes another path for many rows, and the float pair's logits differ there."""
    ids = tiny_pair.tiny_tokenizer().encode("def fibonacci(n):\n    return n", add_special_tokens=False)
    multi, one = _last_logits_both_ways(load_pair("tiny", memory="low"), ids)
    assert torch.equal(multi, one)
    multi, one = _last_logits_both_ways(load_pair("tiny"), ids)
    assert not torch.equal(multi, one)


def test_a_tree_node_is_its_ar_step_bit_for_bit():
    low = load_pair("tiny", memory="low")
    ids = low.encode("def f(x):\n    return")
    a, b, c = low.encode(" x+")  # nodes: a and b siblings, c the child of a
    n = len(ids)
    attend = torch.zeros(3, n + 3, dtype=torch.bool)  # (T, length + T): what each node sees
    attend[:, :n] = True
    attend[0, n], attend[1, n + 1], attend[2, [n, n + 2]] = True, True, True
    lm = CachedLM(low.target)
    lm.forward(ids, last_only=True)
    tree = lm.forward([a, b, c], attend=attend, positions=[n, n, n + 1])
    lm.reset()
    lm.forward(ids, last_only=True)
    assert torch.equal(tree[0], lm.forward([a])[-1]) and torch.equal(tree[2], lm.forward([c])[-1])
