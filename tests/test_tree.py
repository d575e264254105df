"""Draft trees: one data structure, exact masks, greedy-exact and distribution-exact verification."""

import pytest
import torch
from test_distribution import RUNS, _first_tokens, _p_value, _target_joint, toy  # noqa: F401

from specviz import generate
from specviz.analysis import metrics, trace
from specviz.config import Warp
from specviz.drafters.base import Drafter, Proposal
from specviz.verifiers.draft_tree import ROOT, DraftTree, attention
from specviz.verifiers.exact import RejectionVerifier

SHAPES = ["1,1,1,1", "3,2,1", "2,2,2,2", "4", "dynamic"]


def sample_tree() -> DraftTree:
    #        root
    #       /    \\
    #      0      1
    #     / \\     |
    #    2   3    4
    #    |
    #    5
    tree = DraftTree()
    for token, parent in [(10, ROOT), (11, ROOT), (12, 0), (13, 0), (14, 1), (15, 2)]:
        tree.add(token, parent, 0.5)
    return tree


def test_tree_structure_mask_positions_paths():
    tree = sample_tree()
    assert [tree.depth(i) for i in range(6)] == [1, 1, 2, 2, 2, 3]
    assert tree.children(ROOT) == [0, 1] and tree.children(0) == [2, 3]
    assert tree.paths() == [[0, 3], [1, 4], [0, 2, 5]]
    assert tree.position_ids(9) == [10, 10, 11, 11, 11, 12]
    mask = tree.mask()
    for i in range(6):  # each node sees exactly its ancestors and itself
        assert set(torch.nonzero(mask[i]).flatten().tolist()) == set(tree.ancestors(i))
    assert tree.cum_q == [0.5, 0.5, 0.25, 0.25, 0.25, 0.125]


def test_attention_rows_over_cache():
    tree = sample_tree()
    full, slots = attention(tree, linear_before=3, pending=1, slots={}, nodes=list(range(6)))
    assert full.shape == (7, 10) and slots == {i: 4 + i for i in range(6)}
    assert full[0].tolist() == [True] * 4 + [False] * 6  # the pending token: causal
    assert torch.nonzero(full[1 + 5]).flatten().tolist() == [0, 1, 2, 3, 4, 6, 9]  # node 5: 0, 2, 5
    # drafting level by level: nodes already cached keep their columns
    level, new = attention(tree, 4, 0, {0: 4, 1: 5}, [2, 3, 4])
    assert new == {2: 6, 3: 7, 4: 8}
    assert torch.nonzero(level[2]).flatten().tolist() == [0, 1, 2, 3, 5, 8]  # node 4 sees 1 and itself
    assert DraftTree.chain([1, 2, 3]).mask().equal(torch.tril(torch.ones(3, 3, dtype=torch.bool)))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("prompt", ["def fibonacci(n):", "Hello, world! ", "x"])
def test_greedy_tree_equals_ar(tiny, prompt, shape):
    expected = list(generate(tiny, prompt, method="ar", max_new_tokens=40))[-1].token_ids
    events = list(generate(tiny, prompt, method="tree", tree=shape, max_new_tokens=40))
    assert events[-1].token_ids == expected
    assert events[-1].metrics["tau"] > 1.0


def test_wider_trees_accept_more(tiny):
    tau = {shape: list(generate(tiny, "def fibonacci(n):", method="tree", tree=shape,
                                max_new_tokens=60))[-1].metrics["tau"] for shape in ("1,1,1", "3,3,3")}
    assert tau["3,3,3"] > tau["1,1,1"]


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_chain_tree_reproduces_chain_events(tiny, temperature):
    kw = dict(max_new_tokens=40, temperature=temperature, seed=4, record_topk=0)
    chain = list(generate(tiny, "def fibonacci(n):", method="spec", k=4, **kw))
    tree = list(generate(tiny, "def fibonacci(n):", method="tree", tree="1,1,1,1", **kw))
    assert tree[-1].token_ids == chain[-1].token_ids

    def decisions(events):
        kinds = ("token_accepted", "token_rejected", "residual_sampled", "bonus_sampled")
        return [(e.kind, e.step, e.position, e.token_id, getattr(e, "u", None), round(e.p, 4))
                for e in events if e.kind in kinds]

    assert decisions(tree) == decisions(chain)
    c, t = chain[-1].metrics, tree[-1].metrics
    for key in ("accepted", "evaluated", "drafted", "new_tokens", "target_forwards", "accepted_histogram",
                "position_acceptance"):
        assert t[key] == c[key], key


def test_tree_events_round_trip_and_fold(tiny, tmp_path):
    events = list(generate(tiny, "def fibonacci(n):", method="tree", tree="dynamic",
                           temperature=0.8, seed=2, max_new_tokens=30))
    built = [e for e in events if e.kind == "tree_built"]
    assert built and all(len(b.nodes) <= 16 for b in built)
    for b in built:
        ids = [n["id"] for n in b.nodes]
        assert all(n["parent"] < n["id"] for n in b.nodes) and ids == list(range(len(ids)))
    steps = [e for e in events if e.kind == "step_finished"]
    for s in steps:  # the accepted path is a root-to-node chain of the step's tree
        nodes = built[s.step].nodes
        parent = -1
        for node in s.info["path"]:
            assert nodes[node]["parent"] == parent
            parent = node
    trace.save(events, tmp_path / "t.jsonl")
    assert trace.load(tmp_path / "t.jsonl") == events
    assert metrics.fold(events[:-1]).to_dict() == events[-1].metrics


class ResampleFromTargetAfterSibling(RejectionVerifier):
    """Broken: after a sibling is rejected, keeps judging against p instead of the residual."""

    def residual(self, p, q):
        return p, 0.0


@pytest.mark.parametrize("shape", ["3,2", "2,2,1", "dynamic"])
def test_tree_sampling_distribution_exact(toy, shape):  # noqa: F811
    warp = Warp(1.0)
    counts, runs = _first_tokens(toy, warp, runs=RUNS // 2, method="tree", tree=shape)
    assert _p_value(counts, _target_joint(toy, warp), RUNS // 2) > 1e-4
    rejected = sum(e.kind == "token_rejected" for events in runs for e in events)
    assert rejected > RUNS // 10  # siblings really were judged and turned down


def test_broken_multi_draft_rule_fails(toy):  # noqa: F811
    warp = Warp(1.0)
    counts, _ = _first_tokens(toy, warp, runs=RUNS // 2, method="tree", tree="3,2",
                              verifier=ResampleFromTargetAfterSibling())
    assert _p_value(counts, _target_joint(toy, warp), RUNS // 2) < 1e-4


def test_reranking_sampled_trees_is_caught(toy):  # noqa: F811
    """EAGLE-2's re-rank-and-cut keeps a sampled candidate because its own q is high: that biases
    the candidates towards likely tokens, and the same distribution test rejects it."""
    from specviz.drafters.model_tree import TreeDrafter

    class Reranking(TreeDrafter):
        rerank_sampled = True

    warp = Warp(1.0)
    counts, _ = _first_tokens(toy, warp, runs=RUNS // 2, method="tree",
                              drafter=Reranking(toy.draft, (), dynamic=True, budget=6, depth=3, width=3))
    assert _p_value(counts, _target_joint(toy, warp), RUNS // 2) < 1e-4


class CertainCandidates(Drafter):
    """A drafter that proposes a fixed trie without sampling it (no q, as a lookup or a suffix
    tree does): tokens 0 and 1 for the next position, 2 after either."""

    name = "certain candidates"

    def propose(self, committed, k, warp, generator):
        tree = DraftTree()
        for token, parent in [(0, ROOT), (1, ROOT), (2, 0), (2, 1)]:
            tree.add(token, parent, 1.0)
        return Proposal(tree, {}, shape="certain")


def test_candidates_proposed_without_a_q_are_verified_exactly_under_sampling(toy):  # noqa: F811
    # each is a proposal certain of itself (q = one-hot): accepted with p_i(x), the rest of p then
    # renormalised; the first tokens follow the target's law, and zeroing nothing fails the test
    warp = Warp(1.0)
    counts, runs = _first_tokens(toy, warp, runs=RUNS // 2, method="tree", drafter=CertainCandidates())
    assert _p_value(counts, _target_joint(toy, warp), RUNS // 2) > 1e-4
    decisions = [e for events in runs for e in events if e.kind in ("token_accepted", "token_rejected")]
    assert {e.q for e in decisions} == {1.0} and any(e.kind == "token_rejected" for e in decisions)
    counts, _ = _first_tokens(toy, warp, runs=RUNS // 2, method="tree", drafter=CertainCandidates(),
                              verifier=ResampleFromTargetAfterSibling())
    assert _p_value(counts, _target_joint(toy, warp), RUNS // 2) < 1e-4
