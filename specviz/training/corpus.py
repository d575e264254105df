"""The text of a selfgen run, batch by batch: each batch's sequences (prompt and answer tokens,
whether sampled, whether held out) in a small compressed file, and the run's meta beside them.
A corpus is enough to recompute a run's features in another dtype, or on another machine.
"""

from __future__ import annotations

import json
import zipfile
import zlib
from pathlib import Path
from typing import Optional

import numpy as np

from specviz import files
from specviz.errors import InputError
from specviz.training.progress import say
from specviz.training.prompt_bank import PROMPT_KINDS

# ---------------------------------------------------------------------------------------------
# the corpus: the text of a run, batch by batch

CORPUS_FIELDS = ("length", "prompt", "prompt_tokens", "answer_tokens", "sampled", "held_out")
# what a corpus must share with a run to stand for its batches (the dtype may differ: the text is
# the target's whatever it was computed in; only the recomputed states take the run's dtype)
CORPUS_KEYS = ("version", "pair", "layers", "n_layers", "hidden_size", "seed", "batch", "max_new_tokens",
               "sample_every", "sample_warp")


def bank_fingerprint(bank: list) -> str:
    """crc32 of the bank's texts in order: a corpus made from another bank (another Python's
    standard library) cannot be continued by generating, since prompts_done would point elsewhere."""
    return f"{zlib.crc32(chr(0).join(p.text for p in bank).encode()):08x}"


def bank_prefix(bank: list, fingerprint, size=None) -> Optional[int]:
    """How many of `bank`'s first prompts a corpus's bank `fingerprint` (bank_fingerprint) is, or
    None: another bank (another Python's standard library, another seed). A bank that grew at its
    end keeps a corpus's prompts where they were. `size`: the corpus's bank size, where its
    corpus.json says it; else every prefix is tried (one pass over the texts)."""
    if size is not None:
        ok = isinstance(size, int) and 0 < size <= len(bank) and bank_fingerprint(bank[:size]) == fingerprint
        return size if ok else None
    crc = 0
    for n, p in enumerate(bank, start=1):
        crc = zlib.crc32(((chr(0) if n > 1 else "") + p.text).encode(), crc)
        if f"{crc:08x}" == fingerprint:
            return n
    return None


class Schedule:
    """Which prompt a run gives next. Every prompt of the bank is answered once, in bank order,
    before any is given again; then the bank goes round again from its first prompt, each answer
    sampled. `first`: prompts answered so far (always the bank's first ones); `at`: the prompt the
    round gives next (in [0, first)). A bank that grew at its end after a run went round it has its
    new prompts answered next (greedy, as first answers are), and the round goes on after them
    where it stopped: the prompts already given keep their places."""

    def __init__(self, prompts=()):
        self.first = self.at = 0
        for i, prompt in enumerate(prompts):
            if self.take(prompt) is None:
                raise InputError(f"sequence {i} of the run answers prompt {prompt}, where the prompt bank's order "
                                 f"gives {self.first} or {self.at}: it was made from another bank; give another "
                                 "--out (or delete that folder to start again).")

    def next(self, bank_size: int) -> tuple:
        """(the next prompt's index, whether it was answered before), and move on."""
        if self.first < bank_size:
            self.first += 1
            return self.first - 1, False
        prompt, self.at = self.at, (self.at + 1) % self.first
        return prompt, True

    def take(self, prompt: int):
        """Move on past `prompt`, a recorded answer's, if it is one the run gives next: False for
        its next new prompt, True for the round's next one (given again); None (and no move) for
        any other."""
        if prompt == self.first:
            self.first += 1
            return False
        if self.first and prompt == self.at:
            self.at = (self.at + 1) % self.first
            return True
        return None


def replays(schedule: Schedule, entries: list, bank_size: int, sampling: bool) -> bool:
    """Whether a stored batch's `entries` are the run's next answers (moving `schedule` past them):
    each the bank's next new prompt or the round's next one, sampled in a sampling batch or when
    given again, and no new prompt after one given again (the bank does not grow within a batch)."""
    again_seen = False
    for e in entries:
        if e["prompt"] >= bank_size:
            return False
        again = schedule.take(e["prompt"])
        if again is None or (again_seen and not again) or e["sampled"] != (sampling or again):
            return False
        again_seen = again_seen or again
    return True


def corpus_batch_path(corpus: Path, b: int) -> Path:
    return Path(corpus) / f"batch-{b:05d}.npz"


def write_corpus_batch(corpus: Path, b: int, sequences: list, tokens: list) -> None:
    """Batch b's text: `tokens`, one list per sequence, and its sequences' entries of selfgen.json."""
    import io

    arrays = {"tokens": np.concatenate([np.asarray(t, np.int32) for t in tokens]) if tokens else np.zeros(0, np.int32),
              "kind": np.asarray([PROMPT_KINDS.index(s["kind"]) for s in sequences], np.uint8)}
    for name in CORPUS_FIELDS:
        arrays[name] = np.asarray([s[name] for s in sequences], bool if name in ("sampled", "held_out") else np.int32)
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    files.write_bytes(corpus_batch_path(corpus, b), buffer.getvalue())


def read_corpus_batch(corpus: Path, b: int) -> Optional[tuple]:
    """([sequence entries without "start"], [token lists]) of batch b, or None if the corpus lacks it."""
    path = corpus_batch_path(corpus, b)
    if not path.exists():
        return None
    try:
        with np.load(path) as z:
            arrays = {name: z[name] for name in ("tokens", "kind", *CORPUS_FIELDS)}
    except (OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:
        raise InputError(f"{path} is not a corpus batch ({exc}): delete it, and the run generates that batch.") from None
    ends = np.cumsum(arrays["length"])
    if len(ends) and ends[-1] != len(arrays["tokens"]):
        raise InputError(f"{path} is cut short (its sequences' lengths add up to {int(ends[-1])} tokens, it holds "
                         f"{len(arrays['tokens'])}): delete it, and the run generates that batch.")
    sequences, tokens = [], []
    for i, end in enumerate(ends):
        if not 0 <= int(arrays["kind"][i]) < len(PROMPT_KINDS):
            raise InputError(f"{path} is not a corpus batch (kind {int(arrays['kind'][i])} of sequence {i}): "
                             "delete it, and the run generates that batch.")
        entry = {"kind": PROMPT_KINDS[int(arrays["kind"][i])]}
        for name in CORPUS_FIELDS:
            value = arrays[name][i]
            entry[name] = bool(value) if name in ("sampled", "held_out") else int(value)
        sequences.append(entry)
        tokens.append(arrays["tokens"][end - entry["length"]:end].tolist())
    return sequences, tokens


def corpus_meta(corpus: Path) -> dict:
    """corpus.json of `corpus`, or one InputError saying what to do."""
    path = Path(corpus) / "corpus.json"
    try:
        meta = json.loads(path.read_text())
        if not isinstance(meta, dict):
            raise ValueError("not a JSON object")
        return meta
    except (OSError, ValueError) as exc:
        raise InputError(f"{path} cannot be read ({exc}): restore it from the repository (data/selfgen), "
                         "or give --corpus none.") from None


def corpus_differs(corpus: Path, describe: dict) -> list:
    """The settings (of CORPUS_KEYS) in which `corpus` differs from a run's, as "key=value" of the corpus."""
    meta = corpus_meta(corpus)
    same = lambda k: meta.get(k) == describe[k] or (k == "pair" and meta.get(k) == describe.get("family"))  # noqa: E731
    return [f"{k}={meta.get(k)!r}" for k in CORPUS_KEYS if not same(k)]  # a family's pairs share their text


def open_corpus(corpus: Optional[Path], describe: dict, implicit: bool = False) -> Optional[Path]:
    """`corpus` if it holds batches made with the run's settings (None: no corpus given, or a
    folder that does not exist). A corpus of other settings is refused, naming them, when it was
    asked for; the checkout's own (`implicit`, the default) is then left aside with a note, so
    that a run of other settings goes on as it did before corpora existed."""
    if corpus is None or not (Path(corpus) / "corpus.json").exists():
        return None
    differ = corpus_differs(corpus, describe)
    if differ and implicit:
        say(f"not replaying the corpus in {corpus}: it was made with other settings ({', '.join(differ)})")
        return None
    if differ:
        raise InputError(f"the corpus in {corpus} was generated with other settings ({', '.join(differ)}): "
                         "run with those settings, or give --corpus none to generate everything.")
    return Path(corpus)


def corpus_batches(corpus: Path) -> int:
    """How many batches the corpus holds from the first on (0, 1, ... with none missing)."""
    b = 0
    while corpus_batch_path(corpus, b).exists():
        b += 1
    return b


def write_corpus_meta(corpus: Path, describe: dict, bank: list, answered: int) -> None:
    """corpus.json: the settings, the batches, and the fingerprint of the prompts those batches
    answered (the bank's first `answered`, `bank_prompts`): a bank changed only past them still
    continues it."""
    batches = corpus_batches(corpus)
    used = min(len(bank), answered) or len(bank)
    files.write_json(Path(corpus) / "corpus.json", {**{k: describe[k] for k in CORPUS_KEYS},
                                                    "bank": bank_fingerprint(bank[:used]), "bank_prompts": used,
                                                    "batches": batches})


def checkout_corpus(pair_name: str) -> Optional[Path]:
    """The corpus a source checkout keeps for `pair_name` (data/selfgen/<pair>/ beside the
    package), or None (an installed package, or a pair without one)."""
    folder = Path(__file__).resolve().parents[2] / "data" / "selfgen" / pair_name
    return folder if (folder / "corpus.json").exists() else None
