"""Bits per byte (``evals/likelihood.py``) against an independent computation: one forward per scored
token over the context the windows give it, and ``log_softmax`` of its last position.

A tiny model with seeded random weights (its rotary table 32 positions, so HumanEval's texts take
several windows) and a real byte-level BPE trained here as ``factory tokenizer train`` trains one.
The suites on a trained checkpoint are in test_samples.py."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from evals.likelihood import continuation_bits, token_bytes
from evals.suites.humaneval import problems
from streaming_loader.tokenize import TokenizerSpec, load_tokenizer_spec
from tests.evals.reference import reference_bits
from trainer.config import ModelConfig
from trainer.model import Transformer

CPU = torch.device("cpu")
MAX_SEQ_LEN = 32


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> TokenizerSpec:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    built = Tokenizer(models.BPE())
    built.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    built.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<|endoftext|>", "<|pad|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    built.train_from_iterator([p["prompt"] + p["canonical_solution"] for p in problems(40)], trainer)
    path = tmp_path_factory.mktemp("tokenizer") / "tokenizer.json"
    built.save(str(path))
    return load_tokenizer_spec(path)


@pytest.fixture(scope="module")
def model(tokenizer) -> Transformer:
    built = Transformer(ModelConfig(preset="tiny", vocab_size=tokenizer.vocab_size, max_seq_len=MAX_SEQ_LEN))
    built.init_weights(seed=11)
    return built.eval()


def test_token_bytes_add_up_to_the_texts_bytes(tokenizer):
    sizes = token_bytes(tokenizer)
    encoder = tokenizer.load()
    for text in ("def f(x):\n    return x\n", "café 中文 🙂 — naïve", problems(1)[0]["prompt"]):
        ids = encoder.encode(text, add_special_tokens=False).ids
        assert sum(sizes[i] for i in ids) == len(text.encode("utf-8"))
    assert sizes[tokenizer.eod_id] == 0 and len(sizes) == tokenizer.vocab_size


def test_a_continuation_on_a_token_boundary_is_scored_alone(model, tokenizer):
    encoder = tokenizer.load()
    prompt, solution = "def add(a, b):", " return a + b"
    prompt_ids = encoder.encode(prompt, add_special_tokens=False).ids
    solution_ids = encoder.encode(solution, add_special_tokens=False).ids
    assert encoder.encode(prompt + solution, add_special_tokens=False).ids == prompt_ids + solution_ids
    (scored,) = continuation_bits(model, tokenizer, [(prompt, solution)], CPU)
    # One forward over the whole text (it fits the context): the solution's tokens' log-probabilities.
    sequence = [tokenizer.eod_id, *prompt_ids, *solution_ids]
    with torch.no_grad():
        log_probs = F.log_softmax(model(torch.tensor([sequence[:-1]]))[0].double(), dim=-1)
    expected = -sum(log_probs[i - 1, sequence[i]].item() for i in range(len(prompt_ids) + 1, len(sequence)))
    assert scored.bits == pytest.approx(expected / math.log(2), rel=1e-6)
    assert scored.bytes == len(solution.encode()) and scored.tokens == len(solution_ids)
    assert scored.bits_per_byte == pytest.approx(scored.bits / scored.bytes)


def test_a_straddling_token_is_scored_with_its_bytes(model, tokenizer):
    # HumanEval's prompts end with a newline and solutions start with indentation: byte-level BPE
    # makes one token of the newline and the spaces after it.
    prompt, solution = 'def f(x):\n    """Twice x."""\n', "    return x * 2\n"
    encoder = tokenizer.load()
    encoding = encoder.encode(prompt + solution, add_special_tokens=False)
    straddling = next(i for i, (start, end) in enumerate(encoding.offsets) if end > len(prompt))
    start = encoding.offsets[straddling][0]
    assert start < len(prompt), "the example must straddle the boundary"
    (scored,) = continuation_bits(model, tokenizer, [(prompt, solution)], CPU)
    assert scored.bytes == len((prompt + solution)[start:].encode()) > len(solution.encode())
    assert scored.tokens == len(encoding.ids) - straddling
    expected = reference_bits(model, [tokenizer.eod_id, *encoding.ids], straddling + 1)
    assert scored.bits == pytest.approx(expected, rel=1e-6)


def test_long_texts_are_scored_in_windows_batched_or_not(model, tokenizer):
    chosen = problems(3)
    pairs = [(p["prompt"], p["canonical_solution"]) for p in chosen]
    encoder = tokenizer.load()
    lengths = [len(encoder.encode(p + s, add_special_tokens=False).ids) for p, s in pairs]
    assert min(lengths) > 4 * MAX_SEQ_LEN  # several windows each
    batched = continuation_bits(model, tokenizer, pairs, CPU, batch_rows=16)
    alone = [continuation_bits(model, tokenizer, [pair], CPU, batch_rows=1)[0] for pair in pairs]
    for (prompt, solution), ours, single in zip(pairs, batched, alone, strict=True):
        encoding = encoder.encode(prompt + solution, add_special_tokens=False)
        first = next(i for i, (_, end) in enumerate(encoding.offsets) if end > len(prompt))
        expected = reference_bits(model, [tokenizer.eod_id, *encoding.ids], first + 1)
        assert ours.bits == pytest.approx(expected, rel=1e-6) and single.bits == pytest.approx(expected, rel=1e-6)
        assert ours.bytes == single.bytes >= len(solution.encode())
        assert 0 < ours.bits_per_byte < 2 * math.log2(tokenizer.vocab_size)
    assert continuation_bits(model, tokenizer, pairs, CPU) == batched  # the same, bit for bit
