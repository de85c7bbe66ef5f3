from __future__ import annotations

import itertools
import os

import numpy as np
import pytest

from streaming_loader.tokenize import (
    PARALLELISM_VARIABLE,
    encode,
    load_tokenizer_spec,
    start_one_thread_tokenizing,
    stop_one_thread_tokenizing,
)

TEXTS = [
    "def add(a, b):\n    return a + b\n",
    "",
    "a document that mentions <|endoftext|> in its text",
    "naïve café, 東京, emoji 🙂 and\ttabs",
    "x" * 3000,
]


def test_encode_gives_encode_batchs_ids_flat_with_offsets(mixture):
    spec = load_tokenizer_spec(mixture.tokenizer)
    tokenizer = spec.load()
    expected = [e.ids for e in tokenizer.encode_batch(TEXTS, add_special_tokens=False)]

    flat, offsets = encode(tokenizer, TEXTS)

    assert flat.dtype == np.int32 and offsets.dtype == np.int64
    assert [flat[a:b].tolist() for a, b in itertools.pairwise(offsets)] == expected
    assert offsets[1] == offsets[2]  # the empty document has no tokens
    assert spec.eod_id not in flat  # a separator written in a document is text, not the separator


def test_encode_of_nothing_is_empty(mixture):
    flat, offsets = encode(load_tokenizer_spec(mixture.tokenizer).load(), [])
    assert len(flat) == 0 and offsets.tolist() == [0]


def test_one_thread_tokenizing_gives_the_same_ids(mixture, monkeypatch):
    tokenizer = load_tokenizer_spec(mixture.tokenizer).load()
    monkeypatch.delenv(PARALLELISM_VARIABLE, raising=False)
    pooled = encode(tokenizer, TEXTS * 20)
    start_one_thread_tokenizing()
    try:
        alone = encode(tokenizer, TEXTS * 20)
    finally:
        stop_one_thread_tokenizing()
    assert all(np.array_equal(a, b) for a, b in zip(pooled, alone, strict=True))


def test_one_thread_tokenizing_lasts_while_any_reader_runs(monkeypatch):
    monkeypatch.delenv(PARALLELISM_VARIABLE, raising=False)
    start_one_thread_tokenizing()
    start_one_thread_tokenizing()
    assert os.environ[PARALLELISM_VARIABLE] == "false"
    stop_one_thread_tokenizing()
    assert os.environ[PARALLELISM_VARIABLE] == "false"  # one reader still runs
    stop_one_thread_tokenizing()
    assert PARALLELISM_VARIABLE not in os.environ
    stop_one_thread_tokenizing()  # one stop too many changes nothing
    assert PARALLELISM_VARIABLE not in os.environ


def test_one_thread_tokenizing_leaves_the_users_choice_alone(monkeypatch):
    monkeypatch.setenv(PARALLELISM_VARIABLE, "true")
    start_one_thread_tokenizing()
    assert os.environ[PARALLELISM_VARIABLE] == "true"
    stop_one_thread_tokenizing()
    assert os.environ[PARALLELISM_VARIABLE] == "true"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"vocab_size": 258}, r"--vocab-size must be at least 259"),
        ({"max_bytes": 0}, r"--max-bytes must be at least 1"),
    ],
)
def test_tokenizer_training_refuses_settings_that_cannot_train(catalog, options, message):
    from lakehouse.errors import InputError
    from streaming_loader.tokenizer_train import train_tokenizer

    with pytest.raises(InputError, match=message):
        train_tokenizer(catalog, ["raw.none"], **{"vocab_size": 300, **options})
