"""Seeded randomness we define ourselves, so a stream never changes with a numpy release.

numpy keeps its bit generators stable but not the algorithms of ``Generator.permutation`` and
friends; the stream is a pure function of the seed, so every permutation here is "sort by a
splitmix64 hash of the index", which is fully specified by the code below.
"""

from __future__ import annotations

import hashlib
import struct

import numpy as np

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def derive_key(seed: int, tag: str, *parts: int) -> int:
    """A 64-bit key for one use of the seed (a file order, a block shuffle, a batch layout)."""
    packed = struct.pack(f"<Q{len(parts)}q", seed, *parts)
    return int.from_bytes(hashlib.blake2b(tag.encode() + b"\0" + packed, digest_size=8).digest(), "little")


def splitmix64(values: np.ndarray) -> np.ndarray:
    """The splitmix64 finaliser over uint64 values (wrapping arithmetic, as specified)."""
    z = values.astype(np.uint64) + _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


def permutation(key: int, n: int) -> np.ndarray:
    """A permutation of ``range(n)`` determined by ``key``."""
    with np.errstate(over="ignore"):
        hashes = splitmix64(np.uint64(key) + np.arange(n, dtype=np.uint64))
    return np.argsort(hashes, kind="stable")


def choice(key: int, n: int) -> int:
    """An integer in ``range(n)`` determined by ``key``."""
    with np.errstate(over="ignore"):
        return int(splitmix64(np.array([key], dtype=np.uint64))[0] % np.uint64(n))
