"""The target's own generations at scale, with the features EAGLE-3 reads: training data that
matches decoding.

    python -m specviz selfgen --pair qwen-coder --tokens 1000000     (hours on a CPU; resumable)

A drafter is judged by how often it agrees with the target while the target decodes, so it should
learn from text the target writes, read through the target's own states (EAGLE-3 regenerates its
training data with the target for this reason). This module has the target answer a bank of
prompts (`prompt_bank`: code to complete, code to rewrite, explain or test, programming
questions), batched on specviz's batched engine runner (`specviz.batch.BatchLM`, one target pass
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

import ast
import json
import os
import random
import sys
import sysconfig
import time
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from specviz import files
from specviz.config import Warp
from specviz.errors import InputError

HELD_OUT_EVERY = 12
PROMPT_KINDS = ("code", "rewrite", "chat", "general")  # a corpus file stores a sequence's kind as its index here
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
# the prompt bank

@dataclass(frozen=True)
class BankPrompt:
    kind: str  # "code" (completion, no chat template) | "rewrite" | "chat"
    text: str
    chat: bool


# chat questions, programming topics a coding assistant is asked about (none of the benchmark's prompts)
TOPICS = (
    "list comprehensions", "generators", "decorators", "context managers", "dataclasses", "type hints",
    "recursion", "binary search", "hash tables", "linked lists", "binary trees", "graph traversal",
    "breadth-first search", "depth-first search", "dynamic programming", "memoization", "sorting algorithms",
    "merge sort", "quicksort", "heaps", "big-O notation", "closures", "lambda functions", "iterators",
    "exceptions", "unit testing", "mocking in tests", "regular expressions", "string formatting",
    "file handling", "JSON parsing", "CSV files", "virtual environments", "package management",
    "the global interpreter lock", "threads", "processes", "async and await", "event loops",
    "sockets", "HTTP requests", "REST APIs", "SQL joins", "database indexes", "transactions",
    "caching", "logging", "command-line arguments", "environment variables", "immutability",
    "shallow and deep copies", "mutable default arguments", "slicing", "the walrus operator",
    "pattern matching", "enums", "abstract base classes", "multiple inheritance", "method resolution order",
    "properties", "class methods and static methods", "magic methods", "operator overloading",
    "generics", "protocols", "duck typing", "garbage collection", "reference counting",
    "bit manipulation", "floating-point rounding", "Unicode and encodings", "date and time handling",
    "time zones", "random numbers and seeds", "hashing passwords", "git branches", "merge conflicts",
    "code review", "refactoring", "naming variables", "writing docstrings", "profiling code",
    "vectorisation with NumPy", "pandas DataFrames", "matrix multiplication", "gradient descent",
    "tokenisation", "the softmax function", "cross-entropy loss", "overfitting", "batching",
    "key-value caches", "speculative decoding", "quantisation", "memory bandwidth", "cache locality",
    "stack and heap memory", "pointers", "compilers and interpreters", "bytecode", "just-in-time compilation",
    "Docker containers", "continuous integration", "semantic versioning", "API design", "pagination",
    "rate limiting", "retries with backoff", "idempotency", "race conditions", "deadlocks", "mutexes",
    "queues", "producer-consumer patterns", "map and reduce", "functional programming", "currying",
    "tail calls", "state machines", "parsers", "tries", "union-find", "Dijkstra's algorithm",
    "topological sorting", "sliding windows", "two pointers", "prefix sums", "bloom filters",
)
CHAT_TEMPLATES = (
    "Explain {t} to a programmer who is new to Python.",
    "What are common mistakes people make with {t}? Give examples.",
    "Write a short Python example that shows {t}, and explain it.",
    "When should I use {t}, and when should I avoid it?",
    "Give me three interview questions about {t}, with brief answers.",
    "Summarise {t} in five bullet points.",
)
REWRITE_TEMPLATES = (
    "Rewrite this function so that it is easier to read, keeping its behaviour:\n\n```python\n{code}\n```",
    "Add type hints to this function and return only the code:\n\n```python\n{code}\n```",
    "Explain step by step what this function does:\n\n```python\n{code}\n```",
    "Write pytest unit tests for this function:\n\n```python\n{code}\n```",
    "Is there an edge case this function does not handle? Explain and fix it:\n\n```python\n{code}\n```",
    "Write a docstring for this function:\n\n```python\n{code}\n```",
    "What does `{name}` from Python's `{module}` module do? Give a short example of using it.",
)


# general chat: what a chat model is asked besides programming (EAGLE-3 learns from ShareGPT and
# UltraChat, conversations of every kind), so that a drafter meets prose, lists and verse as well as
# code. Nothing about the sky or light (the benchmark's chat prompt asks why the sky is blue), and no
# template that opens as a benchmark prompt does (its creative one asks for a short poem).
GENERAL_TOPICS = (
    "photosynthesis", "the water cycle", "volcanoes", "earthquakes", "tides", "the seasons",
    "the phases of the Moon", "black holes", "gravity", "magnetism", "electricity", "sound", "the immune system",
    "vaccines", "antibiotics", "DNA", "evolution", "sleep", "dreams", "memory", "the human heart", "digestion",
    "muscles and exercise", "nutrition", "vitamins", "dinosaurs", "bees and pollination", "bird migration",
    "coral reefs", "rainforests", "deserts", "ocean currents", "recycling", "renewable energy", "wind turbines",
    "nuclear power", "batteries", "electric cars", "the internet", "smartphones", "satellites", "3D printing",
    "robots", "the printing press", "the Industrial Revolution", "the Roman Empire", "ancient Egypt",
    "the Silk Road", "the Renaissance", "the French Revolution", "the Moon landing", "the Olympic Games",
    "democracy", "taxes", "inflation", "compound interest", "supply and demand", "budgeting",
    "saving for retirement", "insurance", "the stock market", "international trade", "banks",
    "learning a new language", "public speaking", "time management", "procrastination", "habits",
    "motivation", "teamwork", "giving feedback", "job interviews", "negotiation", "friendship", "stress",
    "gardening", "composting", "houseplants", "baking bread", "making coffee", "tea", "fermentation",
    "chocolate", "cheese", "running", "swimming", "chess", "football", "cycling", "yoga", "hiking", "camping",
    "travelling on a budget", "volunteering", "museums", "libraries", "reading", "jazz", "classical music",
    "learning the piano", "photography", "watercolour painting", "origami", "knitting", "woodworking", "dogs",
    "cats", "horses", "elephants", "octopuses", "whales", "ants", "honey", "mountains", "rivers", "islands",
    "glaciers", "weather forecasting", "climate change", "air pollution", "plastic waste", "endangered species",
    "national parks", "city life", "public transport", "bridges", "architecture", "the Great Wall of China",
    "castles", "trains", "aeroplanes", "ships", "clocks", "calendars", "the metric system", "prime numbers",
    "probability", "the number zero", "geometry", "fractions", "infinity", "the scientific method",
    "Newton's laws of motion", "the periodic table", "atoms", "salt", "glass", "paper", "soap", "fire",
)
GENERAL_TEMPLATES = (
    "Explain {t} in simple terms.",
    "What are three interesting facts about {t}?",
    "How would you explain {t} to a ten-year-old?",
    "Write a few lines of verse about {t}.",
    "Give me some practical advice about {t}.",
)


def stdlib_files() -> list:
    """The standard library's top-level modules and packages' modules, test suites left out."""
    root = Path(sysconfig.get_paths()["stdlib"])
    skip = ("test", "tests", "idlelib", "lib2to3", "site-packages", "dist-packages", "ensurepip", "turtledemo")
    found = [p for p in root.rglob("*.py")
             if not any(part in skip or part.startswith("test_") for part in p.relative_to(root).parts)]
    return sorted(found, key=lambda p: str(p.relative_to(root)))


def _stdlib_functions(limit_per_module: int = 12) -> list:
    """(module, name, completion prompt, whole source) of standard-library functions with a
    docstring and a body of 3 to 30 lines, in a fixed order."""
    root = Path(sysconfig.get_paths()["stdlib"])
    out = []
    for path in stdlib_files():
        try:
            source = path.read_text(encoding="utf-8")
            tree = ast.parse(source)
        except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
            continue
        module = ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
        lines, found = source.splitlines(), 0
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.name.startswith("_"):
                continue
            doc = ast.get_docstring(node, clean=False)
            body = node.body
            if not doc or node.end_lineno is None or not 3 <= node.end_lineno - node.lineno <= 30 or len(body) < 2:
                continue
            first = node.decorator_list[0].lineno if node.decorator_list else node.lineno
            whole = lines[first - 1:node.end_lineno]
            indent = len(whole[0]) - len(whole[0].lstrip())
            whole = [line[indent:] for line in whole]
            head = [line[indent:] for line in lines[first - 1:body[0].end_lineno]]  # signature + docstring
            if "\t" in "".join(whole):
                continue
            out.append((module, node.name, "\n".join(head) + "\n", "\n".join(whole)))
            found += 1
            if found == limit_per_module:
                break
    return out


def _excluded() -> set:
    """Texts the benchmark and the tests decode: never training prompts."""
    from specviz.bench.prompts import PROMPTS, SERVING_BANK

    return {p.text for p in PROMPTS.values()} | set(SERVING_BANK)


# more general chat, added after the first (the held-out answers showed general questions the kind
# EAGLE-3 read worst): five more templates over those topics, and 159 more topics in all ten. The
# same exclusions as above.
GENERAL_TEMPLATES_MORE = (
    "What do most people get wrong about {t}?",
    "Give me a short quiz about {t}, with the answers.",
    "Describe {t} as a tour guide would.",
    "Why should anyone care about {t}?",
    "Imagine two friends chatting about {t}; write their conversation.",
)
GENERAL_TOPICS_MORE = (
    "snowflakes", "hurricanes", "tornadoes", "fossils", "caves", "sand dunes", "wetlands", "mushrooms", "ferns",
    "seeds", "trees", "autumn leaves", "frogs", "snakes", "sharks", "penguins", "owls", "bats", "butterflies",
    "spiders", "jellyfish", "wolves", "bears", "camels", "kangaroos", "parrots", "crows", "earthworms", "bacteria",
    "viruses", "cells", "the brain", "the skeleton", "blood", "the lungs", "hearing", "taste and smell",
    "allergies", "the common cold", "first aid", "drinking enough water", "posture", "meditation",
    "breathing exercises", "laughter", "computers", "search engines", "email", "passwords", "online privacy",
    "video games", "virtual reality", "drones", "self-driving cars", "the telephone", "radio", "television",
    "cameras", "microwave ovens", "refrigerators", "the compass", "maps", "GPS", "barcodes", "credit cards",
    "the Vikings", "the Maya", "the Aztecs", "ancient Greece", "ancient China", "the Ottoman Empire",
    "the Middle Ages", "knights", "pirates", "the age of exploration", "the invention of writing", "the wheel",
    "the steam engine", "the telegraph", "women's suffrage", "the abolition of slavery", "the Cold War",
    "the fall of the Berlin Wall", "the first cities", "cooking rice", "meal planning", "soup", "spices", "pizza",
    "pasta", "fruit", "vegetables", "eggs", "moving house", "renting a flat", "buying a used car", "laundry",
    "minimalism", "decluttering", "credit scores", "loans", "cryptocurrency", "small businesses", "advertising",
    "customer service", "remote work", "meetings", "writing emails", "note-taking", "studying for exams",
    "online courses", "choosing a career", "parenting", "grandparents", "birthdays", "weddings", "festivals",
    "board games", "puzzles", "magic tricks", "juggling", "dance", "theatre", "opera", "film", "poetry", "novels",
    "comics", "sculpture", "pottery", "calligraphy", "sewing", "fishing", "sailing", "skiing", "tennis",
    "basketball", "marathons", "martial arts", "rock climbing", "birdwatching", "lakes", "waterfalls", "forests",
    "farms", "cows", "chickens", "sheep and wool", "cotton", "silk", "steel", "concrete", "gold", "diamonds",
    "coal", "water treatment", "roads", "traffic jams", "airports",
)


def prompt_bank(seed: int = 0) -> list:
    """Every prompt of the bank, shuffled with `seed`: each standard-library function as a code
    completion (its signature and docstring) and as one rewrite-like request (a template chosen by
    a hash of its name), and every topic with every chat template; then the general chat
    (GENERAL_TOPICS x GENERAL_TEMPLATES), shuffled on its own and placed after the rest, and after
    it more of it (GENERAL_TEMPLATES_MORE, GENERAL_TOPICS_MORE), shuffled on its own: each came
    later, and a bank that grows at its end keeps every prompt of the runs and corpora made before
    in its place (`bank_prefix`, `Schedule`)."""
    bank = []
    for module, name, head, whole in _stdlib_functions():
        bank.append(BankPrompt("code", head, False))
        template = REWRITE_TEMPLATES[zlib.crc32(f"{module}.{name}".encode()) % len(REWRITE_TEMPLATES)]
        bank.append(BankPrompt("rewrite", template.format(code=whole, name=name, module=module), True))
    bank += [BankPrompt("chat", template.format(t=topic), True) for topic in TOPICS for template in CHAT_TEMPLATES]
    excluded = _excluded()
    seen: set = set()  # a function defined alike in two modules (overloads, copies) is asked once

    def block(prompts: list) -> list:
        """`prompts` without the excluded ones and those asked before, shuffled on their own."""
        kept = [p for p in prompts if p.text not in excluded and not (p.text in seen or seen.add(p.text))]
        random.Random(seed).shuffle(kept)
        return kept

    def general(topics, templates) -> list:
        return [BankPrompt("general", template.format(t=topic), True) for topic in topics for template in templates]

    return (block(bank) + block(general(GENERAL_TOPICS, GENERAL_TEMPLATES))
            + block(general(GENERAL_TOPICS, GENERAL_TEMPLATES_MORE)
                    + general(GENERAL_TOPICS_MORE, GENERAL_TEMPLATES + GENERAL_TEMPLATES_MORE)))


def held_out(prompt: BankPrompt) -> bool:
    return zlib.crc32(prompt.text.encode()) % HELD_OUT_EVERY == HELD_OUT_EVERY - 1


# ---------------------------------------------------------------------------------------------
# one batch: the answers, with the target's states from the passes that generate them

def generate_rows(pair, prompts: list, max_new_tokens: int, layers: tuple, warp=Warp(),
                  seeds: Optional[list] = None) -> list:
    """One batch: every prompt (token ids) answered by the target, one pass per step for all rows
    (`specviz.batch.BatchLM`; each prompt prefilled on its own, `BatchLM.prefill`), each pass also
    returning the states at `layers` (`BatchLM.forward(hidden=layers)`).
    Returns per row {"tokens", "labels", "feats", "answer"}: the positions the target ran on (the
    prompt and the answer but its last token), its argmax after each, and its states there
    ((n, len(layers) + 1, d) float16: the inputs of those layers, then the last hidden state after
    the final norm); "answer" is the whole answer, its last token included. `warp`: one Warp for
    every row, or a list of one per row."""
    from specviz.batch import BatchLM
    from specviz.sampling import sample, warp as warp_probs

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
    from specviz.batch import BatchLM

    out = []
    for tokens in sequences:
        runner = BatchLM(pair.target, 1)
        logits, states = runner.forward([list(tokens)], [len(tokens)], hidden=tuple(layers))
        out.append({"tokens": list(tokens), "labels": logits[0].argmax(-1).to("cpu", torch.int32).numpy(),
                    "feats": states[0].to("cpu", torch.float16).numpy()})
    return out


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


def _replays(schedule: Schedule, entries: list, bank_size: int, sampling: bool) -> bool:
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
    return [f"{k}={meta.get(k)!r}" for k in CORPUS_KEYS if meta.get(k) != describe[k]]


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
    folder = Path(__file__).resolve().parent.parent / "data" / "selfgen" / pair_name
    return folder if (folder / "corpus.json").exists() else None


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


def say(message: str) -> None:
    """One line on stderr (training's and generation's notes: a lock waited on, a run's end)."""
    print(f"[specviz] {message}", file=sys.stderr, flush=True)


def progress_bar(total: int, desc: str, unit: str = "tok", initial: int = 0, smoothing: float = 0.1):
    """A tqdm bar with an ETA for long work (SPECVIZ_QUIET=1 hides it)."""
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit=unit, initial=initial, unit_scale=True, smoothing=smoothing,
                dynamic_ncols=True, disable=os.environ.get("SPECVIZ_QUIET") == "1")


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


def selfgen(pair, folder: Path, tokens: int, batch: Optional[int] = None, max_new_tokens: int = 256, seed: int = 0,
            progress: bool = True, layers: Optional[tuple] = None, corpus="checkout") -> SelfData:
    """Generate (or go on generating) until `folder` holds at least `tokens` positions; `layers`:
    the hidden states kept besides the last one (default: `feature_layers`, EAGLE-3's three).
    `corpus`: a folder of text made before (a run's corpus/, or a checkout's data/selfgen/<pair>)
    whose batches are replayed instead of generated; "checkout" (the default): the checkout's own
    for this pair, if any; None: generate every batch."""
    from specviz.heads import hidden_and_vocab

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    implicit = corpus == "checkout"
    if implicit:
        corpus = checkout_corpus(pair.name)
    n_layers = pair.target.config.num_hidden_layers
    layers = tuple(layers) if layers else feature_layers(n_layers)
    if any(not isinstance(i, int) or not 0 <= i < n_layers for i in layers):
        raise InputError(f"layers must be whole numbers from 0 to {n_layers - 1} (the inputs of the target's "
                         f"decoder layers, 0 = the embeddings), got {list(layers)}.")
    hidden = hidden_and_vocab(pair.target)[0]
    meta_path = folder / "selfgen.json"
    if batch is None:  # a run goes on with its own batch size (which batches are sampled depends on it)
        try:
            batch = int(json.loads(meta_path.read_text())["batch"])
        except (OSError, ValueError, KeyError, TypeError):
            try:  # a new run over a corpus takes the corpus's (its batches are only valid at that size)
                batch = int(json.loads((Path(corpus) / "corpus.json").read_text())["batch"])
            except (OSError, ValueError, KeyError, TypeError):
                batch = DEFAULT_BATCH
    if not isinstance(batch, int) or batch < 1:
        raise InputError(f"batch must be a positive whole number, got {batch!r}.")
    describe = {"version": VERSION, "pair": pair.name, "dtype": str(pair.dtype).replace("torch.", ""),
                "layers": list(layers), "n_layers": n_layers, "hidden_size": hidden, "seed": seed,
                "batch": batch, "max_new_tokens": max_new_tokens, "sample_every": SAMPLE_EVERY,
                "sample_warp": {"temperature": SAMPLE_WARP.temperature, "top_p": SAMPLE_WARP.top_p}}
    with files.lock(meta_path, f"generating {pair.name}'s training data in {folder}", say):
        meta = {**describe, "tokens": 0, "prompts_done": 0, "batches": 0, "sequences": [], "seconds": 0.0}
        if meta_path.exists():
            old = json.loads(meta_path.read_text())
            if any(old.get(key) != value for key, value in describe.items()):
                raise InputError(f"{folder} holds data generated with other settings "
                                 f"({', '.join(k for k, v in describe.items() if old.get(k) != v)} differ): "
                                 "give another --out, or delete that folder to start again.")
            meta = old
        slots = len(layers) + 1
        row_bytes = {"tokens.i32": 4, "labels.i32": 4, "feats.f16": 2 * slots * hidden}
        for name, size in row_bytes.items():  # a batch cut short: back to the last whole one
            path = folder / name
            with open(path, "ab") as fh:
                fh.truncate(meta["tokens"] * size)
        need_disk(folder, tokens - meta["tokens"], sum(row_bytes.values()), batch * max_new_tokens)
        bank = prompt_bank(seed)
        # the run's own text, batch by batch (data made before the corpus existed: written from it now)
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
        given = open_corpus(corpus, describe, implicit) if corpus is not None else None
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
                    if len(entries) != batch or not _replays(schedule, entries, len(bank), sampling):
                        raise InputError(f"{corpus_batch_path(replayed_from, b)} does not hold batch {b} of this "
                                         "run (its prompts differ): delete it, or give --corpus none.")
                    with torch.inference_mode():
                        rows = replay_rows(pair, seq_tokens, layers)
                else:
                    if foreign:  # here the corpus has no batch b: generating would go past it
                        raise InputError(f"the corpus in {given} was made from another prompt bank (another Python's "
                                         f"standard library): its {b} batches are replayed, but generating past them "
                                         "would answer other prompts. Generate more with the Python it was made "
                                         "with, or give --corpus none.")
                    picks = [schedule.next(len(bank)) for _ in range(batch)]
                    chunk = [bank[i] for i, _ in picks]
                    ids = [pair.encode(p.text, chat=p.chat) for p in chunk]
                    # a sampling batch samples every answer, and so does every prompt the bank gives again
                    # (its seed, from its place in the run, differs from its first answer's)
                    sampled = [sampling or again for _, again in picks]
                    with torch.inference_mode():
                        rows = generate_rows(pair, ids, max_new_tokens, layers,
                                             [SAMPLE_WARP if s else Warp() for s in sampled],
                                             seeds=[seed * 1_000_003 + done + j for j in range(batch)])
                    entries = [{"length": len(row["tokens"]), "prompt": picks[j][0], "kind": p.kind,
                                "prompt_tokens": len(ids[j]), "answer_tokens": len(row["answer"]),
                                "sampled": sampled[j], "held_out": held_out(p)}
                               for j, (p, row) in enumerate(zip(chunk, rows))]
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

    from specviz.errors import run_command
    from specviz.models import load_pair

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
