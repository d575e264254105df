"""The proposal a drafter hands to the verifier."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import torch


@dataclass
class Proposal:
    tokens: list  # drafted token ids x_1..x_n (n <= k; fewer at EOS)
    probs: Optional[torch.Tensor]  # (n, V) draft distributions q_1..q_n, warped like the target's
    forwards: int = 0  # draft-model forward passes spent
    seconds: float = 0.0
    sources: list = field(default_factory=list)  # optional per-token provenance dicts

    def __len__(self) -> int:
        return len(self.tokens)
