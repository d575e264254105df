"""Trees sized to the machine (tree_budget="auto", specviz.drafters.tree_budget): each step keeps the nodes
that maximise expected tokens per second under the measured pass costs; greedy output stays the
target's, sampled output keeps the target's distribution, and a bad budget is refused."""

import subprocess
import sys

import pytest
from test_distribution import N_TOKENS, RUNS, _p_value, _target_joint, toy  # noqa: F401

from specviz import generate
from specviz.config import RunConfig, Warp
from specviz.drafters.model_tree import TreeDrafter
from specviz.drafters.tree_budget import TreeSizer
from specviz.errors import InputError
from specviz.render import panel, steps as st

SCORES = [0.9, 0.5, 0.3, 0.1, 0.05]
CURVE = {1: 1.0, 2: 1.0, 3: 1.2, 4: 1.5, 5: 2.0, 6: 3.0}  # seconds of a pass over that many tokens


def test_it_keeps_the_nodes_that_pay():
    # before the run has a rate, the step's own ratio (1 + sum of the n best) / (draft + pass(n + 1)):
    # draft 0.5: n=1 1.9/1.5 = 1.27, n=2 2.4/1.7 = 1.41, n=3 2.7/2.0 = 1.35, n=4 2.8/2.5 = 1.12
    sizer = TreeSizer(None).use(CURVE)
    assert sizer.choose(SCORES, 0.5) == 2
    assert sizer.info["nodes"] == 2 and sizer.info["expected"] == 2.4 and sizer.info["verify_s"] == 1.2
    assert sizer.info["rule"] == "ratio"
    # a dear draft is already spent: more nodes pay (n=3 2.7/11.5 beats n=2 2.4/11.2 and n=4 2.8/12)
    assert TreeSizer(None).use(CURVE).choose(SCORES, 10.0) == 3
    # the same machine 100 times faster chooses the same (seconds are seconds, not one-token passes)
    assert TreeSizer(None).use({w: s / 100 for w, s in CURVE.items()}).choose(SCORES, 0.005) == 2
    # passes that cost the same whatever their width: every node with a chance pays
    assert TreeSizer(None).use({1: 1.0, 65: 1.0}).choose(SCORES, 0.5) == 5
    # passes that grow fast: one node
    assert TreeSizer(None).use({1: 1.0, 2: 1.0, 3: 3.0}).choose(SCORES, 0.5) == 1
    assert TreeSizer(None, cap=3).use({1: 1.0, 65: 1.0}).choose(SCORES, 0.5) == 3  # never past the cap


def test_with_a_run_rate_a_node_pays_if_it_is_worth_its_time_at_that_rate():
    # value(n) = 1 + sum - R (draft + pass(n + 1)). R = 2 tokens/s: n=1 1.9 - 3.0, n=2 2.4 - 3.4,
    # n=3 2.7 - 4.0: 2 nodes. R = 0.5: n=2 2.4 - 0.85 = 1.55, n=3 2.7 - 1.0 = 1.70, n=4 2.8 - 1.25: 3 nodes
    for rate, nodes in ((2.0, 2), (0.5, 3)):
        sizer = TreeSizer(None).use(CURVE)
        sizer.draft_s, sizer.pass_s = 1.0, 1.0
        sizer.observe([(1.0, True)] * (round(2 * rate) - 1))  # 2R tokens (with the target's own) in 2 s
        assert sizer.rate == rate and sizer.calibration() == 1.0
        assert sizer.choose(SCORES, 0.5) == nodes and sizer.info["rule"] == "run rate"


def test_the_runs_own_passes_scale_the_curve():
    sizer = TreeSizer(None).use(CURVE)
    sizer.timed(3, 2.4)  # a pass over 3 tokens took twice what the curve says
    assert sizer.scale == 2.0 and sizer.pass_seconds(3) == 2.4 and sizer.pass_seconds(6) == 6.0
    sizer.timed(3, 1000.0)
    assert sizer.scale == 4.0  # bounded


def test_a_level_is_drafted_only_if_it_may_pay():
    # now: n=2 2.4/1.7 = 1.41; one more level whose best child may hold all of its parent's 0.5:
    # n=3 2.9/(0.6 + 1.5) = 1.38 if a level costs 0.1 (not drafted), 2.9/2.01 = 1.44 if 0.01 (drafted)
    dear, cheap, untimed = (TreeSizer(None).use(CURVE) for _ in range(3))
    dear.level_timed(0.1)
    cheap.level_timed(0.01)
    assert not dear.deeper_pays([0.9, 0.5], [0.5], 0.5)
    assert cheap.deeper_pays([0.9, 0.5], [0.5], 0.5)
    assert untimed.deeper_pays([0.9, 0.5], [0.5], 0.5)  # before a level was timed: drafted


def test_calibration_follows_what_each_rank_accepted():
    sure = TreeSizer(None).use(CURVE)
    sure.observe(list(zip(SCORES, [True, False, False, False, False])))  # only the best node was accepted
    # rank 1: 1 accepted for 0.9 predicted; ranks 2-3: 0 for 0.8 (floored at 0.2); ranks 4-7: 0.15 predicted,
    # too little to judge (1.0). n=1 (1 + 1.11 * 0.9) / 1.5 = 1.33 > n=2 (2.0 + 0.2 * 0.5) / 1.7 = 1.24
    assert sure.choose(SCORES, 0.5) == 1  # where 2 paid uncalibrated
    assert sure.info["by_rank"][:3] == [round(1 / 0.9, 3), 0.2, 1.0] and sure.info["calibration"] == 0.541  # 1 of 1.85
    for ranked, calibration in (([(0.5, True)], 2.0), ([(0.9, False)], 0.2), ([(0.3, False)], 1.0)):
        sizer = TreeSizer(None).use(CURVE)
        sizer.observe(ranked)  # capped, floored, too little evidence
        assert sizer.calibration(0) == calibration
    sure.reset()  # a new run starts over; the measured curve stays
    assert sure.calibration() == 1.0 and sure.rate is None and sure.points == CURVE


def test_a_sampled_budget_is_fixed_before_the_draws():
    sizer = TreeSizer(None).use(CURVE)
    assert sizer.budget() == 16  # the first step's, before any scores
    sizer.plan(SCORES, 0.5, nodes=5)  # the step drew 5 nodes; 2 of them would have paid
    assert sizer.budget() == 2
    assert sizer.info == {"nodes": 5, "budget": 16, "next_budget": 2, "calibration": 1.0, "draft_s": 0.5}
    flat = TreeSizer(None, first_budget=5).use({1: 1.0, 65: 1.0})
    flat.plan(SCORES, 0.5, nodes=5)  # all 5 paid and the budget stopped the tree: twice the budget
    assert flat.budget() == 10
    flat.plan(SCORES, 0.5, nodes=5)  # all paid, but the tree ended before its budget of 10: kept
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
    sized = {s.step: s.info["tree_size"] for s in steps if "tree_size" in s.info}
    assert len(sized) > 3 and {t.step: len(t.nodes) for t in trees if t.step in sized} == {
        step: size["nodes"] for step, size in sized.items()}
    first = min(sized)
    assert "verify_curve" in sized[first] and not any("verify_curve" in sized[s] for s in sized if s != first)
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
    sizes = [len(e.nodes) for e in events if e.kind == "tree_built" and e.nodes]  # k = 0 at the end: no tree
    assert sizes and max(sizes) == nodes
    if nodes == 1:
        assert set(sizes) == {1}


STEEP = {1: 1.0, 2: 1.0, 3: 1.1, 4: 3.0}  # the toy's sized trees keep 1 to 3 nodes of up to 21 drafted


def _sampled_runs(toy, drafter_class=TreeDrafter):  # noqa: F811
    counts, runs = {}, []
    for seed in range(RUNS // 2):
        drafter = drafter_class(toy.draft, (), (), True, "auto", 3, 3, TreeSizer(toy.target, first_budget=2).use(STEEP))
        events = list(generate(toy, [0], method="tree", tree="dynamic", temperature=1.0, max_new_tokens=N_TOKENS,
                               seed=seed, record_topk=0, drafter=drafter))
        key = tuple(events[-1].token_ids[:N_TOKENS])
        counts[key] = counts.get(key, 0) + 1
        runs.append(events)
    return counts, runs


def test_sampled_sized_trees_follow_the_target(toy):  # noqa: F811
    """Under sampling the budget moves between steps (from the last step's scores), never with
    the values drawn in the step itself: the output keeps the target's exact distribution."""
    counts, runs = _sampled_runs(toy)
    assert _p_value(counts, _target_joint(toy, Warp(1.0)), RUNS // 2) > 1e-4
    assert sum(e.kind == "token_rejected" for events in runs for e in events) > RUNS // 10
    sized = [s.info["tree_size"] for events in runs for s in events
             if s.kind == "step_finished" and s.info and "tree_size" in s.info]
    assert len({size["budget"] for size in sized}) > 1  # the budget really moved between steps
    assert sum(size["nodes"] == size["budget"] for size in sized) > RUNS // 10  # and really bounded trees


def test_sizing_a_sampled_tree_by_its_own_draws_is_caught(toy):  # noqa: F811
    """The same sizer cutting each sampled tree after its draws (as it does greedy ones) keeps a
    candidate because its own q is high: the distribution test rejects the output."""
    class CutAfterDrawing(TreeDrafter):
        rerank_sampled = True

    counts, _ = _sampled_runs(toy, CutAfterDrawing)
    assert _p_value(counts, _target_joint(toy, Warp(1.0)), RUNS // 2) < 1e-4


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


def test_the_apps_budget_slider_at_zero_sizes_the_tree():
    pytest.importorskip("gradio")
    from webapp.common import options

    auto = options("eagle3-tree", 4, 0.0, 1.0, 32.0, 0.0, False, tree_budget=0.0)
    assert auto.tree_budget == "auto" and auto.options()["tree_budget"] == "auto"
    assert options("eagle3-tree", 4, 0.0, 1.0, 32.0, 0.0, False, tree_budget=8.0).tree_budget == 8
    # the slider hides for other methods but keeps its value: a chain run ignores it
    chain = options("eagle3", 4, 0.0, 1.0, 32.0, 0.0, False, tree_budget=0.0)
    assert "tree_budget" not in chain.options()
