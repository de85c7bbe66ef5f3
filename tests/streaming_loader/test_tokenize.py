from __future__ import annotations

import itertools

import numpy as np

from streaming_loader.tokenize import encode, load_tokenizer_spec

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
