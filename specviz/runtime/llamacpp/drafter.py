"""specviz's EAGLE-3 and DFlash drafters as GGUF files that llama.cpp's own loop runs
(`draft-eagle3`, `draft-dflash`).

    python -m specviz llamacpp drafter eagle3|dflash          (writes it into the cache; seconds)
    python -m specviz llamacpp serve --drafter eagle3|dflash  (llama-server with it, until Ctrl-C)

The networks are head_nets.Eagle3LlamaNet and head_nets.DFlashLlamaNet, trained by `python -m
specviz train eagle3|dflash --layout llama` on the llama.cpp pair's own states (the target's layer
inputs from llama.cpp's passes). llama.cpp reads (src/models/eagle3.cpp, src/models/dflash.cpp,
common/speculative.cpp):

  EAGLE-3  keys eagle3.{context_length, embedding_length, block_count = 1, feed_forward_length,
           attention.head_count, attention.head_count_kv, attention.layer_norm_rms_epsilon,
           rope.freq_base, target_layers (the three layer inputs, transformers' numbering),
           target_hidden_size}; tensors fc (3d -> d), blk.0.{attn_norm (on the token embedding),
           attn_norm_2 (on g), attn_q, attn_k, attn_v (2d ->), attn_output, ffn_norm, ffn_gate,
           ffn_up, ffn_down}, output_norm, output, d2t
  DFlash   keys dflash.{the same model keys, block_count = its layers, target_layers,
           block_size (the anchor and its masks: llama-server drafts at most block_size - 1)} and
           tokenizer.ggml.mask_token_id; tensors fc (3d -> d), enc.output_norm (the fused
           context's norm), blk.i.{attn_norm, attn_q, attn_k, attn_v, attn_q_norm, attn_k_norm,
           attn_output, ffn_norm, ffn_gate, ffn_up, ffn_down}, output_norm, output, d2t

Both carry the target's tokenizer (llama-server refuses a draft whose vocabulary differs from the
target's), and neither carries token embeddings: they are the target's own. The output rows are
the target's own too (the GGUF's output head, de-quantised, cut to the draft vocabulary), as
specviz's heads read them; llama.cpp requires them in the file when `d2t` (draft row -> target
token id, int64) is there. So a heads file stays small (the layers only) and the GGUF is assembled
here, once per heads file and target type, in the cache. Matrices are stored as Q8_0, the norms
as F32. EAGLE-3's query and key rows are permuted for llama.cpp's pairwise rotation (as its
converter does for LLaMA checkpoints; head_nets rotates halves); DFlash's rotate halves in
llama.cpp too (NEOX), as they are.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from specviz import files
from specviz.errors import InputError, PairError
from specviz.runtime.head_nets import DFlashLlamaNet, Eagle3LlamaNet, HeadSet, HeadsError

ARCH = "eagle3"
DFLASH = "dflash"  # llama.cpp's architecture name for DFlash drafters
NETS = {"eagle3": Eagle3LlamaNet, "dflash": DFlashLlamaNet}
DRAFTERS = tuple(NETS)  # the drafters llama.cpp's own loop runs: llama-server's --spec-type draft-<kind>
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



def dflash_names(n_layers: int) -> tuple:
    """(matrices, norms) of DFlashLlamaNet with `n_layers` layers: module path -> llama.cpp's name."""
    matrices, norms = {"fc": "fc.weight"}, {"norm_ctx": "enc.output_norm.weight", "norm_out": "output_norm.weight"}
    for i in range(n_layers):
        matrices.update({f"layers.{i}.{m}": f"blk.{i}.{name}.weight" for m, name in (
            ("q", "attn_q"), ("k", "attn_k"), ("v", "attn_v"), ("o", "attn_output"), ("gate", "ffn_gate"),
            ("up", "ffn_up"), ("down", "ffn_down"))})
        norms.update({f"layers.{i}.{m}": f"blk.{i}.{name}.weight" for m, name in (
            ("norm_attn", "attn_norm"), ("norm_mlp", "ffn_norm"), ("norm_q", "attn_q_norm"), ("norm_k", "attn_k_norm"))})
    return matrices, norms


def _names(net) -> tuple:
    """(matrices, norms, permuted) of a llama-layout network."""
    if isinstance(net, DFlashLlamaNet):
        return (*dflash_names(len(net.layers)), {})
    return MATRICES, NORMS, PERMUTED


def _tensors(net, names: dict, permuted: dict) -> dict:
    """GGUF tensor name -> float32 array (rows = outputs), in llama.cpp's names and row order."""
    out = {}
    for module, name in names.items():
        w = net.get_submodule(module).weight.detach().to(torch.float32).cpu().numpy()
        out[name] = permute_rows(w, getattr(net, permuted[module])) if module in permuted else w
    return out


def _target_fields(target_gguf: Path) -> tuple:
    """(the target's tokenizer fields, its context length) read from its GGUF."""
    from specviz.runtime.llamacpp.runner import gguf_reader

    reader = gguf_reader(target_gguf)
    arch = reader.fields["general.architecture"].contents()
    context = int(reader.fields[f"{arch}.context_length"].contents())
    return [f for name, f in reader.fields.items() if name.startswith("tokenizer.")], context


def export_drafter(heads: HeadSet, target_gguf: Path, out: Path, output_rows: torch.Tensor) -> Path:
    """Write `heads` (EAGLE-3 or DFlash in llama.cpp's layout) as a GGUF llama-server loads with
    `--spec-type draft-<kind> --model-draft out`, beside the target `target_gguf` whose tokenizer
    it carries. `output_rows`: the target's output head (V, d), cut here to the draft vocabulary."""
    import gguf
    from gguf import GGMLQuantizationType, GGUFValueType
    from gguf.quants import quantize

    net = heads.net
    if not isinstance(net, tuple(NETS.values())):
        raise HeadsError(f"Only heads in llama.cpp's layout export to llama.cpp: train them with `python -m specviz "
                         f"train {heads.kind} --layout llama --pair qwen-coder-llamacpp`.")
    dflash = isinstance(net, DFlashLlamaNet)
    arch = DFLASH if dflash else ARCH
    layers = heads.feature_layers
    if layers is None or len(layers) != 3:
        raise HeadsError(f"llama.cpp's {heads.kind} reads exactly three target layers; these heads read {layers}.")
    ids = heads.vocab_ids
    rows = output_rows if ids is None else output_rows[ids.long()]
    tokenizer, context = _target_fields(target_gguf)
    matrices, norms, permuted = _names(net)
    first = net.layers[0] if dflash else net
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with files.new_file(out, f"writing {out.name}") as tmp:
        w = gguf.GGUFWriter(str(tmp), arch)
        w.add_name(f"specviz {'DFlash' if dflash else 'EAGLE-3'} drafter")
        w.add_uint32(f"{arch}.context_length", context)
        w.add_uint32(f"{arch}.embedding_length", net.width)
        w.add_uint32(f"{arch}.block_count", len(net.layers) if dflash else 1)
        w.add_uint32(f"{arch}.feed_forward_length", first.down.in_features)
        w.add_uint32(f"{arch}.attention.head_count", net.n_heads)
        w.add_uint32(f"{arch}.attention.head_count_kv", net.kv_heads)
        w.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", float(net.norm_out.eps))
        w.add_float32(f"{arch}.rope.freq_base", float(net.theta))
        w.add_array(f"{arch}.target_layers", [int(i) for i in layers])
        if dflash:
            w.add_uint32(f"{arch}.block_size", net.block_size)
        else:
            w.add_uint32(f"{arch}.target_hidden_size", int(heads.config["hidden"]))
        w.add_uint32("general.file_type", 7)  # mostly Q8_0
        w.add_string("specviz.heads_sha256", str(heads.manifest.get("sha256", "")))
        for field in tokenizer:
            vtype = field.types[0]
            if vtype == GGUFValueType.ARRAY:
                w.add_key_value(field.name, field.contents(), vtype, sub_type=field.types[-1])
            else:
                w.add_key_value(field.name, field.contents(), vtype)
        if dflash:  # the masks' token: llama.cpp reads its row from the target's embeddings
            w.add_uint32("tokenizer.ggml.mask_token_id", int(net.mask_token))
        for name, matrix in {**_tensors(net, matrices, permuted), "output.weight": rows.to(torch.float32).numpy()}.items():
            w.add_tensor(name, quantize(np.ascontiguousarray(matrix, np.float32), GGMLQuantizationType.Q8_0),
                         raw_dtype=GGMLQuantizationType.Q8_0)
        for name, vector in _tensors(net, norms, {}).items():
            w.add_tensor(name, np.ascontiguousarray(vector, np.float32))
        if ids is not None:
            w.add_tensor("d2t", ids.to(torch.int64).numpy())
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
    return out


def read_drafter(path: Path) -> tuple:
    """(network, draft vocabulary ids or None, target layers, output rows) of a GGUF that
    export_drafter wrote: what llama.cpp runs, back in PyTorch (its Q8_0 weights de-quantised).
    A DFlash network's mask row is left for BoundHeads.set_mask (the target's, as llama.cpp's)."""
    from gguf.quants import dequantize
    from specviz.runtime.llamacpp.runner import gguf_reader

    reader = gguf_reader(path)
    arch = reader.fields["general.architecture"].contents()
    if arch not in (ARCH, DFLASH):
        raise HeadsError(f"{path} is not an EAGLE-3 or DFlash drafter (general.architecture is {arch}).")
    key = lambda k: reader.fields[f"{arch}.{k}"].contents()  # noqa: E731
    tensors = {}
    for t in reader.tensors:
        a = np.asarray(t.data)
        if t.name != "d2t":
            a = dequantize(a, t.tensor_type).astype(np.float32)
        tensors[t.name] = a.reshape(*reversed([int(n) for n in t.shape])) if t.name != "d2t" else a
    heads, kv = int(key("attention.head_count")), int(key("attention.head_count_kv"))
    common = dict(heads=heads, kv_heads=kv, mlp=int(key("feed_forward_length")), theta=float(key("rope.freq_base")),
                  eps=float(key("attention.layer_norm_rms_epsilon")))
    if arch == DFLASH:
        net = DFlashLlamaNet(int(key("embedding_length")), n_layers=int(key("block_count")),
                             block=int(key("block_size")),
                             mask_token=int(reader.fields["tokenizer.ggml.mask_token_id"].contents()), **common)
    else:
        net = Eagle3LlamaNet(int(key("embedding_length")), **common)
    matrices, norms, permuted = _names(net)
    t = lambda n: torch.from_numpy(np.ascontiguousarray(tensors[n]))  # noqa: E731
    state = {}
    for module, name in {**matrices, **norms}.items():
        w = tensors[name]
        if module in permuted:
            w = unpermute_rows(w, getattr(net, permuted[module])).copy()
        state[f"{module}.weight"] = torch.from_numpy(np.ascontiguousarray(w))
    net.load_state_dict(state)
    ids = torch.from_numpy(tensors["d2t"].astype(np.int64)) if "d2t" in tensors else None
    return net.eval(), ids, tuple(int(i) for i in key("target_layers")), t("output.weight")


def dflash_block_logits(path: Path, target, states: np.ndarray, anchor: int, size: int) -> np.ndarray:
    """Run the DFlash drafter GGUF `path` in llama.cpp itself, as llama-server's draft-dflash does:
    inject `states` (T, 3, d), the target's three layer inputs at positions 0..T-1, into the
    drafter's cache (an embeddings batch), then decode the block [anchor, mask x (size - 1)] at
    positions T.. with non-causal attention. `target`: the llama.cpp target model (a
    runner.LlamaCppModel: its context lends the token embeddings). Returns the block's logits
    (size, V), over the target's vocabulary (-inf outside the draft vocabulary)."""
    import ctypes

    from specviz.runtime.llamacpp.runner import binding

    lib = binding()
    states = np.ascontiguousarray(states.reshape(len(states), -1), np.float32)
    params = lib.llama_model_default_params()
    params.n_gpu_layers = 0
    model = lib.llama_model_load_from_file(str(path).encode(), params)
    if not model:
        raise HeadsError(f"llama.cpp could not load the drafter {path}.")
    entry = target._lend(())
    ctx = batch = None
    try:
        cparams = lib.llama_context_default_params()
        cparams.n_ctx = max(64, len(states) + size + 16)
        cparams.n_batch = cparams.n_ubatch = cparams.n_ctx
        cparams.n_threads = cparams.n_threads_batch = target.threads
        cparams.no_perf = True
        cparams.ctx_other = entry["ctx"]  # the target's token embeddings (the drafter has none)
        ctx = lib.llama_init_from_model(model, cparams)
        if not ctx:
            raise HeadsError(f"llama.cpp could not make a context for the drafter {path}.")
        lib.llama_set_causal_attn(ctx, False)
        batch = lib.llama_batch_ext_init(ctx)
        pos = (ctypes.c_int32 * 4)()
        for i, row in enumerate(states):  # the target's states, injected into every layer's keys and values
            embd = lib.llama_embd(row.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), 1, states.shape[1])
            idx = lib.llama_batch_ext_add_embd(batch, 0, embd)
            pos[0] = pos[1] = pos[2] = i
            lib.llama_batch_ext_set_pos(batch, idx, pos)
        if lib.llama_process(ctx, lib.LLAMA_PROCESS_TYPE_DECODE, batch) != 0:
            raise HeadsError("llama.cpp could not inject the target's states into the DFlash drafter.")
        lib.llama_batch_ext_clear(batch)
        mask = lib.llama_vocab_mask(lib.llama_model_get_vocab(model))
        for j in range(size):
            idx = lib.llama_batch_ext_add_token(batch, 0, int(anchor) if j == 0 else mask)
            pos[0], pos[1], pos[2] = len(states) + j, 0, 0
            lib.llama_batch_ext_set_pos(batch, idx, pos)
            lib.llama_batch_ext_set_output_logits(batch, idx, True)
        if lib.llama_process(ctx, lib.LLAMA_PROCESS_TYPE_DECODE, batch) != 0:
            raise HeadsError("llama.cpp could not decode the DFlash drafter's block.")
        vocab = lib.llama_vocab_n_tokens(lib.llama_model_get_vocab(model))
        return np.stack([np.ctypeslib.as_array(lib.llama_get_logits_ith(ctx, j), shape=(vocab,)).copy()
                         for j in range(size)])
    finally:
        if batch is not None:
            lib.llama_batch_ext_free(batch)
        if ctx is not None:
            lib.llama_free(ctx)
        lib.llama_model_free(model)
        entry["busy"] = False


# ---------------------------------------------------------------------------------------------
# the drafter of a pair, assembled once into the cache

def llama_heads_folder(family: str, kind: str = "eagle3") -> Path:
    """Where the llama.cpp-layout `kind` heads of a pair family are looked for: shipped with specviz
    (data/heads/<family>/llama.cpp) where its manifest has them, else trained here (the llama.cpp
    pair's training folder, where `python -m specviz train KIND --layout llama` writes)."""
    from specviz.runtime.head_nets import PACKAGED
    from specviz.runtime.models import LLAMACPP_PAIR

    shipped = PACKAGED / family / LLAMA_FOLDER
    if has_heads(shipped, kind):
        return shipped
    return files.train_dir(LLAMACPP_PAIR) / "heads"


def _manifest(folder: Path) -> dict:
    path = Path(folder) / "manifest.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


def has_heads(folder: Path, kind: str) -> bool:
    """Whether `folder`'s manifest lists `kind` heads."""
    return kind in _manifest(folder)


def need_heads(folder: Path, kind: str = "eagle3") -> Path:
    """`folder` if it holds `kind` heads (in its manifest), else one sentence naming the command that trains them."""
    if not has_heads(folder, kind):
        name = {"eagle3": "EAGLE-3", "dflash": "DFlash"}[kind]
        raise HeadsError(f"No {name} heads in llama.cpp's layout in {folder}: train them with `python -m specviz "
                         f"train {kind} --layout llama --pair qwen-coder-llamacpp --out {folder}`"
                         + (" (docs/heads.md gives the whole command)." if kind == "dflash" else "."))
    return folder


def drafter_gguf(pair, kind: str = "eagle3", folder: Optional[Path] = None, say=None) -> Path:
    """The GGUF of the pair's `kind` drafter for its llama.cpp target (pair: the llama.cpp pair),
    assembled on first use from the llama.cpp-layout heads in `folder` (default: llama_heads_folder)."""
    from specviz.runtime.head_nets import load_heads

    if kind not in DRAFTERS:
        raise InputError(f"llama.cpp runs specviz's {', '.join(DRAFTERS)} drafters, not {kind!r}.")
    target_path = getattr(pair.target, "path", None)
    if target_path is None:
        raise PairError("A llama.cpp drafter is made for a llama.cpp target: load the pair with backend='llama.cpp'.")
    folder = need_heads(Path(folder) if folder is not None else llama_heads_folder(pair.family or pair.name, kind), kind)
    heads = load_heads(kind, pair, folder)
    if not isinstance(heads.net, NETS[kind]):
        raise HeadsError(f"The {kind} heads in {folder} are specviz's own layer, which llama.cpp cannot run: train "
                         f"them with --layout llama (`python -m specviz train {kind} --layout llama --pair "
                         "qwen-coder-llamacpp`).")
    out = files.cache_dir() / "llama.cpp" / "drafters" / f"{kind}-{heads.manifest['sha256'][:12]}-{target_path.stem}.gguf"
    if not out.exists():
        if say is not None:
            say(f"assembling {out.name}: the heads' layers with {target_path.name}'s tokenizer and output rows")
        export_drafter(heads, target_path, out, pair.target.get_output_embeddings().weight)
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
                        help="serve: specviz's eagle3 (draft-eagle3) or dflash (draft-dflash), the 0.5B draft "
                             "model (draft-simple), llama.cpp's ngram-mod, or none (greedy)")
    parser.add_argument("--heads", default=None, help="a folder of llama.cpp-layout heads (default: the shipped ones, "
                        "else the ones `python -m specviz train KIND --layout llama` wrote)")
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
        kind = args.kind if args.action == "drafter" else args.drafter
        if kind in DRAFTERS:  # before any model loads
            need_heads(Path(args.heads) if args.heads else llama_heads_folder("qwen-coder", kind), kind)
        if args.action == "drafter":
            pair = load_pair(LLAMACPP_PAIR)
            print(drafter_gguf(pair, args.kind, args.heads, say))
            return 0
        from specviz.runtime.llamacpp.server import Server

        drafter = None if args.drafter == "none" else args.drafter
        model = drafter_gguf(load_pair(LLAMACPP_PAIR), drafter, args.heads, say) if drafter in DRAFTERS else None
        server = Server(draft_max=args.draft_max if drafter else None, drafter=drafter, draft_model=model,
                        p_min=args.p_min, port=args.port or None)
        with server:
            say(f"llama-server on {server.url} ({args.drafter}{f', up to {args.draft_max} drafts a step' if drafter else ''});"
                f" its counters live: python -m specviz watch {server.url}; Ctrl-C stops it")
            server.proc.wait()
        return 0

    return run_command(body, "stopped")
