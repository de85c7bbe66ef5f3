"""The model with a KV cache: left-padded rows fed a prompt, then one token a step, give the logits
the plain forward gives each row alone."""

from __future__ import annotations

import pytest
import torch

from tests.trainer.variants import COMPONENTS
from trainer.config import ModelConfig
from trainer.kv_cache import KVCache, left_padded
from trainer.model import Transformer

VOCAB = 97


def _model(n_kv_heads: int, **components) -> Transformer:
    model = Transformer(
        ModelConfig(preset="tiny", vocab_size=VOCAB, max_seq_len=32, n_kv_heads=n_kv_heads, **components)
    )
    model.init_weights(seed=3)
    return model.eval()


@pytest.mark.parametrize("component", ["default", *COMPONENTS])  # the window (5) bites: rows reach 18 tokens
@pytest.mark.parametrize("n_kv_heads", [0, 2])  # 4 query heads over 4 or 2 key/value heads
@pytest.mark.parametrize("lengths", [(5, 5, 5), (3, 12, 7)])  # without and with padding
@torch.no_grad()
def test_cached_steps_give_the_logits_of_the_whole_sequence(component, n_kv_heads, lengths):
    model, generator, steps = _model(n_kv_heads, **COMPONENTS.get(component, {})), torch.Generator().manual_seed(0), 6
    prompts = [torch.randint(0, VOCAB, (n,), generator=generator).tolist() for n in lengths]
    following = torch.randint(0, VOCAB, (len(lengths), steps), generator=generator)
    cache = KVCache(model.cfg, len(lengths), max(lengths) + steps, device=torch.device("cpu"), dtype=torch.float32)
    tokens, valid = left_padded(prompts)
    logits = [model(tokens, cache.extend(valid), cache)[:, -1]]
    for step in range(steps):
        new = following[:, step : step + 1]
        logits.append(model(new, cache.extend(torch.ones_like(new, dtype=torch.bool)), cache)[:, -1])
    for r, prompt in enumerate(prompts):
        alone = model(torch.tensor([prompt + following[r].tolist()]))[0, len(prompt) - 1 :]
        torch.testing.assert_close(torch.stack([step[r] for step in logits]), alone, rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match="holds"):
        cache.extend(torch.ones(len(lengths), 1, dtype=torch.bool))


@torch.no_grad()
def test_rows_kept_go_on_as_before_and_padding_never_turns_into_nan():
    model = _model(n_kv_heads=2)
    prompts = [[1, 2, 3], [4, 5, 6, 7, 8, 9, 10, 11], [12]]
    cache = KVCache(model.cfg, 3, 10, device=torch.device("cpu"), dtype=torch.float32)
    tokens, valid = left_padded(prompts)
    first = model(tokens, cache.extend(valid), cache)
    assert not first.isnan().any() and not cache.keys.isnan().any()
    cache.keep([2, 0])  # the long row finishes: the others' padding is left
    assert cache.padded
    new = torch.tensor([[20], [21]])
    after = model(new, cache.extend(torch.ones_like(new, dtype=torch.bool)), cache)[:, -1]
    for row, prompt, token in ((0, prompts[2], 20), (1, prompts[0], 21)):
        alone = model(torch.tensor([[*prompt, token]]))[0, -1]
        torch.testing.assert_close(after[row], alone, rtol=0, atol=1e-5)


@torch.no_grad()
def test_a_prefill_without_padding_is_the_training_forward_bit_for_bit():
    """Prompts of one length take the causal kernel training takes: the first step's logits are
    exactly the reference's (which runs the plain forward), not only close."""
    model = _model(n_kv_heads=2)
    tokens = torch.randint(0, VOCAB, (3, 16), generator=torch.Generator().manual_seed(5))
    cache = KVCache(model.cfg, 3, 16, device=torch.device("cpu"), dtype=torch.float32)
    assert torch.equal(model(tokens, cache.extend(torch.ones_like(tokens, dtype=torch.bool)), cache), model(tokens))


@torch.no_grad()
def test_the_cache_applies_the_window_past_its_length():
    """Past the window the cache may not take the kernels' unmasked paths: a row's first token,
    out of every later token's window, changes none of their cached logits."""
    model = _model(n_kv_heads=0, n_layers=1, sliding_window=4)
    logits = []
    for first in (1, 2):
        cache = KVCache(model.cfg, 1, 12, device=torch.device("cpu"), dtype=torch.float32)
        tokens = torch.tensor([[first, 7, 8, 9, 10, 11]])
        steps = [model(tokens, cache.extend(torch.ones_like(tokens, dtype=torch.bool)), cache)[0]]
        for token in (12, 13, 14):
            steps.append(model(torch.tensor([[token]]), cache.extend(torch.ones(1, 1, dtype=torch.bool)), cache)[0])
        logits.append(torch.cat(steps))
    assert not torch.equal(logits[0][:4], logits[1][:4])  # positions 0-3 see the first token
    assert torch.equal(logits[0][4:], logits[1][4:])  # the rest, prefill and one-token steps, do not
