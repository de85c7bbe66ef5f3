"""The dedup job's work on one Arrow batch at a time: plain functions that know nothing of Spark.

- ``document_features``: text → exact-duplicate key, length, shingle count, MinHash signature
  and LSH band hashes (signature and bands only for documents with enough shingles);
- ``compare_pairs``: pairs of documents → exact Jaccard of their shingle sets (from their texts)
  and/or the similarity their signatures estimate.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.exceptions import InputError
from pipelines.minhash import SIGNATURE_DTYPE, MinHashConfig, band_hashes, estimated_similarity, signatures
from pipelines.shingles import ShingleConfig, chunks, shingle, value_buffers
from pipelines.similarity import pair_jaccard

# With --verify every candidate pair is checked exactly, so a false positive costs one check
# while a false negative is a duplicate kept: bands × rows are chosen weighing false negatives
# 0.8 (for threshold 0.8 and 128 perms: 12 × 10, which finds a pair at J=0.9 with p=0.994,
# where datasketch's 0.5 gives 9 × 13 and p=0.93).
VERIFIED_FN_WEIGHT = 0.8


def default_minhash() -> MinHashConfig:
    return MinHashConfig(fn_weight=VERIFIED_FN_WEIGHT)


@dataclass(frozen=True)
class DedupConfig:
    """Everything that decides which documents are duplicates (recorded in ``factory.params``)."""

    shingles: ShingleConfig = field(default_factory=ShingleConfig)
    minhash: MinHashConfig = field(default_factory=default_minhash)
    verify: bool = True  # check candidate pairs with exact Jaccard before they join a cluster

    def __post_init__(self) -> None:
        if not isinstance(self.shingles, ShingleConfig) or not isinstance(self.minhash, MinHashConfig):
            raise InputError("DedupConfig needs a ShingleConfig and a MinHashConfig")

    def params(self) -> dict[str, object]:
        bands, rows = self.minhash.band_rows
        return {
            "shingle_unit": self.shingles.unit,
            "ngram": self.shingles.n,
            "min_shingles": self.shingles.min_shingles,
            "threshold": self.minhash.threshold,
            "num_perm": self.minhash.num_perm,
            "bands": bands,
            "rows": rows,
            "seed": self.minhash.seed,
            "fn_weight": self.minhash.fn_weight,
            "verify": self.verify,
        }


FEATURE_FIELDS = (
    ("_key", pa.string(), "string"),
    ("_exact", pa.binary(), "binary"),  # blake2b-128 of the normalised text
    ("_length", pa.int64(), "long"),  # UTF-8 bytes of the text: the longest document of a cluster is kept
    ("_shingles", pa.int32(), "int"),  # distinct shingles
    ("_signature", pa.binary(), "binary"),  # num_perm little-endian uint32; null below min_shingles
    ("_bands", pa.list_(pa.int64()), "array<long>"),  # one hash per band; null below min_shingles
)
FEATURES_SCHEMA = ", ".join(f"{name} {spark}" for name, _, spark in FEATURE_FIELDS)
_FEATURES_ARROW = pa.schema([(name, arrow) for name, arrow, _ in FEATURE_FIELDS])


def document_features(keys: pa.Array, texts: pa.Array, cfg: DedupConfig) -> pa.RecordBatch:
    """One row of features per document (``keys`` are passed through)."""
    bands, rows = cfg.minhash.band_rows
    exact, counts, sigs, band_rows = [], [], [], []
    for chunk in chunks(texts):  # ~1 MB at a time keeps numpy's temporaries in cache
        shingled = shingle(chunk, cfg.shingles)
        n = shingled.counts()
        exact.extend(shingled.exact)
        counts.append(n)
        eligible = n >= cfg.shingles.min_shingles
        sig = signatures(shingled, cfg.minhash)[eligible]
        sigs.append(sig)
        band_rows.append(band_hashes(sig, bands, rows))
    count = np.concatenate(counts) if counts else np.zeros(0, np.int64)
    eligible = count >= cfg.shingles.min_shingles
    sig = np.concatenate(sigs) if sigs else np.zeros((0, cfg.minhash.num_perm), SIGNATURE_DTYPE)
    band = np.concatenate(band_rows) if band_rows else np.zeros((0, bands), np.int64)
    columns = [
        keys,
        pa.array(exact, type=pa.binary()),
        pc.binary_length(texts).cast(pa.int64()),
        pa.array(count.astype(np.int32)),
        _rows_as_binary(sig, eligible),
        _rows_as_lists(band, eligible),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=_FEATURES_ARROW)


def compare_pairs(
    cfg: DedupConfig,
    left_text: pa.Array | None = None,
    right_text: pa.Array | None = None,
    left_signature: pa.Array | None = None,
    right_signature: pa.Array | None = None,
) -> dict[str, np.ndarray]:
    """For row i: ``jaccard`` (exact, from the texts) and/or ``estimate`` (from the signatures)."""
    out: dict[str, np.ndarray] = {}
    if left_text is not None:
        # Both sides in one call: one pass of the shingler over twice the rows.
        both = shingle(pa.concat_arrays([_plain(left_text), _plain(right_text)]), cfg.shingles)
        out["jaccard"] = pair_jaccard(*both.split(len(left_text)))
    if left_signature is not None:
        out["estimate"] = estimated_similarity(
            _binary_rows(left_signature, cfg.minhash.num_perm), _binary_rows(right_signature, cfg.minhash.num_perm)
        )
    return out


def _rows_as_binary(matrix: np.ndarray, present: np.ndarray) -> pa.Array:
    """Each row of ``matrix`` as the bytes of one value, placed where ``present`` is true (null elsewhere)."""
    width = matrix.dtype.itemsize * (matrix.shape[1] if matrix.ndim == 2 else 1)
    offsets = np.zeros(len(present) + 1, dtype=np.int32)
    np.cumsum(present * width, out=offsets[1:])
    data = np.ascontiguousarray(matrix).tobytes()
    validity = pa.array(present).buffers()[1] if not present.all() else None
    return pa.Array.from_buffers(
        pa.binary(), len(present), [validity, pa.py_buffer(offsets), pa.py_buffer(data)], int((~present).sum())
    )


def _rows_as_lists(matrix: np.ndarray, present: np.ndarray) -> pa.Array:
    """Each row of ``matrix`` as a list value where ``present`` is true (null elsewhere)."""
    offsets = np.zeros(len(present) + 1, dtype=np.int32)
    np.cumsum(present * matrix.shape[1], out=offsets[1:])
    return pa.ListArray.from_arrays(
        pa.array(offsets), pa.array(matrix.reshape(-1), type=pa.int64()), mask=pa.array(~present)
    )


def _binary_rows(values: pa.Array, num_perm: int) -> np.ndarray:
    """Signature bytes (no nulls) back to a (rows × num_perm) uint32 matrix."""
    data, offsets = value_buffers(_plain(values))
    if len(values) and not np.all(np.diff(offsets) == 4 * num_perm):
        raise ValueError("signatures of unexpected size: were they computed with another --num-perm?")
    return data.view(SIGNATURE_DTYPE).reshape(len(values), num_perm)


def _plain(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    return values
