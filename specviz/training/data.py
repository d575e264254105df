"""The training data of Medusa heads and EAGLE, in three cached phases (see specviz.training.train):
the target's own answers to the training prompts, the corpus (those answers plus CPython's
standard library source, tokenised, whole documents held out), and the target's features (its
last hidden state and argmax at every position, memory-mapped: training never runs the target
again). EAGLE-3 and P-EAGLE read selfgen's data instead (`selfgen_features`).
"""

from __future__ import annotations

import json
import random
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from specviz import files
from specviz.runtime.head_nets import hidden_and_vocab
from specviz.runtime.lm import runner_for
from specviz.training.progress import progress_bar as _progress, say as _say
from specviz.training.prompt_bank import stdlib_files

SEGMENT = 512  # tokens per target prefill; each segment is an independent sequence
MAX_SEGMENTS_PER_FILE = 3  # a long module gives at most this many segments: more modules, more variety
HELD_OUT_EVERY = 12  # every 12th document (of each source) is held out
PROMPTS_FILE = Path(__file__).resolve().parents[1] / "data" / "train_prompts.txt"


work_dir = files.train_dir  # where a pair's training data and checkpoints live (heads look there too)


# ---------------------------------------------------------------------------------------------
# phase 1: the target's own answers

def training_prompts() -> list:
    lines = PROMPTS_FILE.read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def target_responses(pair, folder: Path, max_new_tokens: int = 160, batch: int = 20,
                     prompts: Optional[int] = None) -> list:
    """The target's greedy answer (token ids) to each training prompt (the first `prompts` of
    them, default all), in chat form; cached in responses-<max_new_tokens>.json and resumed batch by batch."""
    path = folder / f"responses-{max_new_tokens}.json"
    prompts = training_prompts()[:prompts]
    done = json.loads(path.read_text()) if path.exists() else {"max_new_tokens": max_new_tokens, "answers": []}
    answers = done["answers"]
    eos = set(pair.eos_token_ids)
    bar = _progress(len(prompts), "responses", "prompt", initial=len(answers))
    while len(answers) < len(prompts):
        chunk = prompts[len(answers):len(answers) + batch]
        encoded = [pair.encode(p, chat=True) for p in chunk]
        width = max(map(len, encoded))
        pad = pair.eos_token_ids[0]
        ids = torch.tensor([[pad] * (width - len(e)) + e for e in encoded], device=pair.device)
        mask = torch.tensor([[0] * (width - len(e)) + [1] * len(e) for e in encoded], device=pair.device)
        with torch.inference_mode():
            out = pair.target.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new_tokens,
                                       do_sample=False, pad_token_id=pad, eos_token_id=sorted(eos))
        for prompt_ids, row in zip(encoded, out[:, width:].tolist()):
            cut = next((i + 1 for i, t in enumerate(row) if t in eos), len(row))
            answers.append({"prompt": prompt_ids, "answer": row[:cut]})
        files.write_json(path, done)
        bar.update(len(chunk))
    bar.close()
    return answers[:len(prompts)]


# ---------------------------------------------------------------------------------------------
# phase 2: the corpus

@dataclass
class Corpus:
    """Segments of at most SEGMENT token ids; `held_out[i]` marks the evaluation documents'."""

    segments: list = field(default_factory=list)
    sources: list = field(default_factory=list)  # per segment: "stdlib:json/decoder.py", "answer:12"
    held_out: list = field(default_factory=list)

    @property
    def tokens(self) -> int:
        return sum(map(len, self.segments))


def build_corpus(pair, answers: list, tokens: int, seed: int = 0) -> Corpus:
    """The target's answers first (each whole, as one document), then standard-library modules
    in a seeded shuffle until `tokens` token ids are collected."""
    corpus = Corpus()

    def add(ids: list, source: str, doc: int) -> None:
        held = doc % HELD_OUT_EVERY == HELD_OUT_EVERY - 1
        for n, start in enumerate(range(0, len(ids), SEGMENT)):
            if n == MAX_SEGMENTS_PER_FILE or corpus.tokens >= tokens:
                return
            piece = ids[start:start + SEGMENT][:tokens - corpus.tokens]
            if len(piece) < 16:
                return
            corpus.segments.append(piece)
            corpus.sources.append(source)
            corpus.held_out.append(held)

    for i, a in enumerate(answers):
        add(a["prompt"] + a["answer"], f"answer:{i}", i)
    root = Path(sysconfig.get_paths()["stdlib"])
    files = stdlib_files()
    random.Random(seed).shuffle(files)
    for i, path in enumerate(files):
        if corpus.tokens >= tokens:
            break
        text = path.read_text(encoding="utf-8", errors="replace")
        add(pair.encode(text), "stdlib:" + str(path.relative_to(root)), i)
    if not any(corpus.held_out) and len(set(corpus.sources)) > 1:  # a small corpus: hold out its last document
        last = corpus.sources[-1]
        corpus.held_out = [source == last for source in corpus.sources]
    return corpus


# ---------------------------------------------------------------------------------------------
# phase 3: the target's features, once

@dataclass
class Features:
    """Memory-mapped training data: at every position t of every segment, the token x_t, the
    target's last hidden state f_t (float16) and the target's argmax after it (its guess of x_{t+1})."""

    folder: Path
    meta: dict
    tokens: np.ndarray  # (N,) int32
    feats: np.ndarray  # (N, d) float16
    labels: np.ndarray  # (N,) int32

    @property
    def segments(self) -> list:
        """[(start, length, held_out)] of the extracted segments."""
        done = self.meta["done"]
        return [tuple(s) for s in self.meta["segments"][:done]]

    @property
    def hidden_size(self) -> int:
        return self.feats.shape[-1]

    @property
    def scored(self) -> Optional[np.ndarray]:
        """(N,) bool: the positions whose label is a token the drafter will draft, an answer's (selfgen
        data: from the last prompt token on, whose argmax is the answer's first token), or None (every
        position: the corpus). Prompt positions stay as context; they are neither trained on nor
        scored (the chat template's boilerplate, the same in every prompt, would inflate both)."""
        starts = self.meta.get("answer_from")
        if starts is None:
            return None
        if getattr(self, "_scored", None) is None:
            scored = np.zeros(len(self.tokens), dtype=bool)
            for (start, length, _), offset in zip(self.segments, starts):
                scored[start + offset:start + length] = True
            self._scored = scored
        return self._scored

    @property
    def layers(self) -> Optional[list]:
        """The target layers whose states feats holds before the last one (selfgen data), or None
        (feats is the last hidden state only)."""
        return self.meta.get("layers")


def selfgen_features(data, tokens: Optional[int] = None) -> Features:
    """specviz.training.selfgen's data (a SelfData) as training Features: feats (N, layers + 1, d).
    `tokens`: only the sequences that end within the first this many positions (a run that went
    on generating still trains, and reproduces, the heads made on its first `tokens`)."""
    kept = [s for s in data.meta["sequences"] if tokens is None or s["start"] + s["length"] <= tokens]
    segments = [[s["start"], s["length"], bool(s["held_out"])] for s in kept]
    n = segments[-1][0] + segments[-1][1] if segments else 0
    meta = {**{k: data.meta[k] for k in ("pair", "dtype", "seed", "layers", "max_new_tokens", "batch")},
            "source": "selfgen", "tokens": n, "segments": segments, "done": len(segments),
            "answer_from": [max(0, s["prompt_tokens"] - 1) for s in kept]}
    return Features(data.folder, meta, data.tokens[:n], data.feats[:n], data.labels[:n])


def extract_features(pair, corpus: Corpus, folder: Path, describe: dict) -> Features:
    """Run the target once over every segment (resuming after the last finished one) and keep
    its last hidden state and argmax at every position."""

    folder.mkdir(parents=True, exist_ok=True)
    meta_path = folder / "features.json"
    starts = np.cumsum([0] + [len(s) for s in corpus.segments]).tolist()
    segments = [[starts[i], len(s), bool(h)] for i, (s, h) in enumerate(zip(corpus.segments, corpus.held_out))]

    n, d = starts[-1], hidden_and_vocab(pair.target)[0]
    meta = {**describe, "tokens": n, "hidden_size": d, "segments": segments, "sources": corpus.sources, "done": 0}
    if meta_path.exists():
        old = json.loads(meta_path.read_text())
        if all(old.get(key) == meta[key] for key in (*describe, "tokens", "hidden_size", "segments")):
            meta["done"] = old["done"]
    mode = "r+" if meta["done"] and (folder / "feats.f16").exists() else "w+"
    tokens = np.memmap(folder / "tokens.i32", np.int32, mode, shape=(n,))
    feats = np.memmap(folder / "feats.f16", np.float16, mode, shape=(n, d))
    labels = np.memmap(folder / "labels.i32", np.int32, mode, shape=(n,))
    runner = runner_for(pair.target)
    bar = _progress(n, "features", initial=starts[meta["done"]])
    for i in range(meta["done"], len(segments)):
        start, length, _ = segments[i]
        runner.reset()
        logits, hidden = runner.forward(corpus.segments[i], hidden=True)
        tokens[start:start + length] = corpus.segments[i]
        feats[start:start + length] = hidden.float().cpu().numpy().astype(np.float16)
        labels[start:start + length] = logits.argmax(-1).cpu().numpy()
        meta["done"] = i + 1
        if (i + 1) % 8 == 0 or i + 1 == len(segments):  # a checkpoint: flushed arrays, then the count
            for array in (tokens, feats, labels):
                array.flush()
            files.write_json(meta_path, meta)
        bar.update(length)
    bar.close()
    return Features(folder, meta, tokens, feats, labels)


def load_features(folder: Path) -> Features:
    meta = json.loads((Path(folder) / "features.json").read_text())
    n, d = meta["tokens"], meta["hidden_size"]
    return Features(Path(folder), meta, np.memmap(folder / "tokens.i32", np.int32, "r", shape=(n,)),
                    np.memmap(folder / "feats.f16", np.float16, "r", shape=(n, d)),
                    np.memmap(folder / "labels.i32", np.int32, "r", shape=(n,)))


def prepare(pair, tokens: int, folder: Optional[Path] = None, seed: int = 0,
            response_tokens: int = 160, prompts: Optional[int] = None) -> Features:
    """Phases 1-3 for `pair`: the cached features of a `tokens`-token corpus (made or resumed),
    the target's answers to the first `prompts` training prompts (default: all) included."""
    folder = work_dir(pair.name, folder)
    folder.mkdir(parents=True, exist_ok=True)
    # one process at a time: a second one (a notebook beside the CLI) waits, then finds the
    # answers and features the first wrote and resumes past them
    with files.lock(folder / "data", f"preparing {pair.name}'s training data", _say):
        answers = target_responses(pair, folder, response_tokens, prompts=prompts)
        corpus = build_corpus(pair, answers, tokens, seed)
        describe = {"pair": pair.name, "dtype": str(pair.dtype).replace("torch.", ""), "seed": seed,
                    "python": sysconfig.get_python_version(), "response_tokens": response_tokens}
        name = f"data-{tokens}"
        if prompts is not None:  # a smaller corpus (a notebook's live run): its own folder
            describe["prompts"] = len(answers)
            name += f"-p{len(answers)}"
        return extract_features(pair, corpus, folder / name, describe)
