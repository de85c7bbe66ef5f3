"""Learning-rate schedule: linear warm-up, then cosine decay to a floor."""

from __future__ import annotations

import math
from collections.abc import Callable

from trainer.config import OptimConfig


def warmup_cosine(optim: OptimConfig, total_steps: int) -> Callable[[int], float]:
    """The LR multiplier after ``step`` scheduler steps (LambdaLR's contract)."""
    warmup = optim.warmup_steps
    floor = optim.min_lr_ratio

    def factor(step: int) -> float:
        # LambdaLR asks for step 0 at construction: the first optimizer step then uses 1/warmup.
        if warmup and step < warmup:
            return (step + 1) / warmup
        progress = min(1.0, (step - warmup) / max(1, total_steps - warmup))
        return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))

    return factor
