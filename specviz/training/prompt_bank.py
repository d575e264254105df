"""The prompts selfgen's target answers: programming questions, rewrites of CPython's standard
library functions, chat and general questions, none of them a benchmark prompt. One prompt in
twelve (by a hash of its text) is held out, for the held-out acceptance bench.
"""

from __future__ import annotations

import ast
import random
import sysconfig
import zlib
from dataclasses import dataclass
from pathlib import Path

from specviz.prompts import PROMPTS, SERVING_BANK

HELD_OUT_EVERY = 12
PROMPT_KINDS = ("code", "rewrite", "chat", "general")  # a corpus file stores a sequence's kind as its index here


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
