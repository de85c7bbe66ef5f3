"""Keys and values kept between generation steps, so a new token costs one position's forward.

Generation only (``evals/generate.py``): training never passes a cache, and ``Transformer.forward``
without one is the training path, untouched.

A batch's rows are left-padded: prompts of different lengths end at the same column, so one write
column serves every row and each step appends one column for all of them. ``valid`` marks the
padding, which attention masks out, and each row's positions count from its own first real token,
so a padded row sees exactly what it would see alone. Storage is allocated once for ``capacity``
columns: growing it step by step would copy the whole cache every token. A sliding window
(``model.sliding_window``) is applied to the cached columns by the rule training applies
(``trainer/components/masks.py``): a row's real tokens are consecutive columns, so columns apart
are positions apart.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from trainer.components.masks import allowed_keys
from trainer.config import ModelConfig


class KVCache:
    """Every layer's keys and values for ``batch`` rows, up to ``capacity`` positions."""

    def __init__(
        self, cfg: ModelConfig, batch: int, capacity: int, *, device: torch.device, dtype: torch.dtype
    ) -> None:
        shape = (cfg.n_layers, batch, cfg.kv_heads, capacity, cfg.dim // cfg.n_heads)
        self.keys = torch.zeros(shape, device=device, dtype=dtype)
        self.values = torch.zeros(shape, device=device, dtype=dtype)
        self.valid = torch.zeros(batch, capacity, device=device, dtype=torch.bool)  # False: padding or unwritten
        self.capacity = capacity
        self.window = cfg.sliding_window
        self.length = 0  # columns written, this step's included
        self.start = 0  # the first column of the step being run
        self.padded = False
        # What this step's attention takes, the same for every layer: set by ``extend``.
        self.attn_mask: torch.Tensor | None = None
        self.is_causal = False

    def extend(self, valid: torch.Tensor) -> torch.Tensor:
        """Open the columns of the step about to run and return its tokens' positions ``[B, T]``.

        ``valid [B, T]`` is False where a new column is left padding (only a first step has any)."""
        new = valid.shape[1]
        if self.length + new > self.capacity:
            raise ValueError(f"the cache holds {self.capacity} positions; {self.length} + {new} asked")
        self.start, self.length = self.length, self.length + new
        self.valid[:, self.start : self.length] = valid
        self.padded = self.padded or not bool(valid.all())
        self.attn_mask, self.is_causal = self._mask()
        seen = self.valid[:, : self.length].cumsum(dim=1)[:, self.start :]
        return (seen - 1).clamp(min=0)  # a padding column's position is never attended to

    def layer(self, index: int) -> LayerCache:
        return LayerCache(self, index)

    def write(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store this step's ``k, v [B, H_kv, T, D]`` and return the layer's keys and values so far."""
        self.keys[layer, :, :, self.start : self.length] = k
        self.values[layer, :, :, self.start : self.length] = v
        return self.keys[layer, :, :, : self.length], self.values[layer, :, :, : self.length]

    def keep(self, rows: Sequence[int]) -> None:
        """Keep only ``rows`` (in that order): finished rows stop costing attention and memory."""
        index = torch.tensor(list(rows), dtype=torch.long, device=self.keys.device)
        self.keys = self.keys.index_select(1, index)
        self.values = self.values.index_select(1, index)
        self.valid = self.valid.index_select(0, index)
        self.padded = not bool(self.valid[:, : self.length].all())

    def _mask(self) -> tuple[torch.Tensor | None, bool]:
        if not self.padded and (not self.window or self.length <= self.window):
            if self.start == 0:
                return None, True  # a prefill without padding: the kernels' causal path, as in training
            if self.length - self.start == 1:
                return None, False  # one new token sees every cached one
        query = torch.arange(self.start, self.length, device=self.valid.device).unsqueeze(1)
        key = torch.arange(self.length, device=self.valid.device).unsqueeze(0)
        allowed = allowed_keys(query, key, self.window) & self.valid[:, None, : self.length]
        # A padding column attends to itself, so no query has every key masked: this torch's CPU
        # kernels give such a query 0, but a plain softmax gives NaN, and NaN in padding's keys and
        # values would reach real rows through 0 · NaN in the next layer.
        allowed |= key == query
        return allowed.unsqueeze(1), False  # [B, 1, T, length], broadcast over heads


class LayerCache:
    """One layer's view of a ``KVCache``: what that layer's attention writes and attends over."""

    def __init__(self, cache: KVCache, index: int) -> None:
        self.cache, self.index = cache, index

    @property
    def attn_mask(self) -> torch.Tensor | None:
        return self.cache.attn_mask

    @property
    def is_causal(self) -> bool:
        return self.cache.is_causal

    def update(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.cache.write(self.index, k, v)


def left_padded(rows: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids ``[B, T]`` of ``rows`` ended at the same column, and ``valid``, False on the padding."""
    width = max(map(len, rows))
    tokens = torch.zeros(len(rows), width, dtype=torch.long)
    valid = torch.zeros(len(rows), width, dtype=torch.bool)
    for r, ids in enumerate(rows):
        tokens[r, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
        valid[r, width - len(ids) :] = True
    return tokens, valid
