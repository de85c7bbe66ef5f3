"""Row groups cut at the table's byte size: whatever the batches a writer is handed, the same
rows give the same file, every group of several rows stays within the size, and a row bigger
than it is a group of its own."""

from __future__ import annotations

import io
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakehouse.errors import InputError
from lakehouse.row_groups import ROW_GROUP_BYTES, ROW_GROUP_PROPERTY, RowGroupWriter, row_bytes, row_group_bytes

SCHEMA = pa.schema([("doc_id", pa.string()), ("text", pa.large_string()), ("n", pa.int64())])


def _rows(count: int, seed: int = 0) -> pa.Table:
    rng = random.Random(seed)
    sizes = [rng.choice([10, 300, 2_000, 9_000]) for _ in range(count)]
    sizes[count // 2] = 50_000  # one row past the group size below
    texts = ["".join(rng.choice("abcdef \n") for _ in range(n)) for n in sizes]
    return pa.table({"doc_id": [f"d{i}" for i in range(count)], "text": texts, "n": list(range(count))}, SCHEMA)


def _write(table: pa.Table, batch_rows: list[int], group_bytes: int) -> bytes:
    sink = io.BytesIO()
    writer = RowGroupWriter(sink, SCHEMA, group_bytes)
    start = 0
    for rows in batch_rows:
        writer.write_table(table.slice(start, rows))
        start += rows
    writer.write_table(table.slice(start))
    writer.close()
    return sink.getvalue()


def test_the_same_rows_give_the_same_file_whatever_the_batches():
    table = _rows(400)
    one = _write(table, [], 20_000)
    assert _write(table, [1] * 37 + [100, 3, 0, 150], 20_000) == one
    assert _write(table, [399], 20_000) == one
    assert pq.read_table(io.BytesIO(one)).equals(table)


def test_groups_of_several_rows_stay_within_the_size_and_a_bigger_row_is_alone():
    table = _rows(400)
    meta = pq.ParquetFile(io.BytesIO(_write(table, [64] * 6, 20_000))).metadata
    sizes = row_bytes(table)
    start, big = 0, []
    for g in range(meta.num_row_groups):
        rows = meta.row_group(g).num_rows
        held = sum(sizes[start : start + rows])
        if rows > 1:
            assert held <= 20_000
        else:
            big.append(held)
        # A group is closed only when the next row would not fit: groups are as full as they can be.
        if start + rows < table.num_rows:
            assert held + sizes[start + rows] > 20_000
        start += rows
    assert start == table.num_rows and meta.num_row_groups > 10
    assert any(size > 50_000 for size in big)  # the 50 KB row


def test_the_property_sets_the_size_and_a_bad_value_is_refused():
    assert row_group_bytes({}) == ROW_GROUP_BYTES == 1 << 20
    assert row_group_bytes({ROW_GROUP_PROPERTY: "4096"}) == 4096
    for bad in ("0", "-1", "1MB"):
        with pytest.raises(InputError, match=ROW_GROUP_PROPERTY):
            row_group_bytes({ROW_GROUP_PROPERTY: bad})
