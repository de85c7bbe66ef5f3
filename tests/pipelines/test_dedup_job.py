"""The dedup job on real Spark (local[2]) and a real SQLite Iceberg catalog."""

from __future__ import annotations

import json
import random
import sysconfig
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakehouse.catalog import ensure_table, load_table
from lakehouse.commit import find_run_snapshot, snapshot_stats
from lakehouse.errors import InputError, RunConflictError
from lakehouse.schemas import DOCUMENT_SCHEMA
from pipelines.dedup import BUCKET_ANCHORS, DedupOptions, dedup
from pipelines.dedup_stages import DedupConfig
from pipelines.minhash import MinHashConfig
from pipelines.shingles import shingle
from pipelines.similarity import agreement, exact_clusters, pair_jaccard
from tests.conftest import run_factory
from tests.pipelines.dedup_corpus import Planted, planted_corpus, write_table


def rows(catalog, name: str) -> list[dict]:
    table = catalog.load_table(tuple(name.split(".")))
    return sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["doc_id"])


def jaccard(cfg: DedupConfig, a: str, b: str) -> float:
    left, right = (shingle(pa.array([t]), cfg.shingles) for t in (a, b))
    return float(pair_jaccard(left, right)[0])


def test_planted_duplicates_are_found_kept_by_rule_and_explained(spark, catalog):
    corpus = planted_corpus()
    long_form = corpus.add("exact-long", "Some Text, with CASE and punctuation!! " * 20)
    short_form = corpus.add("exact-short", "some text with case and punctuation " * 20)
    tiny = [corpus.add(f"tiny-{i}", text) for i, text in enumerate(["x = 1", "X = 1;", "x = 22", "{", "}"])]
    snapshot_id = write_table(catalog, "raw.docs", corpus.docs)
    text_of = {d["doc_id"]: d["text"] for d in corpus.docs}
    cfg = DedupConfig()

    result = dedup(spark, catalog, DedupOptions(inputs=["raw.docs"], output="dedup.docs", run_id="planted"))

    clusters = {r["doc_id"]: r for r in rows(catalog, "dedup.docs_clusters")}
    kept = {r["doc_id"]: r for r in rows(catalog, "dedup.docs")}
    s = result.stats
    assert set(clusters) == set(text_of) and s["documents-in"] == len(text_of)
    assert s["kept"] + s["exact-duplicates"] + s["near-duplicates"] == s["documents-in"]
    assert set(kept) == {d for d, r in clusters.items() if r["kept"]} and len(kept) == s["kept"]
    assert list(next(iter(kept.values()))) == ["doc_id", "source", "text", "path", "lang", "n_bytes", "cluster_id"]

    # Each cluster: its id is its smallest doc_id; it keeps the longest text, then the smallest doc_id.
    members: dict[str, list[str]] = {}
    for doc_id, row in clusters.items():
        members.setdefault(row["cluster_id"], []).append(doc_id)
    for cluster_id, ids in members.items():
        assert cluster_id == min(ids)
        keeper = min(ids, key=lambda d: (-len(text_of[d].encode()), d))
        assert [d for d in ids if clusters[d]["kept"]] == [keeper]
        assert all(clusters[d]["duplicate_of"] == (None if d == keeper else keeper) for d in ids)
        assert all(clusters[d]["cluster_size"] == len(ids) for d in ids)
        assert kept[keeper]["cluster_id"] == cluster_id
    assert s["clusters"] == sum(len(ids) > 1 for ids in members.values())
    assert s["largest-cluster"] == max(len(ids) for ids in members.values())

    # Exact duplicates by normalised text; tiny documents only so; punctuation only by bytes.
    assert clusters[short_form]["duplicate_of"] == long_form and clusters[short_form]["match"] == "exact"
    assert (clusters[short_form]["similarity"], clusters[short_form]["jaccard"]) == (1.0, 1.0)
    assert clusters[tiny[0]]["duplicate_of"] == tiny[1] and clusters[tiny[0]]["match"] == "exact"  # both "x 0"
    assert all(clusters[d]["kept"] for d in tiny[1:])  # "x 00" differs; "{" and "}" are different bytes
    assert s["short-documents"] >= 5
    # The similarity recorded for a near duplicate is its own, to the document kept in its place.
    for doc_id, row in clusters.items():
        if row["match"] == "near":
            exact = jaccard(cfg, text_of[doc_id], text_of[row["duplicate_of"]])
            assert row["jaccard"] == pytest.approx(exact)
            assert abs(row["similarity"] - exact) < 0.2

    # Accuracy against brute force at the same threshold.
    ids = sorted(text_of)
    truth = exact_clusters([text_of[d] for d in ids], cfg.shingles, cfg.minhash.threshold)
    found = agreement(np.array([clusters[d]["cluster_id"] for d in ids]), truth)
    planted_j = {pair: jaccard(cfg, text_of[pair[0]], text_of[pair[1]]) for pair in corpus.pairs}
    clear = [pair for pair, j in planted_j.items() if j >= cfg.minhash.threshold + 0.1]
    recall = sum(clusters[a]["cluster_id"] == clusters[b]["cluster_id"] for a, b in clear) / len(clear)
    print(f"planted: {found}; recall of pairs with J ≥ 0.9: {recall:.4f} over {len(clear)}")
    assert len(clear) > 100 and any(j < 0.7 for j in planted_j.values())
    assert recall >= 0.95 and found.precision >= 0.95

    table = catalog.load_table(("dedup", "docs"))
    summary = table.current_snapshot().summary
    assert summary["factory.job"] == "dedup"
    assert json.loads(summary["factory.inputs"]) == [{"table": "raw.docs", "snapshot_id": snapshot_id}]
    params = json.loads(summary["factory.params"])
    assert (params["threshold"], params["num_perm"], params["bands"], params["rows"]) == (0.8, 128, 16, 8)
    assert snapshot_stats(table.current_snapshot()) == s

    again = dedup(spark, catalog, DedupOptions(inputs=["raw.docs"], output="dedup.docs", run_id="planted"))
    assert again.already_committed and again.stats == s
    assert len(table.refresh().snapshots()) == 1


def test_an_empty_input_gives_empty_snapshots_with_stats(spark, catalog):
    write_table(catalog, "raw.empty", [])
    result = dedup(spark, catalog, DedupOptions(inputs=["raw.empty"], output="dedup.empty"))
    assert result.stats["documents-in"] == 0 and result.stats["kept"] == 0 and result.stats["clusters"] == 0
    for name in ("dedup.empty", "dedup.empty_clusters"):
        table = catalog.load_table(tuple(name.split(".")))
        assert table.current_snapshot() is not None and rows(catalog, name) == []


def test_several_inputs_are_deduplicated_together_and_must_not_share_ids(spark, catalog):
    first, second = Planted(), Planted()
    text = "a document that was collected twice from two different sources " * 5
    a = first.add("same", text, source="web")
    first.add("only-first", "something else entirely, written once and for all " * 5, source="web")
    b = second.add("same", text.upper(), source="news")
    write_table(catalog, "raw.first", first.docs)
    write_table(catalog, "raw.second", second.docs)

    result = dedup(spark, catalog, DedupOptions(inputs=["raw.first", "raw.second"], output="dedup.both"))

    assert result.stats["documents-in"] == 3 and result.stats["exact-duplicates"] == 1
    assert {r["doc_id"] for r in rows(catalog, "dedup.both")} == {min(a, b), first.docs[1]["doc_id"]}
    inputs = json.loads(catalog.load_table(("dedup", "both")).current_snapshot().summary["factory.inputs"])
    assert [i["table"] for i in inputs] == ["raw.first", "raw.second"]

    clash = Planted()
    clash.add("same", "another text under an id the first table already uses", source="web")
    write_table(catalog, "raw.clash", clash.docs)
    with pytest.raises(InputError, match="doc_ids must be unique across the tables"):
        dedup(spark, catalog, DedupOptions(inputs=["raw.first", "raw.clash"], output="dedup.clash"))
    assert "clash" not in {t[1] for t in catalog.list_tables("dedup")}
    with pytest.raises(InputError, match=r"--output raw\.first must differ from the input"):
        dedup(spark, catalog, DedupOptions(inputs=["raw.first"], output="raw.first"))


def test_against_removes_what_the_published_snapshot_already_has(spark, catalog):
    rng_words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi".split()
    published, new = Planted(), Planted()
    texts = [" ".join(rng_words[(i * 7 + k) % 16] + rng_words[(i + k * 3) % 16] for k in range(120)) for i in range(4)]
    old = [published.add(f"doc-{i}", t) for i, t in enumerate(texts[:2])]
    write_table(catalog, "dedup.published", published.docs)
    again = new.add("doc-0", texts[0])  # the same record, already published
    edited = new.add("edit-1", texts[1].replace(rng_words[0] + rng_words[1], "changed", 1))
    fresh = new.add("new-2", texts[2])
    fresh_copy = new.add("new-2-copy", texts[2] + " and a tail")
    write_table(catalog, "raw.new", new.docs)

    result = dedup(
        spark,
        catalog,
        DedupOptions(inputs=["raw.new"], output="dedup.new", against="dedup.published", run_id="incremental"),
    )

    clusters = {r["doc_id"]: r for r in rows(catalog, "dedup.new_clusters")}
    assert {r["doc_id"] for r in rows(catalog, "dedup.new")} == {fresh_copy}  # the longer of the new pair
    assert (clusters[again]["against"], clusters[again]["duplicate_of"], clusters[again]["match"]) == (
        True, old[0], "exact",
    )  # fmt: skip
    assert (clusters[edited]["against"], clusters[edited]["duplicate_of"]) == (True, old[1])
    assert clusters[fresh]["duplicate_of"] == fresh_copy and not clusters[fresh]["against"]
    assert result.stats["against-duplicates"] == 2 and result.stats["documents-in"] == 4
    inputs = json.loads(catalog.load_table(("dedup", "new")).current_snapshot().summary["factory.inputs"])
    assert inputs[-1]["table"] == "dedup.published" and inputs[-1]["role"] == "against"


def test_a_flood_of_boilerplate_stays_linear_and_verification_stops_false_clusters(spark, catalog):
    corpus = Planted()
    header = " ".join(f"licence{chr(97 + i % 26)}{chr(97 + i // 26 % 26)}" for i in range(340))
    flood = 300
    for i in range(flood):  # ~85% shared shingles: pairwise Jaccard about 0.74, under the threshold
        body = " ".join(
            f"body{chr(97 + i % 26)}{chr(97 + i // 26)}{chr(97 + k % 26)}{chr(97 + k // 26)}" for k in range(60)
        )
        corpus.add(f"boiler-{i}", header + " " + body)
    for i in range(300):  # tiny files: below min_shingles, exact dedup only
        corpus.add(f"init-{i}", f"from . import {'abc'[i % 3]}")
    write_table(catalog, "raw.flood", corpus.docs)

    checked = dedup(spark, catalog, DedupOptions(inputs=["raw.flood"], output="dedup.checked"))
    bands, _ = DedupConfig().minhash.band_rows
    # Buckets of ~80 boilerplate documents per band: all their pairs would be ~50,000.
    assert 0 < checked.stats["candidate-pairs"] <= bands * BUCKET_ANCHORS * flood
    assert checked.stats["verified-pairs"] == 0 and checked.stats["near-duplicates"] == 0
    assert checked.stats["short-documents"] == 300 and checked.stats["exact-duplicates"] == 297
    assert checked.stats["kept"] == flood + 3

    unchecked = dedup(
        spark,
        catalog,
        DedupOptions(inputs=["raw.flood"], output="dedup.unchecked", config=DedupConfig(verify=False)),
    )
    assert unchecked.stats["largest-cluster"] > flood // 2  # what --verify prevents: one big false cluster


def test_the_same_run_id_with_other_parameters_is_refused(spark, catalog):
    write_table(catalog, "raw.docs", planted_corpus(originals=4).docs)
    first = dedup(spark, catalog, DedupOptions(inputs=["raw.docs"], output="dedup.docs", run_id="d-1"))
    stricter = DedupConfig(minhash=MinHashConfig(threshold=0.9))
    with pytest.raises(RunConflictError, match=r"params\.threshold: committed with 0\.8, now 0\.9"):
        dedup(spark, catalog, DedupOptions(inputs=["raw.docs"], output="dedup.docs", run_id="d-1", config=stricter))
    for name in ("dedup.docs", "dedup.docs_clusters"):
        table = catalog.load_table(tuple(name.split(".")))
        assert [s.snapshot_id for s in table.snapshots()] == [find_run_snapshot(table, "d-1").snapshot_id]
    assert catalog.load_table(("dedup", "docs")).current_snapshot().snapshot_id == first.documents.snapshot_id


@pytest.mark.slow
@pytest.mark.engine
def test_a_dedup_killed_between_its_two_commits_finishes_on_retry(factory_home, catalog):
    write_table(catalog, "raw.docs", planted_corpus(originals=4).docs)
    args = ("dedup", "--input", "raw.docs", "--output", "dedup.docs", "--run-id", "d-k")
    killed = run_factory(*args, env={"FACTORY_FAIL_AT": "between-commits"})
    assert killed.returncode == -9, killed.stderr[-2000:]
    clusters = find_run_snapshot(load_table(catalog, ("dedup", "docs_clusters")), "d-k")
    assert clusters is not None and find_run_snapshot(load_table(catalog, ("dedup", "docs")), "d-k") is None

    retried = run_factory(*args)

    assert retried.returncode == 0, retried.stderr[-2000:]
    documents = load_table(catalog, ("dedup", "docs")).current_snapshot()
    stats = snapshot_stats(documents)
    assert f"kept {stats['kept']} of {stats['documents-in']} documents" in retried.stdout
    assert stats == snapshot_stats(clusters) and documents.summary["factory.run-id"] == "d-k"
    assert [s.snapshot_id for s in load_table(catalog, ("dedup", "docs_clusters")).snapshots()] == [
        clusters.snapshot_id
    ]
    assert len(rows(catalog, "dedup.docs")) == stats["kept"]


def test_a_clusters_table_refused_for_its_columns_leaves_no_output_table_made(spark, catalog):
    docs = [{"doc_id": d, "source": "t", "text": d * 9, "path": None, "lang": None, "n_bytes": 9} for d in "ab"]
    write_table(catalog, "raw.docs", docs)
    ensure_table(catalog, ("dedup", "docs_clusters"), DOCUMENT_SCHEMA)  # a table with other columns
    with pytest.raises(InputError, match=r"dedup\.docs_clusters exists with (required|other) column"):
        dedup(spark, catalog, DedupOptions(["raw.docs"], "dedup.docs"))
    assert not catalog.table_exists(("dedup", "docs"))


def test_cli_refuses_a_missing_input_before_starting_spark(factory_home):
    proc = run_factory("dedup", "--input", "raw.nope", "--output", "dedup.x", timeout=60)
    assert proc.returncode == 2 and "does not exist" in proc.stderr and "Traceback" not in proc.stderr
    assert "--threshold" in run_factory("dedup", "--help").stdout


def installed_sources(limit_bytes: int = 64 * 1024) -> list[tuple[str, str]]:
    """Python files every installation of this project has, rich in real near duplicates: pinned
    packages (setuptools vendors distutils; rich ships one table per Unicode version; pyspark
    and pyiceberg share licence-header-only modules) and a sample of the standard library."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    venv = Path(sysconfig.get_paths()["purelib"])
    roots = [
        venv / "pip",
        venv / "setuptools",
        venv / "rich",
        venv / "pyspark",
        venv / "pyiceberg",
        stdlib / "distutils",
    ]
    files = [
        (f"{root.name}:{p.relative_to(root)}", p) for root in roots if root.is_dir() for p in sorted(root.rglob("*.py"))
    ]
    others = [
        p for p in sorted(stdlib.rglob("*.py")) if p.relative_to(stdlib).parts[0] not in ("site-packages", "distutils")
    ]
    random.Random(0).shuffle(others)
    files += [(f"stdlib:{p.relative_to(stdlib)}", p) for p in others[:1500]]
    found = []
    for key, path in files:
        data = path.read_bytes()
        if 0 < len(data) <= limit_bytes and b"\x00" not in data:
            try:
                found.append((key, data.decode("utf-8")))
            except UnicodeDecodeError:
                continue
    return found


@pytest.mark.slow
def test_real_source_files_cluster_as_brute_force_says(spark, catalog):
    corpus = Planted()
    for key, text in installed_sources():
        corpus.add(key, text, source="code")
    write_table(catalog, "raw.code", corpus.docs)
    cfg = DedupConfig()

    dedup(spark, catalog, DedupOptions(inputs=["raw.code"], output="dedup.code"))

    clusters = {r["doc_id"]: r["cluster_id"] for r in rows(catalog, "dedup.code_clusters")}
    ids = sorted(clusters)
    text_of = {d["doc_id"]: d["text"] for d in corpus.docs}
    truth = exact_clusters([text_of[d] for d in ids], cfg.shingles, cfg.minhash.threshold)
    found = agreement(np.array([clusters[d] for d in ids]), truth)
    print(f"{len(ids)} real source files: {found}")
    # Debian's Python ships the standard library's tests apart (libpython3.X-testsuite): without
    # them its sample is about 600 files, and the corpus 1,976 files with 931 true pairs.
    assert len(ids) >= 1500 and found.true_pairs >= 300
    assert found.precision >= 0.99 and found.f1 >= 0.95


def _layout(catalog, name: str) -> list[list[dict]]:
    """Each data file's rows in file order: the physical output, not only its content."""
    table = catalog.load_table(tuple(name.split(".")))
    paths = sorted(t.file.file_path for t in table.scan().plan_files())
    return [pq.read_table(p.removeprefix("file://")).to_pylist() for p in paths]


def _file_bytes(catalog, name: str) -> list[bytes]:
    """Each data file's bytes, in path order (the order readers follow)."""
    table = catalog.load_table(tuple(name.split(".")))
    paths = sorted(t.file.file_path for t in table.scan().plan_files())
    return [Path(p.removeprefix("file://")).read_bytes() for p in paths]


@pytest.mark.slow
def test_same_output_whatever_the_parallelism(spark, catalog):
    from lakehouse.catalog import ensure_table
    from lakehouse.file_sizes import TARGET_PROPERTY
    from pipelines.dedup import _output_schema

    corpus = planted_corpus(seed=11, originals=40)
    write_table(catalog, "raw.docs", corpus.docs, files=3, row_group_size=7)  # three read units
    schema = catalog.load_table(("raw", "docs")).schema()
    for name in ("a", "b", "c"):  # files far under the target would be combined into one
        table = ensure_table(catalog, ("dedup", name), _output_schema(schema))
        with table.transaction() as tx:
            tx.set_properties({TARGET_PROPERTY: "4096"})
    dedup(spark, catalog, DedupOptions(inputs=["raw.docs"], output="dedup.a"))
    previous = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", "3")
    try:
        dedup(spark, catalog, DedupOptions(inputs=["raw.docs"], output="dedup.b"))
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", previous)

    done = run_factory(
        "dedup", "--input", "raw.docs", "--output", "dedup.c", "-q", env={"FACTORY_SPARK_MASTER": "local[1]"}
    )
    assert done.returncode == 0, done.stderr

    # The kept documents are written one file per read unit, in the input's order.
    kept = {row["doc_id"] for row in rows(catalog, "dedup.a_clusters") if row["kept"]}
    inputs = [[row["doc_id"] for row in file if row["doc_id"] in kept] for file in _layout(catalog, "raw.docs")]
    assert [[row["doc_id"] for row in file] for file in _layout(catalog, "dedup.a")] == inputs
    assert len(inputs) == 3 and len(kept) < len(corpus.docs)
    for suffix in ("", "_clusters"):
        first = _file_bytes(catalog, f"dedup.a{suffix}")
        assert len(first) >= 1
        assert _file_bytes(catalog, f"dedup.b{suffix}") == first
        assert _file_bytes(catalog, f"dedup.c{suffix}") == first


def _mixed_corpus() -> tuple[Planted, Planted]:
    """Inputs that exercise every rule: near and exact copies, short documents, a bucket over
    PAIRS_BUCKET_LIMIT (anchors), and a reference snapshot holding some of them."""
    corpus = planted_corpus(seed=5, originals=25)
    header = " ".join(f"header{chr(97 + i % 26)}{chr(97 + i // 26 % 26)}" for i in range(300))
    for i in range(45):  # one bucket of 45 near-identical files: anchors, not all pairs
        corpus.add(f"boiler-{i}", header + f" tail{chr(97 + i % 26)}{chr(97 + i // 26)}")
    for i in range(20):
        corpus.add(f"tiny-{i}", f"import {'abcd'[i % 4]}")
    published = Planted()
    for doc in corpus.docs[:40:3]:  # some already published, under their own ids, some edited
        published.add(f"pub-{doc['path']}", doc["text"] + (" edited" if len(published.docs) % 2 else ""))
    return corpus, published


@pytest.mark.slow
def test_the_driver_plan_and_the_distributed_plan_write_the_same_tables(spark, catalog, monkeypatch):
    import pipelines.dedup as job

    corpus, published = _mixed_corpus()
    write_table(catalog, "raw.mixed", corpus.docs, files=3)  # units: the distributed plan routes decisions to them
    write_table(catalog, "dedup.published", published.docs)
    cases = {"verified": (True, "dedup.published"), "unverified": (False, None)}
    stats = {}
    for plan, documents in (("driver", job.DRIVER_DOCUMENTS), ("spark", 0)):  # 0: no input fits the driver
        monkeypatch.setattr(job, "DRIVER_DOCUMENTS", documents)
        for case, (verify, against) in cases.items():
            opts = DedupOptions(
                inputs=["raw.mixed"], output=f"dedup.{plan}_{case}", against=against, config=DedupConfig(verify=verify)
            )
            stats[plan, case] = dedup(spark, catalog, opts).stats

    for case in cases:
        assert stats["driver", case] == stats["spark", case]
        for suffix in ("", "_clusters"):
            assert _layout(catalog, f"dedup.driver_{case}{suffix}") == _layout(catalog, f"dedup.spark_{case}{suffix}")
    verified, unverified = stats["driver", "verified"], stats["driver", "unverified"]
    assert verified["near-duplicates"] > 0 and verified["exact-duplicates"] > 0 and verified["against-duplicates"] > 0
    assert verified["short-documents"] == 20 and verified["largest-cluster"] >= 2
    assert unverified["verified-pairs"] == unverified["candidate-pairs"] > verified["verified-pairs"]


@pytest.mark.slow
def test_the_features_read_by_the_tasks_are_those_of_the_texts_spark_reads(spark, catalog):
    from pyspark.sql import functions as F

    from pipelines.dedup_local import INPUT
    from pipelines.dedup_stages import document_features
    from pipelines.dedup_units import source_units, unit_features
    from pipelines.read_units import plan_units
    from pipelines.snapshot_texts import TextSource
    from pipelines.spark_session import read_snapshot, snapshot_files

    corpus = planted_corpus(seed=3, originals=30)
    write_table(catalog, "raw.docs", corpus.docs, files=3, row_group_size=17)  # units of several row groups
    table = catalog.load_table(("raw", "docs"))
    snapshot_id = table.current_snapshot().snapshot_id
    assert len(plan_units(snapshot_files(table, snapshot_id, "raw.docs"), table.io.properties, "n_bytes")) == 3
    cfg = DedupConfig()

    units = source_units([TextSource(table, snapshot_id, "raw.docs", INPUT)])
    ours = unit_features(spark, units, cfg).toArrow()

    texts = read_snapshot(spark, table, snapshot_id, "raw.docs").select(
        F.concat(F.lit(INPUT), "doc_id").alias("_key"), "text"
    )
    texts = texts.toArrow().combine_chunks()
    expected = pa.Table.from_batches([document_features(texts["_key"].chunk(0), texts["text"].chunk(0), cfg)])
    assert ours.num_rows == len(corpus.docs)
    assert ours.drop_columns(["_unit"]).sort_by("_key").to_pylist() == expected.sort_by("_key").to_pylist()
    assert ours.column("_unit").to_pylist() == sorted(ours.column("_unit").to_pylist())  # in unit order
    assert set(ours.column("_unit").to_pylist()) == {0, 1, 2}
