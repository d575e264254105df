"""Choosing the draft length k at every step (k="auto").

Rules:
  heuristic   transformers' schedule: k + 2 after a fully accepted step, k - 1 (at least 1)
              after a rejection.
  confidence  draft up to k_max tokens but stop as soon as the draft's own q(x) of the token it
              just drafted falls below a threshold (transformers' assistant_confidence_threshold).
  cost        pick the k with the best predicted speedup, theory.optimal_k(alpha, c, V), from the
              running acceptance rate, the draft forward's measured time and the target pass's
              measured time by the number of tokens it verifies: a pass over k + 1 tokens costs
              more than a one-token pass where the kernels are compute-bound (llama.cpp's 4-bit
              files on a laptop CPU, float32 without native bf16), about the same where they are
              memory-bound. The run opens with k_start drafts a step (the first step carries the
              prompt's prefill and is not timed; the second's several drafts are the first
              evidence of alpha and c), then one plain step times the one-token pass; a line
              through the measured sizes prices the others. k = 0 (an
              autoregressive step) when no k is predicted to pay; then a probe step with k = 1
              keeps the estimates fresh, `probe_every` plain steps after the last draft, a wait
              that doubles (up to PROBE_WAIT_MAX) each time a probe leaves plain decoding ahead,
              as specviz.engine.load's rule does. Where no k would pay even if every draft were
              accepted, alpha cannot change the choice: the rule waits PROBE_WAIT_MAX plain steps
              at once, a probe then only re-times the costs. Plain steps judge no draft: the
              evidence waits, it does not fade; and a probe's draft forward, which first catches
              up on the tokens the plain steps wrote, is not taken for the draft's cost.
Each step's choice and its reason are recorded in step_finished.info.
"""

from __future__ import annotations

from specviz.analysis import theory


class AdaptiveK:
    PROBE_WAIT_MAX = 64  # plain steps between probes, at most (the cost rule)

    def __init__(self, rule: str = "cost", k_start: int = 4, k_max: int = 12,
                 confidence: float = 0.4, probe_every: int = 8, memory: float = 0.8):
        self.rule, self.k, self.k_max = rule, k_start, k_max
        self.confidence, self.probe_every, self.memory = confidence, probe_every, memory
        self.accepted = self.evaluated = 0.0
        self.draft_s = self.draft_n = 0.0
        self.by_rows: dict = {}  # tokens verified in a pass -> [forgetful sum of seconds, of passes]
        self.steps_since_draft = 0
        self.probe_wait = probe_every  # the cost rule: plain steps before its next probe
        self.probed = False  # the cost rule's last choice was a probe

    @property
    def stop_below(self):
        return self.confidence if self.rule == "confidence" else None

    def choose(self) -> tuple:
        """(k for the next step, why)."""
        if self.rule == "heuristic":
            return self.k, f"heuristic: +2 after a full accept, -1 after a rejection -> k={self.k}"
        if self.rule == "confidence":
            return self.k_max, f"confidence: draft up to {self.k_max}, stop when q(x) < {self.confidence}"
        return self._cost_choice()

    def _cost_choice(self) -> tuple:
        if not self.evaluated or not self.draft_n or not self.by_rows:
            return self.k, f"cost: no measurements yet -> k={self.k}"
        if 1 not in self.by_rows:
            return 0, "cost: one plain step to time the one-token pass -> k=0"
        alpha = (self.accepted + 1) / (self.evaluated + 2)  # Laplace-smoothed running rate
        one = self.pass_seconds(1)
        c = (self.draft_s / self.draft_n) / one
        verify = lambda n: self.pass_seconds(n) / one  # noqa: E731
        k = theory.optimal_k(min(alpha, 0.999), c, self.k_max, verify_cost=verify)
        priced = f"V({max(k, 1) + 1})~{verify(max(k, 1) + 1):.2f}"
        why = f"cost: alpha~{alpha:.2f}, c~{c:.2f}, {priced} -> best k={k}"
        probed, self.probed = self.probed, False
        if k:
            self.probe_wait = self.probe_every
            return k, why
        if theory.optimal_k(0.999, c, self.k_max, verify_cost=verify) == 0:
            why += " (no k pays even if every draft were accepted)"
            self.probe_wait = self.PROBE_WAIT_MAX
        else:
            why += " (no k pays)"
            if probed:  # the probe left plain decoding ahead: wait longer for the next
                self.probe_wait = min(2 * self.probe_wait, self.PROBE_WAIT_MAX)
        if self.steps_since_draft >= self.probe_wait:
            self.probed = True
            return 1, why + f" (probe after {self.steps_since_draft} plain steps)"
        return 0, why

    def pass_seconds(self, rows: int) -> float:
        """A target pass over `rows` tokens, priced by the least-squares line through the mean time
        of each size measured in this run (never falling with rows; one size measured: flat)."""
        means = {n: s / c for n, (s, c) in self.by_rows.items()}
        if len(means) == 1:
            return next(iter(means.values()))
        xs, ys = list(means), list(means.values())
        x0, y0 = sum(xs) / len(xs), sum(ys) / len(ys)
        slope = max(0.0, sum((x - x0) * (y - y0) for x, y in zip(xs, ys)) / sum((x - x0) ** 2 for x in xs))
        return max(y0 + slope * (rows - x0), 1e-9)

    def update(self, drafted: int, accepted: int, evaluated: int, draft_time: float,
               draft_forwards: int, verify_time) -> None:
        m = self.memory  # exponential forgetting: recent judged drafts weigh more
        if evaluated:  # a plain step judges nothing: the evidence waits, it does not fade
            self.accepted, self.evaluated = m * self.accepted + accepted, m * self.evaluated + evaluated
        if verify_time is not None:  # None: the step's passes carried the prompt's prefill, not costs
            if draft_forwards and not self.steps_since_draft:  # not a probe catching up after plain steps
                self.draft_s, self.draft_n = m * self.draft_s + draft_time, m * self.draft_n + draft_forwards
            seconds, passes = self.by_rows.get(drafted + 1, (0.0, 0.0))  # the pass verified the drafts and one more
            self.by_rows[drafted + 1] = [m * seconds + verify_time, m * passes + 1]
        self.steps_since_draft = 0 if drafted else self.steps_since_draft + 1
        if self.rule == "heuristic" and drafted:
            self.k = min(self.k + 2, self.k_max) if accepted == drafted else max(1, self.k - 1)
