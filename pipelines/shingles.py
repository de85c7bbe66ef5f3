"""Text → normalised text → shingle hashes, vectorised over Arrow string arrays.

Normalisation: lower case, ASCII digits folded to ``0``, every run of characters that are not
letters, digits, combining marks or ``_`` collapsed to one space, no leading or trailing space.
So ``self.max_len=80`` and ``SELF.MAX_LEN = 12`` both become ``self max_len 00``: a code-aware
split (identifiers stay whole) that also suits prose.

Shingles are word n-grams of that text (default) or character n-grams of it, hashed to 32 bits
and made unique per document. Everything runs as numpy/Arrow passes over a chunk of about a
megabyte of text at a time (small enough to stay in cache), never as a Python loop per token;
only the exact-duplicate key costs one ``blake2b`` call per document.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakehouse.errors import InputError

UNITS = ("word", "char")

# Text per processing chunk: big enough that numpy's per-call overhead vanishes, small enough
# that the temporaries (a few uint64 arrays of this many elements) stay in cache.
CHUNK_BYTES = 1 << 20

_SPACE = 0x20
# A non-ASCII character that is part of a word; the others separate words. ASCII is handled by
# _BYTE_MAP below.
_WORD_CHARACTER = r"^[\p{L}\p{N}\p{M}]$"


def _byte_map() -> np.ndarray:
    """ASCII letters → lower case, digits → '0', '_' kept, other ASCII → space; UTF-8 bytes kept."""
    table = np.full(256, _SPACE, dtype=np.uint8)
    for c in range(256):
        ch = chr(c)
        if c >= 0x80:
            table[c] = c  # part of a multi-byte character, classified by _blank_separators
        elif ch.isalpha() or ch == "_":
            table[c] = ord(ch.lower())
        elif ch.isdigit():
            table[c] = ord("0")
    return table


_BYTE_MAP = _byte_map()

# Hash constants. Fixed (not seeded): shingle hashes are part of what a signature means, so
# they must not change between runs, machines or versions.
_MIX1, _MIX2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_BYTE_BASE = np.uint64(0x100000001B3)
_GRAM_BASE = np.uint64(0x9E3779B97F4A7C15)
_powers = np.ones(1, dtype=np.uint64)


@dataclass(frozen=True)
class ShingleConfig:
    """How a document becomes a set of shingles."""

    unit: str = "word"  # "word": n-grams of normalised tokens; "char": n-grams of the normalised text's characters
    n: int = 5  # tokens (or characters) per shingle
    min_shingles: int = 5  # documents with fewer distinct shingles are deduplicated exactly only

    def __post_init__(self) -> None:
        if self.unit not in UNITS:
            raise InputError(f"shingle unit must be one of {', '.join(UNITS)}, got {self.unit!r}")
        if not 1 <= self.n <= 64:
            raise InputError(f"shingle size n must be between 1 and 64, got {self.n}")
        if self.min_shingles < 1:
            raise InputError(f"min_shingles must be at least 1, got {self.min_shingles}")


@dataclass
class Shingled:
    """The shingles of a batch of documents, as flat arrays sorted by document then hash."""

    n_docs: int
    doc: np.ndarray  # int64: the document (index in the batch) each shingle belongs to, ascending
    hashes: np.ndarray  # uint32: shingle hashes, unique and ascending within each document
    exact: list[bytes]  # per document: 16-byte key of its normalised text (exact-duplicate key)

    def counts(self) -> np.ndarray:
        """Distinct shingles per document."""
        return np.bincount(self.doc, minlength=self.n_docs)

    def split(self, n: int) -> tuple[Shingled, Shingled]:
        """The first ``n`` documents and the rest, each numbered from 0."""
        cut = int(np.searchsorted(self.doc, n))
        return (
            Shingled(n, self.doc[:cut], self.hashes[:cut], self.exact[:n]),
            Shingled(self.n_docs - n, self.doc[cut:] - n, self.hashes[cut:], self.exact[n:]),
        )

    def starts(self) -> np.ndarray:
        """Index of each document's first shingle (documents without shingles repeat the next start)."""
        return np.searchsorted(self.doc, np.arange(self.n_docs + 1))


def shingle(texts: pa.Array, cfg: ShingleConfig) -> Shingled:
    """Shingles and exact keys of every document in ``texts`` (a string array without nulls)."""
    texts = _as_string(texts)
    parts, base = [], 0
    for chunk in chunks(texts):
        norm, offsets = normalise(chunk)
        make = _word_hashes if cfg.unit == "word" else _char_hashes
        doc, h64 = make(norm, offsets, cfg.n)
        doc, h32 = _unique_per_doc(doc, h64)
        parts.append((doc + base, h32, _exact_keys(chunk, norm, offsets)))
        base += len(chunk)
    if not parts:
        return Shingled(0, np.zeros(0, np.int64), np.zeros(0, np.uint32), [])
    return Shingled(
        n_docs=len(texts),
        doc=np.concatenate([p[0] for p in parts]),
        hashes=np.concatenate([p[1] for p in parts]),
        exact=[key for p in parts for key in p[2]],
    )


def normalise(texts: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """The normalised UTF-8 bytes of all documents back to back, and each one's offsets (n+1)."""
    texts = _as_string(texts)
    ascii_only = pc.string_is_ascii(texts).to_numpy(zero_copy_only=False)
    if not ascii_only.all():
        # Unicode case and separators need Unicode tables: Arrow's kernels do those documents only.
        others = np.flatnonzero(~ascii_only)
        fixed = _blank_separators(_as_string(pc.utf8_lower(texts.take(others))))
        order = np.arange(len(texts))
        order[others] = len(texts) + np.arange(len(others))
        texts = pa.concat_arrays([texts, fixed]).take(order)
    data, offsets = value_buffers(texts)
    mapped = _BYTE_MAP[data]
    word = mapped != _SPACE
    # Keep word bytes and the first separator byte after a word byte of the same document:
    # runs of separators become one space and leading ones vanish.
    after_word = np.zeros_like(word)
    after_word[1:] = word[:-1]
    after_word[offsets[:-1][offsets[:-1] < len(word)]] = False
    keep = word | after_word
    norm = mapped[keep]
    norm_offsets = _cumulative(_segment_counts(keep, offsets))
    # A document that ended in separators now ends in one space: drop it.
    lengths = np.diff(norm_offsets)
    last = norm_offsets[1:][lengths > 0] - 1
    trailing = last[norm[last] == _SPACE]
    if len(trailing):
        keep_norm = np.ones(len(norm), dtype=bool)
        keep_norm[trailing] = False
        norm = norm[keep_norm]
        norm_offsets = _cumulative(_segment_counts(keep_norm, norm_offsets))
    return norm, norm_offsets


def _blank_separators(texts: pa.Array) -> pa.Array:
    """``texts`` with every byte of each non-ASCII separator character (not a letter, digit or
    mark) made a space; the ASCII pass of ``normalise`` then collapses them with the rest.

    Each distinct character is classified once, by RE2's Unicode classes: running the regex over
    whole documents cost ~18 ns a byte, and those documents are mostly ASCII.
    """
    data, offsets = value_buffers(texts)
    lead = np.flatnonzero(data >= 0xC0)  # first byte of every multi-byte character (valid UTF-8)
    if len(lead) == 0:
        return texts
    width = 2 + (data[lead] >= 0xE0).astype(np.int64) + (data[lead] >= 0xF0)
    key = np.zeros(len(lead), dtype=np.uint32)  # a character's bytes, packed
    for k in range(4):
        byte = data[np.minimum(lead + k, len(data) - 1)].astype(np.uint32)
        key = (key << np.uint32(8)) | np.where(k < width, byte, 0)
    distinct, which = np.unique(key, return_inverse=True)
    chars = pa.array([int(v).to_bytes(4, "big").rstrip(b"\0") for v in distinct], type=pa.binary()).cast(pa.string())
    separator = ~pc.match_substring_regex(chars, _WORD_CHARACTER).to_numpy(zero_copy_only=False)[which]
    starts, widths = lead[separator], width[separator]
    blanked = data.copy()
    blanked[np.repeat(starts, widths) + ranks_within(widths)] = _SPACE
    kind = np.int64 if pa.types.is_large_string(texts.type) else np.int32
    buffers = [None, pa.py_buffer(offsets.astype(kind)), pa.py_buffer(blanked)]
    return pa.Array.from_buffers(texts.type, len(texts), buffers)


def ranks_within(sizes: np.ndarray) -> np.ndarray:
    """0, 1, …, size-1 for each size, back to back: each element's index within its segment."""
    return np.arange(int(sizes.sum())) - np.repeat(np.cumsum(sizes) - sizes, sizes)


def _cumulative(lengths: np.ndarray) -> np.ndarray:
    """Offsets (n+1, starting at 0) of segments of the given lengths."""
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return offsets


def _segment_counts(mask: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """How many True values of ``mask`` lie within each [offsets[i], offsets[i+1])."""
    return np.diff(np.searchsorted(np.flatnonzero(mask), offsets))


def _word_hashes(norm: np.ndarray, offsets: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """64-bit hashes of every run of ``n`` consecutive tokens within a document, with its document."""
    word = norm != _SPACE
    starts = word.copy()
    starts[1:] &= ~word[:-1]
    lengths = np.diff(offsets)
    starts[offsets[:-1][lengths > 0]] = True  # a document's first token never continues the previous one
    token_pos = np.flatnonzero(starts)
    token_doc = np.searchsorted(offsets, token_pos, side="right") - 1
    compact = norm[word]
    token_offsets = np.empty(len(token_pos) + 1, dtype=np.int32)
    token_offsets[:-1] = np.flatnonzero(starts[word])
    token_offsets[-1] = len(compact)
    tokens = pa.Array.from_buffers(
        pa.binary(), len(token_pos), [None, pa.py_buffer(token_offsets), pa.py_buffer(compact)]
    )
    # Hash each distinct token once: code and prose repeat the same few thousand words.
    encoded = pc.dictionary_encode(tokens)
    token_hash = _hash_strings(encoded.dictionary)[encoded.indices.to_numpy()]
    return _windows(token_hash, token_doc, n)


def _char_hashes(norm: np.ndarray, offsets: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """64-bit hashes of every ``n`` consecutive bytes of normalised text within a document."""
    byte_doc = np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))
    return _windows(norm.astype(np.uint64) + np.uint64(1), byte_doc, n)


def _windows(values: np.ndarray, doc: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Hash every window of ``n`` consecutive values that lies inside one document."""
    count = len(values) - n + 1
    if count <= 0:
        return np.zeros(0, np.int64), np.zeros(0, np.uint64)
    acc = values[:count].copy()
    for k in range(1, n):  # Horner's rule over the window: sum of values[i+k] * base^(n-1-k)
        acc *= _GRAM_BASE
        acc += values[k : k + count]
    inside = doc[:count] == doc[n - 1 :]
    return doc[:count][inside], mix64(acc[inside])


def _unique_per_doc(doc: np.ndarray, h64: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Keep the top 32 bits of each hash and drop repeats within a document; sort by (doc, hash)."""
    # One int64 sort on (doc << 32 | hash): numpy sorts int64 far faster than uint64 here.
    key = (doc.astype(np.int64) << 32) | (h64 >> np.uint64(32)).astype(np.int64)
    key.sort()
    if len(key):
        fresh = np.empty(len(key), dtype=bool)
        fresh[0] = True
        np.not_equal(key[1:], key[:-1], out=fresh[1:])
        key = key[fresh]
    return key >> 32, (key & 0xFFFFFFFF).astype(np.uint32)


def _exact_keys(texts: pa.Array, norm: np.ndarray, offsets: np.ndarray) -> list[bytes]:
    """Per document: blake2b-128 of its normalised text, or of its raw text if that normalises to nothing."""
    raw, raw_offsets = value_buffers(texts)
    raw_view, norm_view = memoryview(raw), memoryview(norm)
    keys = []
    for i in range(len(offsets) - 1):
        start, end = offsets[i], offsets[i + 1]
        if end > start:
            keys.append(hashlib.blake2b(norm_view[start:end], digest_size=16).digest())
        else:  # only punctuation or whitespace: only byte-identical documents are duplicates
            digest = hashlib.blake2b(b"raw:", digest_size=16)
            digest.update(raw_view[raw_offsets[i] : raw_offsets[i + 1]])
            keys.append(digest.digest())
    return keys


def _hash_strings(strings: pa.Array) -> np.ndarray:
    """64-bit hash of each string of a binary/string array: a polynomial over its bytes, then mixed.

    A polynomial hash, because it vectorises (one multiply-add per byte, summed per string);
    the final mix spreads it over all 64 bits. It is not meant to resist crafted collisions.
    """
    data, offsets = value_buffers(strings)
    if len(strings) == 0:
        return np.zeros(0, np.uint64)
    lengths = np.diff(offsets)
    position = np.arange(len(data), dtype=np.int64) - np.repeat(offsets[:-1], lengths)
    terms = data.astype(np.uint64) * _power_table(int(lengths.max()))[position]
    sums = np.zeros(len(strings), dtype=np.uint64)
    nonempty = lengths > 0
    if len(data):
        sums[nonempty] = np.add.reduceat(terms, offsets[:-1][nonempty])
    return mix64(sums + lengths.astype(np.uint64))


def _power_table(size: int) -> np.ndarray:
    """``_BYTE_BASE ** i`` (mod 2^64) for i < size, grown on demand."""
    global _powers
    if len(_powers) < size:
        table = np.empty(max(size, 2 * len(_powers)), dtype=np.uint64)
        table[0] = 1
        np.cumprod(np.full(len(table) - 1, _BYTE_BASE, dtype=np.uint64), out=table[1:])  # wraps mod 2^64
        _powers = table
    return _powers


def mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: every input bit affects every output bit."""
    x = x ^ (x >> np.uint64(30))
    x *= _MIX1
    x ^= x >> np.uint64(27)
    x *= _MIX2
    x ^= x >> np.uint64(31)
    return x


def _as_string(texts: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks() if texts.num_chunks != 1 else texts.chunk(0)
    if texts.null_count:
        texts = pc.fill_null(texts, "")
    return texts


def value_buffers(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """The bytes of a string/binary array's values and their offsets (n+1, from 0), zero-copy."""
    if len(arr) == 0:
        return np.zeros(0, np.uint8), np.zeros(1, np.int64)
    large = pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type)
    _, offset_buf, data_buf = arr.buffers()[:3]
    offsets = np.frombuffer(offset_buf, dtype=np.int64 if large else np.int32)
    offsets = offsets[arr.offset : arr.offset + len(arr) + 1].astype(np.int64)
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    return data[offsets[0] : offsets[-1]], offsets - offsets[0]


def chunks(texts: pa.Array) -> Iterator[pa.Array]:
    """Slices of ``texts`` holding about CHUNK_BYTES of text each (a larger document alone)."""
    _, offsets = value_buffers(texts)
    start = 0
    while start < len(texts):
        end = int(np.searchsorted(offsets, offsets[start] + CHUNK_BYTES, side="right")) - 1
        end = max(end, start + 1)
        yield texts.slice(start, end - start)
        start = end
