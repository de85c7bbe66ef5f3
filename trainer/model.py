"""A Llama-style decoder: RMSNorm, rotary embeddings, SwiGLU, causal SDPA attention.

Written here rather than imported because it is small, and the trainer needs to control its
initialisation (seeded) and its block structure (FSDP shards per block). Generation passes a
``KVCache`` (``trainer/kv_cache.py``); training never does, and without one every forward is the
training path as it always was.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from trainer.config import ModelConfig

if TYPE_CHECKING:
    from trainer.kv_cache import KVCache, LayerCache


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Normalise in float32 whatever the compute dtype: bf16 variance is too coarse.
        normed = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.type_as(x) * self.weight


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


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.n_heads, self.n_kv_heads = cfg.n_heads, cfg.kv_heads
        self.head_dim = cfg.dim // cfg.n_heads
        self.wq = nn.Linear(cfg.dim, cfg.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(cfg.dim, self.n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(cfg.dim, self.n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(cfg.n_heads * self.head_dim, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor, freqs: torch.Tensor, cache: LayerCache | None = None) -> torch.Tensor:
        batch, seq, _ = x.shape
        q = self.wq(x).view(batch, seq, self.n_heads, self.head_dim)
        k = self.wk(x).view(batch, seq, self.n_kv_heads, self.head_dim)
        v = self.wv(x).view(batch, seq, self.n_kv_heads, self.head_dim)
        q, k = apply_rope(q, freqs), apply_rope(k, freqs)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        gqa = self.n_kv_heads != self.n_heads
        if cache is None:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
        else:
            # Generation: this step's queries over every cached position, this step's included.
            k, v = cache.update(k, v)
            out = F.scaled_dot_product_attention(
                q, k, v, attn_mask=cache.attn_mask, is_causal=cache.is_causal, enable_gqa=gqa
            )
        return self.wo(out.transpose(1, 2).reshape(batch, seq, -1))


class FeedForward(nn.Module):
    """SwiGLU: ``w2(silu(w1 x) * w3 x)``."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.w1 = nn.Linear(cfg.dim, cfg.hidden_dim, bias=False)
        self.w2 = nn.Linear(cfg.hidden_dim, cfg.dim, bias=False)
        self.w3 = nn.Linear(cfg.dim, cfg.hidden_dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.attention_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.attention = Attention(cfg)
        self.ffn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.feed_forward = FeedForward(cfg)

    def forward(self, x: torch.Tensor, freqs: torch.Tensor, cache: LayerCache | None = None) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x), freqs, cache)
        return x + self.feed_forward(self.ffn_norm(x))


class Transformer(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.output = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        # Not a parameter and not saved: recomputed from the config, so checkpoints stay small.
        self.register_buffer(
            "freqs", rope_frequencies(cfg.dim // cfg.n_heads, cfg.max_seq_len, cfg.rope_theta), persistent=False
        )

    def forward(
        self, tokens: torch.Tensor, position_ids: torch.Tensor | None = None, cache: KVCache | None = None
    ) -> torch.Tensor:
        """Logits ``[B, T, vocab]``. ``position_ids [B, T]`` restart positions per document.

        With ``cache`` (generation), ``tokens`` follow the positions already cached, at the
        ``position_ids`` that ``cache.extend`` returned for them."""
        seq = tokens.shape[1]
        freqs = self.freqs[:seq].unsqueeze(0) if position_ids is None else self.freqs[position_ids]
        h = self.tok_embeddings(tokens)
        for i, layer in enumerate(self.layers):
            h = layer(h, freqs) if cache is None else layer(h, freqs, cache.layer(i))
        return self.output(self.norm(h))

    @torch.no_grad()
    def init_weights(self, seed: int) -> None:
        """Seeded initialisation (normal, residual projections scaled by depth as in GPT-2/Llama)."""
        gen = torch.Generator().manual_seed(seed)
        std = 0.02
        for name, param in self.named_parameters():
            if name.endswith("norm.weight") or ".attention_norm." in name or ".ffn_norm." in name:
                param.fill_(1.0)
                continue
            scale = std / math.sqrt(2 * self.cfg.n_layers) if name.endswith(("wo.weight", "w2.weight")) else std
            param.copy_(torch.randn(param.shape, generator=gen) * scale)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def flops_per_token(self, seq_len: int) -> float:
        """Training FLOPs per token: 6N for the matmuls plus attention's 12·L·d·T (PaLM appendix B)."""
        n = self.num_params() - self.tok_embeddings.weight.numel()
        return 6 * n + 12 * self.cfg.n_layers * self.cfg.dim * seq_len
