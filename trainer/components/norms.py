"""Normalisations (``model.norm``): RMSNorm, the default, or LayerNorm."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from trainer.components.names import NORM_NAMES, registry


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Normalise in float32 whatever the compute dtype: bf16 variance is too coarse.
        normed = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.type_as(x) * self.weight


class LayerNorm(nn.Module):
    """Mean and variance, a scale and a bias (GPT-2's). Not torch's ``nn.LayerNorm``, so that it
    normalises in float32 under autocast as ``RMSNorm`` does and both families name their
    weights alike (``weight``, ``bias``)."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        normed = F.layer_norm(x.float(), x.shape[-1:], eps=self.eps)
        return normed.type_as(x) * self.weight + self.bias


NORMS: dict[str, type[nn.Module]] = registry(NORM_NAMES, {"rmsnorm": RMSNorm, "layernorm": LayerNorm})


def build_norm(name: str, dim: int, eps: float) -> nn.Module:
    return NORMS[name](dim, eps)
