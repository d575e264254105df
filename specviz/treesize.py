"""Trees sized to the machine (tree_budget="auto"): how many drafted nodes to verify this step.

A dynamic tree (EAGLE-2) drafts more candidates than it verifies and keeps the `budget` of highest
cumulative draft probability. A fixed budget suits one machine: on a GPU a pass over 64 tokens
costs about what a pass over one costs, so 60 nodes are nearly free; on a laptop's CPU a pass's
time grows with its tokens past a handful, and nodes that are rarely accepted cost more than they
bring. The right budget also changes from step to step: where the draft is sure, deep nodes are
likely to be accepted; where it hesitates, they are not.

So each step keeps the n best-ranked nodes that maximise the step's expected tokens per second:

    rate(n) = (1 + calibration * sum of the n best cum_q) / (draft seconds + verify(n + 1))

- cum_q of a node is the product of q along its path: under greedy verification, where the draft
  is calibrated, the chance that the node is accepted (EAGLE-2's argument), so the sum over kept
  nodes is the expected number of accepted drafts, and 1 counts the target's own token.
- `calibration` scales that sum to what steps really accepted so far (a draft that is sure too
  often is corrected): accepted drafts / predicted ones, over the run's recent steps.
- verify(n + 1) is the measured time of one target pass over the last committed token and n
  nodes (specviz.batch.CostTable, measured once per target model and kept on it); the draft
  seconds are this step's, already spent.
- The best-ranked n always form a tree: a child's cum_q is at most its parent's, and ties rank
  the parent first.

Under sampling a re-rank that looks at the drawn candidates' own q biases the output (see
specviz.drafters.tree), so a sampled step spends a budget fixed before it draws: the n this rule
chose from the previous step's ranked scores (twice the previous budget where all of it paid).
"""

from __future__ import annotations

from typing import Optional

from specviz.theory import interpolate_cost

# Pass widths measured (one row): every width up to 17, then coarser; between them linear.
WIDTHS = (*range(1, 18), 20, 24, 28, 33, 41, 49, 57, 65)
MEMORY = 0.9  # calibration forgets: each earlier step weighs 0.9 times the one after it
FIRST_BUDGET = 16  # a sampled run's first step, before any scores were seen


class TreeSizer:
    def __init__(self, target, cap: int = 64):
        self.target, self.cap = target, cap
        self.points: Optional[dict] = None  # pass width -> seconds
        self.accepted = self.predicted = 0.0  # forgetting sums for the calibration
        self.planned = FIRST_BUDGET  # a sampled step's budget (decided from the last step)
        self.info: dict = {}
        self.reported = False  # the cost curve goes into the run's first step event

    def curve(self) -> dict:
        """{width: seconds} of one target pass, measured on first use (then kept on the model)."""
        if self.points is None:
            from specviz.batch import CostTable  # specviz.batch imports the drafters' factory

            table = CostTable.of(self.target)
            widths = [w for w in WIDTHS if w <= self.cap + 1]
            table.need(1, widths)
            self.use({w: table(1, w) for w in widths})
        return self.points

    def use(self, points: dict) -> "TreeSizer":
        """Size trees with these {pass width: seconds} (a measured curve, or a test's)."""
        self.points = dict(points)
        self.verify = interpolate_cost(sorted(self.points.items()))  # in one-token passes
        self.one = self.points[1]
        return self

    @property
    def calibration(self) -> float:
        """Accepted drafts per predicted one, kept within [0.2, 2] (a few unlucky steps at the
        start must not shrink every later tree to one node)."""
        return min(2.0, max(0.2, self.accepted / self.predicted)) if self.predicted > 0 else 1.0

    def choose(self, scores: list, draft_seconds: float) -> int:
        """How many of the nodes, best-ranked first with cumulative draft probabilities `scores`,
        to verify: at least 1, at most the cap."""
        self.curve()
        cal, total = self.calibration, 0.0
        best_n, best_rate, best_expected = 0, -1.0, 1.0
        for n, s in enumerate(scores[:self.cap], 1):
            total += s
            expected = 1.0 + cal * total
            rate = expected / (draft_seconds + self.verify(n + 1) * self.one)
            if rate > best_rate:
                best_n, best_rate, best_expected = n, rate, expected
        self.planned = max(1, best_n)
        self.info = {"nodes": best_n, "drafted": len(scores), "expected": round(best_expected, 3),
                     "calibration": round(cal, 3), "draft_s": round(draft_seconds, 5),
                     "verify_s": round(self.verify(best_n + 1) * self.one, 5)}
        return best_n

    def budget(self) -> int:
        """A sampled step's budget: chosen from the last step's scores, before anything is drawn."""
        self.curve()
        return self.planned

    def plan(self, scores: list, draft_seconds: float, nodes: int) -> None:
        """A sampled step drew `nodes` (its budget, or fewer) with `scores`: the choice they
        suggest becomes the next step's budget; nothing of this step's tree is cut."""
        if self.choose(scores, draft_seconds) >= nodes:  # every node paid: more might, try twice as many
            self.planned = min(self.cap, 2 * nodes)
        self.info = {"nodes": nodes, "next_budget": self.planned, "calibration": self.info["calibration"],
                     "draft_s": self.info["draft_s"]}

    def observe(self, accepted: int, predicted: float) -> None:
        """A verified step: `accepted` drafted nodes on the committed path, `predicted` the sum
        of cum_q over the nodes verified."""
        self.accepted = MEMORY * self.accepted + accepted
        self.predicted = MEMORY * self.predicted + predicted

    def step_info(self) -> dict:
        """This step's choice, and on the run's first step the cost curve it was made with."""
        if not self.info:  # a step with nothing drafted (EAGLE's first: the prompt's prefill)
            return {}
        out = {"tree_size": dict(self.info)}
        if not self.reported and self.points is not None:
            out["tree_size"]["verify_curve"] = {str(w): round(s, 6) for w, s in self.points.items()}
            self.reported = True
        return out
