"""specviz.runtime.kernels: few-row linear layers as W @ x.T on the CPU. Same results up to rounding, the
same module tree, the method still exact, and transformers' lanes in the bench on stock layers."""

import pytest
import torch
import torch.nn.functional as F

from specviz import generate, load_pair
from specviz.errors import InputError
from specviz.runtime import kernels
from specviz.runtime.quant import Int8Linear, quantize_draft


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("rows", [1, 2, 5, kernels.ROWS_GEMV, kernels.ROWS_GEMV + 1])
def test_linear_matches_f_linear(rows, bias):
    torch.manual_seed(rows)
    w, b = torch.randn(48, 32, dtype=torch.float64), torch.randn(48, dtype=torch.float64) if bias else None
    x = torch.randn(1, rows, 32, dtype=torch.float64)
    ref = F.linear(x, w, b)
    out = kernels.linear(x, w, b)
    assert out.shape == ref.shape == (1, rows, 48)
    assert torch.allclose(out, ref, rtol=1e-12, atol=1e-12)
    # bf16: the same product up to bf16 rounding of the result
    wb, xb = w.bfloat16(), x.bfloat16()
    exact = F.linear(xb.double(), wb.double(), None if b is None else b.bfloat16().double())
    got = kernels.linear(xb, wb, None if b is None else b.bfloat16()).double()
    assert ((got - exact).abs() <= 0.02 * exact.abs() + 0.05).all()


def test_linear_leaves_empty_and_mixed_dtype_inputs_to_f_linear():
    w = torch.randn(8, 4)
    assert kernels.linear(torch.randn(0, 4), w).shape == (0, 8)
    with pytest.raises(RuntimeError):  # F.linear's own error, not a silent upcast
        kernels.linear(torch.randn(2, 4, dtype=torch.float64), w)


def test_use_gemv_swaps_classes_in_place_and_realigns_weights():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8, bias=False))
    with torch.no_grad():  # a weight 2 bytes past an aligned start, as inside a safetensors file
        base = torch.empty(32 * 16 + 1)
        model[0].weight.data = base[1:].view(32, 16).copy_(model[0].weight)
    assert model[0].weight.data_ptr() % kernels.ALIGN
    params, x = list(model.parameters()), torch.randn(3, 16)
    before = model(x)
    calls = []
    model.register_forward_hook(lambda *args: calls.append(1))
    assert kernels.use_gemv(model) == 2
    assert [type(m) for m in model] == [kernels.GemvLinear, torch.nn.ReLU, kernels.GemvLinear]
    assert all(isinstance(m, torch.nn.Linear) for m in (model[0], model[2]))
    assert list(model.parameters()) == params  # the same Parameter objects
    assert all(p.data_ptr() % kernels.ALIGN == 0 for p in model.parameters())
    assert torch.allclose(model(x), before, atol=1e-6) and calls == [1]  # hooks kept
    assert kernels.kernel_of(model) == "gemv"
    assert kernels.use_aten(model) == 2 and kernels.kernel_of(model) == "aten"


def test_aten_linears_restores_the_kernels_even_on_error(monkeypatch):
    model = torch.nn.Sequential(torch.nn.Linear(16, 16))
    kernels.use_gemv(model)
    seen = []
    monkeypatch.setattr(kernels, "linear", lambda *a: seen.append(1) or F.linear(*a))
    with pytest.raises(ValueError):
        with kernels.aten_linears(model):
            assert type(model[0]) is torch.nn.Linear
            model(torch.randn(1, 16))
            raise ValueError("inside")
    assert seen == [] and type(model[0]) is kernels.GemvLinear
    model(torch.randn(1, 16))
    assert seen == [1]


def test_resolve_defaults_and_refusals():
    assert kernels.resolve(None, "cpu", torch.bfloat16) == "aten"  # opt-in: measured on one CPU only
    assert kernels.resolve("gemv", "cpu", torch.bfloat16) == "gemv"
    assert kernels.resolve("GEMV", "cpu", torch.float32) == "gemv"
    with pytest.raises(InputError, match="CPU option"):
        kernels.resolve("gemv", "cuda", torch.bfloat16)
    with pytest.raises(InputError, match="cpu_linear must be one of"):
        kernels.resolve("fast", "cpu", torch.bfloat16)


def test_load_pair_picks_the_kernel_and_events_record_it():
    assert load_pair("tiny", dtype="bfloat16").cpu_linear == "aten"  # the default
    bf16 = load_pair("tiny", dtype="bfloat16", cpu_linear="gemv")
    assert bf16.cpu_linear == "gemv" and kernels.kernel_of(bf16.target) == "gemv"
    assert kernels.kernel_of(bf16.draft) == "gemv" and "cpu_linear='gemv'" in repr(bf16)
    started = next(iter(generate(bf16, "ab", method="ar", max_new_tokens=2)))
    assert started.cpu_linear == "gemv" and started.to_dict()["cpu_linear"] == "gemv"
    same = load_pair(bf16)  # a Pair passed in keeps its kernels unless one is named
    assert same is bf16 and same.cpu_linear == "gemv"
    assert load_pair(bf16, cpu_linear="aten").cpu_linear == "aten" and kernels.kernel_of(bf16.target) == "aten"


@pytest.fixture(scope="module")
def tiny_gemv():
    return load_pair("tiny", cpu_linear="gemv")  # float32: rounding differences far below any tie


@pytest.mark.parametrize("prompt", ["def f(x):", "hello world"])
def test_greedy_on_gemv_kernels_is_token_for_token_autoregressive(tiny_gemv, tiny, prompt):
    ar = list(generate(tiny_gemv, prompt, method="ar", max_new_tokens=40))[-1].token_ids
    assert ar == list(generate(tiny, prompt, method="ar", max_new_tokens=40))[-1].token_ids  # = stock
    for kw in [dict(method="spec", k=k) for k in (1, 4, 8)] + [
            dict(method="spec", k="auto"), dict(method="tree", tree="3,2,1"), dict(method="pld", k=4),
            dict(method="cascade", k=4), dict(method="lookahead")]:
        events = list(generate(tiny_gemv, prompt, max_new_tokens=40, **kw))
        assert events[-1].token_ids == ar, kw
        assert events[0].cpu_linear == "gemv"


def test_int8_draft_on_gemv_pair_keeps_the_kernel_for_many_rows(tiny_gemv, monkeypatch):
    q = quantize_draft(tiny_gemv, "int8")
    layers = [m for m in q.draft.modules() if isinstance(m, Int8Linear)]
    assert layers and all(m.gemv for m in layers) and q.cpu_linear == "gemv"
    seen = []
    real = kernels.linear
    monkeypatch.setattr(kernels, "linear", lambda *a: seen.append(1) or real(*a))
    x = torch.randn(1, 9, layers[0].in_features)  # more rows than the int8 GEMV takes
    layers[0](x)
    assert seen == [1]
    with kernels.aten_linears(q.draft):
        assert not any(m.gemv for m in layers)
        layers[0](x)
    assert seen == [1] and all(m.gemv for m in layers)


def test_bench_runs_transformers_on_stock_layers_unless_asked(tiny_gemv, monkeypatch):
    from specviz.bench import suite

    seen = []
    real = kernels.linear
    monkeypatch.setattr(kernels, "linear", lambda *a: seen.append(1) or real(*a))
    table = suite.method_table(4, 8)
    ids = tiny_gemv.encode("def f(x):")
    stock = suite.run_method(tiny_gemv, table, "hf-assisted", ids, 0.0, 8, 0)
    assert seen == [] and stock["cpu_linear"] == "aten"
    assert kernels.kernel_of(tiny_gemv.target) == "gemv"  # restored after the lane
    ours = suite.run_method(tiny_gemv, table, "hf-assisted-gemv", ids, 0.0, 8, 0)
    assert seen and ours["cpu_linear"] == "gemv"
    spec = suite.run_method(tiny_gemv, table, "spec", ids, 0.0, 8, 0)
    assert spec["cpu_linear"] == "gemv"
    assert stock["token_ids"] == ours["token_ids"] == spec["token_ids"]


def test_switching_a_pair_switches_its_int8_variant_too():
    from specviz.runtime.models import use_kernel

    pair = load_pair("tiny", cpu_linear="gemv")
    q = quantize_draft(pair, "int8")
    layers = [m for m in q.draft.modules() if isinstance(m, Int8Linear)]
    use_kernel(pair, "aten")
    assert q.cpu_linear == "aten" and kernels.kernel_of(q.draft) == "aten" and not any(m.gemv for m in layers)
    use_kernel(pair, "gemv")
    assert q.cpu_linear == "gemv" and all(m.gemv for m in layers) and kernels.kernel_of(pair.target) == "gemv"
