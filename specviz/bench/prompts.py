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
