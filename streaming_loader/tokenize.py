"""Tokenizers: loading any HF ``tokenizer.json``, finding its end-of-document token, encoding.

The loader identifies a tokenizer by the sha256 of its file; that, not its path, is part of the
stream's definition and of a checkpoint's lineage.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import os
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from lakehouse.errors import TokenizerError

# Where our trainer records how a tokenizer was made. tokenizers refuses unknown top-level keys
# in tokenizer.json but ignores them inside the model, so the record lives there.
METADATA_KEY = "factory"
# End-of-document tokens of common tokenizers, tried in order when none is named.
KNOWN_EOD_TOKENS = ("<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>", "<|eos|>")
# HF tokenizers reads this on every batch call to choose between its own thread pool and the
# calling thread; it has no per-call switch.
PARALLELISM_VARIABLE = "TOKENIZERS_PARALLELISM"


@dataclass(frozen=True)
class TokenizerSpec:
    """A tokenizer as the loader ships it to its readers: the file's text and what it needs of it."""

    text: str = field(repr=False)
    sha256: str
    eod_id: int
    eod_token: str
    vocab_size: int
    metadata: dict[str, Any] = field(default_factory=dict, compare=False)
    own_eod_token: str | None = None  # the one the file records or a well-known one (None: neither is in it)

    def load(self):
        return _tokenizer(self.sha256, self.text)

    @property
    def identity(self) -> str:
        """What a stream's definition records of its tokenizer: the file's hash, and the separator
        when it is not the file's own end-of-document token (``eod_token=`` named another)."""
        named = "" if self.eod_token == self.own_eod_token else f" eod={self.eod_token}"
        return f"sha256:{self.sha256}{named}"


def load_tokenizer_spec(path: str | Path, eod_token: str | None = None) -> TokenizerSpec:
    """Read a ``tokenizer.json`` and settle its end-of-document token (named, recorded or well known)."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise TokenizerError(f"cannot read tokenizer {path}: {exc.strerror or exc}") from exc
    text = raw.decode("utf-8", errors="replace")
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TokenizerError(f"{path} is not a tokenizer.json (not JSON: {exc})") from exc
    sha = hashlib.sha256(raw).hexdigest()
    try:
        tokenizer = _tokenizer(sha, text)
    except Exception as exc:  # tokenizers raises a bare Exception for a file it cannot parse
        raise TokenizerError(f"{path} is not a tokenizer.json that HF tokenizers can load: {exc}") from exc
    metadata = (document.get("model") or {}).get(METADATA_KEY) or {}
    own = [metadata.get("eod_token"), *KNOWN_EOD_TOKENS]
    own_token = next((c for c in own if c and tokenizer.token_to_id(c) is not None), None)
    candidates = [eod_token] if eod_token else own
    for candidate in filter(None, candidates):
        token_id = tokenizer.token_to_id(candidate)
        if token_id is not None:
            return TokenizerSpec(text, sha, token_id, candidate, tokenizer.get_vocab_size(), metadata, own_token)
    tried = ", ".join(c for c in candidates if c)
    raise TokenizerError(
        f"{path} has no end-of-document token ({tried} not in its vocabulary); name one with the eod_token argument"
    )


@functools.lru_cache(maxsize=4)
def _tokenizer(sha256: str, text: str):
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_str(text)
    # A document that happens to contain "<|endoftext|>" must not produce the separator.
    tokenizer.encode_special_tokens = True
    return tokenizer


# Text handed to the tokenizer at once. Its output for a batch (each token's id, string and
# masks, then a Python list of ids) is many times the batch's text (docs/loader.md, "Memory"), so
# a unit is encoded in pieces of this size: that memory stays a constant, not a multiple of the unit.
ENCODE_BATCH_BYTES = 1 << 20


def encode(
    tokenizer, texts: Sequence[str | bytes | memoryview], max_document_bytes: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Token ids of ``texts`` as one flat int32 array and ``len(texts) + 1`` offsets into it.

    A text longer than ``max_document_bytes`` (UTF-8) is tokenized in pieces of at most that
    size (``split_document``), its ids run on: the ids near each cut may differ from those of
    the whole text, but they are the same on every run. A text may be given as its UTF-8 bytes
    (a reader's view of a long document): only the piece being tokenized is then decoded."""
    if not texts:
        return np.zeros(0, dtype=np.int32), np.zeros(1, dtype=np.int64)
    arrays, counts, owners, batch, size = [], [], [], [], 0
    for owner, piece in itertools.chain(_pieces(texts, max_document_bytes), [(None, None)]):
        if batch and (piece is None or size + len(piece) > ENCODE_BATCH_BYTES):
            found = np.zeros(len(batch), dtype=np.int64)
            arrays.append(_encode_batch(tokenizer, batch, found))
            counts.append(found)
            batch, size = [], 0
        if piece is not None:
            batch.append(piece)
            owners.append(owner)
            size += len(piece)
    return _concatenate(arrays), _offsets(np.concatenate(counts), np.asarray(owners, dtype=np.int64), len(texts))


def _pieces(texts: Sequence[str | bytes | memoryview], limit: int | None) -> Iterator[tuple[int, str]]:
    """Each text's pieces (one, unless it is over ``limit`` bytes) with the text's index, made as taken."""
    for i, text in enumerate(texts):
        # A str of n characters holds at most 4n bytes of UTF-8: only those that might be over are split.
        if isinstance(text, str) and (not limit or len(text) * 4 <= limit):
            yield i, text
        else:
            for piece in split_document(text, limit or len(text) * 4):
                yield i, piece


def split_document(text: str | bytes | memoryview, limit: int) -> Iterator[str]:
    """``text`` in pieces of at most ``limit`` UTF-8 bytes, each cut after the last newline of its
    second half if it has one (tokens rarely cross a line), else at a character boundary; each
    piece decoded only when it is taken."""
    data = memoryview(text.encode("utf-8") if isinstance(text, str) else text)
    start = 0
    while len(data) - start > limit:
        end = start + limit
        newline = bytes(data[start + limit // 2 : end]).rfind(b"\n")
        cut = start + limit // 2 + newline + 1 if newline >= 0 else end
        while 0xC0 & data[cut] == 0x80:  # inside a character: back to its first byte
            cut -= 1
        yield str(data[start:cut], "utf-8")
        start = cut
    yield str(data[start:], "utf-8")


def _encode_batch(tokenizer, batch: list[str], counts: np.ndarray) -> np.ndarray:
    """The batch's ids, flat; each text's count written into ``counts``."""
    # encode_batch_fast gives the same ids as encode_batch without computing each token's
    # character offsets, which the loader never uses: 1.4-1.6 times the rate on the loader
    # benchmark's corpus (1.28-1.41 vs 1.88-2.03 CPU-s per million tokens on 2 threads).
    ids = [encoding.ids for encoding in tokenizer.encode_batch_fast(batch, add_special_tokens=False)]
    counts[:] = [len(i) for i in ids]
    return np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int32, count=int(counts.sum()))


def _concatenate(arrays: list[np.ndarray]) -> np.ndarray:
    return arrays[0] if len(arrays) == 1 else np.concatenate(arrays)


def _offsets(counts: np.ndarray, owners: np.ndarray, n_texts: int) -> np.ndarray:
    """Each text's first id: the pieces' counts summed per text."""
    offsets = np.zeros(n_texts + 1, dtype=np.int64)
    np.cumsum(np.bincount(owners, weights=counts, minlength=n_texts).astype(np.int64), out=offsets[1:])
    return offsets


# Readers that tokenize on their own thread, and whether the variable is ours to take back.
_one_thread = {"readers": 0, "ours": False}
_one_thread_lock = threading.Lock()


def start_one_thread_tokenizing() -> None:
    """From now until the matching ``stop_one_thread_tokenizing``, batch calls in this process
    encode on the calling thread, unless the user set ``TOKENIZERS_PARALLELISM`` themselves.

    The local backend's readers are several threads calling at once. There the tokenizer's own
    thread pool costs more than it gives, and threads each tokenizing on their own are faster
    than one caller into the pool (figures in docs/benchmarks.md). The ids are the same. The Ray
    backend's reader actors are threads of one process too, and do the same.

    The variable is process-wide, so it is set when the first reader starts and put back when
    the last one stops, never around each call: changing the environment while other threads
    may read it is not safe in C, so it changes as rarely as it can.
    """
    with _one_thread_lock:
        if _one_thread["readers"] == 0:
            _one_thread["ours"] = PARALLELISM_VARIABLE not in os.environ
            if _one_thread["ours"]:
                os.environ[PARALLELISM_VARIABLE] = "false"
        _one_thread["readers"] += 1


def stop_one_thread_tokenizing() -> None:
    with _one_thread_lock:
        if _one_thread["readers"] == 0:
            return
        _one_thread["readers"] -= 1
        if _one_thread["readers"] == 0 and _one_thread["ours"]:
            os.environ.pop(PARALLELISM_VARIABLE, None)
