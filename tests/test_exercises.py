"""The notebooks' exercises (specviz.teaching.exercises: one module per notebook; teacher/solutions/).

Every check passes the engine's own implementation and the solution file's, fails plausible
wrong answers (each named) with a message that says what is wrong without giving the expected
values, and reports an unwritten function as "not written yet" instead of failing. The committed
notebooks keep their exercise cells unsolved and their answers out of sight; executed in smoke
mode with the solutions imported into the exercise cells, every check cell passes.
"""

import ast
import math
import re
import sys
import time
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import torch

from specviz.analysis import metrics
from specviz.drafters.lookup import lookup
from specviz.teaching.exercises import (checking, nb00 as ex00, nb01 as ex01, nb02 as ex02, nb03 as ex03, nb04 as ex04,
    nb05 as ex05, nb06 as ex06, nb07 as ex07, nb08 as ex08, nb09 as ex09, nb10 as ex10, nb11 as ex11)
from specviz.verifiers import sampling

NOTEBOOK_CHECKS = (ex00, ex01, ex02, ex03, ex04, ex05, ex06, ex07, ex08, ex09, ex10, ex11)  # specviz.teaching.exercises: one module per notebook

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "teacher" / "solutions"  # the teacher's folder: not handed to students with the notebooks
sys.path.insert(0, str(ROOT / "teacher"))

from solutions import nb01, nb02, nb03, nb04, nb05, nb06, nb07, nb08, nb09, nb10, nb11  # noqa: E402

from specviz.render import lessons  # noqa: E402

NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
CODED = {"00": ("caches_after",), "02": ("cascade",), "03": ("my_residual",), "04": ("alpha_tau",), "05": ("tree_mask",), "06": ("my_lookup",),
         "07": ("next_k",), "09": ("stream_waits", "survival_curve", "cost_per_million"), "10": ("chain_acceptance",),
         "11": ("crossover",)}


def outcome(capsys, check, *args, **kwargs):
    result = check(*args, **kwargs)
    return result, capsys.readouterr().out.strip()


def reveals_nothing(message: str) -> bool:
    """No probability, rate or list in the message: what is wrong, never the expected values."""
    return not re.search(r"\d\.\d", message) and "[" not in message and "tensor" not in message


def assert_wrong(capsys, check, fn, says, **kwargs):
    result, out = outcome(capsys, check, fn, **kwargs)
    assert result is False, out
    assert out.startswith(checking.WRONG) and "\n" not in out, out
    assert says in out, out
    assert reveals_nothing(out), out


# ---------------------------------------------------------------------------------------------
# wrong answers, named

def steps_of(events):
    return [e for e in events if e["kind"] == "step_finished"]


def cascade_variant(bonus=True, stop=True, replace="target", eos=True):
    def rule(drafts, target_top, eos_ids=()):
        out = []
        for draft, top in zip(drafts, target_top):
            if draft != top:
                if not stop:
                    out.append(top)
                    continue
                return out + ([top] if replace == "target" else [draft] if replace == "draft" else [])
            out.append(draft)
            if eos and draft in eos_ids:
                return out
        return out + ([target_top[len(drafts)]] if bonus else [])

    return lambda drafts, target_top, eos=(): rule(drafts, target_top, eos)


WRONG_CASCADES = {
    "no bonus token when every draft agrees": (cascade_variant(bonus=False), "bonus token is missing"),
    "keeps going after the first disagreement": (cascade_variant(stop=False), "goes on after the first disagreement"),
    "emits the draft instead of the target's token": (cascade_variant(replace="draft"), "not the draft's"),
    "no token at the first disagreement": (cascade_variant(replace=None), "target's own token is missing"),
    "ignores end-of-text": (cascade_variant(eos=False), "after an accepted end-of-text"),
}


def normalised(x):
    return x / x.sum()


WRONG_RESIDUALS = {
    "residual without normalisation": (lambda p, q: torch.clamp(p - q, min=0.0), "does not sum to 1"),
    "residual as p - q without the clamp": (lambda p, q: normalised(p - q), "negative entries"),
    "norm(|p - q|)": (lambda p, q: normalised((p - q).abs()), "q ≥ p"),
    "NaN when p == q (no special case)": (lambda p, q: normalised(torch.clamp(p - q, min=0.0)), "p == q"),
    "uniform when p == q": (lambda p, q: torch.full_like(p, 1 / len(p)) if torch.equal(p, q)
                            else normalised(torch.clamp(p - q, min=0.0)), "p == q"),
    "the target's p itself (resample from p)": (lambda p, q: p, "q ≥ p"),
}


def fold_pair(events):
    stats = metrics.fold(events)
    return stats.alpha_empirical, stats.tau


WRONG_ALPHA_TAU = {
    "alpha as accepted / drafted": (
        lambda ev: (sum(s["accepted"] for s in steps_of(ev)) / sum(s["drafted"] for s in steps_of(ev))
                    if sum(s["drafted"] for s in steps_of(ev)) else None, fold_pair(ev)[1]),
        "divides by every drafted token"),
    "tau without the token each step ends with": (
        lambda ev: (fold_pair(ev)[0], sum(s["accepted"] for s in steps_of(ev)) / len(steps_of(ev))),
        "leaves out the token"),
    "alpha 0 for a run that drafts nothing": (lambda ev: (fold_pair(ev)[0] or 0.0, fold_pair(ev)[1]), "must be None"),
    "alpha as the mean of beta": (lambda ev: (metrics.fold(ev).alpha_analytic, fold_pair(ev)[1]), "not average β"),
    "tau as accepted per step + 1": (
        lambda ev: (fold_pair(ev)[0], sum(s["accepted"] for s in steps_of(ev)) / len(steps_of(ev)) + 1),
        "assumes every step emits one token"),
}


def mask_from(rule):
    def mask(parents):
        n = len(parents)
        return torch.tensor([[rule(parents, i, j) for j in range(n)] for i in range(n)], dtype=torch.bool).reshape(n, n)

    return mask


def path(parents, i):
    out = set()
    while i != -1:
        out.add(i)
        i = parents[i]
    return out


WRONG_MASKS = {
    "a node cannot see itself": (mask_from(lambda P, i, j: j in path(P, i) and j != i), "cannot see itself"),
    "only the parent, not the whole path": (mask_from(lambda P, i, j: j in (i, P[i])), "grandparent"),
    "transposed (parents see their children)": (mask_from(lambda P, i, j: i in path(P, j)), "cannot see its parent"),
    "an ordinary causal mask": (mask_from(lambda P, i, j: j <= i), "sibling"),
    "everything sees everything": (mask_from(lambda P, i, j: True), "descendant"),
}


def lookup_variant(prefer="first", longest_first=True, overlap=True, cap=True, copy_ngram=False, use_min=True):
    def find(tokens, k, max_ngram=3, min_ngram=1):
        if k <= 0:
            return []
        size = len(tokens)
        sizes = list(range(min(max_ngram, size - 1), (min_ngram if use_min else 1) - 1, -1))
        for n in sizes if longest_first else sizes[::-1]:
            suffix = tokens[size - n:]
            end = size - n if overlap else max(size - 2 * n + 1, 0)
            for start in (range(end) if prefer == "first" else range(end - 1, -1, -1)):
                if tokens[start:start + n] == suffix:
                    if copy_ngram:
                        return tokens[start:start + k]
                    return tokens[start + n:start + n + (k if cap else size)]
        return []

    return find


WRONG_LOOKUPS = {
    "the latest earlier occurrence": (lookup_variant(prefer="latest"), "latest"),
    "the shortest n-gram first": (lookup_variant(longest_first=False), "shorter suffix"),
    "only occurrences that end before the suffix starts": (lookup_variant(overlap=False), "shorter suffix"),
    "copies past k": (lookup_variant(cap=False), "more than k"),
    "copies the matched n-gram itself": (lookup_variant(copy_ngram=True), "wrong tokens"),
    "ignores min_ngram": (lookup_variant(use_min=False), "nothing to copy"),
}


def next_k_variant(full="drafted", cap=True, floor=True, step=2, idle=True):
    def rule(k, drafted, accepted, k_max=12):
        if idle and drafted == 0:
            return k
        if accepted == (drafted if full == "drafted" else k):
            return min(k + step, k_max) if cap else k + step
        return max(1, k - 1) if floor else k - 1

    return rule


WRONG_NEXT_K = {
    "a full accept means accepted == k": (next_k_variant(full="k"), "accepted everything it drafted"),
    "no cap at k_max": (next_k_variant(cap=False), "above k_max"),
    "no floor at 1": (next_k_variant(floor=False), "below 1"),
    "+1 instead of +2": (next_k_variant(step=1), "accepted everything it drafted"),
    "changes k after a step that drafted nothing": (next_k_variant(idle=False), "drafted nothing"),
}

def stream_waits_variant(share=True, arrive=True, skip_first=True, per_token=True, since="previous",
                         ttft="first"):
    """The solution's stream_waits with one thing changed."""
    def waits(events):
        updates = [(e["elapsed"], len(e["emitted_ids"])) for e in events
                   if e["kind"] == "step_finished" and e["emitted_ids"]]
        amortised, arrivals = [], []
        if not skip_first:
            amortised += [updates[0][0] / updates[0][1]] * updates[0][1]
            arrivals += [updates[0][0]] + [0.0] * (updates[0][1] - 1)
        for (before, _), (now, n) in zip(updates, updates[1:]):
            wait = now - (before if since == "previous" else updates[0][0])
            if not per_token:
                amortised.append(wait)
                arrivals.append(wait)
                continue
            amortised += [wait / n if share else wait] * n
            arrivals += [wait] + [0.0] * (n - 1) if arrive else [wait / n] * n
        return (0.0 if ttft == "zero" else updates[0][0]), amortised, arrivals

    return waits


WRONG_STREAM_WAITS = {
    "amortised gives each token the whole wait": (stream_waits_variant(share=False), "divided by the tokens"),
    "arrivals shared like amortised": (stream_waits_variant(arrive=False), "nothing for the others"),
    "the first update's tokens included": (stream_waits_variant(skip_first=False), "arrived at TTFT"),
    "one entry per update": (stream_waits_variant(per_token=False), "one per token"),
    "waits measured from the first update": (stream_waits_variant(since="first"), "since the update before"),
    "TTFT zero": (stream_waits_variant(ttft="zero"), "not zero"),
}


def survival_variant(full_only=True, at_least=True, shares=True, depth_zero=True, independent=False):
    def curve(events, k):
        steps = [e for e in events if e["kind"] == "step_finished"]
        counted = [e["accepted"] for e in steps if e["drafted"] == k or not full_only]
        if not counted:
            return None
        if independent:
            alpha = sum(e["accepted"] for e in steps) / sum(e["evaluated"] for e in steps)
            return [alpha ** i for i in range(k + 1)]
        depths = range(0 if depth_zero else 1, k + 1)
        counts = [sum(1 for a in counted if (a >= i if at_least else a == i)) for i in depths]
        return [c / len(counted) for c in counts] if shares else [float(c) for c in counts]

    return curve


WRONG_SURVIVALS = {
    "counts every step, not only those that drafted k": (survival_variant(full_only=False), "fewer than k tokens"),
    "P(L = i) instead of P(L >= i)": (survival_variant(at_least=False), "P(L = i)"),
    "counts instead of shares": (survival_variant(shares=False), "return shares"),
    "no depth 0": (survival_variant(depth_zero=False), "k + 1 entries"),
    "alpha^i instead of the counted curve": (survival_variant(independent=True), "independent acceptance"),
}


def cost_variant(hours=True, million=True, inverted=False, guard=True):
    def cost(tokens_per_s, price_per_hour):
        if guard and not tokens_per_s:
            return None
        per_unit = tokens_per_s * (3600 if hours else 1) / price_per_hour if inverted else \
            price_per_hour / (tokens_per_s * (3600 if hours else 1))
        return per_unit / 1e6 if inverted else per_unit * (1e6 if million else 1)

    return cost


WRONG_COSTS = {
    "the cost of one token": (cost_variant(million=False), "cost of one token"),
    "per second instead of per hour": (cost_variant(hours=False), "3600 seconds"),
    "tokens per unit of price": (cost_variant(inverted=True), "upside down"),
    "no guard for a run that made no tokens": (cost_variant(guard=False), "raised ZeroDivisionError"),
}


def chain_variant(chain=True, independent=False, shares=True, depth_zero=False, tau=False):
    """The solution's chain_acceptance with one thing changed."""
    def acceptance(hits):
        if not hits:
            return [], 0.0
        n, depths = len(hits), len(hits[0])
        accuracy = [sum(1 for row in hits if row[d]) / n for d in range(depths)]
        if independent:
            survival = [math.prod(accuracy[:d + 1]) for d in range(depths)]
        elif not chain:
            survival = accuracy
        else:
            survival = [sum(1 for row in hits if all(row[:d + 1])) / n for d in range(depths)]
        expected = sum(survival) + (1 if tau else 0)
        if not shares:
            survival = [s * n for s in survival]
        return ([1.0] + survival if depth_zero else survival), expected

    return acceptance


WRONG_CHAIN_ACCEPTANCE = {
    "each depth's own accuracy": (chain_variant(chain=False), "first miss"),
    "the product of the depths' accuracies": (chain_variant(independent=True), "independently"),
    "counts instead of shares": (chain_variant(shares=False), "return shares"),
    "depth 0 included": (chain_variant(depth_zero=True), "leave out depth 0"),
    "tau instead of the accepted drafts": (chain_variant(tau=True), "that is τ"),
}

WRONG_CROSSOVERS = {name: (fn, name.split(":")[0]) for name, fn in ex11._crossover_variants().items()}

CODED_CHECKS = {  # check, the engine's own function, the solution's, the wrong answers
    "cascade": (ex02.check_cascade, ex02.engine_cascade, nb02.cascade, WRONG_CASCADES),
    "residual": (ex03.check_residual, sampling.residual, nb03.my_residual, WRONG_RESIDUALS),
    "alpha_tau": (ex04.check_alpha_tau, fold_pair, nb04.alpha_tau, WRONG_ALPHA_TAU),
    "tree_mask": (ex05.check_tree_mask, lambda parents: ex05._tree(parents).mask(), nb05.tree_mask,
                  WRONG_MASKS),
    "lookup": (ex06.check_lookup, lookup, nb06.my_lookup, WRONG_LOOKUPS),
    "next_k": (ex07.check_next_k, ex07.engine_next_k, nb07.next_k, WRONG_NEXT_K),
    "stream_waits": (ex09.check_stream_waits, ex09.engine_stream_waits, nb09.stream_waits,
                     WRONG_STREAM_WAITS),
    "survival": (ex09.check_survival, ex09.engine_survival, nb09.survival_curve, WRONG_SURVIVALS),
    "cost": (ex09.check_cost, lessons.cost_per_million, nb09.cost_per_million, WRONG_COSTS),
    "chain_acceptance": (ex10.check_chain_acceptance, ex10.engine_chain_acceptance, nb10.chain_acceptance,
                         WRONG_CHAIN_ACCEPTANCE),
    "crossover": (ex11.check_crossover, ex11.engine_crossover, nb11.crossover, WRONG_CROSSOVERS),
}


@pytest.mark.parametrize("name", CODED_CHECKS)
def test_a_check_passes_the_engine_and_the_solution(name, capsys):
    check, engine, solution, _ = CODED_CHECKS[name]
    for fn in (engine, solution):
        result, out = outcome(capsys, check, fn)
        assert result is True and out.startswith(checking.RIGHT) and "\n" not in out, out


@pytest.mark.parametrize("name,wrong", [(name, wrong) for name, (*_, wrongs) in CODED_CHECKS.items()
                                        for wrong in wrongs])
def test_a_check_says_what_is_wrong_without_the_answer(name, wrong, capsys):
    check, *_, wrongs = CODED_CHECKS[name]
    assert len(wrongs) >= 2
    fn, says = wrongs[wrong]
    assert_wrong(capsys, check, fn, says)


@pytest.mark.parametrize("name", CODED_CHECKS)
def test_an_unwritten_or_broken_function_does_not_stop_the_notebook(name, capsys):
    check = CODED_CHECKS[name][0]

    def unwritten(*args, **kwargs):
        raise NotImplementedError("write this: ...")

    def crashes(*args, **kwargs):
        return {}["missing"]

    result, out = outcome(capsys, check, unwritten)
    assert result is None and out.startswith(f"{checking.NOT_WRITTEN}: ") and "\n" not in out, out
    result, out = outcome(capsys, check, crashes)
    assert result is False and "raised KeyError" in out and "\n" not in out, out
    result, out = outcome(capsys, check, None)
    assert result is False and "should be a function" in out, out


# ---------------------------------------------------------------------------------------------
# the checks that replay a run's events

@pytest.fixture(scope="module")
def tiny_runs(tiny):
    import specviz

    prompt = "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n"
    runs = {"greedy": dict(method="spec", k=4), "pld": dict(method="pld", k=4), "tree": dict(method="tree", tree="2,2"),
            "heuristic": dict(method="spec", k="auto", auto_rule="heuristic"),
            "sampled": dict(method="spec", k=4, temperature=1.0, seed=0)}
    return {name: [e.to_dict() for e in specviz.generate(tiny, prompt, max_new_tokens=32, **options)]
            for name, options in runs.items()}


def test_the_replays_read_every_step_of_a_run(tiny_runs):
    greedy = ex02._greedy_steps(tiny_runs["greedy"])
    assert len(greedy) == len(steps_of(tiny_runs["greedy"])) > 3
    assert all(ex02.engine_cascade(s["drafts"], s["target_top"], s["eos"]) == s["emitted"] for s in greedy)
    assert ex02._greedy_steps(tiny_runs["sampled"]) == []  # sampled steps are not the greedy rule's
    pld = ex06._lookup_steps(tiny_runs["pld"])
    assert pld and any(s["drafts"] for s in pld)
    assert all((lookup(s["committed"], s["k"], s["ngram"]) or {"tokens": []})["tokens"] == s["drafts"] for s in pld)
    auto = ex07._auto_steps(tiny_runs["heuristic"])
    assert len(auto) == len(steps_of(tiny_runs["heuristic"])) - 1
    assert all(ex07.engine_next_k(s["k"], s["drafted"], s["accepted"]) == s["next"] for s in auto)
    assert len(set(s["k"] for s in auto)) > 1  # the rule really moved k in this run


def test_the_checks_replay_the_students_run(tiny_runs, capsys):
    cases = [(ex02.check_cascade, nb02.cascade, {"events": tiny_runs["greedy"]}, "steps from your own run"),
             (ex04.check_alpha_tau, nb04.alpha_tau, {"runs": list(tiny_runs.values())}, "of your own runs"),
             (ex05.check_tree_mask, nb05.tree_mask, {"events": tiny_runs["tree"]}, "trees from your own run"),
             (ex06.check_lookup, nb06.my_lookup, {"events": tiny_runs["pld"]}, "steps from your own run"),
             (ex07.check_next_k, nb07.next_k, {"events": tiny_runs["heuristic"]}, "steps from your own run")]
    for check, solution, run, says in cases:
        result, out = outcome(capsys, check, solution, **run)
        assert result is True and says in out, out


def tampered(events: list, kind: str, change) -> list:
    """The events with the first event of `kind` that `change` alters (it returns None to pass)."""
    out, done = [], False
    for e in events:
        if not done and e["kind"] == kind:
            new = change(e)
            if new is not None:
                e, done = new, True
        out.append(e)
    assert done
    return out


def test_a_replay_compares_with_what_the_run_recorded(tiny_runs, capsys):
    """The engine's own rule fails a run whose events were altered: the replays compare with the
    run's recorded steps, not with the rule again."""
    greedy = tampered(tiny_runs["greedy"], "step_finished",
                      lambda e: {**e, "emitted_ids": e["emitted_ids"] + [1]} if e["step"] == 2 else None)
    result, out = outcome(capsys, ex02.check_cascade, ex02.engine_cascade, events=greedy)
    assert result is False and "step 3 of your run" in out, out
    pld = tampered(tiny_runs["pld"], "draft_proposed", lambda e: {**e, "token_id": e["token_id"] + 1})
    result, out = outcome(capsys, ex06.check_lookup, lookup, events=pld)
    assert result is False and "of your prompt-lookup run" in out, out
    auto = tampered(tiny_runs["heuristic"], "step_finished",
                    lambda e: ({**e, "info": {**e["info"], "k_chosen": e["info"]["k_chosen"] + 5}}
                               if e["step"] == 3 else None))
    result, out = outcome(capsys, ex07.check_next_k, ex07.engine_next_k, events=auto)
    assert result is False and "of your k = auto run" in out, out


# ---------------------------------------------------------------------------------------------
# answers by hand

BY_HAND = [  # check, extra arguments, the solution's answer, a wrong answer
    (ex01.check_cost_ratio, ({"target": {1: 0.10, 4: 0.13}},), nb01.ratio({"target": {1: 0.10, 4: 0.13}}), 1.0),
    (ex01.check_speedup_by_hand, (), nb01.my_speedup, 3 / (0.4 + 1)),
    (ex02.check_max_tokens, (4,), nb02.my_max_tokens, 4),
    (ex02.check_cascade_by_hand, (), nb02.my_emitted, ["x", "=", "1"]),
    (ex03.check_broken_rule, (), nb03.my_letter, "a"),
    (ex04.check_best_k, (), nb04.my_best_k, 4),
    (ex04.check_accepted_per_drafted, (), nb04.my_ratio, 0.8),
    (ex05.check_node_sees, (), nb05.my_nodes, [0, 1, 4]),
    (ex05.check_q2, (), nb05.my_q2, [0.0, 0.3, 0.2]),
    (ex06.check_lookup_by_hand, (), nb06.my_proposal, ["a", "b"]),
    (ex07.check_break_even, (), nb07.my_alpha, 0.5),
    (ex08.check_paper_speedup, (), nb08.my_speedup, 3.5),
    (ex08.check_ssd_speedup, (), nb08.my_ssd_speedup, 1.3),
    (ex09.check_amortised_itl, (), nb09.my_itl_ms, 520),
    (ex09.check_share_at_depth, (), nb09.my_share, 0.8),
    (ex09.check_half_width, ([{"tau": t} for t in (2.1, 2.6, 1.9, 3.0)],),
     nb09.half_width([{"tau": t} for t in (2.1, 2.6, 1.9, 3.0)]), 0.4),
    (ex09.check_cost_by_hand, (), nb09.my_cost, 2.0 / 20 * 1e6),
    (ex11.check_compute_bound_ratio, (), nb11.my_ratio, 1),
]


@pytest.mark.parametrize("check,extra,right,wrong", BY_HAND, ids=[c[0].__name__ for c in BY_HAND])
def test_an_answer_by_hand_is_checked_without_showing_it(check, extra, right, wrong, capsys):
    assert check(right, *extra) is True
    assert check(None, *extra) is None
    assert check(wrong, *extra) is False
    out = capsys.readouterr().out
    assert "✓ Correct." in out and "Not answered yet" in out and "✗ Not yet." in out
    hint = out.split("✗ Not yet.")[1]
    shown = [str(right)] + ([f"{right:.2f}", f"{right:.3f}"] if isinstance(right, float) else [])
    assert not any(re.search(rf"(?<![\w.]){re.escape(s)}(?![\w])", hint) for s in shown), hint


def test_the_two_part_answer_of_notebook_3(capsys):
    assert ex03.check_beta_by_hand(nb03.my_beta, nb03.my_accept_first) is True
    assert ex03.check_beta_by_hand(0.7, None) is None
    assert ex03.check_beta_by_hand(0.6, nb03.my_accept_first) is False
    assert ex03.check_beta_by_hand(None, 1.0) is False
    out = capsys.readouterr().out
    assert "0.7" not in out.split("✓ Correct.")[-1]


# ---------------------------------------------------------------------------------------------
# the notebooks: unsolved when committed, solved by the solutions

nbformat = pytest.importorskip("nbformat")


def exercise_cells(nb) -> list:
    return [c for c in nb.cells if c.cell_type == "code" and "exercise" in c.metadata.get("tags", [])]


def defined_names(source: str) -> list:
    names = []
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, ast.Assign):
            names += [t.id for t in node.targets if isinstance(t, ast.Name)]
    return names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_committed_exercises_are_unsolved_and_their_answers_out_of_sight(path):
    nb = nbformat.read(path, as_version=4)
    cells = exercise_cells(nb)
    assert cells, "every notebook has exercises"
    solved = [c for c in nb.cells if "solution" in c.metadata.get("tags", [])]
    assert not solved, "solutions live in teacher/solutions/"
    module = __import__(f"solutions.nb{path.name[:2]}", fromlist=["__all__"])
    for cell in cells:
        names = defined_names(cell.source)
        assert names and set(names) <= set(module.__all__), (names, module.__all__)
        tree = ast.parse(cell.source)
        for node in tree.body:  # a function raises NotImplementedError; an answer is None
            if isinstance(node, ast.FunctionDef):
                assert "NotImplementedError" in ast.unparse(node.body[-1]), node.name
            elif isinstance(node, ast.Assign):
                assert isinstance(node.value, ast.Constant) and node.value.value is None, ast.unparse(node)
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert "notebook.check(" not in code  # every answer is checked in specviz.teaching.exercises, out of sight
    for name in CODED.get(path.name[:2], ()):
        assert f"def {name}(" in "\n".join(c.source for c in cells)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_with_the_solutions_passes_every_check(path, monkeypatch, tmp_path):
    """The exercise cells replaced by imports from teacher/solutions/nbXX.py, the notebook runs
    in smoke mode (as tests/test_notebooks.py runs it) and every check cell says ✓. The run stops
    after the last check cell: nothing after it can change a check, and test_notebooks.py has run
    those cells (in notebook 10, training EAGLE-3 and P-EAGLE live: most of its time)."""
    nbclient = pytest.importorskip("nbclient")
    from jupyter_client.manager import KernelManager

    smoke = {"SPECVIZ_SMOKE": "1", "SPECVIZ_PAIR": "tiny", "HF_HUB_OFFLINE": "1", "TQDM_DISABLE": "1",
             "HF_HUB_DISABLE_PROGRESS_BARS": "1", "OMP_NUM_THREADS": "1", "SPECVIZ_STATIC_IMAGES": "0", "SPECVIZ_LAB": "0"}
    for name, value in smoke.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PYTHONPATH", str(ROOT / "teacher"))  # the kernel finds the solutions there, specviz installed
    nb = nbformat.read(path, as_version=4)
    for cell in exercise_cells(nb):
        cell.source = f"from solutions.nb{path.name[:2]} import {', '.join(defined_names(cell.source))}"
    last_check = max(i for i, c in enumerate(nb.cells) if c.cell_type == "code" and "exercises.check_" in c.source)
    nb.cells = nb.cells[:last_check + 1]
    km = KernelManager(kernel_name="python3", transport="ipc", connection_file=str(tmp_path / "kernel.json"))
    client = nbclient.NotebookClient(nb, km=km, timeout=240, kernel_name="python3",
                                     resources={"metadata": {"path": str(path.parent)}})
    start = time.perf_counter()
    # cleanup_kc: the kernel is shut down when the run ends (nbclient does so by itself only for a
    # kernel manager it made; each leaked kernel kept its 0.4-1.5 GB until the worker ended)
    client.execute(cleanup_kc=True)
    checks = [c for c in nb.cells if c.cell_type == "code" and "exercises.check_" in c.source]
    assert checks
    for cell in checks:
        said = "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")
        assert checking.RIGHT in said and checking.WRONG not in said, (cell.source, said)
        assert checking.NOT_WRITTEN not in said and "Not answered" not in said, (cell.source, said)
    assert time.perf_counter() - start < 120


# ---------------------------------------------------------------------------------------------
# notebook 9's references

def test_09_the_engine_references_are_the_engines_own(tiny_runs):
    """engine_stream_waits agrees with the benchmark suite's stream_stats and the race's
    stream_latency; engine_survival with charts.acceptance_survival of the whole run."""
    from specviz.analysis.metrics import percentile, stream_stats, updates_from_events
    from specviz.render import charts, race

    for events in tiny_runs.values():
        ttft, amortised, arrivals = ex09.engine_stream_waits(events)
        suite, lat = stream_stats(*updates_from_events(events)), race.stream_latency(events)
        assert ttft == suite["ttft"] and percentile(amortised, 50) == suite["itl_p50"]
        assert percentile(amortised, 95) == suite["itl_p95"] and percentile(arrivals, 95) == lat["arrival_p95"]
        assert len(amortised) == len(arrivals) == lat["tokens"] - race.stream_updates(events)[0][1]
        surv = charts.acceptance_survival(events)
        if surv is not None:
            assert ex09.engine_survival(events, surv["k"]) == surv["survival"]
    assert charts.acceptance_survival(tiny_runs["greedy"]) is not None


def test_09_the_checks_replay_the_students_runs(tiny_runs, capsys):
    runs = [tiny_runs["greedy"], tiny_runs["pld"], tiny_runs["sampled"]]
    for check, solution in ((ex09.check_stream_waits, nb09.stream_waits),
                            (ex09.check_survival, nb09.survival_curve)):
        result, out = outcome(capsys, check, solution, runs=runs)
        assert result is True and "3 of your own runs" in out, out
    result, out = outcome(capsys, ex09.check_survival, nb09.survival_curve, runs=[tiny_runs["tree"]])
    assert result is True and "your own run" not in out, out  # a tree has no single draft length


# ---------------------------------------------------------------------------------------------
# notebook 10's reference

def test_10_the_engine_reference_is_the_training_reports_accounting(capsys):
    """engine_chain_acceptance is specviz.training.trainer.summarise_hits (which rounds to 4 digits); the
    check replays the notebook's own held-out hits when it is given them."""
    import random

    from specviz.training.trainer import summarise_hits

    rng = random.Random(5)
    for _ in range(20):
        depths, n = rng.randint(1, 5), rng.randint(1, 30)
        hits = [[rng.random() < 0.6 for _ in range(depths)] for _ in range(n)]
        survival, expected = ex10.engine_chain_acceptance(hits)
        report = summarise_hits(torch.tensor(hits), [0.0] * depths)
        assert all(abs(a - b) < 1e-4 for a, b in zip(survival, report["survival"])) and len(survival) == depths
        assert abs(expected - report["accepted"]) < 1e-3
    assert ex10.engine_chain_acceptance([]) == ([], 0.0)
    assert summarise_hits(torch.zeros(0, 3), [0.0] * 3)["accepted"] == 0.0
    result, out = outcome(capsys, ex10.check_chain_acceptance, nb10.chain_acceptance,
                          hits=torch.tensor([[True, False], [True, True], [False, True]]))
    assert result is True and "your live heads' held-out hits" in out, out


# ---------------------------------------------------------------------------------------------
# answers by hand: every equivalent form counts; a form the check cannot read is named as such

FORM = "the answer's form"
TOLERANCES = {  # what each numeric check accepts around the right value, as the module states it
    "check_cost_ratio": 0.05, "check_speedup_by_hand": 0.02, "check_max_tokens": 0.0, "check_best_k": 0.0,
    "check_accepted_per_drafted": 0.005, "check_break_even": 0.011, "check_paper_speedup": 0.02,
    "check_ssd_speedup": 0.02,
    "check_amortised_itl": 0.5, "check_share_at_depth": 0.005, "check_half_width": 1e-3,
    "check_cost_by_hand": 0.05, "check_compute_bound_ratio": 0.01,
}
NUMERIC = [case for case in BY_HAND if isinstance(case[2], (int, float))]


def line(capsys, check, *args):
    """What one by-hand check returns and the line it prints."""
    result, out = outcome(capsys, check, *args)
    assert "\n" not in out, out
    return result, out


def same_number(x):
    """x as a student may write it: int or float, numpy and torch scalars, 0-d arrays and tensors."""
    forms = [float(x), np.float64(x), np.float32(x), np.array(x), torch.tensor(float(x)),
             torch.tensor(float(x), dtype=torch.float64), Fraction(x)]
    if float(x).is_integer():
        forms += [int(x), np.int64(x), torch.tensor(int(x))]
    return forms


def misformed_number(x):
    """x in forms that are not one number: each should be named as a form error."""
    return {"a number in quotes": str(x), "a list of one number": [x], "a tuple of one number": (x,),
            "a dict": {"answer": x}, "a tensor of one entry": torch.tensor([float(x)]),
            "an array of one entry": np.array([x]), "a sentence": f"about {x}"}


def assert_form_error(capsys, check, extra, given, given_wrong, hint):
    """The form is named (the value may be right), the hint to work the value out again is not
    given, False is returned, and the line is the same whatever value the form holds."""
    result, out = line(capsys, check, given, *extra)
    assert result is False and out.startswith(checking.WRONG) and FORM in out, out
    assert "may be right" in out and "Not yet" not in out and "comput" not in out.lower(), out
    assert hint not in out, out
    assert line(capsys, check, given_wrong, *extra) == (False, out)  # says nothing about the value


@pytest.mark.parametrize("check,extra,right,wrong", NUMERIC, ids=[c[0].__name__ for c in NUMERIC])
def test_a_number_by_hand_counts_in_every_form_and_within_its_tolerance(check, extra, right, wrong, capsys):
    tol = TOLERANCES[check.__name__]
    _, not_yet = line(capsys, check, wrong, *extra)
    assert not_yet.startswith(f"{checking.WRONG} Not yet.")
    for form in same_number(right) + [right + 0.9 * tol, right - 0.9 * tol]:
        assert line(capsys, check, form, *extra) == (True, f"{checking.RIGHT} Correct."), repr(form)
    outside = [right + 1.5 * tol, np.float64(right - 1.5 * tol)] if tol else [right + 1, np.float64(right - 0.5)]
    for value in outside:  # a value off by more than the tolerance gets the hint, as any wrong value
        assert line(capsys, check, value, *extra) == (False, not_yet), repr(value)
    hint = not_yet.split("Not yet.")[1].strip()
    for name, given in misformed_number(right).items():
        assert_form_error(capsys, check, extra, given, misformed_number(wrong)[name], hint)
    assert_form_error(capsys, check, extra, True, False, hint)


LISTS = {  # check: (right in equivalent forms, wrong values, (a form error, the same form with a wrong value))
    "check_node_sees": (
        [nb05.my_nodes, (1, 4), [4, 1], {1, 4}, frozenset({1, 4}), np.array([1, 4]), torch.tensor([1, 4]),
         [1.0, 4.0], [np.int64(1), torch.tensor(4)], range(1, 5, 3)],
        [[0, 1, 4], [1], [1, 4, 4], [1, 3]],
        [(["1", "4"], ["0", "4"]), ("1, 4", "0, 4"), ({1: True, 4: True}, {0: True, 4: True}),
         ([[1], [4]], [[0], [4]]), (torch.tensor([[1], [4]]), torch.tensor([[0], [4]])), ([1, None], [0, None])]),
    "check_q2": (
        [nb05.my_q2, (0.0, 0.6, 0.4), [0, 0.6, 0.4], np.array([0.0, 0.6, 0.4]), torch.tensor([0.0, 0.6, 0.4]),
         [np.float64(0), np.float32(0.6), torch.tensor(0.4)], [Fraction(0), Fraction(3, 5), Fraction(2, 5)],
         [0.0009, 0.6009, 0.3991], [-0.0009, 0.5991, 0.4009]],  # within 0.001
        [[0.0, 0.3, 0.2], [0.0, 0.602, 0.398], [0.002, 0.6, 0.4], [0.4, 0.6, 0.0]],
        [(["0", "0.6", "0.4"], ["0", "0.3", "0.2"]), ({0.0, 0.6, 0.4}, {0.0, 0.3, 0.2}), ([0.6, 0.4], [0.3, 0.2]),
         ([[0.0, 0.6, 0.4]], [[0.0, 0.3, 0.2]]), ({"a": 0.0, "b": 0.6, "c": 0.4}, {"a": 0.0, "b": 0.3, "c": 0.2}),
         ("0, 0.6, 0.4", "0, 0.3, 0.2"), (0.6, 0.3)]),
    "check_cascade_by_hand": (
        [nb02.my_emitted, ("x", "=", "2")],
        [["x", "=", "1"], ["x", "=", "2", ";"], ["X", "=", "2"], ["x", "=", " 2"]],  # a token is compared exactly
        [("x = 2", "x = 1"), ({"x", "=", "2"}, {"x", "=", "1"}), (["x", "=", 2], ["x", "=", 1]),
         ([["x", "=", "2"]], [["x", "=", "1"]]), ({0: "x", 1: "=", 2: "2"}, {0: "x", 1: "=", 2: "1"})]),
    "check_lookup_by_hand": (
        [nb06.my_proposal, ("c", "d", "a")],
        [["a", "b"], ["c", "d"], ["C", "D", "A"]],
        [("c d a", "a b c"), ({"c", "d", "a"}, {"a", "b", "c"}), ([["c", "d", "a"]], [["a", "b", "c"]]),
         ({"tokens": ["c", "d", "a"]}, {"tokens": ["a", "b"]})]),
    "check_broken_rule": (
        [nb03.my_letter, "B", " b ", "b\n", np.str_("B")],
        ["a", "C", " d "],
        [(["b"], ["a"]), ("token b", "token a"), (1, 0), ("e", "f"), ({"b"}, {"a"}), ("b)", "a)"), (True, False)]),
}


@pytest.mark.parametrize("name", LISTS)
def test_a_list_or_letter_by_hand_counts_in_every_form(name, capsys):
    check = next(getattr(m, name) for m in NOTEBOOK_CHECKS if hasattr(m, name))
    rights, wrongs, misformed = LISTS[name]
    for form in rights:
        assert line(capsys, check, form) == (True, f"{checking.RIGHT} Correct."), repr(form)
    _, not_yet = line(capsys, check, wrongs[0])
    assert not_yet.startswith(f"{checking.WRONG} Not yet.")
    for value in wrongs:  # a wrong value in a readable form gets the hint
        assert line(capsys, check, value) == (False, not_yet), repr(value)
    hint = not_yet.split("Not yet.")[1].strip()
    for given, given_wrong in misformed:
        assert_form_error(capsys, check, (), given, given_wrong, hint)


def test_a_form_error_says_what_form_is_expected(capsys):
    """The line names the form expected and the form received, in words a student can act on."""
    cases = [(ex04.check_best_k, "1", "one number", "a number in quotes (a string)"),
             (ex05.check_q2, ["0", "0.6", "0.4"], "a flat list of 3 numbers, in order", "holding a number in quotes"),
             (ex05.check_q2, {0.0, 0.6, 0.4}, "in order", "a set"),
             (ex05.check_q2, [[0.0, 0.6, 0.4]], "a flat list", "a nested list"),
             (ex05.check_q2, [0.6, 0.4], "3 numbers", "a list of 2 numbers"),
             (ex05.check_node_sees, {1: True}, "a flat list of numbers", "a dict"),
             (ex02.check_cascade_by_hand, ["x", "=", 2], "a list of strings, one per token", "holding a number"),
             (ex03.check_broken_rule, "token b", "one letter, a, b, c or d", "a longer string"),
             (ex01.check_speedup_by_hand, torch.tensor([1.15]), "one number", "a tensor of shape (1,)")]
    for check, given, needs, says in cases:
        result, out = line(capsys, check, given)
        assert result is False and out.startswith(f"{checking.WRONG} Check {FORM}: the value may be right"), out
        assert f"it should be {needs}" in out or needs in out.split(", not ")[0], out
        assert says in out.split(", not ")[-1], out


def test_the_two_part_answer_of_notebook_3_reads_each_part_in_every_form(capsys):
    beta, first = nb03.my_beta, nb03.my_accept_first
    for b, f in zip(same_number(beta), same_number(first)):
        assert ex03.check_beta_by_hand(b, f) is True, (b, f)
    assert ex03.check_beta_by_hand(beta + 9e-7, first + 0.009) is True  # within 1e-6 and 0.01
    capsys.readouterr()
    assert ex03.check_beta_by_hand(beta + 2e-6, first - 0.02) is False
    out = capsys.readouterr().out.splitlines()
    assert out == [f"{checking.WRONG} Not yet. β = min(0.6, 0.9) + min(0.4, 0.1).",
                   f"{checking.WRONG} Not yet. min(1, p/q) for the first token."], out
    assert ex03.check_beta_by_hand(str(beta), first) is False
    out = capsys.readouterr().out.splitlines()
    assert FORM in out[0] and "min(" not in out[0] and out[1] == f"{checking.RIGHT} Correct.", out
    assert ex03.check_beta_by_hand([beta], None) is False  # a form error is an answer, not a blank
    out = capsys.readouterr().out.splitlines()
    assert FORM in out[0] and out[1].startswith("Not answered yet"), out


# ---------------------------------------------------------------------------------------------
# notebook 0: the caches after a step

def test_00_the_cache_rule_is_the_engines(tiny):
    """lessons.cache_rows (what notebook 0 and the slides draw) and engine_caches_after (what the
    exercise asks for) agree with a real run at every step, the last included: the draft model's
    cache as its runner reports it, the target's from what the engine fed it next."""
    import specviz
    from specviz.drafters.model import ModelDrafter
    from specviz.render import lessons

    class Watched(ModelDrafter):
        def __init__(self, *args):
            super().__init__(*args)
            self.seen = []

        def propose(self, committed, k, warp, generator):
            proposal = super().propose(committed, k, warp, generator)
            self.seen.append({"draft cache after drafting": self.runner.length})
            return proposal

        def observe(self, committed, proposal, path, target_probs):
            super().observe(committed, proposal, path, target_probs)
            self.seen[-1]["draft cache after crop"] = self.runner.length

    outcomes = set()
    for n in (64, 63, 61, 60):  # runs of other lengths: their last steps fall differently
        drafter = Watched(tiny.draft, tiny.eos_token_ids)
        events = [e.to_dict() for e in specviz.generate(tiny, "def fibonacci(n):", k=2, max_new_tokens=n,
                                                           drafter=drafter)]
        rows = lessons.cache_rows(events)
        assert len(rows) == len(drafter.seen)
        for row, seen in zip(rows, drafter.seen):
            assert {key: row[key] for key in seen} == seen, (row, seen)
            outcomes.add(row["outcome"])
            if row["guessed"] and row["closed"]:
                assert ex00.engine_caches_after(row["committed before"], row["guessed"], row["accepted"]) == (
                    row["target cache after crop"], row["draft cache after crop"])
        for row, after in zip(rows, rows[1:]):  # the target read its uncached tail plus the guesses
            assert after["target read"] == after["committed before"] - row["target cache after crop"] + after["guessed"]
    assert {"all accepted", "rejection: rolled back"} <= outcomes  # both kinds of step were checked


def test_00_the_check_says_what_is_wrong(capsys):
    from solutions import nb00

    result, out = outcome(capsys, ex00.check_caches_after, nb00.caches_after)
    assert result is True, out
    rows = [{"committed before": 10, "guessed": 4, "accepted": 1, "target cache after crop": 11,
             "draft cache after crop": 11}]
    result, out = outcome(capsys, ex00.check_caches_after, nb00.caches_after, rows=rows)
    assert result is True and "1 step from your own run" in out, out
    wrong = {
        "it is read next step": lambda b, d, a: (b + a + 1, min(b + d - 1, b + a)),
        "keeps the rejected guesses": lambda b, d, a: (b + d, min(b + d - 1, b + a)),
        "has not read its own last guess": lambda b, d, a: (b + a, b + a),
        "return two lengths": lambda b, d, a: b + a,
    }
    for says, fn in wrong.items():
        result, out = outcome(capsys, ex00.check_caches_after, fn)
        assert result is False and says in out and reveals_nothing(out), (says, out)


# ---------------------------------------------------------------------------------------------
# notebook 12: one whole step, written by the student

from specviz.teaching.exercises import nb12 as ex12  # noqa: E402
from solutions import nb12  # noqa: E402

CODED["12"] = ("my_step",)
STEP_PROMPT = "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n"


@pytest.fixture(scope="module")
def greedy_run(tiny):
    """A greedy run of the tiny pair with every kind of step: some drafts rejected, all accepted,
    and a last step that drafts fewer than k (the length limit)."""
    import specviz

    events = [e.to_dict() for e in specviz.generate(tiny, STEP_PROMPT, method="spec", k=4, max_new_tokens=40,
                                                      ignore_eos=True)]
    done = steps_of(events)
    assert {s["accepted"] == s["k"] for s in done[:-1]} == {True, False} and done[-1]["k"] < 4
    return events


def step_variant(replace="residual", bonus="p", stop=True, row=0, ratio="p/q", chain=True, passes=1,
                 own_rng=False):
    """The solution's step with one thing changed (each default is the right rule)."""
    def step(models, prefix, k, greedy, generator):
        if greedy:
            pick = ex12.top
        elif own_rng:  # the global generator, not the one the check hands over
            pick = lambda probs: int(torch.multinomial(probs, 1))  # noqa: E731
        else:
            pick = lambda probs: ex12.draw(probs, generator)  # noqa: E731
        drafts, q = [], []
        for _ in range(k):
            q.append(models.draft_probs(prefix + (drafts if chain else [])))
            drafts.append(pick(q[-1]))
        p = models.target_probs(prefix, drafts)
        for _ in range(passes - 1):
            p = models.target_probs(prefix, drafts)
        out = []
        for i, x in enumerate(drafts):
            pi = p[min(i + row, k)]
            a = float(pi[x] / q[i][x]) if ratio == "p/q" else float(q[i][x] / pi[x])
            passes_test = x == ex12.top(pi) if greedy else ex12.uniform(generator) < min(1.0, a)
            if passes_test:
                out.append(x)
                continue
            if replace == "draft":
                out.append(x)
            elif replace is not None:
                left = torch.clamp(pi - q[i], min=0.0)
                out.append(ex12.top(pi) if greedy else pick(pi if replace == "p" else left / left.sum()))
            if stop:
                return out
        return out + ([pick(p[k] if bonus == "p" else q[-1] if q else p[k])] if bonus else [])

    return step


WRONG_GREEDY_STEPS = {
    "no bonus token": (step_variant(bonus=None), "the bonus token is missing"),
    "the bonus from q": (step_variant(bonus="q"), "the bonus token is not the target's top token"),
    "goes on after the first rejection": (step_variant(stop=False), "goes on after draft"),
    "keeps the rejected draft": (step_variant(replace="draft"), "yet your step kept it"),
    "nothing in place of the rejected draft": (step_variant(replace=None), "nothing replaces draft"),
    "judges with the next row of p": (step_variant(row=1), "did not"),
    "every draft from q after the prefix alone": (step_variant(chain=False), "your draft 2 is not the engine's"),
    "two target passes": (step_variant(passes=2), "2 target passes"),
}

WRONG_SAMPLED_STEPS = {
    "resamples from p (the planted step)": (ex12.resample_from_p_step, "chi-square"),
    "resamples from p (the student's way)": (step_variant(replace="p"), "chi-square"),
    "the bonus from q": (step_variant(bonus="q"), "chi-square"),
    "accepts with min(1, q/p)": (step_variant(ratio="q/p"), "chi-square"),
    "randomness not from the generator": (step_variant(own_rng=True), "the same seed gave other tokens"),
}


def test_12_the_checks_pass_the_engine_and_the_solution(tiny, greedy_run, capsys):
    for step in (ex12.engine_step, nb12.my_step):
        result, out = outcome(capsys, ex12.check_greedy, step, tiny, greedy_run)
        assert result is True and out.startswith(checking.RIGHT) and "\n" not in out, out
        assert f"each of the {len(steps_of(greedy_run))} steps" in out and "40 tokens" in out, out
        result, out = outcome(capsys, ex12.check_sampling, step, runs=2000)
        assert result is True and "\n" not in out and "chi-square" in out and "degrees of freedom" in out, out


@pytest.mark.parametrize("wrong", WRONG_GREEDY_STEPS)
def test_12_the_greedy_check_says_where_a_wrong_step_parts_from_the_engine(wrong, tiny, greedy_run, capsys):
    fn, says = WRONG_GREEDY_STEPS[wrong]
    assert_wrong(capsys, ex12.check_greedy, fn, says, pair=tiny, events=greedy_run)
    result, out = outcome(capsys, ex12.check_greedy, fn, tiny, greedy_run)
    assert re.search(r"parts from the engine at step \d+ of \d+", out), out


def test_12_the_greedy_check_names_the_step_and_draft(tiny, greedy_run, capsys):
    """The first step whose drafts are not all accepted is the one a step without replacement
    parts at, and the draft it names is the engine's first rejected one (both from 1)."""
    first = next(s for s in steps_of(greedy_run) if s["accepted"] < s["k"])
    result, out = outcome(capsys, ex12.check_greedy, step_variant(replace=None), tiny, greedy_run)
    assert f"at step {first['step'] + 1} of " in out and f"replaces draft {first['accepted'] + 1}," in out, out
    full = next(s for s in steps_of(greedy_run) if s["accepted"] == s["k"] > 0)
    result, out = outcome(capsys, ex12.check_greedy, step_variant(bonus=None), tiny, greedy_run)
    assert f"at step {full['step'] + 1} of " in out and f"all {full['k']} drafts" in out, out


@pytest.mark.parametrize("wrong", WRONG_SAMPLED_STEPS)
def test_12_the_sampling_check_has_power(wrong, capsys):
    fn, says = WRONG_SAMPLED_STEPS[wrong]
    result, out = outcome(capsys, ex12.check_sampling, fn, runs=2000)
    assert result is False and out.startswith(checking.WRONG) and "\n" not in out and says in out, out
    if says == "chi-square":
        shown = re.search(r"p-value (.+) \(below 1e-4\)", out)[1]
        assert shown.startswith("below 1e-300") or float(shown) < ex12.P_VALUE_FLOOR, out


def test_12_the_planted_step_fails_the_statistic_the_notebook_shows(capsys):
    assert ex12.show_power(runs=2000) < 1e-10
    out = capsys.readouterr().out
    assert out.startswith("a planted wrong step") and "degrees of freedom" in out, out
    counts, joint = ex12.sampled_counts(ex12.engine_step, 2000)
    statistic, dof, p_value = ex12.chi_square(counts, joint)
    assert sum(counts.values()) == 2000 and len(joint) == ex12.TOY_VOCAB ** ex12.TOY_TOKENS
    assert 0 < dof < len(joint) and p_value > ex12.P_VALUE_FLOOR


def test_12_chi_square_on_hand_made_counts():
    joint = {(0,): 0.5, (1,): 0.25, (2,): 0.25, (3,): 0.0}
    assert ex12.chi_square({(0,): 50, (1,): 25, (2,): 25}, joint) == (0.0, 2, 1.0)
    statistic, dof, _ = ex12.chi_square({(0,): 60, (1,): 20, (2,): 20}, joint)
    assert dof == 2 and math.isclose(statistic, 10 ** 2 / 50 + 5 ** 2 / 25 + 5 ** 2 / 25)


def test_12_an_unwritten_or_broken_step_does_not_stop_the_notebook(tiny, greedy_run, capsys):
    def unwritten(*args):
        raise NotImplementedError("write this")

    def crashes(*args):
        return {}["missing"]

    for check, extra in ((ex12.check_greedy, (tiny, greedy_run)), (ex12.check_sampling, ())):
        result, out = outcome(capsys, check, unwritten, *extra)
        assert result is None and out.startswith(f"{checking.NOT_WRITTEN}: my_step") and "\n" not in out, out
        result, out = outcome(capsys, check, crashes, *extra)
        assert result is False and "raised KeyError" in out and "\n" not in out, out
        result, out = outcome(capsys, check, None, *extra)
        assert result is False and "should be a function" in out, out
    result, out = outcome(capsys, ex12.check_greedy, lambda *a: "abc", tiny, greedy_run)
    assert result is False and "list of token ids" in out, out


def test_12_the_greedy_check_compares_with_what_the_run_recorded(tiny, greedy_run, capsys):
    """The engine's own step fails a run whose events were altered: the check compares with
    the run's recorded steps, not with the rule again."""
    altered = tampered(greedy_run, "step_finished",
                       lambda e: {**e, "emitted_ids": e["emitted_ids"][:-1] + [e["emitted_ids"][-1] + 1]}
                       if e["step"] == 2 else None)
    result, out = outcome(capsys, ex12.check_greedy, ex12.engine_step, tiny, altered)
    assert result is False and "at step 3 of " in out, out


def test_12_the_greedy_check_refuses_a_run_it_cannot_replay(tiny, capsys):
    import specviz

    runs = {"not a greedy run": dict(temperature=1.0, seed=0, ignore_eos=True),
            "ignore_eos=True": dict()}
    for says, options in runs.items():
        events = list(specviz.generate(tiny, STEP_PROMPT, method="spec", k=2, max_new_tokens=6, **options))
        result, out = outcome(capsys, ex12.check_greedy, nb12.my_step, tiny, events)
        assert result is False and says in out and "\n" not in out, out


def test_12_the_models_feed_what_the_engine_feeds(tiny):
    """A step in the engine's order gets the engine's p bit for bit: the p of the drafts it
    scored equals the target_scored event's p_draft of each step of a real run."""
    import specviz

    events = [e.to_dict() for e in specviz.generate(tiny, STEP_PROMPT, method="spec", k=3, max_new_tokens=20,
                                                      ignore_eos=True)]
    prompt, steps = ex12.engine_steps(events)
    models, prefix = ex12.Models(tiny, 0.0), list(prompt)
    for step in steps:
        emitted = ex12.engine_step(models, prefix, step["k"], True, torch.Generator())
        scored = next(e for e in events if e["kind"] == "target_scored" and e["step"] == step["step"])
        p = models.target_probs(prefix, step["drafts"])
        assert [float(p[i][x]) for i, x in enumerate(step["drafts"])] == scored["p_draft"]
        assert emitted == step["emitted"]
        prefix += emitted
