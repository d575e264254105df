"""k = "auto" with the cost rule prices a target pass by the number of tokens it verifies: where a
pass over k + 1 tokens costs several one-token passes (llama.cpp's 4-bit files on a laptop CPU),
a drafter that would pay under a flat verify cost must not draft; where passes are flat it must.
Driven with exact, scripted timings and acceptances (no clock, no model), so each choice is known."""

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
    """Deterministic acceptance: a step keeps the first rate/10 of its drafts (rounded down)."""
    return lambda k: (k * rate_out_of_ten) // 10


def test_the_first_steps_draft_then_time_the_one_token_pass():
    chosen = drive(AdaptiveK("cost"), 3, steep, 0.5, accept(6))
    assert chosen == [4, 4, 0]  # prefill, the first timed drafting step, then one plain step to price V(1)


def test_a_steep_verify_cost_stops_a_drafter_that_a_flat_one_would_keep():
    # alpha ~0.6 and c = 0.5, the 0.5B on llama.cpp: the flat-cost formula predicts a gain at k = 1..2,
    # the measured curve predicts none
    assert theory.optimal_k(0.6, 0.5 / steep(5), 12) > 0  # what the rule chose before it priced rows
    assert theory.optimal_k(0.6, 0.5, 12, verify_cost=steep) == 0
    chosen = drive(AdaptiveK("cost", probe_every=8), 40, steep, 0.5, accept(6))
    plain = chosen[3:]
    assert plain.count(0) >= len(plain) - 5 and set(plain) <= {0, 1}  # plain steps, a k = 1 probe now and then
    policy = AdaptiveK("cost")
    drive(policy, 12, steep, 0.5, accept(6))
    assert abs(policy.pass_seconds(4) / policy.pass_seconds(1) - steep(4)) < 1e-6  # the line is the curve


def test_a_flat_verify_cost_and_a_cheap_good_drafter_keep_drafting_long():
    chosen = drive(AdaptiveK("cost"), 30, flat, 0.05, accept(9))
    assert chosen[2] == 0 and min(chosen[3:]) >= 3  # one plain step to time V(1), then long drafts


def test_the_line_never_falls_with_rows_and_one_size_is_flat():
    policy = AdaptiveK("cost")
    policy.by_rows = {5: [0.1, 1.0]}
    assert policy.pass_seconds(1) == policy.pass_seconds(9) == 0.1
    policy.by_rows = {1: [0.05, 1.0], 5: [0.04, 1.0]}  # noise: five tokens timed faster than one
    assert policy.pass_seconds(1) == policy.pass_seconds(9) == 0.045
