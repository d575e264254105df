"""Notebook 12's capstone: one whole speculative step, written by the student.

A step (Leviathan et al. 2023, Algorithm 1; Chen et al. 2023, Algorithm 2) drafts k tokens from
the draft model's q, scores prefix + drafts in one target pass (p at k + 1 positions), accepts
draft i while u < min(1, p_i(x_i)/q_i(x_i)) (greedy: while it is the target's top token), emits a
token from the residual norm(max(p_i - q_i, 0)) at the first rejection (greedy: the target's top
token) and, when every draft passed, a bonus token from p_{k+1}.

The student writes `my_step(models, prefix, k, greedy, generator) -> emitted tokens` with the
calls of `Models` (q after a prefix, p over prefix + drafts) and the draws `top`, `draw`,
`uniform`. Two checks:

* `check_greedy(fn, pair, events)`: the step, applied again and again from a greedy run's prompt,
  emits at every step what that run's events say the engine emitted; at the first difference it
  says at which step and draft it parted and what the engine did there.
* `check_sampling(fn)`: on exact toy tables (specviz.teaching.toy) the first tokens the step
  emits over many seeds follow the target's exact joint law (Pearson chi-square); a step that
  resamples from p instead of the residual fails it (`show_power`).

`engine_step` is the reference: the same pieces put together with the engine's own verifiers.
Steps and drafts are numbered from 1 in every message.
"""

from __future__ import annotations

from typing import Callable, Optional

import torch

from specviz.config import Warp
from specviz.runtime.lm import runner_for
from specviz.teaching.exercises.checking import NOT_WRITTEN, RIGHT, WRONG, Wrong
from specviz.teaching.toy import TableLM, exact_joint, random_table, toy_pair
from specviz.verifiers import sampling
from specviz.verifiers.exact import RejectionVerifier, default_verifier

TOY_VOCAB, TOY_PROMPT, TOY_K, TOY_TOKENS = 4, [0], 2, 3  # the sampling check's toy run
TOY_SEEDS = (11, 12)  # the target's and the draft's tables: notebook 3's pair
P_VALUE_FLOOR = 1e-4  # below it, the counts are too unlikely under the target's law


# ---------------------------------------------------------------------------------------------
# what a student's step may call

class _Cached:
    """One model with its KV cache, kept as the engine keeps it: each call crops the cache to
    what the new tokens share with what it holds, short of the `rows` last tokens (their logits
    are asked for, so they are fed), then feeds the rest. A step that calls in the engine's order
    feeds exactly what the engine feeds, so its logits are the engine's bit for bit."""

    def __init__(self, model):
        self.runner = runner_for(model)
        self.held: list = []  # the tokens in the cache, in order

    def feed(self, tokens: list, rows: int) -> torch.Tensor:
        """The logits (rows, V) after each of the last `rows` tokens."""
        shared = 0
        while shared < min(len(self.held), len(tokens) - rows) and self.held[shared] == tokens[shared]:
            shared += 1
        self.runner.crop(shared)
        self.held = tokens[:shared]
        if rows == 1:  # as the draft model is fed (specviz.drafters.model)
            out = self.runner.forward(tokens[shared:], last_only=True)
        else:  # as the engine's target pass is fed (specviz.engine.sequence)
            out = self.runner.forward(tokens[shared:], keep=rows)
        self.held += tokens[shared:]
        return out[-rows:]


def _ids(tokens, name: str) -> list:
    try:
        return [int(t) for t in tokens]
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a list of token ids (ints)") from None


class Models:
    """The pair's two models behind the two calls a step makes, at one temperature (0: greedy).
    Each model's KV cache is kept for you, cropped as the engine crops it."""

    def __init__(self, pair, temperature: float = 0.0):
        self.warp = Warp(temperature)
        self.tokenizer = pair.tokenizer
        self._draft, self._target = _Cached(pair.draft), _Cached(pair.target)
        self.passes: list = []  # (prefix, drafts) of every target pass: what the checks read

    def draft_probs(self, tokens: list) -> torch.Tensor:
        """q: the draft model's next-token probabilities after `tokens`, shape (V,)."""
        tokens = _ids(tokens, "draft_probs' tokens")
        if not tokens:
            raise ValueError("draft_probs needs at least one token (the prefix)")
        logits = self._draft.feed(tokens, 1)[-1]  # (V,)
        return sampling.warp(logits, self.warp)

    def target_probs(self, prefix: list, drafts: list) -> torch.Tensor:
        """p from one target pass over prefix + drafts, shape (len(drafts) + 1, V): row i is p
        after the prefix and the first i drafts (row 0 judges draft 1; the last row is p after
        the last draft, where a bonus token comes from)."""
        prefix, drafts = _ids(prefix, "target_probs' prefix"), _ids(drafts, "target_probs' drafts")
        if not prefix:
            raise ValueError("target_probs needs a prefix of at least one token")
        self.passes.append((prefix, drafts))
        logits = self._target.feed(prefix + drafts, len(drafts) + 1)  # (k + 1, V)
        return sampling.warp(logits, self.warp)

    def text(self, tokens: list) -> str:
        return self.tokenizer.decode(_ids(tokens, "tokens"))


def top(probs: torch.Tensor) -> int:
    """The most likely token of a 1-D distribution (the lowest id on an exact tie, as the engine)."""
    return int(torch.argmax(probs))


def draw(probs: torch.Tensor, generator: torch.Generator) -> int:
    """One token drawn from a 1-D distribution (it need not sum to 1: it is normalised)."""
    return int(torch.multinomial(probs, 1, generator=generator))


def uniform(generator: torch.Generator) -> float:
    """u, uniform in [0, 1): the draw the acceptance test compares with min(1, p/q)."""
    return sampling.uniform(generator)


# ---------------------------------------------------------------------------------------------
# the reference: the engine's own rule, and a planted wrong one

def engine_step(models: Models, prefix: list, k: int, greedy: bool, generator: torch.Generator,
                verifier=None) -> list:
    """One step with the engine's pieces: drafts drawn as specviz.drafters.model draws them, the
    verdict of the engine's verifier (GreedyVerifier or RejectionVerifier) on one target pass."""
    drafts, dists = [], []
    for _ in range(k):
        q = models.draft_probs(prefix + drafts)
        drafts.append(sampling.sample(q, models.warp, generator))
        dists.append(q)
    p = models.target_probs(prefix, drafts)  # (k + 1, V)
    verifier = verifier or default_verifier(Warp(0.0 if greedy else 1.0))
    q_rows = torch.stack(dists) if dists else p[:0]  # (k, V)
    verdict = verifier.verify_chain(drafts, q_rows, p, generator)
    return [drafts[n] for n in verdict.path] + [verdict.next_token]


class _ResampleFromTarget(RejectionVerifier):
    """Broken (notebook 3's wrong rule): after a rejection, draws from p, not the residual."""

    name = "resample-from-p (broken)"

    def residual(self, p, q):
        return p, 0.0


def resample_from_p_step(models, prefix, k, greedy, generator) -> list:
    """A planted wrong step: the engine's, but a rejected draft is replaced by a draw from p."""
    return engine_step(models, prefix, k, greedy, generator, None if greedy else _ResampleFromTarget())


# ---------------------------------------------------------------------------------------------
# calling the student's step

def _say_unwritten() -> None:
    print(f"{NOT_WRITTEN}: my_step (replace its `raise NotImplementedError` with your code, run its cell, "
          "then this one).")


def _say_raised(error: Exception, where: str) -> None:
    """The student's own bug: which error, and where, in one line."""
    message = str(error).splitlines()[0][:160] if str(error) else ""
    print(f"{WRONG} my_step raised {type(error).__name__}{f' ({message})' if message else ''} {where}.")


def _call(fn: Callable, args: tuple, where: str) -> tuple:
    """(fn's result, None), or (None, "unwritten" or "raised") with its line printed."""
    try:
        return fn(*args), None
    except NotImplementedError:
        _say_unwritten()
        return None, "unwritten"
    except Exception as error:  # keep the notebook going
        _say_raised(error, where)
        return None, "raised"


def _tokens(got, k: int) -> list:
    """A step's result as a list of ints, or Wrong."""
    if not isinstance(got, (list, tuple)) or not all(isinstance(t, int) and not isinstance(t, bool) for t in got):
        raise Wrong("return the tokens the step emits as a list of token ids, Python ints (top and draw give them; "
                    "a tensor is not one)")
    if not 1 <= len(got) <= k + 1:
        raise Wrong(f"it emitted {len(got)} tokens; a step with k = {k} emits from 1 to k + 1")
    return list(got)


def _one_pass(passes: list, prefix: list, k: int) -> list:
    """The drafts of the step's one target pass, or Wrong."""
    if not passes:
        raise Wrong("it made no target pass: score prefix + drafts with models.target_probs, once")
    if len(passes) > 1:
        raise Wrong(f"it made {len(passes)} target passes; one pass over prefix + drafts scores all k + 1 positions")
    scored_prefix, drafts = passes[0]
    if scored_prefix != prefix:
        raise Wrong("its target pass did not start from the step's prefix (pass the prefix and the drafts apart)")
    if len(drafts) != k:
        raise Wrong(f"it scored {len(drafts)} drafts where k = {k}")
    return drafts


def _unwritten_or_failed(state) -> Optional[bool]:
    return None if state == "unwritten" else False


# ---------------------------------------------------------------------------------------------
# check 1: greedy, against the engine's events

def engine_steps(events) -> tuple:
    """(prompt ids, [{step, k, drafts, accepted, emitted}]) of a greedy chain run, from its events;
    a one-line reason (a string) instead when the events are not such a run."""
    events = [e if isinstance(e, dict) else e.to_dict() for e in events]
    started = next((e for e in events if e["kind"] == "run_started"), None)
    if started is None or not any(e["kind"] == "step_finished" for e in events):
        return "these events hold no run: pass the list of events of a whole run"
    if started["temperature"] != 0.0 or started["method"] != "spec":
        return "these events are not a greedy run of method spec (temperature 0)"
    if started["eos_token_ids"]:
        return "run the engine with ignore_eos=True: a step written here knows no end of text"
    steps = []
    for done in (e for e in events if e["kind"] == "step_finished"):
        drafts = [e["token_id"] for e in events if e["kind"] == "draft_proposed" and e["step"] == done["step"]]
        steps.append({"step": done["step"], "k": done["k"], "drafts": drafts, "accepted": done["accepted"],
                      "emitted": list(done["emitted_ids"])})
    return list(started["prompt_ids"]), steps


def _judge_greedy(got: list, mine: list, step: dict) -> None:
    """Why `got` (with `mine`, the drafts the student scored) is not what the engine emitted, or
    nothing: a Wrong naming the draft (from 1) and what the engine did there."""
    drafts, n, want = step["drafts"], step["accepted"], step["emitted"]
    k = len(drafts)
    for j, (a, b) in enumerate(zip(mine, drafts)):
        if a != b:
            raise Wrong(f"your draft {j + 1} is not the engine's: a greedy draft is the draft model's top token "
                        "after the prefix and the drafts before it")
    if got == want:
        return
    j = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
    if j < n:
        raise Wrong(f"at draft {j + 1} the target's top token is the draft: the engine accepted it, your step did not")
    if j == len(want):
        raise Wrong(f"it goes on after draft {n + 1}, the first the target disagrees with: the engine's step ends "
                    "with the token that replaces it")
    if n == k:
        if j == len(got):
            raise Wrong(f"the bonus token is missing: the engine accepted all {k} drafts, and the same target pass "
                        "already scored the position after the last one")
        raise Wrong("the bonus token is not the target's top token after the last draft (the engine's is)")
    if j == len(got):
        raise Wrong(f"nothing replaces draft {n + 1}, the first the target disagrees with: the engine emits the "
                    "target's top token there and stops")
    if got[j] == drafts[j]:
        raise Wrong(f"draft {n + 1} is not the target's top token, yet your step kept it; the engine rejected it")
    raise Wrong(f"the engine rejected draft {n + 1} and emitted the target's top token at that position (the row "
                "of p that judged the draft); your step emitted another token")


def check_greedy(fn: Callable, pair, events) -> Optional[bool]:
    """fn(models, prefix, k, greedy=True, generator), applied step after step from the run's
    prompt, against what each step of the greedy run `events` (method spec, ignore_eos) emitted."""
    if not callable(fn):
        print(f"{WRONG} my_step should be a function, not {type(fn).__name__}.")
        return False
    read = engine_steps(events)
    if isinstance(read, str):
        print(f"{WRONG} {read}.")
        return False
    prefix, steps = read
    models = Models(pair, 0.0)
    for step in steps:
        models.passes.clear()
        where = f"at step {step['step'] + 1} of the run"
        got, failed = _call(fn, (models, list(prefix), step["k"], True, torch.Generator().manual_seed(0)), where)
        if failed:
            return _unwritten_or_failed(failed)
        try:
            got = _tokens(got, step["k"])
            _judge_greedy(got, _one_pass(models.passes, prefix, step["k"]), step)
        except Wrong as wrong:
            print(f"{WRONG} my_step parts from the engine at step {step['step'] + 1} of {len(steps)}: {wrong}.")
            return False
        prefix += got
    total = sum(len(s["emitted"]) for s in steps)
    print(f"{RIGHT} my_step emits what the engine emitted at each of the {len(steps)} steps of its greedy run "
          f"({total} tokens, token for token).")
    return True


# ---------------------------------------------------------------------------------------------
# check 2: sampling, the law on exact toy models

def toy_models() -> tuple:
    """Models over notebook 3's exact bigram tables at temperature 1, and the target's exact law
    of the first TOY_TOKENS tokens after TOY_PROMPT."""
    target, draft = (TableLM(random_table(TOY_VOCAB, 2, seed=s, sharpness=1.5), order=2) for s in TOY_SEEDS)
    return Models(toy_pair(target, draft), 1.0), exact_joint(target, TOY_PROMPT, TOY_TOKENS)


def chi_square(counts: dict, joint: dict) -> tuple:
    """Pearson's chi-square of `counts` against the exact `joint`: (statistic, degrees of freedom,
    p-value); cells expecting fewer than 5 are pooled into one, as the test needs."""
    from scipy import stats

    runs = sum(counts.values())
    observed, expected, rest = [], [], [0, 0.0]
    for cell, prob in joint.items():
        if prob * runs < 5:
            rest[0], rest[1] = rest[0] + counts.get(cell, 0), rest[1] + prob * runs
        else:
            observed.append(counts.get(cell, 0))
            expected.append(prob * runs)
    if rest[1] > 0:
        observed.append(rest[0])
        expected.append(rest[1])
    scale = runs / sum(expected)  # the table's products sum to 1 only within float error
    statistic, p_value = stats.chisquare(observed, [e * scale for e in expected])
    return float(statistic), len(observed) - 1, float(p_value)


def _first_tokens(fn: Callable, models: Models, seed: int) -> list:
    """The first TOY_TOKENS tokens the step emits, applied again and again with one generator
    seeded `seed`; raises Wrong on a result no step can give."""
    generator, tokens = torch.Generator().manual_seed(seed), []
    while len(tokens) < TOY_TOKENS:
        prefix = TOY_PROMPT + tokens
        models.passes.clear()
        got = _tokens(fn(models, list(prefix), TOY_K, False, generator), TOY_K)
        if not all(0 <= t < TOY_VOCAB for t in got):
            raise Wrong("it emitted a token id outside the vocabulary")
        _one_pass(models.passes, prefix, TOY_K)
        tokens += got
    return tokens[:TOY_TOKENS]


def sampled_counts(fn: Callable, runs: int) -> tuple:
    """(counts of the first TOY_TOKENS tokens over seeds 0 .. runs - 1, the exact joint);
    raises Wrong when a step's result is malformed or the same seed gives other tokens."""
    models, joint = toy_models()
    counts: dict = {}
    for seed in range(runs):
        key = tuple(_first_tokens(fn, models, seed))
        counts[key] = counts.get(key, 0) + 1
    again = [tuple(_first_tokens(fn, models, seed)) for seed in range(3)]
    if again != [tuple(_first_tokens(fn, models, seed)) for seed in range(3)]:
        raise Wrong("the same seed gave other tokens: draw every random number from `generator`")
    return counts, joint


def check_sampling(fn: Callable, runs: int = 4000) -> Optional[bool]:
    """fn(models, prefix, k, greedy=False, generator) on exact toy tables: the first TOY_TOKENS
    tokens over `runs` seeds against the target's exact joint law, by Pearson's chi-square."""
    if not callable(fn):
        print(f"{WRONG} my_step should be a function, not {type(fn).__name__}.")
        return False
    try:
        counts, joint = sampled_counts(fn, runs)
    except NotImplementedError:
        _say_unwritten()
        return None
    except Wrong as wrong:
        print(f"{WRONG} my_step, sampling on the toy models (k = {TOY_K}): {wrong}.")
        return False
    except Exception as error:
        _say_raised(error, "while sampling on the toy models")
        return False
    statistic, dof, p_value = chi_square(counts, joint)
    said = (f"the first {TOY_TOKENS} tokens over {runs} seeds against the target's exact law: chi-square "
            f"{statistic:.1f} on {dof} degrees of freedom, p-value {_p_text(p_value)}")
    if p_value < P_VALUE_FLOOR:
        print(f"{WRONG} my_step does not sample from the target's law; {said} (below 1e-4). Check the "
              "acceptance test, what a rejected draft is replaced with, and where the bonus comes from.")
        return False
    print(f"{RIGHT} my_step samples from the target's law: {said}.")
    return True


def _p_text(p_value: float) -> str:
    return f"{p_value:.2g}" if p_value > 0 else "below 1e-300 (it underflows)"


def show_power(runs: int = 4000) -> float:
    """The same test on a planted wrong step (a rejected draft replaced by a draw from p, not the
    residual): prints its statistic, returns its p-value (the notebook asserts it is tiny)."""
    counts, joint = sampled_counts(resample_from_p_step, runs)
    statistic, dof, p_value = chi_square(counts, joint)
    print(f"a planted wrong step (after a rejection it draws from p, not from the residual): chi-square "
          f"{statistic:.1f} on {dof} degrees of freedom, p-value {_p_text(p_value)}.")
    return p_value
