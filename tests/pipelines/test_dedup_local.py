"""Dedup's decisions on the driver (``dedup_local``), without Spark: the distributed plan's rules."""

from __future__ import annotations

from pipelines.dedup_local import (
    BUCKET_ANCHORS,
    PAIRS_BUCKET_LIMIT,
    Collisions,
    candidate_pairs,
    collisions_of,
    components,
    decide,
    decision_stats,
    feature_counts,
)


def test_a_small_bucket_gives_all_pairs_of_its_representatives_and_a_large_one_anchors():
    rep = {"1b": "1a", "1a": "1a"}  # 1b is an exact copy of 1a: it stands as 1a
    assert candidate_pairs([["1c", "1b"], ["1a", "1b"], ["0x", "0y", "1c"]], rep) == [
        ("0x", "1c"), ("0y", "1c"), ("1a", "1c"),
    ]  # fmt: skip
    big = [f"1{i:03d}" for i in range(PAIRS_BUCKET_LIMIT + 1)]
    pairs = candidate_pairs([big], {})
    anchors = sorted(big)[:BUCKET_ANCHORS]
    assert {a for a, _ in pairs} == set(anchors)
    assert len(pairs) == sum(len(big) - 1 - i for i in range(BUCKET_ANCHORS))
    assert len(candidate_pairs([big[:PAIRS_BUCKET_LIMIT]], {})) == PAIRS_BUCKET_LIMIT * (PAIRS_BUCKET_LIMIT - 1) // 2


def test_components_are_named_by_their_smallest_node():
    assert components([("1d", "1c"), ("1b", "1c"), ("1x", "1y")]) == {
        "1b": "1b", "1c": "1b", "1d": "1b", "1x": "1x", "1y": "1x",
    }  # fmt: skip


def test_a_cluster_keeps_its_reference_else_its_longest_text_and_counts_as_the_spark_plan():
    collisions = Collisions(
        exact_groups=[["1a", "1b"], ["1e", "0e"]],
        buckets=[],
        length={"1a": 10, "1b": 30, "1c": 30, "1e": 5, "0e": 1},
    )
    rep = collisions.representatives()
    decisions = {d.key: d for d in decide(collisions, rep, [("1a", "1c")])}
    assert sorted(decisions) == ["1a", "1b", "1c", "1e"]  # the reference is never a row
    # 1b and 1c are equally long: the smaller key is kept; 1a is 1b's exact copy, 1c a near copy.
    assert (decisions["1b"].kept, decisions["1a"].match, decisions["1c"].match) == (True, "exact", "near")
    assert {d.cluster_id for k, d in decisions.items() if k != "1e"} == {"a"}
    assert decisions["1c"].duplicate_of == "b" and (decisions["1c"].rep, decisions["1c"].keeper_rep) == ("1c", "1a")
    assert (decisions["1e"].kept, decisions["1e"].against, decisions["1e"].duplicate_of) == (False, True, "e")
    stats = decision_stats(list(decisions.values()), documents=10, bytes_in=500, length=collisions.length)
    assert stats == {
        "documents-in": 10, "kept": 7, "exact-duplicates": 2, "near-duplicates": 1, "against-duplicates": 1,
        "clusters": 2, "largest-cluster": 3, "bytes-in": 500, "bytes-kept": 500 - 10 - 30 - 5,
    }  # fmt: skip


def test_collisions_are_the_exact_groups_and_shared_band_hashes_of_the_features():
    import pyarrow as pa

    from pipelines.dedup_stages import DedupConfig, document_features

    words = [f"word{i}" for i in range(60)]
    base = " ".join(words)
    texts = {
        "1a": base,
        "1b": base.upper(),  # normalises to 1a's text: exact group
        "1c": " ".join([*words[:-1], "changed"]),  # near 1a: shares bands
        "0d": " ".join(reversed(words)),
        "1e": "too short",  # no bands: exact dedup only
        "1f": "too short",
    }
    keys = pa.array(list(texts))
    features = pa.Table.from_batches([document_features(keys, pa.array(list(texts.values())), DedupConfig())])
    got = collisions_of(features)

    rows = features.to_pylist()
    exact: dict[bytes, set[str]] = {}
    buckets: dict[tuple[int, int], set[str]] = {}
    for row in rows:
        exact.setdefault(row["_exact"], set()).add(row["_key"])
        for band, value in enumerate(row["_bands"] or []):
            buckets.setdefault((band, value), set()).add(row["_key"])
    shared = sorted(sorted(group) for group in buckets.values() if len(group) > 1)
    assert sorted(sorted(group) for group in got.exact_groups) == [["1a", "1b"], ["1e", "1f"]]
    assert sorted(sorted(group) for group in got.buckets) == shared
    assert any(set(group) >= {"1a", "1c"} for group in got.buckets)
    assert got.length == {key: len(texts[key].encode()) for group in got.exact_groups + got.buckets for key in group}
    counts = feature_counts(features)
    assert counts == {"all": 6, "bytes": sum(len(t.encode()) for t in texts.values()), "inputs": 5,
                      "input_bytes": sum(len(t.encode()) for k, t in texts.items() if k[0] == "1"), "short": 2}  # fmt: skip
