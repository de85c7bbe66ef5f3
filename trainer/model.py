"""A decoder built from swappable components; by default Llama's: RMSNorm, rotary embeddings,
SwiGLU, causal SDPA attention, an output layer of its own.

Written here rather than imported because it is small, and the trainer needs to control its
initialisation (seeded) and its block structure (FSDP shards per block). The components are
chosen by name from the registries in ``trainer/components/`` (``model.norm``,
``model.feed_forward``, ``model.positions``, ``model.sliding_window``); ``model.qk_norm`` and
``model.tie_embeddings`` are how the parts are joined. Generation passes a ``KVCache``
(``trainer/kv_cache.py``); training never does, and without one every forward is the training
path as it always was.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from trainer.components.feedforward import build_feed_forward
from trainer.components.masks import training_mask
from trainer.components.norms import build_norm
from trainer.components.positions import POSITIONS, build_positions
from trainer.config import ModelConfig

if TYPE_CHECKING:
    from trainer.kv_cache import KVCache, LayerCache


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.n_heads, self.n_kv_heads = cfg.n_heads, cfg.kv_heads
        self.head_dim = cfg.dim // cfg.n_heads
        self.window = cfg.sliding_window
        self.wq = nn.Linear(cfg.dim, cfg.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(cfg.dim, self.n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(cfg.dim, self.n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(cfg.n_heads * self.head_dim, cfg.dim, bias=False)
        # QK-norm (OLMo 2, Qwen3): each head's queries and keys normalised before their positions
        # are applied. Off, an Identity: no weights, so the state dict is the one before QK-norm.
        self.q_norm = build_norm(cfg.norm, self.head_dim, cfg.norm_eps) if cfg.qk_norm else nn.Identity()
        self.k_norm = build_norm(cfg.norm, self.head_dim, cfg.norm_eps) if cfg.qk_norm else nn.Identity()
        self.rotate = POSITIONS[cfg.positions].rotate

    def forward(self, x: torch.Tensor, positions: torch.Tensor | None, cache: LayerCache | None = None) -> torch.Tensor:
        batch, seq, _ = x.shape
        q = self.q_norm(self.wq(x).view(batch, seq, self.n_heads, self.head_dim))
        k = self.k_norm(self.wk(x).view(batch, seq, self.n_kv_heads, self.head_dim))
        v = self.wv(x).view(batch, seq, self.n_kv_heads, self.head_dim)
        q, k = self.rotate(q, positions), self.rotate(k, positions)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        if cache is None:
            mask, causal = training_mask(seq, self.window, x.device)
        else:
            # Generation: this step's queries over every cached position, this step's included.
            k, v = cache.update(k, v)
            mask, causal = cache.attn_mask, cache.is_causal
        gqa = self.n_kv_heads != self.n_heads
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, enable_gqa=gqa)
        return self.wo(out.transpose(1, 2).reshape(batch, seq, -1))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.attention_norm = build_norm(cfg.norm, cfg.dim, cfg.norm_eps)
        self.attention = Attention(cfg)
        self.ffn_norm = build_norm(cfg.norm, cfg.dim, cfg.norm_eps)
        self.feed_forward = build_feed_forward(cfg.feed_forward, cfg.dim, cfg.hidden_dim)

    def forward(self, x: torch.Tensor, positions: torch.Tensor | None, cache: LayerCache | None = None) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x), positions, cache)
        return x + self.feed_forward(self.ffn_norm(x))


class Transformer(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = build_norm(cfg.norm, cfg.dim, cfg.norm_eps)
        self.output = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            # One matrix, registered under both names: the state dict holds both keys, the
            # optimizer (``parameters()``, which skips repeats) one parameter. FSDP2 shards the
            # embeddings and the output in the same (root) group, which tying needs.
            self.output.weight = self.tok_embeddings.weight
        self.positions = build_positions(cfg.positions, cfg.dim // cfg.n_heads, cfg.max_seq_len, cfg.rope_theta)

    def forward(
        self, tokens: torch.Tensor, position_ids: torch.Tensor | None = None, cache: KVCache | None = None
    ) -> torch.Tensor:
        """Logits ``[B, T, vocab]``. ``position_ids [B, T]`` restart positions per document.

        With ``cache`` (generation), ``tokens`` follow the positions already cached, at the
        ``position_ids`` that ``cache.extend`` returned for them."""
        positions = self.positions(tokens.shape[1], position_ids)
        h = self.tok_embeddings(tokens)
        for i, layer in enumerate(self.layers):
            h = layer(h, positions) if cache is None else layer(h, positions, cache.layer(i))
        return self.output(self.norm(h))

    @torch.no_grad()
    def init_weights(self, seed: int) -> None:
        """Seeded initialisation (normal, residual projections scaled by depth as in GPT-2/Llama);
        norms' scales 1 and biases 0. A tied matrix is drawn once, as the embeddings'."""
        gen = torch.Generator().manual_seed(seed)
        std = 0.02
        for name, param in self.named_parameters():
            module, _, kind = name.rpartition(".")
            if module.endswith("norm"):  # norm, attention_norm, ffn_norm, q_norm, k_norm
                param.fill_(1.0 if kind == "weight" else 0.0)
                continue
            scale = std / math.sqrt(2 * self.cfg.n_layers) if name.endswith(("wo.weight", "w2.weight")) else std
            param.copy_(torch.randn(param.shape, generator=gen) * scale)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def flops_per_token(self, seq_len: int) -> float:
        """Training FLOPs per token (PaLM appendix B): 6 per weight of each matrix product, the
        output layer's whether tied or not, plus attention's 12·L·d·K, K the keys a query scores:
        ``seq_len``, or the window where one is shorter. As in PaLM, a causal query is counted
        over the whole ``seq_len``, and the norms, activations and rotations (a few FLOPs per
        element, not per weight) are not counted."""
        matmul_weights = sum(m.weight.numel() for m in self.modules() if isinstance(m, nn.Linear))
        keys = min(seq_len, self.cfg.sliding_window or seq_len)
        return 6 * matmul_weights + 12 * self.cfg.n_layers * self.cfg.dim * keys
