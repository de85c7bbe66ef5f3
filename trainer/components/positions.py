"""Positions (``model.positions``): rotary embeddings (``rope``), the default, or none (NoPE,
Kazemnejad et al. 2023: the causal mask alone tells a token where it is).

A positions module gives, for a forward's ``position_ids``, what its ``rotate`` needs; attention
calls ``rotate`` on its queries and keys."""

from __future__ import annotations

import torch
from torch import nn

from trainer.components.names import POSITION_NAMES, registry


def rope_frequencies(head_dim: int, max_seq_len: int, theta: float) -> torch.Tensor:
    """Rotations for rotary position embeddings: ``[max_seq_len, head_dim // 2, 2]`` (cos, sin).

    Real cos/sin rather than complex numbers: torch.compile's inductor generates code for these.
    """
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    angles = torch.outer(torch.arange(max_seq_len, dtype=torch.float32), inv_freq)
    return torch.stack((angles.cos(), angles.sin()), dim=-1)


def apply_rope(x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    """Rotate ``x [B, T, H, D]`` by ``freqs [B or 1, T, D/2, 2]`` (positions already selected)."""
    pairs = x.float().reshape(*x.shape[:-1], -1, 2)
    real, imag = pairs[..., 0], pairs[..., 1]
    cos, sin = freqs[..., 0].unsqueeze(2), freqs[..., 1].unsqueeze(2)
    rotated = torch.stack((real * cos - imag * sin, real * sin + imag * cos), dim=-1)
    return rotated.flatten(3).type_as(x)


class Rotary(nn.Module):
    rotate = staticmethod(apply_rope)

    def __init__(self, head_dim: int, max_seq_len: int, theta: float) -> None:
        super().__init__()
        # Not a parameter and not saved: recomputed from the config, so checkpoints stay small.
        self.register_buffer("freqs", rope_frequencies(head_dim, max_seq_len, theta), persistent=False)

    def forward(self, seq: int, position_ids: torch.Tensor | None) -> torch.Tensor:
        return self.freqs[:seq].unsqueeze(0) if position_ids is None else self.freqs[position_ids]


def _unrotated(x: torch.Tensor, _positions: None) -> torch.Tensor:
    return x


class NoPositions(nn.Module):
    rotate = staticmethod(_unrotated)

    def __init__(self, head_dim: int, max_seq_len: int, theta: float) -> None:
        super().__init__()

    def forward(self, seq: int, position_ids: torch.Tensor | None) -> None:
        return None


POSITIONS: dict[str, type[nn.Module]] = registry(POSITION_NAMES, {"rope": Rotary, "none": NoPositions})


def build_positions(name: str, head_dim: int, max_seq_len: int, theta: float) -> nn.Module:
    return POSITIONS[name](head_dim, max_seq_len, theta)
