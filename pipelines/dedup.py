"""Dedup: exact and MinHash-LSH near-duplicate removal over pinned document tables.

    spark-submit pipelines/dedup.py --input raw.code --output dedup.code
    factory dedup --input raw.web@2024-06 raw.web2 --output dedup.web --threshold 0.8
    factory dedup --input raw.code@new --against dedup.code@published --output dedup.code_new

Stages (each a plain function of ``dedup_stages``, ``minhash``, ``shingles`` run by Spark):

1. features: every document's exact key (hash of its normalised text), length, shingle count
   and the LSH band hashes of its MinHash signature, computed in Python tasks that read the
   pinned files' read units themselves (``dedup_units``: the texts never pass through the JVM;
   only these small rows enter Spark and are shuffled afterwards);
2. exact duplicates: documents with the same exact key; the group's smallest key stands for it;
3. candidates: documents sharing a band hash: every pair of a small bucket, and in a bucket of
   more than ``PAIRS_BUCKET_LIMIT`` documents each member with its few smallest ones (linear in
   the bucket, never all its pairs); documents with fewer than ``min_shingles`` shingles have no
   bands and are deduplicated exactly only;
4. verification (``--verify``, default): each candidate pair's exact Jaccard similarity, from
   both texts; pairs under the threshold are dropped, so false positives cannot chain clusters;
5. clusters: connected components of the verified pairs (``connected_components.py``, in Spark);
6. the kept document of each cluster: the longest text, then the smallest ``doc_id``; with
   ``--against``, a cluster that holds a reference document keeps none of the input's.

Two plans run stages 2–6, with the same rules and the same output files (tested):

- the driver plan, for inputs of up to ``DRIVER_DOCUMENTS`` documents: the features pass's
  rows (a few hundred bytes a document) are collected to the driver, which groups the exact
  keys and band hashes, reads the candidate pairs' texts with pyarrow (``snapshot_texts.py``),
  verifies, clusters and decides (``dedup_local.py``); its decisions travel to the write's
  tasks with them; with the two writes, three Spark jobs;
- the distributed plan, for larger inputs: every stage a Spark job over the features, some
  twenty jobs whose scheduling costs seconds, but nothing held per document on the driver (its
  decisions reach the write's tasks shuffled by read unit).

Outputs, both by the commit protocol: the kept documents (input columns plus ``cluster_id``)
and the clusters table (every input document: its cluster, whether it was kept, what it
duplicates, how it matched, and the similarity that justified it). The kept documents are
written by Python tasks over the features pass's read units (``dedup_write``), one file per unit
before small ones are combined: only the decisions reach the tasks, and the texts never pass
through the JVM or a shuffle.
"""

from __future__ import annotations

import logging
import math
import sys
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import NestedField, StringType
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from lakehouse.catalog import check_table_takes, ensure_table, resolve, snapshot_schema
from lakehouse.columns import DOCUMENT_COLUMNS, TARGET_COLUMN
from lakehouse.commit import CommitResult, Run, existing_commits, record_count
from lakehouse.errors import InputError
from lakehouse.refs import PinnedRef, format_identifier, parse_identifier
from lakehouse.run_binding import RunOutput, commit_run, find_run_commits
from lakehouse.schemas import CLUSTERS_SCHEMA, arrow_schema, file_schema, require_columns
from pipelines.connected_components import connected_components
from pipelines.dedup_local import (
    BUCKET_ANCHORS,
    INPUT,
    PAIRS_BUCKET_LIMIT,
    REFERENCE,
    Decision,
    candidate_pairs,
    collisions_of,
    decide,
    decision_stats,
    feature_counts,
)
from pipelines.dedup_stages import (
    DedupConfig,
    KeyedShingles,
    compare_pairs,
)
from pipelines.dedup_units import source_units, unit_features
from pipelines.dedup_write import DECISIONS_SCHEMA, write_kept
from pipelines.snapshot_texts import TextSource, texts_of
from pipelines.spark_session import NO_ADAPTIVE, read_snapshot, session_conf
from pipelines.staging import Target, write_staged

log = logging.getLogger("factory.dedup")

# As ingest: the clusters table's files are sized from the data, never from the cluster, so the
# same input gives the same files (rows hash-partitioned and sorted by doc_id) whatever the
# parallelism. (The kept documents' files follow the input's read units: ``dedup_write``.)
CLUSTER_ROWS_PER_FILE = 4_000_000
# Key sets up to this size are broadcast to filter big tables without shuffling them, and the
# texts of compared documents up to this many bytes are broadcast rather than shuffled.
BROADCAST_KEYS = 2_000_000
BROADCAST_TEXT_BYTES = 64 << 20
# Shuffles of small rows (features, band hashes, pairs) get one partition per this many rows,
# counted from the data, so a small job runs few tasks and a big one many, whatever
# spark.sql.shuffle.partitions says; the result does not depend on it either way.
ROWS_PER_PARTITION = 2_000_000
# Inputs of up to this many documents (input and reference) are decided on the driver from their
# features (``dedup_local``) in a few Spark jobs; larger ones by the distributed plan below,
# whose some twenty jobs cost seconds of scheduling but hold nothing per document on the driver.
# At a million documents the features are about 200 MB of Arrow (key, exact hash, 16 band hashes).
DRIVER_DOCUMENTS = 1_000_000
# ... and whose candidate pairs' texts, fetched to the driver to be verified, fit in this many
# bytes: they are shingled at once, about ten bytes of shingle arrays per byte of text.
DRIVER_TEXT_BYTES = 128 << 20


@dataclass(frozen=True)
class DedupOptions:
    inputs: Sequence[str]
    output: str
    clusters: str | None = None  # default: <output>_clusters
    against: str | None = None  # a published snapshot: input documents that duplicate it are removed
    config: DedupConfig = field(default_factory=DedupConfig)
    run_id: str | None = None

    def __post_init__(self) -> None:
        if not self.inputs:
            raise InputError("dedup needs at least one --input table")

    @property
    def output_id(self) -> tuple[str, ...]:
        return parse_identifier(self.output)

    @property
    def clusters_id(self) -> tuple[str, ...]:
        if self.clusters:
            return parse_identifier(self.clusters)
        *namespace, name = self.output_id
        return (*namespace, f"{name}_clusters")

    def params(self) -> dict[str, object]:
        return {
            "output": self.output,
            "clusters": format_identifier(self.clusters_id),
            "against": self.against,
            **self.config.params(),
        }


@dataclass
class DedupResult:
    run_id: str
    documents: CommitResult
    clusters: CommitResult
    stats: dict[str, int] = field(default_factory=dict)
    already_committed: bool = False


@dataclass(frozen=True)
class DedupInputs:
    tables: list[Table]
    pinned: list[PinnedRef]
    schema: Schema
    reference: tuple[Table, PinnedRef] | None
    records: int  # documents in all pinned snapshots (input and reference), from their metadata


def dedup(spark: SparkSession, catalog: Catalog, opts: DedupOptions) -> DedupResult:
    """Run one dedup and commit its kept documents and its clusters table."""
    inputs = resolve_inputs(catalog, opts)
    out_id, clusters_id = opts.output_id, opts.clusters_id
    run = _run_for(opts, inputs)
    done = find_run_commits(catalog, run, [out_id, clusters_id])
    if all(done.values()):
        log.info("run %s is already committed to %s; nothing to do", run.run_id, opts.output)
        (documents, clusters), stats = existing_commits(done)
        return DedupResult(run.run_id, documents, clusters, stats, already_committed=True)

    out_schema = _output_schema(inputs.schema)
    # Both checked before either is made: a refused run leaves no table behind.
    check_table_takes(catalog, out_id, out_schema)
    check_table_takes(catalog, clusters_id, CLUSTERS_SCHEMA)
    docs = _read_inputs(spark, inputs)
    if (
        len(inputs.pinned) > 1
    ):  # within one table doc_ids are unique (docs/architecture.md, "Tables"); across tables, check
        _refuse_colliding_ids(docs, inputs)
    documents = ensure_table(catalog, out_id, out_schema)
    require_columns(documents.schema(), tuple(f.name for f in out_schema.fields), opts.output)
    clusters = ensure_table(catalog, clusters_id, CLUSTERS_SCHEMA)
    bands, rows = opts.config.minhash.band_rows
    log.info(
        "dedup %s → %s (threshold %.2f, %d perms as %d bands × %d rows, %s %d-grams, verify=%s, run %s)",
        ", ".join(map(str, inputs.pinned)), opts.output, opts.config.minhash.threshold, opts.config.minhash.num_perm,
        bands, rows, opts.config.shingles.unit, opts.config.shingles.n, opts.config.verify, run.run_id,
    )  # fmt: skip

    work = _Work(spark, opts.config, docs, inputs)
    with session_conf(spark, NO_ADAPTIVE), work:
        outcome = work.run()
        stats = outcome.stats
        n_rows = max(1, math.ceil(stats["documents-in"] / CLUSTER_ROWS_PER_FILE))
        cluster_rows = outcome.cluster_rows().repartition(n_rows, "doc_id").sortWithinPartitions("doc_id")
        writing = time.monotonic()
        decisions = outcome.decisions()
        target = Target.for_table(documents, run.staging_prefix(documents), file_schema(documents, out_schema))
        # The input sources come first in work.units, so an input unit's index there (the
        # features' ``_unit``) is its index here too.
        input_units = [unit for unit in work.units if unit.prefix == INPUT]
        # The clusters table's jobs are small and mostly one task each (a chain of broadcasts for
        # the similarities): the documents' write uses the cores they leave idle.
        with ThreadPoolExecutor(1) as pool:
            clusters_written = pool.submit(_write, cluster_rows, clusters, run, CLUSTERS_SCHEMA)
            staged_docs = write_kept(spark, input_units, arrow_schema(inputs.schema), decisions, target)
            staged_clusters = clusters_written.result()
        log.info("dedup writes: both tables staged in %.1fs", time.monotonic() - writing)
    clusters_commit, docs_commit = commit_run(
        catalog, run, [RunOutput(clusters_id, staged_clusters.files), RunOutput(out_id, staged_docs.files)], stats
    )
    return DedupResult(run.run_id, docs_commit, clusters_commit, stats)


def _run_for(opts: DedupOptions, inputs: DedupInputs) -> Run:
    """The run, recording every snapshot read: the inputs, then the --against one."""
    read = [p.identifier for p in inputs.pinned]
    if opts.output_id in read:
        raise InputError(
            f"--output {format_identifier(opts.output_id)} must differ from the input: dedup writes a new table"
        )
    if opts.clusters_id == opts.output_id or opts.clusters_id in read:
        raise InputError(
            f"the clusters table {format_identifier(opts.clusters_id)} must differ from the input and output"
        )
    run_inputs = [p.as_input() for p in inputs.pinned]
    if inputs.reference:
        run_inputs.append({**inputs.reference[1].as_input(), "role": "against"})
    return Run(job="dedup", run_id=opts.run_id or Run.new_id("dedup"), params=opts.params(), inputs=run_inputs)


def _texts(spark: SparkSession, docs: DataFrame, reference: tuple[Table, PinnedRef] | None) -> DataFrame:
    """``(_key, text)`` of the input documents and, with --against, of the reference ones."""
    texts = docs.select("_key", "text")
    if reference:
        table, pinned = reference
        ref = read_snapshot(spark, table, pinned.snapshot_id, pinned.table_name)
        texts = texts.unionByName(ref.select(F.concat(F.lit(REFERENCE), "doc_id").alias("_key"), "text"))
    return texts


class _Work:
    """The Spark plan of one dedup run; holds what it persists so it can release it."""

    def __init__(self, spark: SparkSession, cfg: DedupConfig, docs: DataFrame, inputs: DedupInputs):
        self.spark, self.cfg, self.docs, self.records = spark, cfg, docs, inputs.records
        self.texts = _texts(spark, docs, inputs.reference)
        self.sources = [
            TextSource(table, pinned.snapshot_id, pinned.table_name, INPUT)
            for table, pinned in zip(inputs.tables, inputs.pinned, strict=True)
        ]
        if inputs.reference:
            table, pinned = inputs.reference
            self.sources.append(TextSource(table, pinned.snapshot_id, pinned.table_name, REFERENCE))
        self.units = source_units(self.sources)  # read by the features pass, then by the write
        self.doc_parts = _partitions(inputs.records)
        self.band_parts = _partitions(inputs.records * cfg.minhash.band_rows[0])
        self._persisted: list[DataFrame] = []

    def run(self) -> _LocalOutcome | _SparkOutcome:
        """Decide every document: on the driver when the input allows (``dedup_local``), else in Spark."""
        clock = _Clock()
        if self.records <= DRIVER_DOCUMENTS:
            features = unit_features(self.spark, self.units, self.cfg).toArrow()  # the one job before the writes
            counts = feature_counts(features)
            log.info("dedup stage 1/4 (features): %d document(s) in %.1fs", counts["all"], clock.lap())
            outcome = self._run_local(features, counts, clock)
            if outcome is not None:
                return outcome
        features = self._keep(unit_features(self.spark, self.units, self.cfg))
        is_input = F.col("_key").startswith(INPUT)
        counts = features.agg(
            F.count("*").alias("all"),
            F.coalesce(F.sum("_length"), F.lit(0)).alias("bytes"),
            F.count(F.when(is_input, 1)).alias("inputs"),
            F.coalesce(F.sum(F.when(is_input, F.col("_length"))), F.lit(0)).alias("input_bytes"),
            F.count(F.when(is_input & F.col("_bands").isNull(), 1)).alias("short"),
        ).first()
        self.mean_length = counts["bytes"] / max(1, counts["all"])
        log.info("dedup stage 1/4 (features): %d document(s) in %.1fs", counts["all"], clock.lap())
        return self._run_distributed(features, counts, clock)

    def _run_local(self, features: pa.Table, counts: dict[str, int], clock: _Clock) -> _LocalOutcome | None:
        """Candidates, verification and clusters on the driver, from the collected features;
        None when the candidates' texts are too many to fetch (the distributed plan takes over)."""
        collisions = collisions_of(features)
        rep = collisions.representatives()
        candidates = candidate_pairs(collisions.buckets, rep)
        log.info("dedup stage 2/4 (LSH buckets): %d candidate pair(s) in %.1fs", len(candidates), clock.lap())
        nodes = {key for pair in candidates for key in pair}
        if sum(collisions.length[key] for key in nodes) > DRIVER_TEXT_BYTES:
            log.info("dedup: the candidates' texts exceed %d bytes; deciding in Spark", DRIVER_TEXT_BYTES)
            return None
        edges, shingled = candidates, None
        if self.cfg.verify and candidates:
            shingled = KeyedShingles(self.cfg, texts_of(self.sources, nodes))
            jaccard = shingled.jaccard(candidates)
            edges = [pair for pair, j in zip(candidates, jaccard, strict=True) if j >= self.cfg.minhash.threshold]
            log.info(
                "dedup stage 3/4 (verify): %d pair(s) at Jaccard ≥ %s in %.1fs",
                len(edges),
                self.cfg.minhash.threshold,
                clock.lap(),
            )
        decisions = decide(collisions, rep, edges)
        near = [d for d in decisions if d.match == "near"]
        similarity: dict[str, tuple[float, float]] = {}
        if near:
            # Between the representatives of both exact groups, as the distributed plan does:
            # with --verify they are candidates, already shingled.
            pairs = [(d.rep, d.keeper_rep) for d in near]
            needed = {k for pair in pairs for k in pair}
            if shingled is None or not needed <= shingled.index.keys():
                shingled = KeyedShingles(self.cfg, texts_of(self.sources, needed))
            similarity = {
                d.key: (float(e), float(j))
                for d, e, j in zip(near, shingled.estimate(pairs), shingled.jaccard(pairs), strict=True)
            }
        stats = decision_stats(decisions, counts["inputs"], counts["input_bytes"], collisions.length)
        stats.update(
            {"short-documents": counts["short"], "candidate-pairs": len(candidates), "verified-pairs": len(edges)}
        )
        log.info("dedup stage 4/4 (clusters) decided on the driver in %.1fs: %s", clock.lap(), stats)
        return _LocalOutcome(self.spark, self.docs, decisions, similarity, stats)

    def _run_distributed(self, features: DataFrame, counts, clock: _Clock) -> _SparkOutcome:
        exact = self._keep(
            features.repartition(self.doc_parts, "_exact").withColumn(
                "_rep", F.min("_key").over(Window.partitionBy("_exact"))
            )
        )
        candidates = self._keep(_candidates(_bucket_members(exact, self.band_parts), self.band_parts))
        n_candidates = candidates.count()
        log.info("dedup stage 2/4 (LSH buckets): %d candidate pair(s) in %.1fs", n_candidates, clock.lap())
        edges, n_edges = candidates, n_candidates
        if self.cfg.verify and n_candidates:
            edges = self._keep(self._verify(candidates, n_candidates))
            n_edges = edges.count()
            log.info(
                "dedup stage 3/4 (verify): %d pair(s) at Jaccard ≥ %s in %.1fs",
                n_edges,
                self.cfg.minhash.threshold,
                clock.lap(),
            )
        roots = connected_components(edges, "a", "b", edge_count=n_edges) if n_edges else None
        if roots is not None and 2 * n_edges <= BROADCAST_KEYS:
            roots = F.broadcast(roots)
        decided = self._keep(_decide(exact, roots, self.doc_parts))
        stats = _stats(decided)
        stats.update({"short-documents": counts["short"], "candidate-pairs": n_candidates, "verified-pairs": n_edges})
        log.info("dedup stage 4/4 (clusters) decided in %.1fs: %s", clock.lap(), stats)
        return _SparkOutcome(self, decided, stats)

    def cluster_rows(self, decided: DataFrame, stats: dict[str, int]) -> DataFrame:
        """One row per input document for the clusters table, with the similarity that justified it."""
        rows = decided
        if stats["near-duplicates"]:
            near = decided.where(F.col("match") == "near").select("_key", "_rep", "_keeper_rep")
            similarity = self._near_similarities(near, stats["near-duplicates"])
            if stats["near-duplicates"] <= BROADCAST_KEYS:
                similarity = F.broadcast(similarity)
            rows = rows.join(similarity, "_key", "left")
        else:
            rows = rows.withColumn("similarity", F.lit(None).cast("double")).withColumn(
                "jaccard", F.lit(None).cast("double")
            )
        return (
            rows.withColumn("similarity", F.when(F.col("match") == "exact", 1.0).otherwise(F.col("similarity")))
            .withColumn("jaccard", F.when(F.col("match") == "exact", 1.0).otherwise(F.col("jaccard")))
            .select(*[f.name for f in CLUSTERS_SCHEMA.fields])
        )

    def _verify(self, candidates: DataFrame, count: int) -> DataFrame:
        """Candidate pairs whose exact Jaccard similarity reaches the threshold, with it."""
        # Kept: every near duplicate and its kept document are among these, for _near_similarities.
        self.candidate_texts = self._keep(self._texts_of(candidates, "a", "b", count, self.texts))
        pairs = self._attach(candidates, "a", "b", count, self.candidate_texts)
        cfg, threshold = self.cfg, self.cfg.minhash.threshold

        def verify(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for batch in batches:
                sims = compare_pairs(cfg, batch.column("a_text"), batch.column("b_text"))["jaccard"]
                hit = sims >= threshold
                yield pa.RecordBatch.from_arrays(
                    [batch.column("a").filter(hit), batch.column("b").filter(hit), pa.array(sims[hit])],
                    names=["a", "b", "jaccard"],
                )

        return pairs.mapInArrow(verify, "a string, b string, jaccard double")

    def _near_similarities(self, near: DataFrame, count: int) -> DataFrame:
        """For each near duplicate: its similarity to the kept document, estimated by MinHash and exact
        (the texts are at hand for the estimate, so the exact value costs little more).

        Computed between the representatives of their exact groups (same normalised text, same
        shingles): those are the documents the candidate pairs named, whose texts are kept.
        """
        texts = self.candidate_texts if self.cfg.verify else self.texts
        pairs = self._attach(
            near, "_rep", "_keeper_rep", count, self._texts_of(near, "_rep", "_keeper_rep", count, texts)
        )
        cfg = self.cfg

        def compare(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for batch in batches:
                sims = compare_pairs(cfg, batch.column("_rep_text"), batch.column("_keeper_rep_text"), estimate=True)
                yield pa.RecordBatch.from_arrays(
                    [batch.column("_key"), pa.array(sims["estimate"]), pa.array(sims["jaccard"])],
                    names=["_key", "similarity", "jaccard"],
                )

        return pairs.mapInArrow(compare, "_key string, similarity double, jaccard double")

    def _texts_of(self, pairs: DataFrame, left: str, right: str, count: int, texts: DataFrame) -> DataFrame:
        """``(_key, text)`` of the documents named in ``pairs`` (``count`` of them), picked from ``texts``."""
        nodes = pairs.select(F.col(left).alias("_key")).union(pairs.select(F.col(right).alias("_key")))
        nodes = nodes.repartition(_partitions(2 * count), "_key").distinct()
        if 2 * count <= BROADCAST_KEYS:  # filter without shuffling the texts
            nodes = F.broadcast(nodes)
        return texts.join(nodes, "_key", "left_semi")

    def _attach(self, pairs: DataFrame, left: str, right: str, count: int, texts: DataFrame) -> DataFrame:
        """``pairs`` with the text of both sides, from ``texts`` (those of the pairs' documents)."""
        if 2 * count * self.mean_length <= BROADCAST_TEXT_BYTES:  # few texts: join them without shuffles
            texts = F.broadcast(texts)
        for side in (left, right):
            pairs = pairs.join(texts.select(F.col("_key").alias(side), F.col("text").alias(f"{side}_text")), side)
        return pairs

    def _keep(self, df: DataFrame) -> DataFrame:
        df = df.persist(StorageLevel.MEMORY_AND_DISK)
        self._persisted.append(df)
        return df

    def __enter__(self) -> _Work:
        return self

    def __exit__(self, *_exc) -> None:
        for df in self._persisted:
            df.unpersist()
        self._persisted.clear()


class _SparkOutcome:
    """The distributed plan's decisions: a DataFrame of every input document."""

    def __init__(self, work: _Work, decided: DataFrame, stats: dict[str, int]):
        self.work, self.decided, self.stats = work, decided, stats

    def cluster_rows(self) -> DataFrame:
        return self.work.cluster_rows(self.decided, self.stats)

    def decisions(self) -> DataFrame:
        """``DECISIONS_SCHEMA`` rows of the input documents not kept alone, with their ``_unit``:
        left in Spark, since there may be more than the driver should hold."""
        alone = F.col("kept") & (F.col("cluster_id") == F.col("doc_id"))
        return self.decided.where(~alone).select(*DECISIONS_SCHEMA.names, "_unit")


# The clusters table's columns as the driver plan builds its rows (CLUSTERS_SCHEMA's types).
_CLUSTER_ROWS = pa.schema(
    [
        ("doc_id", pa.string()),
        ("cluster_id", pa.string()),
        ("kept", pa.bool_()),
        ("cluster_size", pa.int64()),
        ("duplicate_of", pa.string()),
        ("against", pa.bool_()),
        ("match", pa.string()),
        ("similarity", pa.float64()),
        ("jaccard", pa.float64()),
    ]
)


class _LocalOutcome:
    """The driver's decisions: rows for the documents in clusters; every other document is kept alone."""

    def __init__(
        self,
        spark: SparkSession,
        docs: DataFrame,
        decisions: list[Decision],
        similarity: dict[str, tuple[float, float]],
        stats: dict[str, int],
    ):
        self.spark, self.docs, self.decided, self.similarity, self.stats = (
            spark, docs, decisions, similarity, stats,
        )  # fmt: skip

    def cluster_rows(self) -> DataFrame:
        """One clusters-table row per input document: the driver's rows, and defaults for the
        documents kept alone, joined in the JVM. The driver's rows go as Arrow, which Spark takes
        as a local relation (a DataFrame made from Python rows waits for a Python worker to decode them)."""
        decided = self._decided_frame()
        alone = {"cluster_id": F.col("doc_id"), "kept": F.lit(True), "cluster_size": F.lit(1), "against": F.lit(False)}
        columns = [
            F.coalesce(F.col(name), alone[name]).alias(name) if name in alone else F.col(name)
            for name in _CLUSTER_ROWS.names
        ]
        return self.docs.select("doc_id").join(F.broadcast(decided), "doc_id", "left").select(*columns)

    def _decided_frame(self) -> DataFrame:
        rows = [_cluster_row(d, self.similarity.get(d.key)) for d in self.decided]
        columns = [pa.array([row[i] for row in rows], type=t) for i, t in enumerate(_CLUSTER_ROWS.types)]
        return self.spark.createDataFrame(pa.table(columns, schema=_CLUSTER_ROWS))

    def decisions(self) -> pa.Table:
        """``DECISIONS_SCHEMA`` rows of the input documents not kept alone."""
        chosen = [d for d in self.decided if not (d.kept and d.cluster_id == d.doc_id)]
        columns = {name: [getattr(d, name) for d in chosen] for name in DECISIONS_SCHEMA.names}
        return pa.table(columns, schema=DECISIONS_SCHEMA)


def _cluster_row(d: Decision, similarity: tuple[float, float] | None) -> tuple:
    if d.match == "exact":
        similarity = (1.0, 1.0)
    estimate, jaccard = similarity or (None, None)
    return (d.doc_id, d.cluster_id, d.kept, d.cluster_size, d.duplicate_of, d.against, d.match, estimate, jaccard)


class _Clock:
    def __init__(self) -> None:
        self.last = time.monotonic()

    def lap(self) -> float:
        """Seconds since the previous lap."""
        now = time.monotonic()
        elapsed, self.last = now - self.last, now
        return elapsed


def _bucket_members(exact: DataFrame, partitions: int) -> DataFrame:
    """``(_band, _hash, _key, _size, _rank)`` of every exact-group representative in a shared LSH bucket."""
    bands = (
        exact.where((F.col("_key") == F.col("_rep")) & F.col("_bands").isNotNull())
        .select("_key", F.posexplode("_bands").alias("_band", "_hash"))
        .repartition(partitions, "_band", "_hash")
    )
    bucket = Window.partitionBy("_band", "_hash")
    return (
        bands.withColumn("_size", F.count("*").over(bucket))
        .where(F.col("_size") > 1)
        .withColumn("_rank", F.row_number().over(bucket.orderBy("_key")))
    )


def _candidates(members: DataFrame, partitions: int) -> DataFrame:
    """Candidate pairs (a < b) from shared buckets: all pairs of a small bucket; in a large one,
    each member with the bucket's few smallest members (its anchors).

    Anchors keep a bucket of k documents at about BUCKET_ANCHORS·k pairs (10,000 licence headers:
    40,000 pairs, not 50 million). One anchor, a plain star, is not enough once pairs are
    verified: a true pair whose documents both differ from it would be lost. Small buckets, the
    common case, give all their pairs.
    """
    limit = F.when(F.col("_size") <= PAIRS_BUCKET_LIMIT, PAIRS_BUCKET_LIMIT).otherwise(BUCKET_ANCHORS)
    anchors = members.where(F.col("_rank") <= limit).select("_band", "_hash", F.col("_key").alias("a"))
    return (
        members.select("_band", "_hash", F.col("_key").alias("b"))
        .join(anchors, ["_band", "_hash"])
        .where(F.col("a") < F.col("b"))
        # Pairs within the --against snapshot cannot change what happens to an input document.
        .where(~(F.col("a").startswith(REFERENCE) & F.col("b").startswith(REFERENCE)))
        .select("a", "b")
        .repartition(partitions, "a", "b")
        .distinct()
    )


def _decide(exact: DataFrame, roots: DataFrame | None, partitions: int) -> DataFrame:
    """Each input document's cluster, kept flag, kept document, and how it matched."""
    is_input = F.col("_key").startswith(INPUT)
    doc_id = F.expr("substring(_key, 2)")
    clustered = exact.select("_key", "_exact", "_length", "_rep", "_unit", F.col("_rep").alias("_root"))
    if roots is not None:  # exact groups joined by near-duplicate pairs: the component of their representative
        clustered = clustered.join(
            roots.select(F.col("node").alias("_root"), F.col("component").alias("_component")), "_root", "left"
        ).withColumn("_root", F.coalesce("_component", "_root"))
    clustered = clustered.repartition(partitions, "_root")
    cluster = Window.partitionBy("_root")
    # The rule that picks the kept document depends on the data alone: reference documents
    # first, then the longest text, then the smallest key.
    best = cluster.orderBy(F.col("_key").substr(1, 1), F.col("_length").desc(), "_key").rowsBetween(
        Window.unboundedPreceding, Window.unboundedFollowing
    )
    decided = (
        clustered.withColumn("_keeper", F.first("_key").over(best))
        .withColumn("_keeper_exact", F.first("_exact").over(best))
        .withColumn("_keeper_rep", F.first("_rep").over(best))
        .withColumn("cluster_id", F.min(F.when(is_input, doc_id)).over(cluster))
        .withColumn("cluster_size", F.count(F.when(is_input, 1)).over(cluster))
        .where(is_input)
    )
    kept = F.col("_key") == F.col("_keeper")
    return decided.select(
        "_key",
        doc_id.alias("doc_id"),
        "cluster_id",
        kept.alias("kept"),
        "cluster_size",
        F.when(~kept, F.expr("substring(_keeper, 2)")).alias("duplicate_of"),
        (~kept & F.col("_keeper").startswith(REFERENCE)).alias("against"),
        F.when(kept, F.lit(None))
        .when(F.col("_exact") == F.col("_keeper_exact"), "exact")
        .otherwise("near")
        .alias("match"),
        "_keeper",
        "_rep",
        "_keeper_rep",
        "_length",
        "_unit",
    )


def _stats(decided: DataFrame) -> dict[str, int]:
    row = decided.agg(
        F.count("*").alias("documents-in"),
        F.count(F.when(F.col("kept"), 1)).alias("kept"),
        F.count(F.when(F.col("match") == "exact", 1)).alias("exact-duplicates"),
        F.count(F.when(F.col("match") == "near", 1)).alias("near-duplicates"),
        F.count(F.when(F.col("against"), 1)).alias("against-duplicates"),
        # One row per cluster has doc_id == cluster_id; with --against no input document may be kept.
        F.count(
            F.when((F.col("doc_id") == F.col("cluster_id")) & ((F.col("cluster_size") > 1) | F.col("against")), 1)
        ).alias("clusters"),
        F.coalesce(F.max("cluster_size"), F.lit(0)).alias("largest-cluster"),
        F.coalesce(F.sum("_length"), F.lit(0)).alias("bytes-in"),
        F.coalesce(F.sum(F.when(F.col("kept"), F.col("_length"))), F.lit(0)).alias("bytes-kept"),
    ).first()
    return {name: int(row[name]) for name in row.asDict()}


def _partitions(rows: int) -> int:
    return max(1, math.ceil(rows / ROWS_PER_PARTITION))


def _write(df: DataFrame, table: Table, run: Run, schema: Schema):
    target = Target.for_table(table, run.staging_prefix(table), file_schema(table, schema))
    return write_staged(df.withColumn(TARGET_COLUMN, F.lit("out")), {"out": target})["out"]


def resolve_inputs(catalog: Catalog, opts: DedupOptions) -> DedupInputs:
    tables, pinned = [], []
    for text in opts.inputs:
        table, ref = resolve(catalog, text)
        require_columns(table.schema(), DOCUMENT_COLUMNS, text)
        tables.append(table)
        pinned.append(ref)
    if len({p.identifier for p in pinned}) != len(pinned):
        raise InputError("the same table is given twice as --input; give each input table once")
    schemas = [snapshot_schema(t, p.snapshot_id) for t, p in zip(tables, pinned, strict=True)]
    first = _column_types(schemas[0])
    for ref, schema in zip(opts.inputs[1:], schemas[1:], strict=True):
        if _column_types(schema) != first:
            raise InputError(
                f"{ref} has other columns than {opts.inputs[0]} ({_describe(schema)} vs {_describe(schemas[0])}); "
                "inputs deduplicated together must have the same columns"
            )
    reference = None
    if opts.against:
        table, ref = resolve(catalog, opts.against)
        require_columns(table.schema(), ("doc_id", "text"), opts.against)
        reference = (table, ref)
    snapshots = [(t, p.snapshot_id) for t, p in zip(tables, pinned, strict=True)]
    if reference:
        snapshots.append((reference[0], reference[1].snapshot_id))
    records = sum(record_count(t, snapshot_id) for t, snapshot_id in snapshots)
    return DedupInputs(tables, pinned, schemas[0], reference, records)


def _column_types(schema: Schema) -> list[tuple[str, str]]:
    return [(f.name, str(f.field_type)) for f in schema.fields]


def _describe(schema: Schema) -> str:
    return ", ".join(f"{name} {kind}" for name, kind in _column_types(schema))


def _output_schema(input_schema: Schema) -> Schema:
    """The input's columns (fresh field ids) plus ``cluster_id``."""
    fields = [
        NestedField(i, f.name, f.field_type, required=f.required, doc=f.doc)
        for i, f in enumerate(input_schema.fields, start=1)
    ]
    if "cluster_id" in {f.name for f in fields}:
        raise InputError("the input already has a cluster_id column; deduplicate the raw documents instead")
    fields.append(NestedField(len(fields) + 1, "cluster_id", StringType(), required=True, doc="dedup cluster"))
    return Schema(*fields)


def _read_inputs(spark: SparkSession, inputs: DedupInputs) -> DataFrame:
    frames = [
        read_snapshot(spark, table, pinned.snapshot_id, pinned.table_name)
        for table, pinned in zip(inputs.tables, inputs.pinned, strict=True)
    ]
    docs = frames[0]
    for frame in frames[1:]:
        docs = docs.unionByName(frame)
    return docs.withColumn("_key", F.concat(F.lit(INPUT), "doc_id"))


def _refuse_colliding_ids(docs: DataFrame, inputs: DedupInputs) -> None:
    """doc_ids must be unique across the inputs: the output keeps them as its unique ids."""
    repeated = docs.select("doc_id").repartition(_partitions(inputs.records), "doc_id").groupBy("doc_id").count()
    repeated = repeated.where(F.col("count") > 1)
    examples = [row.doc_id for row in repeated.limit(3).collect()]
    if examples:
        names = ", ".join(map(str, inputs.pinned))
        raise InputError(
            f"doc_id {examples[0]!r} (and maybe others: {', '.join(map(repr, examples[1:])) or 'none shown'}) "
            f"occurs more than once across the inputs ({names}); doc_ids must be unique across the tables "
            "deduplicated together. Ingest the sources into one table (ingest refuses repeated ids), "
            "or deduplicate them in separate runs and use --against."
        )


if __name__ == "__main__":  # `spark-submit pipelines/dedup.py ARGS` is `factory dedup ARGS` (docs/architecture.md)
    from factory_cli.main import run_command

    sys.exit(run_command("dedup", sys.argv[1:], prog="dedup.py"))
