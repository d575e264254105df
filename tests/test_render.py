"""Renderers on golden traces of the tiny pair (tests/golden, made by tests/golden/make.py) and on
hand-built hostile events. No model runs here: renderers are pure functions of events."""

import html
import json
import re
from collections import Counter
from pathlib import Path

import pytest

from specviz.analysis import metrics, theory, trace
from specviz.render import charts, chips, inspector, panel, steps, tree
from specviz.render.html import quoted
from specviz.render.race import Lane, lane_html, race, verdict

GOLDEN = Path(__file__).parent / "golden"
EVIL = "<img src=x onerror=window.__pwned=1>"
SCRIPT = "<script>window.__pwned=1</script>"


def load(name: str) -> list:
    return [e.to_dict() for e in trace.load(GOLDEN / name)]


@pytest.fixture(scope="module")
def sampled():
    return load("tiny_spec_t1.jsonl")


@pytest.fixture(scope="module")
def greedy():
    return load("tiny_spec_greedy.jsonl")


@pytest.fixture(scope="module")
def ar():
    return load("tiny_ar.jsonl")


def kinds(events) -> Counter:
    return Counter(e["kind"] for e in events)


def chip_statuses(html_text: str) -> Counter:
    return Counter(re.findall(r'class="sv-chip sv-(\w+)"', html_text))


def chip_texts(html_text: str, statuses) -> list:
    pattern = r'class="sv-chip sv-(\w+)"[^>]*data-text="([^"]*)"'
    return [html.unescape(t) for s, t in re.findall(pattern, html_text) if s in statuses]


# -- the view model -----------------------------------------------------------------------------

def test_golden_trace_shows_every_decision(sampled):
    counts = kinds(sampled)
    for kind in ("token_accepted", "token_rejected", "residual_sampled", "bonus_sampled"):
        assert counts[kind] > 0, f"golden trace lost its {kind} events: regenerate it"


def test_steps_group_events_and_mark_wasted_drafts(sampled):
    run = steps.build(sampled)
    finished = [e for e in sampled if e["kind"] == "step_finished"]
    assert len(run.steps) == len(finished)
    for step, done in zip(run.steps, finished):
        assert [t.text for t in step.emitted] == done["emitted_texts"]
        assert len(step.drafted) == done["drafted"]
        assert sum(t.status == "accepted" for t in step.drafted) == done["accepted"]
        assert len(step.wasted) == done["drafted"] - done["evaluated"]
    assert run.finished["text"] == "".join(t.text for t in run.tokens() if t.status in steps.COMMITTED)


def test_a_step_in_flight_shows_draft_proposals(sampled):
    first_scored = next(i for i, e in enumerate(sampled) if e["kind"] == "target_scored")
    run = steps.build(sampled[:first_scored])
    assert run.steps[0].drafted and all(t.status == "draft" for t in run.steps[0].drafted)
    assert chip_statuses(chips.run_text(run).html)["draft"] == len(run.steps[0].drafted)


def test_unknown_event_kinds_are_kept_aside_not_rendered(sampled):
    future = [{"kind": "lookahead_window", "step": 0, "window": [[1, 2], [3, 4]]}, {"kind": "something_new", "value": 1}]
    run = steps.build(sampled[:5] + future + sampled[5:])
    assert run.steps[0].extras[0]["kind"] == "lookahead_window" and run.extras[0]["kind"] == "something_new"
    assert chips.run_text(run).html == chips.run_text(steps.build(sampled)).html


# -- chips --------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["tiny_spec_t1.jsonl", "tiny_spec_greedy.jsonl", "tiny_ar.jsonl",
                                  "tiny_typical_t1.jsonl", "tiny_pld.jsonl", "tiny_cascade_auto.jsonl"])
def test_chip_counts_per_status_equal_the_events(name):
    events = load(name)
    counts, shown = kinds(events), chip_statuses(chips.run_text(steps.build(events)).html)
    finished = [e for e in events if e["kind"] == "step_finished"]
    assert shown["accepted"] == counts["token_accepted"]
    assert shown["rejected"] == counts["token_rejected"]
    assert shown["residual"] == counts["residual_sampled"]
    assert shown["wasted"] == sum(e["drafted"] - e["evaluated"] for e in finished)
    undrafted = {e["step"] for e in finished if e["drafted"] == 0}
    bonus_steps = [e["step"] for e in events if e["kind"] == "bonus_sampled"]
    assert shown["bonus"] == sum(step not in undrafted for step in bonus_steps)
    assert shown["target"] == sum(step in undrafted for step in bonus_steps)
    assert shown["draft"] == 0
    if events[0]["method"] == "ar":
        assert shown["target"] == counts["bonus_sampled"] > 0


def test_committed_chips_spell_the_output(sampled):
    html_text = chips.run_text(steps.build(sampled)).html
    assert "".join(chip_texts(html_text, steps.COMMITTED)) == sampled[-1]["text"]


def test_replay_shows_steps_up_to_the_selected_one(sampled):
    run = steps.build(sampled)
    html_text = chips.run_text(run, upto=1, selected=1).html
    assert html_text.count('class="sv-step') == 2 and html_text.count("sv-step sv-cur") == 1
    emitted = sum(len(s.emitted) for s in run.steps[:2])
    assert len(chip_texts(html_text, steps.COMMITTED)) == emitted


def test_whitespace_is_visible_and_real_text_kept():
    token = steps.TokenView(0, 0, 5, 7, " \n", "accepted", p=0.5, q=0.25, ratio=2.0, accept_prob=1.0, u=0.3)
    out = chips.chip(token)
    assert ">·↵<" in out and 'data-text=" \n"' in out


def test_tooltip_carries_p_q_ratio_u_and_the_decision(sampled):
    run = steps.build(sampled)
    rejected = next(t for t in run.tokens() if t.status == "rejected")
    tip = chips.tooltip(rejected)
    for part in (f"p = {rejected.p:.3f}", f"q = {rejected.q:.3f}", f"p/q = {rejected.ratio:.3f}",
                 f"u = {rejected.u:.3f} ≥ min(1, p/q) = {rejected.accept_prob:.3f}"):
        assert part in tip
    assert "greedy" in chips.tooltip(next(t for t in steps.build(load("tiny_spec_greedy.jsonl")).tokens()
                                          if t.status == "accepted"), greedy=True)


def test_legend_names_every_status():
    out = chips.legend().html
    assert set(re.findall(r'data-legend="(\w+)"', out)) == set(steps.STATUSES)


def hostile_events() -> list:
    """A spec run by hand whose token texts are markup: a draft rejected, a residual, a bonus."""
    common = dict(rule="rejection")
    return [
        {"kind": "run_started", "pair": "fake", "method": "spec", "k": 2, "temperature": 1.0, "top_k": 0,
         "top_p": 1.0, "max_new_tokens": 4, "seed": 0, "chat": False, "prompt": SCRIPT, "prompt_ids": [1],
         "prompt_texts": [SCRIPT], "device": "cpu", "dtype": "float32", "rule": "rejection", "lossless": True,
         "eos_token_ids": [0], "drafter": "fake", "options": {}, "schema_version": 1},
        {"kind": "draft_proposed", "step": 0, "index": 0, "position": 1, "token_id": 5, "token_text": EVIL, "q": 0.6,
         "topk": {"ids": [5, 6], "texts": [EVIL, '" onmouseover="x'], "probs": [0.6, 0.3]}, "source": None},
        {"kind": "draft_proposed", "step": 0, "index": 1, "position": 2, "token_id": 6, "token_text": SCRIPT,
         "q": 0.5, "topk": None, "source": None},
        {"kind": "target_scored", "step": 0, "positions": [1, 2, 3], "p_draft": [0.2, 0.1],
         "topk": [{"ids": [7, 5], "texts": [SCRIPT, EVIL], "probs": [0.7, 0.2]}, None, None], "tokens_in": 3},
        {"kind": "token_rejected", "step": 0, "index": 0, "position": 1, "token_id": 5, "token_text": EVIL,
         "p": 0.2, "q": 0.6, "ratio": 1 / 3, "accept_prob": 1 / 3, "u": 0.9, **common},
        {"kind": "residual_sampled", "step": 0, "index": 0, "position": 1, "token_id": 7, "token_text": SCRIPT,
         "p": 0.7, "q": 0.0, "residual_prob": 0.9, "residual_mass": 0.6,
         "topk": {"ids": [7], "texts": [SCRIPT], "probs": [0.9]}},
        {"kind": "step_finished", "step": 0, "k": 2, "drafted": 2, "accepted": 0, "evaluated": 1, "emitted_ids": [7],
         "emitted_texts": [SCRIPT], "beta": [0.4, 0.5], "draft_time": 0.01, "verify_time": 0.02,
         "draft_forwards": 2, "target_forwards": 1, "elapsed": 0.05, "finish_reason": None, "info": None},
        {"kind": "bonus_sampled", "step": 1, "index": 0, "position": 2, "token_id": 5, "token_text": EVIL, "p": 0.3},
        {"kind": "step_finished", "step": 1, "k": 0, "drafted": 0, "accepted": 0, "evaluated": 0, "emitted_ids": [5],
         "emitted_texts": [EVIL], "beta": [], "draft_time": 0.0, "verify_time": 0.02, "draft_forwards": 0,
         "target_forwards": 1, "elapsed": 0.08, "finish_reason": "length", "info": None},
    ]


def assert_inert(markup: str) -> None:
    assert "<img" not in markup and "<script" not in markup and 'onmouseover="' not in markup


def test_markup_in_token_text_is_escaped_everywhere():
    events = hostile_events()
    run = steps.build(events)
    rendered = [chips.run_text(run).html, panel.step_panel(run, 0).html, panel.step_panel(run, 1).html,
                lane_html(events, 0.1, "Speculative").html, chips.legend().html,
                tree.tree_html([{"id": 0, "parent": None, "depth": 0, "token": EVIL, "q": 0.5}]).html]
    for markup in rendered:
        assert_inert(markup)
    assert html.escape(EVIL, quote=False) in rendered[0] and html.escape(SCRIPT, quote=False) in rendered[0]
    assert EVIL in chip_texts(rendered[0], {"rejected", "bonus"})


def test_markup_in_token_text_is_escaped_in_figures():
    run = steps.build(hostile_events())
    fig = inspector.inspector_figure(run, 0, 0)
    labels = [str(x) for trace_ in fig.data for x in (trace_.x or ())]
    assert labels and all("<" not in label for label in labels)
    assert "&lt;img" in " ".join(labels) and "<img" not in fig.layout.title.text


# -- inspector ----------------------------------------------------------------------------------

def test_inspector_draws_recorded_p_and_q_overlap_and_residual(sampled):
    run = steps.build(sampled)
    step = next(s for s in run.steps if s.rejected is not None and s.residual_topk)
    index = inspector.default_index(step)
    assert index == step.rejected.index
    fig = inspector.inspector_figure(run, step.step, None)
    by_name = {t.name: t for t in fig.data}
    assert set(by_name) == {"p (target)", "q (draft)", "min(p, q): overlap", "residual"}
    assert set(step.p_topk[index]["probs"]) <= set(by_name["p (target)"].y)
    for pv, qv, mv in zip(by_name["p (target)"].y, by_name["q (draft)"].y, by_name["min(p, q): overlap"].y):
        if pv is not None and qv is not None:
            assert mv == pytest.approx(min(pv, qv))
    assert list(by_name["residual"].y) == step.residual_topk["probs"]
    outlined = [w for w in by_name["residual"].marker.line.width if w]
    assert len(outlined) == 1
    assert "recorded top-" in fig.layout.title.text
    assert f"{step.rejected.beta:.3f}" in fig.layout.annotations[0].text
    assert "rejected" in fig.layout.title.text


def test_inspector_on_a_bonus_position_shows_p_only(ar):
    run = steps.build(ar)
    fig = inspector.inspector_figure(run, 0)
    assert [t.name for t in fig.data] == ["p (target)"]


# -- run charts ---------------------------------------------------------------------------------

def test_speedup_chart_has_theory_curves_at_measured_c_and_a_measured_point(sampled, ar):
    ar_record = charts.summarize(ar, 1.0, label="ar")
    spec_record = charts.summarize(sampled, 0.5, label="spec", baseline=ar_record)
    assert spec_record["speedup"] == pytest.approx(spec_record["tokens_per_s"] / ar_record["tokens_per_s"])
    started = sampled[0]
    assert (spec_record["device"], spec_record["dtype"]) == (started["device"], started["dtype"])
    fig = charts.speedup_figure([ar_record, spec_record])
    curves = {t.name: t for t in fig.data if t.name.startswith("theory k")}
    assert set(curves) >= {"theory k = 1", "theory k = 2", "theory k = 4", "theory k = 8"}
    c = sampled[-1]["metrics"]["c"]
    assert curves["theory k = 4"].y[50] == pytest.approx(theory.speedup(0.5, 4, c))
    measured = next(t for t in fig.data if t.name == "measured (race)")
    assert list(measured.x) == [spec_record["alpha"]] and list(measured.y) == [spec_record["speedup"]]


def test_speedup_chart_without_runs_says_what_to_do():
    fig = charts.speedup_figure([])
    assert not fig.data and "Run" in fig.layout.annotations[0].text


def test_tau_histogram_counts_every_step(sampled):
    fig = charts.tau_histogram(sampled)
    bars = fig.data[0]
    finished = [e for e in sampled if e["kind"] == "step_finished"]
    assert sum(bars.y) == len(finished)
    assert sum(x * y for x, y in zip(bars.x, bars.y)) == sampled[-1]["metrics"]["new_tokens"]


def test_position_bars_equal_the_engine_metrics(sampled):
    fig = charts.position_figure(sampled)
    assert list(fig.data[0].y) == pytest.approx(sampled[-1]["metrics"]["position_acceptance"])


def test_alpha_explainer_uses_the_runs_numbers(sampled):
    m = sampled[-1]["metrics"]
    text = charts.alpha_explainer(sampled)
    assert f"{m['accepted']}/{m['evaluated']}" in text and f"{m['accepted']}/{m['drafted']}" in text
    assert f"{theory.accepted_per_drafted(m['alpha_empirical'], m['k']):.2f}" in text


def test_run_metrics_of_a_partial_run_match_the_engine_fold(sampled):
    partial = [e for e in sampled if e["kind"] != "run_finished"]
    assert steps.run_metrics(partial)["tau"] == metrics.fold(partial).tau


def test_stats_and_step_panel_tell_the_step(sampled, greedy):
    run = steps.build(sampled)
    step = next(s for s in run.steps if s.rejected is not None)
    words = panel.step_panel(run, step.step).html
    assert f"Step {step.step + 1} of {len(run.steps)}" in words and "resampled" in words
    assert f"as draft {step.rejected.index + 1} because u = " in words  # drafts counted from 1
    # greedy: the replacement is the target's top token, not a draw from a residual
    run = steps.build(greedy)
    step = next(s for s in run.steps if s.rejected is not None)
    words = panel.step_panel(run, step.step).html
    assert f"the target's top token {quoted(step.next.text)} takes its place" in words
    assert "resampled" not in words and "because it is not the target's top token" in words
    stats = panel.stats(run, sampled[-1]["metrics"], compute_s=2.0).html
    assert 'data-finished="1"' in stats and f"{sampled[-1]['metrics']['new_tokens'] / 2.0:.1f}" in stats


# -- the race -----------------------------------------------------------------------------------

class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def fake_run(clock, step_cost: float, steps_: int, tokens_per_step: int):
    """Event dicts of a run whose every step costs `step_cost` seconds on the shared fake clock."""
    yield {"kind": "run_started", "method": "x", "k": 0}
    for i in range(steps_):
        clock.now += step_cost
        yield {"kind": "step_finished", "step": i, "emitted_ids": [1] * tokens_per_step,
               "finish_reason": "length" if i == steps_ - 1 else None}
    yield {"kind": "run_finished"}


def test_race_advances_the_lane_that_is_behind_one_step_at_a_time():
    clock = FakeClock()
    slow = Lane("ar", fake_run(clock, 0.3, 6, 1), clock)
    fast = Lane("spec", fake_run(clock, 0.5, 2, 3), clock)
    order = []
    for lane, new in race(slow, fast):
        others = [x for x in (slow, fast) if x is not lane and not x.done]
        order.append(lane.name)
        assert sum(e["kind"] == "step_finished" for e in new) == 1
        if others:  # the lane that moved was not ahead of any unfinished lane before moving
            assert lane.busy - (0.3 if lane is slow else 0.5) <= others[0].busy + 1e-9
    assert order.count("ar") == 6 and order.count("spec") == 2
    assert slow.busy == pytest.approx(1.8) and fast.busy == pytest.approx(1.0)
    assert slow.done and fast.done and slow.events[-1]["kind"] == "run_finished"


def test_verdict_says_faster_or_slower_plainly():
    ar_rec = {"tokens_per_s": 10.0, "target_forwards": 64}
    win = verdict(ar_rec, {"tokens_per_s": 18.4, "target_forwards": 20, "alpha": 0.8, "tau": 3.2, "c": 0.4}, True)
    lose = verdict(ar_rec, {"tokens_per_s": 8.0, "target_forwards": 40, "alpha": 0.3, "tau": 1.4, "c": 0.4})
    assert "Speculative was 1.84× faster" in win.html and "sv-win" in win.html
    assert "Speculative was 1.25× slower" in lose.html and "sv-lose" in lose.html
    assert "lossless" in win.html and "by chance" in lose.html
    assert "Both on" not in win.html  # records without a device say nothing about it
    on_cpu = verdict(ar_rec, {"tokens_per_s": 18.4, "target_forwards": 20, "device": "cpu",
                              "dtype": "float32", "cpu_linear": "gemv"})
    assert "Both on cpu, float32, W @ x.T kernels." in on_cpu.html


def test_lane_shows_its_own_counters(sampled):
    out = lane_html(sampled, 2.0, "Speculative", done=True).html
    m = sampled[-1]["metrics"]
    assert f'data-tokens="{m["new_tokens"]}"' in out and f"<b>{m['target_forwards']}</b>" in out
    assert f"<b>{m['new_tokens'] / 2.0:.1f}</b>" in out and 'data-done="1"' in out


def test_rendered_objects_work_in_notebooks(sampled):
    out = chips.run_text(steps.build(sampled))
    assert out._repr_html_().startswith("<style>") and out.html in out._repr_html_()


def test_tree_html_draws_raw_nodes_with_their_decisions():
    nodes = [{"id": 0, "parent": -1, "depth": 1, "token_text": "a", "q": 0.6},
             {"id": 1, "parent": 0, "depth": 2, "token_text": EVIL, "q": 0.3},
             {"id": 2, "parent": None, "depth": 1, "token": "b", "q": 0.2}]
    step = steps.build([{"kind": "tree_built", "step": 0, "nodes": nodes},
                        {"kind": "token_accepted", "step": 0, "index": 0, "position": 3, "token_id": 1,
                         "token_text": "a", "p": 0.5, "q": 0.6, "ratio": 5 / 6, "accept_prob": 5 / 6, "u": 0.1,
                         "rule": "rejection", "node": 0}]).steps[0]
    out = tree.tree_html(tree.tree_nodes(step), step.node_status).html
    assert out.count('data-node="') == 3
    assert re.search(r'data-node="0" data-status="accepted" data-path="1"', out)
    assert 'data-node="2" data-status="draft"' in out
    assert_inert(out)
    assert "No draft tree in this step" in tree.tree_html([]).html


# -- tree methods -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tree_run():
    return load("tiny_tree_t1.jsonl")


def by_step(events, kind) -> dict:
    return {e["step"]: e for e in events if e["kind"] == kind}


def test_tree_golden_trace_has_sibling_rejections_residuals_and_bonus(tree_run):
    counts = kinds(tree_run)
    assert counts["tree_built"] and counts["residual_sampled"] and counts["bonus_sampled"] and not counts["draft_proposed"]
    decisions = [e for e in tree_run if e["kind"] in ("token_accepted", "token_rejected")]
    assert any(a["kind"] == "token_rejected" and b["step"] == a["step"] and b["index"] == a["index"]
               for a, b in zip(decisions, decisions[1:])), "no sibling judged after a rejection: regenerate"


def test_tree_view_draws_every_node_the_path_and_the_closing_token(tree_run):
    run = steps.build(tree_run)
    built, finished = by_step(tree_run, "tree_built"), by_step(tree_run, "step_finished")
    for step in run.steps:
        out = tree.tree_view(step, run.greedy, len(run.steps)).html
        nodes = built[step.step]["nodes"]
        assert out.count('data-node="') == len(nodes) == int(re.search(r'data-nodes="(\d+)"', out).group(1))
        on_path = [int(n) for n in re.findall(r'data-node="(\d+)" data-status="accepted" data-path="1"', out)]
        assert on_path == finished[step.step]["info"]["path"]
        assert len(re.findall(r'<path class="sv-edge"[^>]*data-path="1"', out)) == len(on_path)
        rejected = {e["node"] for e in tree_run if e["kind"] == "token_rejected" and e["step"] == step.step}
        assert {int(n) for n in re.findall(r'data-node="(\d+)" data-status="rejected"', out)} == rejected
        judged = finished[step.step]["evaluated"]
        assert len(re.findall(r'data-status="wasted"', out)) == len(nodes) - judged
        closing = next(e for e in tree_run if e["kind"] in ("residual_sampled", "bonus_sampled") and e["step"] == step.step)
        assert f'data-next="{closing["kind"].split("_")[0]}"' in out
        parent = "root" if closing["node"] == -1 else str(closing["node"])
        assert f'data-from="{parent}" data-to="next"' in out
        assert closing["node"] == (on_path[-1] if on_path else -1)


def ancestors_or_self(nodes: list, i: int) -> set:
    parent = {n["id"]: n["parent"] for n in nodes}
    out = {i}
    while parent[i] != -1:
        i = parent[i]
        out.add(i)
    return out


def test_mask_heatmap_cells_equal_the_ancestor_relation(tree_run):
    run = steps.build(tree_run)
    built = by_step(tree_run, "tree_built")
    for step in run.steps:
        nodes = built[step.step]["nodes"]
        heat = tree.mask_figure(step).data[0]
        assert len(heat.z) == len(nodes) == len(heat.x) == len(heat.y)
        for i, row in enumerate(heat.z):
            assert {j for j, cell in enumerate(row) if cell} == ancestors_or_self(nodes, nodes[i]["id"])
        assert all("<" not in str(label) for label in heat.x)
    assert "No tree attention mask" in tree.mask_figure(steps.build(load("tiny_ar.jsonl")).steps[0]).layout.annotations[0].text


def test_tree_steps_render_in_the_step_view(tree_run):
    run = steps.build(tree_run)
    counts, shown = kinds(tree_run), chip_statuses(chips.run_text(run).html)
    assert shown["accepted"] == counts["token_accepted"] and shown["rejected"] == counts["token_rejected"]
    assert shown["residual"] == counts["residual_sampled"] and shown["bonus"] == counts["bonus_sampled"]
    assert shown["wasted"] == 0 and shown["draft"] == 0  # never-judged nodes live in the tree view only
    assert "".join(chip_texts(chips.run_text(run).html, steps.COMMITTED)) == tree_run[-1]["text"]
    finished = by_step(tree_run, "step_finished")
    for step in run.steps:
        assert [t.node for t in step.drafted if t.status == "accepted"] == finished[step.step]["info"]["path"]
        assert [t.text for t in step.emitted] == finished[step.step]["emitted_texts"]
        words = panel.step_panel(run, step.step).html
        assert "draft builds a tree" in words and f"{len(step.nodes)} nodes" in words
        for index in step.indices():
            fig = inspector.inspector_figure(run, step.step, index)
            assert fig.data and "p (target)" in {t.name for t in fig.data}
    step, index = next((s, t.index) for s in run.steps for t in s.drafted if t.after_rejection)
    fig = inspector.inspector_figure(run, step.step, index)
    assert "siblings judged in draw order" in fig.layout.title.text and f"depth {index + 1}" in fig.layout.title.text
    judged = [t for t in step.at(index) if t.status in ("accepted", "rejected")]
    children = [n for n in step.nodes if n.parent == step.nodes[judged[0].node].parent]
    q_bars = next(t for t in fig.data if t.name == "q (draft)")
    assert sorted(q for q in q_bars.y if q is not None) == sorted(n.q for n in children)  # exact q of each child
    sibling = next(t for s in run.steps for t in s.drafted if t.after_rejection)
    tip = chips.tooltip(sibling)
    assert f"tree node {sibling.node}, depth {sibling.index + 1}" in tip and "earlier sibling's rejection" in tip


def test_a_tree_step_in_flight_shows_its_nodes_as_proposals(tree_run):
    first = next(i for i, e in enumerate(tree_run) if e["kind"] in ("token_accepted", "token_rejected"))
    run = steps.build(tree_run[:first])
    step = run.steps[0]
    out = tree.tree_view(step).html
    assert out.count('data-status="draft"') == len(step.nodes) > 0 and "data-next" not in out
    assert "draft builds a tree" in panel.step_panel(run, 0).html and tree.mask_figure(step).data
    assert chip_statuses(chips.run_text(run).html) == Counter()


def test_tree_run_charts_follow_the_engine_metrics(tree_run):
    m = tree_run[-1]["metrics"]
    fig = charts.position_figure(tree_run)
    assert list(fig.data[0].y) == pytest.approx(m["position_acceptance"]) and "depth" in fig.layout.title.text
    assert charts.summarize(tree_run, 1.0)["k"] is None  # theory's chain formula has no k for a tree
    assert len(charts.tau_histogram(tree_run).data) == 1  # no iid chain prediction for a tree
    assert "never judged" in charts.alpha_explainer(tree_run)


def test_markup_in_tree_tokens_is_escaped(tree_run):
    evil = []
    for event in tree_run:
        event = json.loads(json.dumps(event))
        if "token_text" in event:
            event["token_text"] = EVIL
        for node in event.get("nodes") or []:
            node["token_text"] = SCRIPT
        evil.append(event)
    run = steps.build(evil)
    for step in run.steps:
        assert_inert(tree.tree_view(step, run.greedy).html)
        assert_inert(panel.step_panel(run, step.step).html)
        heat = tree.mask_figure(step)
        assert all("<" not in str(v) for v in list(heat.data[0].x) + [c for row in heat.data[0].customdata for c in row])


# -- lossy runs, prompt lookup, auto k, cascade -------------------------------------------------

def test_a_lossy_run_says_so_everywhere():
    typical, lossless = load("tiny_typical_t1.jsonl"), load("tiny_spec_t1.jsonl")
    assert typical[0]["lossless"] is False and typical[-1]["metrics"]["lossless"] is False
    ar_record = charts.summarize(load("tiny_ar.jsonl"), 1.0, label="ar")

    def views(events) -> list:
        run = steps.build(events)
        record = charts.summarize(events, 0.5, label="race: spec", baseline=ar_record)
        return [panel.stats(run, events[-1]["metrics"]).html, chips.run_text(run).html,
                panel.step_panel(run, 0).html, lane_html(events, 0.5, "Speculative", done=True).html,
                verdict(ar_record, record).html, charts.speedup_figure([ar_record, record]).to_json(),
                charts.alpha_explainer(events)]

    for where, shown in zip(("stats", "chips", "panel", "lane", "verdict", "chart", "alpha"), views(typical)):
        assert "LOSSY" in shown, where
    for shown in views(lossless):
        assert "LOSSY" not in shown
    run = steps.build(typical)
    refused = next(t for t in run.tokens() if t.status == "rejected")
    assert "typical acceptance (LOSSY)" in chips.tooltip(refused) and "greedy" not in chips.tooltip(refused)
    measured = next(t for t in charts.speedup_figure([ar_record, charts.summarize(typical, 0.5, baseline=ar_record)]).data
                    if t.name == "measured (race)")
    assert "LOSSY" in measured.text[0] and "LOSSY" in measured.customdata[0]


def test_prompt_lookup_copies_name_the_span_they_came_from():
    events = load("tiny_pld.jsonl")
    run = steps.build(events)
    texts = events[0]["prompt_texts"] + [t for e in events if e["kind"] == "step_finished" for t in e["emitted_texts"]]
    drafts = [e for e in events if e["kind"] == "draft_proposed"]
    assert drafts
    for event in drafts:
        token = next(t for t in run.steps[event["step"]].drafted if t.index == event["index"])
        source = event["source"]
        tip = chips.tooltip(token)
        assert f"copied from position {source['copied_from']} ('{texts[source['copied_from']].replace(' ', '·')}')" in tip
        start, end = source["match"]
        assert f"{end - start}-gram '{''.join(texts[start:end]).replace(' ', '·')}'" in tip
        assert texts[source["copied_from"]] == event["token_text"]  # a copy is the token that followed the match
    step = run.steps[drafts[0]["step"]]
    assert f"copy of @{drafts[0]['source']['copied_from']}" in panel.step_panel(run, step.step).html


def test_auto_k_says_why_and_cascade_counts_its_ngram_guesses():
    events = load("tiny_cascade_auto.jsonl")
    run = steps.build(events)
    finished = by_step(events, "step_finished")
    for step in run.steps:
        info = finished[step.step]["info"]
        words = html.unescape(panel.step_panel(run, step.step).html)
        assert f"k = {info['k_chosen']} chosen by the {info['k_rule']} rule" in words and info["why"] in words
        c = info["counters"]
        assert f"n-gram guesses kept by the draft model {c['ngram_accepted']}/{c['ngram_proposed']}" in words
    m = events[-1]["metrics"]
    stats = panel.stats(run, m).html
    assert f"<b>{m['counters']['ngram_accepted']}/{m['counters']['ngram_proposed']}</b>" in stats
    assert "k auto (heuristic)" in stats
    record = charts.summarize(events, 1.0)
    assert record["k"] == pytest.approx(sum(m["k_chosen"]) / len(m["k_chosen"])) and record["k_setting"] == "auto"


# -- a busy machine: no speed verdict ----------------------------------------------------------

def test_a_busy_lane_replaces_the_verdict_with_the_note(greedy, ar, with_cpu_share):
    quiet_ar = charts.summarize(with_cpu_share(ar, 0.97), 1.0, label="ar")
    quiet = charts.summarize(with_cpu_share(greedy, 0.98), 0.5, baseline=quiet_ar)
    assert quiet_ar["timing_note"] is None and quiet["timing_note"] is None and not quiet["speedup_unreliable"]
    shown = verdict(quiet_ar, quiet, True).html
    assert re.search(r"Speculative was \d+\.\d\d× faster", shown) and 'data-busy="0"' in shown
    busy_ar = charts.summarize(with_cpu_share(ar, 0.45), 1.0, label="ar")
    assert "45%" in busy_ar["timing_note"] and busy_ar["cpu_share"] == pytest.approx(0.45)
    for ar_record, spec_record in ((busy_ar, quiet), (quiet_ar, charts.summarize(with_cpu_share(greedy, 0.3), 0.5))):
        out = verdict(ar_record, spec_record, True).html
        assert "faster" not in out and "slower" not in out and 'data-busy="1"' in out
        assert "No verdict: the timings are unreliable" in out and "close other programs" in out
        assert "Unreliable, for the record only" in out and "tokens/s" in out  # the numbers, greyed
        assert "Same text as autoregressive: yes" in out  # what does not depend on the clock stays


def test_a_busy_race_point_is_greyed_on_the_chart_and_in_its_lane(greedy, ar, with_cpu_share):
    busy_ar = charts.summarize(with_cpu_share(ar, 0.45), 1.0, label="ar")
    spec = charts.summarize(with_cpu_share(greedy, 0.98), 0.5, baseline=busy_ar)
    assert spec["timing_note"] is None and spec["speedup_unreliable"]  # a ratio is as good as both clocks
    measured = next(t for t in charts.speedup_figure([busy_ar, spec]).data if t.name == "measured (race)")
    assert "unreliable" in measured.text[0] and measured.marker.color[0] == "#cbd5e1"
    assert 'data-busy="1"' in lane_html(with_cpu_share(ar, 0.45), 1.0, "Autoregressive", done=True).html
    assert "unreliable" in lane_html(with_cpu_share(ar, 0.45), 1.0, "Autoregressive", done=True).html
    assert 'data-busy="0"' in lane_html(with_cpu_share(ar, 0.45), 1.0, "Autoregressive", done=False).html
    assert 'data-busy="0"' in lane_html(ar, 1.0, "Autoregressive", done=True).html  # old trace: not judged


def test_llamacpps_own_lanes_render_escaped_with_their_counts():
    from specviz.render.charts import engine_record
    from specviz.render.race import engine_lanes_html

    ar = engine_record("own <b>AR</b>", "llama-server ar", None, 32, 2.0)
    spec = engine_record("own spec", "llama-server spec", 4, 32, 1.6, drafted=40, accepted=30, drafts=10, baseline=ar)
    assert spec["alpha"] == 0.75 and spec["tau"] == 4.0 and spec["speedup"] == pytest.approx(1.25)
    html = engine_lanes_html([ar, spec], "note <i>").html
    assert "own &lt;b&gt;AR&lt;/b&gt;" in html and "<b>AR" not in html and "note &lt;i&gt;" in html
    assert html.count("<tr data-lane=") == 2 and "1.25×" in html and "16.0" in html and "20.0" in html
    assert engine_lanes_html([]).html == ""
