"""Trees sized to the machine (tree_budget="auto", specviz.treesize): each step keeps the nodes
that maximise expected tokens per second under the measured pass costs; greedy output stays the
target's, sampled output keeps the target's distribution, and a bad budget is refused."""

import subprocess
import sys

import pytest

from specviz import generate
from specviz.config import RunConfig
from specviz.drafters.tree import TreeDrafter
from specviz.errors import InputError
from specviz.render import panel, steps as st
from specviz.sampling import Warp
from specviz.treesize import TreeSizer

from test_distribution import N_TOKENS, RUNS, _p_value, _target_joint, toy  # noqa: F401

SCORES = [0.9, 0.5, 0.3, 0.1, 0.05]
CURVE = {1: 1.0, 2: 1.0, 3: 1.2, 4: 1.5, 5: 2.0, 6: 3.0}  # seconds of a pass over that many tokens


def test_it_keeps_the_nodes_that_pay():
    # rate(n) = (1 + sum of the n best scores) / (draft + pass(n + 1)):
    # draft 0.5: n=1 1.9/1.5 = 1.27, n=2 2.4/1.7 = 1.41, n=3 2.7/2.0 = 1.35, n=4 2.8/2.5 = 1.12
    sizer = TreeSizer(None).use(CURVE)
    assert sizer.choose(SCORES, 0.5) == 2
    assert sizer.info["nodes"] == 2 and sizer.info["expected"] == 2.4 and sizer.info["verify_s"] == 1.2
    # a dear draft is already spent: more nodes pay (n=3 2.7/11.5 beats n=2 2.4/11.2 and n=4 2.8/12)
    assert TreeSizer(None).use(CURVE).choose(SCORES, 10.0) == 3
    # passes that cost the same whatever their width: every node with a chance pays
    assert TreeSizer(None).use({1: 1.0, 65: 1.0}).choose(SCORES, 0.5) == 5
    # passes that grow fast: one node
    assert TreeSizer(None).use({1: 1.0, 2: 1.0, 3: 3.0}).choose(SCORES, 0.5) == 1
    assert TreeSizer(None, cap=3).use({1: 1.0, 65: 1.0}).choose(SCORES, 0.5) == 3  # never past the cap


def test_calibration_follows_what_steps_accepted():
    sure = TreeSizer(None).use(CURVE)
    sure.observe(accepted=1, predicted=5.0)  # the draft was sure too often: a fifth of its sum was accepted
    assert sure.calibration == 0.2
    # n=1 (1 + 0.2 * 0.9) / 1.5 = 0.79 > n=2 (1 + 0.2 * 1.4) / 1.7 = 0.75: one node, where 2 paid uncalibrated
    assert sure.choose(SCORES, 0.5) == 1 and sure.info["calibration"] == 0.2
    unlucky = TreeSizer(None).use(CURVE)
    unlucky.observe(accepted=0, predicted=5.0)
    assert unlucky.calibration == 0.2  # floored: a few unlucky steps do not shrink every tree to nothing
    unlucky.observe(accepted=10, predicted=0.0)  # 10 accepted against 0.9 * 5 predicted: capped
    assert unlucky.calibration == 2.0


def test_a_sampled_budget_is_fixed_before_the_draws():
    sizer = TreeSizer(None).use(CURVE)
    assert sizer.budget() == 16  # the first step's, before any scores
    sizer.plan(SCORES, 0.5, nodes=5)  # the step drew 5 nodes; 2 of them would have paid
    assert sizer.budget() == 2 and sizer.info == {"nodes": 5, "next_budget": 2, "calibration": 1.0,
                                                  "draft_s": 0.5}
    flat = TreeSizer(None).use({1: 1.0, 65: 1.0})
    flat.plan(SCORES, 0.5, nodes=5)  # all 5 paid: the next step may draw twice as many
    assert flat.budget() == 10


def _sized_drafter(pair, curve, **kw):
    return TreeDrafter(pair.draft, pair.eos_token_ids, (), True, "auto", kw.get("depth", 4), kw.get("width", 3),
                       TreeSizer(pair.target).use(curve))


@pytest.mark.parametrize("prompt", ["def fibonacci(n):", "Hello, world! "])
def test_greedy_sized_trees_equal_ar(tiny, prompt):
    expected = list(generate(tiny, prompt, method="ar", max_new_tokens=40))[-1].token_ids
    events = list(generate(tiny, prompt, method="tree", tree="dynamic", tree_budget="auto", max_new_tokens=40))
    assert events[-1].token_ids == expected
    steps = [e for e in events if e.kind == "step_finished"]
    trees = [e for e in events if e.kind == "tree_built"]
    # every verified tree is the size the sizer chose, and the first sized step carries the cost curve
    sized = [s.info["tree_size"] for s in steps if "tree_size" in s.info]
    assert [len(t.nodes) for t in trees] == [size["nodes"] for size in sized]
    assert "verify_curve" in sized[0] and not any("verify_curve" in size for size in sized[1:])
    assert events[0].options["tree_budget"] == "auto" and "budget auto" in trees[0].shape
    run = st.build([e.to_dict() for e in events])  # the step view says why the tree has its size
    view = next(v for v in run.steps if "tree_size" in v.info)
    assert (f"kept the {len(view.nodes)} likeliest of {view.info['tree_size']['drafted']} drafted nodes"
            in panel.step_panel(run, view.step).html)


@pytest.mark.parametrize("curve, nodes", [({1: 1.0, 65: 1.0}, 12), ({1: 1e-3, 2: 1e-3, 3: 1.0}, 1)])
def test_the_curve_decides_the_size(tiny, curve, nodes):
    """A machine whose passes cost the same at any width verifies every drafted node (depth 2,
    width 3: 3 + 9); one whose pass over three tokens is dear verifies one node a step."""
    prompt = "def fibonacci(n):"
    expected = list(generate(tiny, prompt, method="ar", max_new_tokens=24))[-1].token_ids
    events = list(generate(tiny, prompt, method="tree", max_new_tokens=24,
                           drafter=_sized_drafter(tiny, curve, depth=2, width=3)))
    assert events[-1].token_ids == expected
    sizes = [len(e.nodes) for e in events if e.kind == "tree_built"]
    assert sizes and max(sizes) == nodes
    if nodes == 1:
        assert set(sizes) == {1}


def test_sampled_sized_trees_follow_the_target(toy):  # noqa: F811
    """Under sampling the budget moves between steps (from the last step's scores), never with
    the values drawn in the step itself: the output keeps the target's exact distribution."""
    warp = Warp(1.0)
    counts, runs = {}, []
    for seed in range(RUNS // 2):
        events = list(generate(toy, [0], method="tree", tree="dynamic", temperature=1.0, max_new_tokens=N_TOKENS,
                               seed=seed, record_topk=0,
                               drafter=TreeDrafter(toy.draft, (), (), True, "auto", 3, 3,
                                                   TreeSizer(toy.target).use({1: 1.0, 2: 1.0, 3: 1.1, 4: 3.0}))))
        key = tuple(events[-1].token_ids[:N_TOKENS])
        counts[key] = counts.get(key, 0) + 1
        runs.append(events)
    assert _p_value(counts, _target_joint(toy, warp), RUNS // 2) > 1e-4
    assert sum(e.kind == "token_rejected" for events in runs for e in events) > RUNS // 10
    budgets = {s.info["tree_size"]["next_budget"] for events in runs for s in events
               if s.kind == "step_finished" and s.info and "tree_size" in s.info}
    assert len(budgets) > 1  # the budget really moved


def test_a_bad_budget_is_refused():
    assert RunConfig(method="eagle3-tree", tree_budget="auto").options()["tree_budget"] == "auto"
    assert RunConfig(method="eagle3-tree", tree_budget=8).options()["tree_budget"] == 8
    for bad in ("big", 0, 65, 2.5, True):
        with pytest.raises(InputError, match="tree_budget must be a whole number from 1 to 64, or 'auto'"):
            RunConfig(method="eagle-tree", tree_budget=bad)


def test_cli_takes_an_auto_budget():
    out = subprocess.run([sys.executable, "-m", "specviz", "generate", "--pair", "tiny", "--method", "tree",
                          "--tree", "dynamic", "--tree-budget", "auto", "--prompt", "def f(x):",
                          "--max-new-tokens", "8"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    bad = subprocess.run([sys.executable, "-m", "specviz", "generate", "--pair", "tiny", "--method", "tree",
                          "--tree-budget", "lots", "--prompt", "x"], capture_output=True, text=True, timeout=300)
    assert bad.returncode != 0 and "tree budget must be a whole number or 'auto'" in bad.stderr
    assert "Traceback" not in bad.stderr
