"""Notebook 2's exercises: the greedy cascade rule. check_cascade is the class's lab exercise
(section 3); check_max_tokens and check_cascade_by_hand are homework (section 6, after the lab's end).
"""

from __future__ import annotations

import random
from typing import Callable, Iterable, Optional

import torch

from specviz.teaching.exercises.checking import Case, Wrong, as_tokens, check_answer, replayed, run_cases
from specviz.verifiers.draft_tree import DraftTree
from specviz.verifiers.exact import GreedyVerifier

# notebook 2: the greedy cascade rule

def engine_cascade(drafts: list, target_top: list, eos=()) -> list:
    """The engine's greedy rule on one chain step: the tokens GreedyVerifier emits when the
    target's argmax at position i is target_top[i] (len(drafts) + 1 positions)."""
    vocab = max(list(drafts) + list(target_top)) + 2
    p = torch.full((len(drafts) + 1, vocab), 0.5 / vocab)
    p[torch.arange(len(drafts) + 1), torch.tensor(target_top[:len(drafts) + 1])] = 1.0
    p = p / p.sum(dim=-1, keepdim=True)
    q = {i - 1: torch.full((vocab,), 1.0 / vocab) for i in range(len(drafts))}
    verdict = GreedyVerifier().verify(DraftTree.chain(list(drafts)), q, p, torch.Generator(), set(eos))
    return [drafts[n] for n in verdict.path] + ([verdict.next_token] if verdict.next_token is not None else [])


def _cascade_cases(events=None) -> list:
    eos = (0,)
    fixed = [
        ("a step where every draft agrees", [5, 3, 7, 2], [5, 3, 7, 2, 9], ()),
        ("a step whose first draft disagrees", [5, 3, 7, 2], [4, 3, 7, 2, 9], ()),
        ("a step that disagrees in the middle, with an agreeing draft after the disagreement",
         [5, 3, 7, 2], [5, 3, 1, 2, 9], ()),
        ("a step with nothing drafted (k = 0)", [], [7], ()),
        ("a step with one draft, accepted", [3], [3, 4], ()),
        ("a step with one draft, rejected", [3], [5, 4], ()),
        ("a step where the target accepts an end-of-text draft before the last draft", [5, 0, 7], [5, 0, 7, 9], eos),
        ("a step whose last draft is an accepted end-of-text token", [5, 0], [5, 0, 3], eos),
        ("a step where an end-of-text draft is rejected", [5, 0], [5, 6, 2], eos),
    ]
    cases = [Case(kind, (d, t), {"eos": e}) for kind, d, t, e in fixed]
    rng = random.Random(2)
    for i in range(150):
        k = rng.randint(0, 6)
        drafts = [rng.randrange(3) for _ in range(k)]
        top = [d if rng.random() < 0.6 else rng.randrange(3) for d in drafts] + [rng.randrange(3)]
        e = eos if i % 2 else ()
        cases.append(Case("random steps (k from 0 to 6, three token ids"
                           + (", 0 is end-of-text)" if e else ")"), (drafts, top), {"eos": e}))
    for step in _greedy_steps(events or []):
        cases.append(Case(f"step {step['step'] + 1} of your run", (step["drafts"], step["target_top"]),
                           {"eos": step["eos"]}, {"emitted": step["emitted"]}))
    for case in cases:
        case.data.setdefault("emitted", engine_cascade(*case.args, **case.kwargs))
    return cases


def _greedy_steps(events) -> list:
    """(drafts, the target's argmax at each position, what the step emitted) for each chain step of
    a greedy run, from its events: draft_proposed, target_scored (top-k of p) and step_finished."""
    events = [e if isinstance(e, dict) else e.to_dict() for e in events]
    started = next((e for e in events if e["kind"] == "run_started"), None)
    if started is None or started["temperature"] != 0.0:
        return []
    eos = tuple(started["eos_token_ids"])
    steps = []
    for done in (e for e in events if e["kind"] == "step_finished"):
        drafts = [e["token_id"] for e in events if e["kind"] == "draft_proposed" and e["step"] == done["step"]]
        scored = next((e for e in events if e["kind"] == "target_scored" and e["step"] == done["step"]), None)
        if scored is None or not all(scored["topk"]):
            continue
        top = [_argmax(t) for t in scored["topk"]]
        steps.append({"step": done["step"], "drafts": drafts, "target_top": top, "eos": eos,
                      "emitted": list(done["emitted_ids"])})
    return steps


def _argmax(top: dict) -> int:
    """The target's top token from a recorded top-k slice; on an exact tie (bfloat16 has them),
    the lowest id, as torch.argmax picks it."""
    return min(i for i, p in zip(top["ids"], top["probs"]) if p == top["probs"][0])


def _judge_cascade(got, case: Case) -> None:
    drafts, top = case.args
    eos = set(case.kwargs.get("eos", ()))
    want = case.data["emitted"]
    if not isinstance(got, (list, tuple)) or not all(isinstance(t, int) and not isinstance(t, bool) for t in got):
        raise Wrong("return a list of token ids (ints)")
    got = list(got)
    if got == want:
        return
    agreed = 0
    while agreed < len(drafts) and drafts[agreed] == top[agreed] and (agreed == 0 or drafts[agreed - 1] not in eos):
        agreed += 1
    if agreed and drafts[agreed - 1] in eos:  # the walk stopped at an accepted end-of-text token
        ended = True
    else:
        ended = False
    n = min(len(got), agreed)
    if got[:n] != drafts[:n]:
        raise Wrong("the output must begin with the drafts the target agrees with, in their order")
    if len(got) > len(want):
        if ended:
            raise Wrong("it goes on after an accepted end-of-text draft (nothing follows it, not even a bonus)")
        if agreed < len(drafts):
            raise Wrong("it goes on after the first disagreement (the drafts after it are never judged)")
        raise Wrong("it emits more tokens than a step can (at most one after the last draft)")
    if len(got) < agreed:
        raise Wrong("it stops before the first disagreement")
    if len(got) < len(want):
        if agreed == len(drafts):
            raise Wrong("the bonus token is missing (when every draft agrees, the same target pass "
                         "also scored the next position)")
        raise Wrong("the target's own token is missing at the first disagreement")
    if agreed == len(drafts):
        raise Wrong("the bonus token must be the target's top token after the last draft")
    raise Wrong("at the first disagreement the step emits the target's top token, not the draft's")


def check_cascade(fn: Callable, events: Optional[Iterable] = None) -> Optional[bool]:
    """fn(drafts, target_top, eos=()) -> emitted tokens, against the engine's GreedyVerifier;
    with `events` of a greedy chain run, also every step of that run."""
    cases = _cascade_cases(events)
    return run_cases("cascade", fn, cases, _judge_cascade, "the engine's greedy verifier", replayed(cases, "step"))


def check_max_tokens(answer, k: int) -> Optional[bool]:
    """Notebook 2: the most tokens one target forward can produce with k drafts."""
    return check_answer(answer, len(engine_cascade(list(range(1, k + 1)), list(range(1, k + 2)))),
                   hint="k accepted drafts, plus one more token from the same forward.")


def check_cascade_by_hand(answer) -> Optional[bool]:
    """Notebook 2: what one greedy step emits for the drafts x = 1 ; against x = 2 ; newline."""
    words = ["x", "=", "1", ";", "2", "\n"]
    ids = {w: i + 1 for i, w in enumerate(words)}
    emitted = engine_cascade([ids[w] for w in ["x", "=", "1", ";"]], [ids[w] for w in ["x", "=", "2", ";", "\n"]])
    return check_answer(answer, [words[i - 1] for i in emitted], read=as_tokens,
                   hint="Accept while they agree; at the first disagreement emit the target's token and stop.")
