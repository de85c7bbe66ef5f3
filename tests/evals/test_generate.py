"""Generation with the KV cache against the reference that recomputes the window at every step.

A tiny model with seeded random weights and a tokenizer of one character per token, so equal
texts are equal token ids. Its rotary table is 48 positions: the prompts range from 1 token to
past the table, and 30 new tokens take the 40-token prompt past it mid-generation. The real
checkpoint's case is in test_eval.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from evals.generate import _nucleus, complete_by_recomputing, generate, generate_tokens
from tests.trainer.variants import COMPONENTS
from trainer.config import ModelConfig
from trainer.model import Transformer

VOCAB, MAX_SEQ_LEN = 97, 48
CHARS = [chr(0x100 + i) for i in range(VOCAB)]
CPU = torch.device("cpu")
PROMPT_LENGTHS = (1, 4, 9, 23, 40, 70)


class _OneCharPerToken:
    def encode(self, text: str, add_special_tokens: bool = False) -> SimpleNamespace:
        return SimpleNamespace(ids=[CHARS.index(c) for c in text])

    def decode(self, ids: list[int]) -> str:
        return "".join(CHARS[i] for i in ids)


def _tokenizer(eod_id: int = -1) -> SimpleNamespace:
    """``eod_id`` -1: no end-of-document token, every row runs to ``max_new_tokens``."""
    encoder = _OneCharPerToken()
    return SimpleNamespace(load=lambda: encoder, eod_id=eod_id)


def _model(n_kv_heads: int = 0, **components) -> Transformer:
    cfg = ModelConfig(preset="tiny", vocab_size=VOCAB, max_seq_len=MAX_SEQ_LEN, n_kv_heads=n_kv_heads, **components)
    model = Transformer(cfg)
    model.init_weights(seed=3)
    return model.eval()


def _prompts() -> list[str]:
    generator = torch.Generator().manual_seed(1)
    return ["".join(CHARS[i] for i in torch.randint(0, VOCAB, (n,), generator=generator)) for n in PROMPT_LENGTHS]


def _reference(model, tokenizer, prompts, *, seeds=None, **settings) -> list[list[str]]:
    seeds = seeds or [0] * len(prompts)
    return [
        complete_by_recomputing(model, tokenizer, p, max_seq_len=MAX_SEQ_LEN, device=CPU, seed=s, **settings)
        for p, s in zip(prompts, seeds, strict=True)
    ]


@pytest.mark.parametrize("n_kv_heads", [0, 2])
@pytest.mark.parametrize(("samples", "max_new_tokens", "batch_rows"), [(1, 1, 16), (1, 12, 1), (2, 30, 4), (2, 30, 64)])
def test_greedy_output_is_the_references_token_for_token(n_kv_heads, samples, max_new_tokens, batch_rows):
    model, tokenizer, prompts = _model(n_kv_heads), _tokenizer(), _prompts()
    settings = {"samples": samples, "max_new_tokens": max_new_tokens}
    ours = generate(model, tokenizer, prompts, device=CPU, batch_rows=batch_rows, **settings)
    assert ours == _reference(model, tokenizer, prompts, **settings)
    assert [len(c) for completions in ours for c in completions] == [max_new_tokens] * samples * len(prompts)


@pytest.mark.parametrize("component", COMPONENTS)
def test_greedy_output_is_the_references_for_each_component(component):
    """Every swappable component generates with the cache as the window recomputation does; the
    sliding window (5 positions) bites on every prompt but the shortest."""
    model, tokenizer, prompts = _model(2, **COMPONENTS[component]), _tokenizer(), _prompts()
    settings = {"samples": 2, "max_new_tokens": 30}
    assert generate(model, tokenizer, prompts, device=CPU, batch_rows=4, **settings) == _reference(
        model, tokenizer, prompts, **settings
    )


def test_end_of_document_and_stop_strings_end_rows_as_in_the_reference():
    model, prompts = _model(), _prompts()
    unstopped = generate(model, _tokenizer(), prompts, samples=1, max_new_tokens=30, device=CPU)
    # The end-of-document token is one the model chooses for prompt 0 at step 8; the stop
    # strings are pieces of other prompts' completions.
    eod_id = CHARS.index(unstopped[0][0][8])
    stop = (unstopped[2][0][12:14], unstopped[4][0][20:22])
    tokenizer, settings = _tokenizer(eod_id), {"samples": 1, "max_new_tokens": 30, "stop": stop}
    ours = generate(model, tokenizer, prompts, device=CPU, batch_rows=3, **settings)
    assert ours == _reference(model, tokenizer, prompts, **settings)
    lengths = [len(c) for (c,) in ours]
    assert lengths[0] == 8 and 30 in lengths and len(set(lengths)) > 2  # rows ended at different steps
    assert all(s not in c for (c,) in ours for s in stop)


def test_the_tokens_of_a_completion_are_every_token_drawn_for_it():
    model, prompts = _model(), _prompts()
    unstopped = generate(model, _tokenizer(), prompts, samples=1, max_new_tokens=30, device=CPU)
    # As above: prompt 0 ends at the end-of-document token at step 8, prompt 2 at the stop string.
    eod_id, stop = CHARS.index(unstopped[0][0][8]), (unstopped[2][0][12:14],)
    tokenizer, settings = _tokenizer(eod_id), {"samples": 1, "max_new_tokens": 30, "stop": stop}
    sampled = [row[0] for row in generate_tokens(model, tokenizer, prompts, device=CPU, **settings)]
    assert [[c.text] for c in sampled] == generate(model, tokenizer, prompts, device=CPU, **settings)
    decode = tokenizer.load().decode
    assert sampled[0].tokens[-1] == eod_id and len(sampled[0].tokens) == 9  # drawn, though not in the text
    assert decode(sampled[0].tokens[:-1]) == sampled[0].text
    assert decode(sampled[2].tokens) == sampled[2].text + stop[0]  # the stop string's tokens too
    assert all(decode(c.tokens).startswith(c.text) and len(c.tokens) <= 30 for c in sampled)
    assert any(len(c.tokens) == 30 and decode(c.tokens) == c.text for c in sampled)  # ran to the limit


def test_sampled_output_is_seeded_and_the_references():
    # Token 5 ends a document: samples finish at different steps and their prompt's draws go on.
    model, tokenizer, prompts = _model(n_kv_heads=2), _tokenizer(eod_id=5), _prompts()
    seeds = [11, 12, 13, 14, 15, 16]
    settings = {"samples": 3, "max_new_tokens": 30, "temperature": 1.0}
    ours = generate(model, tokenizer, prompts, device=CPU, seeds=seeds, batch_rows=6, **settings)
    assert ours == _reference(model, tokenizer, prompts, seeds=seeds, **settings)
    assert any(len(c) < 30 for completions in ours for c in completions)
    # Each prompt draws from its own generator: other batches give the same output, other seeds another.
    assert generate(model, tokenizer, prompts, device=CPU, seeds=seeds, batch_rows=1, **settings) == ours
    assert generate(model, tokenizer, prompts, device=CPU, seeds=[s + 1 for s in seeds], **settings) != ours
    assert all(len(set(completions)) == 3 for completions in ours)  # a near-uniform model's samples differ


def test_top_p_keeps_the_fewest_most_likely_tokens_reaching_it():
    probabilities = torch.tensor([[0.0625, 0.5, 0.125, 0.3125]])
    assert _nucleus(probabilities, 0.8).tolist() == [[0.0, 0.5, 0.0, 0.3125]]
    assert _nucleus(probabilities, 0.8125).tolist() == [[0.0, 0.5, 0.0, 0.3125]]  # reached: the next is not needed
    assert _nucleus(probabilities, 0.82).tolist() == [[0.0, 0.5, 0.125, 0.3125]]
    assert _nucleus(probabilities, 0.1).tolist() == [[0.0, 0.5, 0.0, 0.0]]
    model, tokenizer, prompts = _model(), _tokenizer(), _prompts()
    greedy = generate(model, tokenizer, prompts, samples=2, max_new_tokens=12, device=CPU)
    sampled = generate(model, tokenizer, prompts, samples=2, max_new_tokens=12, device=CPU, temperature=1.0)
    narrow = generate(model, tokenizer, prompts, samples=2, max_new_tokens=12, device=CPU, temperature=1.0, top_p=1e-6)
    assert narrow == greedy != sampled  # only the most likely token is left to draw


def test_settings_that_cannot_work_are_refused():
    model, tokenizer = _model(), _tokenizer()
    with pytest.raises(ValueError, match="top_p"):
        generate(model, tokenizer, ["ĀĀ"], samples=1, max_new_tokens=1, device=CPU, temperature=1.0, top_p=0.0)
    with pytest.raises(ValueError, match="2 seeds for 1 prompts"):
        generate(model, tokenizer, ["ĀĀ"], samples=1, max_new_tokens=1, device=CPU, seeds=[1, 2])
    with pytest.raises(ValueError, match="max_new_tokens must be >= 1"):
        generate(model, tokenizer, ["ĀĀ"], samples=1, max_new_tokens=0, device=CPU)
    with pytest.raises(ValueError, match="temperature a number"):
        generate(model, tokenizer, ["ĀĀ"], samples=1, max_new_tokens=1, device=CPU, temperature=float("nan"))


@pytest.mark.parametrize("temperature", [1e-4, 1e-40, 1e-45, 1e-46, 1e-320])
def test_a_tiny_temperature_samples_the_most_likely_token(temperature):
    """Dividing the raw logits by 1e-40 overflows to inf, and softmax then gives NaN; 1e-46 is 0
    in float32, and the largest logit, made 0, divided by it is NaN (the playground's 500)."""
    model, tokenizer, prompts = _model(), _tokenizer(), _prompts()
    greedy = generate(model, tokenizer, prompts, samples=2, max_new_tokens=12, device=CPU)
    settings = {"samples": 2, "max_new_tokens": 12, "temperature": temperature}
    assert generate(model, tokenizer, prompts, device=CPU, **settings) == greedy
    assert _reference(model, tokenizer, prompts, **settings) == greedy
