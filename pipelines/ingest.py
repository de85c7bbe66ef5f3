"""Ingest: raw records into a document table, refusals into quarantine.

    spark-submit pipelines/ingest.py --source code --format files /src/repo --output raw.code
    factory ingest --source web --format jsonl dump/*.jsonl.zst --output raw.web --id-field url

Each input file is read by one Spark task in Python (so bad bytes are seen as they are, not
replaced by Spark's text reader); records become rows of a document table or of the
namespace's quarantine table, each with a reason. Both are committed by the commit protocol.
"""

from __future__ import annotations

import json
import logging
import math
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.table.snapshots import Snapshot
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from lakehouse.catalog import ensure_table
from lakehouse.columns import DOCUMENT_COLUMNS, TARGET_COLUMN
from lakehouse.commit import CommitResult, Run, existing_commits
from lakehouse.errors import InputError
from lakehouse.file_sizes import target_file_bytes
from lakehouse.refs import format_identifier, parse_identifier, quarantine_identifier
from lakehouse.run_binding import RunOutput, check_run_commits, commit_run, run_snapshots
from lakehouse.schemas import (
    DOCUMENT_SCHEMA,
    QUARANTINE_RECORD_BYTES,
    QUARANTINE_SCHEMA,
    file_schema,
    require_columns,
)
from pipelines.ingest_inputs import InputFile, check_fields, discover, encode_group, plan_tasks, read_records
from pipelines.ingest_records import PARSED_ARROW_SCHEMA, PARSED_SCHEMA, RecordConfig
from pipelines.spark_session import read_snapshot
from pipelines.staging import Target, write_staged

log = logging.getLogger("factory.ingest")

# The snapshot of the output whose doc_ids the run refused as `duplicate-id` (absent: the table was
# empty). A retry that finishes the run reuses it, so it refuses exactly what the run refused.
EXISTING_IDS = "factory.existing-ids-snapshot"

# Output files are sized from the input (to the table's target file size, ``lakehouse.file_sizes``),
# never from the cluster, so the same input gives the same files (rows hash-partitioned and sorted
# by doc_id) whatever the parallelism.
# Rows per Arrow batch handed from a reading task to Spark, and the bytes that end one early.
BATCH_ROWS, BATCH_BYTES = 512, 16 << 20


@dataclass(frozen=True)
class IngestOptions:
    inputs: Sequence[str]
    fmt: str
    output: str
    records: RecordConfig
    quarantine: str | None = None  # default: <namespace of output>.quarantine
    include: Sequence[str] = ()
    exclude: Sequence[str] = ()
    run_id: str | None = None

    @property
    def output_id(self) -> tuple[str, ...]:
        return parse_identifier(self.output)

    @property
    def quarantine_id(self) -> tuple[str, ...]:
        return quarantine_identifier(self.output_id, self.quarantine)

    def params(self) -> dict[str, object]:
        return {
            "format": self.fmt,
            "output": self.output,
            "quarantine": format_identifier(self.quarantine_id),
            "include": list(self.include),
            "exclude": list(self.exclude),
            "source": self.records.source,
            "text_field": self.records.text_field,
            "id_field": self.records.id_field,
            "path_field": self.records.path_field,
            "lang_field": self.records.lang_field,
            "max_doc_bytes": self.records.max_doc_bytes,
        }


@dataclass
class IngestResult:
    run_id: str
    documents: CommitResult | None
    quarantine: CommitResult | None
    stats: dict[str, int] = field(default_factory=dict)
    already_committed: bool = False


def ingest(spark: SparkSession, catalog: Catalog, opts: IngestOptions) -> IngestResult:
    """Run one ingest and commit its documents and refusals."""
    out_id, q_id = opts.output_id, opts.quarantine_id
    if out_id == q_id:
        raise InputError("--output and the quarantine table must be two different tables")
    files = discover(opts.inputs, opts.fmt, opts.include, opts.exclude)
    check_fields(files, opts.fmt, opts.records)  # a mistyped field fails here, not as every row quarantined
    total_bytes = sum(f.size for f in files)
    run_id = opts.run_id or Run.new_id("ingest")
    done = run_snapshots(catalog, [out_id, q_id], run_id)
    existing_ids = _existing_ids_snapshot(catalog, out_id, done)
    run = Run(
        job="ingest",
        run_id=run_id,
        params=opts.params(),
        inputs=[{"uri": uri, "files": n, "bytes": b} for uri, n, b in _summarise_inputs(opts.inputs, files)],
        properties={} if existing_ids is None else {EXISTING_IDS: str(existing_ids)},
    )
    check_run_commits(run, done)
    if all(done.values()):
        log.info("run %s is already committed to %s; nothing to do", run.run_id, opts.output)
        (documents, quarantine), stats = existing_commits(done)
        return IngestResult(run.run_id, documents, quarantine, stats, already_committed=True)

    documents = ensure_table(catalog, out_id, DOCUMENT_SCHEMA)
    require_columns(documents.schema(), DOCUMENT_COLUMNS, opts.output)
    quarantine = ensure_table(catalog, q_id, QUARANTINE_SCHEMA)
    log.info(
        "ingest %s: %d input file(s) (%s), %.1f MB → %s (run %s)",
        opts.records.source, len(files), opts.fmt, total_bytes / 1e6, opts.output, run.run_id,
    )  # fmt: skip

    parsed = _parse(spark, files, opts.fmt, opts.records)
    n_out = max(1, math.ceil(total_bytes / target_file_bytes(documents.properties)))
    marked = _mark_duplicate_ids(spark, parsed.repartition(n_out, "doc_id"), documents, existing_ids, opts.output)
    routed = (
        marked.withColumn(TARGET_COLUMN, F.when(F.col("reason").isNull(), "documents").otherwise("quarantine"))
        .withColumn("stage", F.lit("ingest"))
        .withColumn("run_id", F.lit(run.run_id))
        .sortWithinPartitions("doc_id", "origin", "ordinal")
    )
    outputs = write_staged(
        routed,
        {
            "documents": Target.for_table(
                documents, run.staging_prefix(documents), file_schema(documents, DOCUMENT_SCHEMA)
            ),
            "quarantine": Target.for_table(
                quarantine,
                run.staging_prefix(quarantine),
                file_schema(quarantine, QUARANTINE_SCHEMA),
                count_column="reason",
            ),
        },
    )
    kept, refused = outputs["documents"], outputs["quarantine"]
    stats = {
        "files": len(files),
        "bytes-in": total_bytes,
        "documents-in": kept.records + refused.records,
        "kept": kept.records,
        "quarantined": refused.records,
        **{f"quarantined.{reason}": n for reason, n in sorted(refused.counts.items())},
    }
    doc_commit, q_commit = commit_run(
        catalog, run, [RunOutput(out_id, kept.files), RunOutput(q_id, refused.files)], stats
    )
    return IngestResult(run.run_id, doc_commit, q_commit, stats)


def _existing_ids_snapshot(
    catalog: Catalog, out_id: tuple[str, ...], done: Mapping[tuple[str, ...], Snapshot | None]
) -> int | None:
    """The output's snapshot whose doc_ids count as taken: the one the run recorded if it has
    committed somewhere already (its own documents may be in the table by now), else main's head."""
    recorded = [snapshot for snapshot in done.values() if snapshot is not None]
    if recorded:
        value = recorded[0].summary.get(EXISTING_IDS)
        return int(value) if value else None
    try:
        head = catalog.load_table(out_id).current_snapshot()
    except NoSuchTableError:
        return None
    return head.snapshot_id if head is not None else None


def _parse(spark: SparkSession, files: Sequence[InputFile], fmt: str, cfg: RecordConfig) -> DataFrame:
    """One Spark partition per group of files; each task reads its files in Python."""
    groups = plan_tasks(files, spark.sparkContext.defaultParallelism)
    specs = spark.sparkContext.parallelize([json.dumps(encode_group(g)) for g in groups], len(groups))
    file_lists = spark.createDataFrame(specs.map(lambda s: (s,)), "files string")

    def read_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for spec in batch.column("files").to_pylist():
                yield from _batched(read_records(json.loads(spec), fmt, cfg))

    return file_lists.mapInArrow(read_partition, PARSED_SCHEMA)


def _batched(rows: Iterator[dict]) -> Iterator[pa.RecordBatch]:
    schema = PARSED_ARROW_SCHEMA
    buffer, size = [], 0
    for row in rows:
        buffer.append(row)
        size += len(row["text"] or "") + len(row["record"] or b"")
        if len(buffer) >= BATCH_ROWS or size >= BATCH_BYTES:
            yield pa.RecordBatch.from_pylist(buffer, schema=schema)
            buffer, size = [], 0
    if buffer:
        yield pa.RecordBatch.from_pylist(buffer, schema=schema)


def _mark_duplicate_ids(
    spark: SparkSession, parsed: DataFrame, documents, snapshot_id: int | None, label: str
) -> DataFrame:
    """Refuse a second record with the same doc_id (in this input or already in the table's snapshot)."""
    accepted = F.col("reason").isNull()
    if snapshot_id is not None:
        existing = (
            read_snapshot(spark, documents, snapshot_id, label).select("doc_id").withColumn("_exists", F.lit(True))
        )
        parsed = parsed.join(existing, "doc_id", "left")
        already = accepted & F.col("_exists").isNotNull()
        parsed = parsed.withColumn("reason", F.when(already, "duplicate-id").otherwise(F.col("reason"))).withColumn(
            "detail", F.when(already, f"id already in {label}@{snapshot_id}").otherwise(F.col("detail"))
        )
    # Accepted records first, then by where they came from: the first occurrence is kept.
    order = Window.partitionBy("doc_id").orderBy(F.col("reason").isNotNull(), "origin", "ordinal")
    repeat = accepted & (F.row_number().over(order) > 1)
    first_path = F.first("path").over(order)
    return parsed.withColumn("_repeat", repeat).select(
        *[c for c in parsed.columns if c not in ("reason", "detail", "record", "_exists")],
        F.when(F.col("_repeat"), "duplicate-id").otherwise(F.col("reason")).alias("reason"),
        F.when(F.col("_repeat"), F.concat(F.lit("same id as "), first_path)).otherwise(F.col("detail")).alias("detail"),
        F.when(F.col("_repeat"), F.substring(F.encode(F.col("text"), "UTF-8"), 1, QUARANTINE_RECORD_BYTES))
        .otherwise(F.col("record"))
        .alias("record"),
    )


def _summarise_inputs(paths: Sequence[str], files: Sequence[InputFile]) -> Iterator[tuple[str, int, int]]:
    """Per input argument: its URI, how many files it gave and their bytes."""
    for given in paths:
        uri = given if "://" in given else Path(given).resolve().as_uri()
        mine = [f for f in files if f.uri == uri or f.uri.startswith(uri.rstrip("/") + "/")]
        yield uri, len(mine), sum(f.size for f in mine)


if __name__ == "__main__":  # `spark-submit pipelines/ingest.py ARGS` is `factory ingest ARGS` (docs/architecture.md)
    from factory_cli.main import run_command

    sys.exit(run_command("ingest", sys.argv[1:], prog="ingest.py"))
