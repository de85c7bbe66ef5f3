"""An independent computation of bits per byte for the tests: one forward per scored token."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from trainer.model import Transformer


def reference_bits(model: Transformer, sequence: list[int], first_target: int) -> float:
    """-log2 p of ``sequence[first_target:]``, each token from its own forward over the tokens the
    windows give it: all before it while they fit, then at least half a context (the rule
    ``continuation_bits`` documents), the windows' ends moving on by half a context."""
    limit, stride = model.cfg.max_seq_len, model.cfg.max_seq_len // 2
    bits = 0.0
    for target in range(first_target, len(sequence)):
        end = min(len(sequence) - 1, limit)
        while target > end:
            end = min(len(sequence) - 1, end + stride)
        context = sequence[max(0, end - limit) : target]
        with torch.no_grad():
            logits = model(torch.tensor([context]))[0, -1].double()
        bits -= F.log_softmax(logits, dim=-1)[sequence[target]].item() / math.log(2)
    return bits
