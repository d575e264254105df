"""int8 weight-only draft weights (specviz.quant): a cheaper drafter that keeps the method exact."""

import json

import pytest
import torch

from specviz import events as ev
from specviz import generate, load_pair
from specviz.errors import InputError
from specviz.quant import ROWS_INT8, Int8Linear, quantize_draft


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
    from specviz.quant import quantize_int8

    model = torch.nn.Sequential(torch.nn.Linear(100, 32), torch.nn.Linear(32, 8))
    assert quantize_int8(model) == 1  # 100 is not a multiple of 16 (the kernel crashes on it)
    assert isinstance(model[0], torch.nn.Linear) and isinstance(model[1], Int8Linear)
