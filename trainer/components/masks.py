"""Which keys a query attends to (``model.sliding_window``): every earlier one (``0``, the
default), or the last ``W`` positions, its own included (Mistral's sliding window, and
transformers' ``sliding_window``, which counts the same way).

Training and the KV cache ask the same rule: ``training_mask`` for a whole sequence,
``allowed_keys`` for the cache's columns."""

from __future__ import annotations

import torch


def allowed_keys(query: torch.Tensor, key: torch.Tensor, window: int) -> torch.Tensor:
    """True where a query at column ``query`` may attend to the key at column ``key`` (broadcast)."""
    allowed = key <= query
    if window:
        allowed &= key > query - window
    return allowed


def training_mask(seq: int, window: int, device: torch.device) -> tuple[torch.Tensor | None, bool]:
    """``(attn_mask, is_causal)`` for ``scaled_dot_product_attention`` over ``seq`` positions.

    Without a window that bites, the kernels' own causal path: what training always took."""
    if not window or window >= seq:
        return None, True
    columns = torch.arange(seq, device=device)
    return allowed_keys(columns.unsqueeze(1), columns.unsqueeze(0), window), False
