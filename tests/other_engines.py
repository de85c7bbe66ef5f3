"""Checks that another Iceberg engine, Daft, reads a table as pyiceberg does: Daft resolves
columns by the Parquet field ids alone (docs/architecture.md, "Tables")."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from lakehouse.parquet import split_uri


def _rows(table: pa.Table) -> list[dict]:
    return sorted(table.to_pylist(), key=repr)


def assert_daft_reads_as_pyiceberg(table) -> None:
    """Every data file of ``table`` carries the table's field ids, and Daft reads the rows pyiceberg does."""
    import daft

    expected = _rows(table.scan().to_arrow())
    assert expected, table.name()  # the corpus gives every table rows
    table_ids = {f.name: f.field_id for f in table.schema().fields}
    for task in table.scan().plan_files():
        fs, path = split_uri(task.file.file_path, table.io.properties)
        with fs.open_input_file(path) as f:
            written = pq.read_schema(f)
        assert {f.name: int(f.metadata[b"PARQUET:field_id"]) for f in written} == table_ids, task.file.file_path
    assert _rows(daft.read_iceberg(table).to_arrow()) == expected, table.name()
