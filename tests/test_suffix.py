"""Suffix decoding (specviz.drafters.suffix): the counted suffix trees, the adaptive speculation
drawn from them, lossless greedy and sampled (q one-hot: proposals certain of themselves), a
session that makes repeated work faster, and sessions kept apart."""

import pytest
from test_distribution import RUNS, ResampleFromTarget, _first_tokens, _p_value, _target_joint, toy  # noqa: F401

from specviz import generate
from specviz.analysis import metrics
from specviz.config import Warp
from specviz.drafters import suffix
from specviz.drafters.suffix import SuffixCache, SuffixTrie, speculate, speculate_path
from specviz.errors import InputError
from specviz.runtime.tiny_pair import build_tiny_pair
from specviz.verifiers.draft_tree import ROOT


@pytest.fixture(scope="module")
def tiny():
    return build_tiny_pair()


def _count(trie, pattern):
    node = trie.root
    for token in pattern:
        node = (node.children or {}).get(token)
        if node is None:
            return 0
    return node.count


def test_the_trie_counts_every_substring_up_to_its_depth():
    trie = SuffixTrie(depth=3)
    trie.extend("a", [1, 2, 3, 1, 2])
    trie.extend("a", [4])  # a document grows as its tokens commit
    assert [_count(trie, p) for p in ([1], [2], [1, 2], [1, 2, 3], [1, 2, 4], [2, 4], [3, 1, 2])] == [2, 2, 2, 1, 1, 1, 1]
    assert _count(trie, [1, 2, 3, 1]) == 0  # deeper than the trie counts
    trie.extend("b", [1, 2, 4])
    assert _count(trie, [1, 2, 4]) == 2 and trie.tokens == 9
    # the longest ending with a continuation: [.., 1, 2] (the ending [3, 1, 2] has none)
    node, length = trie.match([9, 3, 1, 2])
    assert length == 2 and sorted(node.children) == [3, 4]
    assert trie.match([7, 8]) == (None, 0)
    trie.remove("a")
    assert _count(trie, [1, 2, 4]) == 1 and _count(trie, [3]) == 0 and trie.tokens == 3
    trie.remove("b")
    assert not trie.root.children and trie.tokens == 0  # nothing left behind


def test_speculation_is_best_first_by_frequency_and_stops_where_it_is_unlikely():
    trie = SuffixTrie(depth=6)
    for doc, tokens in enumerate([[1, 2, 3, 4], [1, 2, 3, 4], [1, 2, 3, 5], [1, 2, 6, 7]]):
        trie.extend(doc, tokens)
    node, length = trie.match([1, 2])
    assert length == 2
    rows = speculate(node, budget=8, min_prob=0.1, room=4)
    # 3 follows "1 2" 3 times in 4; then 4 follows "1 2 3" twice in 3; 6 once in 4; 5 once in 3
    assert [(r[0], r[1], r[2], r[3], r[4]) for r in rows] == [
        (3, ROOT, 3, 0.75, 0.75), (4, 0, 2, 0.6667, 0.5), (6, ROOT, 1, 0.25, 0.25), (5, 0, 1, 0.3333, 0.25),
        (7, 2, 1, 1.0, 0.25)]  # ties: the one offered first
    assert [r[0] for r in speculate(node, budget=8, min_prob=0.3, room=4)] == [3, 4]  # unlikely ones left out
    assert [r[0] for r in speculate(node, budget=2, min_prob=0.1, room=4)] == [3, 4]  # the budget
    assert [r[0] for r in speculate(node, budget=8, min_prob=0.1, room=1)] == [3, 6]  # the depth left
    assert [(r[0], r[1]) for r in speculate_path(trie, node, 2, [1, 2], 8, 0.1)] == [(3, ROOT), (4, 0)]  # "1 2 3 4" ends there
    assert speculate_path(trie, node, 2, [1, 2], 8, 0.8) == []  # not even the first is likely enough: no draft


def test_the_chain_walks_on_past_the_tries_depth():
    trie = SuffixTrie(depth=4)  # counts substrings of at most 4 tokens
    text = [10, 11, 12, 13, 14, 15, 16, 17, 18, 19]
    trie.extend("earlier", text)
    node, length = trie.match([99, 10, 11])
    assert length == 2
    rows = speculate_path(trie, node, length, [99, 10, 11], 20, 0.1)
    # two nodes below the match, then "11 12 13" matched again (3 = depth - 1), and so on to the text's end
    assert [r[0] for r in rows] == text[2:] and [r[1] for r in rows] == list(range(-1, len(rows) - 1))
    assert [r[0] for r in speculate_path(trie, node, length, [99, 10, 11], 5, 0.1)] == text[2:7]  # the budget
    trie.extend("other", [13, 40, 13, 40])  # "13" alone: followed by 40 twice, by 14 once
    rows = speculate_path(trie, node, length, [99, 10, 11], 20, 0.1)
    # matched again at its longest ending, "11 12 13", which only 14 ever followed
    assert [r[0] for r in rows[:3]] == [12, 13, 14] and rows[2][3] == 1.0
    trie.extend("third", [12, 13, 50, 12, 13, 50])  # now "12 13": 14 once, 50 twice; "11 12 13" still 14
    rows = speculate_path(trie, node, length, [99, 10, 11], 20, 0.1)
    assert [r[0] for r in rows[:3]] == [12, 13, 14]
    rows = speculate_path(trie, *trie.match([12]), [12], 20, 0.1)  # a short match: the likelier 13, then 50
    assert [r[0] for r in rows[:2]] == [13, 50] and rows[0][3] == 1.0 and rows[1][4] == round(2 / 3, 4)


def test_a_session_keeps_its_latest_outputs_whole(monkeypatch):
    monkeypatch.setattr(suffix, "SESSION_TOKENS", 10)
    cache = SuffixCache()
    trie, first = cache.open_output("s")
    cache.add(trie, first, [1, 2, 3, 4, 5, 6])
    _, second = cache.open_output("s")
    cache.add(trie, second, [7, 8, 9])
    assert list(trie.docs) == [first, second]
    cache.add(trie, second, [10, 11])  # 11 tokens: the oldest output goes, whole; the growing one stays
    assert list(trie.docs) == [second] and trie.tokens == 5 and _count(trie, [1]) == 0
    monkeypatch.setattr(suffix, "SESSIONS", 2)
    cache.trie("t"), cache.trie("u")
    assert list(cache.sessions) == ["t", "u"]  # "s", the least recently used, went


def test_a_full_session_of_text_that_never_repeats_stays_small():
    """The worst case for memory: every output token new (a sampled answer at high temperature), so
    every suffix opens new nodes, DEPTH of them per token. A session keeps SESSION_TOKENS tokens,
    a pair SESSIONS sessions: a public app's memory for suffix decoding is bounded by this
    session's size times SESSIONS. A deeper trie, a longer session or a fatter node fails here."""
    import random
    import tracemalloc

    rng = random.Random(0)
    cache = SuffixCache()
    tracemalloc.start()
    try:
        for _ in range(3 * suffix.SESSION_TOKENS // 256):  # more than a session holds: the oldest go
            trie, doc = cache.open_output("s")
            cache.add(trie, doc, [rng.randrange(150_000) for _ in range(256)])
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert suffix.SESSION_TOKENS - 256 < trie.tokens <= suffix.SESSION_TOKENS
    assert held < 64e6, f"{held / 1e6:.0f} MB for one full session"


@pytest.mark.parametrize("method", ["suffix", "suffix-tree"])
@pytest.mark.parametrize("prompt", ["def fibonacci(n):", "Hello, world! "])
def test_greedy_equals_ar_and_repeated_work_gets_faster(tiny, method, prompt):
    ar = list(generate(tiny, prompt, method="ar", max_new_tokens=48))[-1].token_ids
    session = f"repeat-{method}-{prompt}"
    steps = []
    for _ in range(2):
        events = list(generate(tiny, prompt, method=method, k=8, max_new_tokens=48, suffix_session=session))
        assert events[-1].token_ids == ar
        steps.append(metrics.fold(events).steps)
        assert all(e.draft_forwards == 0 for e in events if e.kind == "step_finished")  # model-free
    assert steps[1] < steps[0] / 2, steps  # the second time it drafts from the first answer
    info = [e.info["suffix"] for e in events if e.kind == "step_finished" and e.info["suffix"].get("drafted")]
    assert info and any(i["tree"] == "session" for i in info) and all(i["match_len"] >= 1 for i in info)
    # a longer match earns a longer draft: never more than SPEC_FACTOR x the match + SPEC_OFFSET
    assert all(i["drafted"] <= suffix.SPEC_FACTOR * i["match_len"] + suffix.SPEC_OFFSET for i in info)


def test_the_session_knows_how_its_answers_begin():
    """Each output is stored after its prompt's last HEAD tokens (with a chat template, the
    assistant's header): a new request ending the same way drafts an earlier answer's opening at
    its first step, from the session, though its own prompt never held that text."""
    cache = SuffixCache()
    header = [7, 8, 9]  # e.g. "<|im_start|>", "assistant", "\n"
    first = suffix.SuffixDrafter(cache, "s", 64, "cpu")
    first.start([1, 2, 3] + header)
    first.observe([1, 2, 3] + header + [20, 21, 22, 23], None, None, None)  # its answer commits
    second = suffix.SuffixDrafter(cache, "s", 64, "cpu")
    second.start([4, 5, 6] + header)
    proposal = second.propose([4, 5, 6] + header, 16, None, None)
    info = second.step_info()["suffix"]
    assert info["tree"] == "session" and info["match_len"] == suffix.HEAD
    assert proposal.tokens[:4] == [20, 21, 22, 23] and info["limit"] == suffix.SPEC_FACTOR * suffix.HEAD + suffix.SPEC_OFFSET
    alone = suffix.SuffixDrafter(SuffixCache(), "s", 64, "cpu")  # a fresh session: nothing to draft
    alone.start([4, 5, 6] + header)
    assert not alone.propose([4, 5, 6] + header, 16, None, None).tokens


def test_tree_nodes_carry_their_tree_count_and_score(tiny):
    prompt = "def f(x): return x\ndef f(y): return y\ndef f("
    events = list(generate(tiny, prompt, method="suffix-tree", k=8, max_new_tokens=24, suffix_session="nodes"))
    nodes = [n for e in events if e.kind == "tree_built" for n in e.nodes]
    assert nodes and all(n["source"]["kind"] == "suffix" and n["source"]["count"] >= 1 for n in nodes)
    assert all(0 < n["source"]["prob"] <= 1 and n["source"]["score"] >= 0.1 for n in nodes)


def test_batch_rows_equal_their_own_ar_and_share_the_session(tiny):
    prompts = ["def fibonacci(n):", "Hello, world! ", "import os\n", "x = 1"]
    events = list(generate(tiny, prompts, method="suffix", k=6, max_new_tokens=24, suffix_session="batch"))
    rows = {e.row: e.token_ids for e in events if e.kind == "run_finished"}
    for b, prompt in enumerate(prompts):
        assert rows[b] == list(generate(tiny, prompt, method="ar", max_new_tokens=24))[-1].token_ids, prompt
    # the batch's outputs are the session's: one prompt alone in it drafts from its own row at once
    again = list(generate(tiny, prompts[0], method="suffix", k=6, max_new_tokens=24, suffix_session="batch"))
    first = next(e for e in again if e.kind == "step_finished" and e.step == 1)
    assert first.info["suffix"]["tree"] == "session" and first.drafted >= 1


def test_sessions_are_kept_apart(tiny):
    prompt = "def fibonacci(n):"
    alone = list(generate(tiny, prompt, method="suffix", k=8, max_new_tokens=32, suffix_session="visitor-alone"))
    list(generate(tiny, prompt, method="suffix", k=8, max_new_tokens=32, suffix_session="visitor-a"))
    events = list(generate(tiny, prompt, method="suffix", k=8, max_new_tokens=32, suffix_session="visitor-b"))
    again = list(generate(tiny, prompt, method="suffix", k=8, max_new_tokens=32, suffix_session="visitor-a"))
    # b's run is a first run, step for step; a's second drafts its first answer
    assert metrics.fold(events).steps == metrics.fold(alone).steps > metrics.fold(again).steps
    with pytest.raises(InputError, match="suffix_min_prob"):
        list(generate(tiny, prompt, method="suffix", suffix_min_prob=0))
    with pytest.raises(InputError, match="typical acceptance is for chains"):
        list(generate(tiny, prompt, method="suffix-tree", acceptance="typical"))


# ---------------------------------------------------------------------------------------------
# sampling on exact toy models: a prompt whose ending "2 0 1" went on two ways before (3 and 2), so
# the first tree has siblings

PROMPT = (1, 2, 0, 1, 3, 2, 0, 1, 2, 2, 0, 1)


@pytest.mark.parametrize("method", ["suffix", "suffix-tree"])
def test_sampling_follows_the_target(toy, method):  # noqa: F811
    warp = Warp(1.0)
    counts, runs = _first_tokens(toy, warp, runs=RUNS // 2, method=method, k=4, prompt=PROMPT,
                                 suffix_session=f"chi2-{method}")
    assert _p_value(counts, _target_joint(toy, warp, PROMPT), RUNS // 2) > 1e-4
    assert sum(e.kind == "token_rejected" for events in runs for e in events) > RUNS // 20
    if method == "suffix-tree":  # siblings really are offered
        assert any(len({n["parent"] for n in e.nodes}) < len(e.nodes) for events in runs for e in events
                   if e.kind == "tree_built")


@pytest.mark.parametrize("method", ["suffix", "suffix-tree"])
def test_a_broken_rule_fails_with_it_too(toy, method):  # noqa: F811
    warp = Warp(1.0)
    counts, _ = _first_tokens(toy, warp, runs=RUNS // 2, verifier=ResampleFromTarget(), method=method, k=4,
                              prompt=PROMPT, suffix_session=f"broken-{method}")
    assert _p_value(counts, _target_joint(toy, warp, PROMPT), RUNS // 2) < 1e-4


def test_the_step_view_says_what_matched_where_and_each_draft_its_counts(tiny):
    from specviz.render import panel, steps
    from specviz.render.html import quoted

    prompt = "def f(x): return x\ndef f(y): return y\ndef f("
    events = [e.to_dict() for e in generate(tiny, prompt, method="suffix", k=8, max_new_tokens=16,
                                            suffix_session="view")]
    run = steps.build(events)
    drafted = next(s for s in run.steps if s.drafted)
    info = drafted.info["suffix"]
    start, end = info["match"]
    notes = panel.step_notes(drafted, run.texts())
    assert any(f"last {info['match_len']} token" in n and quoted("".join(run.texts()[start:end])) in n for n in notes)
    assert all(t.source_note.startswith("suffix decoding: came next") for t in drafted.drafted)
    quiet = next((s for s in run.steps if not s.info["suffix"].get("tree")), None)
    if quiet is not None:
        assert any("nothing drafted" in n for n in panel.step_notes(quiet, run.texts()))
