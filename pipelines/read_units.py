"""A pinned snapshot cut into units of work: row ranges of its Parquet files, sized from the data.

For jobs whose tasks do all their work in Python on each document (the filter job), reading
the Parquet files in the task with pyarrow, rather than through Spark's reader, saves the JVM's
decoding, its Arrow conversion into the Python worker and a shuffle to spread the rows over the
cores (Spark splits a Parquet file only between row groups). Spark still schedules the units,
retries them and runs them on a cluster's executors.

The units depend on the snapshot alone: its files in path order, each cut into consecutive row
ranges of about ``unit_bytes`` (uncompressed), where ``unit_bytes`` is the snapshot's size over
``UNITS_PER_SNAPSHOT``, kept between ``MIN_UNIT_BYTES`` and ``MAX_UNIT_BYTES``. So the same
snapshot gives the same units, and a job writing one file per unit the same files, whatever the
cores; a small table still spreads over a few cores, and a big one is read in 128 MiB pieces.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from lakehouse.parquet import open_parquet

UNITS_PER_SNAPSHOT = 32
MIN_UNIT_BYTES = 1 << 20
MAX_UNIT_BYTES = 128 << 20
BATCH_ROWS = 1024


@dataclass(frozen=True)
class ReadUnit:
    """Rows ``start`` ≤ i < ``stop`` of one Parquet file (counted over the whole file)."""

    path: str
    start: int
    stop: int


@dataclass(frozen=True)
class SourceUnit:
    """A read unit of one of several sources, with the key prefix of its documents (dedup's).
    Here, not beside the jobs that plan them, so that a task unpickling one imports only this."""

    prefix: str
    unit: ReadUnit
    io_properties: dict[str, str] = field(repr=False)


def plan_units(paths: list[str], io_properties: Mapping[str, str], size_column: str | None = None) -> list[ReadUnit]:
    """The units of the given data files, from their Parquet footers and, with ``size_column``
    (a column of each row's size, such as a document table's ``n_bytes``), that column alone.

    A footer gives a row group's bytes, not its rows': spread evenly, a unit in a row group of
    documents of very different sizes (a folder's large changelogs next to each other) can hold
    ten times its share, and the task that runs it keeps one core busy long after the others.
    The size column, a few bytes a row, spreads each row group's bytes over its rows as the rows
    really are."""
    # One pass over the files, each open only while it is read: a snapshot may hold thousands.
    footers, weights = {}, {}
    for path in sorted(paths):
        parquet = _open(path, io_properties)
        footers[path] = parquet.metadata
        weights[path] = _row_weights(parquet, size_column) if size_column else None
    total = sum(_group_bytes(meta, i) for meta in footers.values() for i in range(meta.num_row_groups))
    unit_bytes = min(MAX_UNIT_BYTES, max(MIN_UNIT_BYTES, math.ceil(total / UNITS_PER_SNAPSHOT)))
    units = []
    for path, meta in footers.items():
        if weights[path] is None:
            units.extend(_file_units(path, meta, unit_bytes))
        else:
            units.extend(_weighted_units(path, weights[path], unit_bytes))
    return units


def _row_weights(parquet: pq.ParquetFile, size_column: str) -> np.ndarray | None:
    """Each row's share of its row group's bytes, in proportion to ``size_column``; None when the
    file lacks the column or it holds nulls or negative sizes."""
    if size_column not in parquet.schema_arrow.names:
        return None
    meta, parts = parquet.metadata, []
    for group in range(meta.num_row_groups):
        sizes = parquet.read_row_group(group, columns=[size_column]).column(0)
        if sizes.null_count:
            return None
        sizes = sizes.to_numpy().astype(np.float64)
        if (sizes < 0).any():
            return None
        total = sizes.sum()
        share = sizes / total if total > 0 else np.full(len(sizes), 1 / max(1, len(sizes)))
        parts.append(share * _group_bytes(meta, group))
    return np.concatenate(parts) if parts else np.zeros(0)


def _weighted_units(path: str, weights: np.ndarray, unit_bytes: int) -> list[ReadUnit]:
    """Consecutive row ranges of one file, each closed at the first row that brings it to ``unit_bytes``."""
    ends = np.cumsum(weights)
    units, start = [], 0
    while start < len(weights):
        before = ends[start - 1] if start else 0.0
        stop = min(len(weights), int(np.searchsorted(ends, before + unit_bytes, side="left")) + 1)
        units.append(ReadUnit(path, start, stop))
        start = stop
    return units


def read_unit(unit: ReadUnit, schema: pa.Schema, io_properties: Mapping[str, str]) -> Iterator[pa.RecordBatch]:
    """The unit's rows as batches of ``schema`` (columns a file lacks read as nulls)."""
    parquet = _open(unit.path, io_properties)
    columns = [name for name in schema.names if name in parquet.schema_arrow.names]
    first = 0  # index of the current row group's first row in the file
    for group in range(parquet.metadata.num_row_groups):
        rows = parquet.metadata.row_group(group).num_rows
        if first < unit.stop and unit.start < first + rows:
            lo, hi = max(unit.start - first, 0), min(unit.stop - first, rows)
            table = _decoded_group(parquet, unit.path, group, columns)
            for batch in table.slice(lo, hi - lo).to_batches(max_chunksize=BATCH_ROWS):
                yield _conform(batch, schema)
        first += rows


# Per Python worker: the row group decoded last. Parquet cannot seek to a row inside a row
# group, so the units that share one (a table written in big row groups) would each decode it
# whole; a worker running them one after another decodes it once.
_LAST_GROUP: dict[tuple, pa.Table] = {}


def _decoded_group(parquet: pq.ParquetFile, path: str, group: int, columns: list[str]) -> pa.Table:
    key = (path, group, tuple(columns))
    if key not in _LAST_GROUP:
        _LAST_GROUP.clear()
        _LAST_GROUP[key] = parquet.read_row_group(group, columns=columns)
    return _LAST_GROUP[key]


def _file_units(path: str, meta: pq.FileMetaData, unit_bytes: int) -> list[ReadUnit]:
    """Consecutive row ranges of one file, each about ``unit_bytes`` (a row group may be split)."""
    units, start, size, row = [], 0, 0, 0
    for group in range(meta.num_row_groups):
        rows, group_bytes = meta.row_group(group).num_rows, _group_bytes(meta, group)
        per_row = group_bytes / max(1, rows)
        while rows:
            take = min(rows, max(1, math.ceil((unit_bytes - size) / per_row)) if per_row else rows)
            row, rows, size = row + take, rows - take, size + take * per_row
            if size >= unit_bytes:
                units.append(ReadUnit(path, start, row))
                start, size = row, 0
    if row > start:
        units.append(ReadUnit(path, start, row))
    return units


def _group_bytes(meta: pq.FileMetaData, group: int) -> int:
    return meta.row_group(group).total_byte_size


def _open(path: str, io_properties: Mapping[str, str]) -> pq.ParquetFile:
    # One cached filesystem per store (lakehouse.parquet): a FileIO per unit imported pyiceberg's
    # pyarrow module (about half a second) in every Python worker, for local files too.
    return open_parquet(path, "read unit", io_properties)


def _conform(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """``batch`` with exactly ``schema``'s columns and types, missing ones as nulls."""
    arrays = [
        batch.column(field.name).cast(field.type)
        if field.name in batch.schema.names
        else pa.nulls(len(batch), field.type)
        for field in schema
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
