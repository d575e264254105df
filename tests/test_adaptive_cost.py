"""k = "auto" with the cost rule prices a target pass by the number of tokens it verifies: where a
pass over k + 1 tokens costs several one-token passes (llama.cpp's 4-bit files on a laptop CPU),
a drafter that would pay under a flat verify cost must not draft; where passes are flat it must.
Driven with exact, scripted timings and acceptances (no clock, no model), so each choice is known."""

import pytest

from specviz.analysis import theory
from specviz.engine.adaptive import AdaptiveK

ONE = 0.047  # seconds of a one-token target pass


def drive(policy: AdaptiveK, steps: int, pass_cost, draft_cost: float, accepted_of) -> list:
    """Run the policy `steps` steps: the first one carries the prefill (not timed); a step that
    drafts k costs k draft forwards and one target pass over k + 1 tokens; the chosen k's."""
    chosen = []
    for step in range(steps):
        k, why = policy.choose()
        assert why.startswith("cost")
        chosen.append(k)
        accepted = accepted_of(k)
        policy.update(k, accepted, min(k, accepted + 1), draft_cost * ONE * k, k,
                      None if step == 0 else ONE * pass_cost(k + 1))
    return chosen


def steep(n: int) -> float:  # about the llama.cpp Q4_K_M curve measured on a 2-core AVX2 CPU: V(4) ~ 2.6
    return 1 + 0.55 * (n - 1)


def flat(n: int) -> float:  # a memory-bound pass: k + 1 tokens cost what one does
    return 1.0


def accept(rate_out_of_ten: int):
    """Deterministic acceptance at rate/10 a judged draft: the run's judged drafts are rejected at
    evenly spaced places; a step keeps its drafts up to the first rejection (those after it are
    never judged)."""
    judged = [0]

    def accepted(k: int) -> int:
        kept = 0
        while kept < k:
            j, judged[0] = judged[0], judged[0] + 1
            if (j + 1) * (10 - rate_out_of_ten) // 10 != j * (10 - rate_out_of_ten) // 10:
                break
            kept += 1
        return kept
    return accepted


def test_the_first_steps_draft_then_time_the_one_token_pass():
    chosen = drive(AdaptiveK("cost"), 3, steep, 0.5, accept(6))
    assert chosen == [4, 4, 0]  # prefill, the first timed drafting step, then one plain step to price V(1)
    assert AdaptiveK("heuristic").choose()[0] == 4  # the heuristic's own start is kept


def test_a_steep_verify_cost_stops_a_drafter_that_a_flat_one_would_keep():
    # alpha ~0.6 and c = 0.5, the 0.5B on llama.cpp: the flat-cost formula predicts a gain at k = 1..2,
    # the measured curve predicts none
    assert theory.optimal_k(0.6, 0.5 / steep(5), 12) > 0  # what the rule chose before it priced rows
    assert theory.optimal_k(0.6, 0.5, 12, verify_cost=steep) == 0
    chosen = drive(AdaptiveK("cost"), 40, steep, 0.5, accept(6))
    assert chosen[:3] == [4, 4, 0] and chosen[3:].count(0) == len(chosen) - 3  # plain from then on
    policy = AdaptiveK("cost")
    drive(policy, 12, steep, 0.5, accept(6))
    assert abs(policy.pass_seconds(4) / policy.pass_seconds(1) - steep(4)) < 1e-6  # the line is the curve


def test_where_no_acceptance_pays_the_rule_waits_long_before_it_probes():
    # c = 0.5 on the steep curve: even alpha = 1 gives k = 1 two tokens for 2.05 passes
    assert theory.optimal_k(0.999, 0.5, 12, verify_cost=steep) == 0
    policy = AdaptiveK("cost", probe_every=8)
    chosen = drive(policy, 3 + 2 * AdaptiveK.PROBE_WAIT_MAX + 2, steep, 0.5, accept(10))
    probes = [i for i, k in enumerate(chosen) if k and i >= 3]
    wait = AdaptiveK.PROBE_WAIT_MAX  # plain steps since the last draft (step 1), the timing step among them
    assert probes == [2 + wait, 3 + 2 * wait]  # probes only to re-time the costs
    assert "even if every draft were accepted" in policy.choose()[1]


def test_where_acceptance_could_pay_each_probe_that_loses_doubles_the_wait():
    # c = 0.1 on the steep curve pays at a high alpha, not at 0.3
    assert theory.optimal_k(0.999, 0.1, 12, verify_cost=steep) > 0
    assert theory.optimal_k(0.3, 0.1, 12, verify_cost=steep) == 0
    chosen = drive(AdaptiveK("cost", probe_every=4), 80, steep, 0.1, accept(3))
    probes = [i for i, k in enumerate(chosen) if k and i >= 3]
    waits = [b - a - 1 for a, b in zip([1] + probes, probes)]  # plain steps since the last draft
    assert waits[:5] == [4, 8, 16, 32, 64][:len(waits[:5])] and len(waits) >= 4


def test_a_flat_verify_cost_and_a_cheap_good_drafter_keep_drafting_long():
    chosen = drive(AdaptiveK("cost"), 30, flat, 0.05, accept(9))
    assert chosen[2] == 0 and min(chosen[3:]) >= 3  # one plain step to time V(1), then long drafts


def test_the_line_never_falls_with_rows_and_one_size_is_flat():
    policy = AdaptiveK("cost")
    policy.by_rows = {5: [0.1, 1.0]}
    assert policy.pass_seconds(1) == policy.pass_seconds(9) == 0.1
    policy.by_rows = {1: [0.05, 1.0], 5: [0.04, 1.0]}  # noise: five tokens timed faster than one
    assert policy.pass_seconds(1) == policy.pass_seconds(9) == 0.045


def test_plain_steps_keep_the_evidence_and_a_probes_catch_up_is_not_the_drafts_cost():
    policy = AdaptiveK("cost")
    policy.update(4, 4, 4, 1.0, 4, None)  # the prefill step: no costs
    policy.update(4, 2, 3, 0.2, 4, 0.1)  # a timed step: 0.05 s a draft forward
    evidence = (policy.accepted, policy.evaluated)
    for _ in range(10):
        policy.update(0, 0, 0, 0.0, 0, 0.05)  # plain steps judge nothing
    assert (policy.accepted, policy.evaluated) == evidence
    policy.update(1, 1, 1, 0.5, 1, 0.06)  # a probe: its one forward first read the ten plain steps' tokens
    assert policy.draft_s / policy.draft_n == 0.05  # its judgement counts, its time does not
    assert (policy.accepted, policy.evaluated) == pytest.approx((0.8 * evidence[0] + 1, 0.8 * evidence[1] + 1))
    policy.update(1, 1, 1, 0.04, 1, 0.06)  # a step right after a drafting one: its forward is the draft's cost
    assert policy.draft_s / policy.draft_n < 0.05
