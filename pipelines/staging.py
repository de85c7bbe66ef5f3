"""Step 1 and 2 of the commit protocol on Spark: tasks write Parquet, the driver learns which.

Spark's own Parquet writer is not used because its output is found by listing a directory,
which would pick up files of failed or speculative attempts. Here every task writes its own
uniquely named files through pyiceberg's FileIO (local disk or object storage alike) and
returns their paths as its result; Spark returns results only from the attempt that
succeeded, so the driver's list is exactly the files to commit.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.table import Table
from pyspark.sql import DataFrame

from lakehouse.columns import TARGET_COLUMN
from lakehouse.combine import make_durable
from lakehouse.commit import StagedFile
from lakehouse.file_sizes import TARGET_FILE_BYTES, target_file_bytes
from lakehouse.parquet import store_properties
from lakehouse.row_groups import ROW_GROUP_BYTES, RowGroupWriter, row_group_bytes

REPORT_SCHEMA = "target string, path string, records long, counts string, bytes long"


@dataclass(frozen=True)
class Target:
    """One table a Spark stage writes to: where, with which Arrow schema, what to count."""

    prefix: str
    schema: pa.Schema
    io_properties: Mapping[str, str] = field(repr=False)  # may hold the store's keys
    count_column: str | None = None  # report the number of rows per value of this column (written or not)
    file_bytes: int = TARGET_FILE_BYTES  # the table's target data file size (``lakehouse.file_sizes``)
    group_bytes: int = ROW_GROUP_BYTES  # the table's row group size (``lakehouse.row_groups``)

    @classmethod
    def for_table(cls, table: Table, prefix: str, schema: pa.Schema, count_column: str | None = None) -> Target:
        return cls(
            prefix,
            schema,
            store_properties(table.io.properties),
            count_column,
            target_file_bytes(table.properties),
            row_group_bytes(table.properties),
        )


@dataclass
class StagedOutput:
    """What the tasks reported for one target."""

    files: list[StagedFile]
    counts: Counter[str]
    sizes: dict[str, int] = field(default_factory=dict)  # bytes of each file, by path

    @property
    def records(self) -> int:
        return sum(f.records for f in self.files)


def write_staged(df: DataFrame, targets: Mapping[str, Target]) -> dict[str, StagedOutput]:
    """Write each row of ``df`` to the target named in its ``_target`` column.

    Returns, per target, the files the successful tasks wrote and the row counts per value of
    the target's ``count_column``. Each Spark partition becomes at most one file per target,
    with rows in the partition's order.
    """
    targets = dict(targets)

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        yield from write_partition(batches, targets)

    rows = df.mapInArrow(write, REPORT_SCHEMA).collect()
    return staged_outputs(rows, targets)


def staged_outputs(rows: Iterable, targets: Mapping[str, Target]) -> dict[str, StagedOutput]:
    """Per target, the files and counts in the report rows (``REPORT_SCHEMA``) tasks returned."""
    outputs = {name: StagedOutput([], Counter()) for name in targets}
    for row in sorted(rows, key=lambda r: r.path):
        out = outputs[row.target]
        out.files.append(StagedFile(row.path, row.records))
        out.counts.update(json.loads(row.counts))
        out.sizes[row.path] = row.bytes
    return outputs


def write_partition(
    batches: Iterator[pa.RecordBatch], targets: Mapping[str, Target], part: int | None = None
) -> Iterator[pa.RecordBatch]:
    """Write ``batches`` to one file per target, named by ``part`` (default: the task's partition),
    in ``part`` order; yield the report rows."""
    from pyiceberg.io.pyarrow import PyArrowFileIO
    from pyspark import TaskContext

    from lakehouse.faults import maybe_fail

    ctx = TaskContext.get()
    part = (ctx.partitionId() if ctx else 0) if part is None else part
    tag = f"{part:05d}-{ctx.attemptNumber() if ctx else 0}"
    open_files: dict[str, tuple[object, RowGroupWriter, str]] = {}
    records: Counter[str] = Counter()
    counts: dict[str, Counter[str]] = {name: Counter() for name in targets}
    try:
        for batch in batches:
            routed = batch.column(TARGET_COLUMN)
            for name, target in targets.items():
                rows = pa.Table.from_batches([batch]).filter(pc.equal(routed, name))
                if rows.num_rows == 0:
                    continue
                part = rows.select(target.schema.names).cast(target.schema)
                if name not in open_files:
                    path = f"{target.prefix}/part-{tag}-{uuid.uuid4().hex[:8]}.parquet"
                    stream = PyArrowFileIO(dict(target.io_properties)).new_output(path).create()
                    writer = RowGroupWriter(stream, target.schema, target.group_bytes)
                    open_files[name] = (stream, writer, path)
                open_files[name][1].write_table(part)
                records[name] += part.num_rows
                if target.count_column:
                    values = rows.column(target.count_column).to_pylist()
                    counts[name].update(str(v) for v in values)
        maybe_fail("task-after-write")
        sizes = {}
        for name, (stream, writer, path) in open_files.items():
            writer.close()
            sizes[name] = stream.tell()
            stream.close()
            make_durable(path)
    except BaseException:
        # A failed attempt's files are never committed: free their space now (a disk may be full).
        for name, (stream, writer, path) in open_files.items():
            _discard(stream, writer, path, targets[name].io_properties)
        raise
    for name, (_, _, path) in open_files.items():
        report = {
            "target": name,
            "path": path,
            "records": records[name],
            "counts": json.dumps(counts[name]),
            "bytes": sizes[name],
        }
        yield pa.RecordBatch.from_pylist([report])


def _discard(stream, writer: RowGroupWriter, path: str, io_properties: Mapping[str, str]) -> None:
    from pyiceberg.io.pyarrow import PyArrowFileIO

    with contextlib.suppress(Exception):  # best effort: `factory gc` removes whatever stays
        writer.close()
    with contextlib.suppress(Exception):
        stream.close()
    with contextlib.suppress(Exception):
        PyArrowFileIO(dict(io_properties)).delete(path)
