"""Feed-forward layers (``model.feed_forward``): SwiGLU, the default, GELU or squared ReLU.

``w1`` is the input projection, ``w2`` the output one (scaled down at initialisation, as every
residual projection is), ``w3`` SwiGLU's gate."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from trainer.components.names import FEED_FORWARD_NAMES, registry


class SwiGLU(nn.Module):
    """``w2(silu(w1 x) * w3 x)`` (Llama)."""

    def __init__(self, dim: int, hidden_dim: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(dim, hidden_dim, bias=False)
        self.w2 = nn.Linear(hidden_dim, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden_dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Ungated(nn.Module):
    """``w2(activation(w1 x))``: the two-matrix feed-forward of the transformers before SwiGLU."""

    def __init__(self, dim: int, hidden_dim: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(dim, hidden_dim, bias=False)
        self.w2 = nn.Linear(hidden_dim, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(self.activation(self.w1(x)))

    @staticmethod
    def activation(x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


class GELU(Ungated):
    """GPT-2's, with the exact (erf) GELU."""

    @staticmethod
    def activation(x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x)


class SquaredReLU(Ungated):
    """``relu(x)²`` (Primer, So et al. 2021)."""

    @staticmethod
    def activation(x: torch.Tensor) -> torch.Tensor:
        return F.relu(x).square()


FEED_FORWARDS: dict[str, type[nn.Module]] = registry(
    FEED_FORWARD_NAMES, {"swiglu": SwiGLU, "gelu": GELU, "squared_relu": SquaredReLU}
)


def build_feed_forward(name: str, dim: int, hidden_dim: int) -> nn.Module:
    return FEED_FORWARDS[name](dim, hidden_dim)
