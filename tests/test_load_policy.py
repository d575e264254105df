"""The load policy (specviz.engine.load.LoadK) judged by what the theory says it must do, over
generated cost tables, acceptance rates and histories, not by the sweeps its constants were tuned
on (tests/test_batch.py pins those as regressions).

The theory (specviz.analysis.theory): a step of k drafts brings a row at most k + 1 tokens, and
E(alpha, k) = (1 - alpha^(k+1)) / (1 - alpha) on average; a plain step brings exactly one. So where
even alpha = 1 cannot finish the batch sooner than plain decoding, its draft's catch-up included,
nothing may be drafted; a pass that costs w one-token passes for w tokens a row (compute-bound)
leaves speculation nothing to gain; a flat pass (memory-bound) with high acceptance pays at every
batch size. Hypothesis draws the cases with a fixed profile (derandomized, no example database),
so every run checks the same cases, in seconds.

The last section checks the held-out simulator (specviz.bench.load_heldout) on hand-computed cases.
"""

import math
import random

import pytest
from hypothesis import assume, example, given, settings, strategies as st

from specviz.analysis.theory import expected_tokens
from specviz.bench import load_heldout as sim
from specviz.engine.load import LOAD_K_MAX, CostTable, LoadK

PROPERTY = settings(derandomize=True, database=None, deadline=None, max_examples=60, print_blob=False)
ROWS = 64  # the largest batch drawn here


def dense(seconds, rows: int = ROWS, widths=range(1, LOAD_K_MAX + 3)) -> CostTable:
    """A cost table measured at every row count (nothing interpolated between grid rows)."""
    table = CostTable(None)
    table.points = {(r, w): seconds(r, w) for r in range(1, rows + 1) for w in widths}
    return table


def draft_table(per_token: float) -> CostTable:
    """A draft whose pass costs per_token seconds per token fed (linear, through 0): its catch-up
    on b unseen tokens costs per_token (b - 1) per row, as its table's interpolation also says."""
    return dense(lambda r, w: per_token * r * w, widths=(1, 2, LoadK.CATCH_UP_WIDTH))


def roofline(knee: int, t: float = 0.1) -> CostTable:
    """A pass of n = rows x width tokens costs t max(1, n / knee): flat to the knee, then linear."""
    return dense(lambda r, w: t * max(1.0, r * w / knee))


@st.composite
def power_tables(draw):
    """A target's table T(n) = t (1 + (n / knee)^p) with n = rows x width, and a draft's."""
    knee, p = draw(st.floats(1.0, 256.0)), draw(st.floats(0.5, 1.5))
    return dense(lambda r, w: 0.1 * (1 + (r * w / knee) ** p)), draft_table(draw(st.floats(1e-4, 0.02)))


# a run's history: per step, the share of each row's drafts accepted (the engine's order: choose, then update)
HISTORIES = st.lists(st.floats(0.0, 1.0), max_size=6)
# what earlier steps taught the policy of the drafts its steps keep against its prediction (update
# keeps it within 1 / CLIP and CLIP; a batch whose rows accept more than the pooled alpha says gets above 1)
LEARNT = st.floats(1 / LoadK.CLIP, LoadK.CLIP)


def drive(policy: LoadK, rows: int, lefts: list, history: list) -> tuple:
    """Run `history` through choose and update as the batched engine does, every pass timed as
    its table says; returns (lefts, backlog) after it (rows keep their count: none finishes)."""
    backlog = 0.0
    for share in history:
        k = policy.choose(rows, backlog, rooms=[n - 1 for n in lefts])[0]
        k = min(k, min(lefts) - 1)
        j = round(share * k)
        verify = policy.target_cost(rows, k + 1)
        draft = 0.0
        if k:
            draft = policy.draft_cost(rows, 2) + (k - 1) * policy.draft_cost(rows, 1)
            draft += policy.draft_cost(rows, 1) * max(0.0, backlog - 1)  # its catch-up, at the table's cost
        policy.update(k, rows * j, rows * (j + (j < k)), rows, k + 1, verify, draft, rows * k, prefill=False,
                      emitted=rows * (j + 1))
        lefts = [max(2, n - j - 1) for n in lefts]
        backlog = (1.0 if j == k else 0.0) if k else backlog + 1
    return lefts, backlog


def best_case(target: CostTable, draft: CostTable, lefts: list, backlog: float, k_max: int = LOAD_K_MAX) -> tuple:
    """(seconds plain, fewest seconds drafting k >= 1 with every draft accepted), counted from the
    tables: a row with n to go needs n plain passes or ceil(n / (k + 1)) drafting ones, each pass
    costs the table's for the rows still live, and drafting pays the draft's catch-up once."""
    def passes(steps: list, seconds) -> float:
        return sum(seconds(sum(s > j for s in steps)) for j in range(max(steps)))

    plain = passes(lefts, lambda r: target(r, 1))
    catch_up = draft(len(lefts), 1) * max(0.0, backlog - 1)
    drafting = min(passes([math.ceil(n / (k + 1)) for n in lefts],
                          lambda r, k=k: target(r, k + 1) + draft(r, 2) + (k - 1) * draft(r, 1)) + catch_up
                   for k in range(1, k_max + 1))
    return plain, drafting


# ---------------------------------------------------------------------------------------------
# where nothing can pay, nothing is drafted

@PROPERTY
@given(tables=power_tables(), rows=st.integers(1, ROWS), lefts=st.lists(st.integers(2, 48), min_size=1),
       backlog=st.floats(0.0, 60.0), history=HISTORIES, learnt=LEARNT)
def test_no_draft_where_even_alpha_one_cannot_pay(tables, rows, lefts, backlog, history, learnt):
    target, draft = tables
    lefts = (lefts * rows)[:rows]
    policy = LoadK(target, draft)
    policy.token_scale.add(learnt)
    lefts, after = drive(policy, rows, lefts, history)
    backlog = backlog if not history else after + backlog
    plain, drafting = best_case(target, draft, lefts, backlog)
    k, why = policy.choose(rows, backlog, rooms=[n - 1 for n in lefts])
    if drafting >= plain:
        assert k == 0, (plain, drafting, why)


@PROPERTY
@given(rows=st.integers(1, ROWS), left=st.integers(2, 64), per_token=st.floats(1e-4, 0.01), over=st.floats(1.0, 3.0),
       alpha=st.one_of(st.none(), st.floats(0.5, 1.0)))
def test_no_draft_where_the_catch_up_costs_more_than_alpha_one_saves(rows, left, per_token, over, alpha):
    """A memory-bound pass, where drafting with every draft accepted would save seconds, but the
    draft model has so many tokens to catch up on that its catch-up costs more than that saving:
    neither a first probe (alpha unknown) nor a run that knows its alpha may draft."""
    target, draft = dense(lambda r, w: 0.1), draft_table(per_token)
    plain, drafting = best_case(target, draft, [left] * rows, backlog=0.0)
    assume(drafting < plain)
    backlog = 1 + over * (plain - drafting) / draft(rows, 1)  # its catch-up: over times the saving
    policy = LoadK(target, draft)
    if alpha is not None:
        policy.accepted, policy.evaluated = 100 * alpha, 100
    assert policy.choose(rows, backlog, rooms=[left - 1] * rows)[0] == 0


@PROPERTY
@given(knee=st.integers(1, ROWS), rows=st.integers(1, ROWS), left=st.integers(2, 96), backlog=st.floats(0.0, 60.0),
       per_token=st.floats(1e-5, 0.02), alpha=st.floats(0.0, 1.0), history=HISTORIES, learnt=LEARNT)
@example(knee=1, rows=4, left=64, backlog=0.0, per_token=1e-5, alpha=0.95, history=[], learnt=LoadK.CLIP)
def test_a_compute_bound_batch_switches_speculation_off_from_the_knee(knee, rows, left, backlog, per_token, alpha,
                                                                      history, learnt):
    """A pass costs t max(1, B w / knee): from B = knee rows on, w tokens a row cost w one-token
    passes, so k drafts cost at least k + 1 passes' worth and bring at most k + 1 tokens, and the
    catch-up and drafting come on top. With equal budgets (no ragged tail to shorten) the policy
    must decode plainly at every B >= knee, whatever it has seen."""
    rows = max(rows, knee)
    policy = LoadK(roofline(knee), draft_table(per_token))
    policy.accepted, policy.evaluated = 100 * alpha, 100  # alpha, from 100 judged drafts
    policy.token_scale.add(learnt)
    lefts, after = drive(policy, rows, [left] * rows, history)
    k, why = policy.choose(rows, after + backlog, rooms=[n - 1 for n in lefts])
    assert k == 0, why


@PROPERTY
@given(rows=st.integers(1, ROWS), alpha=st.floats(0.85, 0.99), c=st.floats(0.0, 0.05), left=st.integers(16, 128))
def test_a_memory_bound_batch_with_high_acceptance_speculates_at_every_size(rows, alpha, c, left):
    """Every pass costs t whatever its shape and the draft c t <= t / 20 a forward: at alpha >= 0.85
    a step of k = 2 brings E >= 2.5 tokens for at most 1.1 t, at every batch size."""
    policy = LoadK(dense(lambda r, w: 0.1), dense(lambda r, w: 0.1 * c, widths=(1, 2, 8)))
    policy.accepted, policy.evaluated = 1000 * alpha, 1000
    k, why = policy.choose(rows, 1.0, rooms=[left - 1] * rows)
    assert k >= 1, why


@PROPERTY
@given(alpha=st.floats(0.0, 0.3), c=st.floats(0.35, 1.0), rows=st.integers(1, ROWS), left=st.integers(2, 128))
def test_no_draft_where_the_formula_says_each_step_loses(alpha, c, rows, left):
    """A flat pass (memory-bound) and a draft forward of c passes: the formula's speedup
    E(alpha, k) / (1 + c k) is under 1 for every k when alpha is low and c high; with that alpha
    known from 1000 judged drafts (and no probe due) the policy decodes plainly."""
    assert all(expected_tokens(alpha, k) < 1 + c * k for k in range(1, LOAD_K_MAX + 1))
    policy = LoadK(dense(lambda r, w: 0.1), dense(lambda r, w: 0.1 * c, widths=(1, 2, 8)))
    policy.accepted, policy.evaluated = 1000 * alpha, 1000
    assert policy.choose(rows, 0.0, rooms=[left - 1] * rows)[0] == 0


# ---------------------------------------------------------------------------------------------
# bounds, the switch-off, monotonicity, determinism

@PROPERTY
@given(tables=power_tables(), k_max=st.integers(1, LOAD_K_MAX), rows=st.integers(1, ROWS),
       left=st.integers(2, 96), history=HISTORIES)
def test_k_stays_within_its_bound(tables, k_max, rows, left, history):
    policy = LoadK(*tables, k_max=k_max)
    lefts, backlog = drive(policy, rows, [left] * rows, history)
    k, why = policy.choose(rows, backlog, rooms=[n - 1 for n in lefts])
    assert 0 <= k <= k_max and len(why["predicted"]) == k_max + 1


@PROPERTY
@given(tables=power_tables(), off=st.integers(2, ROWS), rows=st.integers(1, ROWS), history=HISTORIES)
def test_the_switch_off_batch_size_is_exact(tables, off, rows, history):
    """At or above spec_off_batch live rows every step is plain; below it the choice is the one
    the policy makes without a switch-off."""
    with_off, without = LoadK(*tables, off_batch=off), LoadK(*tables)
    small = min(rows, off - 1)
    assert drive(with_off, small, [40] * small, history) == drive(without, small, [40] * small, history)
    assert with_off.choose(small, rooms=[20] * small) == without.choose(small, rooms=[20] * small)
    big = max(rows, off)
    assert LoadK(*tables, off_batch=off).choose(big, rooms=[20] * big)[0] == 0


@settings(PROPERTY, max_examples=300)
@given(tables=power_tables(), k=st.integers(1, LOAD_K_MAX), rows=st.integers(1, ROWS), left=st.integers(2, 96),
       alpha=st.floats(0.95, 0.9999))
def test_no_plan_beats_every_draft_accepted(tables, k, rows, left, alpha):
    """A row's step brings at most k + 1 tokens, so no row can finish in fewer than n / (k + 1)
    steps, and no alpha can plan the batch faster than alpha = 1 does. (Near alpha = 1 the spread
    of a row's steps is small but not nothing: the case where a plan could dip under the bound.)"""
    policy = LoadK(*tables)
    best = policy.plan(k, [left] * rows, alpha=1.0, backlog=0)
    assert policy.plan(k, [left] * rows, alpha=alpha, backlog=0) >= best * (1 - 1e-12)
    assert min(policy.finish_steps(k, [left] * rows, alpha=alpha)) >= left / (k + 1) - 1e-9


@PROPERTY
@given(tables=power_tables(), k=st.integers(1, LOAD_K_MAX), rows=st.integers(1, ROWS),
       lefts=st.lists(st.integers(1, 96), min_size=1), a=st.floats(0.0, 1.0), b=st.floats(0.0, 1.0))
def test_the_plan_is_no_slower_at_a_higher_acceptance(tables, k, rows, lefts, a, b):
    """More drafts accepted can only bring each row more tokens a step: the planned time of the
    batch must not grow with alpha."""
    policy = LoadK(*tables)
    lefts = (lefts * rows)[:rows]
    low, high = sorted((a, b))
    assert policy.plan(k, lefts, alpha=high, backlog=0) <= policy.plan(k, lefts, alpha=low, backlog=0) * (1 + 1e-12)


@PROPERTY
@given(alpha=st.floats(0.0, 1.0), evidence=st.floats(0.0, 50.0), rows=st.integers(1, ROWS),
       history=st.lists(st.floats(0.5, 1.0), min_size=1, max_size=8))
def test_no_step_is_predicted_above_k_plus_one_tokens_a_row(alpha, evidence, rows, history):
    """Whatever a run has taught the policy about how many drafts its steps keep, a step of k
    drafts is predicted at most k + 1 tokens a row (the bound the formula's E(1, k) reaches)."""
    policy = LoadK(dense(lambda r, w: 0.1), draft_table(1e-4))  # memory-bound: it drafts, and learns
    policy.accepted, policy.evaluated = alpha * evidence, evidence
    drive(policy, rows, [96] * rows, history)
    for k in range(1, LOAD_K_MAX + 1):
        assert policy.step_tokens(k)[0] <= k + 1 + 1e-9, (k, policy.token_scale.value, policy.alpha)
        assert policy.predict(rows, k)["tokens"] <= rows * (k + 1) * (1 + 1e-9)


@PROPERTY
@given(tables=power_tables(), alpha=st.floats(0.0, 1.0), scale=st.floats(1.0, 10.0), rows=st.integers(1, ROWS),
       left=st.integers(2, 96), backlog=st.floats(0.0, 40.0))
def test_a_dearer_draft_never_turns_speculation_on(tables, alpha, scale, rows, left, backlog):
    target, draft = tables
    dear = CostTable(None)
    dear.points = {shape: scale * s for shape, s in draft.points.items()}
    ks = []
    for table in (draft, dear):
        policy = LoadK(target, table)
        policy.accepted, policy.evaluated = 50 * alpha, 50
        ks.append(policy.choose(rows, backlog, rooms=[left - 1] * rows)[0])
    assert ks[0] > 0 or ks[1] == 0, ks


@PROPERTY
@given(tables=power_tables(), rows=st.integers(1, ROWS), history=st.lists(st.floats(0.0, 1.0), max_size=12))
def test_the_same_history_gives_the_same_choices(tables, rows, history):
    first, second = LoadK(*tables), LoadK(*tables)
    assert drive(first, rows, [64] * rows, history) == drive(second, rows, [64] * rows, history)
    assert first.choose(rows, 3.0, rooms=[30] * rows) == second.choose(rows, 3.0, rooms=[30] * rows)


# ---------------------------------------------------------------------------------------------
# the held-out simulator, on cases counted by hand

def _flat(target: float, draft: float) -> sim.Costs:
    return sim.Costs(lambda r, w: target, lambda r, w: draft)


@pytest.mark.parametrize("alpha, lane, seconds", [
    (1.0, 0, 4.0),  # 4 plain passes of 1 s
    (1.0, 3, 1.3),  # one pass brings all 4 tokens; 3 draft forwards of 0.1 s
    (1.0, 1, 2.2),  # two passes of 2 tokens, each with one draft forward
    (0.0, 3, 4.6),  # every draft rejected: drafts of 3, 2, 1 and 0 as the budget shrinks
])
def test_the_simulator_counts_passes_and_drafts(alpha, lane, seconds):
    setting = sim.Setting("flat", rows=1, tokens=4, prompt=2, alphas=[alpha])
    run = sim.simulate(setting, _flat(1.0, 0.1), lane, seed=0)
    assert run["tokens"] == 4 and run["seconds"] == pytest.approx(seconds)


def test_the_simulator_charges_the_drafts_catch_up_and_the_prompt():
    # a pass costs its width in seconds, a draft forward a tenth of its width: the first pass
    # feeds the prompt (5 tokens) and k + 1, the draft's first forward the prompt (its backlog
    # of 4, and the last token)
    costs = sim.Costs(lambda r, w: float(w), lambda r, w: 0.1 * w)
    setting = sim.Setting("linear", rows=1, tokens=3, prompt=5, alphas=[1.0])
    assert sim.simulate(setting, costs, 2, seed=0)["seconds"] == pytest.approx((5 + 3) + 0.5 + 0.1)
    assert sim.simulate(setting, costs, 0, seed=0)["seconds"] == pytest.approx(6 + 1 + 1)


def test_the_simulator_drives_the_policy_the_engine_builds():
    setting = sim.Setting("flat", rows=4, tokens=16, prompt=8, alphas=[0.9] * 4)
    policy = sim.make_load(_flat(0.1, 0.001), 4)
    assert type(policy) is LoadK and policy.k_max == LOAD_K_MAX
    assert set(policy.target_cost.points) == {(r, w) for r in (1, 2, 4) for w in range(1, LOAD_K_MAX + 2)}
    run = sim.simulate(setting, _flat(0.1, 0.001), "load", seed=0)
    assert run == sim.simulate(setting, _flat(0.1, 0.001), "load", seed=0)  # seeded: the same run
    assert run["tokens"] == 64 and max(run["ks"]) > 0  # memory-bound, alpha 0.9: it drafts


def test_the_summary_counts_losses_and_bounds_the_mean():
    results = [{"vs_best": x, "vs_ar": y, "best_k": k} for x, y, k in [(1.0, 1.0, 0), (0.9, 0.98, 0), (0.8, 1.5, 3)]]
    s = sim.summarise(results, seed=0, draws=200)
    assert s["vs_best"] == pytest.approx(0.9) and s["vs_ar"] == pytest.approx(3.48 / 3)
    assert s["loses_to_ar"] == pytest.approx(1 / 3) and s["best_k"]["0"] == 2 and s["best_k"]["3"] == 1
    assert 0.8 <= s["vs_best_ci95"][0] <= 0.9 <= s["vs_best_ci95"][1] <= 1.0
    assert sim.interval([2.0] * 5, seed=1, draws=50) == [2.0, 2.0]


def test_power_curve_is_one_at_one_token_and_flat_below_a_deep_knee():
    curve = sim.power_curve(knee=1000.0, p=1.0)
    assert curve(1) == pytest.approx(1.0) and curve(8) < 1.01 and curve(2000) == pytest.approx(3 / 1.001)
    rng = random.Random(0)
    s = sim.draw_setting(rng, "power")
    assert 1 <= s.rows <= 64 and len(s.alphas) == s.rows and all(0 < a < 1 for a in s.alphas)
