"""Trees sized to the machine (tree_budget="auto"): how many drafted nodes to verify this step.

A dynamic tree (EAGLE-2) drafts more candidates than it verifies and keeps the `budget` of highest
cumulative draft probability. A fixed budget suits one machine: on a GPU a pass over 64 tokens
costs about what a pass over one costs, so 60 nodes are nearly free; on a laptop's CPU a pass's
time grows with its tokens past a handful, and nodes that are rarely accepted cost more than they
bring. The right budget also changes from step to step: where the draft is sure, deep nodes are
likely to be accepted; where it hesitates, they are not.

So each greedy step keeps the n best-ranked nodes worth the most to the run:

    expected(n) = 1 + sum over the n best nodes of calibration(rank) * cum_q
    value(n)    = expected(n) - R * (draft seconds + pass(n + 1))

- cum_q of a node is the product of q along its path: under greedy verification, where the draft
  is calibrated, the chance that the node is accepted (EAGLE-2's argument), so the sum over kept
  nodes is the expected number of accepted drafts, and 1 counts the target's own token.
- calibration(rank) scales it to what the run's steps really accepted at that rank (ranks 1,
  2-3, 4-7, 8-15, ...): accepted nodes per predicted one over its recent steps. A draft is often
  well calibrated on its best guess and too sure of its tenth: one scale for all would keep
  too many low-ranked nodes or too few high-ranked ones. A rank with too little evidence (never
  verified lately) counts at face value, so it is tried again.
- pass(m) is one target pass over m tokens: the curve measured once per target model on the
  engine's own runner (the benchmark suite's verify-cost curve, specviz.bench.forward; kept on
  the model), scaled by what the run's own verify passes took against it (the real pass has a
  tree mask, hidden states, a longer context, the verifier's work).
- R is the run's tokens per second so far, so a node is kept when the tokens it is expected to
  add are worth more than the time it adds at the rate the run already reaches (Dinkelbach's rule
  for the best long-run ratio of tokens to seconds). Before R is known (the run's first steps),
  the step's own ratio expected(n) / (draft seconds + pass(n + 1)) is maximised instead.
- The best-ranked n always form a tree: a child's cum_q is at most its parent's, and ties rank
  the parent first.
- A level is drafted only if it could raise the best value even at its most hopeful (each
  frontier node's children holding all of its cum_q, the level's forward as dear as the run's
  levels so far): where the draft hesitates, the tree stops shallow and its forwards are saved.

Under sampling a re-rank that looks at the drawn candidates' own q biases the output (see
specviz.drafters.model_tree), so a sampled step spends a budget fixed before it draws: the n this rule
chose from the previous step's ranked scores; where every node paid and the budget was what
stopped the tree, twice that budget. The choice depends on measured times, so a seeded run with a
sized tree is not bit-for-bit repeatable (as with k="auto"); under greedy its text always is the
target's.
"""

from __future__ import annotations

from typing import Optional

from specviz.analysis.theory import interpolate_cost
from specviz.config import MAX_TREE_NODES, model_vocab_size
from specviz.runtime.costs import forward_cost

# Pass widths measured (one row): every width up to 17, then coarser; between them linear.
WIDTHS = (*range(1, 18), 20, 24, 28, 33, 41, 49, 57, 65)
MEMORY = 0.9  # what a run learnt forgets: each earlier step weighs 0.9 times the one after it
RANKS = 7  # calibration groups of ranks: 1, 2-3, 4-7, 8-15, 16-31, 32-63, 64
EVIDENCE = 0.5  # predicted acceptances a rank group needs before its own calibration counts
FIRST_BUDGET = 16  # a sampled run's first step, before any scores were seen


def rank_group(rank: int) -> int:
    """0-based rank -> its calibration group."""
    return min(RANKS - 1, (rank + 1).bit_length() - 1)


class TreeSizer:
    def __init__(self, target, cap: int = 64, first_budget: int = FIRST_BUDGET):
        self.target, self.cap, self.first_budget = target, cap, first_budget
        self.points: Optional[dict] = None  # pass width -> seconds, as measured
        self.reset()

    def reset(self) -> None:
        """A new run: what the last one learnt about acceptance and speed starts over (the
        measured curve stays)."""
        self.accepted = [0.0] * RANKS  # forgetting sums per rank group: accepted nodes,
        self.predicted = [0.0] * RANKS  # and the cum_q they were verified with
        self.real = self.modelled = 0.0  # verify passes: seconds taken, seconds the curve said
        self.tokens = self.spent = 0.0  # steps' tokens and seconds: the run's rate R
        self.level_s: Optional[float] = None  # a draft level's forward, learnt from the run's
        self.draft_s: Optional[float] = None  # this step's draft seconds (None: not to be counted)
        self.pass_s: Optional[float] = None  # this step's verify pass, as the engine timed it
        self.planned = min(self.cap, self.first_budget)
        self.info: dict = {}
        self.reported = False  # the cost curve goes into the run's first sized step

    # -- the machine ---------------------------------------------------------------------------

    def curve(self) -> dict:
        """{width: seconds} of one target pass on the engine's own runner, measured on first use
        (then kept on the model: every later run and sizer reuses it)."""
        if self.points is None:
            widths = sorted({w for w in WIDTHS if w <= self.cap + 1} | {self.cap + 1})
            kept = self.target.__dict__.setdefault("_specviz_pass_curve", {})
            missing = [w for w in widths if w not in kept]
            if missing:
                vocab = min(1000, model_vocab_size(self.target))
                kept.update(forward_cost(self.target, missing, repeats=3, vocab=vocab))
            self.use({w: kept[w] for w in widths})
        return self.points

    def use(self, points: dict) -> "TreeSizer":
        """Size trees with these {pass width: seconds} (a measured curve, or a test's)."""
        self.points = dict(points)
        shape = interpolate_cost(sorted(self.points.items()))  # in passes of the narrowest width
        narrowest = self.points[min(self.points)]
        self.table = [0.0] + [shape(w) * narrowest for w in range(1, self.cap + 2)]  # width -> seconds
        return self

    @property
    def scale(self) -> float:
        """The run's verify passes against the curve (within [0.25, 4])."""
        return min(4.0, max(0.25, self.real / self.modelled)) if self.modelled > 0 else 1.0

    def pass_seconds(self, width: int) -> float:
        self.curve()
        return self.table[max(1, min(width, self.cap + 1))] * self.scale

    # -- what the run has shown ----------------------------------------------------------------

    def calibration(self, group: Optional[int] = None) -> float:
        """Accepted nodes per predicted one, of a rank group (None: all of them), kept within
        [0.2, 2] (a few unlucky steps must not shrink every later tree to one node); 1 where the
        group has too little evidence."""
        acc = sum(self.accepted) if group is None else self.accepted[group]
        pred = sum(self.predicted) if group is None else self.predicted[group]
        return min(2.0, max(0.2, acc / pred)) if pred >= EVIDENCE else 1.0

    @property
    def rate(self) -> Optional[float]:
        """The run's tokens per second over its recent sized steps (None before any)."""
        return self.tokens / self.spent if self.spent > 0 else None

    def timed(self, width: int, seconds: float) -> None:
        """The engine's verify pass of this step (not a prefill): `width` tokens in `seconds`."""
        self.curve()
        self.real = MEMORY * self.real + seconds
        self.modelled = MEMORY * self.modelled + self.table[max(1, min(width, self.cap + 1))]
        self.pass_s = seconds

    def level_timed(self, seconds: float) -> None:
        """One draft level's forward (after the root)."""
        self.level_s = seconds if self.level_s is None else 0.5 * self.level_s + 0.5 * seconds

    def observe(self, ranked: list) -> None:
        """A verified step: (cum_q, accepted) of every node verified, best-ranked first."""
        self.accepted = [MEMORY * a for a in self.accepted]
        self.predicted = [MEMORY * p for p in self.predicted]
        for rank, (cum_q, accepted) in enumerate(ranked):
            group = rank_group(rank)
            self.accepted[group] += bool(accepted)
            self.predicted[group] += cum_q
        if self.draft_s is not None and self.pass_s is not None:
            self.tokens = MEMORY * self.tokens + sum(bool(a) for _, a in ranked) + 1
            self.spent = MEMORY * self.spent + self.draft_s + self.pass_s
        self.draft_s = self.pass_s = None

    # -- the choice ----------------------------------------------------------------------------

    def _best(self, scores: list, draft_seconds: float) -> tuple:
        """(n, value, expected tokens) of the best prefix of `scores` (best-ranked first)."""
        cal = [self.calibration(g) for g in range(RANKS)]
        rate, expected = self.rate, 1.0
        best = (0, float("-inf"), 1.0)
        for n, s in enumerate(scores[:self.cap], 1):
            expected += cal[rank_group(n - 1)] * s
            seconds = draft_seconds + self.pass_seconds(n + 1)
            value = expected - rate * seconds if rate is not None else expected / seconds
            if value > best[1]:
                best = (n, value, expected)
        return best

    def deeper_pays(self, scores: list, frontier: list, draft_seconds: float) -> bool:
        """Whether drafting one more level could raise the best value (greedy steps): its nodes
        at their most hopeful (a node's children share at most its own cum_q, so as if one child
        held all of it), its forward as dear as the run's levels so far (free before one is timed)."""
        now = self._best(sorted(scores, reverse=True), draft_seconds)[1]
        hope = self._best(sorted(scores + frontier, reverse=True), draft_seconds + (self.level_s or 0.0))[1]
        return hope > now

    def choose(self, scores: list, draft_seconds: float, counted: bool = True) -> int:
        """How many of the nodes, best-ranked first with cumulative draft probabilities `scores`,
        to verify (at least 1 where there are any, at most the cap). `counted`: this step's time
        joins the run's rate (not a step whose draft fed the prompt)."""
        n, _, expected = self._best(scores, draft_seconds)
        self.planned = max(1, n)
        self.draft_s = draft_seconds if counted else None
        rate = self.rate
        self.info = {"nodes": n, "drafted": len(scores), "expected": round(expected, 3),
                     "calibration": round(self.calibration(), 3),
                     "by_rank": [round(self.calibration(g), 3) for g in range(RANKS)],
                     "draft_s": round(draft_seconds, 5),
                     "verify_s": round(self.pass_seconds(n + 1), 5), "pass_scale": round(self.scale, 3),
                     "rule": "ratio" if rate is None else "run rate",
                     **({} if rate is None else {"run_rate": round(rate, 3)})}
        return n

    def budget(self) -> int:
        """A sampled step's budget: chosen from the last step's scores, before anything is drawn."""
        return self.planned

    def plan(self, scores: list, draft_seconds: float, nodes: int, counted: bool = True) -> None:
        """A sampled step drew `nodes` under its budget with `scores`: the choice they suggest
        becomes the next step's budget (nothing of this step's tree is cut). Where every node
        paid, the next budget is twice this one if the budget stopped the tree, else the same."""
        budget = self.planned
        n = self.choose(scores, draft_seconds, counted)
        if n >= nodes:
            self.planned = min(self.cap, 2 * budget) if nodes >= budget else budget
        self.info = {"nodes": nodes, "budget": budget, "next_budget": self.planned,
                     "calibration": self.info["calibration"], "draft_s": self.info["draft_s"]}

    def step_info(self) -> dict:
        """This step's choice, and on the run's first sized step the cost curve it was made with."""
        if not self.info:  # a step with nothing drafted (EAGLE's first: the prompt's prefill)
            return {}
        out = {"tree_size": dict(self.info)}
        if not self.reported and self.points is not None:
            out["tree_size"]["verify_curve"] = {str(w): round(s, 6) for w, s in self.points.items()}
            self.reported = True
        return out


def sizer_for(pair, cfg) -> Optional[TreeSizer]:
    """tree_budget="auto": a dynamic tree sized each step to this machine's pass costs, measured
    here on a model's first such run (seconds on a CPU), before the run's clock starts; None for
    a fixed budget."""
    if cfg.tree_budget != "auto":
        return None
    sizer = TreeSizer(pair.target, MAX_TREE_NODES)
    sizer.curve()
    return sizer
