"""Units of work over Parquet files: every row once, in order, sized from the data alone."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipelines import read_units
from pipelines.read_units import ReadUnit, plan_units, read_unit
from quality.filter_task import with_quarantine_columns

SCHEMA = pa.schema([("doc_id", pa.string()), ("text", pa.string()), ("lang", pa.string())])


def _write(path, n: int, row_group_size: int, text_bytes: int = 1000) -> list[str]:
    ids = [f"doc-{i:05d}" for i in range(n)]
    table = pa.table({"doc_id": ids, "text": [f"{i} " + "x" * text_bytes for i in range(n)]})  # no lang column
    pq.write_table(table, path, row_group_size=row_group_size)
    return ids


def _ids(units: list[ReadUnit]) -> list[str]:
    return [i for unit in units for batch in read_unit(unit, SCHEMA, {}) for i in batch.column("doc_id").to_pylist()]


def test_units_cover_every_row_once_in_order_and_split_big_row_groups(tmp_path, monkeypatch):
    monkeypatch.setattr(read_units, "MIN_UNIT_BYTES", 50_000)
    one_group = _write(tmp_path / "a.parquet", 600, row_group_size=600)  # ~600 KB in one row group
    small_groups = _write(tmp_path / "b.parquet", 300, row_group_size=7)
    units = plan_units([str(tmp_path / "b.parquet"), str(tmp_path / "a.parquet")], {})
    assert _ids(units) == one_group + small_groups  # files in path order, rows in file order
    assert len([u for u in units if u.path.endswith("a.parquet")]) > 5  # the one row group is cut up
    assert max(u.stop - u.start for u in units) < 300
    assert units == plan_units([str(tmp_path / "a.parquet"), str(tmp_path / "b.parquet")], {})  # data alone


def test_a_read_unit_has_the_schema_with_missing_columns_as_nulls(tmp_path):
    ids = _write(tmp_path / "a.parquet", 50, row_group_size=8)
    batches = list(read_unit(ReadUnit(str(tmp_path / "a.parquet"), 5, 21), SCHEMA, {}))
    assert all(batch.schema == SCHEMA for batch in batches)
    rows = pa.Table.from_batches(batches)
    assert rows.column("doc_id").to_pylist() == ids[5:21]
    assert rows.column("lang").null_count == 16


def test_drop_count_keys_join_the_filter_and_reason_present():
    marked = pa.RecordBatch.from_pydict(
        {"filter": [None, None, "code", "code"], "reason": [None, "x", None, "too-long"]},
        schema=pa.schema([("filter", pa.string()), ("reason", pa.string())]),
    )
    routed = with_quarantine_columns(marked, "filter", "run-1")
    assert routed.column("_count_key").to_pylist() == ["", "x", "code", "code\ttoo-long"]
    assert routed.column("stage").to_pylist() == ["filter"] * 4
    assert routed.column("run_id").to_pylist() == ["run-1"] * 4


def test_a_size_column_balances_units_where_large_rows_cluster(tmp_path, monkeypatch):
    monkeypatch.setattr(read_units, "MIN_UNIT_BYTES", 5_000)
    # One row group: 180 small documents, then 20 that hold 40 times as much text each.
    sizes = [500] * 180 + [20_000] * 20
    random = np.random.default_rng(0)
    texts = [random.bytes(n // 2).hex() for n in sizes]  # incompressible: the footer's bytes follow the text
    table = pa.table({"doc_id": [f"d{i:03d}" for i in range(200)], "text": texts, "n_bytes": sizes})
    path = str(tmp_path / "a.parquet")
    pq.write_table(table, path, row_group_size=200)

    def unit_text(units):
        return [sum(sizes[u.start : u.stop]) for u in units]

    even = unit_text(plan_units([path], {}))
    weighted = plan_units([path], {}, size_column="n_bytes")
    assert [r for u in weighted for r in range(u.start, u.stop)] == list(range(200))  # every row once, in order
    assert max(even) > 4 * sum(sizes) / len(even)  # spread evenly, the last units hold the large rows
    assert max(unit_text(weighted)) < 2 * sum(sizes) / len(weighted)
    assert plan_units([path], {}, size_column="missing") == plan_units([path], {})


def test_planning_keeps_no_file_open_beyond_the_one_it_reads(tmp_path):
    import resource

    paths = []
    for i in range(120):
        path = str(tmp_path / f"f{i:03d}.parquet")
        pq.write_table(pa.table({"doc_id": [f"d{i}"], "text": ["x"], "n_bytes": [1]}), path)
        paths.append(path)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    in_use = len(os.listdir("/proc/self/fd"))
    resource.setrlimit(resource.RLIMIT_NOFILE, (in_use + 60, hard))  # fewer than the files
    try:
        units = plan_units(paths, {}, size_column="n_bytes")
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert [(u.start, u.stop) for u in units] == [(0, 1)] * 120
