"""The tiny pair: random-weight Qwen2-architecture models built in-process from small configs,
with a character tokenizer. Loads in milliseconds, for tests, CI and instant demos.
"""

from __future__ import annotations

import string

import torch

from specviz.runtime.memory import resolve_device, resolve_dtype
from specviz.runtime.pair import Pair
from specviz.runtime.quant import int8_model

# the tiny pair

TINY_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<unk>"]
TINY_CHARS = [c for c in string.printable if c not in "\x0b\x0c\r"]
TINY_CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def tiny_tokenizer():
    """A character-level tokenizer (100 ids) built in-process: no files, no network."""
    from tokenizers import Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(TINY_SPECIALS + TINY_CHARS)}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    backend.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|endoftext|>",
                                  pad_token="<|endoftext|>", unk_token="<unk>",
                                  additional_special_tokens=["<|im_start|>", "<|im_end|>"])
    tok.chat_template = TINY_CHAT_TEMPLATE
    return tok


def tiny_config(vocab_size: int):
    from transformers import Qwen2Config

    return Qwen2Config(vocab_size=vocab_size, hidden_size=64, intermediate_size=128,
                       num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                       max_position_embeddings=1024, tie_word_embeddings=False,
                       initializer_range=0.35, eos_token_id=0, pad_token_id=0)


# The draft is the target with Gaussian noise on every weight: close enough to agree most of the
# time, different enough to show rejections, residual resamples and bonus tokens.
TINY_SEED, TINY_DRAFT_NOISE = 1234, 0.03


def build_tiny_pair(device=None, dtype=None) -> Pair:
    from transformers import Qwen2ForCausalLM

    device = resolve_device(device)
    dtype = resolve_dtype(dtype, device, 4)
    tokenizer = tiny_tokenizer()
    config = tiny_config(len(tokenizer))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(TINY_SEED)
        target = Qwen2ForCausalLM(config)
        draft = Qwen2ForCausalLM(config)
        noise = torch.Generator().manual_seed(TINY_SEED + 1)
        with torch.no_grad():
            for (_, w_t), (_, w_d) in zip(target.named_parameters(), draft.named_parameters()):
                w_d.copy_(w_t + TINY_DRAFT_NOISE * w_t.std().nan_to_num(0.0)
                          * torch.randn(w_t.shape, generator=noise))
    target = target.to(device=device, dtype=dtype).eval()
    draft = draft.to(device=device, dtype=dtype).eval()
    return Pair("tiny", target, draft, tokenizer, device, dtype, source="built in-process (random weights)",
                context_length=config.max_position_embeddings, eos_token_ids=[0])


def int8_pair(pair: Pair, why: dict) -> Pair:
    """A freshly built pair (its models not shared) with both models' weights made int8 in place,
    as memory="low" loads the real pair (specviz.runtime.quant.int8_model)."""

    for model in (pair.target, pair.draft):
        state = {name: t.detach() for name, t in model.state_dict().items()}
        int8_model(model, lambda name, start, stop, state=state: state[name][start:stop], pair.dtype)
    pair.target_quant = pair.draft_quant = "int8"
    pair.memory_choice = why
    return pair


# ---------------------------------------------------------------------------------------------
