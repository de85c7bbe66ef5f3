"""The GRPO objective (Shao et al., 2024, "DeepSeekMath", section 4.1): the few tensor operations of it.

Written here rather than taken from TRL: TRL's ``GRPOTrainer`` trains Hugging Face models through
accelerate, with its own generation and checkpoints, while the policy here is the trainer's own
``Transformer`` sharded by our FSDP2 wrapping and saved as our DCP checkpoints (exact resume). The
objective itself is a few lines; ``tests/rl/test_grpo.py`` holds it to a loop over samples and tokens.

For each task, G completions ``o_i`` are sampled and rewarded ``r_i``. Their advantage is the
reward normalised within the group, ``A_i = (r_i - mean(r)) / (std(r) + eps)`` (the sample std,
as TRL computes it), given to every token of ``o_i``. Per completion token ``t``:

    ratio_t = π(o_t) / π_old(o_t)
    pg_t    = -min(ratio_t · A_i, clip(ratio_t, 1 - ε, 1 + ε) · A_i)
    kl_t    = π_ref(o_t) / π(o_t) - log(π_ref(o_t) / π(o_t)) - 1     (the k3 estimator, always >= 0)
    loss    = mean over completions of (mean over its tokens of pg_t + β · kl_t)

Prompt and padding positions are masked out. π_old is the policy that sampled the completions
(the ratio is 1 on the first update of a batch, and the clip acts on the later ones), π_ref the
frozen starting checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def group_advantages(rewards: torch.Tensor, eps: float = 1e-4) -> torch.Tensor:
    """``[groups, G]`` rewards → ``[groups, G]`` advantages, normalised within each group (row).

    A group whose rewards are all equal gets advantage 0: it says nothing about which
    completion was better."""
    if rewards.shape[-1] < 2:
        raise ValueError("group-relative advantages need at least 2 samples per task")
    mean = rewards.mean(dim=-1, keepdim=True)
    std = rewards.std(dim=-1, keepdim=True)
    return (rewards - mean) / (std + eps)


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Log-probability of each next token: ``logits [B, T, V]`` at position t scores ``tokens[:, t + 1]``.

    Returns ``[B, T - 1]``, in float32 at least (bf16 logits are too coarse for ratios). Logits are
    divided by the sampling temperature, so the probabilities are those the completions were drawn
    from (without top-p's truncation)."""
    precise = logits[:, :-1].to(torch.promote_types(logits.dtype, torch.float32))
    scaled = precise / (temperature if temperature > 0 else 1.0)
    return torch.log_softmax(scaled, dim=-1).gather(-1, tokens[:, 1:].unsqueeze(-1)).squeeze(-1)


@dataclass
class LossParts:
    loss: torch.Tensor  # sum over the completions of their token-mean objective (divide by their count)
    kl: torch.Tensor  # sum over the completions of their token-mean KL to the reference
    clipped: torch.Tensor  # completion tokens whose ratio was clipped
    tokens: torch.Tensor  # completion tokens counted


def grpo_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_eps: float,
    kl_beta: float,
) -> LossParts:
    """The GRPO objective summed over completions (rows), each row's tokens averaged.

    ``logprobs``, ``old_logprobs``, ``ref_logprobs``, ``mask``: ``[B, T]``, aligned on the tokens
    scored; ``mask`` 1 on completion tokens. ``advantages``: ``[B]``. Summed, not averaged, over
    rows: the caller divides by the number of completions in the whole global batch, so the
    gradient does not depend on how rows were split over ranks and micro-batches."""
    scored = mask > 0
    # Unscored positions are set to 0 first, not multiplied by the mask afterwards: their exp()
    # may overflow, and inf · 0 would make the loss (and every gradient) NaN.
    logprobs, old_logprobs = logprobs.where(scored, 0.0), old_logprobs.where(scored, 0.0)
    mask = mask.to(logprobs.dtype)
    ratio = torch.exp(logprobs - old_logprobs)
    advantage = advantages.unsqueeze(-1)
    unclipped = ratio * advantage
    clipped = torch.clamp(ratio, 1 - clip_eps, 1 + clip_eps) * advantage
    per_token = -torch.minimum(unclipped, clipped)
    if ref_logprobs is not None:
        log_ref_ratio = ref_logprobs.where(scored, 0.0) - logprobs
        kl = torch.exp(log_ref_ratio) - log_ref_ratio - 1
    else:
        kl = torch.zeros_like(per_token)
    per_token = per_token + kl_beta * kl
    lengths = mask.sum(dim=-1).clamp(min=1)
    loss = ((per_token * mask).sum(dim=-1) / lengths).sum()
    kl_sum = ((kl * mask).sum(dim=-1) / lengths).sum().detach()
    was_clipped = ((clipped < unclipped) & scored).sum().detach()
    return LossParts(loss, kl_sum, was_clipped, mask.sum().detach())
