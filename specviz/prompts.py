"""The suite's fixed prompt set: one prompt per category, chosen for what each category stresses.

  code        code completion (no chat template): a draft model of the same family agrees often
  rewrite     a code rewrite whose answer repeats most of its input: copying drafters (prompt
              lookup) shine here
  chat        an open chat answer: the hardest case for any drafter
  summary     summarisation of a passage given in the prompt: some copying, some paraphrase
  creative    creative writing: low agreement, the case where speculation can lose

The texts are fixed so that runs are comparable across commits and machines.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Prompt:
    category: str
    text: str
    chat: bool
    description: str


_REWRITE_SOURCE = '''def summarize(records):
    total = 0
    count = 0
    largest = None
    for record in records:
        value = record["value"]
        total += value
        count += 1
        if largest is None or value > largest:
            largest = value
    if count == 0:
        return {"total": 0, "mean": 0.0, "largest": None}
    return {"total": total, "mean": total / count, "largest": largest}
'''

_PASSAGE = (
    "The lighthouse at Cape Serrat was built in 1862 to guard a stretch of coast where more than "
    "forty ships had run aground in the previous decade. Its first keepers lit the lamp with "
    "whale oil, then paraffin, and from 1931 with electricity supplied by a diesel generator. "
    "In 1998 the light was automated and the last keeper left; the tower now runs on solar "
    "panels and a battery bank, and a technician visits twice a year. Local volunteers opened "
    "the keeper's house as a small museum in 2005, where visitors can see the original Fresnel "
    "lens, the logbooks of storms, and a collection of objects washed ashore from wrecks."
)

PROMPTS = {
    "code": Prompt("code completion",
                   'def is_prime(n: int) -> bool:\n    """Return True if n is a prime number."""\n',
                   False, "complete a function from its signature and docstring"),
    "rewrite": Prompt("code rewrite",
                      "Rename the variable `total` to `acc` in this function and return only the "
                      "code:\n\n" + _REWRITE_SOURCE,
                      True, "rename a variable in a 13-line function (answer copies the input)"),
    "chat": Prompt("chat", "Explain in a short paragraph why the sky is blue.", True,
                   "open question, free-form answer"),
    "summary": Prompt("summarisation", _PASSAGE + "\n\nSummarise the passage above in two sentences.",
                      True, "summarise a 120-word passage given in the prompt"),
    "creative": Prompt("creative writing",
                       "Write a short poem about a lighthouse keeper who learns to program.", True,
                       "a short poem"),
}


# A bank of requests for the batched (serving) measurements: 32 different code completions, so
# a batch of B users holds B different prompts of different lengths. Completions without a chat
# template, like `code` above, where a draft of the same family has something to agree on.
SERVING_BANK = (
    'def is_prime(n: int) -> bool:\n    """Return True if n is a prime number."""\n',
    'def reverse_words(sentence: str) -> str:\n    """Reverse the order of the words in a sentence."""\n',
    'def fibonacci(n):\n    """Return the n-th Fibonacci number, iteratively."""\n',
    'def flatten(nested):\n    """Flatten a list of lists into one list."""\n',
    'def count_vowels(text: str) -> int:\n    """Count the vowels in text."""\n',
    'def gcd(a: int, b: int) -> int:\n    """Greatest common divisor by Euclid\'s algorithm."""\n',
    'def binary_search(items, target):\n    """Return the index of target in the sorted list items, or -1."""\n',
    'def merge_sorted(a, b):\n    """Merge two sorted lists into one sorted list."""\n',
    'class Stack:\n    """A last-in, first-out stack."""\n\n    def __init__(self):\n',
    'def celsius_to_fahrenheit(c: float) -> float:\n',
    'import json\n\ndef load_config(path):\n    """Read a JSON config file and return it as a dict."""\n',
    'def is_palindrome(s: str) -> bool:\n    """True if s reads the same backwards, ignoring case and spaces."""\n',
    'def factorial(n: int) -> int:\n    """n! for n >= 0."""\n',
    'def chunks(items, size):\n    """Yield successive chunks of `size` items."""\n',
    'def word_count(text):\n    """Return a dict mapping each word to how often it occurs."""\n',
    'class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = y\n\n    def distance(self, other):\n',
    'def transpose(matrix):\n    """Transpose a list-of-lists matrix."""\n',
    'def unique(items):\n    """Return the items without duplicates, keeping their order."""\n',
    'def read_lines(path):\n    """Return the lines of a text file without trailing newlines."""\n',
    'def max_subarray(nums):\n    """Largest sum of a contiguous subarray (Kadane)."""\n',
    'def to_snake_case(name: str) -> str:\n    """Convert CamelCase to snake_case."""\n',
    'import math\n\ndef circle_area(r):\n',
    'def bubble_sort(arr):\n    """Sort arr in place with bubble sort and return it."""\n',
    'def is_anagram(a: str, b: str) -> bool:\n',
    'class Queue:\n    """A first-in, first-out queue on two stacks."""\n\n    def __init__(self):\n',
    'def sum_digits(n: int) -> int:\n    """Sum of the decimal digits of n."""\n',
    'def remove_none(d: dict) -> dict:\n    """Return a copy of d without the keys whose value is None."""\n',
    'def power_set(items):\n    """All subsets of items, as lists."""\n',
    'def capitalize_words(s):\n',
    'def moving_average(values, window):\n    """Averages over a sliding window of the given size."""\n',
    'def rotate(items, k):\n    """Rotate a list to the right by k places."""\n',
    'def parse_csv_line(line: str) -> list:\n    """Split one CSV line on commas, stripping whitespace."""\n',
)


# Repeated work, for suffix decoding (specviz.drafters.suffix; the benchmark specviz.bench.repeated):
# a task asked several times in a session, each turn a new request. "again": the same request
# with a small change, nothing of the earlier answer in the prompt (what an agent re-running a
# step, or the next user asking nearly the same, sends). "edit": an edit loop, each turn pasting
# the previous turn's answer ({previous}) and asking for one more change (what an editor sends).
@dataclass(frozen=True)
class RepeatedTask:
    name: str
    kind: str  # "again" | "edit"
    turns: tuple  # the requests in order; an edit turn's {previous} is the previous turn's answer
    chat: bool = True


REPEATED = (
    RepeatedTask("column-stats", "again", (
        "Write a Python function `column_stats(path, column)` that reads a CSV file with the csv module and "
        "returns the minimum, maximum and mean of one numeric column.",
        "Write a Python function `column_stats(path, column)` that reads a CSV file with the csv module and "
        "returns the minimum, maximum and mean of one numeric column, skipping empty cells.",
        "Write a Python function `column_stats(path, column)` that reads a CSV file with the csv module and "
        "returns the minimum, maximum, mean and median of one numeric column.")),
    RepeatedTask("retry", "again", (
        "Write a Python decorator `retry(times)` that calls the decorated function again when it raises an "
        "exception, up to `times` attempts in all.",
        "Write a Python decorator `retry(times)` that calls the decorated function again when it raises an "
        "exception, up to `times` attempts in all, waiting one second between attempts.",
        "Write a Python decorator `retry(times)` that calls the decorated function again when it raises an "
        "exception, up to `times` attempts in all, and re-raises the last exception when every attempt failed.")),
    RepeatedTask("agent-step", "again", (
        "You are a coding agent fixing the failing test `test_parse_date` in `dates.py`. Observation: "
        "`AssertionError: parse_date('2024-02-30') should raise ValueError`. Reply with the next action as a "
        'JSON object {"tool": ..., "args": ...} and one sentence saying why.',
        "You are a coding agent fixing the failing test `test_parse_date` in `dates.py`. Observation: "
        "`AssertionError: parse_date('2023-13-01') should raise ValueError`. Reply with the next action as a "
        'JSON object {"tool": ..., "args": ...} and one sentence saying why.',
        "You are a coding agent fixing the failing test `test_parse_date` in `dates.py`. Observation: "
        "`TypeError: parse_date() missing 1 required positional argument: 'text'`. Reply with the next action "
        'as a JSON object {"tool": ..., "args": ...} and one sentence saying why.')),
    RepeatedTask("stack", "edit", (
        "Write a Python class `Stack` with push, pop and peek methods that raises IndexError on an empty stack.",
        "Here is my class:\n\n{previous}\n\nAdd a `__len__` method and an `is_empty` method; give the whole class.",
        "Here is my class:\n\n{previous}\n\nAdd type hints to every method; give the whole class.")),
    RepeatedTask("slugify", "edit", (
        "Write a Python function `slugify(title)` that lowercases a title and replaces spaces with hyphens.",
        "Here is my function:\n\n{previous}\n\nAlso remove every character that is not a letter, a digit or a "
        "hyphen; give the whole function.",
        "Here is my function:\n\n{previous}\n\nAlso collapse repeated hyphens into one; give the whole function.")),
)


def turn_text(task: RepeatedTask, turn: int, previous: str = "") -> str:
    """Turn `turn` (0-based) of `task`, an edit turn holding the previous turn's answer."""
    text = task.turns[turn]
    return text.replace("{previous}", previous) if task.kind == "edit" else text
