"""Typical acceptance is Medusa's rule with Medusa's parameters: a draft is kept when
p(x) > min(posterior_threshold, posterior_alpha * exp(-H(p))), the cap 0.09 and the entropy
factor 0.3 (medusa/model/utils.py, evaluate_posterior). Hand-built distributions where each side
of the min binds; swapping the two parameters (the rule specviz shipped before) fails both."""

import math

import pytest
import torch

from specviz.render.chips import TYPICAL_THRESHOLD
from specviz.verifiers.typical import POSTERIOR_ALPHA, POSTERIOR_THRESHOLD, TypicalVerifier, entropy

# peaked: H = 0.394 nats, so 0.3 * exp(-H) = 0.202 and the cap 0.09 binds
PEAKED = torch.tensor([0.9, 0.07, 0.03])
# flat over 10 tokens: H = ln 10, so 0.3 * exp(-H) = 0.03 binds, below the cap
FLAT = torch.full((10,), 0.1)


def _swapped() -> TypicalVerifier:
    """The planted bug: the two parameters' values exchanged (the cap 0.3 can then never bind)."""
    return TypicalVerifier(posterior_threshold=POSTERIOR_ALPHA, posterior_alpha=POSTERIOR_THRESHOLD)


def test_the_defaults_are_medusas():
    rule = TypicalVerifier()
    assert (rule.posterior_threshold, rule.posterior_alpha) == (0.09, 0.3)
    assert TYPICAL_THRESHOLD == f"min({POSTERIOR_THRESHOLD:g}, {POSTERIOR_ALPHA:g}·exp(−H(p)))"  # what views say


def test_entropy_in_nats_on_hand_built_distributions():
    assert entropy(torch.tensor([1.0, 0.0, 0.0])) == 0.0
    assert entropy(FLAT) == pytest.approx(math.log(10), abs=1e-6)
    assert entropy(PEAKED) == pytest.approx(-(0.9 * math.log(0.9) + 0.07 * math.log(0.07) + 0.03 * math.log(0.03)),
                                            abs=1e-6)


def test_low_entropy_the_cap_binds():
    assert 0.3 * math.exp(-entropy(PEAKED)) > 0.09  # the entropy term is above the cap here
    assert TypicalVerifier().threshold(PEAKED) == pytest.approx(0.09, abs=1e-9)
    assert _swapped().threshold(PEAKED) != pytest.approx(0.09, abs=1e-3)


def test_high_entropy_the_entropy_term_binds():
    assert TypicalVerifier().threshold(FLAT) == pytest.approx(0.3 * 0.1, abs=1e-6)
    assert _swapped().threshold(FLAT) != pytest.approx(0.03, abs=1e-3)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 8])
def test_uniform_over_n_tokens_the_bar_is_the_cap_up_to_three_then_the_term(n):
    """Uniform p over n tokens: H = ln n, so 0.3 * exp(-H) = 0.3 / n; the sides meet at
    H = ln(0.3 / 0.09), between n = 3 (the cap 0.09 binds) and n = 4 (0.3 / 4 = 0.075 binds)."""
    p = torch.full((n,), 1.0 / n)
    assert TypicalVerifier().threshold(p) == pytest.approx(min(0.09, 0.3 / n), abs=1e-6)
    assert _swapped().threshold(p) == pytest.approx(0.09 / n, abs=1e-6)  # the planted swap: never the cap


@pytest.mark.parametrize("rule, kept", [(TypicalVerifier(), 0), (_swapped(), 1)])
def test_a_draft_between_the_two_bars_is_refused_by_medusas_rule(rule, kept):
    """p(x) = 0.07 on the peaked p: below the cap 0.09, so Medusa's rule refuses it; the swapped
    rule's bar (0.09 * exp(-H) = 0.061) lets it through."""
    target = torch.stack([PEAKED, PEAKED])  # row 0 judges the draft, row 1 would give the bonus
    draft = torch.tensor([[0.1, 0.8, 0.1]])
    verdict = rule.verify_chain([1], draft, target, torch.Generator().manual_seed(0))
    (decision,) = verdict.decisions
    assert decision.p == pytest.approx(0.07) and decision.accepted is bool(kept) and verdict.accepted == kept
    assert decision.threshold == pytest.approx(rule.threshold(PEAKED))


def test_old_parameter_names_are_refused():
    with pytest.raises(TypeError):
        TypicalVerifier(epsilon=0.3, delta=0.09)
