"""Suffix decoding (Oliaro, Jia, Campos & Qiao, "SuffixDecoding: Extreme Speculative Decoding for
Emerging AI Applications", NeurIPS 2025; vLLM's `method: "suffix"`): no draft model, no training.

Repeated work (an agent's loop, the same edit asked again, a test rewritten after a fix) writes
the same long stretches again and again. Suffix decoding keeps every token the session has seen
in suffix trees with counts, and drafts what followed the text's current ending before:

  trees    the prompt's own (with the answer so far, as it grows) and the session's: every
           earlier output of every run on this pair and session, batch rows included, the current
           one too as it commits (`SuffixCache`), each stored after the last HEAD tokens of its
           prompt (with a chat template, the assistant's header), so that the session knows how
           its answers begin. Each is a trie of every substring up to DEPTH tokens long with how
           often it occurred (a suffix tree cut at that depth).
  match    the longest ending of the text (up to MAX_MATCH tokens) found in a tree with a
           continuation after it.
  score    a continuation token x after pattern s scores count(s + x) / (the counts of all of s's
           continuations): how often x followed s. A node deeper in the speculation scores the
           product along its path: an estimate of the chance that it is accepted.
  draft    best first, the nodes of highest score while they score at least `min_prob` and the
           draft holds fewer than min(k, SPEC_FACTOR x match length + SPEC_OFFSET) tokens (k: the
           chain's draft length; for the tree, the room left before max_new_tokens, as for every
           tree method): a long match earns a long draft, a short one a short draft or none
           (SuffixDecoding's adaptive speculation length: Arctic Inference's max_spec_factor and
           max_spec_offset; vLLM keeps the factor, default 1, with no offset). Where the trie's
           depth, or a stored text, runs out, the chain matches the text's new ending, drafts
           included, again and walks on (specviz's own: vLLM's drafts stop at the tree's depth). Of the
           two trees' drafts the one whose scores sum higher (more tokens expected accepted) is
           proposed.

`suffix-tree` proposes the whole speculation as a token tree (tree attention); `suffix` proposes
its most likely path as a chain, so it also runs in a batch and on llama.cpp. The drafter does not
sample: its candidates are proposals certain of themselves (q one-hot), and the rejection rule
keeps each with probability p(x), replacing a rejected one from p without it. Lossless, greedy or
sampled. Every node carries its tree, count and score in its source, and the step its match (the
matched ending's positions [start, end) in the text) and which tree it came from.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections import OrderedDict
from specviz.config import vocab_size
from specviz.drafters.base import Drafter, Proposal, one_hot_rows
from specviz.verifiers.draft_tree import ROOT, DraftTree

DEPTH = 24  # the longest substring a tree counts (its depth)
MAX_MATCH = 12  # the longest ending of the text matched: at least DEPTH - MAX_MATCH tokens stay to draft
SESSION_TOKENS = 8192  # tokens a session's tree keeps: outputs with their HEAD tokens (whole, the oldest go first)
SESSIONS = 16  # sessions kept per pair (the app keys one per visitor; the least recently used go)
SPEC_FACTOR, SPEC_OFFSET = 2, 2  # draft at most SPEC_FACTOR x the match's length + SPEC_OFFSET tokens
HEAD = 3  # prompt tokens stored before each output (Qwen's chat template: "<|im_start|>assistant\n")


class _Node:
    __slots__ = ("count", "children")

    def __init__(self):
        self.count = 0
        self.children = None  # token -> _Node, made on the first child

    def child(self, token: int) -> "_Node":
        if self.children is None:
            self.children = {}
        node = self.children.get(token)
        if node is None:
            node = self.children[token] = _Node()
        return node


class SuffixTrie:
    """Every substring of the documents added, up to `depth` tokens, with its count of occurrences.
    Documents grow token by token (`extend`): each new token extends the depth - 1 latest suffixes
    of its document by one node, and starts a new one. `remove` takes a document's counts out."""

    def __init__(self, depth: int = DEPTH):
        self.depth = depth
        self.root = _Node()
        self.docs = OrderedDict()  # doc id -> {"tokens": [...], "open": [nodes of its latest suffixes]}
        self.tokens = 0  # in all documents

    def extend(self, doc, tokens) -> None:
        entry = self.docs.setdefault(doc, {"tokens": [], "open": []})
        self.tokens += len(tokens)
        for token in tokens:
            token = int(token)
            grown = [node.child(token) for node in entry["open"]] + [self.root.child(token)]
            for node in grown:
                node.count += 1
            entry["open"] = grown[-(self.depth - 1):] if self.depth > 1 else []
            entry["tokens"].append(token)

    def remove(self, doc) -> None:
        entry = self.docs.pop(doc, None)
        if entry is None:
            return
        tokens = entry["tokens"]
        self.tokens -= len(tokens)
        for start in range(len(tokens)):
            node, path = self.root, []
            for token in tokens[start:start + self.depth]:
                path.append((node, token))
                node = node.children[token]
                node.count -= 1
            for parent, token in reversed(path):  # prune the nodes no document holds any more
                child = parent.children[token]
                if child.count == 0:
                    del parent.children[token]

    def __len__(self) -> int:
        return len(self.docs)

    def match(self, context: list) -> tuple:
        """(node, length): the longest ending of `context` (at most MAX_MATCH, and depth - 1, tokens)
        found here with at least one continuation; (None, 0) if none."""
        longest = min(len(context), MAX_MATCH, self.depth - 1)
        for length in range(longest, 0, -1):
            node = self.root
            for token in context[len(context) - length:]:
                node = node.children.get(token) if node.children else None
                if node is None:
                    break
            if node is not None and node.children:
                return node, length
        return None, 0


def speculate(node: _Node, budget: int, min_prob: float, room: int) -> list:
    """Best first from `node`: up to `budget` (token, parent index, count, prob, score) rows, parents
    before children, each scoring at least `min_prob`, at most `room` deep."""
    out, order = [], itertools.count()
    heap = []

    def push(parent_node, parent_index, parent_score, depth):
        if depth > room or not parent_node.children:
            return
        total = sum(c.count for c in parent_node.children.values())
        for token, child in parent_node.children.items():
            prob = child.count / total
            heapq.heappush(heap, (-parent_score * prob, next(order), token, child, parent_index, prob, depth))

    push(node, ROOT, 1.0, 1)
    while heap and len(out) < budget:
        neg, _, token, child, parent, prob, depth = heapq.heappop(heap)
        if -neg < min_prob:
            break  # everything left scores less still
        out.append((token, parent, child.count, round(prob, 4), round(-neg, 4)))
        push(child, len(out) - 1, -neg, depth + 1)
    return out


def speculate_path(trie: SuffixTrie, node: _Node, length: int, context: list, budget: int, min_prob: float) -> list:
    """The chain form: from `node` (the match of `context`'s last `length` tokens in `trie`), the most frequent
    continuation each time, while the path's score stays at least `min_prob` (rows as
    speculate's, each the child of the one before). Where the trie's depth runs out, or the text
    the walk follows ends (an earlier output's last token), the ending of the text with the draft
    so far is matched again and the walk goes on from there."""
    out, score = [], 1.0
    text = list(context[-MAX_MATCH:])
    room = trie.depth - length  # nodes below `node` before the trie's depth
    while len(out) < budget:
        if not node.children or room <= 0:
            node, length = trie.match(text)
            if node is None:
                break
            room = trie.depth - length
        total = sum(c.count for c in node.children.values())
        token, child = max(node.children.items(), key=lambda item: item[1].count)
        prob = child.count / total
        if score * prob < min_prob:
            break
        score *= prob
        out.append((token, len(out) - 1, child.count, round(prob, 4), round(score, 4)))
        node, room = child, room - 1
        text = (text + [token])[-MAX_MATCH:]
    return out


class SuffixCache:
    """A pair's session trees: the outputs of earlier runs (and of the ones in flight), one trie
    per session key, the SESSIONS most recently used kept, each with the latest SESSION_TOKENS
    output tokens (SuffixDecoding's global tree; a public app keeps its visitors apart by key)."""

    def __init__(self):
        self.sessions = OrderedDict()
        self._ids = itertools.count()

    def trie(self, session: str) -> SuffixTrie:
        trie = self.sessions.pop(session, None)
        self.sessions[session] = trie = trie if trie is not None else SuffixTrie()
        while len(self.sessions) > SESSIONS:
            self.sessions.popitem(last=False)
        return trie

    def open_output(self, session: str) -> tuple:
        """(the session's trie, a new output's id in it)."""
        return self.trie(session), next(self._ids)

    @staticmethod
    def add(trie: SuffixTrie, doc, tokens: list) -> None:
        """`tokens` onto output `doc`; past SESSION_TOKENS the oldest other outputs go, whole."""
        trie.extend(doc, tokens)
        while trie.tokens > SESSION_TOKENS and len(trie) > 1:
            oldest = next(iter(trie.docs))
            trie.remove(oldest if oldest != doc else list(trie.docs)[1])


def session_cache(pair) -> SuffixCache:
    """The pair's SuffixCache: kept on the pair, so every run on it shares the session's outputs."""
    cache = pair.__dict__.get("_suffix")
    if cache is None:
        cache = pair.__dict__["_suffix"] = SuffixCache()
    return cache


class SuffixDrafter(Drafter):
    """Suffix decoding's drafter: a tree (`tree=True`, method suffix-tree) or its most likely path
    (method suffix)."""

    def __init__(self, cache: SuffixCache, session: str, vocab_size: int, device, min_prob: float = 0.1,
                 tree: bool = False):
        self.cache, self.session = cache, session
        self.vocab_size, self.device = vocab_size, device
        self.min_prob, self.tree = min_prob, tree
        self.info = {}

    @property
    def name(self) -> str:
        return "suffix decoding" + (" (tree)" if self.tree else "")

    @property
    def kind(self) -> str:
        return f"suffix {'tree' if self.tree else 'chain'} (min prob {self.min_prob:g})"

    def start(self, prompt_ids: list) -> None:
        self.local = SuffixTrie()  # this request: its prompt, then its answer as it commits
        self.local.extend(0, prompt_ids)
        self.session_trie, self.doc = self.cache.open_output(self.session)
        self.cache.add(self.session_trie, self.doc, prompt_ids[-HEAD:])  # how this output begins
        self.seen = len(prompt_ids)  # committed tokens already in the tries
        self.info = {}

    def _catch_up(self, committed: list) -> None:
        new = committed[self.seen:]
        if new:
            self.local.extend(0, new)
            self.cache.add(self.session_trie, self.doc, new)
            self.seen = len(committed)

    def propose(self, committed, k, warp, generator) -> Proposal:
        start = time.perf_counter()
        self._catch_up(committed)
        best = None
        for name, trie in (("prompt", self.local), ("session", self.session_trie)):
            node, length = trie.match(committed)
            if node is None:
                continue
            budget = min(k, SPEC_FACTOR * length + SPEC_OFFSET)  # a longer match earns a longer draft
            rows = speculate(node, budget, self.min_prob, trie.depth - length) if self.tree else \
                speculate_path(trie, node, length, committed, budget, self.min_prob)
            expected = sum(r[4] for r in rows)
            if rows and (best is None or expected > best[3]):
                best = (name, length, rows, expected, budget)
        if best is None:
            self.info = {"tree": None, "match_len": 0, "drafted": 0}
            return Proposal(shape=self.kind if self.tree else None, seconds=time.perf_counter() - start)
        name, length, rows, expected, budget = best
        self.info = {"tree": name, "match_len": length, "match": [len(committed) - length, len(committed)],
                     "expected": round(expected, 3), "drafted": len(rows), "limit": budget,
                     "outputs": len(self.session_trie)}
        sources = [{"kind": "suffix", "tree": name, "count": count, "prob": prob, "score": score}
                   for _, _, count, prob, score in rows]
        seconds = time.perf_counter() - start
        if not self.tree:
            tokens = [r[0] for r in rows]
            return Proposal.chain(tokens, one_hot_rows(tokens, self.vocab_size, self.device), 0, seconds, sources)
        draft = DraftTree()
        for token, parent, *_ in rows:
            draft.add(token, parent, 1.0)  # no q: proposals certain of themselves (the verifier's one-hot)
        return Proposal(draft, {}, 0, seconds, sources, self.kind)

    def observe(self, committed, proposal, path, target_probs) -> None:
        self._catch_up(committed)

    def step_info(self) -> dict:
        return {"suffix": dict(self.info)}


def build(pair, cfg, stop, policy=None) -> SuffixDrafter:
    """`suffix`'s and `suffix-tree`'s drafter (specviz.methods)."""
    return SuffixDrafter(session_cache(pair), cfg.suffix_session, vocab_size(pair), pair.device, cfg.suffix_min_prob,
                         tree=cfg.method == "suffix-tree")

