"""specviz.runtime.cpu: the real pair's CPU default dtype follows what this CPU's few-row products cost.

On a CPU without native bf16 (AVX2), a 5-row bf16 product costs ~4-7x a 1-row one, so the
verify pass has no memory wall and speculation cannot pay off in bf16: the default there is
float32 with the cheaper kernel. Where bf16 is native, bf16 + nn.Linear stays the default.
"""

import pytest
import torch

from specviz import load_pair
from specviz.runtime import cpu, memory, models, tiny_pair
from specviz.runtime.quant import Int8Linear, quantize_draft

# measured shapes of the two kinds of CPU (ms per product, one 8960x1536 layer)
AVX2 = {"bf16/aten/1": 1.5, "bf16/aten/5": 7.1, "fp32/aten/1": 3.0, "fp32/gemv/1": 3.0,
        "fp32/aten/5": 11.2, "fp32/gemv/5": 5.1}  # AMD EPYC Zen 3, 2 cores
NATIVE = {"bf16/aten/1": 1.2, "bf16/aten/5": 1.3, "fp32/aten/1": 2.4, "fp32/gemv/1": 2.4,
          "fp32/aten/5": 2.9, "fp32/gemv/5": 2.6}  # AMX / AVX-512 BF16 server part


def test_native_bf16_keeps_bf16_and_nn_linear():
    choice = cpu.choose(NATIVE)
    assert (choice.dtype, choice.kernel) == (torch.bfloat16, "aten")
    assert "1.1x" in choice.note and "native bf16" in choice.note


def test_emulated_bf16_takes_float32_with_the_cheaper_kernel():
    choice = cpu.choose(AVX2)
    assert (choice.dtype, choice.kernel) == (torch.float32, "gemv")
    assert "4.7x" in choice.note and "no native bf16" in choice.note and "1.7x" in choice.note
    aten_cheaper = dict(AVX2, **{"fp32/gemv/5": 12.0})
    assert cpu.choose(aten_cheaper).kernel == "aten"
    assert cpu.float32_kernel(AVX2) == "gemv" and cpu.float32_kernel(aten_cheaper) == "aten"
    assert cpu.choose(AVX2).to_dict()["dtype"] == "float32"


def test_no_room_for_float32_keeps_bf16_and_says_what_it_costs():
    choice = cpu.choose(AVX2, fp32_fits=False)
    assert choice.dtype == torch.bfloat16 and "would not fit in memory" in choice.note
    assert "speculation can hardly pay off" in choice.note


def test_the_boundary_is_the_wall_ratio():
    at = dict(NATIVE, **{"bf16/aten/5": NATIVE["bf16/aten/1"] * cpu.WALL})
    assert cpu.choose(at).dtype == torch.bfloat16
    over = dict(NATIVE, **{"bf16/aten/5": NATIVE["bf16/aten/1"] * cpu.WALL * 1.01})
    assert cpu.choose(over).dtype == torch.float32


def test_measure_times_every_configuration():
    costs = cpu.measure(shape=(256, 128), repeats=2)
    assert set(costs) == set(AVX2)
    assert all(0 < ms < 1000 for ms in costs.values())
    assert cpu.choose(costs).dtype in (torch.bfloat16, torch.float32)


@pytest.fixture
def fake_qwen(monkeypatch):
    """load_pair('qwen-coder') with the tiny models in place of the weights: only the choice is
    tested. Records (dtype, int8 weights?) of each load."""
    loaded = []
    monkeypatch.delenv("SPECVIZ_MEMORY", raising=False)

    def load(device, dtype, say, low=False):
        loaded.append((dtype, low))
        pair = tiny_pair.build_tiny_pair(device, dtype)
        pair = tiny_pair.int8_pair(pair, None) if low else pair
        pair.name = "qwen-coder"
        return pair

    monkeypatch.setattr(models, "_load_qwen", load)
    return loaded


def test_load_pair_on_an_avx2_cpu_defaults_to_float32_gemv(fake_qwen, monkeypatch):
    monkeypatch.setattr(cpu, "measured", lambda: AVX2)
    monkeypatch.setattr(memory, "available_memory", lambda device: 64 * 2**30)
    pair = load_pair("qwen-coder", device="cpu")
    assert fake_qwen == [(torch.float32, False)] and pair.dtype == torch.float32 and pair.cpu_linear == "gemv"
    assert pair.cpu_choice["dtype"] == "float32" and "no native bf16" in pair.cpu_choice["note"]
    assert pair.memory_choice is None and pair.target_quant == "none"
    named = load_pair("qwen-coder", device="cpu", cpu_linear="aten")  # a named kernel wins
    assert named.dtype == torch.float32 and named.cpu_linear == "aten"
    monkeypatch.setattr(memory, "available_memory", lambda device: 6 * 2**30)  # 10 GiB of fp32 won't fit
    small = load_pair("qwen-coder", device="cpu", memory="full")  # float weights asked for: bf16
    assert small.dtype == torch.bfloat16 and small.cpu_linear == "aten" and small.target_quant == "none"


def test_load_pair_with_native_bf16_keeps_the_old_default(fake_qwen, monkeypatch):
    monkeypatch.setattr(cpu, "measured", lambda: NATIVE)
    # memory="auto" reads the machine's free memory: pinned, or a busy runner (another worker's
    # models, a process holding a few GB) makes it choose the int8 pair and this test fail
    monkeypatch.setattr(memory, "available_memory", lambda device: 64 * 2**30)
    pair = load_pair("qwen-coder", device="cpu")
    assert pair.dtype == torch.bfloat16 and pair.cpu_linear == "aten" and pair.cpu_choice["kernel"] == "aten"


def test_an_explicit_dtype_skips_the_measurement(fake_qwen, monkeypatch):
    def refuse():
        raise AssertionError("measured although a dtype was given")

    monkeypatch.setattr(cpu, "measured", refuse)
    pair = load_pair("qwen-coder", device="cpu", dtype="bfloat16")
    assert pair.dtype == torch.bfloat16 and pair.cpu_choice is None and pair.cpu_linear == "aten"
    assert load_pair("tiny").cpu_choice is None  # the tiny pair is float32 anyway


def test_int8_draft_of_a_float32_pair_runs_its_kernel_on_bf16_activations():
    pair = load_pair("tiny", dtype="float32")
    layer = next(m for m in quantize_draft(pair, "int8").draft.modules() if isinstance(m, Int8Linear))
    assert layer.compute == torch.bfloat16 and layer.scale.dtype == torch.bfloat16
    x = torch.randn(1, 3, layer.in_features)
    y = layer(x)
    assert y.dtype == torch.float32 and y.shape == (1, 3, layer.out_features)
    ref = torch.nn.functional.linear(x, layer.weight, layer.bias)
    assert (y - ref).norm() <= 0.03 * ref.norm()  # int8 weights, bf16 activations: close, not equal
    assert not torch.equal(y, ref)


# --- memory="auto": int8 weights when the CPU's float pair would not fit ---------------------

def _messages():
    said = []
    return said, lambda fraction, message: said.append(message)


@pytest.mark.parametrize("costs, have_gib, full", [(AVX2, 8, "float32"), (NATIVE, 5, "bfloat16")],
                         ids=["avx2-laptop", "native-bf16-laptop"])
def test_auto_memory_takes_int8_weights_when_the_float_pair_would_not_fit(fake_qwen, monkeypatch,
                                                                          costs, have_gib, full):
    monkeypatch.setattr(cpu, "measured", lambda: costs)
    monkeypatch.setattr(memory, "available_memory", lambda device: have_gib * 2**30)
    said, progress = _messages()
    pair = load_pair("qwen-coder", device="cpu", progress=progress)
    assert fake_qwen == [(torch.float32, True)]  # int8 weights, float parts in float32
    assert pair.target_quant == pair.draft_quant == "int8" and pair.cpu_linear == "aten"
    reason = pair.memory_choice["reason"]
    assert reason.startswith(f"the {full} pair needs about ") and f"and {have_gib}.0 GiB is available" in reason
    assert pair.memory_choice["need_bytes"] > pair.memory_choice["available_bytes"]
    assert any("int8 weights for both models" in m and reason in m and "the int8 target is the model being decoded"
               in m for m in said)
    assert "target_quant='int8'" in repr(pair)


def test_auto_memory_keeps_float_weights_that_fit(fake_qwen, monkeypatch):
    monkeypatch.setattr(cpu, "measured", lambda: NATIVE)
    monkeypatch.setattr(memory, "available_memory", lambda device: 6 * 2**30)  # bf16 needs ~5.5 GiB
    pair = load_pair("qwen-coder", device="cpu")
    assert fake_qwen == [(torch.bfloat16, False)] and pair.memory_choice is None


def test_memory_mode_forced_by_argument_or_environment(fake_qwen, monkeypatch):
    monkeypatch.setattr(cpu, "measured", lambda: NATIVE)
    monkeypatch.setattr(memory, "available_memory", lambda device: 64 * 2**30)
    assert load_pair("qwen-coder", device="cpu", memory="low").memory_choice["reason"].startswith("asked for")
    monkeypatch.setenv("SPECVIZ_MEMORY", "low")
    env = load_pair("qwen-coder", device="cpu")
    assert env.target_quant == "int8" and "SPECVIZ_MEMORY=low" in env.memory_choice["reason"]
    assert load_pair("qwen-coder", device="cpu", memory="full").target_quant == "none"  # the argument wins
    monkeypatch.setenv("SPECVIZ_MEMORY", "full")
    monkeypatch.setattr(memory, "available_memory", lambda device: 2**30)
    assert load_pair("qwen-coder", device="cpu").target_quant == "none"
    named = load_pair("qwen-coder", device="cpu", dtype="bfloat16", memory="low")  # dtype: the float parts
    assert named.dtype == torch.bfloat16 and named.target_quant == "int8"
    assert fake_qwen[-1] == (torch.bfloat16, True)


def test_a_named_dtype_is_never_switched_to_int8(fake_qwen, monkeypatch):
    monkeypatch.setattr(memory, "available_memory", lambda device: 2**30)
    monkeypatch.setattr(cpu, "measured", lambda: (_ for _ in ()).throw(AssertionError("measured")))
    pair = load_pair("qwen-coder", device="cpu", dtype="float32")  # the real loader would refuse: too small
    assert fake_qwen == [(torch.float32, False)] and pair.memory_choice is None


def test_a_kernel_cannot_be_named_for_int8_weights(fake_qwen):
    """Refused before any weights load."""
    from specviz.errors import InputError

    with pytest.raises(InputError, match="every product runs on the int8 kernel"):
        load_pair("qwen-coder", device="cpu", memory="low", cpu_linear="gemv")
    assert fake_qwen == []
