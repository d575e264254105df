"""Notebook 5's exercises: the tree attention mask.
"""

from __future__ import annotations

import random
from typing import Callable, Iterable, Optional

import torch

from specviz.teaching.exercises.checking import Case, Wrong, as_numbers, check_answer, replayed, run_cases
from specviz.verifiers.draft_tree import ROOT, DraftTree

# notebook 5: the tree attention mask

CAT_DOG_PARENTS = [-1, -1, 0, 0, 1]


def _tree(parents: list) -> DraftTree:
    tree = DraftTree()
    for i, parent in enumerate(parents):
        tree.add(i, parent, 1.0)
    return tree


def _static_parents(shape: list) -> list:
    parents, level = [], [ROOT]
    for width in shape:
        nxt = []
        for node in level:
            for _ in range(width):
                parents.append(node)
                nxt.append(len(parents) - 1)
        level = nxt
    return parents


def _mask_cases(events=None) -> list:
    fixed = [
        ("the cat/dog tree of section 1", CAT_DOG_PARENTS),
        ("a chain (every node the child of the one before)", [-1, 0, 1, 2, 3]),
        ("a root with four children", [-1, -1, -1, -1]),
        ("a single node", [-1]),
        ("an empty tree", []),
        ("the static tree 3,2,1", _static_parents([3, 2, 1])),
        ("a tree with a long branch beside a short one", [-1, -1, 0, 2, 3, 1]),
    ]
    cases = [Case(kind, (parents,)) for kind, parents in fixed]
    rng = random.Random(5)
    for _ in range(30):
        n = rng.randint(2, 16)
        cases.append(Case("random trees of 2 to 16 nodes", ([rng.randint(-1, i - 1) for i in range(n)],)))
    for e in events or []:
        e = e if isinstance(e, dict) else e.to_dict()
        if e["kind"] == "tree_built" and e["nodes"]:
            cases.append(Case(f"step {e['step'] + 1}'s tree in your run", ([n["parent"] for n in e["nodes"]],)))
    return cases


def _judge_mask(got, case: Case) -> None:
    parents = case.args[0]
    tree = _tree(parents)
    n = len(parents)
    want = tree.mask()
    try:
        got = torch.as_tensor(got)
    except Exception:
        raise Wrong("return an (n, n) tensor (or nested list) of booleans") from None
    if n == 0 and got.numel() == 0:
        return
    if tuple(got.shape) != (n, n):
        raise Wrong(f"the mask has shape {tuple(got.shape)} for a tree of {n} nodes; it should be ({n}, {n})")
    got = got.bool()
    if torch.equal(got, want):
        return
    missing, extra = want & ~got, got & ~want
    if missing.diagonal().any():
        raise Wrong("a node cannot see itself")
    for i, j in missing.nonzero().tolist():
        if parents[i] == j:
            raise Wrong("a node cannot see its parent")
    if missing.any():
        raise Wrong("a node cannot see its grandparent or an earlier ancestor (it must see its whole path "
                     "from the root)")
    kinds = set()
    for i, j in extra.nonzero().tolist():
        if i in tree.ancestors(j):
            kinds.add("descendant")
        elif parents[i] == parents[j]:
            kinds.add("sibling")
        else:
            kinds.add("other")
    if "descendant" in kinds:
        raise Wrong("a node sees its own child or a later descendant (row i is the node that looks, "
                     "column j the node it may see)")
    if "sibling" in kinds:
        raise Wrong("the mask lets a node see its sibling")
    raise Wrong("the mask lets a node see a node of another branch (an ordinary causal mask is not a "
                 "tree mask)")


def check_tree_mask(fn: Callable, events: Optional[Iterable] = None) -> Optional[bool]:
    """fn(parents) -> the (n, n) tree attention mask, against DraftTree.mask; with `events`, also
    every tree the engine built in that run."""
    cases = _mask_cases(events)
    return run_cases("tree_mask", fn, cases, _judge_mask, "the engine's DraftTree.mask", replayed(cases, "tree"))


def check_node_sees(answer) -> Optional[bool]:
    """Notebook 5: the nodes that node 4 ("dog ran") of the cat/dog tree attends to."""
    row = _tree(CAT_DOG_PARENTS).mask()[4]
    # asked for as a sorted list only so that it reads one way: any order, or a set, is the same answer
    return check_answer(answer, [i for i, seen in enumerate(row.tolist()) if seen], hint="Its ancestors and itself.",
                   read=lambda a: as_numbers(a, ordered=False))


def check_q2(answer) -> Optional[bool]:
    """Notebook 5: q after its first candidate (token a of q = (0.5, 0.3, 0.2)) was drawn."""
    q = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    q[0] = 0.0  # as RejectionVerifier.judge does for the next sibling
    return check_answer(answer, (q / q.sum()).tolist(), tol=0.001, hint="Remove a and renormalise what is left.",
                   read=lambda a: as_numbers(a, n=3))  # the question asks for three numbers: a, b, c
