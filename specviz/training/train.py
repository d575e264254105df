"""Training the drafters that read the target's hidden states: Medusa heads, EAGLE, EAGLE-3,
P-EAGLE and DFlash.

    python -m specviz train medusa --pair qwen-coder --tokens 120000
    python -m specviz train eagle  --pair qwen-coder --tokens 120000
    python -m specviz train eagle3 --pair qwen-coder --tokens 1000000   (data: specviz.training.selfgen)
    python -m specviz train peagle --pair qwen-coder --tokens 1000000
    python -m specviz train dflash --pair qwen-coder --tokens 1000000

Phases, each cached in a work folder (`work_dir`) and resumed where it stopped, each with a
progress bar and an ETA on stderr:
  responses  the target answers the training prompts (greedy, batched): the drafters learn the
             target's own outputs, as EAGLE-3 regenerates its training data with the target
  corpus     those answers plus CPython's standard library source (code that exists on every
             machine with Python), tokenised; whole documents are held out for evaluation
  features   one target prefill per segment: the last hidden state (what the target's output
             head reads) and the target's argmax at every position, memory-mapped on disk.
             Training never runs the target again.
  train      the heads on the cached features, fixed seeds, checkpointed
  report     held-out accuracy per head (Medusa) or depth (EAGLE), loss curves: JSON + PNG

The labels are the target's own argmax, not the text's next token: under greedy decoding a draft
token is accepted exactly when it is the target's argmax, so that is what the heads should learn.
"""

from __future__ import annotations

import math
from pathlib import Path

from specviz import files
from specviz.engine.sequence import generate
from specviz.errors import InputError
from specviz.prompts import PROMPTS
from specviz.render.training_report import report_png
from specviz.runtime.head_nets import KINDS, as_stored, attach_heads, head_fingerprint, save_heads
from specviz.runtime.models import load_pair
from specviz.training.data import SEGMENT, prepare, selfgen_features, work_dir
from specviz.training.progress import say as _say
from specviz.training.selfgen import DEFAULT_BATCH, SelfData, selfgen
from specviz.training.trainer import FUSED, LLAMA_KINDS, TrainConfig, cached_layer_probes, evaluate_heads, train_heads

# ---------------------------------------------------------------------------------------------
# the whole recipe: python -m specviz train medusa|eagle

ENGINE_PROMPTS = ("code", "chat", "rewrite")  # the benchmark's prompts: never in the training data


def engine_check(pair, heads, tokens_seen: int, max_new_tokens: int = 48) -> list:
    """Greedy chains with the new heads on the benchmark prompts: tokens accepted per step on the pair."""

    attach_heads(pair, heads)
    out = []
    k = heads.depth if heads.kind in ("medusa", "dflash") else 5  # DFlash: its whole block
    for name in ENGINE_PROMPTS:
        prompt = PROMPTS[name]
        events = list(generate(pair, prompt.text, method=heads.kind, k=k, chat=prompt.chat,
                                      max_new_tokens=max_new_tokens, record_topk=0))
        m = events[-1].metrics
        out.append({"prompt": name, "tokens": tokens_seen, "k": k, "steps": m["steps"],
                    "new_tokens": m["new_tokens"], "accepted_per_step": round(m["accepted"] / max(1, m["steps"] - 1), 3),
                    "tau": round(m["new_tokens"] / max(1, m["steps"] - 1), 3)})
    return out


def train(kind: str, pair="qwen-coder", tokens: int = 120_000, epochs: float = 3.0, out=None, seed: int = 0,
          draft_vocab: int = 16384, check: bool = True, work=None, response_tokens: int = 160,
          data: str = "selfgen", storage: str = "bf16", **options):
    """Prepare the data (cached), train `kind` heads, write them with their manifest to `out`
    (default: the pair's work folder / "heads") beside report-<kind>.json and .png.
    `data`: "selfgen", the target's own answers with its states at several layers (specviz.training.selfgen,
    made or resumed up to `tokens` positions, the first `tokens` used), or "corpus", a few of its
    answers then standard-library code with its last hidden state only (the first recipe; Medusa
    and EAGLE only). `storage`: how the file keeps the weights (heads.save_heads: bf16 or int8).
    Returns (HeadSet, report). `options` are further TrainConfig fields."""

    if kind not in KINDS:
        raise InputError(f"Unknown heads {kind!r}: choose one of {', '.join(KINDS)}.")
    if not isinstance(tokens, int) or tokens < 2 * SEGMENT:
        raise InputError(f"tokens must be a whole number of at least {2 * SEGMENT}, got {tokens!r}.")
    if not (isinstance(epochs, (int, float)) and math.isfinite(epochs) and 0 < epochs <= 100):
        raise InputError(f"epochs must be a number in (0, 100], got {epochs!r}.")
    if not isinstance(seed, int) or seed < 0:
        raise InputError(f"seed must be a non-negative whole number, got {seed!r}.")
    if not isinstance(draft_vocab, int) or draft_vocab < 0:
        raise InputError(f"draft-vocab must be 0 (every token) or a positive whole number, got {draft_vocab!r}.")
    if storage not in ("bf16", "int8"):
        raise InputError(f"storage must be bf16 or int8, got {storage!r}.")
    if data not in ("selfgen", "corpus"):
        raise InputError(f"data must be selfgen or corpus, got {data!r}.")
    if options.get("targets", "answers") not in ("answers", "all"):
        raise InputError(f"targets must be answers or all, got {options.get('targets')!r}.")
    labels = options.get("labels", "hard")
    if labels not in ("hard", "soft") or (labels == "soft" and kind == "medusa"):
        raise InputError(f"labels must be hard or soft (soft: EAGLE kinds only), got {labels!r} for {kind}.")
    if data == "corpus" and kind in FUSED:
        raise InputError(f"{kind} reads several target layers: train it on selfgen data (the corpus keeps the "
                         "last hidden state only).")
    if out is not None and Path(out).exists() and not Path(out).is_dir():
        raise InputError(f"--out {out} is a file: give a folder for the heads, their manifest and report.")
    if options.get("layout", "specviz") not in ("specviz", "llama") or (options.get("layout") == "llama"
                                                                       and kind not in LLAMA_KINDS):
        raise InputError(f"layout must be specviz or llama (llama: {' and '.join(LLAMA_KINDS)} only, llama.cpp's "
                         f"draft-eagle3 and draft-dflash), got {options.get('layout')!r} for {kind}.")
    if options.get("layout") == "llama" and kind == "dflash" and options.get("anchor_state"):
        raise InputError("DFlash in llama.cpp's layout reads the layer inputs only: it has no anchor state.")
    layers = options.get("draft_layers", TrainConfig.draft_layers)
    if isinstance(layers, bool) or not isinstance(layers, int) or not 1 <= layers <= 8:
        raise InputError(f"draft-layers must be a whole number from 1 to 8, got {layers!r}.")
    if isinstance(pair, str):
        pair = load_pair(pair)
    work = work_dir(pair.name, work)
    out = Path(out) if out is not None else work / "heads"
    if "unroll" in options and (not isinstance(options["unroll"], int) or not 1 <= options["unroll"] <= 16):
        raise InputError(f"unroll must be a whole number from 1 to 16, got {options['unroll']!r}.")
    explicit = set(options)  # what the command line gave (named in the manifest's command)
    if kind in FUSED:  # EAGLE-3's recipe: no noise on the features, a deeper training-time test
        options = {"noise": 0.0, "unroll": 5, **options}
    if kind == "dflash":  # its held-out score: every depth of the block
        block = options.get("block", 16)
        if not isinstance(block, int) or not 2 <= block <= 32:
            raise InputError(f"block must be a whole number from 2 to 32, got {block!r}.")
        anchors, room = options.get("anchors", 0), options.get("window", TrainConfig.window) - block
        if isinstance(anchors, bool) or not isinstance(anchors, int) or not 0 <= anchors <= room:
            raise InputError(f"anchors must be a whole number from 0 (one per block length) to {room} (the window's "
                             f"positions with a whole block after them), got {anchors!r}.")
        options = {"depths": block - 1, **options}
    cfg = TrainConfig(kind, epochs=epochs, seed=seed, draft_vocab=draft_vocab, **options)
    if data == "selfgen":  # the target's own answers, with its states at several layers (made or resumed)
        folder = work / "selfgen"
        try:  # enough already (a longer run may still be generating there): read it as it is
            made = SelfData(folder)
            ready = made.meta["tokens"] >= tokens and made.meta["seed"] == seed and made.meta["pair"] == pair.name
        except (OSError, ValueError, KeyError):
            ready = False
        features = selfgen_features(made if ready else selfgen(pair, folder, tokens, seed=seed), tokens)
    else:
        features = prepare(pair, tokens, work, seed, response_tokens)
    # a second `train` of the same heads on the same data waits, then resumes from the first
    # one's last checkpoint (its final one: nothing left to train) instead of racing it
    with files.lock(features.folder / f"{kind}-checkpoint.pt", f"training {kind} heads", _say):
        heads, report = train_heads(pair, features, cfg)
    if storage != "bf16":  # what the file will hold: measured on held-out data, and checked on the pair
        heads.net.load_state_dict(as_stored(heads.net, storage))
        report["held_out_stored"] = heads.manifest["held_out_stored"] = {
            "storage": storage, **evaluate_heads(pair, heads, features, cfg.depths)}
    if kind == "eagle3" and cfg.layout == "specviz":  # which of the layers it reads predicts how far ahead
        # (cached beside the data; a property of the data, not of the layout, so measured once)
        report["layer_probes"] = cached_layer_probes(pair, features, seed=seed, draft_vocab=draft_vocab)
    if check:
        report["engine"] = engine_check(pair, heads, report["steps"] * report["tokens_per_step"])
        heads.manifest["engine"] = report["engine"]
    # selfgen data depends on the run's batch size (which rows are sampled): a run made with another
    # than the default is named, so that the two commands together make the same data again
    made_with = features.meta.get("batch") if data == "selfgen" else None
    heads.manifest["command"] = ((f"python -m specviz selfgen --pair {pair.name} --tokens {tokens} --batch {made_with} "
                                  f"--seed {seed} && " if made_with not in (None, DEFAULT_BATCH) else "")
                                 + f"python -m specviz train {kind} --pair {pair.name} --tokens {tokens} "
                                 f"--epochs {epochs:g} --seed {seed} --draft-vocab {draft_vocab} --data {data}"
                                 + (f" --storage {storage}" if storage != "bf16" else "")
                                 + (f" --labels {cfg.labels}" if cfg.labels != "hard" else "")
                                 + (f" --targets {cfg.targets}" if cfg.targets != "answers" else "")
                                 + (f" --layout {cfg.layout}" if cfg.layout != "specviz" else "")
                                 + (f" --unroll {cfg.unroll}" if "unroll" in explicit else "")
                                 + (f" --block {cfg.block}" if kind == "dflash" else "")
                                 + (f" --draft-layers {cfg.draft_layers}" if kind == "dflash" and
                                    cfg.draft_layers != TrainConfig.draft_layers else "")
                                 + (" --anchor-state" if kind == "dflash" and cfg.anchor_state else "")
                                 + (f" --anchors {cfg.anchors}" if kind == "dflash" and cfg.anchors else ""))
    save_heads(heads, out, head_fingerprint(pair.target), storage)
    report["out"] = str(out)
    files.write_json(out / f"report-{kind}.json", report)
    report_png(report, out / f"report-{kind}.png")
    return heads, report
