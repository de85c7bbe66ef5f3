"""Pages of a pinned snapshot's documents, read by seeking: never a scan of the whole table.

The snapshot's data files and their record counts come from its Iceberg manifests (no data
read). Page ``p`` starts at row ``p × size``: the record counts say which file holds it, that
file's Parquet footer says which row group, and only those row groups are read. A ``doc_id`` is
found through Iceberg's file pruning (column bounds) and then the row groups' own statistics. A
substring search reads row groups in order from a cursor and stops after a page of matches or a
bounded amount of work, handing back the cursor to go on from (inside a row group, if the page
filled there).

A snapshot never changes, so its file list, its pages, lookups and searches are kept (ui/cache.py),
keyed on the table's uuid and the snapshot id; and Iceberg never rewrites a data file, so a row
group read for one page is kept too, by its file and index: the next page, a search or a lookup
in it reads nothing (a row group is the least Parquet reads, and can be large).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from cachetools.keys import hashkey
from pyiceberg.expressions import EqualTo
from pyiceberg.table import Table

from lakehouse.catalog import plan_snapshot
from lakehouse.parquet import open_parquet
from ui.cache import memo, pinned
from ui.sources import BadRequest

PAGE_SIZE = 25
PREVIEW_CHARS = 160
# A search reads at most this many row groups per request, then offers to go on.
SEARCH_ROW_GROUPS = 32
# Decoded row groups kept, by their size in memory.
ROW_GROUP_BYTES = 256 << 20


@dataclass
class DataFile:
    uri: str
    records: int


@dataclass
class DocumentPage:
    rows: list[dict]
    columns: list[str]
    files_read: int
    files_total: int
    total: int | None = None  # rows in the snapshot (paging)
    next_cursor: str | None = None  # where a search goes on from ("file.rowgroup")
    notes: list[str] = field(default_factory=list)


@memo(64, key=pinned)
def data_files(table: Table, snapshot_id: int, label: str) -> list[DataFile]:
    """The snapshot's data files in a fixed order, with record counts from the manifests."""
    tasks = plan_snapshot(table, snapshot_id, label)
    return sorted((DataFile(t.file.file_path, t.file.record_count) for t in tasks), key=lambda f: f.uri)


@memo(256, key=pinned)
def read_page(table: Table, snapshot_id: int, label: str, page: int, size: int = PAGE_SIZE) -> DocumentPage:
    files = data_files(table, snapshot_id, label)
    total = sum(f.records for f in files)
    start, end = page * size, min((page + 1) * size, total)
    pieces, opened, base = [], 0, 0
    for f in files:
        if base >= end:
            break
        if base + f.records > start:
            opened += 1
            pieces.append(_rows_between(f.uri, label, max(start - base, 0), min(end - base, f.records)))
        base += f.records
    rows = pa.concat_tables(pieces, promote_options="default") if pieces else None
    return DocumentPage(
        rows=_previews(rows) if rows is not None else [],
        columns=rows.column_names if rows is not None else [],
        files_read=opened,
        files_total=len(files),
        total=total,
    )


def _text_bytes(found: tuple[dict | None, int, int]) -> int:
    row = found[0] or {}
    return 1024 + sum(len(v) for v in row.values() if isinstance(v, (str, bytes)))


# Whole documents, texts and all: bounded by their size, not their number.
@memo(64 << 20, key=pinned, weigh=_text_bytes)
def find_document(table: Table, snapshot_id: int, label: str, doc_id: str) -> tuple[dict | None, int, int]:
    """The row with ``doc_id`` (full columns), and how many files were opened of how many."""
    total = len(data_files(table, snapshot_id, label))
    candidates = sorted(t.file.file_path for t in plan_snapshot(table, snapshot_id, label, EqualTo("doc_id", doc_id)))
    opened = 0
    for uri in candidates:
        opened += 1
        parquet = open_parquet(uri, label)
        column = parquet.schema_arrow.get_field_index("doc_id")
        for g in range(parquet.metadata.num_row_groups):
            stats = parquet.metadata.row_group(g).column(column).statistics
            if stats is not None and stats.has_min_max and not (stats.min <= doc_id <= stats.max):
                continue
            # The doc_id column alone first (a few bytes a row); the whole row group only on a hit.
            ids = parquet.read_row_group(g, columns=["doc_id"]).column("doc_id")
            where = pc.index(ids, doc_id).as_py()
            if where >= 0:
                return _row_group(parquet, uri, g).slice(where, 1).to_pylist()[0], opened, total
    return None, opened, total


@memo(128, key=pinned)
def search(table: Table, snapshot_id: int, label: str, needle: str, cursor: str | None, size: int = PAGE_SIZE):
    """Up to ``size`` documents whose text or doc_id holds ``needle``, from ``cursor`` on, reading at
    most ``SEARCH_ROW_GROUPS`` row groups; ``next_cursor`` says where the next page goes on from."""
    files = data_files(table, snapshot_id, label)
    file_index, group, skip = _parse_cursor(cursor)
    found: list[pa.Table] = []
    matched, read, opened = 0, 0, 0
    next_cursor = None
    for i in range(file_index, len(files)):
        uri = files[i].uri
        parquet = open_parquet(uri, label)
        opened += 1
        for g in range(group if i == file_index else 0, parquet.metadata.num_row_groups):
            if matched >= size or read >= SEARCH_ROW_GROUPS:
                next_cursor = f"{i}.{g}"
                break
            batch = _row_group(parquet, uri, g)
            read += 1
            masks = [pc.match_substring(batch[c], needle) for c in ("text", "doc_id") if c in batch.column_names]
            if not masks:
                raise BadRequest(f"{label} has neither a text nor a doc_id column to search")
            hits = batch.filter(masks[0] if len(masks) == 1 else pc.or_(*masks))
            first = skip if (i, g) == (file_index, group) else 0
            taken = hits.slice(first, size - matched)
            if taken.num_rows:
                found.append(taken)
                matched += taken.num_rows
            if first + taken.num_rows < hits.num_rows:  # the page is full inside this row group
                next_cursor = f"{i}.{g}.{first + taken.num_rows}"
                break
        if next_cursor:
            break
    rows = pa.concat_tables(found, promote_options="default") if found else None
    return DocumentPage(
        rows=_previews(rows) if rows is not None else [],
        columns=rows.column_names if rows is not None else [],
        files_read=opened,
        files_total=len(files),
        next_cursor=next_cursor,
    )


def _rows_between(uri: str, label: str, first: int, stop: int) -> pa.Table:
    """Rows ``[first, stop)`` of one file, reading only the row groups that hold them."""
    parquet = open_parquet(uri, label)
    groups, base, offset = [], 0, None
    for g in range(parquet.metadata.num_row_groups):
        n = parquet.metadata.row_group(g).num_rows
        if base + n > first and base < stop:
            groups.append(g)
            offset = base if offset is None else offset
        base += n
    if not groups:
        return parquet.schema_arrow.empty_table()
    return pa.concat_tables([_row_group(parquet, uri, g) for g in groups]).slice(first - offset, stop - first)


@memo(ROW_GROUP_BYTES, key=lambda _parquet, uri, group: hashkey(uri, group), weigh=lambda rows: rows.nbytes)
def _row_group(parquet: pq.ParquetFile, uri: str, group: int) -> pa.Table:
    """Row group ``group`` of the data file at ``uri`` (opened as ``parquet``), all columns."""
    return parquet.read_row_group(group)


def _parse_cursor(cursor: str | None) -> tuple[int, int, int]:
    """(file, row group, matches of that row group already shown) of ``FILE.ROWGROUP[.SHOWN]``."""
    if not cursor:
        return 0, 0, 0
    try:
        parts = [int(part) for part in cursor.split(".")]
    except ValueError:
        parts = []
    if len(parts) not in (2, 3) or min(parts) < 0:
        raise BadRequest(
            f"bad search cursor {cursor!r}: expected FILE.ROWGROUP or FILE.ROWGROUP.SHOWN, as the page's own link gives"
        )
    return parts[0], parts[1], parts[2] if len(parts) == 3 else 0


def _previews(rows: pa.Table) -> list[dict]:
    """The rows as shown in a list, long strings cut to a preview before they become Python
    strings (a search can match hundreds of whole source files)."""
    for i, name in enumerate(rows.column_names):
        column = rows.column(i)
        if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
            ellipsis, nothing = pa.scalar("…", column.type), pa.scalar("", column.type)
            cut = pc.binary_join_element_wise(pc.utf8_slice_codeunits(column, 0, PREVIEW_CHARS - 1), ellipsis, nothing)
            rows = rows.set_column(i, name, pc.if_else(pc.greater(pc.utf8_length(column), PREVIEW_CHARS), cut, column))
    return [_preview(r) for r in rows.to_pylist()]


def _preview(row: dict) -> dict:
    out = {}
    for key, value in row.items():
        if isinstance(value, bytes):
            value = value.decode("utf-8", errors="replace")
        if isinstance(value, str) and len(value) > PREVIEW_CHARS:
            value = value[: PREVIEW_CHARS - 1] + "…"
        out[key] = value
    return out
