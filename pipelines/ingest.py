"""Ingest: raw records into a document table, refusals into quarantine.

    spark-submit pipelines/ingest.py --source code --format files /src/repo --output raw.code
    factory ingest --source web --format jsonl dump/*.jsonl.zst --output raw.web --id-field url

Each input file is read by one Spark task in Python (so bad bytes are seen as they are, not
replaced by Spark's text reader); records become rows of a document table or of the
namespace's quarantine table, each with a reason; the files read become rows of the ledger of
ingested files (``pipelines/ingest_ledger.py``), which ``--only-new-files`` reads to skip the files
ingested before. The three are committed together by the commit protocol.
"""

from __future__ import annotations

import json
import logging
import math
import sys
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from lakehouse.catalog import ensure_table
from lakehouse.columns import DOCUMENT_COLUMNS, TARGET_COLUMN
from lakehouse.commit import CommitResult, ReadCheck, Run, StagedFile, existing_commits
from lakehouse.errors import ConcurrentCommitError, InputError
from lakehouse.file_sizes import target_file_bytes
from lakehouse.parquet import read_columns
from lakehouse.publish import head as main_head
from lakehouse.refs import format_identifier, ingested_files_identifier, parse_identifier, quarantine_identifier
from lakehouse.run_binding import RunOutput, check_run_commits, commit_run, run_snapshots
from lakehouse.schemas import (
    DOCUMENT_SCHEMA,
    INGESTED_FILES_SCHEMA,
    QUARANTINE_RECORD_BYTES,
    QUARANTINE_SCHEMA,
    file_schema,
    require_columns,
)
from pipelines.ingest_inputs import (
    UNREADABLE,
    InputFile,
    check_fields,
    discover,
    encode_group,
    plan_tasks,
    read_records,
)
from pipelines.ingest_ledger import (
    INGESTED_FILES,
    ListedMeanwhile,
    files_listed_meanwhile,
    ingested,
    split_new,
    stage_ledger,
)
from pipelines.ingest_records import PARSED_ARROW_SCHEMA, PARSED_SCHEMA, RecordConfig
from pipelines.spark_session import read_snapshot
from pipelines.staging import StagedOutput, Target, write_staged

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
    files_table: str | None = None  # default: <namespace of output>.ingested_files
    only_new_files: bool = False  # skip the files the ledger lists for the output already

    @property
    def output_id(self) -> tuple[str, ...]:
        return parse_identifier(self.output)

    @property
    def quarantine_id(self) -> tuple[str, ...]:
        return quarantine_identifier(self.output_id, self.quarantine)

    @property
    def files_table_id(self) -> tuple[str, ...]:
        return ingested_files_identifier(self.output_id, self.files_table)

    def params(self) -> dict[str, object]:
        return {
            "format": self.fmt,
            "output": self.output,
            "quarantine": format_identifier(self.quarantine_id),
            **self._ledger_params(),
            "include": list(self.include),
            "exclude": list(self.exclude),
            "source": self.records.source,
            "text_field": self.records.text_field,
            "id_field": self.records.id_field,
            "path_field": self.records.path_field,
            "lang_field": self.records.lang_field,
            "max_doc_bytes": self.records.max_doc_bytes,
        }

    def _ledger_params(self) -> dict[str, object]:
        """The ledger's parameters, each left out at its default: a run id committed before the
        ledger existed (`rl build`'s fixed ids, a repeated --run-id) is then still the same run,
        and running it again commits only its ledger rows instead of being refused."""
        params: dict[str, object] = {}
        if self.files_table_id != ingested_files_identifier(self.output_id, None):
            params["files_table"] = format_identifier(self.files_table_id)
        if self.only_new_files:
            params["only_new_files"] = True
        return params


@dataclass
class IngestResult:
    run_id: str
    documents: CommitResult | None
    quarantine: CommitResult | None
    stats: dict[str, int] = field(default_factory=dict)
    already_committed: bool = False
    files: CommitResult | None = None  # the ledger's commit: the files the run read


def ingest(spark: SparkSession, catalog: Catalog, opts: IngestOptions) -> IngestResult:
    """Run one ingest and commit its documents, its refusals and the ledger of the files it read."""
    out_id, q_id, files_id = _tables(opts)
    files = discover(opts.inputs, opts.fmt, opts.include, opts.exclude)
    run_id = opts.run_id or Run.new_id("ingest")
    done = run_snapshots(catalog, [out_id, q_id, files_id], run_id)
    ledger_head = _head(catalog, files_id)  # a file another run records after this is not listed twice
    existing_ids = _recorded_snapshot(catalog, out_id, done, EXISTING_IDS)
    listed = _recorded_snapshot(catalog, files_id, done, INGESTED_FILES) if opts.only_new_files else None
    run = Run(
        job="ingest",
        run_id=run_id,
        params=opts.params(),
        inputs=[{"uri": uri, "files": n, "bytes": b} for uri, n, b in _summarise_inputs(opts.inputs, files)],
        properties=_read_snapshots({EXISTING_IDS: existing_ids, INGESTED_FILES: listed}),
    )
    check_run_commits(run, done)
    if all(done.values()):
        log.info("run %s is already committed to %s; nothing to do", run.run_id, opts.output)
        (documents, quarantine, ledger), stats = existing_commits(done)
        return IngestResult(run.run_id, documents, quarantine, stats, already_committed=True, files=ledger)

    output = format_identifier(out_id)
    new, skipped = split_new(files, ingested(catalog, files_id, listed, output))
    check_fields(new, opts.fmt, opts.records)  # a mistyped field fails here, not as every row quarantined
    documents = ensure_table(catalog, out_id, DOCUMENT_SCHEMA)
    require_columns(documents.schema(), DOCUMENT_COLUMNS, opts.output)
    quarantine = ensure_table(catalog, q_id, QUARANTINE_SCHEMA)
    ledger = ensure_table(catalog, files_id, INGESTED_FILES_SCHEMA)
    if new:
        log.info(
            "ingest %s: %d input file(s) (%s), %.1f MB, %d skipped → %s (run %s)",
            opts.records.source, len(new), opts.fmt, sum(f.size for f in new) / 1e6, len(skipped), output, run.run_id,
        )  # fmt: skip
        kept, refused = _stage_records(spark, run, new, opts, (documents, quarantine), existing_ids)
    else:  # the run still commits (empty snapshots), so its run id is recorded as done
        log.info("nothing new: %d file(s) already ingested into %s (run %s)", len(skipped), output, run.run_id)
        kept, refused = StagedOutput([], Counter()), StagedOutput([], Counter())
    stats = _stats(new, kept, refused, skipped if opts.only_new_files else None)
    unreadable = _unreadable(quarantine, refused)
    read = [f for f in new if f.relpath not in unreadable]  # the rest stay new, to be read again
    ids_check = ReadCheck(existing_ids, _refuse_ids_committed_meanwhile(run, kept.files, existing_ids, output))
    outputs = [RunOutput(out_id, kept.files, read=ids_check), RunOutput(q_id, refused.files)]
    doc_commit, q_commit, files_commit = _commit(
        catalog, run, outputs, stats, (ledger, files_id), (read, output, ledger_head)
    )
    return IngestResult(run.run_id, doc_commit, q_commit, stats, files=files_commit)


def _commit(
    catalog: Catalog,
    run: Run,
    outputs: list[RunOutput],
    stats: Mapping[str, int],
    ledger: tuple[Table, tuple[str, ...]],
    read: tuple[Sequence[InputFile], str, int | None],
) -> list[CommitResult]:
    """Commit ``outputs`` (documents, refusals), then the ledger's rows for the files read into an
    output, given as ``(files, output, the ledger's head when the run started)``, to ``ledger``
    (the table and its identifier).

    A file that another run recorded for the output since that head (two runs read it at once) is
    left out of this run's rows and the ledger committed again: its documents are in the output
    once, whichever run's commit of them came first (the other's was refused), and it is listed
    once."""
    (table, identifier), (files, output, head) = ledger, read
    while True:  # ends: each time round leaves out at least one file
        check = ReadCheck(head, files_listed_meanwhile(files, output))
        ledger_output = RunOutput(identifier, stage_ledger(table, run, files, output), read=check)
        try:
            return commit_run(catalog, run, [*outputs, ledger_output], stats)
        except ListedMeanwhile as meanwhile:
            log.info(
                "ledger: %d file(s) were recorded by another run meanwhile; not listed twice", len(meanwhile.files)
            )
            files = [f for f in files if (f.relpath, f.size) not in meanwhile.files]
            head = meanwhile.head


def _refuse_ids_committed_meanwhile(
    run: Run, staged: Sequence[StagedFile], base: int | None, name: str
) -> Callable[[Table, list[str]], None]:
    """The documents' ``ReadCheck``: no document this run keeps may be in a data file committed
    since ``base``, the snapshot whose ids it refused as duplicate-id (else one id twice)."""

    def validate(table: Table, added: list[str]) -> None:
        if not staged or not added:
            return
        theirs = pc.unique(_doc_ids(table, added))
        same = sum(pc.sum(pc.is_in(_doc_ids(table, [f.path]), value_set=theirs)).as_py() or 0 for f in staged)
        if same:
            read = base or "none: it was empty"
            raise ConcurrentCommitError(
                f"{name}: another run committed {same} of the documents of run {run.run_id} (the same doc_ids) "
                f"since this run read the table's ids (snapshot {read}). Nothing of run {run.run_id} was "
                f"committed. Run the same command again (with --run-id {run.run_id}): it reads the ids "
                "afresh and quarantines those documents as duplicate-id (with --only-new-files it skips "
                "the files the other run recorded)."
            )

    return validate


def _doc_ids(table: Table, paths: Sequence[str]) -> pa.Array:
    """The ``doc_id`` column of the data files ``paths`` of ``table``."""
    columns = []
    for uri in paths:
        column = read_columns(uri, ["doc_id"], table.io.properties).column("doc_id")
        columns += column.cast(pa.string()).chunks  # a writer may have stored it as large_string
    return pa.chunked_array(columns, pa.string()).combine_chunks()


def _head(catalog: Catalog, identifier: tuple[str, ...]) -> int | None:
    """Main's head snapshot of the table; None when it has none or does not exist."""
    try:
        return main_head(catalog.load_table(identifier))
    except NoSuchTableError:
        return None


def _tables(opts: IngestOptions) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """The output, quarantine and ledger tables, refused unless they are three different tables."""
    out_id, q_id, files_id = opts.output_id, opts.quarantine_id, opts.files_table_id
    if out_id == q_id:
        raise InputError("--output and the quarantine table must be two different tables")
    if files_id in (out_id, q_id):
        raise InputError("the files table (--files-table) must be neither --output nor the quarantine table")
    return out_id, q_id, files_id


def _recorded_snapshot(
    catalog: Catalog, identifier: tuple[str, ...], done: Mapping[tuple[str, ...], Snapshot | None], key: str
) -> int | None:
    """The snapshot of ``identifier`` the run reads (``key`` in its summary): the one it recorded if
    it has committed somewhere already (its own rows may be in the table by now), else main's head."""
    recorded = [snapshot for snapshot in done.values() if snapshot is not None]
    if recorded:
        value = recorded[0].summary.get(key)
        return int(value) if value else None
    return _head(catalog, identifier)


def _read_snapshots(snapshots: Mapping[str, int | None]) -> dict[str, str]:
    """The run's properties naming the snapshots it read; none for a table that was empty."""
    return {key: str(snapshot_id) for key, snapshot_id in snapshots.items() if snapshot_id is not None}


def _stage_records(
    spark: SparkSession,
    run: Run,
    files: Sequence[InputFile],
    opts: IngestOptions,
    tables: tuple[Table, Table],
    existing_ids: int | None,
) -> tuple[StagedOutput, StagedOutput]:
    """Read ``files`` in Spark tasks and stage their documents and refusals in ``tables``."""
    documents, quarantine = tables
    total_bytes = sum(f.size for f in files)
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
    return outputs["documents"], outputs["quarantine"]


def _unreadable(quarantine: Table, refused: StagedOutput) -> set[str]:
    """The relpaths of the files that could not be read, from the staged refusals; read only when
    the counts show one."""
    if not refused.counts.get(UNREADABLE):
        return set()
    found: set[str] = set()
    for staged in refused.files:
        rows = read_columns(staged.path, ["reason", "path"], quarantine.io.properties, [("reason", "==", UNREADABLE)])
        found.update(rows.column("path").to_pylist())
    return found


def _stats(
    read: Sequence[InputFile], kept: StagedOutput, refused: StagedOutput, skipped: Sequence[InputFile] | None
) -> dict[str, int]:
    """The run's counts; ``files-skipped`` only for a run that skips (--only-new-files)."""
    return {
        "files": len(read),
        **({} if skipped is None else {"files-skipped": len(skipped)}),
        "bytes-in": sum(f.size for f in read),
        "documents-in": kept.records + refused.records,
        "kept": kept.records,
        "quarantined": refused.records,
        **{f"quarantined.{reason}": n for reason, n in sorted(refused.counts.items())},
    }


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
    """Refuse a second record with the same doc_id (already in the table's snapshot, or earlier in
    this input); the refusal names what it repeats."""
    if snapshot_id is not None:
        existing = (
            read_snapshot(spark, documents, snapshot_id, label).select("doc_id").withColumn("_exists", F.lit(True))
        )
        parsed = parsed.join(existing, "doc_id", "left")
        in_table = F.col("reason").isNull() & F.col("_exists").isNotNull()
        parsed = _refuse_duplicates(parsed.withColumn("_dup", in_table), F.lit(f"id already in {label}@{snapshot_id}"))
        parsed = parsed.drop("_exists")
    # Accepted records first, then by where they came from: the first occurrence is kept.
    order = Window.partitionBy("doc_id").orderBy(F.col("reason").isNotNull(), "origin", "ordinal")
    repeat = F.col("reason").isNull() & (F.row_number().over(order) > 1)
    parsed = parsed.withColumn("_dup", repeat).withColumn("_first", F.first("path").over(order))
    return _refuse_duplicates(parsed, F.concat(F.lit("same id as "), F.col("_first"))).drop("_first")


def _refuse_duplicates(parsed: DataFrame, detail: Column) -> DataFrame:
    """The rows flagged ``_dup`` become duplicate-id refusals with ``detail`` and their record, as
    any refusal keeps it. The flag is a column of its own, computed before ``reason`` changes: an
    expression over ``reason`` would see the new reason and flag nothing."""
    dup = F.col("_dup")
    # The document's text, not its raw record: keeping every record's raw bytes until this
    # window would carry up to 64 KiB more per document through its shuffle, for the few repeats.
    record = F.substring(F.encode(F.col("text"), "UTF-8"), 1, QUARANTINE_RECORD_BYTES)
    return parsed.select(
        *[c for c in parsed.columns if c not in ("reason", "detail", "record", "_dup")],
        F.when(dup, "duplicate-id").otherwise(F.col("reason")).alias("reason"),
        F.when(dup, detail).otherwise(F.col("detail")).alias("detail"),
        F.when(dup, record).otherwise(F.col("record")).alias("record"),
    )


def _summarise_inputs(paths: Sequence[str], files: Sequence[InputFile]) -> Iterator[tuple[str, int, int]]:
    """Per input argument: its URI, how many files it gave and their bytes."""
    for given in paths:
        uri = given if "://" in given else Path(given).resolve().as_uri()
        mine = [f for f in files if f.source == uri]  # the input each file was listed from
        yield uri, len(mine), sum(f.size for f in mine)


if __name__ == "__main__":  # `spark-submit pipelines/ingest.py ARGS` is `factory ingest ARGS` (docs/architecture.md)
    from factory_cli.main import run_command

    sys.exit(run_command("ingest", sys.argv[1:], prog="ingest.py"))
