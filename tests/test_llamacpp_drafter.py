"""specviz's EAGLE-3 and DFlash in llama.cpp's layout (head_nets.Eagle3LlamaNet, DFlashLlamaNet)
and their GGUF (specviz.runtime.llamacpp.drafter): the function llama.cpp's draft-eagle3 computes,
written with the keys and tensors llama.cpp reads and read back. The runs in llama.cpp and
llama-server themselves, which need the patched llama.cpp and the real pair, are in
tests/test_llamacpp.py."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from specviz.runtime.head_nets import DFlashLlamaNet, Eagle3LlamaNet, HeadSet, HeadsError, _rope, make_net
from specviz.runtime.llamacpp.drafter import export_drafter, permute_rows, read_drafter, unpermute_rows


def _pairwise_rope(x: np.ndarray, pos: int, theta: float) -> np.ndarray:
    """llama.cpp's NORM rotation of one head's vector: dims (2i, 2i + 1) by pos * theta^(-2i/dh)."""
    dh, out = x.shape[-1], x.copy()
    for i in range(dh // 2):
        a = pos * theta ** (-2 * i / dh)
        c, s = math.cos(a), math.sin(a)
        out[..., 2 * i] = x[..., 2 * i] * c - x[..., 2 * i + 1] * s
        out[..., 2 * i + 1] = x[..., 2 * i] * s + x[..., 2 * i + 1] * c
    return out


def test_permuted_rows_under_pairwise_rotation_give_the_same_attention_scores():
    """The export's row order: llama.cpp rotates pairs (2i, 2i + 1), the network halves (i, i + dh/2);
    the permuted projections must give the same query-key products at every pair of positions."""
    rng = np.random.default_rng(0)
    heads, dh, width, theta = 2, 16, 24, 10000.0
    wq, wk = rng.standard_normal((heads * dh, width)), rng.standard_normal((heads * dh, width))
    x, y = rng.standard_normal(width), rng.standard_normal(width)
    for pq, pk in ((0, 0), (3, 1), (17, 9)):
        half_q = _rope(torch.tensor(wq @ x).view(heads, 1, dh), torch.tensor([pq]), theta)[:, 0].numpy()
        half_k = _rope(torch.tensor(wk @ y).view(heads, 1, dh), torch.tensor([pk]), theta)[:, 0].numpy()
        pair_q = _pairwise_rope((permute_rows(wq, heads) @ x).reshape(heads, dh), pq, theta)
        pair_k = _pairwise_rope((permute_rows(wk, heads) @ y).reshape(heads, dh), pk, theta)
        np.testing.assert_allclose((pair_q * pair_k).sum(-1), (half_q * half_k).sum(-1), rtol=1e-5)
        if pq != pk:  # without the permutation, llama.cpp's rotation would give other scores
            plain_q = _pairwise_rope((wq @ x).reshape(heads, dh), pq, theta)
            plain_k = _pairwise_rope((wk @ y).reshape(heads, dh), pk, theta)
            assert not np.allclose((plain_q * plain_k).sum(-1), (half_q * half_k).sum(-1), rtol=1e-3)
    assert (unpermute_rows(permute_rows(wq, heads), heads) == wq).all()


def _reference(net: Eagle3LlamaNet, states: torch.Tensor, tokens_e: torch.Tensor) -> torch.Tensor:
    """llama.cpp's eagle3 graph written out step by step (src/models/eagle3.cpp), one sequence, causal."""
    def rms(x, w, eps):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w
    eps = net.norm_e.eps
    g = states[:, :3].reshape(len(states), -1) @ net.fc.weight.T  # no norm before fc
    cur = torch.cat([rms(tokens_e, net.norm_e.weight, eps), rms(g, net.norm_g.weight, eps)], -1)
    t, dh, h, kv = len(cur), net.head_dim, net.n_heads, net.kv_heads
    q = _rope((cur @ net.q.weight.T).view(t, h, dh).transpose(0, 1), torch.arange(t), net.theta)
    k = _rope((cur @ net.k.weight.T).view(t, kv, dh).transpose(0, 1), torch.arange(t), net.theta)
    v = (cur @ net.v.weight.T).view(t, kv, dh).transpose(0, 1)
    scores = (q @ k.repeat_interleave(h // kv, 0).transpose(1, 2)) / math.sqrt(dh)
    scores = scores.masked_fill(~torch.ones(t, t, dtype=torch.bool).tril(), float("-inf"))
    attn = (scores.softmax(-1) @ v.repeat_interleave(h // kv, 0)).transpose(0, 1).reshape(t, h * dh)
    ffn_inp = attn @ net.o.weight.T + g  # the residual starts from the raw g
    m = rms(ffn_inp, net.norm_mlp.weight, eps)
    return (F.silu(m @ net.gate.weight.T) * (m @ net.up.weight.T)) @ net.down.weight.T + ffn_inp


@pytest.fixture
def small_net():
    torch.manual_seed(0)
    net = make_net("eagle3", {"hidden": 64, "vocab_size": 100, "draft_vocab": 40, "layout": "llama", "heads": 4,
                              "kv_heads": 2, "mlp": 96, "slots": 3, "layers": [1, 2, 3]})
    for p in net.parameters():  # norms away from 1, so a swapped norm shows
        p.data.add_(torch.randn_like(p) * 0.2)
    return net.eval()


def test_the_layer_is_llama_cpps_function(small_net):
    states, e = torch.randn(7, 4, 64) * 3, torch.randn(7, 64)
    with torch.no_grad():
        h, _ = small_net(states, e, torch.arange(7))
        torch.testing.assert_close(h, _reference(small_net, states, e), rtol=1e-4, atol=1e-4)
        # fed in two pieces with its cache: the same outputs (the drafter feeds it step by step)
        a, cache = small_net(states[:4], e[:4], torch.arange(4))
        b, _ = small_net(states[4:], e[4:], torch.arange(4, 7), cache)
        torch.testing.assert_close(torch.cat([a, b]), h, rtol=1e-5, atol=1e-5)
        # a fed-back output (T, d) passes the fusion by: deeper depths read h, not fc(h)
        assert torch.equal(small_net.features(h), h)


def test_only_eagle3_and_dflash_have_the_llama_layout():
    with pytest.raises(ValueError, match="eagle3 and dflash"):
        make_net("medusa", {"hidden": 64, "vocab_size": 100, "layout": "llama"})
    from specviz.errors import InputError
    from specviz.training.train import train
    from specviz.training.trainer import TrainConfig

    with pytest.raises(InputError, match="eagle3 and dflash"):
        TrainConfig("eagle", layout="llama").net_config(64, 100, 100, [1, 2, 3])
    with pytest.raises(InputError, match="no anchor state"):  # refused before any model or data
        train("dflash", "no-such-pair", tokens=4096, layout="llama", anchor_state=True)
    with pytest.raises(InputError, match="draft-layers must be"):
        train("dflash", "no-such-pair", tokens=4096, draft_layers=0)
    config = TrainConfig("dflash", layout="llama", block=4, draft_layers=1).net_config(1536, 100, 60, [2, 14, 25], 9)
    assert config == {"hidden": 1536, "vocab_size": 100, "draft_vocab": 60, "layout": "llama", "heads": 12,
                      "kv_heads": 2, "mlp": 1536, "slots": 3, "layers": [2, 14, 25], "n_layers": 1, "block": 4,
                      "mask_token": 9}


def _fake_target(path):
    """A GGUF with what the export copies from a target: its architecture, context and tokenizer."""
    import gguf

    w = gguf.GGUFWriter(str(path), "qwen2")
    w.add_uint32("qwen2.context_length", 4096)
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_array("tokenizer.ggml.tokens", [f"t{i}" for i in range(100)])
    w.add_array("tokenizer.ggml.token_type", [1] * 100)
    w.add_uint32("tokenizer.ggml.eos_token_id", 7)
    w.add_tensor("token_embd.weight", np.zeros((100, 32), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _exported(kind, net, tmp_path):
    """`net` as `kind`'s heads over a 100-token target, exported: the file, its fields and tensor shapes."""
    from specviz.runtime.llamacpp.runner import gguf_reader

    ids = torch.tensor(sorted(np.random.default_rng(1).choice(100, 40, replace=False)))
    heads = HeadSet(kind, net, ids, {"hidden": 64, "vocab_size": 100, "layers": [1, 2, 3], "layout": "llama"},
                    {"sha256": "ab" * 32})
    rows = torch.randn(100, 64)
    out = export_drafter(heads, _fake_target(tmp_path / "target.gguf"), tmp_path / "draft.gguf", rows)
    reader = gguf_reader(out)
    shapes = {t.name: [int(n) for n in t.shape] for t in reader.tensors}  # ggml order: (in, out)
    return out, ids, rows, (lambda k: reader.fields[k].contents()), shapes


def test_the_gguf_holds_what_llama_cpp_reads_and_reads_back_as_the_same_network(small_net, tmp_path):
    out, ids, rows, field, shapes = _exported("eagle3", small_net, tmp_path)
    assert field("general.architecture") == "eagle3"
    assert field("eagle3.target_layers") == [1, 2, 3] and field("eagle3.target_hidden_size") == 64
    assert field("eagle3.block_count") == 1 and field("eagle3.attention.head_count_kv") == 2
    assert field("eagle3.context_length") == 4096 and field("tokenizer.ggml.tokens")[:2] == ["t0", "t1"]
    assert field("tokenizer.ggml.eos_token_id") == 7
    assert shapes["fc.weight"] == [192, 64] and shapes["blk.0.attn_q.weight"] == [128, 64]
    assert shapes["blk.0.attn_k.weight"] == [128, 32] and shapes["output.weight"] == [64, 40]
    assert shapes["d2t"] == [40] and "token_embd.weight" not in shapes  # the target's embeddings

    net, got_ids, layers, got_rows = read_drafter(out)
    assert torch.equal(got_ids, ids) and layers == (1, 2, 3)
    torch.testing.assert_close(got_rows, rows[ids], rtol=0, atol=0.02)  # Q8_0
    states, e = torch.randn(6, 4, 64), torch.randn(6, 64)
    with torch.no_grad():
        want, _ = small_net(states, e, torch.arange(6))
        got, _ = net(states, e, torch.arange(6))
    assert F.cosine_similarity(got, want, dim=-1).min() > 0.999  # Q8_0 weights, the same function


def test_specviz_layer_heads_are_refused_with_the_command_that_trains_the_other(tmp_path):
    net = make_net("eagle3", {"hidden": 64, "vocab_size": 100, "width": 32, "heads": 2, "mlp": 48, "slots": 3,
                              "layers": [1, 2, 3]})
    heads = HeadSet("eagle3", net, None, {"hidden": 64, "vocab_size": 100, "layers": [1, 2, 3]}, {})
    with pytest.raises(HeadsError, match="--layout llama"):
        export_drafter(heads, tmp_path / "none.gguf", tmp_path / "out.gguf", torch.zeros(100, 64))


def test_the_dflash_gguf_holds_what_llama_cpp_reads_and_reads_back_as_the_same_network(tmp_path):
    torch.manual_seed(0)
    net = DFlashLlamaNet(64, heads=4, kv_heads=2, mlp=96, slots=3, n_layers=2, block=4, mask_token=9).eval()
    for p in net.parameters():  # norms away from 1, so a swapped norm shows
        p.data.add_(torch.randn_like(p) * 0.2)
    out, ids, rows, field, shapes = _exported("dflash", net, tmp_path)
    assert field("general.architecture") == "dflash"
    assert field("dflash.target_layers") == [1, 2, 3] and field("dflash.block_size") == 4
    assert field("dflash.block_count") == 2 and field("dflash.attention.head_count_kv") == 2
    assert field("tokenizer.ggml.mask_token_id") == 9 and field("tokenizer.ggml.tokens")[:2] == ["t0", "t1"]
    assert shapes["fc.weight"] == [192, 64] and shapes["enc.output_norm.weight"] == [64]
    assert shapes["blk.1.attn_q.weight"] == [64, 64] and shapes["blk.1.attn_k.weight"] == [64, 32]
    assert shapes["blk.0.attn_q_norm.weight"] == [16] and shapes["blk.1.ffn_down.weight"] == [96, 64]
    assert shapes["output.weight"] == [64, 40] and shapes["d2t"] == [40] and "token_embd.weight" not in shapes

    back, got_ids, layers, got_rows = read_drafter(out)
    assert isinstance(back, DFlashLlamaNet) and back.block_size == 4 and back.mask_token == 9
    assert torch.equal(got_ids, ids) and layers == (1, 2, 3)
    mask = torch.randn(64)
    net.set_mask(mask)
    back.set_mask(mask)
    states, anchor = torch.randn(6, 4, 64), torch.randn(1, 64)
    with torch.no_grad():
        outs = []
        for m in (net, back):
            kv = m.context_kv(m.context(states), torch.arange(6))
            outs.append(m(m.block(anchor, 4), torch.arange(6, 10), kv))
    assert F.cosine_similarity(outs[0], outs[1], dim=-1).min() > 0.999  # Q8_0 weights, the same function
