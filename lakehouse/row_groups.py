"""How the tables' Parquet files are cut into row groups (docs/architecture.md, "File sizes").

Every writer of a table's data files (the jobs' Spark tasks, coalescing, ``factory compact``,
record tables) writes through ``RowGroupWriter``, which closes a row group once its rows reach
``write.parquet.row-group-size-bytes`` (Iceberg's own table property), else ``ROW_GROUP_BYTES``.

We default to 1 MiB where Iceberg defaults to 128 MiB: a row group is the smallest thing a
Parquet reader decodes, and our readers want a few rows at a time. The loader starts a stream,
and the UI shows one document, by decoding one row group; a Spark task's Arrow batch of 10,000
documents made row groups of tens of MB, all decoded to read one row. 1 MiB is still far past
the size where a row group's footer entry and compression window cost anything measurable.

The cut depends only on the rows and their order, never on how the writer was handed them, so
the same rows give the same file whatever the batch sizes upstream.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lakehouse.file_sizes import bytes_property

ROW_GROUP_BYTES = 1 << 20
ROW_GROUP_PROPERTY = "write.parquet.row-group-size-bytes"
# pyarrow checks a page's size every `write_batch_size` values (1,024 by default): over documents
# of hundreds of KB a page would grow to hundreds of MB before it is cut. Every 64 values keeps a
# page near pyarrow's 1 MiB page size.
PAGE_CHECK_VALUES = 64
_VARIABLE = (pa.types.is_string, pa.types.is_large_string, pa.types.is_binary, pa.types.is_large_binary)


def row_group_bytes(properties: Mapping[str, str]) -> int:
    """The row group size a table with these properties is written with."""
    return bytes_property(properties, ROW_GROUP_PROPERTY, ROW_GROUP_BYTES)


def row_bytes(table: pa.Table) -> list[int]:
    """Each row's uncompressed size: the lengths of its variable-width values, plus each other
    column's average width (fixed-width values, nulls' bitmaps, nested values)."""
    if table.num_rows == 0:
        return []
    sizes = pa.array([0] * table.num_rows, pa.int64())
    rest = 0
    for column in table.columns:
        if any(is_kind(column.type) for is_kind in _VARIABLE):
            sizes = pc.add(sizes, pc.binary_length(column).cast(pa.int64()).fill_null(0))
        else:
            rest += column.nbytes
    return [size + rest // table.num_rows + 1 for size in sizes.to_pylist()]


class RowGroupWriter:
    """A ``pq.ParquetWriter`` whose row groups hold about ``group_bytes`` of rows each (a row
    bigger than that is a group of its own). Rows wait in memory until a group is full, so it
    holds at most one group plus the table being written."""

    def __init__(self, sink: Any, schema: pa.Schema, group_bytes: int, compression: str = "zstd") -> None:
        self._writer = pq.ParquetWriter(sink, schema, compression=compression, write_batch_size=PAGE_CHECK_VALUES)
        self._group_bytes = group_bytes
        self._pending: pa.Table | None = None
        self._pending_sizes: list[int] = []

    def write_table(self, table: pa.Table) -> None:
        if table.num_rows == 0:
            return
        if self._pending is not None:
            table = pa.concat_tables([self._pending, table])
            sizes = self._pending_sizes + row_bytes(table.slice(self._pending.num_rows))
        else:
            sizes = row_bytes(table)
        ends = list(itertools.accumulate(sizes))
        start, done = 0, 0
        while start < table.num_rows:
            # The rows whose running total stays within one group from `start`; at least one row.
            stop = max(bisect.bisect_right(ends, done + self._group_bytes), start + 1)
            if stop >= table.num_rows and ends[-1] - done < self._group_bytes:
                break  # not full yet: wait for more rows
            self._writer.write_table(table.slice(start, stop - start), row_group_size=stop - start)
            done = ends[stop - 1]
            start = stop
        self._pending = table.slice(start) if start < table.num_rows else None
        self._pending_sizes = sizes[start:]

    def close(self) -> None:
        if self._pending is not None:
            self._writer.write_table(self._pending, row_group_size=self._pending.num_rows)
            self._pending = None
        self._writer.close()
