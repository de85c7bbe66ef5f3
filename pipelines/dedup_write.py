"""Dedup's kept documents, written by Python tasks over the input's read units.

The decisions are small (an id and a cluster id for each document not kept alone), the texts
are not: each task reads its units of the pinned inputs with pyarrow (the units of the features
pass, ``dedup_units``), drops the removed documents, adds each kept one's ``cluster_id`` and
writes one file per unit through the staging path (``staging.write_partition``). The texts never
enter the JVM, and nothing is shuffled or sorted. The files follow the units, and the units the
snapshots, so the same inputs give the same files whatever the cores; small ones are then
combined to the table's target size (``coalesce``), in unit order, as the filter job does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import SparkSession

from lakehouse.columns import TARGET_COLUMN
from pipelines.coalesce import coalesce_outputs
from pipelines.dedup_units import SourceUnit
from pipelines.staging import REPORT_SCHEMA, StagedOutput, Target, staged_outputs

# The decisions a task needs: every document not kept alone (removed, or kept for a cluster of
# several), as the plans decided them. A document absent from them is kept, its own cluster.
DECISIONS_SCHEMA = pa.schema([("doc_id", pa.string()), ("cluster_id", pa.string()), ("kept", pa.bool_())])
_OUT = "documents"


def write_kept(
    spark: SparkSession, units: Sequence[SourceUnit], schema: pa.Schema, decisions: pa.Table, target: Target
) -> StagedOutput:
    """Stage the kept documents of the input ``units`` (read as ``schema``) with their
    ``cluster_id``, one file per unit, then combined to the target file size."""
    targets = {_OUT: target}
    if not units:
        return staged_outputs([], targets)[_OUT]
    decisions = decisions.cast(DECISIONS_SCHEMA)
    # Each task runs every n-th unit; files are named by unit, so the number of tasks changes nothing.
    tasks = max(1, min(len(units), spark.sparkContext.defaultParallelism))
    task = _write_task(list(units), tasks, schema, decisions, targets)
    reports = spark.range(0, tasks, 1, tasks).mapInArrow(task, REPORT_SCHEMA).collect()
    return coalesce_outputs(spark, staged_outputs(reports, targets), targets)[_OUT]


def kept_rows(batch: pa.RecordBatch, removed: pa.Array, clustered: tuple[pa.Array, pa.Array]) -> pa.RecordBatch:
    """``batch``'s documents not in ``removed``, with a ``cluster_id``: theirs in ``clustered``
    (doc ids, cluster ids), else their own ``doc_id``."""
    doc_ids = batch.column("doc_id").cast(pa.string())
    keep = pc.invert(pc.is_in(doc_ids, value_set=removed))
    batch, doc_ids = batch.filter(keep), doc_ids.filter(keep)
    ids, cluster_ids = clustered
    cluster_id = pc.coalesce(cluster_ids.take(pc.index_in(doc_ids, value_set=ids)), doc_ids)
    return batch.append_column("cluster_id", cluster_id)


def _write_task(
    units: list[SourceUnit], tasks: int, schema: pa.Schema, decisions: pa.Table, targets: dict
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """What Spark task t runs: units t, t + tasks, …: read each, keep its kept documents, write them."""
    removed = decisions.filter(pc.invert(decisions.column("kept"))).column("doc_id").combine_chunks()
    grouped = decisions.filter(
        pc.and_(decisions.column("kept"), pc.not_equal(decisions.column("cluster_id"), decisions.column("doc_id")))
    )
    clustered = (grouped.column("doc_id").combine_chunks(), grouped.column("cluster_id").combine_chunks())

    def task(ids: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pipelines.read_units import read_unit
        from pipelines.staging import write_partition

        for batch in ids:
            for first in batch.column(0).to_pylist():
                for unit_id in range(first, len(units), tasks):
                    unit = units[unit_id]
                    kept = (
                        _routed(kept_rows(docs, removed, clustered))
                        for docs in read_unit(unit.unit, schema, unit.io_properties)
                    )
                    yield from write_partition(kept, targets, part=unit_id)

    return task


def _routed(batch: pa.RecordBatch) -> pa.RecordBatch:
    return batch.append_column(TARGET_COLUMN, pa.repeat(pa.scalar(_OUT), len(batch)))
