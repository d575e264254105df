"""The target's own generations at scale, with the features EAGLE-3 reads: training data that
matches decoding.

    python -m specviz selfgen --pair qwen-coder --tokens 1000000     (hours on a CPU; resumable)

A drafter is judged by how often it agrees with the target while the target decodes, so it should
learn from text the target writes, read through the target's own states (EAGLE-3 regenerates its
training data with the target for this reason). This module has the target answer a bank of
prompts (`prompt_bank`: code to complete, code to rewrite, explain or test, programming
questions), batched on specviz's batched engine runner (`specviz.runtime.batch_lm.BatchLM`, one target pass
per step for every row), greedy for most batches and sampled for every SAMPLE_EVERY-th (a run
longer than the bank goes round it again, sampling every answer: a greedy answer given twice would
be the same data twice; prompts added at the bank's end later are answered next, `Schedule`), and
keeps from the very passes that generate the answers, at every position t of prompt and answer:
  - the token x_t,
  - the target's hidden states at three depths (low, middle, high: the inputs of decoder layers
    `feature_layers(n)`, EAGLE-3's choice) and its last one after the final norm (what its output
    head reads: EAGLE-1's and Medusa's feature),
  - the target's argmax after x_t (what a greedy draft must guess).

No second target pass is needed to extract features. Files, in the output folder: tokens.i32,
labels.i32, feats.f16 ((N, 4, d) float16) and selfgen.json (what was generated, sequence by
sequence: where it starts, how long, which prompt, held out or not). They grow batch by batch; a
restart truncates them to the last finished batch and goes on from there, so an interrupted run
loses at most one batch. Every HELD_OUT_EVERY-th prompt (by a hash of its text) is held out.

The text itself, a kilobyte or so per thousand positions against twelve megabytes of states, is
kept apart as well: corpus/batch-NNNNN.npz, one file per batch (its sequences' tokens and what
selfgen.json says of each). The states are hours of CPU, and a machine that is gone takes them
along; the text is small enough to keep in the repository (data/selfgen/<pair>/ in a checkout,
where the next training of the shipped heads starts from). A run given a corpus (`corpus=`, `--corpus`; a
checkout's own by default) takes the batches the corpus holds from it instead of generating them:
one plain forward over each whole sequence gives the states and the argmaxes the generating
passes gave (the same up to rounding, as prefill and decoding differ), about half again as fast as
generating them and the very same text. Past the corpus's last batch the run generates, as always.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from specviz import files
from specviz.config import Warp
from specviz.errors import InputError, run_command
from specviz.runtime.batch_lm import BatchLM
from specviz.runtime.head_nets import hidden_and_vocab
from specviz.runtime.models import load_pair
from specviz.training.corpus import (Schedule, bank_prefix, checkout_corpus, corpus_batch_path, corpus_batches,
    corpus_differs, corpus_meta, open_corpus, read_corpus_batch, replays, write_corpus_batch, write_corpus_meta)
from specviz.training.progress import progress_bar, say
from specviz.training.prompt_bank import held_out, prompt_bank
from specviz.verifiers.sampling import sample, warp as warp_probs

DEFAULT_BATCH = 32  # rows per target pass: on 2 CPU cores, a pass of 32 costs little more than one of 16
SAMPLE_EVERY = 4  # every 4th batch samples (temperature SAMPLE_WARP) instead of decoding greedily
SAMPLE_WARP = Warp(temperature=0.8, top_p=0.95)
VERSION = 1


def feature_layers(n_layers: int) -> tuple:
    """The hidden states EAGLE-3 fuses, as indices of the inputs of decoder layers (hidden_states[i]
    in transformers' numbering, 0 = the embeddings): low, middle and high, (2, n // 2, n - 3) as
    EAGLE-3's reference code and SGLang capture them (28 layers: 2, 14, 25). Early layers still
    carry the current token, late ones are already the next token's guess; the middle ones hold
    what a few tokens ahead depends on."""
    return (min(2, n_layers - 1), n_layers // 2, max(0, n_layers - 3))


# ---------------------------------------------------------------------------------------------
# one batch: the answers, with the target's states from the passes that generate them

def generate_rows(pair, prompts: list, max_new_tokens: int, layers: tuple, warp=Warp(),
                  seeds: Optional[list] = None) -> list:
    """One batch: every prompt (token ids) answered by the target, one pass per step for all rows
    (`specviz.runtime.batch_lm.BatchLM`; each prompt prefilled on its own, `BatchLM.prefill`), each pass also
    returning the states at `layers` (`BatchLM.forward(hidden=layers)`).
    Returns per row {"tokens", "labels", "feats", "answer"}: the positions the target ran on (the
    prompt and the answer but its last token), its argmax after each, and its states there
    ((n, len(layers) + 1, d) float16: the inputs of those layers, then the last hidden state after
    the final norm); "answer" is the whole answer, its last token included. `warp`: one Warp for
    every row, or a list of one per row."""

    rows, layers = len(prompts), tuple(layers)
    warps = list(warp) if isinstance(warp, (list, tuple)) else [warp] * rows
    runner = BatchLM(pair.target, rows)
    eos = set(pair.eos_token_ids)
    generators = [torch.Generator(device=pair.device).manual_seed(s) for s in (seeds or range(rows))]
    out = [{"feats": [], "labels": [], "answer": []} for _ in range(rows)]
    last = [None] * rows

    def keep(b: int, states, logits) -> None:
        out[b]["feats"].append(states.to("cpu", torch.float16))
        out[b]["labels"].append(logits.argmax(-1).to("cpu", torch.int32))
        last[b] = logits[-1]

    # the prompts, each on its own (BatchLM.prefill): padded to the longest, a bank's batch of
    # prompts is mostly padding, and the padding costs what real tokens cost
    logits, states = runner.prefill([list(p) for p in prompts], hidden=layers)
    for b in range(rows):
        keep(b, states[b], logits[b])
    live = list(range(rows))
    while live:
        chosen = []
        for b in live:
            token = sample(warp_probs(last[b], warps[b]), warps[b], generators[b])
            out[b]["answer"].append(token)
            chosen.append(token)
        going = [i for i, (b, t) in enumerate(zip(live, chosen)) if t not in eos
                 and len(out[b]["answer"]) < max_new_tokens]
        if not going:
            break
        if len(going) < len(live):
            runner.keep_rows(going)
            live, chosen = [live[i] for i in going], [chosen[i] for i in going]
        logits, states = runner.forward([[t] for t in chosen], [1] * len(live), hidden=layers)
        for i, b in enumerate(live):
            keep(b, states[i], logits[i])
    for b, p in enumerate(prompts):
        answer = out[b]["answer"]
        out[b]["tokens"] = list(p) + answer[:-1]
        out[b]["feats"] = torch.cat(out[b]["feats"]).numpy()
        out[b]["labels"] = torch.cat(out[b]["labels"]).numpy()
        assert len(out[b]["tokens"]) == len(out[b]["labels"]) == len(out[b]["feats"])
    return out


def replay_rows(pair, sequences: list, layers: tuple) -> list:
    """The states and argmaxes of stored sequences (token ids: a prompt and its answer but the
    answer's last token), as `generate_rows` returns them for the sequences it generates: one
    forward over each whole sequence (chunked by BatchLM.CHUNK_TOKENS), sequence by sequence, so
    that no row pays for another's padding. Returns per row {"tokens", "labels", "feats"}."""

    out = []
    for tokens in sequences:
        if hasattr(pair.target, "make_runner"):  # llama.cpp: its own runner hands out the same states
            runner = pair.target.make_runner()
            runner.reset()
            logits, states = runner.forward(list(tokens), hidden=tuple(layers))
            logits, states = logits[None], states[None]
        else:
            runner = BatchLM(pair.target, 1)
            logits, states = runner.forward([list(tokens)], [len(tokens)], hidden=tuple(layers))
        out.append({"tokens": list(tokens), "labels": logits[0].argmax(-1).to("cpu", torch.int32).numpy(),
                    "feats": states[0].to("cpu", torch.float16).numpy()})
    return out


# ---------------------------------------------------------------------------------------------
# the whole run, resumable

class SelfData:
    """The files of a run (see the module's docstring), memory-mapped for reading."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.meta = json.loads((self.folder / "selfgen.json").read_text())
        n, slots, d = self.meta["tokens"], len(self.meta["layers"]) + 1, self.meta["hidden_size"]
        self.tokens = np.memmap(self.folder / "tokens.i32", np.int32, "r", shape=(n,)) if n else np.zeros(0, np.int32)
        self.labels = np.memmap(self.folder / "labels.i32", np.int32, "r", shape=(n,)) if n else np.zeros(0, np.int32)
        self.feats = (np.memmap(self.folder / "feats.f16", np.float16, "r", shape=(n, slots, d)) if n
                      else np.zeros((0, slots, d), np.float16))

    @property
    def sequences(self) -> list:
        """[(start, length, held_out)] of every sequence."""
        return [(s["start"], s["length"], s["held_out"]) for s in self.meta["sequences"]]


def need_disk(folder: Path, positions: int, row_bytes: int, overshoot: int) -> None:
    """Refuse, before any work, a run whose data would not fit on the disk: `positions` more, each
    `row_bytes` (the states of every kept layer: most of it), plus the last batch's `overshoot`
    (it ends where its answers end, past the asked total). A disk that fills mid-run would stop it
    with its last batch cut (kept data is safe, but hours of a night's run may be gone)."""
    if positions > 0:
        fits = max(0, files.free_bytes(folder) // row_bytes - overshoot)
        files.check_space(folder, (positions + overshoot) * row_bytes,
                          f"{positions:,} more positions of training data ({row_bytes / 1e3:.1f} kB each: the "
                          "target's states at every kept layer)",
                          instead=f"give another --out, or ask for fewer --tokens (about {fits:,} more positions fit)")


def _export_corpus(folder: Path, meta: dict, own: Path) -> None:
    """Write `own`'s files for the batches `folder` holds and `own` lacks (data generated before
    runs kept their text): the tokens as stored, the entries of selfgen.json."""
    missing = [b for b in range(meta["batches"]) if not corpus_batch_path(own, b).exists()]
    if not missing:
        return
    tokens = np.memmap(folder / "tokens.i32", np.int32, "r", shape=(meta["tokens"],))
    size = meta["batch"]
    for b in missing:
        entries = meta["sequences"][b * size:(b + 1) * size]
        write_corpus_batch(own, b, [{k: v for k, v in e.items() if k != "start"} for e in entries],
                           [tokens[e["start"]:e["start"] + e["length"]].tolist() for e in entries])
    del tokens


def _batch_size(batch: Optional[int], meta_path: Path, corpus) -> int:
    """The rows per pass: as asked; else a run goes on with its own (which batches are sampled
    depends on it); else a new run over a corpus takes the corpus's (its batches are only valid at
    that size); else DEFAULT_BATCH."""
    if batch is None:
        try:
            batch = int(json.loads(meta_path.read_text())["batch"])
        except (OSError, ValueError, KeyError, TypeError):
            try:
                batch = int(json.loads((Path(corpus) / "corpus.json").read_text())["batch"])
            except (OSError, ValueError, KeyError, TypeError):
                batch = DEFAULT_BATCH
    if not isinstance(batch, int) or batch < 1:
        raise InputError(f"batch must be a positive whole number, got {batch!r}.")
    return batch


def _resume(folder: Path, meta_path: Path, describe: dict, row_bytes: dict) -> dict:
    """The run's meta: a new one, or the folder's own when its settings are the same; the data
    files are cut back to the last whole batch the meta counts."""
    meta = {**describe, "tokens": 0, "prompts_done": 0, "batches": 0, "sequences": [], "seconds": 0.0}
    if meta_path.exists():
        old = json.loads(meta_path.read_text())
        if any(old.get(key) != value for key, value in describe.items()):
            raise InputError(f"{folder} holds data generated with other settings "
                             f"({', '.join(k for k, v in describe.items() if old.get(k) != v)} differ): "
                             "give another --out, or delete that folder to start again.")
        meta = old
    for name, size in row_bytes.items():  # a batch cut short: back to the last whole one
        with open(folder / name, "ab") as fh:
            fh.truncate(meta["tokens"] * size)
    return meta


def _texts(folder: Path, meta: dict, describe: dict, bank: list, corpus, implicit: bool,
           family: Optional[str] = None) -> tuple:
    """The run's own text, batch by batch, in folder/corpus (data made before the corpus existed is
    written from it now), the prompts' schedule, and the corpus to replay (None: generate), with
    whether it was made from another prompt bank."""
    own = folder / "corpus"
    own.mkdir(exist_ok=True)
    stale = corpus_differs(own, describe) if (own / "corpus.json").exists() else []
    if stale:  # text left by a run of other settings
        raise InputError(f"{own} holds text generated with other settings ({', '.join(stale)}): "
                         f"delete that folder (or give another --out) to start again.")
    _export_corpus(folder, meta, own)
    schedule = Schedule(e["prompt"] for e in meta["sequences"])
    if schedule.first > len(bank):  # a bank that lost prompts (another Python's standard library)
        raise InputError(f"{folder} holds answers to {schedule.first} prompts of a bank that this Python's has "
                         f"{len(bank)} of: it was made from another prompt bank; give another --out, or run "
                         "with the Python it was made with.")
    write_corpus_meta(own, describe, bank, schedule.first)
    # a pair that runs another's models (llama.cpp's run of qwen-coder) replays that pair's text
    given = open_corpus(corpus, {**describe, "family": family}, implicit) if corpus is not None else None
    if given is not None and Path(given).resolve() != own.resolve():
        have = corpus_batches(given)
        if have > meta["batches"]:
            say(f"batches {meta['batches'] + 1}-{have} come from the corpus in {given}: its text, the target's "
                "states recomputed over it (one forward per sequence)")
    else:
        given = None
    # a corpus made from another bank (another Python's standard library) is replayed as it is,
    # but a batch generated past it would answer this bank's prompts under the corpus's indices;
    # one made from this bank's first prompts (the bank has grown at its end since) goes on
    made = corpus_meta(given) if given is not None else {}
    foreign = given is not None and bank_prefix(bank, made.get("bank"), made.get("bank_prompts")) is None
    return own, schedule, given, foreign


def _generated(pair, bank: list, schedule: Schedule, batch: int, sampling: bool, done: int, seed: int,
               max_new_tokens: int, layers: tuple) -> tuple:
    """A new batch: the schedule's next prompts answered by the target, with their states."""
    picks = [schedule.next(len(bank)) for _ in range(batch)]
    chunk = [bank[i] for i, _ in picks]
    ids = [pair.encode(p.text, chat=p.chat) for p in chunk]
    # a sampling batch samples every answer, and so does every prompt the bank gives again
    # (its seed, from its place in the run, differs from its first answer's)
    sampled = [sampling or again for _, again in picks]
    with torch.inference_mode():
        rows = generate_rows(pair, ids, max_new_tokens, layers, [SAMPLE_WARP if s else Warp() for s in sampled],
                             seeds=[seed * 1_000_003 + done + j for j in range(batch)])
    entries = [{"length": len(row["tokens"]), "prompt": picks[j][0], "kind": p.kind,
                "prompt_tokens": len(ids[j]), "answer_tokens": len(row["answer"]),
                "sampled": sampled[j], "held_out": held_out(p)}
               for j, (p, row) in enumerate(zip(chunk, rows))]
    return entries, rows


def _append(folder: Path, meta: dict, entries: list, rows: list) -> None:
    """A batch's tokens, labels and features at the end of the data files, synced, and its
    sequences in the meta (written after, by the caller: a crash re-does one batch)."""
    with open(folder / "tokens.i32", "ab") as t, open(folder / "labels.i32", "ab") as lab, \
            open(folder / "feats.f16", "ab") as f:
        for entry, row in zip(entries, rows):
            n = len(row["tokens"])
            t.write(np.asarray(row["tokens"], np.int32).tobytes())
            lab.write(row["labels"].astype(np.int32).tobytes())
            f.write(np.ascontiguousarray(row["feats"], np.float16).tobytes())
            meta["sequences"].append({"start": meta["tokens"], **entry})
            meta["tokens"] += n
        for fh in (t, lab, f):
            fh.flush()
            os.fsync(fh.fileno())


def selfgen(pair, folder: Path, tokens: int, batch: Optional[int] = None, max_new_tokens: int = 256, seed: int = 0,
            progress: bool = True, layers: Optional[tuple] = None, corpus="checkout") -> SelfData:
    """Generate (or go on generating) until `folder` holds at least `tokens` positions; `layers`:
    the hidden states kept besides the last one (default: `feature_layers`, EAGLE-3's three).
    `corpus`: a folder of text made before (a run's corpus/, or a checkout's data/selfgen/<pair>)
    whose batches are replayed instead of generated; "checkout" (the default): the checkout's own
    for this pair, if any; None: generate every batch."""

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    implicit = corpus == "checkout"
    if implicit:
        corpus = checkout_corpus(pair.family or pair.name)  # llama.cpp's run of qwen-coder replays qwen-coder's text
    n_layers = getattr(pair.target, "n_layers", None) or pair.target.config.num_hidden_layers  # llama.cpp's, transformers'
    layers = tuple(layers) if layers else feature_layers(n_layers)
    if any(not isinstance(i, int) or not 0 <= i < n_layers for i in layers):
        raise InputError(f"layers must be whole numbers from 0 to {n_layers - 1} (the inputs of the target's "
                         f"decoder layers, 0 = the embeddings), got {list(layers)}.")
    hidden = hidden_and_vocab(pair.target)[0]
    meta_path = folder / "selfgen.json"
    batch = _batch_size(batch, meta_path, corpus)
    describe = {"version": VERSION, "pair": pair.name, "dtype": str(pair.dtype).replace("torch.", ""),
                "layers": list(layers), "n_layers": n_layers, "hidden_size": hidden, "seed": seed,
                "batch": batch, "max_new_tokens": max_new_tokens, "sample_every": SAMPLE_EVERY,
                "sample_warp": {"temperature": SAMPLE_WARP.temperature, "top_p": SAMPLE_WARP.top_p}}
    with files.lock(meta_path, f"generating {pair.name}'s training data in {folder}", say):
        row_bytes = {"tokens.i32": 4, "labels.i32": 4, "feats.f16": 2 * (len(layers) + 1) * hidden}
        meta = _resume(folder, meta_path, describe, row_bytes)
        need_disk(folder, tokens - meta["tokens"], sum(row_bytes.values()), batch * max_new_tokens)
        bank = prompt_bank(seed)
        own, schedule, given, foreign = _texts(folder, meta, describe, bank, corpus, implicit, pair.family)
        bar = progress_bar(tokens, "selfgen", initial=min(tokens, meta["tokens"]), smoothing=0.05) if progress else None
        try:
            while meta["tokens"] < tokens:
                done, b = meta["prompts_done"], meta["batches"]
                started = time.perf_counter()
                sampling = b % SAMPLE_EVERY == SAMPLE_EVERY - 1  # every SAMPLE_EVERY-th batch samples
                stored, replayed_from = read_corpus_batch(own, b), own
                if stored is None and given is not None:
                    stored, replayed_from = read_corpus_batch(given, b), given
                if stored is not None:  # text made before: its states again, no generating
                    entries, seq_tokens = stored
                    # its prompts as the run gave them: the bank's next ones, or (gone round it) the
                    # round's, even where the bank has grown at its end since
                    if len(entries) != batch or not replays(schedule, entries, len(bank), sampling):
                        raise InputError(f"{corpus_batch_path(replayed_from, b)} does not hold batch {b} of this "
                                         "run (its prompts differ): delete it, or give --corpus none.")
                    with torch.inference_mode():
                        rows = replay_rows(pair, seq_tokens, layers)
                elif foreign:  # here the corpus has no batch b: generating would go past it
                    raise InputError(f"the corpus in {given} was made from another prompt bank (another Python's "
                                     f"standard library): its {b} batches are replayed, but generating past them "
                                     "would answer other prompts. Generate more with the Python it was made "
                                     "with, or give --corpus none.")
                else:
                    entries, rows = _generated(pair, bank, schedule, batch, sampling, done, seed, max_new_tokens,
                                               layers)
                _append(folder, meta, entries, rows)
                if replayed_from is not own or stored is None:  # the text, after the data, before the meta
                    write_corpus_batch(own, b, entries, [row["tokens"] for row in rows])
                    write_corpus_meta(own, describe, bank, schedule.first)
                meta["prompts_done"] = done + batch
                meta["batches"] += 1
                meta["seconds"] = meta.get("seconds", 0.0) + time.perf_counter() - started
                files.write_json(meta_path, meta, indent=None)  # after the data: a crash re-does one batch
                if bar is not None:
                    bar.update(min(tokens, meta["tokens"]) - bar.n)
                    bar.set_postfix(tok_s=f"{meta['tokens'] / max(meta['seconds'], 1e-9):.0f}", refresh=False)
        finally:
            if bar is not None:
                bar.close()
    return SelfData(folder)


def main(argv=None) -> int:
    import argparse


    parser = argparse.ArgumentParser(prog="python -m specviz selfgen", description=__doc__.split("\n\n")[0])
    parser.add_argument("--pair", default=None, help="preset name (default: $SPECVIZ_PAIR or qwen-coder)")
    parser.add_argument("--tokens", type=int, default=1_000_000, help="positions to generate, prompts included")
    parser.add_argument("--batch", type=int, default=None, help="prompts answered together, one target pass per step "
                        f"(default: the run's own when it goes on, else {DEFAULT_BATCH})")
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="folder (default: the pair's training folder / selfgen)")
    parser.add_argument("--layers", default="", help="the hidden states to keep besides the last one, as the inputs "
                        "of these decoder layers, e.g. 2,14,25 (default: EAGLE-3's low, middle and high)")
    parser.add_argument("--corpus", default="checkout", help="text generated before, whose batches are replayed "
                        "(the target's states recomputed) instead of generated: a run's corpus/ folder; default: "
                        "a source checkout's data/selfgen/<pair>, if it has one; none: generate every batch")
    args = parser.parse_args(argv)

    def body() -> int:
        if args.tokens < 1 or (args.batch is not None and args.batch < 1) or args.max_new_tokens < 1:
            raise InputError("--tokens, --batch and --max-new-tokens must be positive whole numbers.")
        try:
            layers = tuple(int(x) for x in args.layers.split(",") if x.strip())
        except ValueError:
            raise InputError(f"--layers takes whole numbers separated by commas, got {args.layers!r}.") from None
        pair = load_pair(args.pair)
        out = Path(args.out) if args.out else files.train_dir(pair.name) / "selfgen"
        corpus = None if args.corpus.lower() == "none" else args.corpus if args.corpus == "checkout" else Path(args.corpus)
        if isinstance(corpus, Path) and not (corpus / "corpus.json").exists():
            raise InputError(f"--corpus {corpus}: no corpus there (a folder with corpus.json and batch-NNNNN.npz files).")
        data = selfgen(pair, out, args.tokens, args.batch, args.max_new_tokens, args.seed, layers=layers or None,
                       corpus=corpus)
        say(f"{data.meta['tokens']} positions from {len(data.sequences)} answers in {out}")
        return 0

    return run_command(body, "interrupted; the finished batches are kept and the same command resumes after them")


if __name__ == "__main__":
    raise SystemExit(main())
