"""MinHash signatures and LSH bands, vectorised with numpy.

A signature is, for each of ``num_perm`` hash functions ``h_k(x) = (a_k * x + b_k) mod 2^64``
applied to a document's 32-bit shingle hashes, the top 32 bits of the smallest value: the
multiply-add-shift family, strongly universal for 32-bit keys and computed without a modulo.
Two documents agree on one entry with probability equal to the Jaccard similarity of their
shingle sets. Entries are cut into ``bands`` bands of ``rows`` rows; documents that agree on a
whole band become candidate duplicates.

Bands and rows are chosen from the threshold as datasketch does (``_optimal_param``): the pair
that minimises the weighted areas of false positives (under the S-curve left of the threshold)
and false negatives (above it, right of the threshold). datasketch weighs both 0.5; when every
candidate is verified afterwards, false positives cost only a check and the dedup job weighs
false negatives more (``dedup_stages.VERIFIED_FN_WEIGHT``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from lakehouse.errors import InputError
from pipelines.shingles import Shingled, mix64

SIGNATURE_DTYPE = np.dtype("<u4")  # little-endian on every machine: signatures are stored as bytes
_BAND_BASE = np.uint64(0x9E3779B97F4A7C15)


@dataclass(frozen=True)
class MinHashConfig:
    """How signatures are computed and cut into LSH bands."""

    threshold: float = 0.8  # Jaccard similarity from which two documents are duplicates
    num_perm: int = 128  # hash functions per signature
    bands: int | None = None  # LSH bands; with rows, overrides the choice made from the threshold
    rows: int | None = None  # signature entries per band
    seed: int = 1  # seeds the hash functions: signatures are comparable only under the same seed
    fn_weight: float = 0.5  # weight of false negatives (1 - it: of false positives) when choosing bands × rows

    def __post_init__(self) -> None:
        if not 0.0 < self.threshold < 1.0:
            raise InputError(f"threshold must be between 0 and 1 (exclusive), got {self.threshold}")
        if not 2 <= self.num_perm <= 1024:
            raise InputError(f"num_perm must be between 2 and 1024, got {self.num_perm}")
        if (self.bands is None) != (self.rows is None):
            raise InputError("give both --bands and --rows, or neither to choose them from the threshold")
        if self.bands is not None and (self.bands < 1 or self.rows < 1 or self.bands * self.rows > self.num_perm):
            raise InputError(
                f"bands × rows must be at most num_perm ({self.num_perm}) and both positive, "
                f"got {self.bands} × {self.rows}"
            )
        if not 0.0 < self.fn_weight < 1.0:
            raise InputError(f"the false-negative weight must be between 0 and 1 (exclusive), got {self.fn_weight}")
        if not 0 <= self.seed < 2**63:
            raise InputError(f"seed must be a non-negative 63-bit integer, got {self.seed}")

    @cached_property
    def band_rows(self) -> tuple[int, int]:
        """(bands, rows): as given, else chosen from the threshold."""
        if self.bands is not None:
            return self.bands, self.rows
        return optimal_bands(self.threshold, self.num_perm, self.fn_weight)

    @cached_property
    def permutations(self) -> tuple[np.ndarray, np.ndarray]:
        """The (a, b) of each hash function: a odd, both 64-bit, derived from the seed alone."""
        stream = _splitmix64(self.seed, 2 * self.num_perm)
        return stream[: self.num_perm] | np.uint64(1), stream[self.num_perm :]


def optimal_bands(threshold: float, num_perm: int, fn_weight: float = 0.5) -> tuple[int, int]:
    """The (bands, rows) minimising (1-w)·FP area + w·FN area of the LSH S-curve (datasketch's rule)."""
    s = np.linspace(0.0, 1.0, 4001)
    below, above = s <= threshold, s >= threshold
    best, best_error = (1, 1), float("inf")
    for bands in range(1, num_perm + 1):
        for rows in range(1, num_perm // bands + 1):
            p = 1.0 - (1.0 - s**rows) ** bands  # probability of becoming candidates at similarity s
            fp = np.trapezoid(p[below], s[below])
            fn = np.trapezoid(1.0 - p[above], s[above])
            error = (1.0 - fn_weight) * fp + fn_weight * fn
            if error < best_error - 1e-12:
                best, best_error = (bands, rows), error
    return best


def signatures(shingled: Shingled, cfg: MinHashConfig) -> np.ndarray:
    """The (documents × num_perm) uint32 signatures; rows of documents without shingles are all ones."""
    a, b = cfg.permutations
    out = np.full((shingled.n_docs, cfg.num_perm), np.iinfo(np.uint32).max, dtype=SIGNATURE_DTYPE)
    present = np.flatnonzero(shingled.counts())
    if len(present) == 0:
        return out
    starts = shingled.starts()[present]
    values = shingled.hashes.astype(np.uint64)
    scratch = np.empty_like(values)
    minima = np.empty((cfg.num_perm, len(present)), dtype=np.uint64)
    for k in range(cfg.num_perm):  # one pass per hash function; the arrays stay in cache
        np.multiply(values, a[k], out=scratch)
        scratch += b[k]
        np.minimum.reduceat(scratch, starts, out=minima[k])
    out[present] = (minima >> np.uint64(32)).T
    return out


def band_hashes(sigs: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """(documents × bands) int64: one hash of each band's ``rows`` signature entries."""
    acc = np.zeros((len(sigs), bands), dtype=np.uint64)
    view = sigs[:, : bands * rows].astype(np.uint64).reshape(len(sigs), bands, rows)
    for r in range(rows):
        acc *= _BAND_BASE
        acc += view[:, :, r]
    return mix64(acc).view(np.int64)


def estimated_similarity(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """Per row pair: the fraction of signature entries that agree (an estimate of Jaccard)."""
    return (left == right).mean(axis=1)


def _splitmix64(seed: int, count: int) -> np.ndarray:
    """``count`` 64-bit values of the splitmix64 sequence from ``seed``: the same on every platform."""
    mask = (1 << 64) - 1
    values, state = [], seed
    for _ in range(count):
        state = (state + 0x9E3779B97F4A7C15) & mask
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        values.append(z ^ (z >> 31))
    return np.array(values, dtype=np.uint64)
