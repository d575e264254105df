"""A tiny real GGUF file (Qwen2 architecture, byte-level BPE tokenizer), written from a seeded
random model, for tests of the packaged-weights path: split into "parts", it goes through the
same assembly, checksums, de-quantisation by transformers, safetensors cache and load as the
real pair's 1.6 GB of parts, in a fraction of a second.

Weights are F32 (norms, biases) and Q8_0 (matrices, as llama.cpp stores quantised weights), so
the de-quantisation is real; `logits_of` lets tests compare what every process loaded.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import torch

SEED = 7
HIDDEN, FFN, LAYERS, HEADS, KV_HEADS, CONTEXT = 64, 128, 2, 4, 2, 256
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MERGES = ["Ġ t", "h e"]


def _byte_tokens() -> list:
    """GPT-2's byte-to-unicode table: the 256 single-byte tokens of a byte-level BPE."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


def tokens() -> list:
    return _byte_tokens() + ["Ġt", "he"] + SPECIALS


def _weights() -> dict:
    """{llama.cpp tensor name: float32 array in llama.cpp's (out, in) layout}, seeded."""
    rng = np.random.default_rng(SEED)
    vocab, head_dim = len(tokens()), HIDDEN // HEADS
    shapes = {"token_embd.weight": (vocab, HIDDEN), "output_norm.weight": (HIDDEN,), "output.weight": (vocab, HIDDEN)}
    for i in range(LAYERS):
        shapes.update({f"blk.{i}.attn_norm.weight": (HIDDEN,), f"blk.{i}.ffn_norm.weight": (HIDDEN,),
                       f"blk.{i}.attn_q.weight": (HIDDEN, HIDDEN), f"blk.{i}.attn_q.bias": (HIDDEN,),
                       f"blk.{i}.attn_k.weight": (KV_HEADS * head_dim, HIDDEN), f"blk.{i}.attn_k.bias": (KV_HEADS * head_dim,),
                       f"blk.{i}.attn_v.weight": (KV_HEADS * head_dim, HIDDEN), f"blk.{i}.attn_v.bias": (KV_HEADS * head_dim,),
                       f"blk.{i}.attn_output.weight": (HIDDEN, HIDDEN), f"blk.{i}.ffn_gate.weight": (FFN, HIDDEN),
                       f"blk.{i}.ffn_up.weight": (FFN, HIDDEN), f"blk.{i}.ffn_down.weight": (HIDDEN, FFN)})
    out = {}
    for name, shape in shapes.items():
        if name.endswith("norm.weight"):
            out[name] = (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
        else:
            out[name] = (0.3 * rng.standard_normal(shape)).astype(np.float32)
    return out


def write(path: Path) -> dict:
    """Write the GGUF to `path`; {size, sha256, params}."""
    import gguf
    from gguf.quants import quantize

    w = gguf.GGUFWriter(str(path), "qwen2")
    w.add_context_length(CONTEXT)
    w.add_embedding_length(HIDDEN)
    w.add_block_count(LAYERS)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    toks = tokens()
    w.add_token_list(toks)
    w.add_token_types([1] * (len(toks) - len(SPECIALS)) + [3] * len(SPECIALS))
    w.add_token_merges(MERGES)
    w.add_eos_token_id(toks.index("<|im_end|>"))
    w.add_bos_token_id(toks.index("<|endoftext|>"))
    w.add_pad_token_id(toks.index("<|endoftext|>"))
    params = 0
    for name, array in _weights().items():
        params += array.size
        if array.ndim == 2:
            w.add_tensor(name, quantize(array, gguf.GGMLQuantizationType.Q8_0),
                         raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            w.add_tensor(name, array)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    data = Path(path).read_bytes()
    return {"size": len(data), "sha256": hashlib.sha256(data).hexdigest(), "params": params}


def split(path: Path, folder: Path, parts: int = 3) -> list:
    """Cut the file into `parts` consecutive pieces, as the PyPI part packages hold the real
    GGUFs; [(piece path, sha256)] in order."""
    data = Path(path).read_bytes()
    step = -(-len(data) // parts)
    out = []
    for n in range(parts):
        piece = Path(folder) / f"part{n + 1:02d}.bin"
        piece.write_bytes(data[n * step:(n + 1) * step])
        out.append((str(piece), hashlib.sha256(piece.read_bytes()).hexdigest()))
    return out


PROBE = [104, 101, 108, 108, 111, 32, 256, 257]  # byte ids ("hello ") and the two merged tokens


@torch.no_grad()
def logits_of(model) -> list:
    """The model's last-position logits on PROBE, rounded for comparison across processes."""
    out = model(torch.tensor([PROBE])).logits[0, -1].float()
    return [round(v, 4) for v in out.tolist()]
