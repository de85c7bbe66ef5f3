"""Reading one unit's documents from the pinned Parquet files, in the stream's order.

A unit reads the blocks its positions fall in, in file order (seeking by row group, decoding
batch by batch so a huge row group never sits in memory whole), takes its positions' rows in
the stream's shuffled order, and keeps those that pass the component's row filter and fall on
the wanted side of the held-out split.
"""

from __future__ import annotations

import collections
import functools
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakehouse.errors import DataFileError
from lakehouse.parquet import file_io_properties, open_parquet
from mixtures.heldout import heldout_mask
from streaming_loader.plan import ComponentPlan, Segment, StreamPlan, Unit

SEGMENT_THREADS = 8
# Rows decoded at a time. A unit stops decoding once it has its rows, so small batches decode
# only up to them: a row group of a few hundred 17 KB documents decoded whole for every unit cost
# 0.075 CPU-s a unit, a quarter of it at 256 rows (the loader benchmark's tables).
READ_BATCH_ROWS = 256


@dataclass(frozen=True)
class UnitDocs:
    """The documents of one unit that belong to the stream, in shuffled order."""

    positions: np.ndarray
    """Position of each document in the shard's slice (ascending)."""
    texts: list[str | pa.Buffer]
    """Their texts; one longer than the plan's ``max_document_bytes`` as a view of its UTF-8 bytes."""


def read_unit(plan: StreamPlan, unit: Unit) -> UnitDocs:
    component = plan.components[unit.component]
    segments, wanted = plan.rows(unit)
    if plan.block_cache_bytes and sum(s.stop - s.start for s in segments) > 2 * unit.count:
        # Part of a block whose rows lie scattered over it: reading from the first to the last of
        # them decodes most of the block for each of its units, so the block is decoded once and
        # kept for the next ones.
        segments, wanted = plan.rows(unit, whole_blocks=True)
        key = (tuple((component.paths[s.file], s.start, s.stop) for s in segments), *_columns_to_read(component))
        # Kept as one chunk: pyarrow's take over a table of many chunks (a row group's batches)
        # first concatenates them, a copy of the whole block for each unit that takes a few rows.
        cache = _block_cache(plan.block_cache_bytes)
        rows = cache.get(key, lambda: _read_rows(plan, component, unit, segments).combine_chunks())
    else:
        rows = _read_rows(plan, component, unit, segments)
    chosen = rows.take(_indices(wanted))  # the unit's rows, in stream order
    keep = _eligible(component, chosen, plan.split)
    kept = np.flatnonzero(keep)
    positions = unit.first + kept
    texts = _texts(chosen.column("text").take(_indices(kept)), plan.max_document_bytes)
    return UnitDocs(positions=positions.astype(np.int64), texts=texts)


def _texts(column: pa.ChunkedArray, limit: int | None) -> list[str | pa.Buffer]:
    """The texts as ``str``, but those over ``limit`` bytes as views of their UTF-8 bytes: the
    tokenizer decodes those a piece at a time, so a long document never sits in memory as a
    ``str`` (up to four bytes a character where it holds one character past Latin-1)."""
    if limit and len(column):
        lengths = pc.binary_length(column).to_numpy()
        if lengths.max() > limit:
            return [value.as_buffer() if n > limit else value.as_py() for value, n in zip(column, lengths, strict=True)]
    return column.to_pylist()


def _read_rows(plan: StreamPlan, component: ComponentPlan, unit: Unit, segments: list[Segment]) -> pa.Table:
    properties = _file_io_properties(plan.catalog)
    if len(segments) > 1:  # pieces of several files: opened at once (a request or two each on a store)
        tables = list(_segment_pool().map(lambda segment: _read_segment(component, segment, properties), segments))
    else:
        tables = [_read_segment(component, segment, properties) for segment in segments]
    rows = pa.concat_tables(tables)
    expected = sum(s.stop - s.start for s in segments)
    if rows.num_rows != expected:
        raise DataFileError(f"{component.label}: expected {expected} rows for {unit}, read {rows.num_rows}")
    return rows


class BlockCache:
    """Decoded blocks, least recently used first out past ``budget`` bytes (the last one always stays).
    A block asked for while another thread decodes it is waited for, not decoded twice."""

    def __init__(self, budget: int) -> None:
        self.budget, self._blocks, self._bytes = budget, collections.OrderedDict(), 0
        self._decoding: dict[tuple, Future] = {}
        self._lock = threading.Lock()

    def get(self, key: tuple, read: Callable[[], pa.Table]) -> pa.Table:
        with self._lock:
            if key in self._blocks:
                self._blocks.move_to_end(key)
                return self._blocks[key]
            pending = self._decoding.get(key)
            if pending is None:
                self._decoding[key] = mine = Future()
        if pending is not None:
            return pending.result()
        try:
            rows = read()
        except BaseException as exc:
            mine.set_exception(exc)
            raise
        finally:
            with self._lock:
                self._decoding.pop(key, None)
        with self._lock:
            self._blocks[key] = rows
            self._bytes += rows.nbytes
            while self._bytes > self.budget and len(self._blocks) > 1:
                self._bytes -= self._blocks.popitem(last=False)[1].nbytes
        mine.set_result(rows)
        return rows


@functools.lru_cache(maxsize=2)
def _block_cache(budget: int) -> BlockCache:
    """One per process (and budget): the loader's reader threads, or a Ray actor's, share it."""
    return BlockCache(budget)


@functools.cache
def _segment_pool() -> ThreadPoolExecutor:
    """Threads that read the files of one unit together: a unit of a snapshot of small files spans
    many files, each an open and a footer read before its rows (pyarrow releases the GIL for both),
    so the time to read it does not grow with the number of files as much as one after another."""
    return ThreadPoolExecutor(max_workers=SEGMENT_THREADS, thread_name_prefix="loader-files")


def _indices(rows: np.ndarray) -> pa.Array:
    """Row indices as an Arrow array, built from the buffer: ``pa.array`` imports pandas on first use
    (0.7-2 s, paid by the first batch of every reader process)."""
    values = np.ascontiguousarray(rows, dtype=np.int64)
    return pa.Array.from_buffers(pa.int64(), len(values), [None, pa.py_buffer(values)])


@functools.lru_cache(maxsize=4)
def _file_io_properties(catalog: str) -> Mapping[str, str]:
    """Read once per process: a reader opens many units."""
    return MappingProxyType(file_io_properties(catalog))


def _read_segment(component: ComponentPlan, segment: Segment, properties: Mapping[str, str]) -> pa.Table:
    path = component.paths[segment.file]
    groups = component.row_groups[segment.file]
    starts = np.concatenate([[0], np.cumsum(groups)])
    first = int(np.searchsorted(starts, segment.start, side="right") - 1)
    last = int(np.searchsorted(starts, segment.stop - 1, side="right") - 1)
    skip, want = segment.start - int(starts[first]), segment.stop - segment.start
    columns = _columns_to_read(component)
    parquet = open_parquet(path, component.label, properties)
    batches, seen = [], 0
    try:
        # Decoded on this reader's own thread, not Arrow's CPU pool: a few hundred rows of two
        # columns at a time, while the other readers tokenize; handed to the pool's threads, they
        # cost the readers 1-3 % more CPU per token (docs/benchmarks.md, seventh session).
        for batch in parquet.iter_batches(
            batch_size=READ_BATCH_ROWS, row_groups=list(range(first, last + 1)), columns=columns, use_threads=False
        ):
            if seen + batch.num_rows > skip:
                batches.append(batch.slice(max(0, skip - seen)))
            seen += batch.num_rows
            if seen >= skip + want:
                break
    except (OSError, ValueError) as exc:  # a truncated or corrupt file fails while decoding
        raise DataFileError(f"{component.label}: cannot read data file {path}: {exc}") from exc
    if seen < skip + want:
        raise DataFileError(f"{component.label}: data file {path} has fewer rows than the manifest says")
    return pa.Table.from_batches(batches).slice(0, want)


def _columns_to_read(component: ComponentPlan) -> list[str]:
    columns = ["doc_id", "text"]
    if component.filter:
        # Imported here: pyiceberg's expressions take ~0.6 s to import, which a reader of a
        # component without a filter (and the first batch) should not wait for.
        from pyiceberg.expressions.visitors import extract_field_ids

        schema = _schema(component)
        bound = _bound_filter(component)
        columns += sorted({schema.find_column_name(i) for i in extract_field_ids(bound)} - set(columns))
    return columns


def _eligible(component: ComponentPlan, rows: pa.Table, split: str) -> np.ndarray:
    """Rows that pass the row filter and fall on ``split``'s side of the held-out split."""
    keep = np.ones(rows.num_rows, dtype=bool)
    if component.filter:
        from pyiceberg.io.pyarrow import expression_to_pyarrow

        numbered = rows.append_column("__row", pa.array(np.arange(rows.num_rows)))
        passed = numbered.filter(expression_to_pyarrow(_bound_filter(component))).column("__row").to_numpy()
        keep[:] = False
        keep[passed] = True
    if component.heldout_fraction > 0:
        held = heldout_mask(rows.column("doc_id").to_pylist(), component.heldout_fraction, component.heldout_salt)
        keep &= held if split == "heldout" else ~held
    elif split == "heldout":
        keep[:] = False
    return keep


@functools.lru_cache(maxsize=64)
def _schema_cached(schema_json: str):
    from pyiceberg.schema import Schema

    return Schema.model_validate_json(schema_json)


def _schema(component: ComponentPlan):
    import json

    return _schema_cached(json.dumps(component.schema, sort_keys=True))


def _bound_filter(component: ComponentPlan):
    from pyiceberg.expressions.parser import parse
    from pyiceberg.expressions.visitors import bind

    return bind(_schema(component), parse(component.filter), case_sensitive=True)
