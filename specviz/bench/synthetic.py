"""Random-weight pairs of real sizes, for timing where real weights cannot be had (a GPU machine
that cannot receive them). Speed depends on shapes, not on weight values; acceptance does not
transfer, so such a pair is measured with the controlled-acceptance drafter (the alpha sweep),
plus the verify-cost curve, the batch proxy and the bandwidth limit. Output text is meaningless.

`random:<target>/<draft>` with sizes from SIZES: Qwen2.5 0.5B, 1.5B and 7B shapes (vocab 151,936),
and `tiny` for tests. Weights are drawn on the device itself (a 7B in bf16 is ~15 GB: never on the
CPU first), with a fixed seed. The output head is scaled up (`HEAD_SCALE`) so the random logits
have clear maxima: otherwise argmax near-ties flip between a one-token and a multi-token forward
in bf16 and the controlled drafter's alpha would drift below its a_set.
The tokenizer maps bytes to ids 1000..1255 and shows other ids as <id>.
"""

from __future__ import annotations

import torch

from specviz.runtime.memory import resolve_device, resolve_dtype
from specviz.runtime.pair import Pair

SIZES = {
    # hidden, intermediate, layers, heads, kv heads, tied embeddings (Qwen2.5 configs)
    "0.5b": (896, 4864, 24, 14, 2, True),
    "1.5b": (1536, 8960, 28, 12, 2, True),
    "7b": (3584, 18944, 28, 28, 4, False),
    "tiny": (64, 128, 2, 4, 2, False),
}
VOCAB = 151_936
EOS = 151_643
HEAD_SCALE = 8.0
BYTE_BASE = 1000


class ByteTokenizer:
    """Bytes <-> ids BYTE_BASE..BYTE_BASE+255; enough of a tokenizer for the engine and generate()."""

    pad_token_id = EOS
    eos_token_id = EOS

    def encode(self, text: str, add_special_tokens: bool = False) -> list:
        return [BYTE_BASE + b for b in text.encode("utf-8")]

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        ids = [int(i) for i in ids]
        raw = bytes(i - BYTE_BASE for i in ids if BYTE_BASE <= i < BYTE_BASE + 256)
        if all(BYTE_BASE <= i < BYTE_BASE + 256 for i in ids):
            return raw.decode("utf-8", errors="replace")
        return "".join(chr(i - BYTE_BASE) if BYTE_BASE + 32 <= i < BYTE_BASE + 127 else f"<{i}>" for i in ids)

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True) -> str:
        text = "".join(f"<|{m['role']}|>\n{m['content']}\n" for m in messages)
        return text + ("<|assistant|>\n" if add_generation_prompt else "")

    def __len__(self) -> int:
        return VOCAB


def config(size: str):
    from transformers import Qwen2Config

    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}: one of {', '.join(SIZES)}")
    hidden, inter, layers, heads, kv, tied = SIZES[size]
    return Qwen2Config(vocab_size=VOCAB, hidden_size=hidden, intermediate_size=inter,
                       num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv,
                       max_position_embeddings=32768, tie_word_embeddings=tied, rope_theta=1e6,
                       eos_token_id=EOS, pad_token_id=EOS, bos_token_id=EOS)


def random_model(size: str, device, dtype, seed: int):
    from transformers import Qwen2ForCausalLM

    with torch.random.fork_rng(devices=[device] if torch.device(device).type == "cuda" else []):
        torch.manual_seed(seed)
        with torch.device(device):
            model = Qwen2ForCausalLM._from_config(config(size), dtype=dtype)
        with torch.no_grad():
            model.get_output_embeddings().weight.mul_(HEAD_SCALE)
    return model.eval()


def random_pair(spec: str, device=None, dtype=None):
    """`random:<target>/<draft>` -> a specviz Pair of random-weight models of those sizes."""

    sizes = spec.split(":", 1)[1].split("/")
    if len(sizes) != 2:
        raise ValueError(f"expected random:<target>/<draft>, got {spec!r}")
    device = resolve_device(device)
    dtype = resolve_dtype(dtype, device, 2)
    target = random_model(sizes[0], device, dtype, seed=1)
    draft = random_model(sizes[1], device, dtype, seed=2)
    return Pair(f"random-{sizes[0]}-{sizes[1]}", target, draft, ByteTokenizer(), device, dtype,
                source="random weights of real shapes (timing only)", context_length=32768,
                eos_token_ids=[EOS])
