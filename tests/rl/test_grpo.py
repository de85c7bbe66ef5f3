"""The GRPO loss against a loop over samples and tokens in plain Python, on hand-made logits."""

from __future__ import annotations

import math

import pytest
import torch

from rl.grpo import group_advantages, grpo_loss, token_logprobs
from rl.learner import pack

VOCAB = 7


def _log_softmax(row: list[float], temperature: float) -> list[float]:
    scaled = [v / temperature for v in row]
    top = max(scaled)
    total = top + math.log(sum(math.exp(v - top) for v in scaled))
    return [v - total for v in scaled]


def _advantages(rewards: list[list[float]], eps: float) -> list[list[float]]:
    out = []
    for group in rewards:
        mean = sum(group) / len(group)
        std = math.sqrt(sum((r - mean) ** 2 for r in group) / (len(group) - 1))
        out.append([(r - mean) / (std + eps) for r in group])
    return out


def reference_loss(new, old, ref, rows, rewards, *, clip_eps, beta, temperature, eps) -> float:
    """DeepSeekMath's GRPO objective written out: for each completion, the mean over its tokens of
    the clipped surrogate and β·k3 KL; then the mean over completions."""
    advantages = [a for group in _advantages(rewards, eps) for a in group]
    losses = []
    for i, (prompt, completion) in enumerate(rows):
        terms = []
        for j, token in enumerate(completion):
            position = len(prompt) - 1 + j  # the logits that predict completion token j
            lp = _log_softmax(new[i][position], temperature)[token]
            lp_old = _log_softmax(old[i][position], temperature)[token]
            lp_ref = _log_softmax(ref[i][position], temperature)[token]
            ratio = math.exp(lp - lp_old)
            clipped = min(max(ratio, 1 - clip_eps), 1 + clip_eps)
            surrogate = min(ratio * advantages[i], clipped * advantages[i])
            kl = math.exp(lp_ref - lp) - (lp_ref - lp) - 1
            terms.append(-surrogate + beta * kl)
        losses.append(sum(terms) / len(terms))
    return sum(losses) / len(losses)


def _case(seed: int):
    generator = torch.Generator().manual_seed(seed)
    groups, samples = 3, 4
    rows = []
    for _ in range(groups * samples):
        prompt = torch.randint(0, VOCAB, (int(torch.randint(1, 5, (1,), generator=generator)),), generator=generator)
        completion = torch.randint(
            0, VOCAB, (int(torch.randint(1, 6, (1,), generator=generator)),), generator=generator
        )
        rows.append((prompt.tolist(), completion.tolist()))
    rewards = torch.rand(groups, samples, generator=generator)
    rewards[1] = torch.tensor([0.0, 1.0, 1.0, 0.0])
    tokens, mask = pack(rows)
    shape = (len(rows), tokens.shape[1], VOCAB)
    new = torch.randn(shape, generator=generator)
    old = new + 0.3 * torch.randn(shape, generator=generator)  # far enough for some ratios to be clipped
    ref = new + 0.5 * torch.randn(shape, generator=generator)
    return rows, rewards, tokens, mask, new, old, ref


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize(("clip_eps", "beta", "temperature"), [(0.2, 0.04, 1.0), (0.1, 0.5, 0.7), (0.3, 0.0, 1.3)])
def test_loss_matches_the_loop_over_samples_and_tokens(seed, clip_eps, beta, temperature):
    rows, rewards, tokens, mask, new, old, ref = _case(seed)
    eps = 1e-4
    advantages = group_advantages(rewards.double(), eps).flatten()
    logprobs = [token_logprobs(x.double(), tokens, temperature) for x in (new, old, ref)]
    parts = grpo_loss(*logprobs, advantages, mask, clip_eps, beta)
    expected = reference_loss(
        new.tolist(), old.tolist(), ref.tolist(), rows, rewards.tolist(),
        clip_eps=clip_eps, beta=beta, temperature=temperature, eps=eps,
    )  # fmt: skip
    assert parts.loss.item() / len(rows) == pytest.approx(expected, rel=1e-9, abs=1e-12)
    assert parts.tokens.item() == sum(len(c) for _, c in rows)
    assert 0 < parts.clipped.item() < parts.tokens.item()  # the case exercises both sides of the clip


def test_padding_and_prompt_positions_do_not_count():
    _, rewards, tokens, mask, new, old, ref = _case(3)
    advantages = group_advantages(rewards).flatten()
    base = grpo_loss(*(token_logprobs(x, tokens) for x in (new, old, ref)), advantages, mask, 0.2, 0.1).loss
    noisy = [x.clone() for x in (new, old, ref)]
    for x in noisy:
        unscored = x[:, :-1][mask == 0]  # the logits of prompt and padding positions (mask is [B, T - 1])
        x[:, :-1][mask == 0] = unscored + 100 * torch.randn(unscored.shape)
        x[:, -1] += 100.0  # the last position scores nothing
    assert grpo_loss(*(token_logprobs(x, tokens) for x in noisy), advantages, mask, 0.2, 0.1).loss == base


def test_advantages_are_normalised_within_each_group():
    rewards = torch.tensor([[0.0, 1.0, 1.0, 0.0], [0.5, 0.5, 0.5, 0.5], [1.0, 0.0, 0.0, 0.0]])
    advantages = group_advantages(rewards, eps=1e-6)
    half = math.sqrt(3) / 2  # the sample std of two 0s and two 1s is 1/sqrt(3)
    assert advantages[0].tolist() == pytest.approx([-half, half, half, -half], rel=1e-5)
    assert advantages[1].tolist() == [0.0] * 4  # no sample better than another: no signal
    assert advantages[2].sum().item() == pytest.approx(0.0, abs=1e-6)
    assert advantages[2][0] > 0 > advantages[2][1]
    assert torch.allclose(group_advantages(rewards + 3.0), group_advantages(rewards))  # only differences count
    with pytest.raises(ValueError, match="at least 2"):
        group_advantages(torch.tensor([[1.0]]))


def test_kl_is_zero_and_has_no_gradient_when_the_policy_is_the_reference():
    rows, _, tokens, mask, new, _, _ = _case(4)
    logits = new.clone().requires_grad_(True)
    logprobs = token_logprobs(logits, tokens)
    parts = grpo_loss(logprobs, logprobs.detach(), logprobs.detach(), torch.zeros(len(rows)), mask, 0.2, 1.0)
    assert parts.kl.item() == 0.0 and parts.loss.item() == 0.0
    parts.loss.backward()
    assert logits.grad.abs().max().item() == 0.0

    moved = token_logprobs(new + 0.5 * torch.randn(new.shape), tokens)
    assert grpo_loss(moved, moved, logprobs.detach(), torch.zeros(len(rows)), mask, 0.2, 1.0).kl.item() > 0


def test_a_clipped_token_gets_no_gradient_and_the_first_update_is_the_policy_gradient():
    logprobs = torch.tensor([[0.0, 0.0]], requires_grad=True)
    old = torch.tensor([[-1.0, 0.0]])  # ratio e on the first token, past 1 + ε; 1 on the second
    mask = torch.ones(1, 2)
    parts = grpo_loss(logprobs, old, None, torch.tensor([1.0]), mask, clip_eps=0.2, kl_beta=0.0)
    parts.loss.backward()
    assert logprobs.grad[0, 0] == 0.0  # a positive advantage is not pushed further past the clip
    assert logprobs.grad[0, 1] == pytest.approx(-0.5)  # -A · ratio / length
    assert parts.clipped.item() == 1
