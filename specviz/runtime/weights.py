"""A model's weights and tokenizer from a folder: the Hugging Face cache, a converted cache folder,
or the hub itself (network, unless HF_HUB_OFFLINE=1). `trust_remote_code` is never enabled.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Optional

import torch

from specviz.errors import PairError, WeightsMissingError
from specviz.runtime.pair import Pair, Progress
from specviz.runtime.quant import int8_model

HF_PATTERNS = ["*.json", "*.safetensors", "*.txt", "*.model", "*.tiktoken"]


def hub_offline() -> bool:
    return any(os.environ.get(var, "").lower() in ("1", "true", "yes")
               for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "SPECVIZ_OFFLINE"))


def hf_cache_folder(hub_id: str) -> Optional[Path]:
    """The snapshot folder of a model already in the HF cache (no network), or None."""
    if os.environ.get("SPECVIZ_NO_HF_CACHE"):
        return None
    try:
        from huggingface_hub import snapshot_download

        folder = Path(snapshot_download(hub_id, local_files_only=True, allow_patterns=HF_PATTERNS))
    except Exception:
        return None
    return folder if any(folder.glob("*.safetensors")) else None


def from_folder(folder: Path, device, dtype, low: bool = False):
    from transformers import AutoModelForCausalLM

    if low:
        return _int8_from_folder(folder, dtype)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, trust_remote_code=False)
    return model.to(device).eval()


def _int8_from_folder(folder: Path, dtype):
    """The folder's model with int8 weights (CPU), never holding its float weights whole.
    transformers loads a checkpoint in its own dtype lazily (its tensors map the file and are read
    on first use), so the model is built that way and specviz.runtime.quant replaces every float layer
    before anything reads it, filling the int8 ones from plain reads of the file, block by block:
    pages read through a map would count in this process's memory, pages read into a block
    leave it when the block is quantised."""
    from transformers import AutoModelForCausalLM


    model = AutoModelForCausalLM.from_pretrained(folder, dtype="auto", trust_remote_code=False)
    return int8_model(model, SafetensorsRows(folder), dtype).eval()


class SafetensorsRows:
    """`rows(name, start, stop)`: rows start:stop of a tensor in a folder's *.safetensors files
    (None, None: all of it), read with ordinary file reads into one reused buffer: the tensor
    returned is overwritten by the next call (copy what you keep), and block after block of
    fresh buffers would leave the heap fragmented, and the process's RSS higher.
    The format: an 8-byte little-endian header size, a JSON header {name: {dtype, shape,
    data_offsets}}, the data."""

    DTYPES = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32}

    def __init__(self, folder: Path):
        self.scratch = torch.empty(0, dtype=torch.uint8)
        self.index = {}
        for path in sorted(Path(folder).glob("*.safetensors")):
            with open(path, "rb") as fh:
                size = int.from_bytes(fh.read(8), "little")
                header = json.loads(fh.read(size))
            header.pop("__metadata__", None)
            self.index.update({name: (path, 8 + size, info) for name, info in header.items()})

    def __call__(self, name: str, start=None, stop=None) -> torch.Tensor:
        if name not in self.index or self.index[name][2]["dtype"] not in self.DTYPES:
            raise PairError(f"The weight files have no float tensor {name!r} that memory='low' can read: "
                            "load this pair with memory='full'.")
        path, base, info = self.index[name]
        shape, dtype = info["shape"], self.DTYPES[info["dtype"]]
        start, stop = start or 0, shape[0] if stop is None else stop
        row = math.prod(shape[1:]) * torch.tensor([], dtype=dtype).element_size()
        if self.scratch.numel() < (stop - start) * row:
            self.scratch = torch.empty((stop - start) * row, dtype=torch.uint8)
        data = self.scratch[:(stop - start) * row]
        with open(path, "rb") as fh:
            fh.seek(base + info["data_offsets"][0] + start * row)
            fh.readinto(data.numpy())
        return data.view(dtype).view(stop - start, *shape[1:])


def load_tokenizer(folder):
    """The folder's tokenizer. A plain `tokenizers` tokenizer (tokenizer_class TokenizersBackend)
    is loaded as such: AutoTokenizer would otherwise swap in the model type's own class."""
    import json

    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    config = Path(folder) / "tokenizer_config.json"
    if config.exists():
        declared = json.loads(config.read_text()).get("tokenizer_class")
        if declared in ("TokenizersBackend", "PreTrainedTokenizerFast"):
            return PreTrainedTokenizerFast.from_pretrained(folder)
    return AutoTokenizer.from_pretrained(folder, trust_remote_code=False)


def eos_ids(tokenizer, model) -> list:
    """Every id that ends a turn: the tokenizer's EOS, the generation config's, and chat ends."""
    ids = set()
    for value in (tokenizer.eos_token_id, getattr(model.generation_config, "eos_token_id", None)):
        if isinstance(value, int):
            ids.add(value)
        elif value:
            ids.update(value)
    vocab = tokenizer.get_vocab()
    ids.update(vocab[t] for t in ("<|im_end|>", "<|endoftext|>", "<|eot_id|>") if t in vocab)
    return sorted(ids)


def check_same_tokenizer(target_tok, draft_tok, name: str) -> None:
    """Speculative decoding compares token ids: both models must share one vocabulary."""
    probe = "def fibonacci(n):\n    return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)  # héllo 日本"
    same = (target_tok.get_vocab() == draft_tok.get_vocab()
            and set(target_tok.all_special_tokens) == set(draft_tok.all_special_tokens)
            and target_tok.encode(probe, add_special_tokens=False)
            == draft_tok.encode(probe, add_special_tokens=False))
    if not same:
        raise PairError(f"The target and draft tokenizers of {name} differ "
                        f"({len(target_tok)} vs {len(draft_tok)} tokens): speculative decoding needs "
                        "one shared vocabulary, so pick a draft model of the same family.")


def load_custom(target_id: str, draft_id: str, device, dtype, say: Progress) -> Pair:
    from transformers import AutoModelForCausalLM

    def one(model_id):
        try:
            tok = load_tokenizer(model_id)
            say(0.0, f"loading {model_id}")
            model = AutoModelForCausalLM.from_pretrained(model_id, dtype=dtype, trust_remote_code=False)
        except (OSError, ValueError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise WeightsMissingError(f"Cannot load {model_id!r}: {first}") from None
        return model.to(device).eval(), tok

    target, target_tok = one(target_id)
    draft, draft_tok = one(draft_id)
    name = f"target={target_id},draft={draft_id}"
    check_same_tokenizer(target_tok, draft_tok, name)
    return Pair(name, target, draft, target_tok, device, dtype, source="custom",
                context_length=getattr(target.config, "max_position_embeddings", 2048),
                eos_token_ids=eos_ids(target_tok, target))


# ---------------------------------------------------------------------------------------------
