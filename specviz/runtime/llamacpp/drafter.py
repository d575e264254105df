"""specviz's EAGLE-3 drafter as a GGUF file that llama.cpp's own loop runs (`draft-eagle3`).

    python -m specviz llamacpp drafter eagle3            (writes it into the cache; seconds)
    python -m specviz llamacpp serve --drafter eagle3    (llama-server with it, until Ctrl-C)

The network is head_nets.Eagle3LlamaNet, trained by `python -m specviz train eagle3 --layout
llama` on the llama.cpp pair's own states (the target's layer inputs from llama.cpp's passes).
llama.cpp reads (src/models/eagle3.cpp, common/speculative.cpp):

  keys     eagle3.{context_length, embedding_length, block_count = 1, feed_forward_length,
           attention.head_count, attention.head_count_kv, attention.layer_norm_rms_epsilon,
           rope.freq_base, target_layers (the three layer inputs, transformers' numbering),
           target_hidden_size}, and the target's tokenizer (llama-server refuses a draft whose
           vocabulary differs from the target's)
  tensors  fc (3d -> d), blk.0.{attn_norm (on the token embedding), attn_norm_2 (on g),
           attn_q, attn_k, attn_v (2d ->), attn_output, ffn_norm, ffn_gate, ffn_up, ffn_down},
           output_norm, output (the draft vocabulary's rows), d2t (draft row -> target token id,
           int64). The token embeddings are the target's own (none in the file).

The output rows are the target's own (the GGUF's output head, de-quantised, cut to the draft
vocabulary), as specviz's heads read them; llama.cpp requires them in the file when `d2t` is
there. So the shipped heads file stays small (the layer only) and the GGUF is assembled here,
once per heads file and target type, in the cache. Matrices are stored as Q8_0, the norms as F32;
the query and key rows are permuted for llama.cpp's pairwise rotation (as its converter does for
LLaMA checkpoints; head_nets rotates halves).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np
import torch

from specviz import files
from specviz.errors import InputError, PairError
from specviz.runtime.head_nets import Eagle3LlamaNet, HeadSet, HeadsError

ARCH = "eagle3"
DRAFTERS = ("eagle3",)
LLAMA_FOLDER = "llama.cpp"  # <heads folder>/llama.cpp: the heads in llama.cpp's layout (shipped or trained)


def permute_rows(w: np.ndarray, heads: int) -> np.ndarray:
    """Query or key rows (heads * dh, in) from the half rotation (i with i + dh/2) to llama.cpp's
    pairwise one (2i with 2i + 1): llama.cpp's convert_hf_to_gguf `permute`."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def unpermute_rows(w: np.ndarray, heads: int) -> np.ndarray:
    return w.reshape(heads, w.shape[0] // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


# the network's weights and llama.cpp's tensor names; matrices are stored Q8_0, norms F32
MATRICES = {"fc": "fc.weight", "q": "blk.0.attn_q.weight", "k": "blk.0.attn_k.weight", "v": "blk.0.attn_v.weight",
            "o": "blk.0.attn_output.weight", "gate": "blk.0.ffn_gate.weight", "up": "blk.0.ffn_up.weight",
            "down": "blk.0.ffn_down.weight"}
NORMS = {"norm_e": "blk.0.attn_norm.weight", "norm_g": "blk.0.attn_norm_2.weight",
         "norm_mlp": "blk.0.ffn_norm.weight", "norm_out": "output_norm.weight"}
PERMUTED = {"q": "n_heads", "k": "kv_heads"}  # rows permuted per head for llama.cpp's rotation: their head counts


def _tensors(net: Eagle3LlamaNet, names: dict) -> dict:
    """GGUF tensor name -> float32 array (rows = outputs), in llama.cpp's names and row order."""
    out = {}
    for module, name in names.items():
        w = getattr(net, module).weight.detach().to(torch.float32).cpu().numpy()
        out[name] = permute_rows(w, getattr(net, PERMUTED[module])) if module in PERMUTED else w
    return out


def _target_fields(target_gguf: Path) -> tuple:
    """(the target's tokenizer fields, its context length) read from its GGUF."""
    from specviz.runtime.llamacpp.runner import gguf_reader

    reader = gguf_reader(target_gguf)
    arch = reader.fields["general.architecture"].contents()
    context = int(reader.fields[f"{arch}.context_length"].contents())
    return [f for name, f in reader.fields.items() if name.startswith("tokenizer.")], context


def export_eagle3(heads: HeadSet, target_gguf: Path, out: Path, output_rows: torch.Tensor) -> Path:
    """Write `heads` (EAGLE-3 in llama.cpp's layout) as a GGUF llama-server loads with
    `--spec-type draft-eagle3 --model-draft out`, beside the target `target_gguf` whose tokenizer
    it carries. `output_rows`: the target's output head (V, d), cut here to the draft vocabulary."""
    import gguf
    from gguf import GGMLQuantizationType, GGUFValueType
    from gguf.quants import quantize

    net = heads.net
    if not isinstance(net, Eagle3LlamaNet):
        raise HeadsError("Only EAGLE-3 heads in llama.cpp's layout export to llama.cpp: train them with "
                         "`python -m specviz train eagle3 --layout llama --pair qwen-coder-llamacpp`.")
    layers = heads.feature_layers
    if layers is None or len(layers) != 3:
        raise HeadsError(f"llama.cpp's EAGLE-3 reads exactly three target layers; these heads read {layers}.")
    ids = heads.vocab_ids
    rows = output_rows if ids is None else output_rows[ids.long()]
    tokenizer, context = _target_fields(target_gguf)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with files.new_file(out, f"writing {out.name}") as tmp:
        w = gguf.GGUFWriter(str(tmp), ARCH)
        w.add_name("specviz EAGLE-3 drafter")
        w.add_uint32(f"{ARCH}.context_length", context)
        w.add_uint32(f"{ARCH}.embedding_length", net.width)
        w.add_uint32(f"{ARCH}.block_count", 1)
        w.add_uint32(f"{ARCH}.feed_forward_length", net.down.in_features)
        w.add_uint32(f"{ARCH}.attention.head_count", net.n_heads)
        w.add_uint32(f"{ARCH}.attention.head_count_kv", net.kv_heads)
        w.add_float32(f"{ARCH}.attention.layer_norm_rms_epsilon", float(net.norm_e.eps))
        w.add_float32(f"{ARCH}.rope.freq_base", float(net.theta))
        w.add_array(f"{ARCH}.target_layers", [int(i) for i in layers])
        w.add_uint32(f"{ARCH}.target_hidden_size", int(heads.config["hidden"]))
        w.add_uint32("general.file_type", 7)  # mostly Q8_0
        w.add_string("specviz.heads_sha256", str(heads.manifest.get("sha256", "")))
        for field in tokenizer:
            vtype = field.types[0]
            if vtype == GGUFValueType.ARRAY:
                w.add_key_value(field.name, field.contents(), vtype, sub_type=field.types[-1])
            else:
                w.add_key_value(field.name, field.contents(), vtype)
        for name, matrix in {**_tensors(net, MATRICES), "output.weight": rows.to(torch.float32).numpy()}.items():
            w.add_tensor(name, quantize(np.ascontiguousarray(matrix, np.float32), GGMLQuantizationType.Q8_0),
                         raw_dtype=GGMLQuantizationType.Q8_0)
        for name, vector in _tensors(net, NORMS).items():
            w.add_tensor(name, np.ascontiguousarray(vector, np.float32))
        if ids is not None:
            w.add_tensor("d2t", ids.to(torch.int64).numpy())
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
    return out


def read_eagle3(path: Path) -> tuple:
    """(Eagle3LlamaNet, draft vocabulary ids or None, target layers, output rows) of a GGUF that
    export_eagle3 wrote: what llama.cpp runs, back in PyTorch (its Q8_0 weights de-quantised)."""
    from gguf.quants import dequantize
    from specviz.runtime.llamacpp.runner import gguf_reader

    reader = gguf_reader(path)
    if reader.fields["general.architecture"].contents() != ARCH:
        raise HeadsError(f"{path} is not an EAGLE-3 drafter (general.architecture is not {ARCH}).")
    key = lambda k: reader.fields[f"{ARCH}.{k}"].contents()  # noqa: E731
    tensors = {}
    for t in reader.tensors:
        a = np.asarray(t.data)
        if t.name != "d2t":
            a = dequantize(a, t.tensor_type).astype(np.float32)
        tensors[t.name] = a.reshape(*reversed([int(n) for n in t.shape])) if t.name != "d2t" else a
    heads, kv = int(key("attention.head_count")), int(key("attention.head_count_kv"))
    net = Eagle3LlamaNet(int(key("embedding_length")), heads=heads, kv_heads=kv, mlp=int(key("feed_forward_length")),
                         theta=float(key("rope.freq_base")), eps=float(key("attention.layer_norm_rms_epsilon")))
    t = lambda n: torch.from_numpy(np.ascontiguousarray(tensors[n]))  # noqa: E731
    state = {}
    for module, name in {**MATRICES, **NORMS}.items():
        w = tensors[name]
        if module in PERMUTED:
            w = unpermute_rows(w, getattr(net, PERMUTED[module])).copy()
        state[f"{module}.weight"] = torch.from_numpy(np.ascontiguousarray(w))
    net.load_state_dict(state)
    ids = torch.from_numpy(tensors["d2t"].astype(np.int64)) if "d2t" in tensors else None
    return net.eval(), ids, tuple(int(i) for i in key("target_layers")), t("output.weight")


# ---------------------------------------------------------------------------------------------
# the drafter of a pair, assembled once into the cache

def llama_heads_folder(family: str) -> Path:
    """Where the llama.cpp-layout heads of a pair family are looked for: shipped with specviz
    (data/heads/<family>/llama.cpp), else trained here (the llama.cpp pair's training folder)."""
    from specviz.runtime.head_nets import PACKAGED
    from specviz.runtime.models import LLAMACPP_PAIR

    shipped = PACKAGED / family / LLAMA_FOLDER
    if (shipped / "manifest.json").exists():
        return shipped
    return files.train_dir(LLAMACPP_PAIR) / "heads"


def need_heads(folder: Path) -> Path:
    """`folder` if it holds heads (a manifest), else one sentence naming the command that trains them."""
    if not (folder / "manifest.json").exists():
        raise HeadsError(f"No EAGLE-3 heads in llama.cpp's layout in {folder}: train them with `python -m specviz "
                         f"train eagle3 --layout llama --pair qwen-coder-llamacpp --out {folder}`.")
    return folder


def drafter_gguf(pair, kind: str = "eagle3", folder: Optional[Path] = None, say=None) -> Path:
    """The GGUF of the pair's `kind` drafter for its llama.cpp target (pair: the llama.cpp pair),
    assembled on first use from the llama.cpp-layout heads in `folder` (default: llama_heads_folder)."""
    from specviz.runtime.head_nets import load_heads

    if kind not in DRAFTERS:
        raise InputError(f"llama.cpp runs specviz's {', '.join(DRAFTERS)} drafter, not {kind!r}.")
    target_path = getattr(pair.target, "path", None)
    if target_path is None:
        raise PairError("A llama.cpp drafter is made for a llama.cpp target: load the pair with backend='llama.cpp'.")
    folder = need_heads(Path(folder) if folder is not None else llama_heads_folder(pair.family or pair.name))
    heads = load_heads(kind, pair, folder)
    if not isinstance(heads.net, Eagle3LlamaNet):
        raise HeadsError(f"The {kind} heads in {folder} are specviz's own layer, which llama.cpp cannot run: train "
                         "them with --layout llama (`python -m specviz train eagle3 --layout llama --pair "
                         "qwen-coder-llamacpp`).")
    out = files.cache_dir() / "llama.cpp" / "drafters" / f"{kind}-{heads.manifest['sha256'][:12]}-{target_path.stem}.gguf"
    if not out.exists():
        if say is not None:
            say(f"assembling {out.name}: the heads' layer with {target_path.name}'s tokenizer and output rows")
        export_eagle3(heads, target_path, out, pair.target.get_output_embeddings().weight)
    return out


def main(argv=None) -> int:
    """python -m specviz llamacpp drafter|serve (see the module's docstring)."""
    from specviz.argparsing import Parser
    from specviz.errors import run_command
    from specviz.runtime.llamacpp.build import say
    from specviz.runtime.models import LLAMACPP_PAIR, load_pair

    parser = Parser(prog="python -m specviz llamacpp", description="specviz's drafters in llama.cpp's own loop.")
    parser.add_argument("action", choices=["drafter", "serve"],
                        help="drafter: write the drafter's GGUF (prints its path); serve: start llama-server "
                             "with it until Ctrl-C")
    parser.add_argument("kind", nargs="?", default="eagle3", choices=list(DRAFTERS), help="the drafter (drafter only)")
    parser.add_argument("--drafter", default="eagle3", choices=[*DRAFTERS, "draft-model", "ngram-mod", "none"],
                        help="serve: specviz's eagle3 (draft-eagle3), the 0.5B draft model (draft-simple), "
                             "llama.cpp's ngram-mod, or none (greedy)")
    parser.add_argument("--heads", default=None, help="a folder of llama.cpp-layout heads (default: the shipped ones, "
                        "else the ones `python -m specviz train eagle3 --layout llama` wrote)")
    parser.add_argument("--draft-max", type=int, default=3, help="serve: tokens drafted a step (default 3)")
    parser.add_argument("--p-min", type=float, default=0.0, help="serve: llama.cpp stops a draft when its top "
                        "token's probability falls below this (default 0: always draft --draft-max)")
    parser.add_argument("--port", type=int, default=0, help="serve: the port (default: a free one)")
    args = parser.parse_args(argv)

    def body() -> int:
        if not 1 <= args.draft_max <= 16:
            raise InputError(f"--draft-max must be from 1 to 16, got {args.draft_max}.")
        if not 0.0 <= args.p_min <= 1.0:
            raise InputError(f"--p-min must be from 0 to 1, got {args.p_min}.")
        if args.heads is not None or args.action == "drafter" or args.drafter == "eagle3":
            need_heads(Path(args.heads) if args.heads else llama_heads_folder("qwen-coder"))  # before any model loads
        if args.action == "drafter":
            pair = load_pair(LLAMACPP_PAIR)
            print(drafter_gguf(pair, args.kind, args.heads, say))
            return 0
        from specviz.runtime.llamacpp.server import Server

        drafter = None if args.drafter == "none" else args.drafter
        model = drafter_gguf(load_pair(LLAMACPP_PAIR), "eagle3", args.heads, say) if drafter == "eagle3" else None
        server = Server(draft_max=args.draft_max if drafter else None, drafter=drafter, draft_model=model,
                        p_min=args.p_min, port=args.port or None)
        with server:
            say(f"llama-server on {server.url} ({args.drafter}{f', up to {args.draft_max} drafts a step' if drafter else ''});"
                f" its counters live: python -m specviz watch {server.url}; Ctrl-C stops it")
            server.proc.wait()
        return 0

    return run_command(body, "stopped")
