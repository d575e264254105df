"""Notebook 6's exercises: prompt lookup.
"""

from __future__ import annotations

import random
from typing import Callable, Iterable, Optional

from specviz.drafters.lookup import lookup as engine_lookup
from specviz.teaching.exercises.checking import Case, Wrong, as_tokens, check_answer, replayed, run_cases

# notebook 6: prompt lookup

def _lookup_tokens(found) -> list:
    return [] if found is None else list(found["tokens"])


def _lookup_cases(events=None) -> list:
    words = str.split
    fixed = [
        ("a suffix that occurs once earlier", words("a b c d a b"), 3, 2, 1),
        ("the example of section 1", words("for item in items : total += item . price \n for item in"), 4, 3, 1),
        ("a suffix n-gram that occurs twice earlier", words("x a b c y a b d z a b"), 2, 2, 1),
        ("a text where only a shorter suffix occurs earlier", words("a b c d e c"), 2, 3, 1),
        ("a text where a longer and a shorter suffix both occur earlier, at different places",
         words("q r z p q r y p q r"), 3, 3, 1),
        ("a text with nothing to copy", words("a b c d"), 3, 3, 1),
        ("k = 0", words("a b a b"), 0, 2, 1),
        ("a single token", ["a"], 3, 3, 1),
        ("an empty text", [], 3, 3, 1),
        ("a match whose continuation is shorter than k", words("a b c a b"), 5, 2, 1),
        ("an earlier occurrence that overlaps the suffix itself", words("a a a a"), 3, 3, 1),
        ("min_ngram = 2 (a one-token match does not count)", words("a b c d e c"), 2, 3, 2),
        ("max_ngram longer than the text", words("a b a"), 2, 5, 1),
    ]
    cases = [Case(kind, (tokens, k), {"max_ngram": n, "min_ngram": m}) for kind, tokens, k, n, m in fixed]
    rng = random.Random(6)
    for _ in range(150):
        size, top = rng.randint(0, 18), rng.randint(1, 4)
        cases.append(Case("random texts over three token ids",
                           ([rng.randrange(3) for _ in range(size)], rng.randint(0, 5)),
                           {"max_ngram": top, "min_ngram": rng.randint(1, top)}))
    for step in _lookup_steps(events or []):
        cases.append(Case(f"step {step['step'] + 1} of your prompt-lookup run", (step["committed"], step["k"]),
                           {"max_ngram": step["ngram"], "min_ngram": 1}, {"tokens": step["drafts"]}))
    for case in cases:
        case.data.setdefault("tokens", _lookup_tokens(engine_lookup(*case.args, **case.kwargs)))
    return cases


def _lookup_steps(events) -> list:
    """The committed tokens before each step of a pld run, the k it was allowed and what it drafted."""
    events = [e if isinstance(e, dict) else e.to_dict() for e in events]
    started = next((e for e in events if e["kind"] == "run_started"), None)
    if started is None or started["method"] != "pld":
        return []
    committed, steps = list(started["prompt_ids"]), []
    ngram = (started.get("options") or {}).get("ngram", 3)
    for done in (e for e in events if e["kind"] == "step_finished"):
        drafts = [e["token_id"] for e in events if e["kind"] == "draft_proposed" and e["step"] == done["step"]]
        steps.append({"step": done["step"], "committed": list(committed), "k": done["k"], "ngram": ngram,
                      "drafts": drafts})
        committed += done["emitted_ids"]
    return steps


def _judge_lookup(got, case: Case) -> None:
    tokens, k = case.args
    want = case.data["tokens"]
    if isinstance(got, dict) and "tokens" in got:
        got = got["tokens"]
    if got is None:
        got = []
    if not isinstance(got, (list, tuple)):
        raise Wrong("return a list of tokens (empty when there is nothing to copy)")
    got = list(got)
    if got == want:
        return
    if len(got) > k:
        raise Wrong("it proposes more than k tokens")
    if not want:
        raise Wrong("it proposes tokens where there is nothing to copy (no earlier occurrence of a suffix "
                     "n-gram with n between min_ngram and max_ngram)")
    if not got:
        raise Wrong("it proposes nothing although a suffix n-gram occurs earlier")
    options = {**case.kwargs}
    if got == _lookup_tokens(engine_lookup(tokens, k, prefer="latest", **options)):
        raise Wrong("it copies after the latest earlier occurrence; the rule takes the earliest")
    for n in range(options["min_ngram"], options["max_ngram"]):
        if got == _lookup_tokens(engine_lookup(tokens, k, max_ngram=n, min_ngram=options["min_ngram"])):
            raise Wrong("it settles for a shorter suffix n-gram although a longer one occurs earlier")
    if len(got) < len(want):
        raise Wrong("it copies fewer tokens than k allows")
    raise Wrong("it copies the wrong tokens (the continuation right after the matched n-gram)")


def check_lookup(fn: Callable, events: Optional[Iterable] = None) -> Optional[bool]:
    """fn(tokens, k, max_ngram=3, min_ngram=1) -> proposed tokens, against the engine's lookup;
    with `events` of a pld run, also every step of that run."""
    cases = _lookup_cases(events)
    return run_cases("my_lookup", fn, cases, _judge_lookup, "the engine's lookup", replayed(cases, "step"))


def check_lookup_by_hand(answer) -> Optional[bool]:
    """Notebook 6: what lookup proposes for a b c d a b, k = 3, max_ngram = 2."""
    return check_answer(answer, _lookup_tokens(engine_lookup("a b c d a b".split(), k=3, max_ngram=2)), read=as_tokens,
                   hint="Find the earlier 'a b' and copy what followed it.")
