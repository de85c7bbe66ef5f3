"""The dedup job's per-batch functions, without Spark."""

from __future__ import annotations

import pyarrow as pa
import pytest

from pipelines.dedup_stages import DedupConfig, KeyedShingles, compare_pairs, document_features
from pipelines.minhash import MinHashConfig, band_hashes, signatures
from pipelines.shingles import ShingleConfig, shingle

LONG = "the quick brown fox jumps over the lazy dog while the cat sleeps on the warm mat " * 3


def test_features_carry_keys_lengths_and_bands_only_for_long_enough_documents():
    cfg = DedupConfig(shingles=ShingleConfig(min_shingles=5))
    texts = pa.array([LONG, "too short here", "Ünïcode text, longer than five words for sure, yes"])
    batch = document_features(pa.array(["1a", "1b", "1c"]), texts, cfg)
    rows = batch.to_pylist()
    assert [r["_key"] for r in rows] == ["1a", "1b", "1c"]
    assert [r["_length"] for r in rows] == [len(t.encode()) for t in texts.to_pylist()]
    assert rows[1]["_shingles"] == 0 and rows[1]["_bands"] is None  # exact dedup only
    bands, band_rows = cfg.minhash.band_rows
    expected = band_hashes(signatures(shingle(texts.slice(0, 1), cfg.shingles), cfg.minhash), bands, band_rows)
    assert rows[0]["_bands"] == expected[0].tolist() and len(rows[2]["_bands"]) == bands
    assert rows[0]["_exact"] == shingle(pa.array([LONG.upper()]), cfg.shingles).exact[0]


def test_pairs_are_compared_exactly_and_estimated():
    cfg = DedupConfig(minhash=MinHashConfig(num_perm=256))
    edited = LONG.replace("lazy", "sleepy", 1)
    got = compare_pairs(cfg, pa.array([LONG, LONG]), pa.array([edited, "nothing in common at all here"]), estimate=True)
    left, right = shingle(pa.array([LONG]), cfg.shingles), shingle(pa.array([edited]), cfg.shingles)
    a, b = set(left.hashes.tolist()), set(right.hashes.tolist())
    assert got["jaccard"][0] == pytest.approx(len(a & b) / len(a | b)) and got["jaccard"][1] == 0.0
    assert abs(got["estimate"][0] - got["jaccard"][0]) < 0.1 and got["estimate"][1] < 0.05
    assert "estimate" not in compare_pairs(cfg, pa.array([LONG]), pa.array([LONG]))


def test_keyed_shingles_give_compare_pairs_values_with_each_text_shingled_once():
    cfg = DedupConfig()
    texts = {
        "1a": LONG,
        "1b": LONG.replace("lazy", "sleepy", 1),
        "1c": LONG.replace("warm", "cold").replace("cat", "dog"),
        "0d": "Ünïcode text, longer than five words for sure, yes " * 2,
    }
    pairs = [("1a", "1b"), ("1b", "1c"), ("0d", "1a"), ("1a", "1c"), ("1a", "1b")]
    keyed = KeyedShingles(cfg, texts)
    expected = compare_pairs(
        cfg, pa.array([texts[a] for a, _ in pairs]), pa.array([texts[b] for _, b in pairs]), estimate=True
    )
    assert keyed.jaccard(pairs).tolist() == expected["jaccard"].tolist()  # bit for bit: the tables must not change
    assert keyed.estimate(pairs).tolist() == expected["estimate"].tolist()
