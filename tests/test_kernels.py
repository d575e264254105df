"""Sampling kernels and chain verifiers on hand-built distributions with exact expected results."""

import pytest
import torch

from specviz.config import Warp
from specviz.verifiers import sampling
from specviz.verifiers.exact import GreedyVerifier, RejectionVerifier


def test_warp_temperature_topk_topp_exact():
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    assert torch.allclose(sampling.warp(logits, Warp(1.0)), torch.tensor([0.5, 0.3, 0.15, 0.05]))
    assert torch.allclose(sampling.warp(logits, Warp(1.0, top_k=2)), torch.tensor([0.625, 0.375, 0, 0]))
    # top-p 0.8: 0.5 + 0.3 reaches 0.8, so the set is {0, 1}; 0.81 needs the third token too.
    assert torch.allclose(sampling.warp(logits, Warp(1.0, top_p=0.8)), torch.tensor([0.625, 0.375, 0, 0]))
    assert torch.allclose(sampling.warp(logits, Warp(1.0, top_p=0.81)),
                          torch.tensor([0.5, 0.3, 0.15, 0]) / 0.95)
    half = sampling.warp(logits, Warp(0.5))
    expected = torch.tensor([0.25, 0.09, 0.0225, 0.0025])
    assert torch.allclose(half, expected / expected.sum())
    # greedy keeps the plain softmax for display; decisions use its argmax
    assert torch.allclose(sampling.warp(logits, Warp(0.0)), torch.tensor([0.5, 0.3, 0.15, 0.05]))


def _top_p_by_full_sort(probs, top_p):
    """The rule as first written: sort the whole vocabulary, keep while the mass before is < top_p."""
    sorted_probs, order = torch.sort(probs, dim=-1, descending=True)
    drop_sorted = torch.cumsum(sorted_probs, dim=-1) - sorted_probs >= top_p
    kept = probs.masked_fill(torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted), 0.0)
    return kept / kept.sum(dim=-1, keepdim=True)


def test_top_p_from_the_head_is_the_full_sort_bit_for_bit():
    """A real vocabulary's nucleus is found among its most likely NUCLEUS_HEAD tokens, and the
    result is the full sort's exactly (the same samples from the same seeds): peaked and flat
    distributions, bf16-rounded logits (full of ties), at several temperatures and top-p, one row
    at a time and as the rows of one batch (a speculative step warps every verified position at
    once: each row keeps the tokens it keeps alone, whichever way its neighbours went; torch sums
    a row of a batch in another order than a row alone, so the normalised values may differ in
    the last bit, with the full sort as without it)."""
    g = torch.Generator().manual_seed(0)
    paths = {"head": 0, "full": 0}
    settings = ((0.8, 0.95), (1.0, 0.9), (0.5, 0.5), (1.3, 0.99))
    batches = {(vocab, s): [] for vocab in (151936, 32000, 4 * sampling.NUCLEUS_HEAD + 1) for s in settings}
    for trial in range(120):
        vocab = (151936, 32000, 4 * sampling.NUCLEUS_HEAD + 1)[trial % 3]
        logits = (torch.randn(vocab, generator=g) * (0.5, 3, 8, 16)[trial % 4]).to(torch.bfloat16).float()
        for temperature, top_p in settings:
            probs = torch.softmax(logits / temperature, -1)
            alone = sampling._top_p(probs, top_p)
            assert torch.equal(alone, _top_p_by_full_sort(probs, top_p)), (trial, top_p)
            paths["head" if bool(sampling._top_p_from_head(probs[None], top_p)[1][0]) else "full"] += 1
            batches[vocab, (temperature, top_p)].append((probs, alone))
    assert paths["head"] > 100 and paths["full"] > 100  # both ways were taken
    mixed = 0
    for (vocab, (temperature, top_p)), rows in batches.items():
        probs = torch.stack([row for row, _ in rows])
        together = sampling._top_p(probs, top_p)
        assert torch.equal(together, _top_p_by_full_sort(probs, top_p)), (vocab, top_p)
        for i, (_, alone) in enumerate(rows):
            assert torch.equal(together[i] > 0, alone > 0), (vocab, top_p, i)
            assert torch.allclose(together[i], alone, rtol=1e-6, atol=0), (vocab, top_p, i)
        found = sampling._top_p_from_head(probs, top_p)[1]
        mixed += bool(found.any()) and not bool(found.all())
    assert mixed >= 3  # batches whose rows went both ways
    # a tie across the cut: two tokens of 0.2 after one of 0.5, top-p 0.6 keeps one of them, and
    # which one is the sort's choice: the head declines and the full sort decides, alone and
    # beside a row the head decides
    logits = torch.full((4 * sampling.NUCLEUS_HEAD + 1,), -30.0)
    logits[[7, 3, 11]] = torch.log(torch.tensor([0.5, 0.2, 0.2]))
    probs = torch.softmax(logits, -1)
    assert not bool(sampling._top_p_from_head(probs[None], 0.6)[1][0])
    assert torch.equal(sampling._top_p(probs, 0.6), _top_p_by_full_sort(probs, 0.6))
    assert int((sampling._top_p(probs, 0.6) > 0).sum()) == 2
    peaked = torch.softmax(torch.randn(probs.shape[0], generator=g) * 16, -1)
    pair = torch.stack([peaked, probs])
    assert sampling._top_p_from_head(pair, 0.6)[1].tolist() == [True, False]
    assert torch.equal(sampling._top_p(pair, 0.6), _top_p_by_full_sort(pair, 0.6))


def test_residual_and_overlap_exact():
    p = torch.tensor([0.1, 0.6, 0.3, 0.0])
    q = torch.tensor([0.4, 0.2, 0.3, 0.1])
    res, mass = sampling.residual(p, q)
    assert mass == pytest.approx(0.4)
    assert torch.allclose(res, torch.tensor([0.0, 1.0, 0.0, 0.0]))
    assert float(sampling.overlap(p, q)) == pytest.approx(0.6)  # = 1 - residual mass
    assert sampling.accept_probability(0.3, 0.6) == pytest.approx(0.5)
    assert sampling.accept_probability(0.6, 0.3) == 1.0
    assert sampling.accept_probability(0.2, 0.0) == 0.0


def _forced_case():
    """Three drafts: x1=1 with p>=q (always accepted), x2=2 with p>=q, x3=0 with p=0 (always
    rejected). At the rejected position max(p - q, 0) has all its mass on token 3."""
    q = torch.tensor([[0.2, 0.5, 0.2, 0.1],
                      [0.1, 0.1, 0.7, 0.1],
                      [0.6, 0.2, 0.2, 0.0]])
    p = torch.tensor([[0.1, 0.6, 0.2, 0.1],
                      [0.0, 0.1, 0.8, 0.1],
                      [0.0, 0.2, 0.2, 0.6],
                      [0.25, 0.25, 0.25, 0.25]])
    return [1, 2, 0], q, p


def test_rejection_rule_forced_accept_accept_reject():
    tokens, q, p = _forced_case()
    gen = torch.Generator().manual_seed(7)
    verdict = RejectionVerifier().verify_chain(tokens, q, p, gen)
    assert [d.accepted for d in verdict.decisions] == [True, True, False]
    assert [d.accept_prob for d in verdict.decisions] == [1.0, 1.0, 0.0]
    assert [round(d.ratio, 6) for d in verdict.decisions] == [1.2, round(0.8 / 0.7, 6), 0.0]
    expected_u = torch.rand(3, generator=torch.Generator().manual_seed(7), dtype=torch.float64).tolist()
    assert [d.u for d in verdict.decisions] == pytest.approx(expected_u)
    assert verdict.accepted == 2
    assert (verdict.next_kind, verdict.next_token) == ("residual", 3)
    assert verdict.residual_mass == pytest.approx(0.6)
    assert verdict.next_p == pytest.approx(0.6) and verdict.next_q == 0.0
    assert verdict.beta == pytest.approx([0.9, 0.9, 0.4])


def test_rejection_rule_bonus_when_all_accepted():
    tokens, q, p = _forced_case()
    p = p.clone()
    p[2] = torch.tensor([0.7, 0.1, 0.2, 0.0])  # now x3 = 0 has p >= q: accepted
    p[3] = torch.tensor([0.0, 0.0, 1.0, 0.0])  # the bonus must be token 2
    verdict = RejectionVerifier().verify_chain(tokens, q, p, torch.Generator().manual_seed(0))
    assert verdict.accepted == 3 and (verdict.next_kind, verdict.next_token) == ("bonus", 2)
    no_bonus = RejectionVerifier().verify_chain(tokens, q, p, torch.Generator().manual_seed(0), allow_bonus=False)
    assert no_bonus.accepted == 3 and no_bonus.next_token is None


def test_rejection_rule_partial_ratio_uses_u():
    """One draft with p/q = 0.5: accepted exactly when the generator's u < 0.5."""
    q = torch.tensor([[0.0, 1.0]])
    p = torch.tensor([[0.5, 0.5], [1.0, 0.0]])
    for seed in range(20):
        u = float(torch.rand((), generator=torch.Generator().manual_seed(seed), dtype=torch.float64))
        verdict = RejectionVerifier().verify_chain([1], q, p, torch.Generator().manual_seed(seed))
        assert verdict.decisions[0].accepted == (u < 0.5)
        # rejection resamples from max(p - q, 0) = token 0; acceptance earns bonus token 0
        assert verdict.next_token == 0


def test_greedy_rule_exact():
    tokens, q, p = _forced_case()
    verdict = GreedyVerifier().verify_chain(tokens, q, p, torch.Generator())
    # argmax p = [1, 2, 3]: accept, accept, reject x3 = 0 and emit 3
    assert [d.accepted for d in verdict.decisions] == [True, True, False]
    assert [d.u for d in verdict.decisions] == [None, None, None]
    assert (verdict.next_kind, verdict.next_token, verdict.residual_mass) == ("residual", 3, 1.0)
    assert verdict.beta == [1.0, 1.0, 0.0]  # argmax q = [1, 2, 0]
