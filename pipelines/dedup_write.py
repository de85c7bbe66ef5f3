"""Dedup's kept documents, written by Python tasks over the input's read units.

The decisions are small (an id and a cluster id for each document not kept alone), the texts
are not: each task reads its units of the pinned inputs with pyarrow (the units of the features
pass, ``dedup_units``), drops the removed documents, adds each kept one's ``cluster_id`` and
writes one file per unit through the staging path (``staging.write_partition``). The texts never
enter the JVM, and nothing is shuffled or sorted. The files follow the units, and the units the
snapshots, so the same inputs give the same files whatever the cores; small ones are then
combined to the table's target size (``coalesce``), in unit order, as the filter job does.

The decisions reach the tasks in one of two ways, with the same files: the driver plan's (at
most a few per document of a million) travel with the task; the distributed plan's stay in
Spark and are shuffled by unit, a marker row per unit telling each task which units are its own.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lakehouse.columns import TARGET_COLUMN
from pipelines.read_units import SourceUnit
from pipelines.staging import REPORT_SCHEMA, StagedOutput, Target, staged_outputs

# The decisions a task needs: every document not kept alone (removed, or kept for a cluster of
# several), as the plans decided them. A document absent from them is kept, its own cluster.
DECISIONS_SCHEMA = pa.schema([("doc_id", pa.string()), ("cluster_id", pa.string()), ("kept", pa.bool_())])
_OUT = "documents"
# The removed documents' ids, and (ids, cluster ids) of the kept ones in clusters: ``_split``.
Split = tuple[pa.Array, tuple[pa.Array, pa.Array]]

log = logging.getLogger("factory.dedup")


def write_kept(
    spark: SparkSession,
    units: Sequence[SourceUnit],
    schema: pa.Schema,
    decisions: pa.Table | DataFrame,
    target: Target,
) -> StagedOutput:
    """Stage the kept documents of the input ``units`` (read as ``schema``) with their
    ``cluster_id``, one file per unit, then combined to the target file size. ``decisions``:
    the driver's table, or a DataFrame of them with the ``_unit`` each document was read from."""
    targets = {_OUT: target}
    if not units:
        return staged_outputs([], targets)[_OUT]
    units, start = list(units), time.monotonic()
    if isinstance(decisions, pa.Table):
        # Each task runs every n-th unit; files are named by unit, so the number of tasks changes nothing.
        tasks = max(1, min(len(units), spark.sparkContext.defaultParallelism))
        task = _strided_task(units, tasks, schema, _split(decisions.cast(DECISIONS_SCHEMA)), targets)
        reports = spark.range(0, tasks, 1, tasks).mapInArrow(task, REPORT_SCHEMA).collect()
    else:
        markers = spark.range(0, len(units), 1, 1).select(
            F.col("id").cast("int").alias("_unit"), *[F.lit(None).cast(t).alias(n) for n, t in _SPARK_TYPES]
        )
        routed = decisions.select("_unit", *DECISIONS_SCHEMA.names).unionByName(markers)
        task = _by_unit_task(units, schema, targets)
        reports = routed.repartition(len(units), "_unit").mapInArrow(task, REPORT_SCHEMA).collect()
    from pipelines.coalesce import coalesce_outputs  # the driver's alone: the tasks import this module

    staged = staged_outputs(reports, targets)
    written = time.monotonic()
    combined = coalesce_outputs(spark, staged, targets)[_OUT]
    log.info(
        "dedup write: %d unit file(s) of kept documents in %.1fs, combined into %d in %.1fs",
        len(staged[_OUT].files), written - start, len(combined.files), time.monotonic() - written,
    )  # fmt: skip
    return combined


_SPARK_TYPES = (("doc_id", "string"), ("cluster_id", "string"), ("kept", "boolean"))


def kept_rows(batch: pa.RecordBatch, removed: pa.Array, clustered: tuple[pa.Array, pa.Array]) -> pa.RecordBatch:
    """``batch``'s documents not in ``removed``, with a ``cluster_id``: theirs in ``clustered``
    (doc ids, cluster ids), else their own ``doc_id``."""
    doc_ids = batch.column("doc_id").cast(pa.string())
    keep = pc.invert(pc.is_in(doc_ids, value_set=removed))
    batch, doc_ids = batch.filter(keep), doc_ids.filter(keep)
    ids, cluster_ids = clustered
    cluster_id = pc.coalesce(cluster_ids.take(pc.index_in(doc_ids, value_set=ids)), doc_ids)
    return batch.append_column("cluster_id", cluster_id)


def _split(decisions: pa.Table) -> Split:
    """The removed documents' ids, and (ids, cluster ids) of the kept ones in clusters."""
    kept, doc_id, cluster_id = (decisions.column(n) for n in ("kept", "doc_id", "cluster_id"))
    removed = doc_id.filter(pc.invert(kept)).combine_chunks()
    grouped = pc.and_(kept, pc.not_equal(cluster_id, doc_id))
    return removed, (doc_id.filter(grouped).combine_chunks(), cluster_id.filter(grouped).combine_chunks())


def _write_unit(
    unit_id: int, unit: SourceUnit, schema: pa.Schema, split: Split, targets: dict
) -> Iterator[pa.RecordBatch]:
    """Read one unit, keep its kept documents (``split``: ``_split`` of its decisions), write them
    to the unit's file; the report rows."""
    from pipelines.read_units import read_unit
    from pipelines.staging import write_partition

    removed, clustered = split
    kept = (_routed(kept_rows(docs, removed, clustered)) for docs in read_unit(unit.unit, schema, unit.io_properties))
    yield from write_partition(kept, targets, part=unit_id)


def _strided_task(
    units: list[SourceUnit],
    tasks: int,
    schema: pa.Schema,
    split: Split,
    targets: dict,
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """What Spark task t runs: units t, t + tasks, …, each with all of the driver's decisions,
    split once on the driver (``split``), not again for each unit."""

    def task(ids: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in ids:
            for first in batch.column(0).to_pylist():
                for unit_id in range(first, len(units), tasks):
                    yield from _write_unit(unit_id, units[unit_id], schema, split, targets)

    return task


def _by_unit_task(
    units: list[SourceUnit], schema: pa.Schema, targets: dict
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """What a task of the decisions shuffled by unit runs: each unit whose marker it holds, with
    that unit's decisions (all of them are in the same partition as the marker)."""

    def task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        batches = list(batches)
        if not batches:
            return
        rows = pa.Table.from_batches(batches)
        for unit_id in sorted(set(rows.column("_unit").to_pylist())):
            mine = rows.filter(pc.and_(pc.equal(rows.column("_unit"), unit_id), pc.is_valid(rows.column("doc_id"))))
            yield from _write_unit(unit_id, units[unit_id], schema, _split(mine), targets)

    return task


def _routed(batch: pa.RecordBatch) -> pa.RecordBatch:
    return batch.append_column(TARGET_COLUMN, pa.repeat(pa.scalar(_OUT), len(batch)))
