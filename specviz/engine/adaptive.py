"""Choosing the draft length k at every step (k="auto").

Rules:
  heuristic   transformers' schedule: k + 2 after a fully accepted step, k - 1 (at least 1)
              after a rejection.
  confidence  draft up to k_max tokens but stop as soon as the draft's own q(x) of the token it
              just drafted falls below a threshold (transformers' assistant_confidence_threshold).
  cost        pick the k with the best predicted speedup, theory.optimal_k(alpha, c), from the
              running acceptance rate and the measured draft/target cost ratio c of this run.
              k = 0 (an autoregressive step) when no k is predicted to pay; then one probe step
              with k = 1 every `probe_every` steps keeps the estimates fresh.
Each step's choice and its reason are recorded in step_finished.info.
"""

from __future__ import annotations

from specviz.analysis import theory


class AdaptiveK:
    def __init__(self, rule: str = "cost", k_start: int = 4, k_max: int = 12,
                 confidence: float = 0.4, probe_every: int = 8, memory: float = 0.8):
        self.rule, self.k, self.k_max = rule, k_start, k_max
        self.confidence, self.probe_every, self.memory = confidence, probe_every, memory
        self.accepted = self.evaluated = 0.0
        self.draft_s = self.draft_n = self.verify_s = self.verify_n = 0.0
        self.steps_since_draft = 0

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
        if not self.evaluated or not self.draft_n or not self.verify_n:
            return self.k, f"cost: no measurements yet -> k={self.k}"
        alpha = (self.accepted + 1) / (self.evaluated + 2)  # Laplace-smoothed running rate
        c = (self.draft_s / self.draft_n) / (self.verify_s / self.verify_n)
        k = theory.optimal_k(min(alpha, 0.999), c, self.k_max)
        why = f"cost: alpha~{alpha:.2f}, c~{c:.2f} -> best k={k}"
        if k == 0 and self.steps_since_draft >= self.probe_every:
            return 1, why + f" (probe after {self.steps_since_draft} plain steps)"
        return k, why

    def update(self, drafted: int, accepted: int, evaluated: int, draft_time: float,
               draft_forwards: int, verify_time) -> None:
        m = self.memory  # exponential forgetting: recent steps weigh more
        self.accepted, self.evaluated = m * self.accepted + accepted, m * self.evaluated + evaluated
        if verify_time is not None:  # None: the step's passes carried the prompt's prefill, not costs
            if draft_forwards:
                self.draft_s, self.draft_n = m * self.draft_s + draft_time, m * self.draft_n + draft_forwards
            self.verify_s, self.verify_n = m * self.verify_s + verify_time, m * self.verify_n + 1
        self.steps_since_draft = 0 if drafted else self.steps_since_draft + 1
        if self.rule == "heuristic" and drafted:
            self.k = min(self.k + 2, self.k_max) if accepted == drafted else max(1, self.k - 1)
