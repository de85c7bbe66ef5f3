"""Normalisation and shingling, checked against a plain-Python reference of the same rules."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest
import regex

from lakehouse.errors import InputError
from pipelines import shingles
from pipelines.shingles import ShingleConfig, normalise, shingle

TEXTS = [
    "def add(self, x=10):\n    return self.total + x  # sum\n",
    "  Leading and trailing separators...  ",
    "Hello, World!  HELLO world",
    "snake_case_name = CamelCaseName[12345]",
    "Ünïcödé Straße — “quoted” ΕΛΛΗΝΙΚΑ naïve café 42",
    "",
    "...!!!   ",
    "a\tb\nc\r\nd",
    "x" * 70000,  # a token longer than the first power table
    "数据 去重 测试 日本語のテキスト",
    # Non-ASCII separators (no-break and em spaces, CJK and Greek punctuation, emoji, a 4-byte
    # symbol) inside, between and around words; marks and other scripts' digits stay in words.
    "—lead «x»\u00a0y\u2003z。終わり、次;😀emoji😀🎉x tail…",
    "e\u0301 combining ٣٤٥ ½ ² ǅ ÇAĞRI 𝔘𝔫𝔦",
    "——",
]


def reference_tokens(text: str) -> list[str]:
    """The normalisation rules, written the obvious way."""
    folded = regex.sub(r"[0-9]", "0", text.lower())
    return [t for t in regex.split(r"[^\p{L}\p{N}\p{M}_]+", folded) if t]


def decoded(texts: list[str]) -> list[str]:
    norm, offsets = normalise(pa.array(texts))
    return [bytes(norm[offsets[i] : offsets[i + 1]]).decode() for i in range(len(texts))]


def test_normalisation_follows_the_rules():
    assert decoded(TEXTS) == [" ".join(reference_tokens(t)) for t in TEXTS]
    assert decoded(["self.max_len=80", "SELF.MAX_LEN = 12"]) == ["self max_len 00", "self max_len 00"]


def test_word_shingles_are_the_distinct_ngrams_of_a_document():
    for n in (1, 3, 5):
        got = shingle(pa.array(TEXTS), ShingleConfig(n=n))
        for i, text in enumerate(TEXTS):
            tokens = reference_tokens(text)
            grams = {tuple(tokens[k : k + n]) for k in range(len(tokens) - n + 1)}
            assert got.counts()[i] == len(grams), (n, text[:40])


def test_char_shingles_are_the_distinct_byte_ngrams_of_the_normalised_text():
    got = shingle(pa.array(TEXTS), ShingleConfig(unit="char", n=4))
    for i, text in enumerate(TEXTS):
        norm = " ".join(reference_tokens(text)).encode()
        assert got.counts()[i] == len({norm[k : k + 4] for k in range(len(norm) - 3)})


def test_windows_never_cross_documents():
    got = shingle(pa.array(["a b c", "d e f"]), ShingleConfig(n=3))
    assert got.counts().tolist() == [1, 1]
    assert shingle(pa.array(["a b c d e f"]), ShingleConfig(n=3)).counts().tolist() == [4]


def test_a_document_shingles_the_same_in_any_batch_and_chunking(monkeypatch):
    rng = random.Random(0)
    words = ["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta", "iota", "kappa"]
    texts = [" ".join(rng.choice(words) for _ in range(rng.randint(0, 300))) for _ in range(60)] + TEXTS
    alone = [shingle(pa.array([t]), ShingleConfig()) for t in texts]
    monkeypatch.setattr(shingles, "CHUNK_BYTES", 500)  # many chunks per batch
    together = shingle(pa.array(texts), ShingleConfig())
    starts = together.starts()
    for i, single in enumerate(alone):
        assert together.hashes[starts[i] : starts[i + 1]].tolist() == single.hashes.tolist()
        assert together.exact[i] == single.exact[0]
    assert (np.diff(together.doc) >= 0).all()


def test_string_kinds_and_nulls_are_accepted():
    plain = shingle(pa.array(TEXTS[:4]), ShingleConfig(n=2))
    large = shingle(pa.array(TEXTS[:4], type=pa.large_string()), ShingleConfig(n=2))
    chunked = shingle(pa.chunked_array([TEXTS[:2], TEXTS[2:4]]), ShingleConfig(n=2))
    for other in (large, chunked):
        assert other.hashes.tolist() == plain.hashes.tolist() and other.exact == plain.exact
    with_null = shingle(pa.array(["a b c", None]), ShingleConfig(n=2))
    assert with_null.counts().tolist() == [2, 0]


def test_exact_keys_ignore_case_digits_punctuation_and_spacing_only():
    keys = shingle(
        pa.array(["Hello, World 2024!", "hello   world 1999", "hello world!!", "hello there world", "{", "}", "{"]),
        ShingleConfig(),
    ).exact
    assert keys[0] == keys[1]
    assert keys[0] != keys[2] and keys[0] != keys[3]
    # Text that normalises to nothing is only equal to the same bytes.
    assert keys[4] != keys[5] and keys[4] == keys[6]
    assert all(len(k) == 16 for k in keys)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"unit": "line"}, "unit"), ({"n": 0}, "between 1 and 64"), ({"min_shingles": 0}, "at least 1")],
)
def test_bad_config_is_refused(kwargs, message):
    with pytest.raises(InputError, match=message):
        ShingleConfig(**kwargs)
