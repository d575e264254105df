"""specviz.analysis.drift: beta by teacher forcing on a 2 x 2 of texts and temperatures, on toy
bigram models whose every beta is a fraction worked out by hand."""

import math
from fractions import Fraction as F

import pytest
import torch

from specviz.analysis import drift
from specviz.config import Warp
from specviz.teaching.toy import TableLM
from specviz.verifiers import sampling

# After token 0 the two models agree on the head and disagree in the tails; after token 1 the
# draft's favourite is the target's least likely token. Logits are log-probabilities at T = 1,
# so at T = 0.5 each distribution is proportional to the square of its T = 1 weights.
TARGET = TableLM(torch.log(torch.tensor([[16.0, 4.0, 1.0], [4.0, 1.0, 16.0], [1.0, 1.0, 1.0]])), order=2)
DRAFT = TableLM(torch.log(torch.tensor([[16.0, 1.0, 4.0], [16.0, 1.0, 4.0], [1.0, 1.0, 1.0]])), order=2)
TEXTS = {"cool": [0, 0, 0], "hot": [0, 1, 1]}  # the hot text's second position follows token 1

# beta after token 0: T = 1: (16 + 1 + 1) / 21 = 78/91; T = 0.5: (256 + 1 + 1) / 273 = 86/91.
# beta after token 1: T = 1: (4 + 1 + 4) / 21 = 39/91;   T = 0.5: (16 + 1 + 16) / 273 = 11/91.
EXPECTED = {("cool", 0.5): F(86, 91), ("cool", 1.0): F(78, 91),
            ("hot", 0.5): F(86 + 11, 182), ("hot", 1.0): F(78 + 39, 182)}


def teacher_forced(model, ids):
    """One row of logits per position after the first: what a forward over the text gives."""
    return torch.stack([model.logits_after(ids[:i]) for i in range(1, len(ids))])  # (positions, V)


def toy_logits():
    return {name: (teacher_forced(TARGET, ids), teacher_forced(DRAFT, ids)) for name, ids in TEXTS.items()}


def test_the_grid_is_the_mean_overlap_worked_out_by_hand():
    grid = drift.overlap_grid(toy_logits(), [0.5, 1.0])
    assert grid.keys() == EXPECTED.keys()
    for key, value in EXPECTED.items():
        assert math.isclose(grid[key], float(value), rel_tol=1e-6), (key, grid[key], value)


def test_the_split_of_the_toy_grid():
    """total 55/182 = tails (16/182 at the cool text, -20/182 at the hot one) + drift (39/182 at
    the hot temperature, 75/182 at the cool one), each path adding up; tails' share -2/55."""
    got = drift.split({k: float(v) for k, v in EXPECTED.items()}, "cool", "hot", cool=0.5, hot=1.0)
    expected = {"total": F(55, 182), "tails": (F(16, 182), F(-20, 182)), "drift": (F(39, 182), F(75, 182)),
                "tails_share": F(-2, 55)}
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        pairs = zip(got[key], value) if isinstance(value, tuple) else [(got[key], value)]
        for g, v in pairs:
            assert math.isclose(g, float(v), rel_tol=1e-9, abs_tol=1e-12), (key, got[key], value)


def test_no_total_fall_has_no_share():
    grid = {(t, T): 0.8 for t in ("a", "b") for T in (0.7, 1.5)}
    assert drift.split(grid, "a", "b", 0.7, 1.5) == {"total": 0.0, "tails": (0.0, 0.0), "drift": (0.0, 0.0),
                                                   "tails_share": None}


def test_beta_is_the_verifiers_own_overlap_of_the_warped_distributions():
    """The same beta as specviz.verifiers.sampling (warp, then overlap) on random logits."""
    gen = torch.Generator().manual_seed(0)
    target, draft = torch.randn(2, 7, 50, generator=gen) * 3  # (positions, V) each
    for t in (0.3, 0.7, 1.5, 4.0):
        p, q = sampling.warp(target, Warp(t)), sampling.warp(draft, Warp(t))
        assert math.isclose(drift.mean_overlap(target, draft, t), float(sampling.overlap(p, q).mean()), rel_tol=1e-6)


@pytest.mark.parametrize("target, draft, temperature, says", [
    (torch.zeros(3, 5), torch.zeros(3, 5), 0.0, "temperature must be positive"),
    (torch.zeros(3, 5), torch.zeros(3, 4), 1.0, "of one shape"),
    (torch.zeros(0, 5), torch.zeros(0, 5), 1.0, "of one shape"),
    (torch.zeros(5), torch.zeros(5), 1.0, "(positions, vocab)"),
])
def test_bad_input_is_one_clear_line(target, draft, temperature, says):
    with pytest.raises(ValueError) as caught:
        drift.mean_overlap(target, draft, temperature)
    assert says in str(caught.value) and "\n" not in str(caught.value)
